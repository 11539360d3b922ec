"""Token-sequence biases and bad-word lists (multi-token sequences), over prompt + generated.

A one-token sequence ``(v,)`` applies to token v in every row; a longer sequence ``s`` applies to
its last token ``s[-1]`` in the rows whose history (prompt and generated tokens) ends with
``s[:-1]``. :class:`SequenceBias` adds its bias (several matching sequences add up);
:class:`BadWords` sets the token to -inf. Same meaning as ``transformers``'
``SequenceBiasLogitsProcessor`` and ``NoBadWordsLogitsProcessor``, applied to logits before
log_softmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from beamsearch import _validate as check
from beamsearch._backends import NEG_INF
from beamsearch.processors._base import StepContext, history_suffix_matches


def _sequence(name: str, seq: Any) -> tuple[int, ...]:
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"{name} must be a sequence of token ids; got {seq!r:.80}")
    ids = tuple(check.token(f"{name}[{j}]", t) for j, t in enumerate(seq))
    if not ids:
        raise ValueError(f"{name} must be a non-empty sequence of token ids; got {seq!r}")
    return ids


def _matches(history: np.ndarray, seqs: Sequence[tuple[int, ...]], values: Sequence[float]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, tokens, value)`` of every sequence that applies, summed per (row, token)."""
    rows, tokens, vals = [], [], []
    for seq, value in zip(seqs, values):
        hit = np.flatnonzero(history_suffix_matches(history, seq[:-1]))
        rows.append(hit)
        tokens.append(np.full(hit.shape[0], seq[-1], np.int64))
        vals.append(np.full(hit.shape[0], value))
    r, t, v = np.concatenate(rows), np.concatenate(tokens), np.concatenate(vals)
    if r.size == 0:
        return r, t, v
    key = r * (int(t.max()) + 1) + t
    uniq, inverse = np.unique(key, return_inverse=True)
    with np.errstate(invalid="ignore"):
        total = np.bincount(inverse, weights=v) if np.isfinite(v).all() else _sum_with_inf(inverse, v, uniq.size)
    return uniq // (int(t.max()) + 1), uniq % (int(t.max()) + 1), total


def _sum_with_inf(inverse: np.ndarray, v: np.ndarray, size: int) -> np.ndarray:
    total = np.zeros(size)
    np.add.at(total, inverse, v)
    return total


@dataclass(frozen=True)
class SequenceBias:
    """Add ``bias[s]`` to token ``s[-1]`` where the row's history ends with ``s[:-1]``.

    Args:
        bias: a mapping from a non-empty tuple of token ids to a finite float.
    """

    bias: Mapping[tuple[int, ...], float]
    needs_history = True
    _seqs: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _values: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.bias, Mapping):
            raise TypeError(f"bias must be a mapping from token-id tuples to floats; got {self.bias!r:.80}")
        seqs, values = [], []
        for seq, value in self.bias.items():
            seqs.append(_sequence(f"bias key {seq!r}", seq))
            v = float(value)
            if not math.isfinite(v):
                raise ValueError(f"bias[{seq!r}] must be finite; got {value!r}")
            values.append(v)
        object.__setattr__(self, "_seqs", tuple(seqs))
        object.__setattr__(self, "_values", tuple(values))

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens, total = _matches(ctx.history, self._seqs, self._values)
        if rows.size == 0:
            return logits
        b = ctx.backend
        x = b.take(logits, rows, tokens)
        return b.put(logits, rows, tokens, x + b.from_host(total, like=x))


@dataclass(frozen=True)
class BadWords:
    """Ban token ``s[-1]`` (-inf) where the row's history ends with ``s[:-1]``.

    Args:
        sequences: non-empty token-id sequences; a one-token sequence bans that token always.
    """

    sequences: Sequence[Sequence[int]]
    needs_history = True
    _seqs: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.sequences, (str, bytes)) or not hasattr(self.sequences, "__len__"):
            raise TypeError(f"sequences must be a list of token-id sequences; got {self.sequences!r:.80}")
        seqs = tuple(_sequence(f"sequences[{i}]", s) for i, s in enumerate(self.sequences))
        object.__setattr__(self, "_seqs", seqs)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens, _ = _matches(ctx.history, self._seqs, [0.0] * len(self._seqs))
        if rows.size == 0:
            return logits
        return ctx.backend.put(logits, rows, tokens, NEG_INF)
