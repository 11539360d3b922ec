"""Token-sequence biases and bad-word lists (multi-token sequences), over prompt + generated.

A one-token sequence ``(v,)`` applies to token v in every row; a longer sequence ``s`` applies to
its last token ``s[-1]`` in the rows whose history (prompt and generated tokens) ends with
``s[:-1]``. :class:`SequenceBias` adds its bias (several matching sequences add up);
:class:`BadWords` sets the token to -inf. Same meaning as ``transformers``'
``SequenceBiasLogitsProcessor`` and ``NoBadWordsLogitsProcessor``, applied to logits before
log_softmax.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext, history_suffix_matches


def _matches(history: np.ndarray, seqs: Sequence[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, tokens, which)``: every (row, last token) a sequence applies to, and which
    sequence (an index into ``seqs``)."""
    rows, which = [], []
    for i, seq in enumerate(seqs):
        hit = np.flatnonzero(history_suffix_matches(history, seq[:-1]))
        rows.append(hit)
        which.append(np.full(hit.shape[0], i))
    r, w = np.concatenate(rows), np.concatenate(which)
    return r, np.array([seq[-1] for seq in seqs])[w], w


@dataclass(frozen=True)
class SequenceBias:
    """Add ``bias[s]`` to token ``s[-1]`` where the row's history ends with ``s[:-1]``.

    Args:
        bias: a non-empty mapping from a non-empty tuple of token ids to a finite float (ids
            are checked against ``[0, V)`` at the first call).
    """

    bias: Mapping[tuple[int, ...], float]
    needs_history = True
    _seqs: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _values: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        seqs, values = check.sequence_bias(self.bias)
        object.__setattr__(self, "_seqs", seqs)
        object.__setattr__(self, "_values", values)

    @property
    def vocab_checks(self) -> tuple[tuple[str, list[int]], ...]:
        """Each key's ids, to check against ``[0, V)`` at the first call."""
        return tuple((f"bias key {seq!r}", list(seq)) for seq in self._seqs)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens, which = _matches(ctx.history, self._seqs)
        if rows.size == 0:
            return logits
        # several sequences may bias the same (row, token): add them up first
        pairs, where = np.unique(np.stack([rows, tokens]), axis=1, return_inverse=True)  # --> [2, p]
        total = np.bincount(where.reshape(-1), weights=np.array(self._values)[which])
        b = ctx.backend
        x = b.take(logits, pairs[0], pairs[1])
        return b.put(logits, pairs[0], pairs[1], x + b.from_host(total, like=x))


@dataclass(frozen=True)
class BadWords:
    """Ban token ``s[-1]`` (-inf) where the row's history ends with ``s[:-1]``.

    Args:
        sequences: a non-empty list of non-empty token-id sequences; a one-token sequence bans
            that token always (ids are checked against ``[0, V)`` at the first call).
    """

    sequences: Sequence[Sequence[int]]
    needs_history = True
    _seqs: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_seqs", check.bad_words(self.sequences))

    @property
    def vocab_checks(self) -> tuple[tuple[str, list[list[int]]], ...]:
        """The sequences' ids, to check against ``[0, V)`` at the first call."""
        return (("sequences", [list(seq) for seq in self._seqs]),)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens, _ = _matches(ctx.history, self._seqs)
        if rows.size == 0:
            return logits
        return ctx.backend.put(logits, rows, tokens, NEG_INF)
