"""Two small character-level translation models that the search decodes through the public
step-function protocol only: ``init_state(sources)`` then ``step(state, y_prev) -> (logits, state)``.

- :class:`Seq2Seq`: a bidirectional GRU encoder and a GRU decoder with Luong ("general")
  attention and input feeding (Luong, Pham and Manning, 2015): the attentional vector of the
  previous step, ``feed``, is part of the state and the next step's input.
- :class:`Transformer`: an encoder-decoder Transformer (Vaswani et al., 2017) whose decoder keeps a
  per-layer key/value cache of the generated prefix in the state; the encoder memory's cross-
  attention keys and values are computed once in ``init_state``.

Every state is a NamedTuple of tensors with the row (hypothesis) on axis 0, so the search reorders
it with ``select_state`` alone. Both states are registered with ``concat_state`` so that rows of
different source lengths (and, for the Transformer, different decoder steps) can share one state:
refill (``beamsearch.refill.decode_stream``) joins new inputs to a running search with it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from beamsearch import concat_state, pad_axis

__all__ = ["ModelConfig", "Seq2Seq", "Seq2SeqState", "Transformer", "TransformerState", "build_model"]


@dataclass
class ModelConfig:
    """Everything needed to rebuild a model (saved as JSON beside its weights)."""

    kind: str  # "seq2seq" or "transformer"
    source_vocab: int
    target_vocab: int
    hidden: int = 128  # GRU width, or the Transformer's d_model
    layers: int = 2  # Transformer encoder and decoder layers (Seq2Seq: ignored)
    heads: int = 4
    ff: int = 256
    max_source: int = 80
    max_target: int = 16
    dropout: float = 0.1
    bos: int = 1
    eos: int = 2
    pad: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class Seq2SeqState(NamedTuple):
    h: Tensor  # float [k, H], the decoder GRU's hidden state
    feed: Tensor  # float [k, H], the previous attentional vector (input feeding)
    memory: Tensor  # float [k, S, H], encoder outputs
    mask: Tensor  # bool [k, S], True at padding


@concat_state.register(Seq2SeqState)
def _concat_seq2seq(states: list[Seq2SeqState]) -> Seq2SeqState:
    """Rows of states of different source lengths: ``memory`` and ``mask`` padded on the right to
    the longest ``S`` (memory 0, mask True: the attention never reads the padding)."""
    return Seq2SeqState(torch.cat([s.h for s in states]), torch.cat([s.feed for s in states]),
                        torch.cat(pad_axis([s.memory for s in states], 1, 0.0)),
                        torch.cat(pad_axis([s.mask for s in states], 1, True)))


class Seq2Seq(nn.Module):
    """GRU encoder-decoder with Luong attention and input feeding."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.source_vocab, h, padding_idx=cfg.pad)
        self.encoder = nn.GRU(h, h, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * h, h)
        self.enc_out = nn.Linear(2 * h, h)
        self.tgt_emb = nn.Embedding(cfg.target_vocab, h)
        self.cell = nn.GRUCell(2 * h, h)
        self.attn = nn.Linear(h, h, bias=False)
        self.combine = nn.Linear(2 * h, h)
        self.out = nn.Linear(h, cfg.target_vocab)
        self.drop = nn.Dropout(cfg.dropout)

    def init_state(self, sources: Tensor) -> Seq2SeqState:
        """``sources`` int64 ``[N, S]`` (padded with pad) -> the state before the first step."""
        mask = sources == self.cfg.pad
        lengths = (~mask).sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.src_emb(sources), lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, last = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=sources.shape[1])
        memory = self.enc_out(out)  # --> [N, S, H]
        h = torch.tanh(self.bridge(torch.cat([last[0], last[1]], dim=1)))  # --> [N, H]
        return Seq2SeqState(h, torch.zeros_like(h), memory, mask)

    def step(self, state: Seq2SeqState, y_prev: Tensor) -> tuple[Tensor, Seq2SeqState]:
        """One decoder step: ``y_prev`` int64 ``[k]`` -> ``(logits [k, V], new state)``."""
        x = torch.cat([self.drop(self.tgt_emb(y_prev)), state.feed], dim=1)  # --> [k, 2H]
        h = self.cell(x, state.h)
        scores = torch.einsum("ksh,kh->ks", state.memory, self.attn(h))  # --> [k, S]
        weights = torch.softmax(scores.masked_fill(state.mask, float("-inf")), dim=1)
        context = torch.einsum("ks,ksh->kh", weights, state.memory)
        feed = torch.tanh(self.combine(torch.cat([context, h], dim=1)))  # --> [k, H]
        return self.out(self.drop(feed)), Seq2SeqState(h, feed, state.memory, state.mask)

    def forward(self, sources: Tensor, targets_in: Tensor) -> Tensor:
        """Teacher forcing: ``targets_in`` int64 ``[N, T]`` (bos first) -> logits ``[N, T, V]``."""
        return self.teacher_forced(self.init_state(sources), targets_in)

    def teacher_forced(self, state: Seq2SeqState, targets_in: Tensor) -> Tensor:
        """Teacher forcing from ``state`` (as :meth:`init_state` makes it, one row per target):
        ``targets_in`` int64 ``[N, T]`` (bos first) -> logits ``[N, T, V]``."""
        outs = []
        for t in range(targets_in.shape[1]):
            logits, state = self.step(state, targets_in[:, t])
            outs.append(logits)
        return torch.stack(outs, dim=1)


class TransformerState(NamedTuple):
    cross_k: tuple[Tensor, ...]  # per layer, float [k, heads, S, dh]
    cross_v: tuple[Tensor, ...]  # per layer, float [k, heads, S, dh]
    mask: Tensor  # bool [k, S], True at source padding
    self_k: tuple[Tensor, ...]  # per layer, float [k, heads, t, dh]: the generated prefix
    self_v: tuple[Tensor, ...]  # per layer, float [k, heads, t, dh]
    self_pad: Tensor  # bool [k, t], True at a cache column that is left padding (rows joined later)
    pos: Tensor  # int64 [k], the row's next target position (its own count of decoded tokens)


@concat_state.register(TransformerState)
def _concat_transformer(states: list[TransformerState]) -> TransformerState:
    """Rows of states of different source lengths and decoder steps: the cross keys/values and
    source mask padded on the right to the longest ``S`` (mask True), the self-attention cache
    padded on the left to the longest ``t`` (``self_pad`` True there), so every row's latest column
    stays last; each row keeps its own ``pos``."""

    def cat(leaves: list[Tensor], axis: int, value: float | bool, side: str = "right") -> Tensor:
        return torch.cat(pad_axis(leaves, axis, value, side=side))

    layers = range(len(states[0].cross_k))
    return TransformerState(
        tuple(cat([s.cross_k[i] for s in states], 2, 0.0) for i in layers),
        tuple(cat([s.cross_v[i] for s in states], 2, 0.0) for i in layers),
        cat([s.mask for s in states], 1, True),
        tuple(cat([s.self_k[i] for s in states], 2, 0.0, "left") for i in layers),
        tuple(cat([s.self_v[i] for s in states], 2, 0.0, "left") for i in layers),
        cat([s.self_pad for s in states], 1, True, "left"),
        torch.cat([s.pos for s in states]),
    )


def _split(x: Tensor, heads: int) -> Tensor:
    k, t, d = x.shape
    return x.view(k, t, heads, d // heads).transpose(1, 2)  # --> [k, heads, t, dh]


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """``q [k, h, tq, dh]``, ``k, v [k, h, tk, dh]``, mask bool broadcastable to ``[k, h, tq, tk]``
    (True = blocked) -> ``[k, tq, h*dh]``."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # --> [k, h, tq, dh]
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


class _EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.heads = cfg.heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, cfg.ff), nn.GELU(), nn.Linear(cfg.ff, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        q, k, v = (_split(t, self.heads) for t in self.qkv(self.n1(x)).chunk(3, dim=-1))
        x = x + self.drop(self.proj(_attend(q, k, v, pad[:, None, None, :])))
        return x + self.drop(self.ff(self.n2(x)))


class _DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.heads = cfg.heads
        self.qkv = nn.Linear(d, 3 * d)
        self.self_proj = nn.Linear(d, d)
        self.q_cross = nn.Linear(d, d)
        self.kv_cross = nn.Linear(d, 2 * d)
        self.cross_proj = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, cfg.ff), nn.GELU(), nn.Linear(cfg.ff, d))
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop = nn.Dropout(cfg.dropout)

    def cross_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self.kv_cross(memory).chunk(2, dim=-1)
        return _split(k, self.heads), _split(v, self.heads)

    def forward(self, x: Tensor, past_k: Tensor, past_v: Tensor, causal: Tensor | None,
                cross_k: Tensor, cross_v: Tensor, pad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``x [k, t, d]`` new positions; ``past_k/v [k, h, t0, dh]`` -> (out, keys, values)."""
        q, k, v = (_split(t, self.heads) for t in self.qkv(self.n1(x)).chunk(3, dim=-1))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        x = x + self.drop(self.self_proj(_attend(q, k, v, causal)))
        qc = _split(self.q_cross(self.n2(x)), self.heads)
        x = x + self.drop(self.cross_proj(_attend(qc, cross_k, cross_v, pad[:, None, None, :])))
        return x + self.drop(self.ff(self.n3(x))), k, v


class Transformer(nn.Module):
    """Pre-norm encoder-decoder Transformer with a per-layer KV cache in the decoding state."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.hidden
        self.cfg = cfg
        self.src_emb = nn.Embedding(cfg.source_vocab, d, padding_idx=cfg.pad)
        self.tgt_emb = nn.Embedding(cfg.target_vocab, d)
        self.src_pos = nn.Embedding(cfg.max_source, d)
        self.tgt_pos = nn.Embedding(cfg.max_target, d)
        self.encoder = nn.ModuleList(_EncoderLayer(cfg) for _ in range(cfg.layers))
        self.decoder = nn.ModuleList(_DecoderLayer(cfg) for _ in range(cfg.layers))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.out = nn.Linear(d, cfg.target_vocab)
        self.drop = nn.Dropout(cfg.dropout)

    def encode(self, sources: Tensor) -> tuple[Tensor, Tensor]:
        pad = sources == self.cfg.pad
        pos = torch.arange(sources.shape[1], device=sources.device)
        x = self.drop(self.src_emb(sources) + self.src_pos(pos))
        for layer in self.encoder:
            x = layer(x, pad)
        return self.enc_norm(x), pad  # --> [N, S, d], [N, S]

    def init_state(self, sources: Tensor) -> TransformerState:
        """``sources`` int64 ``[N, S]`` -> the state before the first step (empty self cache)."""
        memory, pad = self.encode(sources)
        cross = [layer.cross_kv(memory) for layer in self._layers()]
        n, heads, dh = sources.shape[0], self.cfg.heads, self.cfg.hidden // self.cfg.heads
        empty = tuple(memory.new_zeros(n, heads, 0, dh) for _ in self.decoder)
        return TransformerState(tuple(c[0] for c in cross), tuple(c[1] for c in cross), pad, empty, empty,
                                pad.new_zeros(n, 0), torch.zeros(n, dtype=torch.int64, device=sources.device))

    def _layers(self) -> list[_DecoderLayer]:
        return list(self.decoder)  # type: ignore[arg-type]

    def _decode(self, state: TransformerState, tokens: Tensor, causal: Tensor | None
                ) -> tuple[Tensor, TransformerState]:
        n, t = tokens.shape
        pos = state.pos[:, None] + torch.arange(t, device=tokens.device)  # --> [k, t], each row's own
        x = self.drop(self.tgt_emb(tokens) + self.tgt_pos(pos))
        self_pad = torch.cat([state.self_pad, state.self_pad.new_zeros(n, t)], dim=1)  # --> [k, t0 + t]
        blocked = causal  # teacher forcing (causal given) starts from an empty cache: no padding
        if bool(state.self_pad.any()):  # rows joined at different steps: block their left padding
            blocked = self_pad[:, None, None, :]
        keys, values = [], []
        for i, layer in enumerate(self.decoder):
            x, k, v = layer(x, state.self_k[i], state.self_v[i], blocked, state.cross_k[i], state.cross_v[i],
                            state.mask)
            keys.append(k)
            values.append(v)
        logits = self.out(self.dec_norm(x))  # --> [k, t, V]
        return logits, state._replace(self_k=tuple(keys), self_v=tuple(values), self_pad=self_pad,
                                      pos=state.pos + t)

    def step(self, state: TransformerState, y_prev: Tensor) -> tuple[Tensor, TransformerState]:
        """One cached decoder step: ``y_prev`` int64 ``[k]`` -> ``(logits [k, V], new state)``."""
        logits, state = self._decode(state, y_prev[:, None], None)
        return logits[:, 0], state

    def forward(self, sources: Tensor, targets_in: Tensor) -> Tensor:
        """Teacher forcing in one pass (causal mask): -> logits ``[N, T, V]``."""
        return self.teacher_forced(self.init_state(sources), targets_in)

    def teacher_forced(self, state: TransformerState, targets_in: Tensor) -> Tensor:
        """Teacher forcing in one pass from ``state`` (as :meth:`init_state` makes it, an empty
        self-attention cache, one row per target): ``targets_in`` int64 ``[N, T]`` (bos first) ->
        logits ``[N, T, V]``."""
        t = targets_in.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=targets_in.device).triu(1)
        logits, _ = self._decode(state, targets_in, causal)
        return logits


def build_model(cfg: ModelConfig) -> Seq2Seq | Transformer:
    if cfg.kind == "seq2seq":
        return Seq2Seq(cfg)
    if cfg.kind == "transformer":
        return Transformer(cfg)
    raise ValueError(f"model kind must be 'seq2seq' or 'transformer'; got {cfg.kind!r}")
