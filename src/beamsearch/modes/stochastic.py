"""``stochastic_beam_search``: k samples without replacement from a model's sequence distribution
(Kool, van Hoof & Welling 2019), on the one engine (:mod:`beamsearch.strategies.stochastic`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from beamsearch.controls.shared import options
from beamsearch.core import validate as check
from beamsearch.core.config import SearchConfig, option
from beamsearch.core.engine import Outcome, StepFn
from beamsearch.core.hypothesis import BatchResults, Hypothesis, TokenLogprobHypothesis
from beamsearch.core.mode import Mode
from beamsearch.core.plan import Plan, StepCallback, run_plan
from beamsearch.core.trace import SearchTree
from beamsearch.strategies.stochastic import StochasticBeam, StochasticState

__all__ = ["STOCHASTIC", "StochasticOptions", "StochasticPlan", "StochasticResults", "stochastic_beam_search",
           "stochastic_plan"]

_REFUSED = {
    "alpha": "samples are ranked by their perturbed score, not by a length-penalized one",
    "length_penalty": "samples are ranked by their perturbed score, not by a length-penalized one",
    "prefix": "a forced prefix is not a distribution to sample from; put it in the prompt instead",
    "beam_size": "its beam is the k samples per input: give k",
    "n_best": "it returns all k samples per input: give k",
    "early_stop": "the k largest perturbed scores are found only by keeping k rows to the end; nothing stops "
                  "early",
}
"""The keywords of ``beam_search_batch`` that stochastic beam search does not take, and why."""


class StochasticResults(BatchResults):
    """``results[i]``: input i's samples, highest perturbed score first (a :class:`BatchResults`).

    Each sample is a :class:`Hypothesis` whose ``score`` is its perturbed score
    ``G = logprob + Gumbel`` (what the samples are ranked by) and whose ``logprob`` is the
    processed log-probability ``log p(y)`` of the whole output.

    Attributes:
        kappa: float64 ``[N]``: per input, the (k+1)-th largest perturbed score over all outputs
            (the largest G left out of the sample); -inf when the input has at most k outputs.
    """

    def __init__(self, *args: object, pad_token_id: int | None = None, kappa: np.ndarray | None = None) -> None:
        super().__init__(*args, pad_token_id=pad_token_id)
        self.kappa = np.zeros(0) if kappa is None else kappa

    def inclusion_probabilities(self) -> list[np.ndarray]:
        """Per input, float64 ``[k_i]``: ``q(y) = P(G_y > kappa) = 1 - exp(-exp(logprob - kappa))``
        for each sample y (1 when kappa is -inf: every output was taken)."""
        return [-np.expm1(-np.exp(np.array([h.logprob for h in hyps]) - kappa))
                for hyps, kappa in zip(self, self.kappa.tolist(), strict=True)]

    def importance_weights(self) -> list[np.ndarray]:
        """Per input, float64 ``[k_i]``: ``p(y) / q(y)`` (Kool et al. 2019, section 4.1).

        ``sum(w * f(y))`` over the samples is an unbiased estimate of ``E[f(y)]`` under the
        sampled distribution; ``sum(w * f(y)) / sum(w)`` is the normalized (consistent,
        lower-variance) estimate.
        """
        return [np.exp(np.array([h.logprob for h in hyps])) / q
                for hyps, q in zip(self, self.inclusion_probabilities(), strict=True)]


def stochastic_beam_search(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    *,
    k: int,
    rng: Any = None,
    seed: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    return_token_logprobs: bool = False,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
    **controls: Any,
) -> StochasticResults:
    """Stochastic beam search (Kool et al. 2019): per input, k samples without replacement.

    The outputs are sequences of at most ``max_steps`` tokens: ending with an eos id (or a stop
    sequence), or cut at ``max_steps`` (such a sequence counts as an output, with the probability
    of its tokens). Their distribution is the processed one (``temperature``, ``top_k``,
    ``no_repeat_ngram_size``, ``min_new_tokens``, ``logits_processors``: the same log-probabilities
    :func:`beam_search_batch` ranks by). Each output y gets a perturbed score
    ``G_y = log p(y) + Gumbel``, sampled top-down through the search tree; the k largest are
    found exactly with k live rows per input, and are k samples without replacement (k = 1: one
    sample from the distribution). When an input has fewer than k outputs, all come back.

    Noise: input i's noise at step t is drawn from ``np.random.default_rng([*e_i, t])``, rows in
    the order passed to the model, V entries each (step 0: one draw, the root's G), where
    ``e_i = (s, i)`` for an int seed ``s``, ``(s_i,)`` for one seed per input, and an ``rng``
    gives ``s``: a numpy Generator by ``rng.integers(2**63)``, a torch Generator by one
    ``torch.randint`` draw. So numpy and torch step functions give the same samples, and an
    input's samples do not depend on its batch companions (with per-input seeds, on its
    position either).

    A row whose every continuation is masked has no output; if that happens, an input may get
    fewer than k samples.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt (axis 0 of every array leaf).
        prompts: ``N`` lists of token ids; the first call gets each prompt's last token.
        k: samples per input, >= 1 (and the live rows per input).
        rng: a ``numpy.random.Generator`` or a ``torch.Generator``; it gives one seed.
        seed: an int, or one int per input. Give at most one of ``rng`` and ``seed``; with
            neither, fresh entropy.
        pad_token_id: fills :meth:`BatchResults.arrays`; never changes the search.
        return_token_logprobs: samples are :class:`TokenLogprobHypothesis` objects.
        callback, trace, trace_width: as for :func:`beamsearch.beam_search` (the trace's scores
            are the length-penalty-free logprobs; the results' ``score`` is G).
        **controls: the shared keywords of :func:`beam_search_batch` (``eos_token_id`` and
            ``max_steps`` required); ``alpha``, ``length_penalty``, ``prefix``, ``beam_size``,
            ``n_best`` and ``early_stop`` are refused (a TypeError saying why).

    Returns:
        A :class:`StochasticResults`: per input, its samples by perturbed score (``score``),
        highest first, and ``kappa`` for the estimator of Kool et al. section 4
        (:meth:`StochasticResults.importance_weights`).

    Raises:
        ValueError: k < 1; both ``rng`` and ``seed``; a per-input seed list of the wrong length;
            any error of :func:`beam_search_batch`'s arguments.
        TypeError: a non-integer k or seed; an ``rng`` that is not a numpy or torch Generator; a
            refused or unknown keyword (naming ``stochastic_beam_search`` and the keyword).
    """
    if "positions" in controls:  # stochastic_plan's, for the refill runner
        raise TypeError("stochastic_beam_search() got an unexpected keyword argument 'positions'")
    config = STOCHASTIC.configure(dict(controls, k=k, seed=seed, pad_token_id=pad_token_id,
                                       return_token_logprobs=return_token_logprobs))
    plan = stochastic_plan(prompts, config, rng=rng)
    results = run_plan(step_fn, init_state, plan, callback=callback, trace=trace, trace_width=trace_width)
    return cast(StochasticResults, results)  # a StochasticPlan's results (StochasticPlan.results)


class StochasticPlan(Plan):
    """The plan of stochastic beam search: its results are the top k ended hypotheses by their
    perturbed score G (the strategy's state holds G, aligned with the ended hypotheses), and
    each input's ``kappa``."""

    def hypotheses(self, outcome: Outcome, inputs: np.ndarray) -> list[list[Hypothesis]]:
        out = _samples(outcome, outcome.state, self.n_inputs, self.rows_per_input, self.token_logprobs, inputs)
        return [out[i] for i in inputs.tolist()]

    def info(self, outcome: Outcome, inputs: np.ndarray) -> list[dict[str, Any]]:
        """Per input, its ``kappa`` (see :class:`StochasticResults`)."""
        return [{"kappa": kappa} for kappa in outcome.state.kappa[inputs].tolist()]

    def results(self, outcome: Outcome) -> StochasticResults:
        hyps = self.hypotheses(outcome, np.arange(self.n_inputs))
        return StochasticResults(hyps, pad_token_id=self.pad_token_id, kappa=outcome.state.kappa)

    def empty(self) -> StochasticResults:
        return StochasticResults(pad_token_id=self.pad_token_id)  # kappa: float64 [0]


def stochastic_plan(prompts: Sequence[Sequence[int]], config: SearchConfig, *, rng: Any = None,
                    positions: Sequence[int] | None = None) -> StochasticPlan:
    """The plan of :func:`stochastic_beam_search` over ``prompts`` with its configuration
    (``STOCHASTIC.configure`` of its keywords but the model, the state, ``rng`` and the
    callback/trace ones): the prompts and the seed are checked.

    ``rng``: as for :func:`stochastic_beam_search`. ``positions``: int64 ``[N]``, the position of
    each prompt in the whole list it was taken from (default ``0 .. N-1``): with one seed ``s``,
    input i's noise comes from ``(s, positions[i])``, so a part of a list, decoded with its
    positions, gets the noise it gets in the whole list (the refill runner decodes a stream this
    way)."""
    c, k = config.controls, config.options.k
    opts = options(prompts, c, checked=config.checked)
    n = len(opts.prompts)
    where = np.arange(n) if positions is None else np.asarray(positions, np.int64).reshape(n)
    entropy = _entropy(rng, config.options.seed, where)
    return StochasticPlan(opts, StochasticBeam(k, opts.controls.max_steps, entropy), k, n_best=None,
                          pad_token_id=c.pad_token_id, token_logprobs=c.return_token_logprobs)


def _entropy(rng: Any, seed: Any, positions: np.ndarray) -> np.ndarray:
    """int64 ``[N, e]``: the entropy of each input's noise streams (see stochastic_beam_search)."""
    n = positions.shape[0]
    if isinstance(seed, Sequence) and not isinstance(seed, (str, bytes)):
        if rng is not None:
            raise ValueError(f"give rng or seed, not both; got rng={rng!r} and seed={seed!r}")
        if len(seed) != n:
            raise ValueError(f"seed must be one int or one int per prompt ({n}); got {len(seed)} seeds")
        return np.array([[_seed(s, f"seed[{i}]")] for i, s in enumerate(seed)], np.int64).reshape(n, 1)
    base = base_seed(rng, seed)
    return np.stack([np.full(n, base), positions], axis=1).astype(np.int64)


def base_seed(rng: Any, seed: Any, name: str = "seed") -> int:
    """The one seed ``s`` of an int ``seed`` (the caller's parameter ``name``), or drawn from
    ``rng`` (a numpy or torch Generator), or from fresh entropy when both are None."""
    if rng is not None and seed is not None:
        raise ValueError(f"give rng or {name}, not both; got rng={rng!r} and {name}={seed!r}")
    if seed is not None:
        return _seed(seed, name)
    if rng is None:
        return int(np.random.default_rng().integers(2**63))
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(2**63))
    if type(rng).__module__.split(".")[0] == "torch" and type(rng).__name__ == "Generator":
        import torch

        return int(torch.randint(0, 2**62, (1,), generator=rng).item())
    raise TypeError(f"rng must be a numpy.random.Generator or a torch.Generator; got {type(rng).__name__}")


def _seed(value: Any, name: str = "seed") -> int:
    """A seed: an integer in [0, 2**63)."""
    v = check.integer(name, value)
    if v < 0:
        raise ValueError(f"{name} must be >= 0; got {v}")
    if v >= 2**63:
        raise ValueError(f"{name} must be < 2**63; got {v}")
    return v


def _samples(outcome: Outcome, state: StochasticState, n: int, k: int, token_logprobs: bool,
             inputs: np.ndarray) -> list[list[Hypothesis]]:
    """Per input, its top k ended hypotheses by G, highest first (ties in production order);
    built for the inputs ``inputs`` only (int64 ``[m]``), the others' lists are empty."""
    ended = outcome.ended
    g = np.concatenate(state.ended) if state.ended else np.zeros(0)  # --> [h], aligned with ended
    if inputs.shape[0] < n:
        mine = np.flatnonzero(np.isin(ended.input, inputs))
        ended, g = ended.take(mine), g[mine]
    rank = np.lexsort((np.arange(g.shape[0]), -g, ended.input))
    by_input = ended.input[rank]
    first = np.searchsorted(by_input, by_input)  # first position of each one's input
    rank = rank[np.arange(rank.shape[0]) - first < k]  # displaced samples rank below the top k
    chosen = ended.take(rank)
    tokens, per_token = outcome.trail.paths(chosen)
    out: list[list[Hypothesis]] = [[] for _ in range(n)]
    for j in range(rank.shape[0]):  # once, for the result
        length, gj = int(chosen.step[j]), float(g[rank[j]])
        args = (tokens[j, :length].tolist(), float(chosen.logprob[j]), gj, bool(chosen.finished[j]))
        hyp = TokenLogprobHypothesis(*args, per_token[j, :length].tolist()) if token_logprobs else Hypothesis(*args)
        out[int(chosen.input[j])].append(hyp)
    return out



@dataclass(frozen=True)
class StochasticOptions:
    """The options of stochastic beam search, beside the shared controls."""

    k: int | None = option(None, "samples per input, without replacement", metavar="K", required=True)
    seed: int | None = option(None, "the seed (input i of a stream gets the noise of input i of one search over "
                                     "all of them)", metavar="S")


def _stream_seed(given: Mapping[str, Any]) -> dict[str, Any]:
    """A stream's one seed s, from its ``seed`` (an int) or ``rng`` (fresh entropy with neither)."""
    if isinstance(given.get("seed"), (list, tuple, np.ndarray)):
        raise ValueError("seed of decode_stream is one int; per-input seeds go in the input dicts "
                         f"({{'prompt': ..., 'seed': ...}}); got seed={given['seed']!r:.60}")
    return {"seed": base_seed(given.get("rng"), given.get("seed"))}


def _input_checks(config: SearchConfig, inputs: Any) -> tuple[tuple[str, Any], ...]:
    """Inputs checked without a plan: their own ``seed`` (the stream's was checked at its start); no token ids."""
    if config.options.seed is not None:  # none: fresh entropy, drawn by the plan
        _entropy(None, config.options.seed, np.arange(len(inputs.prompts)))
    return ()


def _cohort_seeds(fields: list[dict[str, Any]], positions: np.ndarray, stream: Mapping[str, Any]) -> dict[str, Any]:
    """A cohort's noise: each input's own seed where every one gives it (noise from (seed_i,)),
    else the stream's seed s at the inputs' stream positions (noise from (s, position))."""
    if fields and all("seed" in f for f in fields):
        return {"seed": [f["seed"] for f in fields]}
    return {"seed": stream["seed"], "positions": positions}


STOCHASTIC = Mode("stochastic", "stochastic beam search: k samples per input without replacement",
                  stochastic_beam_search, plan=stochastic_plan, options=StochasticOptions,
                  rows=lambda keywords: keywords["k"], refused=_REFUSED, per_input={"seed": None},
                  cohort=_cohort_seeds, start=_stream_seed, check_input=_input_checks,
                  stream_only=frozenset({"seed", "rng"}), sizes=("return_token_logprobs", "pad_token_id"),
                  check=lambda kw: {"k": check.at_least("k", kw["k"], 1)})
"""Stochastic beam search (:func:`stochastic_beam_search`)."""
