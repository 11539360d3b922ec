"""openai/whisper's sampling at a temperature (its ``GreedyDecoder`` with ``temperature > 0``,
``best_of`` samples per window) as a selection rule on the one engine.

Each input's ``best_of`` samples are independent trajectories from its one prompt row: at step 1
its row draws ``best_of`` tokens, then each trajectory draws one token a step until eot (finished)
or the window's last step (unfinished). A token is drawn from ``softmax(logp / T)``, ``logp`` the
log-probabilities after whisper's rules at temperature 1, and its logprob is ``logp`` at that token:
whisper scores a sample by the untempered distribution (its ``avg_logprob`` is that).

Draws use the Gumbel-max trick with noise from one generator per (input seed, salt, trajectory, step):
an input's samples depend on its seed alone, never on its batch companions or their lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores, accumulate
from beamsearch.strategies import Selection

__all__ = ["WhisperSample", "gumbel_noise"]


def gumbel_noise(seed: int, salt: int, trajectory: int, step: int, vocab: int) -> np.ndarray:
    """float64 ``[V]``: standard Gumbel noise of one draw, from its (seed, salt, trajectory, step)
    alone (seed and salt >= 0)."""
    return np.random.default_rng([int(seed), int(salt), int(trajectory), int(step)]).gumbel(size=vocab)


@dataclass(frozen=True)
class WhisperSample:
    """Sampling by whisper's rule (this module's docstring).

    Attributes:
        best_of: samples per input (>= 1).
        temperature: T > 0.
        seeds: int64 ``[N]``: each input's seed (>= 0).
        salt: >= 0, a second key of every draw (the fallback's attempt: each temperature draws anew).
    """

    best_of: int
    temperature: float
    seeds: np.ndarray
    salt: int = 0

    def start(self, n_inputs: int) -> None:
        return None

    def select(self, state: None, scores: StepScores) -> tuple[Selection, None]:
        beam, vocab = scores.beam, scores.vocab
        if beam.tags is None:  # step 1: one row per input, best_of trajectories from it
            parent = np.repeat(np.arange(beam.size), self.best_of)
            trajectory = np.tile(np.arange(self.best_of), beam.size)
        else:
            parent, trajectory = np.arange(beam.size), beam.tags["trajectory"]
        logp = scores.backend.to_numpy(scores.logp)  # --> [k, V] on the host
        seeds = self.seeds[beam.input[parent]]
        noise = np.stack([gumbel_noise(s, self.salt, j, scores.step, vocab)  # --> [j, V]
                          for s, j in zip(seeds.tolist(), trajectory.tolist(), strict=True)])
        with np.errstate(invalid="ignore"):
            token = np.argmax(logp[parent] / self.temperature + noise, axis=1)  # --> [j]
        value = logp[parent, token]
        ok = np.isfinite(value)  # a row with nothing left to draw ends here
        parent, trajectory, token = parent[ok], trajectory[ok], token[ok]
        drawn = Candidates(parent, token, accumulate(scores, parent, value[ok]), {"trajectory": trajectory})
        ends = np.isin(token, scores.terminals.eos)
        return Selection(drawn.take(np.flatnonzero(~ends)), drawn.take(np.flatnonzero(ends)), True), None
