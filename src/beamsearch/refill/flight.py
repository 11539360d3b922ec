"""The loop of a refill stream: its state (:class:`Flight`: the inputs waiting, the cohorts in
flight and their joint state) and the phases of one step, as its methods."""

from __future__ import annotations

import collections
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np

from beamsearch.backends import backend_of, first_foreign_leaf
from beamsearch.core import model_checks
from beamsearch.core.engine import Search, StepFn, indexer, reorder
from beamsearch.core.plan import Plan
from beamsearch.core.state import concat_state
from beamsearch.refill.records import Decoded, Input, StreamStats

Read = Callable[[int, Any, "int | None"], "Input | Decoded"]
"""``read(position, item, vocab)``: one item validated alone, an :class:`Input` or an error result."""

Join = Callable[[list[Input]], "tuple[Cohort, Any]"]
"""``join(group)``: a cohort for the inputs ``group`` and their first rows (``make_state``'s)."""


class Cohort:
    """Inputs that joined at one call: one engine search over their rows.

    Attributes:
        inputs: the inputs, in row order.
        plan: their plan; ``search``: its search.
        alive: bool ``[n]``: inputs not yet yielded.
        dropped: set before the first step when an input's token ids are outside ``[0, V)``.
    """

    def __init__(self, inputs: list[Input], plan: Plan) -> None:
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
        return [Decoded(self.inputs[i].index, h, None, d) for i, h, d in zip(now.tolist(), hyps, info, strict=True)]


_END = object()


class Flight:
    """The state of a stream's loop, between its phases. One step of the loop is, in order:
    :meth:`admit` (read inputs while they fit), :meth:`join` (they start cohorts), then, while
    any cohort is in flight, :meth:`call` (the one model call) and :meth:`retire` (each cohort
    advances; the inputs that stopped are yielded; the state is reordered); with none,
    :meth:`end`. The phases that are generators yield results as they come (the stream is lazy).

    Attributes:
        stats: the stream's :class:`~beamsearch.refill.StreamStats`, counted here.
        rows: the rows one input reserves (its beam size); ``join_rows``: the room a join waits
            for while cohorts are in flight; ``budget``: ``max_tokens`` (None: none).
        waiting: inputs read and valid, not yet joined (stream order).
        cohorts: the cohorts in flight, in the order of their row blocks.
        state, tokens: the joint state and ``y_prev`` of their rows (None and ``[]`` with none).
        index: the indexer of the state's arrays (None before the first join).
        vocab: V, known from the first model call on (None before).
        reserved: rows reserved by the inputs in flight.
        held: stream position -> width (prompt + max_steps), of the inputs in flight.
        position: the stream position of the next item read.
        exhausted: whether the iterable is done; ``failure``: its own error, if it raised one
            (raised once the inputs in flight are out).
    """

    def __init__(self, stats: StreamStats, rows: int, join_rows: int, budget: int | None) -> None:
        self.stats, self.rows, self.join_rows, self.budget = stats, rows, join_rows, budget
        self.waiting: collections.deque[Input] = collections.deque()
        self.cohorts: list[Cohort] = []
        self.state: Any = None
        self.tokens = np.zeros(0, np.int64)
        self.index: Callable[[np.ndarray], Any] | None = None
        self.vocab: int | None = None
        self.reserved, self.position, self.exhausted = 0, 0, False
        self.failure: Exception | None = None
        self.held: dict[int, int] = {}

    def admit(self, inputs: Iterator[Any], read: Read) -> Generator[Decoded, None, list[Input]]:
        """Read inputs lazily (one item at a time, only when it fits) and take those that join at
        this call: while their rows fit ``max_rows`` (with cohorts in flight, only once there is
        room for ``join_rows``) and, in stream order, their padded tokens fit the budget. Yields
        the error results of bad items as they are read; returns the inputs joining."""
        joining: list[Input] = []
        room = self.stats.max_rows - self.reserved
        if self.cohorts and room < self.join_rows:
            room = 0  # wait for min_join inputs' room
        while room >= self.rows:
            if not self.waiting:
                item = self._next_item(inputs)
                if item is _END:
                    break
                result = read(self.position, item, self.vocab)
                self.position += 1
                if isinstance(result, Decoded):
                    yield self.count(result)
                    continue
                self.waiting.append(result)
            if self.budget is not None and (self.reserved + self.rows) * max(
                    [self.waiting[0].width, *self.held.values()]) > self.budget:
                break  # in stream order: the next input waits until the padded rows fit
            joining.append(self.waiting.popleft())
            self.reserved, room = self.reserved + self.rows, room - self.rows
            self.held[joining[-1].index] = joining[-1].width
        return joining

    def _next_item(self, inputs: Iterator[Any]) -> Any:
        """The iterable's next item, or ``_END`` (it is exhausted, or raised: ``failure``)."""
        if self.exhausted:
            return _END
        try:
            item = next(inputs, _END)
        except Exception as error:  # the iterable's own error: raised once the inputs in flight are out
            item, self.failure = _END, error
        if item is _END:
            self.exhausted = True
        return item

    def join(self, joining: list[Input], join: Join) -> None:
        """The inputs ``joining`` start their cohorts (``join`` makes each): their first rows are
        appended to the state, their prompts' last tokens to ``tokens``."""
        for group in _groups(joining):
            cohort, init = join(group)
            self.cohorts.append(cohort)
            self.state = init if self.state is None else concat_state([self.state, init])
            self.tokens = np.concatenate([self.tokens, np.array([p[-1] for p in cohort.plan.opts.prompts], np.int64)])
            if self.index is None:
                self.index = indexer(first_foreign_leaf(self.state))

    def end(self) -> None:
        """With no cohort in flight, after :meth:`admit` and :meth:`join`: the stream is over.
        Raises the iterable's own error, if it raised one."""
        if self.failure is not None:
            raise self.failure
        if self.waiting:  # nothing in flight holds rows or tokens: the next input always fits
            raise RuntimeError(f"decode_stream: {len(self.waiting)} inputs wait with nothing in flight "
                               f"(rows reserved {self.reserved}, inputs held {len(self.held)}); this is a bug")

    def call(self, step_fn: StepFn) -> Generator[Decoded, None, tuple[Any, Any]]:
        """The step's one model call on every row in flight, checked and counted. At the first,
        V is known: the inputs' token ids are checked against it (:meth:`_check_ids`); yields the
        errors. Returns the logits ``[k, V]`` as floats (``Backend.compute``) and the new state."""
        assert self.index is not None, "a call follows a join"
        logits, new_state = model_checks.step_output(step_fn(self.state, self.index(self.tokens)))
        x = backend_of(logits).compute(logits)
        model_checks.logits_shape(x, self.tokens.shape[0], self.vocab)
        stats = self.stats
        stats.calls, stats.rows = stats.calls + 1, stats.rows + self.tokens.shape[0]
        stats.mixed_calls += len(self.cohorts) > 1
        if self.vocab is None:  # the first call: the inputs' ids can be checked against V only now
            self.vocab = int(x.shape[1])
            errors, left = self._check_ids(self.vocab)
            self.reserved -= len(left) * self.rows
            for i in left:
                del self.held[i]
            for error in errors:
                yield self.count(error)
        return x, new_state

    def retire(self, x: Any, new_state: Any) -> Iterator[Decoded]:
        """Each cohort advances on its rows' logits of ``x`` (a dropped one is left out); yields
        the inputs that stopped, releasing their rows and tokens; the state is reordered once, by
        the live cohorts' parents shifted by their block offsets."""
        parents, next_tokens, live, offset = [], [], [], 0
        for cohort in self.cohorts:
            k = cohort.search.beam.size
            if cohort.dropped:  # its rows are left out of the reorder
                offset += k
                continue
            parent = cohort.search.advance(x[offset : offset + k])  # --> [k'], rows of its block
            for result in cohort.stopped():
                self.reserved -= self.rows
                del self.held[result.index]
                yield self.count(result)
            if cohort.search.beam.size:
                parents.append(parent + offset)
                next_tokens.append(cohort.search.beam.token)
                live.append(cohort)
            offset += k
        self.cohorts = live
        if self.cohorts:
            assert self.index is not None, "a retire follows a join"
            self.state = reorder(new_state, np.concatenate(parents), offset, self.index)
            self.tokens = np.concatenate(next_tokens)
        else:
            self.state, self.tokens = None, np.zeros(0, np.int64)

    def _check_ids(self, vocab: int) -> tuple[list[Decoded], list[int]]:
        """At the first call: each input's token ids against ``[0, vocab)``. A cohort with a bad
        input is dropped before its first step (its rows are left out of the reorder): the bad
        inputs' errors are returned, the others go back to the front of ``waiting`` and join the
        next call as a new cohort (``make_state`` is called for them again).

        Returns:
            The errors, and the stream positions of the inputs that left the dropped cohorts
            (their rows and tokens are released).
        """
        errors, again, left = [], [], []
        for cohort in self.cohorts:
            bad = []
            for i in cohort.inputs:  # setup of the first call: a few ids per input
                try:
                    model_checks.token_ids_below(i.vocab_checks, vocab)
                except ValueError as error:
                    bad.append(Decoded(i.index, [], error))
            if bad:
                cohort.dropped = True
                errors += bad
                failed = {d.index for d in bad}
                again += [i for i in cohort.inputs if i.index not in failed]
                left += [i.index for i in cohort.inputs]
        self.waiting.extendleft(reversed(again))
        return errors, left

    def count(self, result: Decoded) -> Decoded:
        """``result``, counted in ``stats`` (an input yielded, and an error if it is one)."""
        self.stats.inputs += 1
        self.stats.errors += result.error is not None
        return result


def _groups(joining: list[Input]) -> list[list[Input]]:
    """The inputs joining at one call, as cohorts: one, or (stochastic) one of the inputs with
    their own seed and one of those using the stream's seed (their noise entropies differ in
    width), each in stream order."""
    if not joining:
        return []
    own = [i for i in joining if "seed" in i.fields]
    if not own or len(own) == len(joining):
        return [joining]
    return [[i for i in joining if "seed" not in i.fields], own]
