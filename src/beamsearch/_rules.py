"""The two selection rules over the one engine (:mod:`beamsearch._engine`).

:class:`SingleRule` is SPEC section 4 (seed 000): an eos candidate competes for a beam slot and
keeps it once finished, so the beam narrows. :class:`BatchRule` is SPEC section 6 (seed 001):
finite eos extensions are finished outside the beam, which always keeps ``beam_size`` rows, and an
input may stop early once no live row can still beat its n-best finished.
"""

from __future__ import annotations

import numpy as np

from beamsearch._engine import Rows, Rule, runs
from beamsearch._penalties import LengthPenalty


class SingleRule(Rule):
    """Per input, rank all its ``k*V`` candidates; keep ``beam_size - finished so far``; a kept
    eos finishes and keeps its slot. Inputs are independent: N inputs at once give what each
    gives alone."""

    eos_competes = True

    def width(self) -> np.ndarray:
        return self.beam_size - self.n_finished


class BatchRule(Rule):
    """``beam_size`` best non-eos extensions per input; every finite eos extension finishes.

    Keeps ``top [N, n_best]``, each input's n_best best finished scores, highest first.
    """

    eos_competes = False

    def __init__(self, beam_size: int, eos: int, n_inputs: int, *, n_best: int,
                 penalty: LengthPenalty, alpha: float, max_steps: int, early_stop: bool) -> None:
        super().__init__(beam_size, eos, n_inputs)
        self.n_best = n_best
        self.penalty = penalty
        self.alpha = alpha
        self.early_stop = early_stop
        self.bound_divisor = float(penalty(np.asarray(max_steps), alpha))
        self.top = np.full((n_inputs, n_best), -np.inf)  # --> [N, n_best]

    def width(self) -> np.ndarray:
        return np.full(self.n_finished.shape[0], self.beam_size)

    def stopped(self, live: Rows, step: int, finished: Rows | None) -> np.ndarray:
        """An input stops when it has n_best finished and ``s / lp(max_steps)`` cannot beat them."""
        if not self.early_stop:
            return np.zeros(live.input.shape[0], dtype=bool)
        if finished is not None:
            self._add_finished(finished, step)
        reach = live.logprob / self.bound_divisor  # the best score each live row can still reach
        beaten = reach > self.top[live.input, self.n_best - 1]
        enough = self.n_finished[live.input] >= self.n_best
        return enough & ~np.isin(live.input, live.input[beaten])

    def _add_finished(self, finished: Rows, step: int) -> None:
        scores = finished.logprob / self.penalty(np.asarray(step), self.alpha)
        start, length = runs(finished.input)
        slot = np.arange(finished.input.shape[0]) - np.repeat(start, length)  # position within its input
        new = np.full((self.top.shape[0], self.beam_size), -np.inf)  # --> [N, beam]
        new[finished.input, slot] = scores
        merged = np.concatenate([self.top, new], axis=1)  # --> [N, n_best + beam]
        self.top = -np.sort(-merged, axis=1)[:, : self.n_best]
