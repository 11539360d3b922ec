"""Logits processors: small pieces applied to all rows at once before log_softmax.

:func:`beamsearch.beam_search_batch` applies, in this order (SPEC section 6): :class:`Temperature`,
:class:`TopK`, :class:`NoRepeatNGram`, then any processors the caller passes in
``logits_processors``, then log_softmax. A processor is any callable
``processor(logits, ctx) -> logits`` where ``logits`` is a ``[k, V]`` float array (numpy, or a
torch tensor on its device) that the search owns and the processor may change in place, and
``ctx`` is a :class:`StepContext`. To mask a token, set its logit to ``-inf``. Processors work row
by row: a row's output depends only on that row and its ``ctx`` entries, never on other rows.

A processor that reads ``ctx.history`` must say so with a class attribute ``needs_history = True``;
otherwise the search does not keep the prompt tokens in the history, and ``ctx.history`` holds only
the generated tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from beamsearch._backend import Backend

__all__ = ["LogitsProcessor", "NoRepeatNGram", "StepContext", "Temperature", "TopK"]


@dataclass(frozen=True)
class StepContext:
    """What a processor may read about the rows of this step.

    Attributes:
        step: the step number, 1 for the first model call.
        history: int64 ``[k, H]``: each row's tokens so far (the prompt, when a processor needs
            history, then the generated tokens), left-padded with -1.
        row_input: int64 ``[k]``: the input (prompt index) each row belongs to.
        backend: the array backend of this search's logits.
    """

    step: int
    history: np.ndarray
    row_input: np.ndarray
    backend: Backend


class LogitsProcessor(Protocol):
    """``processor(logits [k, V], ctx) -> logits [k, V]``; may modify ``logits`` in place."""

    def __call__(self, logits: Any, ctx: StepContext) -> Any: ...


@dataclass(frozen=True)
class Temperature:
    """Divide every logit by ``temperature`` (> 0)."""

    temperature: float
    needs_history = False

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        logits /= self.temperature
        return logits


@dataclass(frozen=True)
class TopK:
    """Keep the logits at or above the k-th value of the row sorted descending (ties kept).

    ``[4, 2, 2, 2, 0]`` with ``k = 3`` keeps the four values >= 2. ``k >= V`` keeps all.
    """

    k: int
    needs_history = False

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        if self.k >= logits.shape[1]:
            return logits
        threshold = ctx.backend.kth_largest(logits, self.k)  # --> [k_rows, 1]
        return ctx.backend.mask_below(logits, threshold)


@dataclass(frozen=True)
class NoRepeatNGram:
    """Mask every token that would complete an n-gram already in the row's history."""

    n: int
    needs_history = True

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens = banned_ngram_tokens(ctx.history, self.n)
        if rows.size:
            ctx.backend.set_neg_inf(logits, rows, tokens)
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
