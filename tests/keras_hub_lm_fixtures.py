"""Make the keras-hub language-model fixtures under tests/data/keras_hub_lm with keras 3 (torch backend) and
keras-hub (run once; the files are committed, keras-hub is no test dependency). Made with keras 3.15.1,
keras-hub 0.32.0, torch 2.x on CPU, sentencepiece and tokenizers (HF) for the tiny tokenizers:

    pip install keras-hub tensorflow-cpu tensorflow-text sentencepiece tokenizers
    PYTHONHASHSEED=0 KERAS_BACKEND=torch python tests/keras_hub_lm_fixtures.py tests/data/keras_hub_lm [FAMILY ...]

(no FAMILY: all of them; nothing is downloaded, every model is built from its constructor and every
tokenizer is trained here on English made up by ``corpus``). Each family's seeds derive from its name, so a
family made alone gives the same weights as in a full run (PYTHONHASHSEED only fixes the order in which
Llama3Tokenizer lists its special tokens, a set, in tokenizer.json).

Every family ``F`` of the causal LMs writes ``F/``:

* ``backbone.keras`` (``Backbone.save``) and ``backbone_preset/`` (``save_to_preset``): a tiny ``<X>Backbone``
  (float32), every weight moved off its initial value: ``w = rng.standard_normal(shape) * SCALE + w * 0.5``
  (SCALE per family, in FAMILIES), except the normalisation weights (any variable whose path holds ``norm``:
  RMSNorm/LayerNorm scale, gamma, beta), moved by ``w + rng.standard_normal(shape) * 0.1`` so scales stay
  near 1 (Gemma's ``scale`` is used as ``1 + scale``, so it stays near 0). ``gemma2`` and ``gemma3`` move
  their (tied) token embedding with EMBEDDING_SCALE 0.1 instead: with the post-attention/post-FFW norms
  the blocks' outputs are small next to ``embedding * sqrt(hidden)``, and greedy decoding then repeats its
  input token forever.
* ``causal_lm.keras``: ``<X>CausalLM(backbone=<another moved backbone>, preprocessor=None).save(...)``.
* ``causal_lm_preset/``: the same causal LM weights with a real ``<X>CausalLMPreprocessor(tokenizer,
  sequence_length=16)``, ``save_to_preset``: config.json, model.weights.h5, task.json, preprocessor.json,
  tokenizer.json and ``assets/tokenizer/`` (``vocabulary.spm`` for SentencePiece families,
  ``vocabulary.json`` + ``merges.txt`` for byte-level BPE families).
* ``expected.npz`` (float32 / int32; strings as a numpy unicode array):

  - ``right/token_ids``, ``right/padding_mask`` [4, 12]: right-padded rows of 12, 7, 1 and 10 real tokens
    (ids in [1, vocab), padded ids 0); ``left/token_ids``, ``left/padding_mask``: the same rows
    left-padded;
  - ``right/backbone``, ``left/backbone`` [4, 12, 32]: ``backbone.keras``'s output (``__call__``,
    training=False) on each; ``right/logits``, ``left/logits`` [4, 12, V]: ``causal_lm.keras``'s logits;
  - ``greedy/prompt`` [2, 5] (no padding) and ``greedy/tokens`` [2, 32]: greedy continuation by the plain
    forward oracle (the causal LM called on the whole sequence so far each step, argmax of the last
    position; no top-2 logits within 1e-3 at any step), and ``generate/tokens`` [2, 32]: keras-hub's own
    ``causal_lm.generate({"token_ids", "padding_mask"}, max_length=37, stop_token_ids=None)`` after
    ``compile(sampler="greedy")`` (the prompt right-padded with zeros to 37, mask 1 on the prompt; its
    cached decoding); the script checks the two agree, except for ``gpt_neox``, where they cannot:
    keras-hub 0.32's GPTNeoXAttention rotates the one new query of a cached step as position 0 (the
    rotary layer gets no start index) while the cached keys are rotated at 0..L-1, so its ``generate``
    is not the plain forward's greedy decoding (``generate/tokens`` there is what it gives, e.g. the first
    difference at new token 2-3). ``gemma3``'s generate is given ``images`` of shape [2, 0, 16, 16, 3]:
    without it keras-hub 0.32's Gemma3CausalLM.generate (preprocessor None, text-only backbone) fails
    concatenating the ``"images": None`` its generate_step returns;
  - ``tokenizer/texts`` [200] (short English strings: punctuation, digits, upper case, accents like
    "café", a few characters the tiny tokenizers never saw, odd whitespace), ``tokenizer/token_ids`` and
    ``tokenizer/padding_mask`` [200, 16]: ``causal_lm_preset``'s preprocessor's ``generate_preprocess(texts)``
    (keras-hub's default eager path: the Python ``sentencepiece`` / HF ``tokenizers`` workflow). Where
    keras-hub's TensorFlow workflow (the same call inside ``tf.data``) gives other ids, they are kept as
    ``tokenizer_tf/token_ids`` and ``tokenizer_tf/padding_mask``. That happens for the byte-level BPE
    families on runs of spaces: the TF path pre-splits with GPT-2's regex (``"a  b"`` -> ``a``, ``Ġ``,
    ``Ġb``), while the Python path hands ``pre_tokenizers.Split`` the Llama 3 regex as a plain ``str``,
    which HF ``tokenizers`` takes as a literal, so it never splits and the merges run over the whole text
    (``ĠĠ`` merges). SentencePiece and WordPiece give the same ids both ways.

``bloom_hf`` is ``bloom`` with ``intermediate_dim`` 4 x ``hidden_dim`` (128), the only MLP width transformers'
BLOOM has, so that its Hugging Face folder is tested against Keras (``bloom``'s is refused).

Extra keys: ``gemma2``: ``nocap/logits`` (the causal LM's weights in a model without the two soft caps,
right batch) and ``nowindow/logits`` (without the sliding window); ``gemma3``: ``nowindow/logits``;
``mistral``: ``nowindow/logits`` (sliding_window=None); ``llama31``: ``noadjust/logits`` (no Llama 3.1
frequency adjustment); ``phi3_su``: ``short/token_ids``, ``short/padding_mask``, ``short/logits`` (the first
4 columns of the right batch: at length <= pretraining_sequence_length the short factors apply, above it
the long ones) and ``default_rope/logits`` (rope_scaling_type None); ``mixtral``, ``qwen_moe``:
``router/top_k`` [layers, 4*12, top_k] the experts chosen for the right batch's tokens, layer by layer.

What Keras gives at a query whose keys are all masked (the padding of the left-padded rows; these
positions are in ``left/backbone`` and ``left/logits``), torch backend, CPU, as read in keras 3.15 /
keras-hub 0.32 and checked here by changing a later real token of a left-padded row:

* zeros (the attention output of that row is 0; the output projection's bias where it has one): keras's
  ``Softmax`` layer puts -1e9 at masked scores and then ``where(mask, softmax, 0)``, so an all-masked row
  weighs nothing. Used by ``gemma``, ``gemma2``, ``gemma3`` (their attention also wipes such rows to zero
  explicitly, fused or not), ``bloom``, ``falcon``, ``mixtral`` and ``qwen_moe`` (their
  ``_use_fused_attention_op`` is False off GPU/TPU; on a CUDA machine they take the fused path below),
  and ``opt``, ``gpt2``, ``bert`` (keras ``MultiHeadAttention`` skips ``dot_product_attention`` while
  dropout > 0, which is 0.1 there by default).
* the mean of the values over all key positions, padding and future tokens included: ``llama``,
  ``llama3``, ``llama31``, ``mistral``, ``qwen``, ``qwen3``, ``phi3``, ``phi3_su`` and ``gpt_neox`` call
  ``ops.dot_product_attention`` whenever the backend is torch; keras's torch backend turns the boolean
  mask into an additive ``-0.7 * 3.38953e38`` (finite), which swamps the scores, so the softmax of such a
  row is uniform.

``gemma`` and ``llama3`` also hold:

* ``causal_lm_bf16.keras``: the causal LM built with ``dtype="bfloat16"`` holding ``causal_lm.keras``'s
  weights cast to bfloat16, and ``bf16/logits`` (Keras's bfloat16 logits on the right batch, as float32).
* ``causal_lm_lora.keras`` and ``lora_preset/``: ``causal_lm.keras``'s weights in a causal LM whose backbone
  had ``backbone.enable_lora(rank=2)`` (adapters on every EinsumDense named ``query``/``value``/
  ``query_dense``/``value_dense``: here each attention's query and value projections), ``lora_kernel_a``
  moved (``rng*0.3 + a*0.5``) and ``lora_kernel_b`` moved off zero (``rng*0.3``); ``lora/logits`` is that
  model's logits on the right batch. Keras computes the adapted kernel as (keras/src/layers/core/
  einsum_dense.py, ``EinsumDense.kernel``)::

      kernel + (lora_alpha / lora_rank) * ops.matmul(lora_kernel_a, lora_kernel_b)

  with ``lora_kernel_a`` of shape ``kernel.shape[:-1] + (rank,)``, ``lora_kernel_b`` of shape
  ``(rank, kernel.shape[-1])`` and ``lora_alpha`` defaulting to the rank (``Backbone.enable_lora`` passes
  none), so the factor is 1. Keras 3.15 cannot save the adapters unmerged with ``Model.save``:
  ``EinsumDense.save_own_variables`` writes that merged kernel in the kernel's slot and no
  ``lora_kernel_a``/``_b`` (a LoRA layer rebuilt from its own config would re-create the adapters and
  ``load_own_variables`` zeroes them; a keras-hub backbone's config is its constructor arguments, so here
  nothing of LoRA is in the config at all). So ``causal_lm_lora.keras`` is a plain causal LM whose query
  and value kernels are the merged ones, and it reloads to ``lora/logits``. Unmerged, in keras-hub's
  own format: ``lora_preset/`` is ``save_to_preset`` of the causal LM before ``enable_lora`` (the base
  weights: ``causal_lm.keras``'s) plus ``lora_preset/adapters.lora.h5`` from
  ``backbone.save_lora_weights`` (``lora/rank`` and ``lora/<i>/lora_kernel_a``, ``lora/<i>/lora_kernel_b``,
  ``i`` the index of the layer among the backbone's ``_flatten_layers(include_self=False)`` that have
  weights); ``CausalLM.from_preset("lora_preset")`` gives ``right/logits`` and, after
  ``.backbone.load_lora_weights("lora_preset/adapters.lora.h5")``, ``lora/logits`` again.

The families already converted get tokenizer-bearing task presets only: ``gpt2/causal_lm_preset/``,
``llama/causal_lm_preset/`` (causal LM + preprocessor as above) and ``bert/classifier_preset/``
(``BertTextClassifier(num_classes=3)`` + ``BertTextClassifierPreprocessor`` over a tiny lower-casing
WordPiece vocabulary), each with an ``expected.npz`` of the ``right/*``, ``left/*`` batches, the task's
``right/logits``, ``left/logits`` (BERT: segment_ids zeros, ``right/segment_ids``) and the ``tokenizer/*``
keys (BERT: ``preprocessor(texts)``'s token_ids, padding_mask, segment_ids at sequence_length 16).

After writing a family the script reloads ``causal_lm.keras`` (``keras.saving.load_model``),
``causal_lm_preset`` (``keras_hub.models.CausalLM.from_preset``), ``backbone.keras``,
``backbone_preset`` and the bf16 / LoRA files, and checks their outputs equal the saved ones.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

M = keras_hub.models
LENGTHS = [12, 7, 1, 10]
BATCH, LENGTH, PROMPT, NEW = 4, 12, 5, 32
SEQUENCE_LENGTH = 16
NORM_MOVE = 0.1
TINY = {"num_layers": 2, "hidden_dim": 32, "intermediate_dim": 64}
GQA = {"num_query_heads": 4, "num_key_value_heads": 2}
SPM_VOCAB, BPE_VOCAB = 256, 320  # byte-level BPE needs its 256 byte symbols, so 320 there

# === text =================================================================================================

WORDS = (  # noqa: SIM905
    "the a an of to and in is it that for on with as was at by be this from or have not are but had they his "
    "her she he we you all one there what so up out if about who get which go me when make can like time no "
    "just him know take people into year your good some could them see other than then now look only come its "
    "over think also back after use two how our work first well way even new want because any these give day "
    "most us quick brown fox jumps lazy dog river mountain coffee morning train station window garden little "
    "small large green blue red yellow bright dark cold warm happy slow fast open close book letter music "
    "song city village market bread water tea cake apple orange kitchen table chair paper pencil"
).split()
NAMES = (  # noqa: SIM905
    "Alice Bob Carol David Emma Frank Grace Henry Paris London Tokyo Berlin Monday Friday July"
).split()
SHOUTS = "NASA OK USA BBC HTML CPU AI".split()  # noqa: SIM905
ACCENTED = "café naïve über résumé façade jalapeño São Zürich crème brûlée piñata déjà vu".split()  # noqa: SIM905
UNSEEN = ["日本", "Ωmega", "ß", "€5", "→", "😀", "Ñandú", "ça"]
EDGES = [
    " leading space",
    "two  spaces",
    "trailing space ",
    "tab\there",
    "new\nline",
    "MiXeD CaSe",
    "a",
    "1234567890",
    "x-ray, e-mail & co.",
    "3.14159 is pi",
    "C'est la vie!",
    "it's, isn't, we'll",
    "    indented by four",
    "a   b    c",
    "x  \n  y",
]


def sentence(rng: np.random.Generator, unseen: bool = False) -> str:
    def words(n):
        return " ".join(rng.choice(WORDS, n))

    pick = int(rng.integers(0, 12))
    if pick == 0:
        text = f"{rng.choice(NAMES)} {words(int(rng.integers(2, 6)))}."
    elif pick == 1:
        text = f"Is the {words(2)} {rng.choice(WORDS)}?"
    elif pick == 2:
        text = f"{rng.choice(NAMES)} has {int(rng.integers(0, 1000))} {rng.choice(WORDS)}s!"
    elif pick == 3:
        text = (
            f"Call {rng.integers(100, 999)}-{rng.integers(1000, 9999)} "
            f"at {rng.integers(1, 12)}:{rng.integers(10, 59)} pm."
        )
    elif pick == 4:
        text = f"The {rng.choice(ACCENTED)} in {rng.choice(NAMES)} was {words(2)}."
    elif pick == 5:
        text = f'"{words(3).capitalize()}," said {rng.choice(NAMES)}; it\'s {rng.choice(WORDS)}.'
    elif pick == 6:
        text = f"{rng.choice(SHOUTS)} and {rng.choice(SHOUTS)}: {words(3)} (see p. {rng.integers(1, 300)})"
    elif pick == 7:
        text = f"${rng.integers(1, 99)}.{rng.integers(10, 99)} for {words(2)}, {rng.integers(5, 95)}% off"
    elif pick == 8:
        text = f"{words(int(rng.integers(4, 9))).capitalize()}."
    elif pick == 9:
        text = f"I'd {words(2)} the {rng.choice(ACCENTED)} {rng.choice(ACCENTED)} - {words(2)}!"
    elif pick == 10:
        text = f"#{rng.choice(WORDS)} @{rng.choice(NAMES).lower()} {words(3)} ..."
    else:
        text = f"{words(2).upper()} {rng.integers(1900, 2030)}, {words(3)}"
    if unseen and rng.random() < 0.15:
        text = f"{text} {rng.choice(UNSEEN)}"
    return text


def corpus(n: int = 600) -> list[str]:
    """The tokenizers' training text: made-up English, the same every run."""
    rng = np.random.default_rng(1234)
    numbers = [
        f"In {rng.integers(1900, 2030)}, {rng.integers(10, 999)} of {rng.integers(1000, 9999)} paid "
        f"${rng.integers(100, 999)}.{rng.integers(10, 99)}"
        for _ in range(n // 4)
    ]
    spaced = [" " * int(rng.integers(2, 9)) + "  ".join(rng.choice(WORDS, 3)) for _ in range(n // 6)]
    return (
        [sentence(rng) for _ in range(n)]
        + numbers
        + spaced
        + [" ".join(WORDS), " ".join(NAMES + SHOUTS + ACCENTED)]
        + EDGES
    )


def test_texts() -> list[str]:
    rng = np.random.default_rng(5678)
    texts = list(EDGES) + ["café", "Crème brûlée, s'il vous plaît.", "日本 and Ωmega cost €5 → 😀"]
    while len(texts) < 200:
        texts.append(sentence(rng, unseen=True))
    return texts[:200]


# === tokenizers ===========================================================================================


def sentencepiece_proto(vocab_size: int, ids: dict, user_symbols: list[str], *, dummy_prefix: bool) -> bytes:
    """A tiny BPE SentencePiece model trained on ``corpus()``; ``ids``: pad/unk/bos/eos ids and pieces."""
    import sentencepiece

    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=out,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        user_defined_symbols=user_symbols,
        split_digits=True,
        byte_fallback=False,
        add_dummy_prefix=dummy_prefix,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        num_threads=1,
        shuffle_input_sentence=False,
        minloglevel=2,
        **ids,
    )
    return out.getvalue()


GEMMA_IDS = {
    "pad_id": 0,
    "eos_id": 1,
    "bos_id": 2,
    "unk_id": 3,
    "pad_piece": "<pad>",
    "eos_piece": "<eos>",
    "bos_piece": "<bos>",
    "unk_piece": "<unk>",
}
LLAMA_IDS = {
    "unk_id": 0,
    "bos_id": 1,
    "eos_id": 2,
    "pad_id": -1,
    "unk_piece": "<unk>",
    "bos_piece": "<s>",
    "eos_piece": "</s>",
}


def byte_level_bpe(vocab_size: int, first: list[str], last: list[str]) -> tuple[dict, list[str]]:
    """A tiny byte-level BPE (GPT-2 style vocabulary.json + merges.txt) trained on ``corpus()``: ``first``
    special tokens take ids 0.., then the 256 byte symbols and merges, then the ``last`` special tokens;
    ``vocab_size`` ids in all."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(last),
        special_tokens=first,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    model = json.loads(tokenizer.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda item: item[1]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    for token in last:
        vocab[token] = len(vocab)
    assert len(vocab) == vocab_size and sorted(vocab.values()) == list(range(vocab_size)), len(vocab)
    return vocab, merges


def make_tokenizer(family: dict):
    kind, *spec = family["tokenizer"]
    cls = getattr(M, family["prefix"] + "Tokenizer")
    if kind == "spm":
        ids, symbols, dummy = spec
        return cls(proto=sentencepiece_proto(family["vocab"], ids, symbols, dummy_prefix=dummy))
    first, last = spec
    vocab, merges = byte_level_bpe(family["vocab"], first, last)
    return cls(vocabulary=vocab, merges=merges)


# === models ===============================================================================================


class Maker:
    def __init__(self, name: str, family: dict):
        self.name, self.family = name, family
        self.seed = zlib.crc32(name.encode()) % 2**31
        self.rng = np.random.default_rng(self.seed)
        keras.utils.set_random_seed(self.seed)
        self.prefix = family["prefix"]
        self.vocab = family["vocab"]

    def cls(self, suffix: str):
        return getattr(M, self.prefix + suffix)

    def moved(self, model, scale=None):
        scale = self.family["scale"] if scale is None else scale
        for weight in model.weights:
            value = np.asarray(weight.numpy(), dtype="float32")
            noise = self.rng.standard_normal(value.shape).astype("float32")
            if "norm" in weight.path:
                weight.assign(value + noise * NORM_MOVE)
            elif "embedding" in weight.path and "embedding_scale" in self.family:
                weight.assign(noise * self.family["embedding_scale"] + value * 0.5)
            else:
                weight.assign(noise * scale + value * 0.5)
        return model

    def backbone(self, dtype=None, **override):
        kwargs = {**self.family["kwargs"], **override}
        if dtype is not None:
            kwargs["dtype"] = dtype
        return self.cls("Backbone")(**kwargs)


def batches(rng: np.random.Generator, vocab: int) -> dict:
    real = (np.arange(LENGTH)[None, :] < np.array(LENGTHS)[:, None]).astype("int32")
    ids = rng.integers(1, vocab, (BATCH, LENGTH)).astype("int32") * real
    left_ids, left_mask = np.zeros_like(ids), np.zeros_like(real)
    for row, n in enumerate(LENGTHS):
        left_ids[row, LENGTH - n :] = ids[row, :n]
        left_mask[row, LENGTH - n :] = 1
    return {
        "right": {"token_ids": ids, "padding_mask": real},
        "left": {"token_ids": left_ids, "padding_mask": left_mask},
    }


def call(model, inputs: dict) -> np.ndarray:
    with torch.no_grad():
        out = model({k: keras.ops.convert_to_tensor(v) for k, v in inputs.items()}, training=False)
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")))


def greedy(lm, prompt: np.ndarray) -> np.ndarray:
    """The plain forward oracle; raises AssertionError at a near tie."""
    tokens = prompt.copy()
    for _ in range(NEW):
        logits = call(lm, {"token_ids": tokens, "padding_mask": np.ones_like(tokens)})[:, -1]
        top = np.sort(logits, axis=-1)
        assert (top[:, -1] - top[:, -2] > 1e-3).all(), f"near tie at length {tokens.shape[1]}"
        tokens = np.concatenate([tokens, logits.argmax(-1).astype("int32")[:, None]], axis=1)
    return tokens[:, PROMPT:]


def keras_generate(lm, prompt: np.ndarray) -> np.ndarray:
    width = PROMPT + NEW
    ids = np.zeros((prompt.shape[0], width), "int32")
    ids[:, :PROMPT] = prompt
    mask = (np.arange(width)[None, :] < PROMPT).astype("int32").repeat(prompt.shape[0], 0)
    inputs = {"token_ids": ids, "padding_mask": mask}
    if isinstance(lm, M.Gemma3CausalLM):
        # keras-hub 0.32: Gemma3CausalLM.generate_step returns {"images": inputs.get("images")}, and generate()
        # fails concatenating a None; an empty image batch (what the preprocessor gives a vision model for
        # text-only input) keeps it on the text path.
        inputs["images"] = np.zeros((prompt.shape[0], 0, 16, 16, 3), "float32")
    lm.compile(sampler="greedy")
    out = lm.generate(inputs, max_length=width, stop_token_ids=None)
    return np.asarray(keras.ops.convert_to_numpy(out["token_ids"]))[:, PROMPT:].astype("int32")


def pick_prompt(lm, rng: np.random.Generator, vocab: int, generate_differs: bool = False) -> dict:
    for attempt in range(40):
        prompt = rng.integers(1, vocab, (2, PROMPT)).astype("int32")
        try:
            tokens = greedy(lm, prompt)
        except AssertionError as tie:
            print(f"  prompt {attempt}: {tie}")
            continue
        if min(len(set(row.tolist())) for row in tokens) < 3:
            print(f"  prompt {attempt}: collapses to {[sorted(set(r.tolist())) for r in tokens]}")
            continue
        generated = keras_generate(lm, prompt)
        agree = bool((generated == tokens).all())
        first = [
            int(np.flatnonzero(g != t)[0]) if (g != t).any() else None for g, t in zip(generated, tokens, strict=True)
        ]
        print(
            f"  prompt {attempt}: oracle and keras generate agree: {agree} (first differing new token per row "
            f"{first}); distinct tokens per row {[len(set(r.tolist())) for r in tokens]}"
        )
        if agree or generate_differs:
            return {"greedy/prompt": prompt, "greedy/tokens": tokens, "generate/tokens": generated}
    raise RuntimeError(f"no prompt without near ties where generate agrees with the oracle for {lm.name}")


def preprocess_tf(preprocessor, texts: list[str]) -> dict:
    import tensorflow as tf

    data = tf.data.Dataset.from_tensor_slices(texts).batch(len(texts)).map(preprocessor.generate_preprocess)
    out = next(iter(data))
    return {k: np.asarray(v).astype("int32") for k, v in out.items()}


def preprocess(preprocessor, texts: list[str]) -> dict:
    out = preprocessor.generate_preprocess(texts)
    return {k: np.asarray(keras.ops.convert_to_numpy(v)).astype("int32") for k, v in out.items()}


def tokenizer_keys(preprocessor, texts: list[str]) -> dict:
    out = preprocess(preprocessor, texts)
    keys = {
        "tokenizer/texts": np.array(texts),
        "tokenizer/token_ids": out["token_ids"],
        "tokenizer/padding_mask": out["padding_mask"],
    }
    assert out["token_ids"].shape == (len(texts), SEQUENCE_LENGTH), out["token_ids"].shape
    tf_out = preprocess_tf(preprocessor, texts)
    differ = (tf_out["token_ids"] != out["token_ids"]).any(axis=1)
    print(
        f"  tokenizer: {len(texts)} texts, {int(out['padding_mask'].sum())} tokens, "
        f"{int((out['padding_mask'].sum(1) == SEQUENCE_LENGTH).sum())} rows filling all {SEQUENCE_LENGTH}; "
        f"TF workflow differs on {int(differ.sum())} rows"
    )
    for row in np.flatnonzero(differ)[:3]:
        print(f"    {texts[row]!r}: python {out['token_ids'][row].tolist()} tf {tf_out['token_ids'][row].tolist()}")
    if differ.any():
        keys["tokenizer_tf/token_ids"] = tf_out["token_ids"]
        keys["tokenizer_tf/padding_mask"] = tf_out["padding_mask"]
    return keys


def close(a, b, what: str, atol: float = 1e-5) -> None:
    diff = float(np.max(np.abs(np.asarray(a, "float32") - np.asarray(b, "float32"))))
    assert diff <= atol, f"{what}: max difference {diff}"
    print(f"  reload {what}: max difference {diff:.2e}")


def differs(a, b, what: str, at_least: float = 1e-2) -> None:
    diff = float(np.max(np.abs(a - b)))
    print(f"  {what}: max logit difference {diff:.3f}")
    assert diff > at_least, f"{what} does not change the result"


def stats(name: str, logits: np.ndarray, mask: np.ndarray) -> None:
    real = logits[mask.astype(bool)]
    prob = np.exp(real - real.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    print(
        f"  {name}: logits std {real.std():.3f}, max |logit| {np.abs(real).max():.2f}, mean top prob "
        f"{prob.max(-1).mean():.3f}"
    )


def copy_weights(source, target) -> None:
    assert len(source.weights) == len(target.weights)
    for src, dst in zip(source.weights, target.weights, strict=True):
        assert src.path == dst.path and tuple(src.shape) == tuple(dst.shape), (src.path, dst.path)
        dst.assign(keras.ops.cast(src.value, dst.dtype))


def h5_dtypes(path: str) -> dict:
    """dtype -> variable paths of the weights h5 in a .keras archive."""
    import zipfile

    import h5py

    found: dict = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            dtype = obj.attrs.get("dtype", obj.dtype)
            found.setdefault(str(dtype if isinstance(dtype, str) else np.dtype(dtype)), []).append(name)

    with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as h5:
        h5.visititems(visit)
    return found


def make_causal_family(name: str, family: dict, out: str) -> None:
    print(f"== {name}")
    mk = Maker(name, family)
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    given = batches(mk.rng, mk.vocab)
    expected = {f"{side}/{k}": v for side, d in given.items() for k, v in d.items()}

    backbone = mk.moved(mk.backbone())
    backbone.save(os.path.join(folder, "backbone.keras"))
    backbone.save_to_preset(os.path.join(folder, "backbone_preset"))
    for side in given:
        expected[f"{side}/backbone"] = call(backbone, given[side])
    predicted = np.asarray(backbone.predict(given["right"], verbose=0))
    print(f"  backbone predict vs __call__: max difference {np.abs(predicted - expected['right/backbone']).max():.2e}")

    lm_backbone = mk.moved(mk.backbone())
    lm = mk.cls("CausalLM")(backbone=lm_backbone, preprocessor=None)
    lm.save(os.path.join(folder, "causal_lm.keras"))
    for side in given:
        expected[f"{side}/logits"] = call(lm, given[side])
        stats(f"{side} logits", expected[f"{side}/logits"], given[side]["padding_mask"])
    predicted = np.asarray(lm.predict(given["right"], verbose=0))
    print(f"  causal LM predict vs __call__: max difference {np.abs(predicted - expected['right/logits']).max():.2e}")
    for variant, override in family.get("variants", {}).items():
        other = mk.cls("CausalLM")(backbone=mk.backbone(**override), preprocessor=None)
        copy_weights(lm, other)
        expected[f"{variant}/logits"] = call(other, given["right"])
        differs(expected["right/logits"], expected[f"{variant}/logits"], f"{variant} ({override})")
    if name == "phi3_su":
        short = {k: v[:, :4].copy() for k, v in given["right"].items()}
        expected.update({"short/token_ids": short["token_ids"], "short/padding_mask": short["padding_mask"]})
        expected["short/logits"] = call(lm, short)
        long_prefix = expected["right/logits"][:, :4]
        differs(long_prefix, expected["short/logits"], "short vs long factors on the first 4 positions")
    if "num_experts" in family["kwargs"]:
        expected["router/top_k"] = router_choices(lm_backbone, given["right"])

    expected.update(
        pick_prompt(lm, np.random.default_rng(mk.seed + 1), mk.vocab, family.get("generate_differs", False))
    )

    tokenizer = make_tokenizer(family)
    assert tokenizer.vocabulary_size() <= mk.vocab, (tokenizer.vocabulary_size(), mk.vocab)
    print(
        f"  tokenizer {type(tokenizer).__name__}: vocabulary {tokenizer.vocabulary_size()}, special ids "
        + ", ".join(f"{a}={getattr(tokenizer, a + '_id', None)}" for a in ("start_token", "end_token", "pad_token"))
    )
    pre_kwargs = {"image_converter": None} if name == "gemma3" else {}
    preprocessor = mk.cls("CausalLMPreprocessor")(tokenizer=tokenizer, sequence_length=SEQUENCE_LENGTH, **pre_kwargs)
    task = mk.cls("CausalLM")(backbone=lm_backbone, preprocessor=preprocessor)
    task.save_to_preset(os.path.join(folder, "causal_lm_preset"))
    texts = test_texts()
    expected.update(tokenizer_keys(preprocessor, texts))

    if family.get("extras"):
        make_bf16_and_lora(mk, lm, folder, given, expected)

    np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
    check_reload(folder, given, expected, texts)


def router_choices(backbone, inputs: dict) -> np.ndarray:
    """The experts each token of ``inputs`` is routed to, layer by layer: the top-k of each MoE block's
    router logits, recorded while the backbone runs on ``inputs``."""
    routers = [
        sub
        for sub in backbone._flatten_layers(include_self=False)
        if sub.name.endswith("sparse_feedforward_gate_dense")
    ]
    tops = [
        next(sub.top_k for sub in layer._flatten_layers(include_self=False) if "sparse_moe_block" in sub.name)
        for layer in backbone.transformer_layers
    ]
    assert len(routers) == len(tops), (len(routers), len(tops))
    logged = []
    originals = [router.call for router in routers]

    def spy(original):
        def record(*args, **kwargs):
            out = original(*args, **kwargs)
            logged.append(np.asarray(keras.ops.convert_to_numpy(out)))
            return out

        return record

    for router, original in zip(routers, originals, strict=True):
        router.call = spy(original)
    try:
        call(backbone, inputs)
    finally:
        for router, original in zip(routers, originals, strict=True):
            router.call = original
    assert len(logged) == len(routers), len(logged)
    out = np.stack(
        [
            np.argsort(-lg.reshape(-1, lg.shape[-1]), axis=-1, kind="stable")[:, :k]
            for lg, k in zip(logged, tops, strict=True)
        ]
    ).astype("int32")
    print(f"  router: experts used per layer {[np.bincount(c.ravel()).tolist() for c in out]}")
    return out


def make_bf16_and_lora(mk: Maker, lm, folder: str, given: dict, expected: dict) -> None:
    bf16 = mk.cls("CausalLM")(backbone=mk.backbone(dtype="bfloat16"), preprocessor=None)
    copy_weights(lm, bf16)
    path = os.path.join(folder, "causal_lm_bf16.keras")
    bf16.save(path)
    expected["bf16/logits"] = call(bf16, given["right"])
    diff = np.abs(expected["bf16/logits"] - expected["right/logits"]).max()
    print(f"  bf16 logits vs float32: max difference {diff:.3f}")
    for dtype, paths in h5_dtypes(path).items():
        print(f"  bf16 h5 {dtype}: {len(paths)} datasets, e.g. {paths[:4]}")

    base = mk.backbone()
    copy_weights(lm.backbone, base)
    lora_lm = mk.cls("CausalLM")(backbone=base, preprocessor=None)
    lora_lm.save_to_preset(os.path.join(folder, "lora_preset"))
    base.enable_lora(rank=2)
    adapted = []
    for weight in base.weights:
        if weight.path.endswith("lora_kernel_a"):
            weight.assign(
                mk.rng.standard_normal(weight.shape).astype("float32") * 0.3 + np.asarray(weight.numpy()) * 0.5
            )
            adapted.append(weight.path.rsplit("/", 1)[0])
        elif weight.path.endswith("lora_kernel_b"):
            weight.assign(mk.rng.standard_normal(weight.shape).astype("float32") * 0.3)
    print(f"  LoRA adapters on {adapted}")
    expected["lora/logits"] = call(lora_lm, given["right"])
    differs(expected["right/logits"], expected["lora/logits"], "LoRA adapters")
    lora_lm.save(os.path.join(folder, "causal_lm_lora.keras"))
    base.save_lora_weights(os.path.join(folder, "lora_preset", "adapters.lora.h5"))
    names = sorted(n for paths in h5_dtypes(os.path.join(folder, "causal_lm_lora.keras")).values() for n in paths)
    print(f"  causal_lm_lora.keras h5 datasets with 'lora': {[n for n in names if 'lora' in n]}")


def check_reload(folder: str, given: dict, expected: dict, texts: list[str]) -> None:
    lm = keras.saving.load_model(os.path.join(folder, "causal_lm.keras"))
    for side in given:
        close(call(lm, given[side]), expected[f"{side}/logits"], f"causal_lm.keras {side}", atol=0)
    task = keras_hub.models.CausalLM.from_preset(os.path.join(folder, "causal_lm_preset"))
    close(call(task, given["right"]), expected["right/logits"], "causal_lm_preset", atol=0)
    out = preprocess(task.preprocessor, texts)
    assert (out["token_ids"] == expected["tokenizer/token_ids"]).all(), "reloaded preprocessor differs"
    backbone = keras.saving.load_model(os.path.join(folder, "backbone.keras"))
    close(call(backbone, given["left"]), expected["left/backbone"], "backbone.keras left", atol=0)
    backbone = keras_hub.models.Backbone.from_preset(os.path.join(folder, "backbone_preset"))
    close(call(backbone, given["right"]), expected["right/backbone"], "backbone_preset", atol=0)
    if "bf16/logits" in expected:
        bf16 = keras.saving.load_model(os.path.join(folder, "causal_lm_bf16.keras"))
        print(f"  bf16 reloaded: policy {bf16.dtype_policy.name}, backbone {bf16.backbone.dtype_policy.name}")
        close(call(bf16, given["right"]), expected["bf16/logits"], "causal_lm_bf16.keras", atol=0)
        lora = keras.saving.load_model(os.path.join(folder, "causal_lm_lora.keras"))
        close(call(lora, given["right"]), expected["lora/logits"], "causal_lm_lora.keras", atol=1e-5)
        lora = keras_hub.models.CausalLM.from_preset(os.path.join(folder, "lora_preset"))
        close(call(lora, given["right"]), expected["right/logits"], "lora_preset base", atol=0)
        lora.backbone.load_lora_weights(os.path.join(folder, "lora_preset", "adapters.lora.h5"))
        close(call(lora, given["right"]), expected["lora/logits"], "lora_preset + adapters", atol=1e-5)


# === the families already converted: task presets with tokenizers =========================================


def make_task_preset(name: str, family: dict, out: str) -> None:
    print(f"== {name} (task preset)")
    mk = Maker(name, family)
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    given = batches(mk.rng, mk.vocab)
    texts = test_texts()
    if name == "bert":
        return make_bert(mk, folder, given, texts)
    tokenizer = make_tokenizer(family)
    print(f"  tokenizer {type(tokenizer).__name__}: vocabulary {tokenizer.vocabulary_size()}")
    preprocessor = mk.cls("CausalLMPreprocessor")(tokenizer=tokenizer, sequence_length=SEQUENCE_LENGTH)
    task = mk.cls("CausalLM")(backbone=mk.moved(mk.backbone()), preprocessor=preprocessor)
    path = os.path.join(folder, "causal_lm_preset")
    task.save_to_preset(path)
    expected = {f"{side}/{k}": v for side, d in given.items() for k, v in d.items()}
    for side in given:
        expected[f"{side}/logits"] = call(task, given[side])
        stats(f"{side} logits", expected[f"{side}/logits"], given[side]["padding_mask"])
    expected.update(tokenizer_keys(preprocessor, texts))
    np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
    again = keras_hub.models.CausalLM.from_preset(path)
    for side in given:
        close(call(again, given[side]), expected[f"{side}/logits"], f"causal_lm_preset {side}", atol=0)
    assert (preprocess(again.preprocessor, texts)["token_ids"] == expected["tokenizer/token_ids"]).all()


def make_bert(mk: Maker, folder: str, given: dict, texts: list[str]) -> None:
    import tensorflow as tf

    lines = tf.data.Dataset.from_tensor_slices(corpus())  # a list would be read as file names
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(lines, mk.vocab, lowercase=True)
    tokenizer = M.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    print(f"  tokenizer BertTokenizer: vocabulary {tokenizer.vocabulary_size()}")
    assert tokenizer.vocabulary_size() <= mk.vocab
    preprocessor = M.BertTextClassifierPreprocessor(tokenizer=tokenizer, sequence_length=SEQUENCE_LENGTH)
    task = M.BertTextClassifier(backbone=mk.backbone(), num_classes=3, preprocessor=preprocessor)
    mk.moved(task)  # the backbone and the head
    path = os.path.join(folder, "classifier_preset")
    task.save_to_preset(path)
    expected = {}
    for side, inputs in given.items():
        inputs = {**inputs, "segment_ids": np.zeros_like(inputs["token_ids"])}
        expected.update({f"{side}/{k}": v for k, v in inputs.items()})
        expected[f"{side}/logits"] = call(task, inputs)
        given[side] = inputs
    print(f"  right logits {np.round(expected['right/logits'], 3).tolist()}")
    out = preprocessor(texts)
    print(
        f"  tokenizer: {len(texts)} texts, {int(np.asarray(out['padding_mask']).sum())} tokens; e.g. "
        f"{[tokenizer.id_to_token(int(i)) for i in np.asarray(out['token_ids'][13]) if i]}"
    )
    out = {k: np.asarray(keras.ops.convert_to_numpy(v)).astype("int32") for k, v in out.items()}
    expected["tokenizer/texts"] = np.array(texts)
    for key in ("token_ids", "padding_mask", "segment_ids"):
        expected[f"tokenizer/{key}"] = out[key]
    tf_out = next(iter(tf.data.Dataset.from_tensor_slices(texts).batch(len(texts)).map(preprocessor)))
    differ = (np.asarray(tf_out["token_ids"]) != out["token_ids"]).any(axis=1)
    print(f"  tokenizer: TF workflow differs on {int(differ.sum())} rows")
    for row in np.flatnonzero(differ)[:3]:
        tf_ids = np.asarray(tf_out["token_ids"][row]).tolist()
        print(f"    {texts[row]!r}: python {out['token_ids'][row].tolist()} tf {tf_ids}")
    if differ.any():
        for key in ("token_ids", "padding_mask", "segment_ids"):
            expected[f"tokenizer_tf/{key}"] = np.asarray(tf_out[key]).astype("int32")
    np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
    again = keras_hub.models.TextClassifier.from_preset(path)
    for side in given:
        close(call(again, given[side]), expected[f"{side}/logits"], f"classifier_preset {side}", atol=0)
    again_out = again.preprocessor(texts)
    assert (np.asarray(keras.ops.convert_to_numpy(again_out["token_ids"])) == out["token_ids"]).all()


# === the families =========================================================================================

SPM_GEMMA = ("spm", GEMMA_IDS, ["<start_of_turn>", "<end_of_turn>"], False)
SPM_GEMMA3 = (
    "spm",
    GEMMA_IDS,
    ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<img>"],
    False,
)
SPM_LLAMA = ("spm", LLAMA_IDS, [], True)
SPM_PHI3 = ("spm", LLAMA_IDS, ["<|endoftext|>", "<|assistant|>", "<|user|>", "<|end|>"], True)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

S = {"vocabulary_size": SPM_VOCAB, **TINY}
B = {"vocabulary_size": BPE_VOCAB, **TINY}
GEMMA2 = {
    "query_head_dim_normalize": False,
    "use_post_ffw_norm": True,
    "use_post_attention_norm": True,
    "final_logit_soft_cap": 1.0,
    "attention_logit_soft_cap": 3.0,
    "use_sliding_window_attention": True,
    "sliding_window_size": 4,
}
LLAMA31 = {
    "rope_frequency_adjustment_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_pretraining_sequence_length": 64,
}
PHI3_SU = {
    "rope_scaling_type": "su",
    "rope_scaling_short_factor": [1.0, 1.1, 1.3, 1.6],
    "rope_scaling_long_factor": [1.0, 2.0, 4.0, 8.0],
    "max_sequence_length": 64,
    "pretraining_sequence_length": 4,
}
NO_ADJUST = {k: None for k in LLAMA31}

FAMILIES = {
    "gemma": {
        "prefix": "Gemma",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "tokenizer": SPM_GEMMA,
        "extras": True,
        "kwargs": {**S, **GQA, "head_dim": 8},
    },
    "gemma2": {
        "prefix": "Gemma",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "embedding_scale": 0.1,
        "tokenizer": SPM_GEMMA,
        "kwargs": {**S, **GQA, "head_dim": 8, **GEMMA2},
        "variants": {
            "nocap": {"final_logit_soft_cap": None, "attention_logit_soft_cap": None},
            "nowindow": {"use_sliding_window_attention": False},
        },
    },
    "gemma3": {
        "prefix": "Gemma3",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "embedding_scale": 0.1,
        "tokenizer": SPM_GEMMA3,
        "kwargs": {
            **S,
            "num_layers": 6,
            **GQA,
            "head_dim": 8,
            "image_size": 16,
            "use_query_key_norm": True,
            "use_post_ffw_norm": True,
            "use_post_attention_norm": True,
            "use_sliding_window_attention": True,
            "sliding_window_size": 4,
        },
        "variants": {"nowindow": {"use_sliding_window_attention": False}},
    },
    "llama3": {
        "prefix": "Llama3",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", [], LLAMA3_SPECIALS),
        "extras": True,
        "kwargs": {**B, **GQA, "rope_max_wavelength": 500000},
    },
    "llama31": {
        "prefix": "Llama3",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", [], LLAMA3_SPECIALS),
        "kwargs": {**B, **GQA, "rope_max_wavelength": 500000, **LLAMA31},
        "variants": {"noadjust": NO_ADJUST},
    },
    "mistral": {
        "prefix": "Mistral",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "tokenizer": SPM_LLAMA,
        "kwargs": {**S, **GQA, "sliding_window": 4},
        "variants": {"nowindow": {"sliding_window": None}},
    },
    "qwen": {
        "prefix": "Qwen",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", [], QWEN_SPECIALS),
        "kwargs": {**B, **GQA},
    },
    "qwen3": {
        "prefix": "Qwen3",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", [], QWEN_SPECIALS),
        "kwargs": {**B, **GQA, "head_dim": 8},
    },
    "phi3": {
        "prefix": "Phi3",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "tokenizer": SPM_PHI3,
        "kwargs": {**S, **GQA, "max_sequence_length": 64, "pretraining_sequence_length": 64},
    },
    "phi3_su": {
        "prefix": "Phi3",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "tokenizer": SPM_PHI3,
        "kwargs": {**S, **GQA, **PHI3_SU},
        "variants": {"default_rope": {"rope_scaling_type": None}},
    },
    "mixtral": {
        "prefix": "Mixtral",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "tokenizer": SPM_LLAMA,
        "kwargs": {**S, **GQA, "num_experts": 4, "top_k": 2, "sliding_window": 512},
    },
    "qwen_moe": {
        "prefix": "QwenMoe",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", [], QWEN_SPECIALS),
        "kwargs": {
            **B,
            **GQA,
            "moe_intermediate_dim": 16,
            "shared_expert_intermediate_dim": 32,
            "num_experts": 8,
            "top_k": 4,
        },
    },
    "opt": {
        "prefix": "OPT",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", ["<s>", "<pad>", "</s>", "<unk>"], []),
        "kwargs": {**B, "num_heads": 4, "max_sequence_length": 64},
    },
    "bloom": {
        "prefix": "Bloom",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", ["<unk>", "<s>", "</s>", "<pad>"], []),
        "kwargs": {**B, "num_heads": 4},
    },
    "bloom_hf": {  # transformers' BLOOM has an MLP of 4 x hidden_dim only: this one is written as a folder
        "prefix": "Bloom",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", ["<unk>", "<s>", "</s>", "<pad>"], []),
        "kwargs": {**B, "num_heads": 4, "intermediate_dim": 4 * TINY["hidden_dim"]},
    },
    "gpt_neox": {
        "prefix": "GPTNeoX",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", ["<|endoftext|>", "<|padding|>"], []),
        "kwargs": {**B, "num_heads": 4, "rotary_percentage": 0.5, "max_sequence_length": 64},
        "generate_differs": True,
    },
    "falcon": {
        "prefix": "Falcon",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", ["<|endoftext|>"], []),
        "kwargs": {**B, "num_attention_heads": 4},
    },
}
TASK_PRESETS = {
    "gpt2": {
        "prefix": "GPT2",
        "vocab": BPE_VOCAB,
        "scale": 0.3,
        "tokenizer": ("bpe", [], ["<|endoftext|>"]),
        "kwargs": {**B, "num_heads": 4, "max_sequence_length": 64},
    },
    "llama": {"prefix": "Llama", "vocab": SPM_VOCAB, "scale": 0.3, "tokenizer": SPM_LLAMA, "kwargs": {**S, **GQA}},
    "bert": {
        "prefix": "Bert",
        "vocab": SPM_VOCAB,
        "scale": 0.3,
        "tokenizer": None,
        "kwargs": {**S, "num_heads": 4, "max_sequence_length": 64},
    },
}


def main(out: str, names: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    failed = {}
    for name in names or [*FAMILIES, *TASK_PRESETS]:
        try:
            if name in FAMILIES:
                make_causal_family(name, FAMILIES[name], out)
            else:
                make_task_preset(name, TASK_PRESETS[name], out)
        except Exception as error:  # noqa: BLE001 -- report every family, then fail
            failed[name] = f"{type(error).__name__}: {error}"
            print(f"  FAILED {name}: {failed[name]}")
    if failed:
        raise SystemExit(f"failed: {failed}")
    print(f"wrote {names or 'all'} to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_lm", sys.argv[2:])
