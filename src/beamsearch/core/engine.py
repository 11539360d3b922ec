"""The one search engine: a loop of three named steps around one frozen beam record.

Every search of the package (``greedy_decode``, ``beam_search``, ``beam_search_batch``,
``score_sequences``, the search modes) is a :class:`Search` with a strategy
(:mod:`beamsearch.strategies`) and controls (:mod:`beamsearch.controls`), driven by :func:`run`
for one batch or by the refill runner (:mod:`beamsearch.refill`) for a stream. Per step:

1. :func:`score_step`: one model call for all live rows of all inputs, then on the logits' own
   backend the processors, log_softmax, and the masks after it -> ``[k, V]`` log-probabilities;
2. ``strategy.select``: which extensions live on, which end, which inputs stop;
3. :func:`apply_selection`: extend the kept rows, record what ended, retire inputs that stopped or reached
   their ``max_steps``; then the model state is reordered by the kept rows' parents.

An optional observer (:class:`beamsearch.core.trace.Tracer`: a step callback, a search trace) looks at the step's
scores before step 2 and at the selection after it, and may stop inputs; without one the loop does nothing more.

Bookkeeping (:class:`~beamsearch.core.beam.Beam`, the back-pointer :class:`~beamsearch.core.beam.Trail`)
is numpy on the host and O(k) per step; paths are rebuilt once, for the result. No Python loop
runs over rows or tokens in the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from beamsearch.backends import NEG_INF, backend_of, first_foreign_leaf
from beamsearch.core import model_checks
from beamsearch.core.beam import Beam, Candidates, Ended, Trail
from beamsearch.core.protocols import Controls, GeneratedTokens, RowCarrier, Selection, StepContext, Strategy
from beamsearch.core.select import StepScores, Terminals
from beamsearch.core.state import select_state, take_state

StepFn = Callable[[Any, Any], tuple[Any, Any]]

_NO_PAIRS = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Outcome:
    """What a search leaves for its result builder: every hypothesis that ended, in production
    order, the trail their paths are rebuilt from, and the strategy's state after the last step
    (what a mode reports beside its results, such as stochastic beam search's kappa).

    ``model_states`` (only when :func:`run` is asked to keep them): the model state rows of every
    ended hypothesis, one state per step at which some ended, in production order (joined with
    ``concat_state`` their rows align with ``ended``): row h is what the next call would take to
    continue hypothesis h, whose last token is its ``y_prev``. ``carried_states`` likewise (kept
    with them, when some processor carries row states): per such step, the processors' row states
    of the hypotheses that ended there, advanced by their last token, by processor ``id``."""

    ended: Ended
    trail: Trail
    state: Any = None
    model_states: tuple[Any, ...] = ()
    carried_states: tuple[dict[int, Any], ...] = ()


class Observer(Protocol):
    """Watches a search step by step (:class:`beamsearch.core.trace.Tracer` is the one there is)."""

    def before_select(self, scores: StepScores) -> Any:
        """Read what it needs of the step's scores before the strategy may write into them."""

    def after_select(self, seen: Any, scores: StepScores, selection: Selection, controls: Controls,
                     trail: Trail) -> Selection:
        """See the selection; return it, with more inputs to stop in ``stop`` if it wants."""


def run(step_fn: StepFn, init_state: Any, first_tokens: np.ndarray, strategy: Strategy,
        controls: Controls, *, observer: Observer | None = None, keep_states: bool = False,
        carried: dict[int, Any] | None = None, recent: np.ndarray | None = None) -> Outcome:
    """Run a search.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per input (axis 0 of every array leaf).
        first_tokens: int64 ``[N]``, ``y_prev`` of the first call (one row per input).
        strategy: the selection rule.
        controls: eos ids, per-input ``max_steps``, processors, masks, stop sequences.
        observer: None, or an :class:`Observer` called around each step's selection.
        keep_states: keep the model state rows of the hypotheses that end (``Outcome.model_states``,
            taken with :func:`~beamsearch.core.state.take_state`, which leaves the live rows' state
            as it was), so that a caller can continue them (step search's next segment), and the
            processors' row states of the same hypotheses (``Outcome.carried_states``).
        carried: None, or by processor ``id`` the row states ``[N]`` the inputs start from (others
            ``start_prompts``): a search that continues earlier hypotheses continues their constraints.
        recent: None, or int64 ``[N, w]``: the last generated tokens each input starts with, for
            the stop sequences (-1: none), w the stop sequences' window.

    Returns:
        An :class:`Outcome`.
    """
    n = first_tokens.shape[0]
    model_checks.state_rows(init_state, n)
    search = Search(n, strategy, controls, observer, carried=carried, recent=recent, keep_carried=keep_states)
    index = indexer(first_foreign_leaf(init_state))
    state, y_prev = init_state, index(first_tokens)
    for step in range(int(controls.max_steps.max())):
        try:
            output = step_fn(state, y_prev)
        except Exception as e:
            if step == 0 and hasattr(e, "add_note"):  # Python 3.11+; 3.10 raises it as it is
                e.add_note(model_checks.first_call_note(first_tokens, controls.vocab_checks))
            raise
        logits, new_state = model_checks.step_output(output)
        rows = search.beam.size
        parent = search.advance(logits)
        if keep_states:
            search.keep_states(new_state, index)
        beam = search.beam
        if beam.size == 0:
            break
        state, y_prev = reorder(new_state, parent, rows, index), index(beam.token)
    return search.outcome()


class Search:
    """One search between model calls: its live rows, trail, strategy state and what ended.

    :func:`run` drives one; the refill runner (:mod:`beamsearch.refill`) drives several in
    lockstep, one model call for the rows of all of them. Each call's logits for this search's
    rows go to :meth:`advance`, which scores, selects and advances one step; the caller reorders
    the model state by the parents it returns (:func:`reorder`).

    Attributes:
        beam: the live rows (what the next call is made for; ``beam.token`` is its ``y_prev``).
        step: the steps taken (0 before the first call).
        state: the strategy's state after the last step.
        trail: the back-pointers of every step.
    """

    def __init__(self, n_inputs: int, strategy: Strategy, controls: Controls, observer: Observer | None = None, *,
                 carried: dict[int, Any] | None = None, recent: np.ndarray | None = None,
                 keep_carried: bool = False) -> None:
        self.strategy, self.controls, self.observer = strategy, controls, observer
        self.beam = start_beam(n_inputs, controls, carried, recent)
        self._keep_carried = keep_carried
        self._carried: list[dict[int, Any]] = []
        self.trail = Trail()
        self.state = strategy.start(n_inputs)
        self.step = 0
        self._ended: list[tuple[Beam, Candidates, int, bool | np.ndarray]] = []
        self._fresh: list[tuple[Beam, Candidates, int, bool | np.ndarray]] = []  # what ended at the last step
        self._states: list[Any] = []
        self._vocab: int | None = None
        self._scratch: Any = None

    def advance(self, logits: Any) -> np.ndarray:
        """One step from the model's logits ``[k, V]`` for the live rows (never written into).

        Returns:
            int64 ``[k']``: each next live row's parent, a row of this call (``beam`` is now
            those ``k'`` rows; ``k' == 0`` when the search is over).
        """
        self.step += 1
        scores = score_logits(logits, self.beam, self.step, self.controls, self.trail, self._vocab, self._scratch)
        self._vocab = scores.vocab
        observer = self.observer
        seen = observer.before_select(scores) if observer is not None else None
        selection, self.state = self.strategy.select(self.state, scores)
        if observer is not None:
            selection = observer.after_select(seen, scores, selection, self.controls, self.trail)
        self._scratch = scores.logp  # the strategy is done with it: next step's buffer (no new allocation)
        self.beam, parent, done, carried = apply_selection(self.beam, selection, self.step, self.controls,
                                                           self.trail, self._keep_carried)
        if carried is not None:
            self._carried.append(carried)
        self._ended.extend(done)
        self._fresh = done
        return parent

    def keep_states(self, new_state: Any, index: Callable[[np.ndarray], Any]) -> None:
        """Keep the rows of ``new_state`` (the last call's) of the hypotheses that ended at the last
        step, in production order (``new_state`` is left as it was for the live rows' reorder)."""
        if self._fresh:
            rows = np.concatenate([chosen.parent for _, chosen, _, _ in self._fresh])
            self._states.append(take_state(new_state, index(rows)))

    def outcome(self) -> Outcome:
        """Everything that ended so far (all of the search's hypotheses once it is over)."""
        return Outcome(Ended.concat(self._ended), self.trail, self.state, tuple(self._states), tuple(self._carried))


def reorder(new_state: Any, parent: np.ndarray, rows: int, index: Callable[[np.ndarray], Any]) -> Any:
    """The model state of the next call: ``new_state``'s rows (``rows`` of them) gathered by
    ``parent`` (int64 ``[k']``), untouched when that is every row in order."""
    if not (parent.shape[0] == rows and (parent == np.arange(rows)).all()):
        new_state = select_state(new_state, index(parent))
    return new_state


def start_beam(n: int, controls: Controls, carried: dict[int, Any] | None = None,
               recent: np.ndarray | None = None) -> Beam:
    """The N rows before step 1: one per input, logprob 0; the processors' row states ``carried``
    (by ``id``; the others started), the stop-sequence window ``recent`` (:func:`run`)."""
    if controls.stops is None:
        recent = None
    elif recent is None:
        recent = np.full((n, controls.stops.window), -1, np.int64)
    history = None
    if controls.keep_history:  # [N, P]: the prompts; a column more at each step (never max_steps wide)
        prompts = controls.prompts or [[] for _ in range(n)]
        p = max((len(x) for x in prompts), default=0)
        history = np.full((n, p), -1, np.int64)
        for i, x in enumerate(prompts):
            if len(x):
                history[i, p - len(x) : p] = x
    given, prompts = carried or {}, controls.prompts or [[] for _ in range(n)]
    carried = {key: given[key] if key in given else p.start_prompts(prompts)
               for key, p in carriers(controls).items()} or None
    return Beam(np.arange(n), np.zeros(n), np.zeros(n, np.int64), history, recent, carried=carried)


def carriers(controls: Controls) -> dict[int, Any]:
    """The processors that carry a per-row state (a :class:`beamsearch.processors.RowCarrier`:
    see :class:`beamsearch.processors.RowStates`), by ``id``, each once (a caller's as it gave it)."""
    found = {}
    for piece in (*controls.processors, *controls.masks):
        inner = piece.processor if isinstance(piece, model_checks.CheckedProcessor) else piece
        if isinstance(inner, RowCarrier):
            found[id(inner)] = inner
    return found


def score_step(out: Any, beam: Beam, step: int, controls: Controls, trail: GeneratedTokens,
               vocab: int | None, scratch: Any = None) -> tuple[StepScores, Any]:
    """Check the model's output ``(logits, new_state)`` and score it (:func:`score_logits`)."""
    logits, new_state = model_checks.step_output(out)
    return score_logits(logits, beam, step, controls, trail, vocab, scratch), new_state


def score_logits(logits: Any, beam: Beam, step: int, controls: Controls, trail: GeneratedTokens,
                 vocab: int | None, scratch: Any = None) -> StepScores:
    """Turn the model's logits ``[k, V]`` into the step's processed log-probabilities.

    Order (SPEC section 10): the processors (min_new_tokens' eos mask, temperature, top-k,
    n-gram, the user's), log_softmax, the masks (the forced prefix). ``scratch`` is the previous
    step's buffer, reused when its shape and dtype fit (the model's own array, or a view of it,
    is never written).
    """
    backend = backend_of(logits)
    x = backend.compute(logits)
    model_checks.logits_shape(x, beam.size, vocab)
    if vocab is None:
        model_checks.token_ids_below(controls.vocab_checks, int(x.shape[1]))
    processors, masks = _active(controls.processors, step), _active(controls.masks, step)
    ctx = None
    if processors or masks:
        row_input = beam.input if controls.input_of is None else controls.input_of[beam.input]
        ctx = StepContext(step, _history(beam, step, trail), row_input, backend, beam.carried)
    buffer = scratch if scratch is not None and backend.reusable(scratch, x) else None
    if processors:
        assert ctx is not None  # made above for processors or masks
        if x is logits:  # processors may write: never into the model's array
            x = backend.copy(x, out=buffer)
        for processor in processors:  # a support holds while only processors that just mask follow its own
            if not processor.masks_only:
                ctx.support = None
            x = processor(x, ctx)
    # log_softmax into a buffer the search owns: the processed array itself, or the scratch buffer
    logp = backend.log_softmax(x, out=x if x is not logits else buffer)  # --> [k, V]
    bad = np.isnan(backend.column(logp, 0))  # a NaN/+inf/no-finite row comes out all NaN
    if bad.any():
        rows = np.flatnonzero(bad)
        model_checks.bad_rows(backend, logits, rows, processors, ctx)  # raises unless processing emptied them
        logp = backend.fill_rows(logp, rows, NEG_INF)  # left with no finite entry: no extension
    for mask in masks:  # a processor acting after log_softmax (mode "transformers") may set a support too
        if not mask.masks_only and ctx is not None:  # ctx is made whenever there are masks
            ctx.support = None
        logp = mask(logp, ctx)
    if controls.stops is not None and beam.recent is not None:
        rows, tokens = controls.stops.pairs(beam.recent, step)
    else:
        rows = tokens = _NO_PAIRS
    support = None if ctx is None else ctx.support
    return StepScores(backend, logp, beam, Terminals(controls.eos, rows, tokens), step, support)


def _active(pieces: tuple[Any, ...], step: int) -> tuple[Any, ...] | list[Any]:
    """The processors (or masks) that act at this step: a piece whose ``last_step`` is an int is
    a no-op after that step and is skipped (no copy of the logits for it). Every piece has the
    attribute: the built-in ones declare it, and a caller's processor is wrapped with its own
    (``core.model_checks``, None when it declares none)."""
    if not pieces:
        return pieces
    return [p for p in pieces if p.last_step is None or step <= p.last_step]


def apply_selection(beam: Beam, selection: Selection, step: int, controls: Controls, trail: Trail,
                    keep_carried: bool = False
                    ) -> tuple[Beam, np.ndarray, list[tuple[Beam, Candidates, int, bool | np.ndarray]],
                               dict[int, Any] | None]:
    """Extend the kept rows and record what ended.

    Returns:
        The next beam (the rows passed to the next call), their parents (rows of this call), the
        hypotheses that ended at this step: the strategy's, then the live rows of inputs that
        stop now or reached their ``max_steps`` (unfinished); and with ``keep_carried``, where
        some ended and processors carry row states, those hypotheses' row states (else None).
    """
    live = selection.live
    inputs = beam.input[live.parent]
    retire = retiring(inputs, selection.stop, step, controls)
    done: list[tuple[Beam, Candidates, int, bool | np.ndarray]] = []
    if selection.ended.size:
        done.append((beam, selection.ended, step, selection.ended_finished))
    if retire.any():
        done.append((beam, live.take(retire), step, False))
        live = live.take(~retire)
    if keep_carried and done and beam.carried is not None:
        carried, ended = carried_with_ended(beam.carried, live, [chosen for _, chosen, _, _ in done])
        return extend(beam, live, trail, carried), live.parent, done, ended
    return extend(beam, live, trail), live.parent, done, None


def extend(beam: Beam, live: Candidates, trail: Trail, carried: dict[int, Any] | None = None) -> Beam:
    """The rows of the next call: ``live`` (``[k']`` extensions of ``beam``'s rows), their
    back-pointers added to ``trail``, each row one token longer (its history and recent tokens
    too, its processors' row states too, unless given as ``carried``) and its strategy tags kept."""
    parent = live.parent
    with np.errstate(invalid="ignore"):  # -inf - -inf: a teacher-forced path already at -inf
        trail.add(live.token, parent, live.logprob - beam.logprob[parent])
    carried = extend_carried(beam.carried, live) if carried is None else carried
    return Beam(beam.input[parent], live.logprob, live.token, extend_history(beam, live),
                extend_recent(beam.recent, live), live.tags, carried)


def extend_carried(carried: dict[int, Any] | None, live: Candidates) -> dict[int, Any] | None:
    """The kept rows' processor row states: each parent's taken (forked where a parent has
    several children), then advanced by the row's new token. The parents' states are consumed."""
    if carried is None:
        return None
    return {key: select_state(rows, live.parent).advance(live.token) for key, rows in carried.items()}


def carried_with_ended(carried: dict[int, Any], live: Candidates, ended: list[Candidates]
                       ) -> tuple[dict[int, Any], dict[int, Any]]:
    """The processor row states of the kept rows ``live`` and of the hypotheses that ended
    (``ended``, in production order), each advanced by its token: one gather of both's parents
    (a parent with children in both is forked, never shared), then parted."""
    parent = np.concatenate([live.parent, *[c.parent for c in ended]])
    token = np.concatenate([live.token, *[c.token for c in ended]])
    first, rest = np.arange(live.size), np.arange(live.size, parent.shape[0])
    both = {key: select_state(rows, parent).advance(token) for key, rows in carried.items()}
    return ({key: select_state(rows, first) for key, rows in both.items()},
            {key: select_state(rows, rest) for key, rows in both.items()})


def retiring(inputs: np.ndarray, stop: np.ndarray | None, step: int, controls: Controls) -> np.ndarray:
    """bool ``[j]``: which kept rows (of ``inputs [j]``) end here unfinished: their input stops
    now (``stop [N]``) or reached its ``max_steps``."""
    retire = controls.max_steps[inputs] <= step
    if stop is not None:
        retire |= stop[inputs]
    return retire


def extend_history(beam: Beam, live: Candidates) -> np.ndarray | None:
    """The kept rows' histories, one column wider: ``[k', P + t]`` after step t, the new token
    last. The kept rows are gathered by parent every step anyway (a copy of the filled columns,
    as with a preallocated buffer), so the matrix is exactly as wide as what it holds: memory in
    proportion to the tokens produced, never to ``max_steps``."""
    if beam.history is None:
        return None
    filled = beam.history.shape[1]
    history = np.empty((live.size, filled + 1), np.int64)
    history[:, :filled] = beam.history[live.parent]
    history[:, filled] = live.token
    return history


def extend_recent(recent: np.ndarray | None, live: Candidates) -> np.ndarray | None:
    """The kept rows' last w generated tokens, the new one last (None without stop sequences)."""
    if recent is None:
        return None
    if recent.shape[1] == 0:  # one-token stop sequences only: nothing to remember
        return recent[live.parent]
    out = np.empty_like(recent, shape=(live.size, recent.shape[1]))
    out[:, :-1] = recent[live.parent, 1:]
    out[:, -1] = live.token
    return out


def _history(beam: Beam, step: int, trail: GeneratedTokens) -> Any:
    """``ctx.history``: prompt + generated when kept, else generated only, rebuilt lazily."""
    if beam.history is not None:
        return beam.history
    return lambda: trail.generated(np.arange(beam.size), step)


def indexer(like: Any) -> Callable[[np.ndarray], Any]:
    """int64 host arrays -> ``y_prev`` / reorder indices in the state's library (and device)."""
    if like is None:
        return lambda a: np.ascontiguousarray(a, dtype=np.int64)
    backend = backend_of(like)
    return lambda a: backend.index(a, like)
