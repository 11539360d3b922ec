"""Results: one vectorized builder for every search (the containers are in :mod:`._hypothesis`)."""

from __future__ import annotations

import numpy as np

from beamsearch.core.beam import Ended
from beamsearch.core.engine import Outcome
from beamsearch.core.hypothesis import Hypothesis, TokenLogprobHypothesis
from beamsearch.core.penalties import PenaltyFn, score
from beamsearch.core.select import positions

__all__ = ["build", "ranking"]


def build(outcome: Outcome, n_inputs: int, penalty: PenaltyFn, alpha: float, *, n_best: int | None,
          finished_first: bool, token_logprobs: bool = False) -> list[list[Hypothesis]]:
    """Per input, its hypotheses best first.

    Args:
        outcome: what the search left.
        penalty, alpha: score = logprob / penalty(len(tokens), alpha).
        n_best: with ``finished_first``: the finished ones by score cut to n_best, filled from
            the unfinished by score (SPEC section 6); without it, the first n_best. None: every
            hypothesis.
        finished_first: False ranks finished and unfinished together by score, finished first on
            a tie (SPEC section 4). Ties otherwise keep production order (a stable sort).
        token_logprobs: build :class:`TokenLogprobHypothesis` objects.
    """
    ended = outcome.ended
    rank, scores = ranking(ended, n_inputs, penalty, alpha, n_best=n_best, finished_first=finished_first)
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


def ranking(ended: Ended, n_inputs: int, penalty: PenaltyFn, alpha: float, *, n_best: int | None,
            finished_first: bool) -> tuple[np.ndarray, np.ndarray]:
    """The order of :func:`build`'s results (its ``n_best`` and ``finished_first`` rules).

    Args:
        ended: ``[h]`` hypotheses in production order (ties keep it), of ``n_inputs`` inputs.

    Returns:
        int64 ``[h']``: the positions in ``ended`` of each input's results, best first,
        input-major (inputs ascending); and float64 ``[h]``: every hypothesis's score.
    """
    scores = score(ended.logprob, ended.step, penalty, alpha)  # --> [h]
    order = np.arange(scores.shape[0])
    unfinished = (~ended.finished).astype(np.int64)
    if finished_first:
        rank = np.lexsort((order, -scores, unfinished, ended.input))
    else:
        rank = np.lexsort((order, unfinished, -scores, ended.input))
    if n_best is not None and finished_first:
        rank = rank[_first_n_best(ended.input[rank], unfinished[rank], ended.finished, ended.input,
                                  n_inputs, n_best)]
    elif n_best is not None:  # ranked together: each input's first n_best
        rank = rank[positions(ended.input[rank]) < n_best]
    return rank, scores


def _first_n_best(inputs: np.ndarray, unfinished: np.ndarray, finished: np.ndarray, all_inputs: np.ndarray,
                  n_inputs: int, n_best: int) -> np.ndarray:
    """bool mask over rows sorted by (input, unfinished, score): the first n_best of each input."""
    group = inputs * 2 + unfinished  # --> [h]: one group per (input, kind), sorted
    pos = positions(group)  # position within its group
    n_fin = np.bincount(all_inputs[finished], minlength=n_inputs)  # --> [N]
    room = np.where(unfinished == 1, n_best - np.minimum(n_fin[inputs], n_best), n_best)
    return pos < room


def _hypothesis(tokens: np.ndarray, per_token: np.ndarray | None, length: int, logprob: float, sc: float,
                finished: bool) -> Hypothesis:
    if per_token is None:
        return Hypothesis(tokens[:length].tolist(), logprob, sc, finished)
    return TokenLogprobHypothesis(tokens[:length].tolist(), logprob, sc, finished, per_token[:length].tolist())
