"""Refill (continuous batching): :func:`decode_stream` decodes a stream of inputs with one model
call per step for the rows of every input in flight, and lets new inputs join as others stop.

Cohorts. Inputs that join at the same model call form a cohort: an ordinary engine search
(:class:`beamsearch.core.engine.Search` with its own :class:`~beamsearch.core.plan.Plan`: its own
controls and per-input arrays, strategy state, trail and step counter). Every step the runner
makes ONE model call: the state is the cohorts' row blocks one after the other (cohort order),
``y_prev`` their tokens; the logits are cut back into the cohorts' row ranges (slices: views on
numpy and torch), each cohort scores, selects and advances as a batch of its own would, and the
state is reordered once, by the cohorts' parents shifted by their block offsets. Joining inputs'
first rows (``make_state``) are appended with :func:`beamsearch.core.state.concat_state`. An input's
result is therefore, by construction, the one it gets when decoded alone; every strategy and
control runs unchanged.

Rows. An input reserves its beam size (the most rows it can hold at a step) from joining to
stopping, and joins only when that fits ``max_rows``, so no call passes more than ``max_rows``
rows. The input iterable is read one item at a time, only when there is room for it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from beamsearch.core import model_checks
from beamsearch.core import validate as check
from beamsearch.backends import backend_of, first_foreign_leaf
from beamsearch.modes.constrained import constrained_plan
from beamsearch.modes.diverse import diverse_plan
from beamsearch.core.engine import Search, StepFn, indexer, reorder
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.plan import Plan
from beamsearch.modes.beam import beam_plan, greedy_plan
from beamsearch.core.state import concat_state
from beamsearch.modes.stochastic import base_seed, stochastic_plan

__all__ = ["Decoded", "Stream", "StreamStats", "decode_stream"]

MakeState = Callable[[list[Any]], Any]
"""``make_state(items) -> state`` with one row per item (the items as the stream gave them)."""


@dataclass(frozen=True)
class Decoded:
    """One input's result from :func:`decode_stream`.

    Attributes:
        index: the input's position in the input iterable (0 for the first).
        hypotheses: its hypotheses, best first, as the mode's batch function returns them for it
            (empty when ``error`` is set).
        error: None, or the ``ValueError`` / ``TypeError`` its arguments raised (the input was
            not decoded; the stream goes on).
        info: what the mode reports per input beside the hypotheses (stochastic: ``kappa``).
    """

    index: int
    hypotheses: list[Hypothesis]
    error: Exception | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamStats:
    """Counts of a :class:`Stream` so far.

    Attributes:
        max_rows: the row budget per model call.
        calls: model calls made.
        rows: rows passed, over all calls.
        mixed_calls: calls whose rows came from more than one cohort (inputs that joined at
            different calls).
        cohorts: cohorts started (each a set of inputs joining at one call).
        inputs: results yielded (errors included).
        errors: results yielded with an error.
        max_tokens: the token budget per model call (None: none).
    """

    max_rows: int
    calls: int = 0
    rows: int = 0
    mixed_calls: int = 0
    cohorts: int = 0
    inputs: int = 0
    errors: int = 0
    max_tokens: int | None = None

    @property
    def rows_per_call(self) -> float:
        """Mean rows per model call (0 before the first)."""
        return self.rows / self.calls if self.calls else 0.0

    @property
    def utilisation(self) -> float:
        """``rows_per_call / max_rows``: how full the calls were, 1 at best."""
        return self.rows_per_call / self.max_rows


@dataclass(frozen=True)
class _Mode:
    """A search mode under refill: its plan function and the per-input keys an item may carry
    (besides ``prompt``, ``max_steps``)."""

    plan: Callable[..., Plan]
    keys: frozenset[str]
    stream_only: frozenset[str] = frozenset()  # the mode's keywords consumed by the stream itself


_PER_INPUT = frozenset({"prefix", "constraints"})
"""Keywords that are per input by nature: given in the items, never to the stream."""

MODES = {
    "beam": _Mode(beam_plan, frozenset({"prefix"})),
    "greedy": _Mode(greedy_plan, frozenset({"prefix"})),
    "constrained": _Mode(constrained_plan, frozenset({"prefix", "constraints"})),
    "diverse": _Mode(diverse_plan, frozenset({"prefix"})),
    "stochastic": _Mode(stochastic_plan, frozenset({"seed"}), frozenset({"seed", "rng"})),
}
"""``mode`` name -> the batch function whose keywords ``decode_stream`` takes: ``beam`` is
``beam_search_batch``, ``greedy`` greedy decoding (:func:`beamsearch.modes.beam.greedy_plan`: what
``generate`` does for ``num_beams=1``), ``constrained`` ``constrained_beam_search``, ``diverse``
``diverse_beam_search``, ``stochastic`` ``stochastic_beam_search``."""


@dataclass(frozen=True)
class _Input:
    """An input read from the stream and validated alone: its index, its fields (``prompt`` and
    the per-input keys it gave) and the item as given (what ``make_state`` gets)."""

    index: int
    fields: dict[str, Any]
    item: Any
    plan: Plan
    width: int  # the most positions one of its rows can hold: prompt + max_steps


class _Cohort:
    """Inputs that joined at one call: one engine search over their rows.

    Attributes:
        inputs: the inputs, in row order.
        plan: their plan; ``search``: its search.
        alive: bool ``[n]``: inputs not yet yielded.
        dropped: set before the first step when an input's token ids are outside ``[0, V)``.
    """

    def __init__(self, inputs: list[_Input], plan: Plan) -> None:
        self.inputs, self.plan = inputs, plan
        self.search = Search(len(inputs), plan.strategy, plan.opts.controls)
        self.alive = np.ones(len(inputs), bool)
        self.dropped = False

    def stopped(self) -> list[Decoded]:
        """The results of the inputs that stopped at the last step (no live row left)."""
        has_rows = np.zeros(self.alive.shape[0], bool)
        has_rows[self.search.beam.input] = True
        now = np.flatnonzero(self.alive & ~has_rows)
        if now.size == 0:
            return []
        self.alive &= has_rows
        outcome = self.search.outcome()
        hyps, info = self.plan.hypotheses(outcome, now), self.plan.info(outcome, now)
        return [Decoded(self.inputs[i].index, h, None, d) for i, h, d in zip(now.tolist(), hyps, info)]


class Stream(Iterator[Decoded]):
    """The iterator :func:`decode_stream` returns: :class:`Decoded` results as inputs stop.

    Attributes:
        stats: a :class:`StreamStats`, updated as the stream runs (rows per call, utilisation).
    """

    def __init__(self, step_fn: StepFn, make_state: MakeState, inputs: Iterable[Any], max_rows: int,
                 min_join: int, mode: _Mode, search: dict[str, Any], seed: int | None,
                 max_tokens: int | None = None) -> None:
        self._step_fn, self._make_state, self._mode = step_fn, make_state, mode
        self._max_tokens = max_tokens
        self._search, self._seed = search, seed
        self._rows = self._plan([], np.zeros(0, np.int64)).rows_per_input  # validates the keywords
        if self._rows > max_rows:
            raise ValueError(f"max_rows={max_rows} is smaller than the rows one input may need "
                             f"({self._rows}, its beam size); raise max_rows or lower the beam")
        self._join_rows = min(min_join, max_rows // self._rows) * self._rows  # the room a join waits for
        self.stats = StreamStats(max_rows, max_tokens=max_tokens)
        self._run = self._decode(iter(inputs))

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Decoded:
        return next(self._run)

    def close(self) -> None:
        """Stop decoding (nothing more is read from the inputs)."""
        self._run.close()

    def _plan(self, fields: list[dict[str, Any]], index: np.ndarray) -> Plan:
        """The plan of inputs ``fields`` (at stream positions ``index``): the stream's keywords
        with each input's own ``max_steps``, ``prefix``, ``constraints`` or ``seed``."""
        kwargs = per_input(self._search, fields)
        if "constraints" in self._mode.keys:
            kwargs["constraints"] = [f.get("constraints", []) for f in fields]
        if "seed" in self._mode.keys:
            if fields and all("seed" in f for f in fields):  # per-input seeds: noise from (seed_i,)
                kwargs["seed"] = [f["seed"] for f in fields]
            else:  # the stream's seed s: noise from (s, stream position)
                kwargs["seed"], kwargs["positions"] = self._seed, index
        return self._mode.plan([f["prompt"] for f in fields], **kwargs)

    def _read(self, index: int, item: Any, vocab: int | None) -> _Input | Decoded:
        """Validate one item alone (and its token ids, once V is known): an input, or an error."""
        try:
            fields = _fields(item, self._mode.keys)
            plan = self._plan([fields], np.array([index]))
            if vocab is not None:
                model_checks.token_ids_below(plan.opts.controls.vocab_checks, vocab)
            width = self._width(plan)
        except (TypeError, ValueError) as error:
            return Decoded(index, [], error)
        return _Input(index, fields, item, plan, width)

    def _width(self, plan: Plan) -> int:
        """The most positions one row of an input can hold, prompt + max_steps. Raises when its
        rows alone (rows x that) are over ``max_tokens``."""
        prompt, steps = len(plan.opts.prompts[0]), int(plan.opts.controls.max_steps[0])
        if self._max_tokens is not None and self._rows * (prompt + steps) > self._max_tokens:
            raise ValueError(f"the input needs {self._rows * (prompt + steps)} tokens ({self._rows} rows x (prompt "
                             f"{prompt} + max_steps {steps})), more than max_tokens={self._max_tokens}")
        return prompt + steps

    def _decode(self, inputs: Iterator[Any]) -> Iterator[Decoded]:
        stats, rows = self.stats, self._rows
        waiting: collections.deque[_Input] = collections.deque()  # read, valid, not yet joined
        cohorts: list[_Cohort] = []
        state, tokens, index, vocab = None, np.zeros(0, np.int64), None, None
        reserved, position, exhausted, failure = 0, 0, False, None
        held: dict[int, int] = {}  # stream position -> width (prompt + max_steps), of the inputs in flight
        budget = self._max_tokens
        while True:
            joining = []
            room = stats.max_rows - reserved
            if cohorts and room < self._join_rows:
                room = 0  # wait for min_join inputs' room
            while room >= rows:  # read lazily: one item at a time, only when it fits
                if not waiting:
                    if exhausted:
                        break
                    try:
                        item = next(inputs, _END)
                    except Exception as error:  # the iterable's own error: raised once the inputs in flight are out
                        item, failure = _END, error
                    if item is _END:
                        exhausted = True
                        break
                    read = self._read(position, item, vocab)
                    position += 1
                    if isinstance(read, Decoded):
                        yield self._count(read)
                        continue
                    waiting.append(read)
                if budget is not None and (reserved + rows) * max([waiting[0].width, *held.values()]) > budget:
                    break  # in stream order: the next input waits until the padded rows fit
                joining.append(waiting.popleft())
                reserved, room = reserved + rows, room - rows
                held[joining[-1].index] = joining[-1].width
            for group in _groups(joining):
                cohort, init = self._join(group)
                cohorts.append(cohort)
                state = init if state is None else concat_state([state, init])
                tokens = np.concatenate([tokens, [p[-1] for p in cohort.plan.opts.prompts]]).astype(np.int64)
                if index is None:
                    index = indexer(first_foreign_leaf(state))
            if not cohorts:
                if failure is not None:
                    raise failure
                if waiting:  # nothing in flight holds rows or tokens: the next input always fits
                    raise RuntimeError(f"decode_stream: {len(waiting)} inputs wait with nothing in flight "
                                       f"(rows reserved {reserved}, inputs held {len(held)}); this is a bug")
                return
            logits, new_state = model_checks.step_output(self._step_fn(state, index(tokens)))
            x = backend_of(logits).compute(logits)
            model_checks.logits_shape(x, tokens.shape[0], vocab)
            stats.calls, stats.rows = stats.calls + 1, stats.rows + tokens.shape[0]
            stats.mixed_calls += len(cohorts) > 1
            if vocab is None:  # the first call: the inputs' ids can be checked against V only now
                vocab = int(x.shape[1])
                errors, left = self._check_ids(cohorts, vocab, waiting)
                reserved -= len(left) * rows
                for i in left:
                    del held[i]
                for error in errors:
                    yield self._count(error)
            parents, next_tokens, live, offset = [], [], [], 0
            for cohort in cohorts:
                k = cohort.search.beam.size
                if cohort.dropped:  # its rows are left out of the reorder
                    offset += k
                    continue
                parent = cohort.search.advance(x[offset : offset + k])  # --> [k'], rows of its block
                for result in cohort.stopped():
                    reserved -= rows
                    del held[result.index]
                    yield self._count(result)
                if cohort.search.beam.size:
                    parents.append(parent + offset)
                    next_tokens.append(cohort.search.beam.token)
                    live.append(cohort)
                offset += k
            cohorts = live
            if cohorts:
                state = reorder(new_state, np.concatenate(parents), offset, index)
                tokens = np.concatenate(next_tokens)
            else:
                state, tokens = None, np.zeros(0, np.int64)

    def _join(self, group: list[_Input]) -> tuple[_Cohort, Any]:
        """A cohort for the inputs ``group`` and their first rows, from ``make_state``."""
        plan = self._plan([i.fields for i in group], np.array([i.index for i in group]))
        init = self._make_state([i.item for i in group])
        model_checks.state_rows(init, len(group), "make_state(items)")
        self.stats.cohorts += 1
        return _Cohort(group, plan), init

    def _check_ids(self, cohorts: list[_Cohort], vocab: int, waiting: collections.deque[_Input]
                   ) -> tuple[list[Decoded], list[int]]:
        """At the first call: each input's token ids against ``[0, V)``. A cohort with a bad
        input is dropped before its first step (its rows are left out of the reorder): the bad
        inputs' errors are returned, the others go back to the front of ``waiting`` and join the
        next call as a new cohort (``make_state`` is called for them again).

        Returns:
            The errors, and the stream positions of the inputs that left the dropped cohorts
            (their rows and tokens are released).
        """
        errors, again, left = [], [], []
        for cohort in cohorts:
            bad = []
            for i in cohort.inputs:  # setup of the first call: a few ids per input
                try:
                    model_checks.token_ids_below(i.plan.opts.controls.vocab_checks, vocab)
                except ValueError as error:
                    bad.append(Decoded(i.index, [], error))
            if bad:
                cohort.dropped = True
                errors += bad
                failed = {d.index for d in bad}
                again += [i for i in cohort.inputs if i.index not in failed]
                left += [i.index for i in cohort.inputs]
        waiting.extendleft(reversed(again))
        return errors, left

    def _count(self, result: Decoded) -> Decoded:
        self.stats.inputs += 1
        self.stats.errors += result.error is not None
        return result


_END = object()


def per_input(search: dict[str, Any], fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch function's keywords for inputs ``fields``: ``search`` with each input's own
    ``max_steps`` (``search["max_steps"]`` where it gives none) and, where any gives one, each
    input's ``prefix`` (none: ``[]``)."""
    kwargs = dict(search, max_steps=[f.get("max_steps", search["max_steps"]) for f in fields])
    if any("prefix" in f for f in fields):
        kwargs["prefix"] = [f.get("prefix", []) for f in fields]
    return kwargs


_COMMON = frozenset({"prompt", "max_steps", "source"})
"""The keys every input dict may have; ``source`` is anything, for ``make_state`` only."""


def _fields(item: Any, keys: frozenset[str]) -> dict[str, Any]:
    """An item's fields: a prompt (a sequence of token ids), or a dict with ``prompt`` and the
    per-input keys ``max_steps``, ``source`` and ``keys``."""
    if isinstance(item, dict):
        unknown = sorted(set(item) - _COMMON - keys)
        if unknown:
            allowed = ", ".join(sorted(_COMMON | keys))
            raise ValueError(f"input has the key {unknown[0]!r}; an input dict takes {allowed}")
        if "prompt" not in item:
            raise ValueError(f"input dict needs a 'prompt' (token ids); got the keys {sorted(item)}")
        return dict(item)
    return {"prompt": item}


def _groups(joining: list[_Input]) -> list[list[_Input]]:
    """The inputs joining at one call, as cohorts: one, or (stochastic) one of the inputs with
    their own seed and one of those using the stream's seed (their noise entropies differ in
    width), each in stream order."""
    if not joining:
        return []
    own = [i for i in joining if "seed" in i.fields]
    if not own or len(own) == len(joining):
        return [joining]
    return [[i for i in joining if "seed" not in i.fields], own]


def decode_stream(step_fn: StepFn, make_state: MakeState, inputs: Iterable[Any], *, max_rows: int,
                  max_tokens: int | None = None, min_join: int = 1, mode: str = "beam", **search: Any) -> Stream:
    """Decode a stream of inputs with refill (continuous batching); results come as inputs stop.

    One model call per step for the live rows of every input in flight (at most ``max_rows``);
    when inputs stop, new ones join the running search at the next call. Each input's result is
    the one the mode's batch function gives it decoded alone (or in any batch: inputs are
    independent), for every mode and control.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``; the state holds
            the rows of inputs that joined at different calls, one block per cohort.
        make_state: ``make_state(items) -> state`` with one row per item (axis 0 of every array
            leaf), called once per cohort with the items joining (as the stream gave them). The
            states of cohorts are joined by :func:`~beamsearch.concat_state`: a state whose leaves
            differ beyond axis 0 between cohorts (a cache or memory of another length) needs a
            registered concatenation that pads (``concat_state.register``, ``pad_axis``).
        inputs: an iterable, read lazily (one item when there is room for it): each item is a
            prompt (token ids), or a dict with ``prompt`` and per-input ``max_steps``, ``prefix``
            (not for stochastic), ``constraints`` (constrained) or ``seed`` (stochastic), and
            ``source``: anything, left to ``make_state`` (the text or ids an encoder reads).
        max_rows: the most rows per model call, >= the beam size: an input joins only when its
            beam size fits beside the beam sizes of the inputs in flight.
        max_tokens: None, or the most decoder tokens the rows of one call may hold, padding
            included (what a KV cache shared by rows of different lengths holds: every row as wide
            as the widest). A row of an input holds at most ``len(prompt) + its max_steps``
            positions; an input joins, in stream order, only when ``(rows in flight + its beam
            size) x (the widest such width in flight, its own included)`` fits; an input whose
            own rows need more is an error result (the stream goes on). An encoder's side (its
            output, a cross-attention cache) is not counted.
        min_join: >= 1; new inputs join only when at least this many fit at once (or nothing is
            in flight). Each cohort costs the search a fixed overhead per step (its own scoring and
            selection), so joining a few at a time can be faster than keeping every call full;
            1 joins each input as soon as it fits. Results never depend on it.
        mode: ``"beam"`` (:func:`~beamsearch.beam_search_batch`), ``"greedy"`` (one row per
            input, :func:`beamsearch.modes.beam.greedy_plan`), ``"constrained"``,
            ``"diverse"`` or ``"stochastic"`` (the ``*_beam_search`` functions).
        **search: the mode function's keywords (``max_steps`` is required: the default of the
            inputs that give none), except ``callback``/``trace``/``trace_width`` and the per-input
            ``prefix`` and ``constraints``. Stochastic: ``seed`` (an int) or ``rng`` gives one
            seed s (fresh entropy with neither), and the input at position i of the stream gets
            the noise it gets from ``stochastic_beam_search(all inputs, seed=s)``; an input
            dict's own ``seed`` gives it the noise of ``seed=[its seed]`` alone. Either way its
            noise does not depend on when it joined.

    Returns:
        A :class:`Stream`: an iterator of :class:`Decoded` (``index``, ``hypotheses``, ``error``,
        ``info``), one per input, in the order inputs stop; ``stream.stats`` counts calls and
        rows (``utilisation`` = mean rows per call / ``max_rows``).

    Raises:
        ValueError / TypeError, here, before any model call: a bad ``max_rows`` or one input's
        beam larger than it, an unknown mode, a bad keyword. An input whose own arguments are bad
        (a bad item, ``max_steps``, ``prefix``, ``constraints``, ``seed``, a token id outside
        ``[0, V)``) is not an exception: its :class:`Decoded` carries the ``error`` and the stream
        goes on. An error of the model (``step_fn``, ``make_state``, the logits) ends the stream.
    """
    max_rows = check.at_least("max_rows", max_rows, 1)
    if max_tokens is not None:
        max_tokens = check.at_least("max_tokens", max_tokens, 1)
    min_join = check.at_least("min_join", min_join, 1)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}; got {mode!r}")
    for name in ("callback", "trace", "trace_width"):
        if name in search:
            raise TypeError(f"decode_stream does not take {name} (a step record covers one batch); got {name}=")
    for name in sorted(_PER_INPUT & set(search)):
        raise ValueError(f"{name} is per input: give it in each input's dict ({{'prompt': ..., '{name}': ...}}), "
                         f"not to decode_stream; got {name}={search[name]!r:.60}")
    if "positions" in search:
        raise TypeError("decode_stream does not take positions (each input's position in the stream is used)")
    kind = MODES[mode]
    seed = None
    if kind.stream_only:
        if isinstance(search.get("seed"), (list, tuple, np.ndarray)):
            raise ValueError("seed of decode_stream is one int; per-input seeds go in the input dicts "
                             f"({{'prompt': ..., 'seed': ...}}); got seed={search['seed']!r:.60}")
        seed = base_seed(search.pop("rng", None), search.pop("seed", None))
    if "max_steps" not in search:
        raise TypeError("decode_stream needs max_steps (an int: the default of inputs that give none)")
    return Stream(step_fn, make_state, inputs, max_rows, min_join, kind, search, seed, max_tokens)
