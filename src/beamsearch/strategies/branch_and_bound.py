"""The branch and bound of :func:`beamsearch.exact_search` (its definition and the search's order
are in :mod:`beamsearch.modes.exact`'s docstring): prefixes expanded step by step, best bound first,
in model calls of at most ``batch_rows`` rows, each pruned when its bound cannot beat the input's
incumbent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, first_foreign_leaf
from beamsearch.core.beam import Beam, Candidates, Ended, Trail
from beamsearch.core.engine import Outcome, StepFn, extend, indexer, reorder, score_step, start_beam
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.penalties import score
from beamsearch.core.results import build, ranking
from beamsearch.core.select import accumulate, positions, ranked_per_input, split_terminals
from beamsearch.core.state import concat_state, take_state

__all__ = ["BranchAndBound", "Meter"]


class Meter:
    """Per input: the model calls that held its rows and the rows passed (int64 ``[N]`` each)."""

    def __init__(self, n: int) -> None:
        self.calls = np.zeros(n, np.int64)
        self.rows = np.zeros(n, np.int64)

    def count(self, inputs: np.ndarray) -> None:
        rows = np.bincount(inputs, minlength=self.rows.shape[0])
        self.rows += rows
        self.calls += rows > 0

    def wrap(self, step_fn: StepFn) -> StepFn:
        """A step function over ``(state, input ids [k])``: the ids ride along as a state leaf, so
        ``select_state`` keeps them aligned with the rows, and each call is counted."""

        def counted(state: tuple[Any, np.ndarray], y_prev: Any) -> tuple[Any, tuple[Any, np.ndarray]]:
            inner, ids = state
            self.count(ids)
            logits, new_state = step_fn(inner, y_prev)
            return logits, (new_state, ids)

        return counted


class BranchAndBound:
    """The step-by-step branch and bound (module docstring): one instance per search."""

    def __init__(self, step_fn: StepFn, opts: Any, n_best: int, node_budget: int, batch_rows: int,
                 meter: Meter) -> None:
        self.step_fn, self.controls, self.prompts = step_fn, opts.controls, opts.prompts
        self.penalty, self.alpha = opts.penalty, opts.alpha
        self.n_best, self.node_budget, self.batch_rows, self.meter = n_best, node_budget, batch_rows, meter
        self.limit = opts.controls.max_steps  # --> [N], the most tokens of each input
        self.trail = Trail()
        self.eps = float(np.finfo(np.float64).eps)  # of the logits' dtype, once known

    def run(self, init_state: Any, seed_incumbent: np.ndarray) -> tuple[list[list[Hypothesis]], np.ndarray]:
        """Search every input.

        Args:
            seed_incumbent: float64 ``[N]``: the seed's ``n_best``-th finished score (-inf if none).

        Returns:
            Per input, the best outputs found (at most ``n_best``, best first), and bool ``[N]``:
            which inputs were searched within the budget.
        """
        n = self.limit.shape[0]
        proven = np.ones(n, bool)
        best = Ended.empty()
        incumbent = seed_incumbent
        index = indexer(first_foreign_leaf(init_state))
        vocab = None
        roots = Candidates(np.arange(n), np.zeros(n, np.int64), np.zeros(n))  # bound 0: kept unless incumbent >= 0
        keep = self._admit(roots, np.arange(n), incumbent, proven)
        first = replace(start_beam(n, self.controls), token=np.array([p[-1] for p in self.prompts], np.int64))
        beam, state, size, parent = first.take(keep), init_state, n, keep
        for step in range(1, int(self.limit.max()) + 1):
            if beam.size == 0:
                break
            cap = self._cap(beam, step)
            states, ended, children, vocab = self._expand(state, size, parent, beam, step, index, vocab, cap)
            at_limit = self.limit[beam.input[children.parent]] <= step  # these are outputs, not prefixes
            outputs = Ended.concat([(beam, ended, step, True), (beam, children.take(at_limit), step, False)])
            best = Ended.join([best, outputs])
            best = best.take(ranking(best, n, self.penalty, self.alpha, n_best=self.n_best, finished_first=True)[0])
            incumbent = np.maximum(seed_incumbent, self._nth_finished(best))
            children = children.take(~at_limit)
            keep = self._admit(children, beam.input[children.parent], incumbent, proven)
            children = children.take(keep)
            if children.size == 0:
                break
            state, size, parent = concat_state(states), beam.size, children.parent
            beam = extend(beam, children, self.trail)
        outcome = Outcome(best, self.trail)
        return build(outcome, n, self.penalty, self.alpha, n_best=None, finished_first=True), proven

    def _cap(self, beam: Beam, step: int) -> np.ndarray:
        """int64 ``[N]``: how many of this step's non-terminal extensions of each input can still
        matter, the best by bound (ties: production order): at its ``max_steps``, its ``n_best``
        best outputs (their score is their bound); before it, the prefixes its budget has room for
        after this step's rows, and one more (it tells :meth:`_admit` whether the budget cut a
        prefix that beats the incumbent)."""
        after = self.meter.rows + np.bincount(beam.input, minlength=self.limit.shape[0])  # --> [N]
        return np.where(self.limit <= step, self.n_best, np.maximum(self.node_budget - after, 0) + 1)

    def _expand(self, state: Any, size: int, parent: np.ndarray, beam: Beam, step: int,
                index: Callable[[np.ndarray], Any], vocab: int | None, cap: np.ndarray
                ) -> tuple[list[Any], Candidates, Candidates, int | None]:
        """Pass this step's rows to the model, ``batch_rows`` at a time.

        Args:
            state: the previous step's joined model state (``size`` rows); row ``parent[r]`` is row r's.
            cap: int64 ``[N]`` (:meth:`_cap`).

        Returns:
            Each call's new state, and over all calls (``parent`` = the row in ``beam``): the
            finite terminal extensions (production order) and the other finite extensions, in
            production order: at least each input's ``cap[i]`` best by bound (ties: production
            order). They are cut back to those whenever they pass twice ``cap``'s sum over the
            step's inputs, so the step holds about that many plus one call's ``[batch_rows * V]``,
            not every extension of its rows.
        """
        states, ended, children = [], [], []
        held, most = 0, 2 * int(cap[np.unique(beam.input)].sum())
        scratch = None
        starts = range(0, beam.size, self.batch_rows)
        for start in starts:
            part = beam.take(np.arange(start, min(start + self.batch_rows, beam.size)))
            self.meter.count(part.input)
            # every call but the last takes its rows beside the state (only those rows are copied:
            # the call consumes what it is given); the last one reorders the state itself
            rows = parent[start : start + part.size]
            taken = reorder(state, rows, size, index) if start == starts[-1] else take_state(state, index(rows))
            out = self.step_fn(taken, index(part.token))
            scores, new_state = score_step(out, part, step, self.controls, Offset(self.trail, start), vocab, scratch)
            vocab = scores.vocab
            terminal, logp = split_terminals(scores)  # terminal entries of logp are now -inf
            host = scores.backend.to_numpy(logp)  # --> [k', V]: every finite extension is ranked on the host
            self.eps = float(np.finfo(host.dtype).eps)
            rows, tokens = np.nonzero(np.isfinite(host))  # row-major: by row, then token id
            children.append(Candidates(rows + start, tokens, accumulate(scores, rows, host[rows, tokens])))
            held += children[-1].size
            if held > most:
                children = [self._shortlist(Candidates.join(children), beam.input, cap)]
                held = children[0].size
            ended.append(Candidates(terminal.parent + start, terminal.token, terminal.logprob))
            states.append(new_state)
            scratch = logp  # read out already: the next call's buffer
        return states, Candidates.join(ended), Candidates.join(children), vocab

    def _admit(self, prefixes: Candidates, inputs: np.ndarray, incumbent: np.ndarray, proven: np.ndarray) -> np.ndarray:
        """The prefixes to expand at the next step: those whose bound beats their input's
        incumbent, then per input the best by bound (ties: production order) up to its budget;
        an input that loses a prefix to the budget is no longer proven (``proven`` is updated).

        Args:
            prefixes: ``[j]`` candidates (their logprob is the prefix's).
            inputs: int64 ``[j]``: their inputs.
            incumbent: float64 ``[N]``.

        Returns:
            int64 indices into ``prefixes``, in production order.
        """
        bound = score(prefixes.logprob, self.limit[inputs], self.penalty, self.alpha)  # --> [j]
        # A margin of 2 * max_steps * eps (relative): a path's logprob is summed in the logits'
        # precision, so an extension can exceed its prefix's logprob by that much rounding.
        slack = 2.0 * float(self.limit.max()) * self.eps * np.abs(incumbent[inputs])
        beats = np.flatnonzero(bound > incumbent[inputs] - slack)
        order, position = ranked_per_input(bound, inputs, beats)
        ranked = inputs[order]
        room = self.node_budget - self.meter.rows[ranked]
        proven[np.unique(ranked[position >= room])] = False
        return np.sort(order[position < room])

    def _shortlist(self, children: Candidates, row_input: np.ndarray, cap: np.ndarray) -> Candidates:
        """Per input, the ``cap[i]`` best of ``children`` by bound (ties: production order), in
        production order (``row_input``: int64 ``[k]``, the input of each row they extend)."""
        inputs = row_input[children.parent]
        bound = score(children.logprob, self.limit[inputs], self.penalty, self.alpha)  # --> [j]
        order, position = ranked_per_input(bound, inputs, np.arange(children.size))
        return children.take(np.sort(order[position < cap[inputs[order]]]))

    def _nth_finished(self, best: Ended) -> np.ndarray:
        """float64 ``[N]``: the ``n_best``-th finished score of each input in ``best`` (ranked as
        :func:`~beamsearch.core.results.ranking` leaves it), -inf where it has fewer finished."""
        out = np.full(self.limit.shape[0], NEG_INF)
        last = np.flatnonzero((positions(best.input) == self.n_best - 1) & best.finished)  # finished sort first
        out[best.input[last]] = score(best.logprob[last], best.step[last], self.penalty, self.alpha)
        return out


class Offset:
    """The trail seen from one call of a step: its row r is row ``start + r`` of the step (for a
    processor's lazily built history of generated tokens)."""

    def __init__(self, trail: Trail, start: int) -> None:
        self.trail, self.start = trail, start

    def generated(self, rows: np.ndarray, step: int) -> np.ndarray:
        return self.trail.generated(rows + self.start, step)
