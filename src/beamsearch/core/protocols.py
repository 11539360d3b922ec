"""The seams the engine runs, the ground floor every layer above implements.

- a logits processor (:class:`LogitsProcessor`) gets the ``[k, V]`` logits and a
  :class:`StepContext`; one that carries a state per row subclasses :class:`RowCarrier` and its
  states are :class:`RowStates` (:mod:`beamsearch.processors` holds the ready ones);
- a strategy (:class:`Strategy`) turns each step's scores into a :class:`Selection`
  (:mod:`beamsearch.strategies` holds one per search mode);
- :class:`Controls`: everything the engine applies around a strategy (:mod:`beamsearch.controls`
  assembles it; its stop sequences are a :class:`StopRule`).

The packages above import these from here (or from their own package, which re-exports them);
this module imports nothing above :mod:`beamsearch.core`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from beamsearch.backends import Backend
from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores
from beamsearch.core.state import select_state

__all__ = ["Controls", "GeneratedTokens", "LogitsProcessor", "RowCarrier", "RowStates", "Selection", "StepContext",
           "StopRule", "Strategy"]


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


@dataclass(frozen=True)
class Selection:
    """What a strategy keeps at one step.

    Attributes:
        live: the next live rows, input-major, in rank order within each input.
        ended: the hypotheses that end at this step, in production order.
        ended_finished: bool ``[len(ended)]``: which of them are finished (ended by eos or a stop
            sequence); the rest end unfinished.
        stop: bool ``[N]``: inputs that stop now (their live rows end unfinished).
    """

    live: Candidates
    ended: Candidates
    ended_finished: np.ndarray | bool
    stop: np.ndarray | None = None


class Strategy(Protocol):
    """A selection rule. ``start`` gives the state before step 1; ``select`` never mutates it."""

    def start(self, n_inputs: int) -> Any: ...

    def select(self, state: Any, scores: StepScores) -> tuple[Selection, Any]: ...


@dataclass(frozen=True)
class Controls:
    """Everything the engine applies around a strategy.

    Attributes:
        eos: int64 ``[E]``, the eos ids.
        max_steps: int64 ``[N]``, the most tokens each input generates.
        processors: applied in order to the ``[k, V]`` logits before log_softmax.
        masks: applied in order to the ``[k, V]`` log-probabilities after log_softmax.
        stops: stop sequences, or None.
        prompts: per input, its prompt tokens (kept in the history when a processor needs it).
        vocab_checks: ``(name, ids)`` pairs of token ids to check against ``[0, V)`` once V is known.
        input_of: None, or int64 ``[N]``: the input index the processors see for each input
            (``StepContext.row_input``; step search: the prompt an expansion belongs to).
    """

    eos: np.ndarray
    max_steps: np.ndarray
    processors: tuple[Any, ...] = ()
    masks: tuple[Any, ...] = ()
    stops: StopRule | None = None
    prompts: Sequence[Sequence[int]] | None = None
    vocab_checks: tuple[tuple[str, Any], ...] = ()
    input_of: np.ndarray | None = None

    @property
    def keep_history(self) -> bool:
        return any(p.needs_history for p in (*self.processors, *self.masks))

    @property
    def reads_prompts(self) -> bool:
        """Whether a processor reads the prompts: through the history, or as the start of the row
        states it carries (``needs_prompt``; a caller's processor is read through its wrapper)."""
        return any(p.needs_history or getattr(getattr(p, "processor", p), "needs_prompt", False)
                   for p in (*self.processors, *self.masks))


class StopRule(Protocol):
    """The stop sequences as the engine reads them (:class:`beamsearch.controls.stop_sequences.StopSequences`)."""

    @property
    def window(self) -> int:
        """w: how many of each row's last generated tokens a match needs to see."""

    def pairs(self, recent: np.ndarray, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The (row, token) extensions that complete a stop sequence at step t (``recent``: int64
        ``[k, w]``, each row's last w generated tokens): int64 ``rows [p]`` and ``tokens [p]``."""


class GeneratedTokens(Protocol):
    """The generated tokens of a step's rows, rebuilt from the back-pointers on demand
    (:class:`beamsearch.core.beam.Trail`, or a view of it from one call of a split step)."""

    def generated(self, rows: np.ndarray, step: int) -> np.ndarray:
        """int64 ``[len(rows), step]``: the tokens rows ``rows`` generated before ``step``."""
        ...
