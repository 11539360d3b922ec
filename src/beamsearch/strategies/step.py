"""Step search's pieces on the engine: the sampling rule of a segment (:class:`SegmentSampler`),
its noise (:func:`uniforms`), and the choice of what goes on after a round (:func:`aggregate`,
:func:`keep_best`).

A segment is sampled token by token by the inverse of each row's cumulative distribution: row r
at step t draws one uniform ``u`` in (0, 1) from its key (:func:`uniforms`, a counter-based hash on
the host, so numpy and torch logits give the same draws, and a row's draws do not depend on which
rows share its call) and takes the first token whose running probability reaches ``u`` times the
row's total. Each row is its own engine input (one row each): it ends at an eos id or a stop
sequence (a delimiter), or at its input's ``max_steps`` (the segment's token limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores, accumulate
from beamsearch.strategies import Selection

__all__ = ["AGGREGATIONS", "SegmentSampler", "aggregate", "keep_best", "mix", "uniforms"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (Steele, Lea & Flood 2014) of ``x + golden``: uint64 ``[n]``."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def mix(*parts: np.ndarray | int) -> np.ndarray:
    """uint64 ``[n]``: a hash of the parts (each an int or an integer array ``[n]``, >= 0), in
    order: ``h = splitmix(p0)``, then ``h = splitmix(h ^ p)`` for each further part."""
    arrays = np.broadcast_arrays(*[np.asarray(p, dtype=np.uint64) for p in parts])
    with np.errstate(over="ignore"):
        h = _splitmix64(arrays[0].copy())
        for p in arrays[1:]:
            h = _splitmix64(h ^ p)
    return h


def uniforms(keys: np.ndarray, step: int) -> np.ndarray:
    """float64 ``[n]`` in (0, 1): the draw of each key (uint64 ``[n]``) at ``step``:
    ``((mix(key, step) >> 11) + 0.5) / 2**53``."""
    h = mix(keys, step) >> np.uint64(11)
    return (h.astype(np.float64) + 0.5) / 2.0**53


@dataclass(frozen=True)
class SegmentSampler:
    """Ancestral sampling, one row per engine input (a segment being sampled).

    Attributes:
        keys: uint64 ``[n]``: engine input i's noise key (its draws are ``uniforms(keys[i], t)``).
    """

    keys: np.ndarray
    beam_size: int = 1

    def start(self, n_inputs: int) -> None:
        return None

    def select(self, state: None, scores: StepScores) -> tuple[Selection, None]:
        b, beam, vocab = scores.backend, scores.beam, scores.vocab
        u = uniforms(self.keys[beam.input], scores.step)  # --> [k] on the host
        reach = b.softmax_cumsum(scores.logp)  # --> [k, V]: each row's running probability
        below = reach - b.from_host(u[:, None], reach) * reach[:, -1:]
        token = np.minimum(b.to_numpy(b.count_below(below, 0.0))[:, 0].astype(np.int64), vocab - 1)
        rows = np.arange(beam.size)
        values = b.gather(scores.logp, rows, token)  # --> [k] on the host
        ok = np.flatnonzero(np.isfinite(values))  # a row with no finite entry has no extension
        chosen = Candidates(ok, token[ok], accumulate(scores, ok, values[ok]))
        terminal = scores.terminals.contains(chosen.parent, chosen.token, vocab)
        return Selection(chosen.take(~terminal), chosen.take(terminal), True), None


AGGREGATIONS = ("last", "min", "prod", "mean")
"""How a partial solution's step scores make its score."""


def aggregate(step_scores: Sequence[float], how: str) -> float:
    """The score of a solution from its step scores (at least one): the last, the smallest,
    the product or the mean (of finite scores always finite, between the smallest and the
    largest: a sum past the float64 range is scaled, never taken as inf)."""
    if how == "last":
        return float(step_scores[-1])
    if how == "min":
        return float(min(step_scores))
    if how == "prod":
        return float(np.prod(np.asarray(step_scores, dtype=np.float64)))
    x = np.asarray(step_scores, dtype=np.float64)
    with np.errstate(over="ignore"):
        mean = np.mean(x)  # reals: the mean is taken in float64
    if np.isinf(mean) and np.isfinite(x).all():  # the sum overflowed: the mean of finite reals is finite
        top = np.abs(x).max()
        mean = top * np.mean(x / top)
    return float(mean)


def keep_best(score: np.ndarray, logprob: np.ndarray, order_of_tokens: np.ndarray, group: np.ndarray,
              width: int | None) -> np.ndarray:
    """The candidates that go on: per group, its ``width`` best (None: all of them, ranked).

    Candidates are ranked by ``score`` (highest first), ties to the higher ``logprob``, then to the
    tokens that come first in lexicographic order (so the rank does not depend on the order the
    candidates were produced in), then to the earlier candidate. Step search has one group per
    prompt and ``width = n / m``; DVTS one group per subtree and ``width = 1``.

    Args:
        score, logprob: float64 ``[c]``.
        order_of_tokens: int64 ``[c]``: each candidate's place when the candidates' token lists
            are sorted (equal lists: equal places).
        group: int64 ``[c]``: each candidate's group.

    Returns:
        int64 ``[j]``: the kept candidates, by group (ascending), best first within a group.
    """
    order = np.lexsort((np.arange(score.shape[0]), order_of_tokens, -logprob, -score, group))
    if width is None:
        return order
    g = group[order]
    rank = np.arange(g.shape[0]) - np.searchsorted(g, g)
    return order[rank < width]
