"""A search ready to run: the validated shared controls (:class:`Options`, :func:`options`),
the :class:`Plan` a search mode makes of them, and :func:`run_plan`, the runner of one batch
(:func:`beamsearch.refill.decode_stream` runs plans over a stream).
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from beamsearch.core import validate as check
from beamsearch.controls import Controls
from beamsearch.controls.min_new_tokens import MinNewTokens
from beamsearch.controls.prefix import ForcedPrefix
from beamsearch.controls.stop_sequences import StopSequences
from beamsearch.core.engine import Outcome, StepFn, run
from beamsearch.core.hypothesis import BatchResults, Hypothesis
from beamsearch.core.config import REQUIRED_CONTROLS, SHARED_CONTROLS, DecodingConfig
from beamsearch.core.penalties import LENGTH_PENALTIES, LengthPenalty, PenaltyFn
from beamsearch.core.results import build
from beamsearch.core.trace import SearchTree, StepRecord, tracer
from beamsearch.processors import NoRepeatNGram, Temperature, TopK

__all__ = ["SHARED_CONTROLS", "Options", "Plan", "StepCallback", "check_controls", "mode_options", "options",
           "pad_id", "run_plan"]

StepCallback = Callable[[StepRecord], Any]
"""``callback(record) -> None | inputs to stop`` (a bool mask ``[N]`` or input ids)."""


def mode_options(mode: str, prompts: Sequence[Sequence[int]], controls: dict[str, Any],
                 refused: dict[str, str] | None = None) -> Options:
    """The validated shared controls of a search mode's ``**controls`` (the fields of
    :class:`~beamsearch.core.config.DecodingConfig` in :data:`SHARED_CONTROLS`, by the names and
    with the defaults of :func:`beam_search_batch`), checked before any model call. Their names
    are checked first: a keyword in ``refused`` (name -> why the mode does not take it) or not a
    shared control at all is a TypeError naming ``mode`` (the public function) and the keyword,
    as is a missing ``eos_token_id`` or ``max_steps``."""
    check.keywords(mode, controls, SHARED_CONTROLS, REQUIRED_CONTROLS, refused or {})
    return options(prompts, DecodingConfig(**controls))


@dataclass(frozen=True, eq=False)
class Plan:
    """One search mode over one batch of prompts, ready to run: everything but the model. A
    plan is a value: made once, never changed (a mode that needs other controls makes them before).

    A plan is made by a mode's plan function (:func:`beam_plan`, ``constrained_plan``,
    ``diverse_plan``, ``stochastic_plan``), which validates the arguments before any model call,
    and run by a runner: :func:`run_plan` for one batch, :func:`beamsearch.refill.decode_stream`
    for a stream (where each cohort of inputs joining together has its own plan).

    Attributes:
        opts: the validated prompts and controls (:func:`options`).
        strategy: the selection rule.
        rows_per_input: the most live rows one input can hold at a step (its beam size).
        n_best: results per input (None: every ended hypothesis).
        finished_first: rank finished hypotheses before unfinished ones (SPEC section 6), or
            all together by score (SPEC section 4).
        pad_token_id: for :meth:`BatchResults.arrays`.
        token_logprobs: build :class:`TokenLogprobHypothesis` objects.
    """

    opts: Options
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


@dataclass(frozen=True, eq=False)
class Options:
    """The validated arguments of a batched search (or of ``score_sequences``), never changed
    after they are made.

    Attributes:
        prompts: the prompts the search starts from (an empty one is ``[bos]``).
        controls: the engine's :class:`~beamsearch.controls.Controls`.
        scoring: the length penalty as one value (a
            :class:`~beamsearch.core.penalties.LengthPenalty`: its kind and strength); ``penalty``
            (its function) and ``alpha`` (its strength) are its parts, as the scoring functions take
            them. (``length_penalty``, in the library, names only the kind.)
    """

    prompts: list[list[int]]
    controls: Controls
    scoring: LengthPenalty

    @property
    def penalty(self) -> PenaltyFn:
        return self.scoring.function

    @property
    def alpha(self) -> float:
        return self.scoring.alpha


def check_controls(config: DecodingConfig) -> None:
    """Check the shared controls of ``config`` that no prompt changes (SPEC sections 7 and 10): the
    eos and bos ids, the processors' settings, the length penalty (its strength at one step),
    ``min_new_tokens`` and the stop sequences, each error naming its keyword. A configuration is
    checked once, where it is built (:meth:`beamsearch.core.mode.Mode.configure`); the prompts,
    ``max_steps`` per input and the prefix are checked with each batch (:func:`options`)."""
    eos, bos, penalty, *_ = _checked(config)
    steps = config.max_steps
    if isinstance(steps, (str, bytes)) or not hasattr(steps, "__len__"):  # one limit for every input
        check.max_steps(steps, 0)
    check.penalty_strength("alpha", config.alpha, penalty, 1)


def _checked(c: DecodingConfig) -> tuple[Any, ...]:
    """The prompt-free part of :func:`options`: ``(eos, bos, penalty kind, built-in processors
    before the user's, the user's processors, min_new_tokens, stop sequences)``."""
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
    processors: list[Any] = [MinNewTokens(eos, m)] if m > 0 else []
    if temperature != 1.0:
        processors.append(Temperature(temperature))
    if top_k is not None:
        processors.append(TopK(top_k))
    if ngram > 0:
        processors.append(NoRepeatNGram(ngram))
    return eos, bos, penalty, processors, user, m, stops


def options(prompts: Any, config: DecodingConfig, limits: np.ndarray | None = None) -> Options:
    """Validate the rules shared by the search and ``score_sequences`` (SPEC sections 7 and 10,
    before any model call) and assemble the controls in the documented order.

    Args:
        prompts: as given to the search.
        config: the controls (its :data:`SHARED_CONTROLS` fields are read).
        limits: None (the search: ``config.max_steps``), or (``score_sequences``) the targets'
            lengths, int64 ``[N]``.
    """
    c = config
    eos, bos, penalty, processors, user, m, stops = _checked(c)
    given = check.prompts(prompts)
    ids = check.with_bos(given, bos)
    steps = limits if limits is not None else check.max_steps(c.max_steps, len(ids))
    alpha = check.penalty_strength("alpha", c.alpha, penalty, int(steps.max(initial=1)))
    forced = check.prefix(c.prefix, len(ids), eos, steps)
    processors.extend(user)
    checks: list[tuple[str, Any]] = [("eos_token_id", check.ids_as_given(c.eos_token_id))]
    if bos is not None:
        checks.append(("bos_token_id", bos))
    checks += [("prompts", given), ("stop_sequences", stops)]  # the prompts as given: an empty one holds no id
    if forced is not None:
        checks.append(("prefix", forced))
    checks += [pair for processor in user for pair in processor.vocab_checks]
    masks = () if forced is None or not any(forced) else (ForcedPrefix.of(forced),)
    controls = Controls(eos, steps, tuple(processors), masks, StopSequences(tuple(stops), m) if stops else None,
                        ids, tuple(checks))
    return Options(ids, controls, LengthPenalty(c.length_penalty, alpha))
