"""Make the tokenizer fixtures under tests/data/keras_hub_tokenizers with keras-hub and sentencepiece (run
once; the files are committed, neither is a test dependency). Made with keras 3.15.1, keras-hub 0.32.0,
sentencepiece 0.2.3, tokenizers 0.23.3:

    PYTHONHASHSEED=0 KERAS_BACKEND=torch python tests/keras_hub_tokenizer_fixtures.py tests/data/keras_hub_tokenizers

(add ``thousand`` after the folder to remake ``thousand.npz`` alone; about a minute on one core.)

It writes:

* ``edge.json``: ``{"texts": [...], "families": {F: {"token_ids": [[...]], "padding_mask": [[...]]
  (, "segment_ids")}}}``: what the preprocessor of each tokenizer-bearing preset of tests/data/keras_hub_lm
  (every causal LM's ``causal_lm_preset``, BERT's ``classifier_preset``) gives for ``EDGE_TEXTS`` at
  sequence_length 48, on keras-hub's default (Python) path: ``generate_preprocess(texts)`` for a causal LM,
  the call for the classifier. The texts are the hard cases: special tokens written into a text (each
  family's own and the others'), user-defined pieces at a text's start, middle and end, Unicode spaces,
  ``…``, compatibility forms, case folds (``ß``, final sigma), zero-width and default-ignorable characters,
  combining marks, emoji, runs of spaces, tabs and newlines, the empty text, words past WordPiece's 100
  bytes, and the Llama 3 pattern keras-hub hands ``Split`` as a literal.
* ``spm/<case>.spm`` and ``spm_cases.json``: SentencePiece models of the settings keras-hub's tiny presets do
  not cover, trained here on ``keras_hub_lm_fixtures.corpus()``: byte fallback with the ``nmt_nfkc``
  normaliser and extra-whitespace removal; the unigram model; no dummy prefix with user-defined pieces; and
  ``{"texts": [...], "cases": {case: [[ids], ...]}}``: ``SentencePieceProcessor.encode`` of the 200
  tokenizer texts of keras_hub_lm, ``EDGE_TEXTS`` and 1,000 random strings over an alphabet of the hard
  cases (keras-hub's Python path is exactly that call).
* ``thousand.npz``: ``texts`` (the 1,000 seeded texts of ``varied_texts``: mixed scripts, punctuation, runs
  of whitespace, numbers, emoji, long words, empty texts, texts longer than the sequence length) and, per
  family F, ``F/token_ids``, ``F/padding_mask`` (, ``F/segment_ids``): its preprocessor's output at
  sequence_length 128, made as for ``edge.json``.
"""

from __future__ import annotations

import io
import json
import os
import random
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import sentencepiece  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from keras_hub_lm_fixtures import corpus  # noqa: E402

LM = os.path.join(os.path.dirname(__file__), "data", "keras_hub_lm")
SEQUENCE_LENGTH = 48
LLAMA3_PATTERN = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
EDGE_TEXTS = [
    "",
    " ",
    "   ",
    "<s>",
    "</s>",
    "<unk>",
    "<pad>",
    "<bos>hello<eos>",
    "<|endoftext|>",
    "a<|endoftext|>b",
    "<|begin_of_text|>hi<|eot_id|>",
    "<|im_start|>user\nhi<|im_end|>",
    "<|user|>\nHello<|end|>\n<|assistant|>",
    "<|user|>",
    "Hi <|user|> there",
    "<start_of_turn>user\nhi<end_of_turn>",
    "<start_of_turn>",
    "<img><start_of_image>",
    "[CLS] hello [SEP] [MASK] [PAD] [UNK]",
    "a\xa0b",
    "a\u3000b",
    "wait… what‥",
    "naïve café déjà",
    "Ｈｅｌｌｏ，ｗｏｒｌｄ！",
    "ﬁne ﬂour",
    "straße STRASSE",
    "ΣΑΣ σας",
    "x\u200by\u00adz\ufeffw",
    "e\u0301 combining",
    "日本語のテキスト",
    "😀😀 🇫🇷",
    "tab\tnew\nline\r\nret",
    "  two leading",
    "trailing two  ",
    "a    b",
    "it's 'twas we'll",
    "12345678901234567890",
    "x" * 120,
    "é" * 60,
    "$5 ＄5 ₊1 ⒈",
    "Ⅻ ½ ㈠",
    "\u2581 pre-escaped",
    LLAMA3_PATTERN,
]

SPM_CASES = {
    "bpe_fallback_nfkc": {
        "model_type": "bpe",
        "byte_fallback": True,
        "vocab_size": 600,
        "normalization_rule_name": "nmt_nfkc",
        "user_defined_symbols": ["<|user|>", "<tag>", "▁▁"],
    },
    "bpe_extra_whitespace": {
        "model_type": "bpe",
        "vocab_size": 300,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": True,
        "user_defined_symbols": ["<|user|>"],
    },
    "bpe_no_prefix": {
        "model_type": "bpe",
        "vocab_size": 400,
        "normalization_rule_name": "identity",
        "add_dummy_prefix": False,
        "remove_extra_whitespaces": False,
        "user_defined_symbols": ["<|user|>", "\n"],
    },
    "unigram_fallback": {
        "model_type": "unigram",
        "vocab_size": 560,
        "byte_fallback": True,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
        "add_dummy_prefix": False,
    },
    "unigram_prefix": {
        "model_type": "unigram",
        "vocab_size": 300,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": True,
        "user_defined_symbols": ["<|user|>"],
    },
}
ALPHABET = [*"abcdefghijklmnopqrstuvwxyz  ABCXYZ..,,!?'\"-0123456789\n\t"] + [
    "é", "ü", "ß", "日", "😀", "…", "\xa0", "\u3000", "Ｈ", "ﬁ", "<|user|>", "<tag>", "<s>", "</s>", "<unk>",
    "  ", "   ", "....", "aaaa", "eeee",
]  # fmt: skip


THOUSAND_LENGTH = 128
# fmt: off
WORDS = {  # a few words of each script, to mix
    "latin": [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "WORLD", "it's", "don't", "we'll",
        "O'Neil", "e-mail",
    ],
    "accents": ["naïve", "café", "déjà", "vu", "Ångström", "façade", "Zürich", "straße", "coöperate", "señor", "Œuvre"],
    "greek": ["αβγ", "καλημέρα", "ΣΑΣ", "σας", "Ωμέγα"],
    "cyrillic": ["привет", "мир", "Москва", "ЁЛКА"],
    "cjk": ["日本語", "のテキスト", "中文字符", "한국어", "漢字かな"],
    "rtl": ["مرحبا", "بالعالم", "שלום", "עולם"],
    "indic": ["नमस्ते", "दुनिया", "தமிழ்", "ภาษาไทย"],
    "emoji": ["😀", "😀😀", "🇫🇷", "👍🏽", "👩‍💻", "❤️", "🎉🎉🎉", "🤖"],
    "punct": [".", ",", "!", "?", "...", "…", "--", "—", "(x)", "[y]", "{z}", '"q"', "«guillemets»", "#tag", "@user"],
    "numbers": ["0", "42", "3.14159", "1,000,000", "2026-12-07", "12:30", "-7", "1e-5", "½", "٣٤", "１２３"],
    "spaces": ["  ", "   ", "\t", "\n", "\n\n", "\r\n", "\xa0", "\u3000", " \t "],
}
# fmt: on
LONG_ALPHABET = "abcdefghijklmnopqrstuvwxyzé日😀"


def _piece(rng: random.Random) -> str:
    kind = rng.choice([*WORDS, "long"])
    if kind == "long":  # a long word, at times past WordPiece's 100 characters
        return "".join(rng.choice(LONG_ALPHABET[: rng.choice((26, 30))]) for _ in range(rng.randint(20, 130)))
    return rng.choice(WORDS[kind])


def varied_texts(count: int = 1000, seed: int = 0) -> list[str]:
    """``count`` texts, seeded: one in 20 empty, others of 1 to 60 pieces of a script, punctuation, a
    number, an emoji, a run of whitespace or a long word, joined by a space or nothing."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if rng.random() < 0.05:
            out.append(rng.choice(["", " ", "\n"]))
            continue
        n = rng.choice([rng.randint(1, 6), rng.randint(1, 20), rng.randint(20, 60)])
        out.append("".join(_piece(rng) + rng.choice([" ", " ", " ", ""]) for _ in range(n)))
    return out


def preset(family: str) -> str:
    return os.path.join(LM, family, "classifier_preset" if family == "bert" else "causal_lm_preset")


def preprocess(family: str, texts: list[str], length: int) -> dict[str, np.ndarray]:
    """keras-hub's preprocessor of ``family``'s preset on ``texts`` at ``length``."""
    if family == "bert":
        pre = keras_hub.models.TextClassifierPreprocessor.from_preset(preset(family))
        pre.sequence_length = length
        given = pre(texts)
    else:
        pre = keras_hub.models.CausalLMPreprocessor.from_preset(preset(family))
        given = pre.generate_preprocess(texts, sequence_length=length)
    return {k: np.asarray(v).astype("int64") for k, v in given.items()}


def edge(out: str) -> None:
    families = {}
    for family in sorted(os.listdir(LM)):
        families[family] = {k: v.tolist() for k, v in preprocess(family, EDGE_TEXTS, SEQUENCE_LENGTH).items()}
        print(f"  {family}: {sum(map(sum, families[family]['padding_mask']))} tokens")
    with open(os.path.join(out, "edge.json"), "w", encoding="utf-8") as handle:
        json.dump({"sequence_length": SEQUENCE_LENGTH, "texts": EDGE_TEXTS, "families": families}, handle)


def thousand(out: str) -> None:
    texts = varied_texts()
    arrays: dict[str, np.ndarray] = {"texts": np.array(texts)}
    for family in sorted(os.listdir(LM)):
        for key, value in preprocess(family, texts, THOUSAND_LENGTH).items():
            arrays[f"{family}/{key}"] = value.astype("int32" if key == "token_ids" else "int8")
        print(f"  {family}: {int(arrays[f'{family}/padding_mask'].sum())} tokens")
    np.savez_compressed(os.path.join(out, "thousand.npz"), **arrays)


def train(settings: dict) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        character_coverage=0.98,
        num_threads=1,
        shuffle_input_sentence=False,
        hard_vocab_limit=False,
        minloglevel=2,
        **settings,
    )
    return model.getvalue()


def spm(out: str) -> None:
    rng = random.Random(0)
    texts = [str(t) for t in np.load(os.path.join(LM, "gemma", "expected.npz"))["tokenizer/texts"]]
    texts += EDGE_TEXTS + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30))) for _ in range(1000)]
    os.makedirs(os.path.join(out, "spm"), exist_ok=True)
    cases = {}
    for name, settings in SPM_CASES.items():
        proto = train(settings)
        with open(os.path.join(out, "spm", f"{name}.spm"), "wb") as handle:
            handle.write(proto)
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        cases[name] = [processor.encode(text) for text in texts]
        print(f"  {name}: {processor.vocab_size()} pieces")
    with open(os.path.join(out, "spm_cases.json"), "w", encoding="utf-8") as handle:
        json.dump({"texts": texts, "cases": cases}, handle)


if __name__ == "__main__":
    here = os.path.join(os.path.dirname(__file__), "data", "keras_hub_tokenizers")
    target = sys.argv[1] if len(sys.argv) > 1 else here
    os.makedirs(target, exist_ok=True)
    if sys.argv[2:] == ["thousand"]:  # the 1,000 texts alone: edge.json and spm/ stay as they are
        thousand(target)
    else:
        edge(target)
        spm(target)
        thousand(target)
    print(f"wrote {target} with keras-hub {keras_hub.__version__}, sentencepiece {sentencepiece.__version__}")
