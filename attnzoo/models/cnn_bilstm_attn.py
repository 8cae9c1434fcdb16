"""CNN + BiLSTM + attention pooling classifier (registry ``cnn_bilstm_attn``; seed 001's model, fixed).

    x [B, C_in, F, W]        a spectrogram-like input: C_in channels (5 in the seed), F frequency bins,
                             W time frames
    CNN (any timm model)  -> feature map [B, C, F', W']
    mean over F'          -> [B, W', C]          the time axis the seed flattened away
    BiLSTM                -> [B, W', 2·hidden]
    attn_pool             -> [B, 2·hidden]       e_t = vᵀ tanh(W h_t + b), c = Σ softmax(e)_t h_t
    Linear                -> logits [B, num_classes]

The seed flattened the CNN output to [B, 128] and fed it to ``nn.LSTM``, which reads a 2-D tensor as
one unbatched sequence: the LSTM ran across the batch, so sample 0's output depended on sample 3. Here
every sample keeps its own time axis. A ``mask`` [B, W] over input frames (True = real) is carried to
the feature frames (a feature frame is real if any input frame under it is), the LSTM reads each
sequence only up to its length (packed), and the pooling ignores the padded frames.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import check_input, check_mask, check_positive, check_probability, tracing
from attnzoo.layers.pooling import AttentionPooling
from attnzoo.models.text import run_packed

__all__ = ["CNNBiLSTMAttention"]


class CNNBiLSTMAttention(nn.Module):
    """Args:
        num_classes: number of output classes.
        backbone: any timm model name that supports ``features_only`` (its last stage is used).
        in_chans: input channels (5 in the seed).
        lstm_hidden: hidden size per direction of the BiLSTM.
        lstm_layers: stacked BiLSTM layers.
        attention_size: d_a of the pooling; None: 2·lstm_hidden.
        dropout: dropout before the classifier.

    Shapes: ``forward(x [B, C_in, F, W], mask [B, W] = None, return_attention=False)`` ->
    logits [B, num_classes], or ``(logits, a [B, W'])`` with the pooling weights over feature frames.
    """

    name = "cnn_bilstm_attn"

    def __init__(
        self,
        num_classes: int,
        *,
        backbone: str = "resnet18",
        in_chans: int = 5,
        lstm_hidden: int = 128,
        lstm_layers: int = 1,
        attention_size: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        import timm

        for key, value in (
            ("num_classes", num_classes),
            ("in_chans", in_chans),
            ("lstm_hidden", lstm_hidden),
            ("lstm_layers", lstm_layers),
        ):
            check_positive(self.name, key, value, allow_none=False)
        check_positive(self.name, "attention_size", attention_size)
        check_probability(self.name, "dropout", dropout)
        if backbone not in timm.list_models():
            raise ValueError(
                f"{self.name}: unknown timm backbone {backbone!r}; timm.list_models() lists them "
                f"(it must support features_only)"
            )
        self.in_chans = in_chans
        # never download: attnzoo's weights come from its own cards
        self.backbone = timm.create_model(
            backbone, pretrained=False, in_chans=in_chans, features_only=True, out_indices=(-1,)
        )
        channels = self.backbone.feature_info.channels()[-1]
        self.lstm = nn.LSTM(channels, lstm_hidden, num_layers=lstm_layers, batch_first=True, bidirectional=True)
        self.pool = AttentionPooling(2 * lstm_hidden, attention_size=attention_size)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(2 * lstm_hidden, num_classes)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        check_input(self.name, "x", x, ("batch", self.in_chans, "freq", "time"), like=self.head.weight)
        if mask is not None:
            mask = check_mask(self.name, mask, x.shape[0], 1, x.shape[-1], like=x)[:, 0]
            if (
                mask.shape[1] > 1
                and mask.device.type != "meta"
                and not tracing()
                and bool((mask[:, 1:] & ~mask[:, :-1]).any())
            ):
                raise ValueError(
                    f"{self.name} reads each sequence up to its length, so the real frames must come "
                    f"first (right padding)"
                )
            # padded frames read as zeros whatever they hold (the CNN's receptive field spans frames)
            x = x.masked_fill(~mask[:, None, None, :], 0.0)
        if 0 in x.shape:
            raise ValueError(
                f"{self.name} expects a non-empty batch of [batch, {self.in_chans}, freq, time] inputs, "
                f"got {list(x.shape)}"
            )
        features = self.backbone(x)[-1]  # [B, C, F', W']
        sequence = features.mean(dim=2).transpose(1, 2)  # [B, W', C]
        frames = sequence.shape[1]
        if mask is not None:
            mask = F.adaptive_max_pool1d(mask.to(sequence.dtype).unsqueeze(1), frames).squeeze(1) > 0
        hidden = self.lstm(sequence)[0] if mask is None else run_packed(self.lstm, sequence, mask)
        pooled, weights = (
            self.pool(hidden, mask, return_attention=True) if return_attention else (self.pool(hidden, mask), None)
        )
        logits = self.head(self.dropout(pooled))
        return (logits, weights) if return_attention else logits
