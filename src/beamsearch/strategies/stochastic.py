"""Stochastic beam search (Kool, van Hoof & Welling 2019, "Stochastic Beams and Where to Find
Them"): the Gumbel-top-k trick applied top-down over the tree of outputs, so that the k outputs
with the largest perturbed log-probabilities G = log p(y) + Gumbel are found without
enumerating them; they are k samples without replacement from the sequence distribution.

Every row carries its perturbed score G (``Beam.tags["gumbel"]``, float64 ``[k]``): the maximum of
G over the outputs that extend it. A row's children get perturbed log-probabilities
``phi + Gumbel`` conditioned on their maximum being the parent's G (the numerically stable form
of the paper's appendix B.3). Per input the k largest G among the children of its live rows and
its samples so far are kept: a kept terminal child (eos, stop sequence) or a child at the
input's ``max_steps`` is a sample (it ends; a sequence cut at ``max_steps`` counts as an
output), the rest are the next live rows. A sample stays in the running top-k only while k other
candidates do not beat its G (then it is displaced, as in the paper; the result drops it), so the
final k are exactly the top-k of the perturbed outputs.

The noise is drawn on the host, from one numpy stream per input and step (see
:func:`gumbel_noise`), so numpy and torch logits give the same samples; the perturbation runs
there too (one ``[k, V]`` transfer per step for device logits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.backends import NEG_INF, backend_of
from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores, accumulate, runs
from beamsearch.strategies import Selection

_HOST = backend_of(np.zeros(0))  # the numpy backend: the perturbation is ranked on the host
_FLOAT64 = np.dtype(np.float64)  # gumbel_noise's default dtype


@dataclass(frozen=True)
class StochasticState:
    """Attributes:
        held: float64 ``[N, h]``: the G of each input's samples still in its top-k, highest first
            (-inf for an empty slot); ``h`` widens as samples end, up to k, and is never more
            than the samples ended so far.
        kappa: float64 ``[N]``: the largest G of anything left out of the top-k so far; at the end,
            the (k+1)-th largest G over all outputs (-inf when there are at most k).
        ended: per step, float64 ``[j]``: the G of the hypotheses that ended at that step, in the
            order of :attr:`Selection.ended`.
    """

    held: np.ndarray
    kappa: np.ndarray
    ended: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class StochasticBeam:
    """The Gumbel-top-k rule.

    Attributes:
        k: samples per input.
        max_steps: int64 ``[N]``: a kept child at its input's limit is a sample.
        entropy: int64 ``[N, e]``: input i's noise at step t comes from
            ``np.random.default_rng([*entropy[i], t])``; step 0's first draw is its root G.
    """

    k: int
    max_steps: np.ndarray
    entropy: np.ndarray

    @property
    def beam_size(self) -> int:
        """The most children one row keeps (a trace reads this many per row, then the pruned)."""
        return self.k

    def start(self, n_inputs: int) -> StochasticState:
        return StochasticState(np.full((n_inputs, 0), NEG_INF), np.full(n_inputs, NEG_INF), ())

    def select(self, state: StochasticState, scores: StepScores) -> tuple[Selection, StochasticState]:
        beam, n = scores.beam, state.kappa.shape[0]
        if beam.tags is None:  # step 1: each input's one row; its G is the root's, G ~ Gumbel(0)
            parent_g = np.array([_stream(self.entropy[i], 0).gumbel() for i in beam.input.tolist()])
        else:
            parent_g = beam.tags["gumbel"]
        # G~ = phi + Gumbel on the host, [k, V] in the logits' precision (the noise array receives the sum)
        logp = scores.backend.to_numpy(scores.logp)  # --> [k, V] on the host
        perturbed = gumbel_noise(self.entropy, beam.input, scores.step, scores.vocab,
                                 np.result_type(np.float32, logp.dtype))  # the logits' precision (>= float32)
        perturbed += logp
        perturbed += beam.logprob[:, None]
        # the conditioning is increasing in G~ within a row: each row's k + 1 best children by G~
        # (ties to the lower token id; the first is the row maximum Z) are its best by G
        token, best = _HOST.topk_stable(perturbed, min(self.k + 1, scores.vocab))  # --> [k, m] each
        gumbels = conditional_gumbels(best.astype(np.float64), parent_g)
        top = _best_of_inputs(beam.input, token, gumbels, self.k + 1, scores.vocab)
        keep, held, kappa = _merge(state, beam.input[top.parent], top.logprob, self.k, n)
        cand = top.take(keep)
        values = scores.backend.gather(scores.logp, cand.parent, cand.token)
        g = cand.logprob
        chosen = Candidates(cand.parent, cand.token, accumulate(scores, cand.parent, values), {"gumbel": g})
        inputs = beam.input[chosen.parent]
        terminal = scores.terminals.contains(chosen.parent, chosen.token, scores.vocab)
        ends = terminal | (self.max_steps[inputs] <= scores.step)
        held = _hold(held, inputs[ends], g[ends], self.k)
        return (Selection(chosen.take(~ends), chosen.take(ends), terminal[ends]),
                StochasticState(held, kappa, state.ended + (g[ends],)))


def _best_of_inputs(inputs: np.ndarray, token: np.ndarray, g: np.ndarray, m: int, vocab: int) -> Candidates:
    """Per input, its m best children by G, input-major, highest first; ties to the lower flat
    index (row position within the input, then token id).

    Args:
        inputs: int64 ``[k]``, each row's input (sorted).
        token, g: ``[k, m']``: each row's best children and their G.

    Returns:
        Candidates whose ``logprob`` holds G (the caller takes the real logprob).
    """
    k, per_row = token.shape
    parent = np.repeat(np.arange(k), per_row)
    token, g = token.ravel(), g.ravel()
    ok = np.isfinite(g)
    parent, token, g = parent[ok], token[ok], g[ok]
    flat = _rank_within(inputs)[parent] * vocab + token
    order = np.lexsort((flat, -g, inputs[parent]))  # --> by input, G descending, flat index
    order = order[_rank_within(inputs[parent][order]) < m]
    return Candidates(parent[order], token[order], g[order])


def _merge(state: StochasticState, inputs: np.ndarray, g: np.ndarray, k: int, n: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per input, the top k of its held samples and its best children by G.

    Args:
        inputs, g: ``[c]``: the children's inputs and G, input-major, highest first per input.

    Returns:
        bool ``[c]``: the children kept; the held samples kept (``[N, h]`` as held, -inf where
        displaced or empty); the next ``kappa`` ``[N]``.
    """
    slot = _rank_within(inputs)
    h = state.held.shape[1]
    kids = np.full((n, int(slot.max(initial=-1)) + 1), NEG_INF)  # --> [N, c'], c' <= k + 1: the most children
    kids[inputs, slot] = g
    pool = np.concatenate([state.held, kids], axis=1)  # --> [N, h + c']: held first (ties: held wins)
    order = np.argsort(-pool, axis=1, kind="stable")
    kept = np.zeros(pool.shape, dtype=bool)
    np.put_along_axis(kept, order[:, :k], True, axis=1)
    kept &= np.isfinite(pool)
    left_out = np.full(n, NEG_INF)  # the (k+1)-th largest (none in a pool of at most k)
    if pool.shape[1] > k:
        left_out = np.take_along_axis(pool, order[:, k : k + 1], axis=1)[:, 0]
    return kept[inputs, h + slot], np.where(kept[:, :h], state.held, NEG_INF), np.maximum(state.kappa, left_out)


def _hold(held: np.ndarray, inputs: np.ndarray, g: np.ndarray, k: int) -> np.ndarray:
    """``held`` ``[N, h]`` with the samples ``(inputs, g)`` ``[e]`` (input-major) added, highest
    first: ``[N, min(k, h + most new)]`` (they fit: held and new samples are all in the top k)."""
    slot = _rank_within(inputs)
    new = np.full((held.shape[0], int(slot.max(initial=-1)) + 1), NEG_INF)  # --> [N, most new]
    new[inputs, slot] = g
    return -np.sort(-np.concatenate([held, new], axis=1), axis=1)[:, :k]


def _rank_within(inputs: np.ndarray) -> np.ndarray:
    """int64 ``[c]``: each entry's position among the entries of its input (``inputs`` sorted)."""
    if inputs.shape[0] == 0:
        return np.zeros(0, np.int64)
    start, length = runs(inputs)
    return np.arange(inputs.shape[0]) - np.repeat(start, length)


def conditional_gumbels(perturbed: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Children's perturbed log-probabilities, conditioned on their maximum being the parent's.

    ``perturbed`` holds ``G~ = phi + Gumbel`` (independent Gumbels at the children's
    log-probabilities ``phi``) for some children of each row, its maximum ``Z`` among them;
    ``G = -log(exp(-T) - exp(-Z) + exp(-G~))`` with ``T`` the parent's G, computed as
    ``v = T - G~ + log(1 - exp(G~ - Z))``, ``G = T - max(0, v) - log1p(exp(-|v|))`` (Kool et al.
    2019, appendix B.3). G is increasing in G~ and the maximum child gets T. A child of
    probability 0 gets -inf; so does every child of a row with none.

    Args:
        perturbed: float64 ``[k, m]``.
        parent: float64 ``[k]``: each row's G.

    Returns:
        float64 ``[k, m]``.
    """
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        z = perturbed.max(axis=1, keepdims=True)  # --> [k, 1]
        v = parent[:, None] - perturbed + _log1mexp(perturbed - z)  # G~ - Z <= 0; -inf at probability 0
        g = parent[:, None] - np.maximum(v, 0) - np.log1p(np.exp(-np.abs(v)))
    return np.where(np.isfinite(perturbed), g, NEG_INF)


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """``log(1 - exp(x))`` for ``x <= 0``, accurate on both sides of -log 2 (Maechler 2012)."""
    near = x > -0.6931471805599453
    return np.where(near, np.log(-np.expm1(np.where(near, x, -1.0))), np.log1p(-np.exp(np.where(near, -1.0, x))))


def gumbel_noise(entropy: np.ndarray, inputs: np.ndarray, step: int, vocab: int,
                 dtype: np.dtype = _FLOAT64) -> np.ndarray:
    """``[k, V]`` standard Gumbel noise for the rows of one step, in ``dtype``.

    Input i's rows (``inputs`` is sorted: rows of one input together, in order) take
    ``-log(E)`` with ``E = np.random.default_rng([*entropy[i], step]).standard_exponential(
    size=(rows, V), dtype=np.float32)`` (its own stream per step, rows in order, V entries each),
    so its noise does not depend on its batch companions. float32 exponentials (the ziggurat) cost
    about a third of float64 Gumbels, which dominate a step at large V; an E of exactly 0 (its
    Gumbel would be +inf) is raised to the smallest float32. A Python loop over the inputs of the
    step (one generator each), not over rows.
    """
    start, length = runs(inputs)
    noise = np.concatenate([_stream(entropy[inputs[s]], step).standard_exponential(size=(r, vocab), dtype=np.float32)
                            for s, r in zip(start.tolist(), length.tolist(), strict=True)])
    np.maximum(noise, np.finfo(np.float32).tiny, out=noise)
    np.log(noise, out=noise)
    np.negative(noise, out=noise)
    return noise.astype(dtype, copy=False)


def _stream(entropy: np.ndarray, step: int) -> np.random.Generator:
    return np.random.default_rng([*entropy.tolist(), step])
