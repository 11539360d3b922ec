"""A forced, scored prefix (SPEC section 10): at step ``t <= len(prefix[i])``, after log_softmax,
every token of input i but ``prefix[i][t-1]`` becomes -inf. The forced token keeps its processed
log-probability (it is scored, not assumed); -inf there leaves the input without an extension."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.processors import StepContext


@dataclass(frozen=True)
class ForcedPrefix:
    """Attributes:
        tokens: int64 ``[sum of lengths]``: the prefixes one after another.
        start: int64 ``[N]``: where input i's prefix starts in ``tokens``.
        lengths: int64 ``[N]``.
    """

    tokens: np.ndarray
    start: np.ndarray
    lengths: np.ndarray
    masks_only = True  # it only sets entries to -inf: a support set before it still holds (StepContext.support)
    needs_history = False

    @staticmethod
    def of(prefix: list[list[int]]) -> ForcedPrefix:
        """From one (validated, not all empty) token-id list per input."""
        lengths = np.array([len(p) for p in prefix])
        return ForcedPrefix(np.concatenate([np.array(p, dtype=np.int64) for p in prefix]),
                            np.cumsum(lengths) - lengths, lengths)

    @property
    def last_step(self) -> int:
        """No-op after the longest prefix (the engine then skips it)."""
        return int(self.lengths.max())

    def __call__(self, logp: Any, ctx: StepContext) -> Any:
        rows = np.flatnonzero(self.lengths[ctx.row_input] >= ctx.step)  # rows still inside their prefix
        if rows.size == 0:
            return logp
        forced = self.tokens[self.start[ctx.row_input[rows]] + ctx.step - 1]
        return ctx.backend.keep_only(logp, rows, forced)
