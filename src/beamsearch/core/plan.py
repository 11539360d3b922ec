"""A search ready to run: the :class:`Plan` a search mode makes of the validated shared controls
(:class:`beamsearch.controls.shared.Options`), and :func:`run_plan`, the runner of one batch
(:func:`beamsearch.refill.decode_stream` runs plans over a stream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.config import SHARED_CONTROLS, DecodingConfig
from beamsearch.core.engine import Outcome, StepFn, run
from beamsearch.core.hypothesis import BatchResults, Hypothesis
from beamsearch.core.penalties import LENGTH_PENALTIES
from beamsearch.core.results import build
from beamsearch.core.trace import SearchTree, StepRecord, tracer

__all__ = ["SHARED_CONTROLS", "CheckedControls", "Plan", "StepCallback", "check_controls", "checked_controls", "pad_id",
           "run_plan"]

StepCallback = Callable[[StepRecord], Any]
"""``callback(record) -> None | inputs to stop`` (a bool mask ``[N]`` or input ids)."""


@dataclass(frozen=True, eq=False)
class Plan:
    """One search mode over one batch of prompts, ready to run: everything but the model. A
    plan is a value: made once, never changed (a mode that needs other controls makes them before).

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

    opts: Any
    strategy: Any
    rows_per_input: int
    _: KW_ONLY
    n_best: int | None
    finished_first: bool = True
    pad_token_id: int | None = None
    token_logprobs: bool = False

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


@dataclass(frozen=True)
class CheckedControls:
    """The shared controls of a configuration that no prompt changes, validated
    (:func:`checked_controls`); :func:`beamsearch.controls.shared.options` builds the engine's
    controls of them with each batch's prompts."""

    eos: Any
    bos: int | None
    penalty: str
    temperature: float
    top_k: int | None
    no_repeat_ngram_size: int
    user: list[Any]
    min_new_tokens: int
    stops: list[Any]


def checked_controls(c: DecodingConfig) -> CheckedControls:
    """Validate the shared controls of ``c`` that no prompt changes (SPEC sections 7 and 10): the
    eos and bos ids, the processors' settings, the length penalty's kind, ``min_new_tokens`` and
    the stop sequences, each error naming its keyword."""
    eos = check.eos_ids("eos_token_id", c.eos_token_id)
    ngram = check.at_least("no_repeat_ngram_size", c.no_repeat_ngram_size, 0)
    temperature = check.temperature("temperature", c.temperature)
    top_k = None if c.top_k is None else check.at_least("top_k", c.top_k, 1)
    bos = None if c.bos_token_id is None else check.token("bos_token_id", c.bos_token_id)
    penalty = check.length_penalty(c.length_penalty, LENGTH_PENALTIES)
    user = check.processors(c.logits_processors)
    for processor in user:  # a processor built for eos ids (a Grammar) checks they are the search's
        getattr(processor.processor, "check_search_eos", lambda eos, name: None)(eos, processor.name)
    m = check.at_least("min_new_tokens", c.min_new_tokens, 0)
    stops = check.stop_sequences(c.stop_sequences, eos)
    return CheckedControls(eos, bos, penalty, temperature, top_k, ngram, user, m, stops)


def check_controls(config: DecodingConfig) -> CheckedControls:
    """Check the shared controls of ``config`` that no prompt changes (:func:`checked_controls`),
    one ``max_steps`` for every input, and the length penalty's strength at one step. A
    configuration is checked once, where it is built (:meth:`beamsearch.core.mode.Mode.configure`);
    the prompts, ``max_steps`` per input and the prefix are checked with each batch
    (:func:`beamsearch.controls.shared.options`). Returns the checked controls (a configuration
    keeps them: :attr:`beamsearch.core.config.SearchConfig.checked`)."""
    checked = checked_controls(config)
    steps = config.max_steps
    if isinstance(steps, (str, bytes)) or not hasattr(steps, "__len__"):  # one limit for every input
        check.max_steps(steps, 0)
    check.penalty_strength("alpha", config.alpha, checked.penalty, 1)
    return checked
