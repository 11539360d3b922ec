"""A search ready to run: the :class:`Plan` a search mode makes of the validated shared controls
(:class:`beamsearch.controls.shared.Options`), and :func:`run_plan`, the runner of one batch
(:func:`beamsearch.refill.decode_stream` runs plans over a stream).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.config import SHARED_CONTROLS
from beamsearch.core.engine import Outcome, StepFn, run
from beamsearch.core.hypothesis import BatchResults, Hypothesis
from beamsearch.core.results import build
from beamsearch.core.trace import SearchTree, StepRecord, tracer

__all__ = ["SHARED_CONTROLS", "Plan", "StepCallback", "pad_id", "run_plan"]

StepCallback = Callable[[StepRecord], Any]
"""``callback(record) -> None | inputs to stop`` (a bool mask ``[N]`` or input ids)."""


class Plan:
    """One search mode over one batch of prompts, ready to run: everything but the model.

    A plan is made by a mode's plan function (:func:`beam_plan`, ``constrained_plan``,
    ``diverse_plan``, ``stochastic_plan``), which validates the arguments before any model call,
    and run by a runner: :func:`run_plan` for one batch, :func:`beamsearch.refill.decode_stream`
    for a stream (where each cohort of inputs joining together has its own plan).

    Attributes:
        opts: the validated prompts and controls (:func:`beamsearch.controls.shared.options`).
        strategy: the selection rule.
        rows_per_input: the most live rows one input can hold at a step (its beam size).
        n_best: results per input (None: every ended hypothesis).
        finished_first: rank finished hypotheses before unfinished ones (SPEC section 6), or
            all together by score (SPEC section 4).
        pad_token_id: for :meth:`BatchResults.arrays`.
        token_logprobs: build :class:`TokenLogprobHypothesis` objects.
    """

    def __init__(self, opts: Any, strategy: Any, rows_per_input: int, *, n_best: int | None,
                 finished_first: bool = True, pad_token_id: int | None = None, token_logprobs: bool = False) -> None:
        self.opts, self.strategy, self.rows_per_input = opts, strategy, rows_per_input
        self.n_best, self.finished_first = n_best, finished_first
        self.pad_token_id, self.token_logprobs = pad_token_id, token_logprobs

    @property
    def n_inputs(self) -> int:
        return len(self.opts.prompts)

    def hypotheses(self, outcome: Outcome, inputs: np.ndarray) -> list[list[Hypothesis]]:
        """The results of the inputs ``inputs`` (int64 ``[m]``, ascending; each of them over:
        ``outcome`` holds all it ended with), best first."""
        ended = outcome.ended
        if inputs.shape[0] < self.n_inputs:
            outcome = Outcome(ended.take(np.isin(ended.input, inputs)), outcome.trail, outcome.state)
        out = build(outcome, self.n_inputs, self.opts.penalty, self.opts.alpha, n_best=self.n_best,
                    finished_first=self.finished_first, token_logprobs=self.token_logprobs)
        return [out[i] for i in inputs.tolist()]

    def info(self, outcome: Outcome, inputs: np.ndarray) -> list[dict[str, Any]]:
        """What the mode reports per input beside its hypotheses (nothing here)."""
        return [{} for _ in range(inputs.shape[0])]

    def results(self, outcome: Outcome) -> BatchResults:
        """The result container of the whole batch."""
        return BatchResults(self.hypotheses(outcome, np.arange(self.n_inputs)), pad_token_id=self.pad_token_id)

    def empty(self) -> BatchResults:
        """The result container of a batch without prompts."""
        return BatchResults(pad_token_id=self.pad_token_id)


def run_plan(step_fn: StepFn, init_state: Any, plan: Plan, *, callback: StepCallback | None = None,
             trace: SearchTree | None = None, trace_width: int = 3) -> BatchResults:
    """Run ``plan`` over its batch: one engine search, then the plan's results.

    ``callback``, ``trace`` and ``trace_width`` are :func:`beam_search`'s; the pruned candidates
    read per row are the plan's ``rows_per_input`` (its beam size) plus the eos ids, plus
    ``trace_width``."""
    opts = plan.opts
    keep = plan.rows_per_input + opts.controls.eos.shape[0]
    observer = tracer(callback, trace, trace_width, len(opts.prompts), opts.penalty, opts.alpha, keep, opts.prompts)
    if opts.prompts:
        outcome = run(step_fn, init_state, np.array([p[-1] for p in opts.prompts]), plan.strategy, opts.controls,
                      observer=observer)
        results = plan.results(outcome)
    else:
        results = plan.empty()
    if observer is not None:
        observer.finish(results)
    return results


def pad_id(pad_token_id: Any) -> int | None:
    return None if pad_token_id is None else check.int64("pad_token_id", pad_token_id)
