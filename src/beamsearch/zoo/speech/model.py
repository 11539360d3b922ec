"""The speech model: log-mel features, a convolutional subsampling (3x: 30 ms frames) and BiLSTM
encoder shared by a CTC head and a TDT head (an LSTM prediction network and a joint network over the
labels and blank, then the durations).

The vocabulary is characters: the blank (id 0), the space (the word delimiter), ``a``-``z`` and
``'``. :meth:`SpeechNet.transducer_functions` gives the ``predictor`` and ``joint`` functions that
:func:`beamsearch.speech.transducer_beam_search` takes.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from beamsearch.zoo.speech.features import HOP

__all__ = ["BLANK", "TOKENS", "SpeechConfig", "SpeechNet", "encode_text"]

TOKENS = ("<blank>", " ", *string.ascii_lowercase, "'")
BLANK = 0


def encode_text(text: str) -> list[int]:
    """The label ids of ``text`` (lowercase letters, ``'`` and single spaces).

    Raises:
        ValueError: a character outside the vocabulary (named).
    """
    ids = []
    for ch in text:
        if ch not in TOKENS[1:]:
            raise ValueError(f"text holds {ch!r}, not in the vocabulary (a-z, ' and space): {text!r:.60}")
        ids.append(TOKENS.index(ch))
    return ids


@dataclass(frozen=True)
class SpeechConfig:
    """The sizes of :class:`SpeechNet` (the JSON config shipped with its weights)."""

    mels: int = 80
    subsample: int = 3
    channels: int = 32
    hidden: int = 192
    conv_blocks: int = 3
    kernel: int = 9
    lstm_hidden: int = 128
    lstm_layers: int = 1
    pred_embed: int = 64
    pred_hidden: int = 96
    joint_hidden: int = 96
    durations: tuple[int, ...] = field(default=(0, 1, 2, 3, 4))
    tokens: tuple[str, ...] = TOKENS
    sample_rate: int = 16000

    @property
    def frame_duration(self) -> float:
        """Seconds per encoder frame."""
        return self.subsample * HOP / self.sample_rate


class _Block(nn.Module):
    """A time-channel separable convolution (depthwise over time, then pointwise), batch norm and
    ReLU, with a residual connection; padding frames are zeroed before the convolution."""

    def __init__(self, width: int, kernel: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv1d(width, width, kernel, padding=kernel // 2, groups=width)
        self.pointwise = nn.Conv1d(width, width, 1)
        self.norm = nn.BatchNorm1d(width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x`` ``[N, width, T]``, ``mask`` bool ``[N, 1, T]`` (True on real frames)."""
        return x + torch.relu(self.norm(self.pointwise(self.depthwise(x * mask))))


class SpeechNet(nn.Module):
    """Encoder, CTC head, prediction network and joint network of one :class:`SpeechConfig`."""

    def __init__(self, cfg: SpeechConfig) -> None:
        super().__init__()
        self.cfg = cfg
        v, c = len(cfg.tokens), cfg.channels
        self.conv = nn.Sequential(nn.Conv2d(1, c, 3, stride=(cfg.subsample, 2), padding=1), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, stride=(1, 2), padding=1), nn.ReLU())
        self.project = nn.Linear(c * ((cfg.mels + 3) // 4), cfg.hidden)
        self.blocks = nn.ModuleList(_Block(cfg.hidden, cfg.kernel) for _ in range(cfg.conv_blocks))
        self.lstm = nn.LSTM(cfg.hidden, cfg.lstm_hidden, cfg.lstm_layers, batch_first=True, bidirectional=True)
        self.ctc_head = nn.Linear(2 * cfg.lstm_hidden, v)
        self.embed = nn.Embedding(v, cfg.pred_embed)
        self.predictor = nn.LSTM(cfg.pred_embed, cfg.pred_hidden, batch_first=True)
        self.joint_enc = nn.Linear(2 * cfg.lstm_hidden, cfg.joint_hidden)
        self.joint_pred = nn.Linear(cfg.pred_hidden, cfg.joint_hidden)
        self.joint_out = nn.Linear(cfg.joint_hidden, v + len(cfg.durations))

    def weights(self) -> dict[str, torch.Tensor]:
        """The floating-point tensors of the state dict (what a checkpoint holds; batch norm's step
        counters are left out: evaluation does not read them)."""
        return {k: v.detach() for k, v in self.state_dict().items() if v.is_floating_point()}

    def encode(self, features: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``features`` ``[N, F, mels]`` with ``frames`` ``[N]`` -> ``(encoder_out [N, T, 2*lstm_hidden],
        lengths [N])``, T = ceil(F / subsample)."""
        x = torch.relu(self.conv[0](features.unsqueeze(1)))  # [N, C, T, mels/2]
        lengths = torch.clamp((frames - 1) // self.cfg.subsample + 1, min=1, max=x.shape[2])
        mask = (torch.arange(x.shape[2])[None, :] < lengths[:, None])[:, None, :]
        x = torch.relu(self.conv[2](x * mask[..., None]))  # padding frames 0, as past the end: [N, C, T, mels/4]
        x = self.project(x.permute(0, 2, 1, 3).flatten(2))
        h = x.transpose(1, 2)
        for block in self.blocks:
            h = block(h, mask)
        x = h.transpose(1, 2)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return out, lengths

    def ctc_log_probs(self, encoder_out: torch.Tensor) -> torch.Tensor:
        """``[N, T, V]`` log-probabilities of the CTC head."""
        return torch.log_softmax(self.ctc_head(encoder_out), dim=-1)

    def predict(self, labels: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The prediction network over ``labels`` ``[N, U]`` (the blank is the start symbol):
        ``(out [N, U, pred_hidden], (h, c))``, ``state`` ``(h, c)`` each ``[1, N, pred_hidden]``."""
        out, (h, c) = self.predictor(self.embed(labels), state)
        return out, (h, c)

    def joint(self, encoder_out: torch.Tensor, pred_out: torch.Tensor) -> torch.Tensor:
        """Joint logits ``[..., V + len(durations)]`` of broadcastable ``encoder_out`` ``[..., 2*lstm_hidden]``
        and ``pred_out`` ``[..., pred_hidden]``: the token logits, then the duration logits."""
        return self.joint_out(torch.tanh(self.joint_enc(encoder_out) + self.joint_pred(pred_out)))

    def transducer_functions(self) -> tuple[Callable[[Any, Any], tuple[Any, Any]], Callable[[Any, Any], Any]]:
        """``(predictor, joint)`` as :func:`beamsearch.speech.transducer_beam_search` takes them:
        ``predictor((h, c), y [K]) -> (pred_out [K, pred_hidden], (h, c))`` with ``h``, ``c``
        ``[K, pred_hidden]`` (rows first), ``joint(enc [K, D], pred [K, H]) -> [K, V + len(durations)]``."""

        def predictor(state: Any, y: Any) -> tuple[Any, Any]:
            h, c = state
            out, (h2, c2) = self.predict(torch.as_tensor(y).long()[:, None], (h[None], c[None]))
            return out[:, 0], (h2[0], c2[0])

        def joint(enc: Any, pred: Any) -> Any:
            return self.joint(enc, pred)

        return predictor, joint

    def initial_state(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The prediction network's zero state for ``n`` utterances: ``(h, c)`` each ``[n, pred_hidden]``."""
        zeros = torch.zeros(n, self.cfg.pred_hidden)
        return zeros, zeros.clone()
