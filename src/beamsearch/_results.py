"""Results: one vectorized builder for every search, and the containers it fills."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch._engine import Outcome
from beamsearch._hypothesis import Hypothesis
from beamsearch._penalties import LengthPenalty, score

__all__ = ["BatchArrays", "BatchResults", "TokenLogprobHypothesis", "build"]


@dataclass
class TokenLogprobHypothesis(Hypothesis):
    """A :class:`Hypothesis` that also carries each token's processed log-probability.

    Attributes:
        token_logprobs: ``len(tokens)`` built-in floats; they sum to ``logprob`` (up to rounding).
    """

    token_logprobs: list[float] | None = None


def build(outcome: Outcome, n_inputs: int, penalty: LengthPenalty, alpha: float, *, n_best: int | None,
          finished_first: bool, token_logprobs: bool = False) -> list[list[Hypothesis]]:
    """Per input, its hypotheses best first.

    Args:
        outcome: what the search left.
        penalty, alpha: score = logprob / penalty(len(tokens), alpha).
        n_best: with ``finished_first``: the finished ones by score cut to n_best, filled from
            the unfinished by score (SPEC section 6). None: every hypothesis.
        finished_first: False ranks finished and unfinished together by score, finished first on
            a tie (SPEC section 4). Ties otherwise keep production order (a stable sort).
        token_logprobs: build :class:`TokenLogprobHypothesis` objects.
    """
    ended = outcome.ended
    scores = score(ended.logprob, ended.step, penalty, alpha)  # --> [h]
    order = np.arange(scores.shape[0])
    unfinished = (~ended.finished).astype(np.int64)
    if finished_first:
        rank = np.lexsort((order, -scores, unfinished, ended.input))
    else:
        rank = np.lexsort((order, unfinished, -scores, ended.input))
    if n_best is not None:
        rank = rank[_first_n_best(ended.input[rank], unfinished[rank], ended.finished, ended.input,
                                  n_inputs, n_best)]
    chosen = ended.take(rank)
    tokens, per_token = outcome.trail.paths(chosen)
    counts = np.bincount(chosen.input, minlength=n_inputs)
    hyps = [_hypothesis(tokens[j], per_token[j] if token_logprobs else None, int(chosen.step[j]),
                        float(chosen.logprob[j]), float(scores[rank[j]]), bool(chosen.finished[j]))
            for j in range(rank.shape[0])]
    out, at = [], 0
    for c in counts.tolist():
        out.append(hyps[at : at + c])
        at += c
    return out


def _first_n_best(inputs: np.ndarray, unfinished: np.ndarray, finished: np.ndarray, all_inputs: np.ndarray,
                  n_inputs: int, n_best: int) -> np.ndarray:
    """bool mask over rows sorted by (input, unfinished, score): the first n_best of each input."""
    group = inputs * 2 + unfinished  # --> [h]: one group per (input, kind), sorted
    start = np.searchsorted(group, group)  # first row of each row's group
    pos = np.arange(group.shape[0]) - start  # position within its group
    n_fin = np.bincount(all_inputs[finished], minlength=n_inputs)  # --> [N]
    room = np.where(unfinished == 1, n_best - np.minimum(n_fin[inputs], n_best), n_best)
    return pos < room


def _hypothesis(tokens: np.ndarray, per_token: np.ndarray | None, length: int, logprob: float, sc: float,
                finished: bool) -> Hypothesis:
    if per_token is None:
        return Hypothesis(tokens[:length].tolist(), logprob, sc, finished)
    return TokenLogprobHypothesis(tokens[:length].tolist(), logprob, sc, finished, per_token[:length].tolist())


@dataclass
class BatchArrays:
    """Padded arrays of a batch result: N inputs, n_best slots, T the longest output.

    Attributes:
        tokens: int64 ``[N, n_best, T]``, right-padded with ``pad_token_id``.
        lengths: int64 ``[N, n_best]``, tokens in each hypothesis (eos counted), 0 for an empty
            slot.
        logprobs: float64 ``[N, n_best]``; -inf for an empty slot.
        scores: float64 ``[N, n_best]``; -inf for an empty slot.
        finished: bool ``[N, n_best]``.
        token_logprobs: float64 ``[N, n_best, T]`` (NaN beyond each length), or None when the
            search was not asked for them.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    logprobs: np.ndarray
    scores: np.ndarray
    finished: np.ndarray
    token_logprobs: np.ndarray | None


class BatchResults(list[list[Hypothesis]]):
    """``results[i]`` is input i's list of :class:`Hypothesis`, best first."""

    def __init__(self, *args: object, pad_token_id: int | None = None) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.pad_token_id = pad_token_id

    def arrays(self, n_best: int | None = None) -> BatchArrays:
        """The results as padded numpy arrays (see :class:`BatchArrays`).

        Args:
            n_best: slots per input; defaults to the most results any input has.

        Raises:
            ValueError: the search was run without ``pad_token_id``.
        """
        if self.pad_token_id is None:
            raise ValueError("pad_token_id is None: pass pad_token_id to beam_search_batch to get arrays")
        slots = max((len(r) for r in self), default=0) if n_best is None else n_best
        width = max((len(h.tokens) for r in self for h in r), default=0)
        shape = (len(self), slots)
        out = BatchArrays(np.full(shape + (width,), self.pad_token_id, np.int64),
                          np.zeros(shape, np.int64), np.full(shape, -np.inf), np.full(shape, -np.inf),
                          np.zeros(shape, bool), None)
        with_lp = any(isinstance(h, TokenLogprobHypothesis) for r in self for h in r)
        if with_lp:
            out.token_logprobs = np.full(shape + (width,), np.nan)
        for i, hyps in enumerate(self):
            for j, h in enumerate(hyps[:slots]):
                out.tokens[i, j, : len(h.tokens)] = h.tokens
                out.lengths[i, j] = len(h.tokens)
                out.logprobs[i, j], out.scores[i, j], out.finished[i, j] = h.logprob, h.score, h.finished
                if with_lp and isinstance(h, TokenLogprobHypothesis) and h.token_logprobs is not None:
                    out.token_logprobs[i, j, : len(h.tokens)] = h.token_logprobs  # type: ignore[index]
        return out
