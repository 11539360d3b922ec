"""No-repeat n-gram blocking over prompt + generated tokens (SPEC section 6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from beamsearch.core import validate as check
from beamsearch.backends import NEG_INF
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class NoRepeatNGram:
    """Mask every token that would complete an n-gram already in the row's history (n >= 1)."""

    n: int
    needs_history = True
    last_step = None  # acts at every step
    masks_only = False  # a support set before it is dropped (StepContext.support)

    def __post_init__(self) -> None:
        check.at_least("n", self.n, 1)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens = banned_ngram_tokens(ctx.history, self.n)
        if rows.size:
            logits = ctx.backend.put(logits, rows, tokens, NEG_INF)
        return logits


def banned_ngram_tokens(history: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, tokens)`` pairs that would repeat an n-gram of ``history``.

    Args:
        history: int ``[k, H]``, each row's sequence left-padded with negative values.
        n: the n-gram size, >= 1.

    Returns:
        Two int64 arrays of equal length: row ``rows[i]`` may not take ``tokens[i]``.
    """
    k, width = history.shape
    if n == 1:
        rows, cols = np.nonzero(history >= 0)
        return rows, history[rows, cols]
    if width < n:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    suffix = history[:, width - (n - 1) :]  # --> [k, n-1], the prefix the next token extends
    windows = sliding_window_view(history[:, :-1], n - 1, axis=1)  # --> [k, H-n+1, n-1]
    complete = np.all(suffix >= 0, axis=1, keepdims=True)  # --> [k, 1]: the row has n-1 tokens
    match = np.all(windows == suffix[:, None, :], axis=2) & complete  # --> [k, H-n+1]
    rows, starts = np.nonzero(match)
    return rows, history[rows, starts + n - 1]
