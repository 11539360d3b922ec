"""What every logits processor gets: the ``[k, V]`` logits and a :class:`StepContext`."""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from beamsearch.backends import Backend
from beamsearch.core.state import select_state

__all__ = ["LogitsProcessor", "RowStates", "StepContext"]


class StepContext:
    """What a processor may read about the rows of this step.

    Attributes:
        step: the step number t, 1 for the first model call (the t-th generated token is chosen).
        history: int64 ``[k, H]``: each row's tokens so far, left-padded with -1: the prompt, when
            a processor of the search declares ``needs_history = True``, then the generated tokens.
            Without such a processor it holds the generated tokens only, rebuilt on first access.
        row_input: int64 ``[k]``: the input (prompt index) each row belongs to.
        backend: the array backend of this step's logits (:mod:`beamsearch.backends`).
        carried: the row states of the processors that carry one, by the processor's ``id``
            (:meth:`row_states`), or None.
        support: None, or ``(rows [p], tokens [p])`` (int64): set by a processor that leaves
            every entry of its output -inf except these pairs (a catalogue's allowed tokens).
            The search then ranks these entries only (``StepScores.support``) when no processor
            runs after that one, but those that declare ``masks_only = True`` (they only set
            entries to -inf). Any other processor leaves it alone.
    """

    __slots__ = ("step", "_history", "row_input", "backend", "carried", "support")

    def __init__(self, step: int, history: np.ndarray | Callable[[], np.ndarray], row_input: np.ndarray,
                 backend: Backend, carried: dict[int, Any] | None = None) -> None:
        self.step = step
        self._history = history
        self.row_input = row_input
        self.backend = backend
        self.carried = carried
        self.support: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def history(self) -> np.ndarray:
        if callable(self._history):
            self._history = self._history()
        return self._history

    def rows(self, index: np.ndarray) -> StepContext:
        """The context of the rows ``index`` alone."""
        carried = None if self.carried is None else {key: select_state(r, index) for key, r in self.carried.items()}
        return StepContext(self.step, self.history[index], self.row_input[index], self.backend, carried)

    def row_states(self, processor: Any) -> Any:
        """The ``[k]`` row states of ``processor`` (one that carries them: :class:`RowStates`).

        Raises:
            ValueError: the search did not start them (the processor was called outside a search
                that lists it in ``logits_processors``).
        """
        rows = None if self.carried is None else self.carried.get(id(processor))
        if rows is None:
            raise ValueError(f"{type(processor).__name__} carries a state per row that the search starts and "
                             "advances: pass it in logits_processors= of a search, do not call it alone")
        return rows


class LogitsProcessor(Protocol):
    """``processor(logits [k, V], ctx) -> logits [k, V]``.

    Use the returned array: a processor may write into ``logits`` (the search owns that buffer and
    never hands a processor the model's own array) or return a new one. Rows are independent: a
    row's output depends only on that row and its ``ctx`` entries. Mask a token with ``-inf``.
    """

    def __call__(self, logits: Any, ctx: StepContext) -> Any: ...


class RowStates(Protocol):
    """The per-row state a processor carries through the search (a grammar's matchers).

    A processor that carries one subclasses :class:`RowCarrier` (its ``start_rows(n) -> RowStates``:
    the states of the ``n`` first rows, one per input, before any token is generated) and reads its rows' states at
    each step with ``ctx.row_states(self)``. The engine keeps them beside each live row
    (``Beam.carried``): ``select_state(states, idx)`` takes rows ``idx`` (int64 ``[k']``, a row
    taken twice is forked), and ``advance(tokens)`` (int64 ``[k]``) moves each row by its new
    token. So a state follows its row's parents and is never rebuilt from the row's history.
    Register ``select_state`` for the class (``@select_state.register(cls)``), and
    ``concat_state`` (the rows of several, one after the other) for a search that continues rows
    ended at different steps (step search hands each partial solution's states to its next
    segment: :func:`beamsearch.core.engine.run`'s ``carried``).
    """

    def advance(self, tokens: np.ndarray) -> RowStates: ...


class RowCarrier:
    """Base class of a processor that carries a per-row state (:class:`RowStates`): the engine
    keeps the state of each subclass instance in the search beside the live rows."""

    needs_prompt = False
    """True: the state starts from the prompts (:meth:`start_prompts`), so a search that runs
    segments (step search) gives it whole prompts."""

    def start_rows(self, n: int) -> RowStates:
        """The states of the ``n`` first rows (one per input), before any token is generated."""
        raise NotImplementedError

    def start_prompts(self, prompts: Sequence[Sequence[int]]) -> RowStates:
        """The states of the first rows, one per prompt (its token ids), before any token is
        generated: what the search calls. By default :meth:`start_rows`, the prompts unread."""
        return self.start_rows(len(prompts))


def history_suffix_matches(history: np.ndarray, prefix: tuple[int, ...]) -> np.ndarray:
    """bool ``[k]``: rows whose history ends with ``prefix`` (always True for an empty prefix)."""
    n = len(prefix)
    if n == 0:
        return np.ones(history.shape[0], dtype=bool)
    if history.shape[1] < n:
        return np.zeros(history.shape[0], dtype=bool)
    return np.all(history[:, history.shape[1] - n :] == np.asarray(prefix), axis=1)
