"""What every logits processor gets: the ``[k, V]`` logits and a :class:`StepContext`."""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from beamsearch.backends import Backend

__all__ = ["LogitsProcessor", "StepContext"]


class StepContext:
    """What a processor may read about the rows of this step.

    Attributes:
        step: the step number t, 1 for the first model call (the t-th generated token is chosen).
        history: int64 ``[k, H]``: each row's tokens so far, left-padded with -1: the prompt, when
            a processor of the search declares ``needs_history = True``, then the generated tokens.
            Without such a processor it holds the generated tokens only, rebuilt on first access.
        row_input: int64 ``[k]``: the input (prompt index) each row belongs to.
        backend: the array backend of this step's logits (:mod:`beamsearch.backends`).
    """

    __slots__ = ("step", "_history", "row_input", "backend")

    def __init__(self, step: int, history: np.ndarray | Callable[[], np.ndarray], row_input: np.ndarray,
                 backend: Backend) -> None:
        self.step = step
        self._history = history
        self.row_input = row_input
        self.backend = backend

    @property
    def history(self) -> np.ndarray:
        if callable(self._history):
            self._history = self._history()
        return self._history

    def rows(self, index: np.ndarray) -> StepContext:
        """The context of the rows ``index`` alone."""
        return StepContext(self.step, self.history[index], self.row_input[index], self.backend)


class LogitsProcessor(Protocol):
    """``processor(logits [k, V], ctx) -> logits [k, V]``.

    Use the returned array: a processor may write into ``logits`` (the search owns that buffer and
    never hands a processor the model's own array) or return a new one. Rows are independent: a
    row's output depends only on that row and its ``ctx`` entries. Mask a token with ``-inf``.
    """

    def __call__(self, logits: Any, ctx: StepContext) -> Any: ...


def history_suffix_matches(history: np.ndarray, prefix: tuple[int, ...]) -> np.ndarray:
    """bool ``[k]``: rows whose history ends with ``prefix`` (always True for an empty prefix)."""
    n = len(prefix)
    if n == 0:
        return np.ones(history.shape[0], dtype=bool)
    if history.shape[1] < n:
        return np.zeros(history.shape[0], dtype=bool)
    return np.all(history[:, history.shape[1] - n :] == np.asarray(prefix, dtype=np.int64), axis=1)
