"""``transformers_beam_search``: the beam search rule of ``transformers``' ``generate``, on the one
engine (:mod:`beamsearch.strategies.transformers_beam`), so that a team moving from
``model.generate`` gets its outputs exactly, then moves to our exact rule when it chooses
(``beamsearch.hf.generate(..., mode="transformers")``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from beamsearch.controls.shared import options
from beamsearch.core import validate as check
from beamsearch.core.config import SearchConfig, option
from beamsearch.core.engine import StepFn
from beamsearch.core.hypothesis import BatchResults
from beamsearch.core.mode import Mode
from beamsearch.core.plan import Plan, StepCallback, run_plan
from beamsearch.core.trace import SearchTree
from beamsearch.strategies.transformers_beam import TransformersBeam

__all__ = ["TRANSFORMERS", "TransformersOptions", "transformers_beam_search", "transformers_plan"]

_DEFAULTS: dict[str, Any] = {"length_penalty": "power", "alpha": 1.0}
"""generate's length penalty, ``len ** 1.0``: the rule's defaults of the shared controls that differ
(its function's, its plan's and its mode's, from here)."""


def transformers_beam_search(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    *,
    beam_size: int,
    n_best: int = 1,
    early_stopping: bool | str = False,
    alpha: float = _DEFAULTS["alpha"],
    length_penalty: str = _DEFAULTS["length_penalty"],
    pad_token_id: int | None = None,
    return_token_logprobs: bool = False,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
    **controls: Any,
) -> BatchResults:
    """Beam search by ``transformers``' rule (``generate`` with ``num_beams > 1``, transformers 5).

    The same step, processors and controls as :func:`beamsearch.beam_search_batch`, with
    ``generate``'s choices where they differ from ours (see
    :mod:`beamsearch.strategies.transformers_beam` for the whole rule):

    - the processors (n-gram blocking, ``min_new_tokens``' eos mask, ``logits_processors``) act
      on the log-probabilities *after* log_softmax, without renormalizing, as ``generate``'s
      beam search applies its logits processors;
    - an eos (or stop-sequence) extension finishes only when it ranks among the input's first
      ``beam_size`` candidates (live and terminal together); the others are dropped;
    - the score is ``logprob / len ** alpha`` (``generate``'s ``length_penalty`` is ``alpha``),
      len counting eos; at ``max_steps`` the first ``beam_size`` candidates end, unfinished
      unless terminal;
    - ``early_stopping`` as ``generate`` reads it: True closes an input once it has
      ``beam_size`` finished; False (``generate``'s default) once its best live row's logprob
      over ``t ** alpha`` (t the tokens so far) cannot beat its worst finished; ``"never"`` the
      same with ``max_steps ** alpha`` when ``alpha > 0`` (with ``alpha = 0`` and ``"never"``:
      the canonical beam search, which stops when no live row can improve). None of these is
      lossless: the rule can miss a better hypothesis that :func:`beam_search_batch` finds.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt (axis 0 of every array leaf).
        prompts: ``N`` lists of token ids; the first call gets each prompt's last token.
        beam_size: B >= 1, live rows per input.
        n_best: results per input, ``1 <= n_best <= beam_size`` (``num_return_sequences``).
        early_stopping: True, False or ``"never"`` (also as the strings ``"true"`` / ``"false"``).
        alpha: the length penalty's exponent, >= 0 (default 1.0, ``generate``'s).
        length_penalty: ``"power"`` only (``generate``'s penalty).
        pad_token_id: fills :meth:`BatchResults.arrays`; never changes the search.
        return_token_logprobs: return :class:`TokenLogprobHypothesis` objects.
        callback, trace, trace_width: as for :func:`beamsearch.beam_search`.
        **controls: the shared keywords of :func:`beam_search_batch` (``eos_token_id`` and
            ``max_steps`` required; ``no_repeat_ngram_size``, ``logits_processors``,
            ``min_new_tokens``, ``stop_sequences``, ``prefix``, ``bos_token_id``); ``temperature``
            and ``top_k`` are refused (``generate``'s beam search uses them only when sampling).

    Returns:
        A :class:`BatchResults`: per input, up to ``n_best`` hypotheses, best first (score, then
        the order they ended in).

    Raises:
        ValueError: an ``early_stopping`` that is not one of its values, a ``length_penalty``
            other than ``"power"``, any error of :func:`beam_search_batch`'s arguments.
        TypeError: ``temperature`` or ``top_k`` given; a non-integer size.
    """
    config = TRANSFORMERS.configure(dict(controls, beam_size=beam_size, n_best=n_best, early_stopping=early_stopping,
                                         alpha=alpha, length_penalty=length_penalty, pad_token_id=pad_token_id,
                                         return_token_logprobs=return_token_logprobs))
    return run_plan(step_fn, init_state, transformers_plan(prompts, config), callback=callback, trace=trace,
                    trace_width=trace_width)


_EARLY_STOPPING: dict[Any, bool | str] = {False: False, True: True, "never": "never", "false": False, "true": True}


def transformers_plan(prompts: Sequence[Sequence[int]], config: SearchConfig) -> Plan:
    """The :class:`~beamsearch.core.plan.Plan` of :func:`transformers_beam_search` over ``prompts``
    with its configuration (``TRANSFORMERS.configure`` of its keywords but the model, the state and
    the callback/trace ones): the prompts and per-input values are checked."""
    c = config.controls
    opts = options(prompts, c, checked=config.checked)
    k = opts.controls  # generate's beam search processes the log-probabilities: every processor after log_softmax
    opts = dataclasses.replace(opts, controls=dataclasses.replace(k, processors=(), masks=(*k.processors, *k.masks)))
    strategy = TransformersBeam(c.beam_size, opts.alpha, k.max_steps, _EARLY_STOPPING[config.options.early_stopping])
    return Plan(opts, strategy, c.beam_size, n_best=c.n_best, finished_first=False, pad_token_id=c.pad_token_id,
                token_logprobs=c.return_token_logprobs)


def _checked(beam_size: Any, n_best: Any, early_stopping: Any, length_penalty: Any) -> tuple[int, int]:
    """The rule's sizes and options checked (no prompt changes them): ``(beam_size, n_best)``."""
    beam_size, n_best = check.search_sizes(beam_size, n_best)
    if not isinstance(early_stopping, (bool, str)) or early_stopping not in _EARLY_STOPPING:
        raise ValueError(f"early_stopping must be True, False or 'never'; got {early_stopping!r}")
    if length_penalty != "power":
        raise ValueError(f"length_penalty must be 'power' (generate's len ** alpha) for transformers_beam_search; "
                         f"got {length_penalty!r}")
    return beam_size, n_best


_REFUSED = {"temperature": "generate's beam search divides by a temperature only when it samples",
            "top_k": "generate's beam search keeps a top-k only when it samples",
            "early_stop": "the rule stops as generate does: give early_stopping"}


@dataclass(frozen=True)
class TransformersOptions:
    """The option of ``generate``'s beam search rule, beside the shared controls and sizes."""

    early_stopping: str | bool = option(
        False, "generate's early_stopping: true, false (its heuristic) or never", choices=("false", "true", "never"),
        hf="early_stopping", selects_mode=False)


TRANSFORMERS = Mode("transformers", "beam search by transformers' own rule (generate's outputs exactly)",
                    transformers_beam_search, plan=transformers_plan, options=TransformersOptions,
                    rows=lambda keywords: keywords["beam_size"],
                    sizes=("beam_size", "n_best", "return_token_logprobs", "pad_token_id"), refused=_REFUSED,
                    defaults=_DEFAULTS,
                    check=lambda kw: dict(zip(("beam_size", "n_best"), _checked(
                        kw["beam_size"], kw["n_best"], kw["early_stopping"], kw["length_penalty"]), strict=True)))
"""``generate``'s beam search rule (:func:`transformers_beam_search`)."""
