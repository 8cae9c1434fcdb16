"""Text classifiers: token embedding -> encoder -> an attention head.

    tokens [B, T] (ids, 0 = padding)  -> embedding [B, T, E] -> encoder -> H [B, T, h]
    BiLSTMLabelwise   (``bilstm_labelwise``):  BiLSTM, label-wise attention -> logits [B, L]     multi-label
    BiLSTMAttnPool    (``bilstm_attn_pool``):  BiLSTM, attention pooling -> Linear -> [B, C]     single-label
    LabelAttentionClassifier (``conv_caml``, ``bilstm_laat``, ``bilstm_joint_laat``, ``bilstm_plm_ca``):
        a CNN (CAML: H = tanh(conv(E))) or BiLSTM encoder with any label-attention head -> [B, L]

The mask defaults to ``tokens != 0``, so padding never changes a text's output: the LSTM reads each
text only up to its length (packed), and the CNN sees zeros past the end either way (the padding
embedding is zero, like the convolution's own padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnzoo.layers.core import check_mask, check_positive, check_probability, check_tokens, neutralise, tracing
from attnzoo.layers.label_attention import LWAN, CAMLHead, JointLAATHead, LAATHead, PLMCAHead
from attnzoo.layers.labelwise import LabelwiseAttentionBatched
from attnzoo.layers.pooling import AttentionPooling

__all__ = [
    "BiLSTMEncoder",
    "ConvEncoder",
    "BiLSTMLabelwise",
    "BiLSTMAttnPool",
    "LabelAttentionClassifier",
    "token_mask",
    "run_packed",
]


def run_packed(rnn: nn.RNNBase, x: Tensor, mask: Tensor) -> Tensor:
    """Run a batch-first RNN over right-padded ``x`` [B, T, E], each row read only up to its length
    (``mask`` [B, T]); returns [B, T, hidden · directions] with zeros past each length. A row of length 0
    is read as one zero step (packing needs a length of at least 1)."""
    width = rnn.hidden_size * (2 if rnn.bidirectional else 1)
    if x.device.type == "meta":
        return rnn(x)[0]
    if x.shape[0] == 0 or x.shape[1] == 0:  # nothing to read; an empty batch cannot be packed
        return x.new_zeros(x.shape[0], x.shape[1], width)
    if tracing():  # packing reads the lengths on the host, which a traced graph cannot
        return _run_traceable(rnn, x, mask)
    lengths = mask.sum(-1).clamp(min=1).cpu()
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, _ = pad_packed_sequence(rnn(packed)[0], batch_first=True, total_length=x.shape[1])
    return out


def _run_traceable(rnn: nn.RNNBase, x: Tensor, mask: Tensor) -> Tensor:
    """What :func:`run_packed` computes, in tensor operations only (for torch.export and ONNX).

    Over right-padded rows the forward direction is exact as it is: position t never sees a later one.
    The backward direction is the reverse weights run forward over each row reversed within its length
    (a gather), reversed back. Outputs past each length are zeroed, as unpacking does.
    """
    if rnn.num_layers != 1:
        raise ValueError(
            f"exporting a {rnn.num_layers}-layer bidirectional {type(rnn).__name__} is not supported: "
            f"its layers mix both directions; export a model with layers=1"
        )
    keep = mask.to(x.dtype).unsqueeze(-1)
    forward = rnn(x)[0][..., : rnn.hidden_size] if rnn.bidirectional else rnn(x)[0]
    if not rnn.bidirectional:
        return forward * keep
    lengths = mask.sum(-1, keepdim=True)  # [B, 1]
    steps = torch.arange(x.shape[1], device=x.device)[None, :]
    order = torch.where(steps < lengths, lengths - 1 - steps, steps)  # reverse the real part of each row
    reversed_x = x.gather(1, order.unsqueeze(-1).expand_as(x))
    reverse_weights = {
        name: getattr(rnn, name + "_reverse") for name, _ in rnn.named_parameters() if not name.endswith("_reverse")
    }
    backward = torch.func.functional_call(rnn, reverse_weights, (reversed_x,))[0][..., : rnn.hidden_size]
    backward = backward.gather(1, order.unsqueeze(-1).expand_as(backward))
    return torch.cat([forward, backward], dim=-1) * keep


def token_mask(
    name: str, tokens: Tensor, mask: Tensor | None, vocab_size: int, *, like: Tensor, right_padded: bool = True
) -> Tensor:
    """Check token ids [B, T] and their mask; return the mask as bool [B, T] (default: ``tokens != 0``).

    ``right_padded``: an RNN reads each text up to its length, so the real tokens must be a prefix of
    each row; a mask with a gap would be read wrong, and is refused.
    """
    check_tokens(name, tokens, vocab_size, like=like)
    if mask is None:
        mask = tokens != 0
    else:
        mask = check_mask(name, mask, tokens.shape[0], 1, tokens.shape[1], like=tokens)[:, 0]
    if (
        right_padded
        and mask.shape[1] > 1
        and mask.device.type != "meta"
        and not tracing()
        and bool((mask[:, 1:] & ~mask[:, :-1]).any())
    ):
        rows = (mask[:, 1:] & ~mask[:, :-1]).any(-1).nonzero().flatten().tolist()
        raise ValueError(
            f"{name} reads each text up to its length, so the real tokens must come first (right "
            f"padding); rows {rows[:5]} have padding (or token id 0) before a real token"
        )
    return mask


class BiLSTMEncoder(nn.Module):
    """Embedding + bidirectional LSTM. tokens [B, T], mask [B, T] -> H [B, T, 2·hidden]."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden: int, *, layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(
            embed_dim,
            hidden,
            num_layers=layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        x = neutralise(self.dropout(self.embedding(tokens)), mask)
        return self.dropout(run_packed(self.lstm, x, mask))


class ConvEncoder(nn.Module):
    """CAML's encoder: embedding, dropout, Conv1d (``filters``, ``kernel_size``, padding ``kernel_size // 2``), tanh.

    tokens [B, T] -> H [B, T', filters], exactly CAML's convolution: T' = T for an odd kernel, T + 1 for
    an even one (kernel 10, CAML's default, gives one more window than tokens, and CAML attends over all
    of them). :meth:`output_mask` says which windows are real: window t covers tokens t - k//2 ..
    t - k//2 + k - 1 and is real when the token at its centre is (for an even kernel, either token
    beside its centre), so a right-padded text of n tokens has the n (or n + 1) windows CAML computes for
    it alone. Padded tokens read as zeros, like the convolution's own padding beyond the end.
    """

    def __init__(self, vocab_size: int, embed_dim: int, filters: int, *, kernel_size: int = 10, dropout: float = 0.2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.conv = nn.Conv1d(embed_dim, filters, kernel_size, padding=kernel_size // 2)
        nn.init.xavier_uniform_(self.conv.weight)
        self.dropout = nn.Dropout(dropout)

    @property
    def extra_window(self) -> int:
        return 1 - self.conv.kernel_size[0] % 2

    def output_mask(self, mask: Tensor) -> Tensor:
        """Which of the T' windows are real, from which tokens are ([B, T] -> [B, T'])."""
        if not self.extra_window:
            return mask
        return F.pad(mask, (0, 1)) | F.pad(mask, (1, 0))

    def forward(self, tokens: Tensor, mask: Tensor) -> Tensor:
        if tokens.shape[1] == 0:
            return self.embedding.weight.new_zeros(tokens.shape[0], 0, self.conv.out_channels)
        x = neutralise(self.dropout(self.embedding(tokens)), mask).transpose(1, 2)  # [B, E, T]
        return torch.tanh(self.conv(x).transpose(1, 2))


class _TextModel(nn.Module):
    name = "text"
    right_padded = True  # an RNN encoder reads each text up to its length

    def _mask(self, tokens: Tensor, mask: Tensor | None) -> Tensor:
        return token_mask(
            self.name, tokens, mask, self.vocab_size, like=self.encoder.embedding.weight, right_padded=self.right_padded
        )


def _check_text_config(name: str, vocab_size: int, sizes: dict[str, int | None], dropout: float) -> None:
    check_positive(name, "vocab_size", vocab_size, allow_none=False)
    for key, value in sizes.items():
        check_positive(name, key, value)
    check_probability(name, "dropout", dropout)


class BiLSTMLabelwise(_TextModel):
    """Multi-label text classifier with label-wise attention (LWAN, Chalkidis et al. 2019).

    Args: vocab_size, num_labels, embed_dim, hidden (per direction), layers, dropout.
    Shapes: ``forward(tokens [B, T], mask [B, T] = tokens != 0, return_attention=False)`` ->
    logits [B, L], or ``(logits [B, L], A [B, L, T])``.
    """

    name = "bilstm_labelwise"

    def __init__(
        self,
        vocab_size: int,
        num_labels: int,
        *,
        embed_dim: int = 128,
        hidden: int = 128,
        layers: int = 1,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        _check_text_config(
            self.name,
            vocab_size,
            {"num_labels": num_labels, "embed_dim": embed_dim, "hidden": hidden, "layers": layers},
            dropout,
        )
        self.vocab_size = vocab_size
        self.encoder = BiLSTMEncoder(vocab_size, embed_dim, hidden, layers=layers, dropout=dropout)
        self.head = LabelwiseAttentionBatched(num_labels, hidden_size=2 * hidden)

    def forward(self, tokens: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        mask = self._mask(tokens, mask)
        return self.head(self.encoder(tokens, mask), mask, return_attention=return_attention)


class BiLSTMAttnPool(_TextModel):
    """Single-label text classifier: BiLSTM, additive attention pooling, linear classifier.

    Args: vocab_size, num_classes, embed_dim, hidden (per direction), attention_size (None: 2·hidden), layers,
    dropout.
    Shapes: ``forward(tokens [B, T], mask [B, T] = tokens != 0, return_attention=False)`` ->
    logits [B, C], or ``(logits [B, C], a [B, T])``.
    """

    name = "bilstm_attn_pool"

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embed_dim: int = 128,
        hidden: int = 128,
        attention_size: int | None = None,
        layers: int = 1,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        _check_text_config(
            self.name,
            vocab_size,
            {
                "num_classes": num_classes,
                "embed_dim": embed_dim,
                "hidden": hidden,
                "attention_size": attention_size,
                "layers": layers,
            },
            dropout,
        )
        self.vocab_size = vocab_size
        self.encoder = BiLSTMEncoder(vocab_size, embed_dim, hidden, layers=layers, dropout=dropout)
        self.pool = AttentionPooling(2 * hidden, attention_size=attention_size)
        self.classifier = nn.Linear(2 * hidden, num_classes)

    def forward(self, tokens: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        mask = self._mask(tokens, mask)
        hidden = self.encoder(tokens, mask)
        if return_attention:
            pooled, weights = self.pool(hidden, mask, return_attention=True)
            return self.classifier(pooled), weights
        return self.classifier(self.pool(hidden, mask))


_HEADS = {"lwan": LWAN, "caml": CAMLHead, "laat": LAATHead, "joint_laat": JointLAATHead, "plm_ca": PLMCAHead}


class LabelAttentionClassifier(_TextModel):
    """Multi-label text classifier: a CNN or BiLSTM encoder and a label-attention head.

    Args: vocab_size, num_labels; ``encoder`` ("cnn" | "bilstm"), ``head`` ("caml" | "laat" |
    "joint_laat" | "plm_ca" | "lwan"), embed_dim, ``hidden`` (BiLSTM units per direction, or CNN
    filters), kernel_size (CNN; an even kernel gives T + 1 windows, as CAML), attention_size (LAAT d_a),
    num_parent_labels and projection_size (JointLAAT), dropout, chunk_size.
    Shapes: ``forward(tokens [B, T], mask [B, T] = tokens != 0, return_attention=False)``
    -> logits [B, L], or ``(logits, A [B, L, T])``; JointLAAT also takes ``return_parents``.
    """

    def __init__(
        self,
        vocab_size: int,
        num_labels: int,
        *,
        encoder: str = "bilstm",
        head: str = "laat",
        embed_dim: int = 100,
        hidden: int = 256,
        kernel_size: int = 10,
        attention_size: int = 512,
        num_parent_labels: int | None = None,
        projection_size: int = 128,
        dropout: float = 0.2,
        chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        if head not in _HEADS:
            raise ValueError(f"head must be one of {', '.join(_HEADS)}, got {head!r}")
        if encoder not in ("cnn", "bilstm"):
            raise ValueError(f"encoder must be 'cnn' or 'bilstm', got {encoder!r}")
        # the registry names of the combinations: conv_caml, bilstm_laat, bilstm_joint_laat, ...
        self.name = f"{'conv' if encoder == 'cnn' else 'bilstm'}_{head}"
        _check_text_config(
            self.name,
            vocab_size,
            {
                "num_labels": num_labels,
                "embed_dim": embed_dim,
                "hidden": hidden,
                "kernel_size": kernel_size,
                "attention_size": attention_size,
                "chunk_size": chunk_size,
            },
            dropout,
        )
        self.vocab_size, self.head_name = vocab_size, head
        self.right_padded = encoder == "bilstm"
        if encoder == "cnn":
            self.encoder = ConvEncoder(vocab_size, embed_dim, hidden, kernel_size=kernel_size, dropout=dropout)
            width = hidden
        else:
            self.encoder = BiLSTMEncoder(vocab_size, embed_dim, hidden, dropout=dropout)
            width = 2 * hidden
        kwargs: dict = {"hidden_size": width, "chunk_size": chunk_size}
        if head in ("laat", "joint_laat"):
            kwargs["attention_size"] = attention_size
        if head == "joint_laat":
            if num_parent_labels is None:
                raise ValueError(f"{self.name} needs num_parent_labels")
            kwargs["num_parent_labels"] = num_parent_labels
            kwargs["projection_size"] = projection_size
        if head == "joint_laat":
            self.head = JointLAATHead(num_labels, kwargs.pop("num_parent_labels"), **kwargs)
        else:
            self.head = _HEADS[head](num_labels, **kwargs)

    def forward(self, tokens: Tensor, mask: Tensor | None = None, return_attention: bool = False, **kwargs):
        mask = self._mask(tokens, mask)
        hidden = self.encoder(tokens, mask)
        windows = self.encoder.output_mask(mask) if isinstance(self.encoder, ConvEncoder) else mask
        return self.head(hidden, windows, return_attention=return_attention, **kwargs)
