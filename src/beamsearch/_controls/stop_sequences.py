"""Stop sequences (SPEC section 10): a finite non-eos extension whose generated tokens end with a
stop sequence finishes like eos (no beam slot), except at steps ``t <= min_new_tokens``, where it
stays an ordinary candidate. The prompt is not part of the match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch import _validate as check


@dataclass(frozen=True)
class StopSequences:
    """Attributes:
        sequences: the stop sequences, as tuples of token ids.
        min_new_tokens: m; no stop sequence finishes at steps ``t <= m``.
    """

    sequences: tuple[tuple[int, ...], ...]
    min_new_tokens: int = 0

    @property
    def window(self) -> int:
        """w: how many of each row's last generated tokens a match needs to see."""
        return max(len(s) for s in self.sequences) - 1

    def pairs(self, recent: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The (row, token) extensions that complete a stop sequence at step t.

        Args:
            recent: int64 ``[k, w]``: each row's last w generated tokens, left-padded with -1.

        Returns:
            int64 ``rows [p]`` and ``tokens [p]``, sorted by row then token, unique.
        """
        k, w = recent.shape
        if step <= self.min_new_tokens:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rows, tokens = [], []
        for seq in self.sequences:
            need = np.asarray(seq[:-1], dtype=np.int64)
            hit = np.all(recent[:, w - need.shape[0] :] == need, axis=1) if need.size else np.ones(k, bool)
            idx = np.flatnonzero(hit)
            rows.append(idx)
            tokens.append(np.full(idx.shape[0], seq[-1], np.int64))
        r, t = np.concatenate(rows), np.concatenate(tokens)
        if len(self.sequences) > 1 and r.size:
            key = np.unique(r * (int(t.max()) + 1) + t)
            r, t = key // (int(t.max()) + 1), key % (int(t.max()) + 1)
        return r, t


def stop_sequences(value: Any, eos: np.ndarray, min_new_tokens: int) -> StopSequences | None:
    """Validate ``stop_sequences``: non-empty token-id sequences, none holding an eos id."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"stop_sequences must be a sequence of token-id sequences; got {value!r:.80}")
    seqs = []
    for i, s in enumerate(value):
        ids = tuple(check.token_list(f"stop_sequences[{i}]", s))
        bad = sorted(set(ids) & set(eos.tolist()))
        if bad:
            raise ValueError(f"stop_sequences[{i}] must not hold an eos id; got {list(ids)} (eos {bad[0]})")
        seqs.append(ids)
    return StopSequences(tuple(seqs), min_new_tokens) if seqs else None
