"""openai/whisper's beam search rule (``BeamSearchDecoder``) as a selection rule on the one
engine, and its ranking of the finished candidates (``MaximumLikelihoodRanker``).

Per step and input, with B the beam size and ``C = round(B * patience)`` the candidates it wants:

- every extension is ranked by logprob so far + log-probability (the float32 sums whisper adds;
  ties to the lower flat index ``b*V + v``); whisper looks at each row's best B + 1 only, which
  holds every extension that can be kept;
- going down that ranking, an eot extension is a finished candidate, any other a live row, until
  B live rows are kept: eot extensions ranked below the B-th live one are dropped; finished rows
  take no live slot (the beam stays B wide, unlike :func:`beamsearch.beam_search_batch`);
- the finished candidates join the input's list best first while it holds fewer than C;
- an input with C candidates is done (whisper runs it on with its batch, adding nothing);
- after ``sample_len`` steps, or when done, an input with fewer than B candidates takes its live
  rows by logprob until it has B (:func:`finalize`), and :func:`rank` picks the best by
  ``logprob / length`` (``length_penalty=None``) or ``logprob / ((5 + length) / 6) ** alpha``,
  length the tokens before eot.

At step 1 whisper starts B copies of the prompt and merges identical extensions, so the first
step's candidates are one row's: the engine starts each input from one row. Greedy decoding
(temperature 0, no beam) is this rule with B = 1, C = 1: the argmax, ties to the lower id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from beamsearch.core.beam import Candidates
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.select import StepScores, best_per_input, positions, split_terminals
from beamsearch.strategies import Selection

__all__ = ["WhisperBeam", "finalize", "rank", "whisper_score"]


@dataclass(frozen=True)
class WhisperBeamState:
    """``n_finished``: int64 ``[N]``, the finished candidates each input holds (at most C)."""

    n_finished: np.ndarray


@dataclass(frozen=True)
class WhisperBeam:
    """The rule of whisper's ``BeamSearchDecoder`` (this module's docstring).

    Attributes:
        beam_size: B >= 1, live rows per input.
        patience: C = round(B * patience) finished candidates end an input (>= 1).
    """

    beam_size: int
    patience: float = 1.0

    @property
    def max_candidates(self) -> int:
        return max(1, round(self.beam_size * self.patience))

    def start(self, n_inputs: int) -> WhisperBeamState:
        return WhisperBeamState(np.zeros(n_inputs, np.int64))

    def select(self, state: WhisperBeamState, scores: StepScores) -> tuple[Selection, WhisperBeamState]:
        b, n = self.beam_size, state.n_finished.shape[0]
        terminal, logp = split_terminals(scores)
        live = best_per_input(scores, logp, np.full(n, b))  # input-major, best first
        both = Candidates.join([live, terminal])  # --> [j]: every extension that can matter
        is_terminal = np.arange(both.size) >= live.size
        inputs = scores.beam.input[both.parent]
        flat = positions(scores.beam.input)[both.parent] * scores.vocab + both.token  # the tie order
        order = np.lexsort((flat, -both.logprob, inputs))  # input-major, best first
        live_sorted = ~is_terminal[order]
        seen: np.ndarray = np.cumsum(live_sorted) - live_sorted  # --> [j]: live candidates ranked before, all inputs
        first = np.searchsorted(inputs[order], inputs[order])  # each input's first position
        before: np.ndarray = seen - seen[first]  # live candidates of its input ranked before it
        taken = order[~live_sorted & (before < b)]  # the finished candidates whisper sees, best first
        room = self.max_candidates - state.n_finished
        taken = taken[positions(inputs[taken]) < room[inputs[taken]]]
        n_finished = state.n_finished + np.bincount(inputs[taken], minlength=n)
        done = n_finished >= self.max_candidates
        ended = both.take(taken)
        return Selection(live, ended, True, stop=done), WhisperBeamState(n_finished)


def finalize(hyps: Sequence[Hypothesis], beam_size: int) -> list[Hypothesis]:
    """An input's candidates as whisper's ``finalize`` takes them: every finished one, then, while
    fewer than ``beam_size``, the unfinished ones by logprob (highest first; ties keep order)."""
    finished = [h for h in hyps if h.finished]
    rest = sorted((h for h in hyps if not h.finished), key=lambda h: -h.logprob)
    while len(finished) < beam_size and rest:
        finished.append(rest.pop(0))
    return finished


def whisper_score(logprob: float, length: int, length_penalty: float | None) -> float:
    """``MaximumLikelihoodRanker``'s score: ``logprob / length`` (None), else
    ``logprob / ((5 + length) / 6) ** length_penalty``; length the text tokens (eot not counted).
    An empty text (whisper divides by zero there) scores as one token long."""
    if length_penalty is None:
        return logprob / max(length, 1)
    return logprob / ((5 + length) / 6) ** length_penalty


def rank(hyps: Sequence[Hypothesis], length_penalty: float | None) -> list[Hypothesis]:
    """The candidates best first by :func:`whisper_score` (ties keep their order, as whisper's
    ``argmax`` takes the first), each with that score."""
    scored = [Hypothesis(h.tokens, h.logprob, whisper_score(h.logprob, len(h.tokens) - int(h.finished),
                                                            length_penalty), h.finished) for h in hyps]
    return sorted(scored, key=lambda h: -h.score)
