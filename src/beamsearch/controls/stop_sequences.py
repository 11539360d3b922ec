"""Stop sequences (SPEC section 10): a finite non-eos extension whose generated tokens end with a
stop sequence finishes like eos (no beam slot), except at steps ``t <= min_new_tokens``, where it
stays an ordinary candidate. The prompt is not part of the match."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_NONE = np.zeros(0, np.int64)


@dataclass(frozen=True)
class StopSequences:
    """Attributes:
        sequences: the stop sequences, as tuples of token ids.
        min_new_tokens: m; no stop sequence finishes at steps ``t <= m``.
    """

    sequences: tuple[tuple[int, ...], ...]
    min_new_tokens: int = 0
    _need: np.ndarray = field(init=False, repr=False, compare=False)
    _care: np.ndarray = field(init=False, repr=False, compare=False)
    _last: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        w = self.window
        need = np.zeros((len(self.sequences), w), np.int64)  # --> [S, w]: each s[:-1], right-aligned
        care = np.zeros((len(self.sequences), w), bool)  # --> [S, w]: which columns must match
        for i, seq in enumerate(self.sequences):  # a one-token sequence: an empty slice, nothing to match
            need[i, w - (len(seq) - 1) :] = seq[:-1]
            care[i, w - (len(seq) - 1) :] = True
        object.__setattr__(self, "_need", need)
        object.__setattr__(self, "_care", care)
        object.__setattr__(self, "_last", np.array([seq[-1] for seq in self.sequences], np.int64))

    @property
    def window(self) -> int:
        """w: how many of each row's last generated tokens a match needs to see."""
        return max(len(s) for s in self.sequences) - 1

    def _may_complete(self, recent: np.ndarray) -> bool:
        """A cheap pre-check: some row's last token is some sequence's next-to-last (or a
        sequence has one token)."""
        if recent.shape[1] == 0 or not self._care[:, -1].all():  # a one-token sequence: always
            return True
        last = recent[:, -1]
        return bool((last[:, None] == self._need[:, -1]).any())  # --> [k, S]

    def pairs(self, recent: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The (row, token) extensions that complete a stop sequence at step t.

        Args:
            recent: int64 ``[k, w]``: each row's last w generated tokens, left-padded with -1.

        Returns:
            int64 ``rows [p]`` and ``tokens [p]``, sorted by row then token, unique.
        """
        if step <= self.min_new_tokens or not self._may_complete(recent):
            return _NONE, _NONE
        hit = ((recent[:, None, :] == self._need) | ~self._care).all(axis=2)  # --> [k, S]
        rows, seq = np.nonzero(hit)  # row-major: by row, then sequence
        tokens = self._last[seq]
        if len(self.sequences) > 1 and rows.size > 1:
            key = np.unique(rows * (int(tokens.max()) + 1) + tokens)  # by row, then token; no repeats
            rows, tokens = key // (int(tokens.max()) + 1), key % (int(tokens.max()) + 1)
        return rows, tokens
