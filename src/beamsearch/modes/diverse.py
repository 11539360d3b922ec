"""``diverse_beam_search``: Vijayakumar et al. 2016's grouped beam search with a Hamming diversity
penalty, on the one engine (:mod:`beamsearch.strategies.diverse`)."""

from __future__ import annotations

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
from beamsearch.strategies.batch import BatchBeam
from beamsearch.strategies.diverse import DiverseBeam

__all__ = ["DIVERSE", "DiverseOptions", "diverse_beam_search", "diverse_plan"]


def diverse_beam_search(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    *,
    num_groups: int,
    diversity_penalty: float,
    beam_size: int,
    n_best: int = 1,
    pad_token_id: int | None = None,
    return_token_logprobs: bool = False,
    early_stop: bool = True,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
    **controls: Any,
) -> BatchResults:
    """Diverse beam search (Vijayakumar et al. 2016): G groups with a Hamming diversity penalty.

    Each input's ``beam_size`` live rows are split into ``num_groups`` groups of
    ``beam_size // num_groups`` rows. At every step the groups choose in order: group g ranks its
    rows' extensions by logprob so far + log-probability - ``diversity_penalty`` * (times the
    token was chosen at this step by groups 0..g-1 of the same input), ties to the lower flat
    index within the group; its ``beam_size // num_groups`` best non-terminal extensions are its
    next live rows, and every finite eos (or stop-sequence) extension of its rows finishes
    outside the beam (SPEC section 6). Only the live choices count for the penalty. Each group
    is a beam of its own that starts from the input's one hypothesis: at step 1 every group
    extends the one row (one model call row), and its finished extensions count once per group.
    The penalty is soft: an output that several groups reach is returned once per group, as G
    independent beams would.

    The penalty only steers the choice: ``logprob`` and ``score`` of every result are the
    model's processed log-probability and its length-penalized score, as
    :func:`~beamsearch.beam_search_batch` reports them.

    Results merge the groups: per input, every group's finished hypotheses ranked together by
    score (ties in production order: earlier step first, then group order), cut to ``n_best``;
    when fewer than ``n_best`` finished, the live rows at the end (unfinished, by score) fill up.
    Early stopping is lossless per input: an input stops, all its groups at once, when it has
    ``n_best`` finished and no live row of any group can reach a score above its ``n_best``-th
    (``s / lp(max_steps[i])`` bounds a live row of logprob ``s``), so ``early_stop=False``
    returns the same results. With ``num_groups=1`` this is :func:`beam_search_batch`.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt (axis 0 of every array leaf).
        prompts: ``N`` lists of token ids; the first call gets each prompt's last token.
        num_groups: G >= 1; must divide ``beam_size``.
        diversity_penalty: lambda >= 0 and finite; 0 makes the groups G independent beams.
        beam_size: live rows per input over all groups, >= 1.
        n_best: results per input, ``1 <= n_best <= beam_size``.
        pad_token_id: fills :meth:`BatchResults.arrays`; never changes the search.
        return_token_logprobs: return :class:`TokenLogprobHypothesis` objects.
        early_stop: stop an input once no live row can still enter its n_best (lossless).
        callback, trace, trace_width: as for :func:`beamsearch.beam_search`.
        **controls: the shared keywords of :func:`beam_search_batch` (``eos_token_id`` and
            ``max_steps`` required; ``alpha``, ``length_penalty``, ``temperature``, ``top_k``,
            ``no_repeat_ngram_size``, ``logits_processors``, ``min_new_tokens``,
            ``stop_sequences``, ``prefix``, ``bos_token_id``), with the same meaning.

    Returns:
        A :class:`BatchResults`: per input, up to ``n_best`` hypotheses, best first.

    Raises:
        ValueError: ``num_groups`` < 1 or not dividing ``beam_size``; a negative, NaN or infinite
            ``diversity_penalty``; any error of :func:`beam_search_batch`'s arguments.
        TypeError: a non-integer size or a non-real penalty.
    """
    config = DIVERSE.configure(dict(controls, num_groups=num_groups, diversity_penalty=diversity_penalty,
                                    beam_size=beam_size, n_best=n_best, pad_token_id=pad_token_id,
                                    return_token_logprobs=return_token_logprobs, early_stop=early_stop))
    return run_plan(step_fn, init_state, diverse_plan(prompts, config), callback=callback, trace=trace,
                    trace_width=trace_width)


def diverse_plan(prompts: Sequence[Sequence[int]], config: SearchConfig) -> Plan:
    """The :class:`~beamsearch.core.plan.Plan` of :func:`diverse_beam_search` over ``prompts``
    with its configuration (``DIVERSE.configure`` of its keywords but the model, the state and the
    callback/trace ones): the prompts and per-input values are checked."""
    c, own = config.controls, config.options
    opts = options(prompts, c, checked=config.checked)
    bound = opts.penalty(opts.controls.max_steps, opts.alpha)  # --> [N], lp(max_steps[i])
    rule = BatchBeam(c.beam_size, c.n_best, opts.penalty, opts.alpha, bound, c.early_stop)
    strategy = DiverseBeam(own.num_groups, c.beam_size // own.num_groups, own.diversity_penalty, rule)
    return Plan(opts, strategy, c.beam_size, n_best=c.n_best, pad_token_id=c.pad_token_id,
                token_logprobs=c.return_token_logprobs)


def _checked(beam_size: Any, n_best: Any, num_groups: Any, diversity_penalty: Any,
             early_stop: Any) -> tuple[int, int, int, float, bool]:
    """Diverse beam search's sizes and options checked (no prompt changes them)."""
    beam_size, n_best = check.search_sizes(beam_size, n_best)
    groups = check.at_least("num_groups", num_groups, 1)
    if beam_size % groups:
        raise ValueError(f"num_groups must divide beam_size={beam_size}; got num_groups={groups}")
    penalty = check.real("diversity_penalty", diversity_penalty, finite=True)
    return beam_size, n_best, groups, penalty, check.flag("early_stop", early_stop)


@dataclass(frozen=True)
class DiverseOptions:
    """The options of diverse beam search, beside the shared controls and sizes."""

    num_groups: int | None = option(None, "groups (divides the beam size)", metavar="G", required=True,
                                    aliases=("--groups",), hf="num_beam_groups")
    diversity_penalty: float | None = option(None, "the Hamming diversity penalty", metavar="P", required=True,
                                             hf="diversity_penalty")


DIVERSE = Mode("diverse", "diverse beam search: groups of the beam kept apart by a diversity penalty",
               diverse_beam_search, plan=diverse_plan, options=DiverseOptions,
               rows=lambda keywords: keywords["beam_size"],
               sizes=("beam_size", "n_best", "early_stop", "return_token_logprobs", "pad_token_id"),
               check=lambda kw: dict(zip(("beam_size", "n_best", "num_groups", "diversity_penalty", "early_stop"),
                                         _checked(kw["beam_size"], kw["n_best"], kw["num_groups"],
                                                  kw["diversity_penalty"], kw["early_stop"]), strict=True)))
"""Diverse beam search (:func:`diverse_beam_search`)."""
