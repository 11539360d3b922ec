"""Exact search: per input, the highest-scoring outputs under the model and the search's scoring
rule, found by branch and bound over the step function, with a proof flag and its cost.

**What is searched.** The outputs of input i are its finished outputs (ended by an eos id, or by a
stop sequence after ``min_new_tokens``) of at most ``max_steps[i]`` tokens, and its unfinished
outputs of exactly ``max_steps[i]`` tokens, each with the logprob the batched search gives it (the
sum of the processed log-probabilities) and ``score = logprob / lp(len)``. They are ranked as
:func:`beamsearch.beam_search_batch` ranks its results: finished before unfinished, then by score;
so an unfinished output is returned only when the input has fewer than ``n_best`` finished ones
(the batched search's fill-up rule). Outputs with a -inf logprob do not exist.

**The bound.** Every processed log-probability is <= 0 and ``lp`` is non-decreasing (alpha >= 0),
so every output extending a prefix of logprob ``s`` scores at most ``s / lp(max_steps[i])``: the
batched search's early-stop bound. A prefix is pruned when that bound is at most the incumbent,
the ``n_best``-th best finished score found so far (no pruning while fewer are known).

**The order.** A model call holds rows at one step (a KV cache has one length, processors read one
step number), so the search goes step by step: at step t it expands every prefix of t - 1 tokens
that survived the bound, ``batch_rows`` rows per model call, through the engine's own
:func:`~beamsearch.core.engine.score_step`; then it records the finished (and, at ``max_steps``, the
unfinished) extensions, raises the incumbent, and keeps the extensions whose bound still beats it.
The incumbent starts from a small beam search (``seed_beam``), whose result is usually the optimum
already; then this order expands the same prefixes a best-first search would (every prefix whose
bound beats the final incumbent, and no other), without a priority queue.

**The budget.** ``expanded[i]`` counts the rows of input i passed to the model: the seed's and the
branch and bound's (a prefix both pass counts twice). ``node_budget`` bounds it: the seed stops an
input where its next call would pass it, and the branch and bound expands, per step, the best
prefixes by bound up to what is left; an input that loses a prefix whose bound beats its incumbent
to the budget is not proven. Its result is never worse than the seed beam search's when the budget
covers that search's rows; a smaller budget cuts the seed too, and the result can be worse, or none.

**Memory.** The model state rows of one step's expanded prefixes (joined from that step's calls)
while the next step's calls run: about two steps' worth of rows. On the host, per expanded prefix,
a few int64 / float64 entries (the back-pointer trail the paths are rebuilt from), its ``P + t``
history tokens only when a processor reads them, and, while a step runs, one call's ``[batch_rows,
V]`` extensions and about twice the extensions each input's budget can still expand (cut back call
by call): never more than the budget allows, whatever ``max_steps`` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from beamsearch.controls.shared import mode_options
from beamsearch.core import model_checks
from beamsearch.core import validate as check
from beamsearch.core.beam import Trail
from beamsearch.core.config import option
from beamsearch.core.engine import StepFn, run
from beamsearch.core.hypothesis import BatchResults, Hypothesis
from beamsearch.core.mode import Mode
from beamsearch.core.plan import pad_id
from beamsearch.core.select import StepScores
from beamsearch.core.state import copy_if_shared
from beamsearch.modes.beam import BEAM, beam_plan
from beamsearch.strategies import Selection
from beamsearch.strategies.branch_and_bound import BranchAndBound, Meter

__all__ = ["EXACT", "ExactOptions", "ExactResults", "exact_search"]

_NO_STEPS = ("a step record and a search tree describe a beam's steps, and branch and bound has no beam; its "
             "results report proven, model_calls and expanded per input")
_REFUSED = {
    "beam_size": "it expands every prefix whose bound can beat the best output found; seed_beam is the beam "
                 "of its seed search",
    "early_stop": "it is always exact: a prefix is pruned only when its bound cannot beat the incumbent",
    "return_token_logprobs": "its results carry each output's logprob and score, not per-token log-probabilities",
    "callback": _NO_STEPS,
    "trace": _NO_STEPS,
    "trace_width": _NO_STEPS,
}
"""The keywords of ``beam_search_batch`` that exact search does not take, and why."""


class ExactResults(BatchResults):
    """``results[i]``: input i's best outputs (at most ``n_best``, best first), as
    :func:`beamsearch.beam_search_batch` returns them; :meth:`arrays` pads them likewise.

    Attributes:
        proven: bool ``[N]``: True when input i's search finished within ``node_budget``, so its
            results are the best there are; False: the best found, not proven.
        model_calls: int64 ``[N]``: model calls that held a row of input i (the seed beam's too).
        expanded: int64 ``[N]``: rows of input i passed to the model, the seed beam's and the
            branch and bound's (a prefix both pass counts twice); at most ``node_budget``.
    """

    def __init__(self, results: Sequence[list[Hypothesis]] = (), *, pad_token_id: int | None = None,
                 proven: np.ndarray | None = None, model_calls: np.ndarray | None = None,
                 expanded: np.ndarray | None = None) -> None:
        super().__init__(results, pad_token_id=pad_token_id)
        n = len(self)
        self.proven = np.ones(n, bool) if proven is None else proven
        self.model_calls = np.zeros(n, np.int64) if model_calls is None else model_calls
        self.expanded = np.zeros(n, np.int64) if expanded is None else expanded


def exact_search(step_fn: StepFn, init_state: Any, prompts: Sequence[Sequence[int]], *,
                 node_budget: int = 100_000, batch_rows: int = 64, n_best: int = 1, seed_beam: int = 4,
                 pad_token_id: int | None = None, **controls: Any) -> ExactResults:
    """The highest-scoring outputs of each input (see the module docstring for the definition).

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``; a call holds rows
            at one step (all rows have generated the same number of tokens).
        init_state: one row per prompt (axis 0 of every array leaf).
        prompts: ``N`` lists of token ids, as for :func:`beamsearch.beam_search_batch`.
        node_budget: the most rows of one input passed to the model (``expanded``), the seed
            beam's and the branch and bound's together: the seed stops an input where its next
            call would pass it, then the best prefixes by bound are expanded up to what is left.
            When an input would need more, its result is flagged not proven.
        batch_rows: the most rows in one model call, >= 1.
        n_best: outputs per input, >= 1.
        seed_beam: the beam size of the seed search (``max(seed_beam, n_best)`` is used), >= 1.
        pad_token_id: fills :meth:`ExactResults.arrays`; never changes the search.
        **controls: the shared keywords of :func:`beamsearch.beam_search_batch`
            (``eos_token_id`` and ``max_steps`` required; ``alpha``, ``length_penalty``,
            ``no_repeat_ngram_size``, ``temperature``, ``top_k``, ``bos_token_id``,
            ``logits_processors``, ``min_new_tokens``, ``stop_sequences``, ``prefix``), with the
            same meaning: they define the outputs and their scores. Its other keywords are
            refused: ``beam_size`` (``seed_beam`` is the seed's beam), ``early_stop`` (always
            exact), ``return_token_logprobs``, ``callback``, ``trace`` and ``trace_width`` (there
            is no beam step to record).

    Returns:
        An :class:`ExactResults`: per input, its ``n_best`` best outputs (finished first, then by
        score; ties keep the seed's first), ``proven``, ``model_calls`` and ``expanded``. An input
        not proven has the best outputs found: fewer than ``n_best``, or none, when the budget ran
        out before that many were reached.

    Raises:
        ValueError, TypeError: a bad argument, named with its value, before any model call; a
            refused or unknown keyword is a TypeError naming ``exact_search`` and the keyword.
    """
    node_budget = check.at_least("node_budget", node_budget, 1)
    batch_rows = check.at_least("batch_rows", batch_rows, 1)
    n_best = check.at_least("n_best", n_best, 1)
    seed_beam = check.at_least("seed_beam", seed_beam, 1)
    pad = pad_id(pad_token_id)
    opts = mode_options("exact_search", prompts, controls, _REFUSED)
    n = len(opts.prompts)
    if n == 0:
        return ExactResults(pad_token_id=pad)
    model_checks.state_rows(init_state, n)
    meter = Meter(n)
    # the seed search consumes its state (a registered cache may be extended and reordered in
    # place, as the Hugging Face adapter's is): the branch and bound starts from a copy
    search_state = copy_if_shared(init_state)
    seed = _seed(meter.wrap(step_fn), init_state, opts, max(seed_beam, n_best), n_best, node_budget, meter, controls)
    incumbent = np.array([_nth_score([h.score for h in hyps if h.finished], n_best) for hyps in seed])
    bb = BranchAndBound(step_fn, opts, n_best, node_budget, batch_rows, meter)
    found, proven = bb.run(search_state, incumbent)
    merged = [_merge(s, f, n_best) for s, f in zip(seed, found, strict=True)]
    return ExactResults(merged, pad_token_id=pad, proven=proven, model_calls=meter.calls, expanded=meter.rows)


def _seed(counted: StepFn, init_state: Any, opts: Any, beam_size: int, n_best: int, node_budget: int,
          meter: Meter, controls: dict[str, Any]) -> list[list[Hypothesis]]:
    """The seed: ``beam_search_batch``'s search with ``beam_size`` and ``n_best`` (``counted`` is
    the metered step function, :meth:`Meter.wrap`), within the node budget: an input stops (its
    live rows end unfinished) where its next call would take its rows past ``node_budget``.

    Returns:
        Per input, the seed's results that are outputs: finished ones, and unfinished ones of
        exactly ``max_steps`` tokens (a row cut by the budget before that is no output).
    """
    n = len(opts.prompts)
    plan = beam_plan(opts.prompts, BEAM.configure(dict(controls, beam_size=beam_size, n_best=n_best)))
    first = np.array([p[-1] for p in opts.prompts], np.int64)
    outcome = run(counted, (init_state, np.arange(n)), first, plan.strategy, plan.opts.controls,
                  observer=_SeedBudget(meter, node_budget))
    limit = opts.controls.max_steps.tolist()
    results = plan.results(outcome)
    return [[h for h in hyps if h.finished or len(h.tokens) == steps]
            for hyps, steps in zip(results, limit, strict=True)]


class _SeedBudget:
    """The seed search's observer (:class:`beamsearch.core.engine.Observer`): stops the inputs whose
    live rows after this step would take the rows the model was passed for them (``meter.rows``)
    past the budget, so the seed never spends more than ``node_budget`` of an input."""

    def __init__(self, meter: Meter, node_budget: int) -> None:
        self.meter, self.node_budget = meter, node_budget

    def before_select(self, scores: StepScores) -> None:
        return None

    def after_select(self, seen: None, scores: StepScores, selection: Selection, controls: Any,
                     trail: Trail) -> Selection:
        rows = np.bincount(scores.beam.input[selection.live.parent], minlength=self.meter.rows.shape[0])  # --> [N]
        over = self.meter.rows + rows > self.node_budget
        if not over.any():
            return selection
        return replace(selection, stop=over if selection.stop is None else selection.stop | over)


def _nth_score(scores: list[float], n_best: int) -> float:
    """The ``n_best``-th of the finished scores (given best first), -inf if fewer."""
    return scores[n_best - 1] if len(scores) >= n_best else -np.inf


def _merge(seed: list[Hypothesis], found: list[Hypothesis], n_best: int) -> list[Hypothesis]:
    """The ``n_best`` best distinct outputs of the seed's and the branch and bound's (finished
    first, then by score; ties keep the seed's first)."""
    ranked = sorted(seed + found, key=lambda h: (not h.finished, -h.score))  # stable
    out: list[Hypothesis] = []
    seen: set[tuple[int, ...]] = set()
    for h in ranked:
        if tuple(h.tokens) not in seen:
            seen.add(tuple(h.tokens))
            out.append(h)
    return out[:n_best]


@dataclass(frozen=True)
class ExactOptions:
    """The options of exact search, beside the shared controls and ``n_best`` (``batch_rows``
    is the runner's: its rows per model call)."""

    node_budget: int = option(100_000, "the most rows of one input passed to the model, the seed beam's and the "
                                        "branch and bound's together; beyond it the best found, proven false",
                               metavar="N")
    seed_beam: int = option(4, "the beam size of the seed search (max(seed_beam, n_best) is used)", metavar="K")


def _fixed_batch(step_fn: StepFn, init_state: Any, prompts: Sequence[Sequence[int]], max_rows: int,
                 **keywords: Any) -> ExactResults:
    """One batch of :func:`exact_search` with ``max_rows`` rows per model call."""
    return exact_search(step_fn, init_state, prompts, batch_rows=max_rows, **keywords)


def _report(results: ExactResults, i: int) -> dict[str, Any]:
    """Input i's ``proven`` and ``expanded``."""
    return {"proven": bool(results.proven[i]), "expanded": int(results.expanded[i])}


EXACT = Mode("exact", "exact search: the n_best highest-scoring outputs by branch and bound (records add proven "
                      "and expanded)", exact_search, batch=_fixed_batch, report=_report, options=ExactOptions,
             rows=lambda keywords: max(keywords.get("seed_beam", ExactOptions.seed_beam), keywords.get("n_best", 1)),
             refused=_REFUSED, sizes=("n_best", "pad_token_id"),
             check=lambda kw: [check.at_least(name, kw[name], 1) for name in ("node_budget", "batch_rows", "n_best",
                                                                             "seed_beam")])
"""Exact search (:func:`exact_search`), in fixed batches (it has no plan for refill)."""
