"""SPEC section 4 (seed 000): every candidate competes, a kept terminal finishes and keeps its
slot, so the beam narrows by one for each finished hypothesis."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.core.select import StepScores, best_per_input
from beamsearch.strategies import Selection


@dataclass(frozen=True)
class NarrowingState:
    """``n_finished``: int64 ``[N]``, hypotheses each input has finished so far."""

    n_finished: np.ndarray


@dataclass(frozen=True)
class NarrowingBeam:
    """Per input, rank all its ``r*V`` candidates together and keep the first
    ``beam_size - finished so far`` finite ones; a kept terminal candidate finishes."""

    beam_size: int

    def start(self, n_inputs: int) -> NarrowingState:
        return NarrowingState(np.zeros(n_inputs, np.int64))

    def select(self, state: NarrowingState, scores: StepScores) -> tuple[Selection, NarrowingState]:
        kept = best_per_input(scores, scores.logp, self.beam_size - state.n_finished)
        done = scores.terminals.contains(kept.parent, kept.token, scores.vocab)
        finished = kept.take(done)
        n_finished = state.n_finished + np.bincount(scores.beam.input[finished.parent],
                                                    minlength=state.n_finished.shape[0])
        return Selection(kept.take(~done), finished, True), NarrowingState(n_finished)
