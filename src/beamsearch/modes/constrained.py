"""Lexically constrained beam search: ``constrained_beam_search`` and the constraint type ``AnyOf``.

A constraint is a phrase (a non-empty sequence of token ids) that must occur contiguously in the
generated tokens, or ``AnyOf(phrase, ...)``: any one of its phrases will do. Unordered (the
default), every constraint must occur somewhere; occurrences may overlap. With ``ordered=True``
they must occur one after the other: constraint j+1's phrase begins after constraint j's phrase
ends. The prompt is not searched; a forced ``prefix`` is (it is generated text).

The strategy is :class:`beamsearch.strategies.constrained.ConstrainedBeam` on the one engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.controls.shared import Inputs, Options, options
from beamsearch.core import validate as check
from beamsearch.core.config import SearchConfig, option
from beamsearch.core.engine import StepFn
from beamsearch.core.hypothesis import BatchResults
from beamsearch.core.mode import Mode
from beamsearch.core.plan import Plan, StepCallback, run_plan
from beamsearch.core.trace import SearchTree
from beamsearch.strategies.batch import BatchBeam
from beamsearch.strategies.constrained import MAX_STATES, ConstrainedBeam, Constraint, TooManyStates, Trackers

__all__ = ["CONSTRAINED", "AnyOf", "ConstrainedOptions", "constrained_beam_search", "constrained_plan"]

_REFUSED = {
    "early_stop": "it always stops an input once no live row can beat its n_best-th finished output, which is "
                  "lossless: the results are those of a search that never stops early",
}
"""The keywords of ``beam_search_batch`` that constrained beam search does not take, and why."""


class AnyOf:
    """A disjunctive constraint: met when any one of ``phrases`` occurs in the output.

    ``AnyOf([5, 6], [7])`` is met by the tokens ``5, 6`` or by ``7``. Each phrase is a non-empty
    sequence of token ids (checked when the search starts, where the error can name its place).
    """

    __slots__ = ("phrases",)

    def __init__(self, *phrases: Sequence[int]) -> None:
        self.phrases = phrases

    def __repr__(self) -> str:
        return f"AnyOf({', '.join(repr(list(p)) for p in self.phrases)})"


def constrained_beam_search(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    *,
    constraints: Sequence[Sequence[Sequence[int] | AnyOf]],
    beam_size: int,
    n_best: int = 1,
    ordered: bool = False,
    pad_token_id: int | None = None,
    return_token_logprobs: bool = False,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
    **controls: Any,
) -> BatchResults:
    """Beam search whose finished outputs contain every constraint (dynamic beam allocation).

    Each step, per input: the candidates are each live row's ``beam_size`` best tokens plus every
    token that advances one of its unmet constraints; they are grouped into banks by how many
    tokens the row still needs to meet all its constraints, the beam is divided among the banks
    present (so rows that met more are not crowded out), and each bank keeps its best. An eos (or
    stop-sequence) extension finishes only when its row then meets every constraint of its input;
    other terminal extensions are discarded. Scores, processing and early stopping are those of
    :func:`beamsearch.beam_search_batch`.

    Guarantee: when every token has a finite processed log-probability at every step (no top-k,
    no n-gram blocking, no ``-inf`` logits, no stop sequence), a satisfying output of at most
    ``max_steps`` tokens exists, and ``beam_size >= 1``, the first result is finished and meets
    every constraint. With an exhaustive beam (``beam_size >= V ** max_steps``) it is the best
    such output by score. An input without constraints is searched as by ``beam_search_batch``.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt.
        prompts: ``N`` lists of token ids (as for ``beam_search_batch``).
        constraints: one list per prompt (may be empty); each item a phrase (a non-empty sequence
            of token ids, none of them an eos id) or an :class:`AnyOf` of phrases.
        beam_size: live rows per input, >= 1.
        n_best: results per input, ``1 <= n_best <= beam_size``.
        ordered: the constraints must be met in the given order (without overlapping).
        pad_token_id: fills :meth:`BatchResults.arrays`; never changes the search.
        return_token_logprobs: return :class:`TokenLogprobHypothesis` objects.
        callback, trace, trace_width: as for :func:`beamsearch.beam_search`.
        **controls: the shared keywords of ``beam_search_batch``: ``eos_token_id`` and
            ``max_steps`` (required), ``alpha``, ``length_penalty``, ``no_repeat_ngram_size``,
            ``temperature``, ``top_k``, ``bos_token_id``, ``logits_processors``,
            ``min_new_tokens``, ``stop_sequences``, ``prefix``. ``early_stop`` is refused (a
            TypeError): an input always stops early, losslessly.

    Returns:
        A :class:`BatchResults`: per input, its finished (so satisfying) hypotheses sorted by
        score, cut to n_best; when fewer than n_best finished, live rows fill up (unfinished,
        not necessarily satisfying).

    Raises:
        ValueError / TypeError, before any model call, naming the parameter: the shared controls'
        errors; ``constraints`` not one list per prompt, an empty phrase or ``AnyOf``, a
        non-integer or negative id, an eos id in a phrase, constraints that cannot be met within
        ``max_steps`` (after the forced prefix), more than ``MAX_STATES`` tracker states. A phrase
        id >= V is a ValueError at the first step, before any selection.
    """
    config = CONSTRAINED.configure(dict(controls, constraints=constraints, beam_size=beam_size, n_best=n_best,
                                        ordered=ordered, pad_token_id=pad_token_id,
                                        return_token_logprobs=return_token_logprobs))
    return run_plan(step_fn, init_state, constrained_plan(prompts, config), callback=callback, trace=trace,
                    trace_width=trace_width)


def constrained_plan(prompts: Sequence[Sequence[int]], config: SearchConfig) -> Plan:
    """The :class:`~beamsearch.core.plan.Plan` of :func:`constrained_beam_search` over ``prompts``
    with its configuration (``CONSTRAINED.configure`` of its keywords but the model, the state and
    the callback/trace ones): the prompts and the constraints, one list per prompt, are checked."""
    c, own = config.controls, config.options
    opts = options(prompts, c, checked=config.checked)
    trackers, named = _trackers(own.constraints, own.ordered, opts.controls.eos, c.prefix, opts.controls.max_steps)
    checks = opts.controls.vocab_checks + tuple(named)
    opts = Options(opts.prompts, dataclasses.replace(opts.controls, vocab_checks=checks), opts.scoring)
    bound = opts.penalty(opts.controls.max_steps, opts.alpha)  # --> [N], lp(max_steps[i])
    finish = BatchBeam(c.beam_size, c.n_best, opts.penalty, opts.alpha, bound, early_stop=True)
    return Plan(opts, ConstrainedBeam(c.beam_size, trackers, finish), c.beam_size, n_best=c.n_best,
                pad_token_id=c.pad_token_id, token_logprobs=c.return_token_logprobs)


def _trackers(constraints: Any, ordered: bool, eos: np.ndarray, prefix: Any, max_steps: np.ndarray
              ) -> tuple[Trackers, list[tuple[str, list[int]]]]:
    """The trackers of each input's ``constraints`` (one list per input, ``max_steps`` ``[N]``
    long), checked: met within each input's ``max_steps`` after its ``prefix``; and the phrases
    named for the ``[0, V)`` check (:func:`_constraints`)."""
    cons, named = _constraints(constraints, max_steps.shape[0], eos)
    try:
        trackers = Trackers.build(cons, ordered)
    except TooManyStates as e:
        i = e.args[0]
        kind, advice = ("ordered", "use fewer or shorter ones") if ordered else \
            ("unordered", "use fewer or ordered=True")
        raise ValueError(f"constraints[{i}] need more than {MAX_STATES} tracker states "
                         f"({len(cons[i])} {kind} constraints); {advice}") from None
    if cons:
        _check_fit(trackers, prefix, max_steps)
    return trackers, named


def _input_checks(config: SearchConfig, inputs: Inputs) -> tuple[tuple[str, Any], ...]:
    """Inputs checked without a plan: their own ``constraints`` (:func:`_trackers`), their phrases named."""
    own = config.options
    return tuple(_trackers(own.constraints, own.ordered, inputs.eos, inputs.prefix, inputs.max_steps)[1])


def _constraints(value: Any, n_inputs: int, eos: np.ndarray
                 ) -> tuple[list[tuple[Constraint, ...]], list[tuple[str, list[int]]]]:
    """Each input's constraints as tuples of alternative phrases, and ``(name, phrase)`` pairs
    naming every phrase as the caller wrote it (for the ``[0, V)`` check at the first step)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"constraints must be one list of constraints per prompt; got {value!r:.80}")
    if len(value) != n_inputs:
        raise ValueError(f"constraints must have one list per prompt ({n_inputs}); got {len(value)}")
    eos_ids = set(eos.tolist())
    out, named = [], []
    for i, row in enumerate(value):
        if isinstance(row, (str, bytes, AnyOf)) or not hasattr(row, "__len__"):
            raise TypeError(f"constraints[{i}] must be a list of phrases and AnyOf; got {row!r:.80}")
        cons = []
        for j, item in enumerate(row):
            name = f"constraints[{i}][{j}]"
            alternatives: Sequence[Any]
            if isinstance(item, AnyOf):
                if not item.phrases:
                    raise ValueError(f"{name} is AnyOf() without a phrase; it needs at least one")
                names = [f"{name}.phrases[{a}]" for a in range(len(item.phrases))]
                alternatives = item.phrases
            else:
                names, alternatives = [name], [item]
            phrases = []
            for where, phrase in zip(names, alternatives, strict=True):
                ids = check.token_list(where, phrase)
                bad = [t for t in ids if t in eos_ids]
                if bad:
                    raise ValueError(f"{where} must not hold an eos id; got {ids} (eos {bad[0]})")
                phrases.append(tuple(ids))
                named.append((where, ids))
            cons.append(tuple(phrases))
        out.append(tuple(cons))
    return out, named


def _check_fit(trackers: Trackers, prefix: Any, max_steps: np.ndarray) -> None:
    """Every input's constraints can be met, with an eos after them, within its ``max_steps``
    (the forced prefix first: its tokens count, and may meet constraints)."""
    state = trackers.start.copy()
    shortest = np.zeros(state.shape[0], np.int64)
    if prefix is not None:
        for i, forced in enumerate(prefix):  # setup, before the search: a few tokens per input
            for t in forced:
                state[i:i + 1] = trackers.next(state[i:i + 1], np.array([i]), np.array([int(t)]))
            shortest[i] = len(forced)
    shortest += trackers.need[state] + 1  # then the missing tokens, then eos
    late = np.flatnonzero(shortest > max_steps)
    if late.size:
        i = int(late[0])
        raise ValueError(f"constraints[{i}] cannot be met within max_steps={int(max_steps[i])}: the shortest "
                         f"output meeting them has {int(shortest[i])} tokens, eos included")


@dataclass(frozen=True)
class ConstrainedOptions:
    """The options of constrained beam search, beside the shared controls and sizes."""

    constraints: Any = option((), "every output contains TEXT (target tokens); repeatable; a JSON line's own "
                                   "constraints (texts, or lists of texts for alternatives) replace these",
                               metavar="TEXT", texts=True, aliases=("--constraint",),
                               hf="force_words_ids")
    ordered: bool = option(False, "the constraints appear in the given order", aliases=("--ordered-constraints",))


CONSTRAINED = Mode("constrained", "constrained beam search: every output contains the constraints",
                   constrained_beam_search, plan=constrained_plan, options=ConstrainedOptions,
                   rows=lambda keywords: keywords["beam_size"], refused=_REFUSED, per_input={"constraints": []},
                   check_input=_input_checks,
                   sizes=("beam_size", "n_best", "return_token_logprobs", "pad_token_id"),
                   check=lambda kw: dict(zip(("beam_size", "n_best"), check.search_sizes(kw["beam_size"], kw["n_best"]),
                                             strict=True), ordered=check.flag("ordered", kw["ordered"])))
"""Constrained beam search (:func:`constrained_beam_search`)."""
