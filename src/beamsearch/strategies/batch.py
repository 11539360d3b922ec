"""SPEC section 6 (seed 001): every finite terminal extension finishes outside the beam, the
``beam_size`` best other extensions are the next live rows, and an input stops early once no live
row can beat its n_best-th finished score (a lossless bound)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.core.beam import Candidates
from beamsearch.core.penalties import PenaltyFn, score
from beamsearch.core.select import StepScores, best_per_input, runs, split_terminals
from beamsearch.strategies import Selection


@dataclass(frozen=True)
class BatchState:
    """``top``: float64 ``[N, w]``, each input's best finished scores, highest first (-inf for an
    empty slot). ``w`` is 1 at the start and widens at each step by the most any input finished
    there, up to ``n_best``: it is ``n_best`` once some input has n_best finished, and never more
    than 1 + the finished hypotheses produced. ``n_finished``: int64 ``[N]``."""

    top: np.ndarray
    n_finished: np.ndarray


@dataclass(frozen=True)
class BatchBeam:
    """The batched rule.

    Attributes:
        beam_size: live rows per input.
        n_best: results per input.
        penalty, alpha: the length penalty of scores.
        bound_divisor: float64 ``[N]``, ``lp(max_steps[i])``: a live row of logprob s can reach at
            most ``s / bound_divisor[i]`` (log-probabilities <= 0, lp non-decreasing).
        early_stop: stop an input once the bound cannot beat its n_best-th finished score.
    """

    beam_size: int
    n_best: int
    penalty: PenaltyFn
    alpha: float
    bound_divisor: np.ndarray
    early_stop: bool

    def start(self, n_inputs: int) -> BatchState:
        return BatchState(np.full((n_inputs, 1), NEG_INF), np.zeros(n_inputs, np.int64))

    def select(self, state: BatchState, scores: StepScores) -> tuple[Selection, BatchState]:
        finished, logp = split_terminals(scores)
        width = np.full(state.n_finished.shape[0], self.beam_size)
        live = best_per_input(scores, logp, width)
        if not self.early_stop:
            return Selection(live, finished, True), state
        state = self.with_finished(state, scores, finished)
        return Selection(live, finished, True, self.stopped(state, scores, live)), state

    def with_finished(self, state: BatchState, scores: StepScores, finished: Candidates) -> BatchState:
        """The state with this step's finished candidates merged into each input's n_best best
        scores (other strategies that finish outside the beam reuse it, and :meth:`stopped`)."""
        if finished.size == 0:
            return state
        inputs = scores.beam.input[finished.parent]
        count = np.bincount(inputs, minlength=state.top.shape[0])
        if self.n_best == 1:  # each input's best: one maximum per input, no sort
            best = np.full(state.top.shape[0], NEG_INF)
            np.maximum.at(best, inputs, score(finished.logprob, np.asarray(scores.step), self.penalty, self.alpha))
            return BatchState(np.maximum(state.top, best[:, None]), state.n_finished + count)
        start, length = runs(inputs)
        slot = np.arange(inputs.shape[0]) - np.repeat(start, length)  # position within its input
        new = np.full((state.top.shape[0], int(length.max())), NEG_INF)  # --> [N, most finished]
        new[inputs, slot] = score(finished.logprob, np.asarray(scores.step), self.penalty, self.alpha)
        merged = np.concatenate([state.top, new], axis=1)  # --> [N, w + most finished]
        top = -np.sort(-merged)[:, : self.n_best]  # --> [N, min(n_best, w + most finished)]
        return BatchState(top, state.n_finished + count)

    def stopped(self, state: BatchState, scores: StepScores, live: Candidates) -> np.ndarray:
        """bool ``[N]``: inputs with n_best finished that no live row can still beat."""
        n = state.top.shape[0]
        if state.top.shape[1] < self.n_best:  # no input has n_best finished yet
            return np.zeros(n, bool)
        inputs = scores.beam.input[live.parent]
        reach = np.full(n, NEG_INF)  # the best score any live row of each input can still reach
        if live.size:
            start, _ = runs(inputs)
            reach[inputs[start]] = np.maximum.reduceat(live.logprob, start) / self.bound_divisor[inputs[start]]
        return (state.n_finished >= self.n_best) & (reach <= state.top[:, self.n_best - 1])
