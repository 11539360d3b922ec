"""Watching a search: a step callback and a search trace.

Every search takes ``callback=`` and ``trace=`` (keyword-only). Per step the engine hands the
:class:`Tracer` (its observer) the step's scores before the strategy selects, and the selection
after; the tracer makes one :class:`StepRecord` for all inputs at once (numpy arrays, one entry
per row or candidate), passes it to the callback, stops the inputs the callback names, and adds
the record to the :class:`Trace`. With neither a callback nor a trace, no tracer exists and the
search does nothing more than before.

The trace is a tree of prefixes, one node per candidate the search looked at: a root per input
(the empty prefix, step 0), then per step every candidate that was kept (lives on), finished,
ended unfinished (its input stopped or ran out of steps), and each row's ``trace_width`` best
pruned ones. Nodes are columns of numpy arrays, in the order they were made.

Shapes: ``N`` inputs, ``k`` rows of a step's call, ``c`` candidates recorded at a step, ``n``
nodes of a trace, ``T`` the most steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.beam import Candidates, Trail
from beamsearch.core.engine import retiring
from beamsearch.core.penalties import PenaltyFn, score
from beamsearch.core.protocols import Controls, Selection
from beamsearch.core.select import StepScores, accumulate

__all__ = ["STATUS", "STOP_REASONS", "LogprobsCallback", "StepRecord", "SearchTree", "Tracer", "stop_mask", "tracer"]

STATUS = ("root", "kept", "pruned", "finished", "unfinished")
"""Node / candidate status names, indexed by the int8 codes below."""
ROOT, KEPT, PRUNED, FINISHED, UNFINISHED = range(5)

STOP_REASONS = ("", "early_stop", "no_rows", "max_steps", "callback")
"""Why an input stopped, indexed by the int8 codes below ("" = it did not stop)."""
NOT_STOPPED, EARLY_STOP, NO_ROWS, MAX_STEPS, CALLBACK = range(5)


@dataclass(frozen=True)
class StepRecord:
    """One step of a search, for every input at once: what the callback gets.

    Candidates are in this order: the strategy's kept rows (``selection.live``, input-major, in
    rank order), then the hypotheses it ended (production order), then each row's best pruned
    ones (by row, best first).

    Attributes:
        step: t, the number of the token being chosen (1 for the first).
        n_inputs: N.
        row_input: int64 ``[k]``, the input of each row of this step's model call.
        row_logprob: float64 ``[k]``, each row's logprob before this step.
        row_score: float64 ``[k]``, its score (``t - 1`` tokens; 0 at step 1).
        row_node: int64 ``[k]``, each row's node in the trace.
        parent: int64 ``[c]``, the row (position in this call) each candidate extends.
        input: int64 ``[c]``.
        token: int64 ``[c]``, the candidate's new token.
        logprob: float64 ``[c]``, its logprob (the row's plus the token's).
        token_logprob: float64 ``[c]``, the token's processed log-probability.
        score: float64 ``[c]``, its score (``t`` tokens) under the search's length penalty.
        status: int8 ``[c]``, ``KEPT``, ``FINISHED``, ``UNFINISHED`` or ``PRUNED`` (names in
            :data:`STATUS`). In the record the callback gets, the rows of inputs the callback
            stops are still ``KEPT``; the trace records them ``UNFINISHED``.
        node: int64 ``[c]``, each candidate's node in the trace.
        stop_reason: int8 ``[N]``, why each input stops at this step (names in
            :data:`STOP_REASONS`; 0: it does not, or it stopped before).
        logprobs: the step's processed log-probabilities ``[k, V]`` (a copy on the logits'
            backend, the rows as ``row_input``), for a callback that is a
            :class:`LogprobsCallback`; None otherwise.
    """

    step: int
    n_inputs: int
    row_input: np.ndarray
    row_logprob: np.ndarray
    row_score: np.ndarray
    row_node: np.ndarray
    parent: np.ndarray
    input: np.ndarray
    token: np.ndarray
    logprob: np.ndarray
    token_logprob: np.ndarray
    score: np.ndarray
    status: np.ndarray
    node: np.ndarray
    stop_reason: np.ndarray
    trail: Trail = dataclasses.field(repr=False)
    logprobs: Any = dataclasses.field(default=None, repr=False)

    def tokens(self, candidates: Sequence[int] | np.ndarray) -> np.ndarray:
        """int64 ``[len(candidates), t]``: the generated tokens (prompt excluded) of the given
        candidates (positions in this record), the new token last. Rebuilt from the back-pointer
        trail: O(t) per candidate."""
        idx = np.asarray(candidates, dtype=np.int64)
        prefix = self.trail.generated(self.parent[idx], self.step)  # --> [len, t - 1]
        return np.concatenate([prefix, self.token[idx, None]], axis=1)

    def best(self) -> np.ndarray:
        """int64 ``[N]``: per input, its best-scoring candidate that was not pruned (kept,
        finished or ended at this step; the first on a tie), or -1 when it has none at this step.
        Stream the current best with ``record.tokens(best[best >= 0])``."""
        out = np.full(self.n_inputs, -1, np.int64)
        on = np.flatnonzero(self.status != PRUNED)
        if on.size:
            order = on[np.lexsort((on, -self.score[on], self.input[on]))]
            first = np.flatnonzero(np.r_[True, self.input[order][1:] != self.input[order][:-1]])
            out[self.input[order[first]]] = order[first]
        return out

    def stopped(self) -> dict[int, str]:
        """The inputs that stop at this step and why (``{input: reason}``)."""
        return {int(i): STOP_REASONS[self.stop_reason[i]] for i in np.flatnonzero(self.stop_reason)}


class SearchTree:
    """The tree a search explored: the data of :class:`beamsearch.viz.Trace` (which adds the
    notebook's picture); pass ``trace=Trace()`` to a search and it is filled.

    After the search every attribute below is a numpy array over the ``n`` nodes, in the order
    the nodes were made (roots first, then step by step in :class:`StepRecord` order).

    Attributes:
        n_inputs: N.
        input: int64 ``[n]``.
        parent: int64 ``[n]``, the parent node (-1 for a root).
        token: int64 ``[n]``, the node's last token (-1 for a root).
        step: int64 ``[n]``, its number of generated tokens (0 for a root).
        logprob, token_logprob, score: float64 ``[n]`` (0 for a root).
        status: int8 ``[n]``: ``ROOT``, ``KEPT``, ``PRUNED``, ``FINISHED``, ``UNFINISHED``.
        rank: int64 ``[n]``: the node's place in its input's results (0 = best), -1 if not returned.
        stop_step: int64 ``[N]``: the step at which each input stopped.
        stop_reason: int8 ``[N]``: why (names in :data:`STOP_REASONS`).
        prompts: per input its prompt token ids (``[]`` for searches started from bos).
    """

    def __init__(self) -> None:
        self._parts: list[StepRecord] = []
        self._used = False  # a search has started filling it
        self.n_inputs = 0
        self.prompts: list[list[int]] = []

    def __len__(self) -> int:
        return int(self.input.shape[0]) if hasattr(self, "input") else 0

    def __repr__(self) -> str:
        return f"Trace({self.n_inputs} inputs, {len(self)} nodes, {int(self.step.max()) if len(self) else 0} steps)"

    def tokens(self, node: int) -> list[int]:
        """The generated tokens of a node's prefix (prompt excluded), first to last."""
        out = []
        while self.parent[node] >= 0:
            out.append(int(self.token[node]))
            node = int(self.parent[node])
        return out[::-1]

    def children(self, node: int) -> np.ndarray:
        """int64: the nodes whose parent is ``node``, in the order they were made."""
        return np.flatnonzero(self.parent == node)

    def best(self, input: int = 0) -> int:
        """The node of input ``input``'s best result (rank 0); -1 when it returned none."""
        hit = np.flatnonzero((self.rank == 0) & (self.input == input))
        return int(hit[0]) if hit.size else -1

    def results(self, input: int = 0) -> np.ndarray:
        """int64: the nodes of input ``input``'s results, best first."""
        nodes = np.flatnonzero((self.rank >= 0) & (self.input == input))
        return nodes[np.argsort(self.rank[nodes])]  # ranks are distinct within an input

    # ---- filled by the Tracer --------------------------------------------------------------------

    def _start(self, n_inputs: int, prompts: Sequence[Sequence[int]] | None) -> None:
        self._used = True
        self.n_inputs = n_inputs
        self.prompts = [list(map(int, p)) for p in prompts] if prompts is not None else [[] for _ in range(n_inputs)]
        self.stop_step = np.zeros(n_inputs, np.int64)
        self.stop_reason = np.zeros(n_inputs, np.int8)

    def _add(self, record: StepRecord) -> None:
        self._parts.append(record)
        stops = record.stop_reason != NOT_STOPPED
        self.stop_step[stops], self.stop_reason[stops] = record.step, record.stop_reason[stops]

    def _finish(self, results: Sequence[Sequence[Any]]) -> None:
        """Concatenate the steps and mark each input's results (``results[i]`` best first)."""
        parts, n = self._parts, self.n_inputs
        self._parts = []
        z = np.zeros(n)
        self.input = np.concatenate([np.arange(n)] + [r.input for r in parts])
        self.parent = np.concatenate([np.full(n, -1)] + [r.row_node[r.parent] for r in parts])
        self.token = np.concatenate([np.full(n, -1)] + [r.token for r in parts])
        self.step = np.concatenate([np.zeros(n, np.int64)] + [np.full(r.token.shape[0], r.step) for r in parts])
        self.logprob = np.concatenate([z] + [r.logprob for r in parts])
        self.token_logprob = np.concatenate([z] + [r.token_logprob for r in parts])
        self.score = np.concatenate([z] + [r.score for r in parts])
        self.status = np.concatenate([np.full(n, ROOT, np.int8)] + [r.status for r in parts])
        self.rank = np.full(self.input.shape[0], -1, np.int64)
        ended = np.flatnonzero((self.status == FINISHED) | (self.status == UNFINISHED))
        paths = self._paths(ended)
        where: dict[tuple[int, tuple[int, ...]], list[int]] = {}  # the same output may end more than
        for v, p in zip(ended.tolist(), paths, strict=True):  # once (diverse search: one per group): in order
            where.setdefault((int(self.input[v]), tuple(p[p >= 0].tolist())), []).append(v)
        for i, hyps in enumerate(results):  # a Python loop over the returned hypotheses, once
            for r, h in enumerate(hyps):
                nodes = where[(i, tuple(h.tokens))]
                self.rank[nodes.pop(0) if len(nodes) > 1 else nodes[0]] = r

    def _paths(self, nodes: np.ndarray) -> np.ndarray:
        """int64 ``[len(nodes), T]``: each node's tokens, right-padded with -1 (one walk up, vectorized)."""
        depth = self.step[nodes]
        out = np.full((nodes.shape[0], int(depth.max(initial=0))), -1, np.int64)
        at = nodes.copy()
        for s in range(out.shape[1], 0, -1):
            on = np.flatnonzero(depth >= s)
            out[on, s - 1] = self.token[at[on]]
            at[on] = self.parent[at[on]]
        return out


class LogprobsCallback:
    """A step callback whose records carry the step's processed log-probabilities
    (:attr:`StepRecord.logprobs`, ``[k, V]``): subclass it and define ``__call__(record)``. Other
    callbacks do not pay for the copy."""

    def __call__(self, record: StepRecord) -> Any:
        raise NotImplementedError


class Tracer:
    """The engine's observer when a search has a callback or a trace (see the module docstring).

    Args:
        n_inputs: N.
        penalty, alpha: the search's length penalty, for scores.
        width: pruned candidates recorded per row (the best ones), >= 0.
        keep: the most candidates a row can have kept at one step (the strategy's beam size plus
            the eos ids): each row's top ``keep + width`` are read before the strategy selects,
            so a row that kept more shows fewer pruned ones (those shown are still its best).
        callback: None, or ``callback(record) -> None | inputs to stop``.
        trace: None, or the :class:`SearchTree` to fill.
        prompts: per input its prompt, or None.
    """

    def __init__(self, n_inputs: int, penalty: PenaltyFn, alpha: float, width: int, keep: int,
                 callback: Callable[[StepRecord], Any] | None, trace: SearchTree | None,
                 prompts: Sequence[Sequence[int]] | None = None) -> None:
        self.n, self.penalty, self.alpha, self.width, self.keep = n_inputs, penalty, alpha, width, keep
        self.callback, self.trace = callback, trace
        self.copy_logprobs = isinstance(callback, LogprobsCallback)
        self.logprobs: Any = None
        self.row_node = np.arange(n_inputs)  # the node of each live row: the roots at step 1
        self.next_node = n_inputs
        if trace is not None:
            trace._start(n_inputs, prompts)

    def before_select(self, scores: StepScores) -> tuple[np.ndarray, np.ndarray] | None:
        """Each row's ``keep + width`` best tokens and their log-probabilities, host ``[k, m]``
        each, read on the backend before the strategy may write into the scores (and, for a
        :class:`LogprobsCallback`, a copy of the scores)."""
        if self.copy_logprobs:
            self.logprobs = scores.backend.copy(scores.logp)
        if self.width == 0:
            return None
        return scores.backend.topk_stable(scores.logp, min(scores.vocab, self.keep + self.width))

    def after_select(self, seen: tuple[np.ndarray, np.ndarray] | None, scores: StepScores, selection: Selection,
                     controls: Controls, trail: Trail) -> Selection:
        """Record the step, call the callback, stop what it names, add the record to the trace."""
        record = self._record(seen, scores, selection, controls, trail)
        if self.callback is not None:
            stop = self._stops(self.callback(record))
            stop &= np.isin(np.arange(self.n), record.row_input) & (record.stop_reason == NOT_STOPPED)
            if stop.any():
                selection = dataclasses.replace(
                    selection, stop=stop if selection.stop is None else selection.stop | stop)
                reason = record.stop_reason.copy()
                reason[stop] = CALLBACK
                live = selection.live.size
                status = record.status.copy()
                status[:live][stop[record.input[:live]]] = UNFINISHED
                record = dataclasses.replace(record, status=status, stop_reason=reason)
        if self.trace is not None:
            self.trace._add(record)
        self.row_node = record.node[record.status == KEPT]  # advance keeps these, in order (only live rows are KEPT)
        self.next_node += record.node.shape[0]
        return selection

    def finish(self, results: Sequence[Sequence[Any]]) -> None:
        """Mark the results in the trace (``results[i]``: input i's hypotheses, best first)."""
        if self.trace is not None:
            self.trace._finish(results)

    def _record(self, seen: tuple[np.ndarray, np.ndarray] | None, scores: StepScores, selection: Selection,
                controls: Controls, trail: Trail) -> StepRecord:
        beam, step = scores.beam, scores.step
        live, ended = selection.live, selection.ended
        live_inputs = beam.input[live.parent]
        status = np.concatenate([
            np.where(retiring(live_inputs, selection.stop, step, controls), UNFINISHED, KEPT),
            np.where(np.broadcast_to(selection.ended_finished, (ended.size,)), FINISHED, UNFINISHED),
        ]).astype(np.int8)
        pruned = self._pruned(seen, scores, live, ended)
        chosen = [live, ended, pruned]
        parent = np.concatenate([c.parent for c in chosen])
        logprob = np.concatenate([c.logprob for c in chosen])
        status = np.concatenate([status, np.full(pruned.size, PRUNED, np.int8)])
        with np.errstate(invalid="ignore"):  # -inf - -inf: a teacher-forced path already at -inf
            token_logprob = logprob - beam.logprob[parent]
        return StepRecord(
            step, self.n, beam.input, beam.logprob,
            score(beam.logprob, np.asarray(max(step - 1, 1)), self.penalty, self.alpha),  # 0 at step 1
            self.row_node, parent, beam.input[parent], np.concatenate([c.token for c in chosen]), logprob,
            token_logprob, score(logprob, np.asarray(step), self.penalty, self.alpha), status,
            self.next_node + np.arange(parent.shape[0]), self._reasons(beam.input, live_inputs, selection.stop, step,
                                                                       controls), trail, self.logprobs)

    def _pruned(self, seen: tuple[np.ndarray, np.ndarray] | None, scores: StepScores, live: Candidates,
                ended: Candidates) -> Candidates:
        """Per row, its best ``width`` finite candidates that were neither kept nor ended."""
        if seen is None:
            return Candidates.empty()
        idx, val = seen  # --> [k, m] each, each row's best first
        vocab = scores.vocab
        chosen = np.concatenate([live.parent * vocab + live.token, ended.parent * vocab + ended.token])
        rows = np.arange(idx.shape[0])[:, None]
        open_ = np.isfinite(val) & ~np.isin(rows * vocab + idx, chosen)  # --> [k, m]
        rank = np.cumsum(open_, axis=1) - 1  # position among the row's open candidates
        row, col = np.nonzero(open_ & (rank < self.width))  # by row, best first
        return Candidates(row, idx[row, col], accumulate(scores, row, val[row, col]))

    def _reasons(self, row_input: np.ndarray, live_inputs: np.ndarray, stop: np.ndarray | None, step: int,
                 controls: Controls) -> np.ndarray:
        """int8 ``[N]``: why each input with rows at this step stops (first that applies: no live row
        left, the strategy's early stop, its max_steps)."""
        present = np.bincount(row_input, minlength=self.n) > 0
        has_live = np.bincount(live_inputs, minlength=self.n) > 0
        reason = np.zeros(self.n, np.int8)
        early = present & has_live & (stop if stop is not None else np.zeros(self.n, bool))
        reason[present & ~has_live] = NO_ROWS
        reason[early] = EARLY_STOP
        reason[present & has_live & ~early & (controls.max_steps <= step)] = MAX_STEPS
        return reason

    def _stops(self, answer: Any) -> np.ndarray:
        """bool ``[N]`` from the callback's answer (:func:`stop_mask`)."""
        return stop_mask(answer, self.n)


def stop_mask(answer: Any, n: int) -> np.ndarray:
    """bool ``[N]`` from a step callback's answer: None, a bool ``[N]`` mask or input ids.

    Raises:
        ValueError / TypeError: an answer of another shape or kind, or an input id outside ``[0, N)``.
    """
    stop = np.zeros(n, bool)
    if answer is None:
        return stop
    a = np.asarray(answer)
    if a.dtype == bool:
        if a.shape != (n,):
            raise ValueError(f"callback returned a bool mask of shape {a.shape}; expected ({n},), one per input")
        return a.copy()
    if a.ndim > 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"callback must return None, a bool mask [N] or input ids to stop; got {answer!r:.80}")
    ids = a.ravel().astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"callback returned input ids {ids.tolist()!r:.80}; each must be in [0, {n})")
    stop[ids] = True
    return stop


def tracer(callback: Any, trace: Any, trace_width: Any, n_inputs: int, penalty: PenaltyFn, alpha: float,
           keep: int, prompts: Sequence[Sequence[int]] | None = None) -> Tracer | None:
    """Check a search's ``callback``, ``trace`` and ``trace_width`` (before any model call) and
    make its tracer: None when there is neither a callback nor a trace."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable (record -> None or inputs to stop); got {callback!r:.80}")
    if trace is not None and not isinstance(trace, SearchTree):
        raise TypeError(f"trace must be a beamsearch.viz.Trace (or None); got {trace!r:.80}")
    if trace is not None and trace._used:
        raise ValueError("trace already holds a search; pass a new Trace() to each search")
    width = check.at_least("trace_width", trace_width, 0)
    if callback is None and trace is None:
        return None
    return Tracer(n_inputs, penalty, alpha, width, keep, callback, trace, prompts)
