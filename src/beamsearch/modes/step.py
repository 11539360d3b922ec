"""``step_search``: verifier-guided search over reasoning steps, batched across prompts.

Per prompt, rounds of: expand each partial solution into ``m`` candidate next segments (by
sampling, or by a beam search within the segment), score every candidate of every prompt with one
call of the user's ``scorer``, aggregate each candidate's step scores, and keep the best
``n / m`` (or, with DVTS, the best of each of the ``n / m`` independent subtrees) for the next
round. The first round expands the prompt into ``n`` candidates. A segment is one engine search
(:func:`beamsearch.core.engine.run`): every segment of every prompt in one model call per token
step, ending at an eos id, a stop sequence (the step delimiters) or ``max_steps`` tokens; the model
state rows of the segments that end are kept and carried into the next round, so a partial
solution's prompt and prefix are never fed again, and its ``m`` expansions share them through
``select_state``. Best-of-N is ``rounds=1, m=1``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from beamsearch.controls.shared import mode_options
from beamsearch.core import validate as check
from beamsearch.core.config import option
from beamsearch.core.engine import StepFn, carriers, run
from beamsearch.core.mode import Mode
from beamsearch.core.penalties import LENGTH_PENALTIES
from beamsearch.core.plan import pad_id
from beamsearch.core.results import ranking
from beamsearch.core.state import select_state
from beamsearch.modes.beam import BEAM, beam_plan
from beamsearch.modes.step_rounds import Live, RowCount, StepResults, StepSolution, budgets, settle_round
from beamsearch.modes.step_scorer import scorer_of
from beamsearch.modes.stochastic import base_seed
from beamsearch.processors import TopP
from beamsearch.strategies.step import AGGREGATIONS, SegmentSampler, mix

__all__ = ["STEP", "StepOptions", "StepResults", "StepSolution", "step_search"]

EXPANSIONS = ("sample", "beam")

_REFUSED = {
    "beam_size": "its widths are n (candidates per round) and m (expansions of a partial solution)",
    "n_best": "it returns every solution it collected, ranked by the scorer",
    "early_stop": "rounds end when every segment has ended; give rounds, token_budget or scored_budget",
    "alpha": "solutions are ranked by the scorer; segments within a beam by their logprob",
    "length_penalty": "solutions are ranked by the scorer; segments within a beam by their logprob",
    "prefix": "a forced prefix is not a step; put it in the prompt instead",
    "return_token_logprobs": "its solutions carry each segment, step score and logprob",
    "callback": "a step record describes one beam; step search runs one search per round",
    "trace": "a step record describes one beam; step search runs one search per round",
    "trace_width": "a step record describes one beam; step search runs one search per round",
}
"""The keywords of ``beam_search_batch`` that step search does not take, and why."""


@dataclass(frozen=True)
class StepSettings:
    """The validated settings of one step search (see :func:`step_search`)."""

    scorer: Callable[[list[list[int]], list[list[int]]], Any]
    n: int
    m: int
    rounds: int
    expansion: str
    aggregation: str
    dvts: bool
    keys: np.ndarray  # uint64 [P]: each prompt's noise key (from the seed and its tokens)
    token_budget: np.ndarray  # int64 [P]: model rows each prompt may use (2**62: no limit)
    scored_budget: np.ndarray  # int64 [P]: candidates each prompt may have scored
    controls: dict[str, Any]  # the engine's keywords for every segment (max_steps added per round)
    max_steps: np.ndarray  # int64 [P]: each prompt's segment limit
    prompts: list[list[int]]
    history: bool  # a processor reads each row's tokens: the engine gets whole prompts


def step_search(step_fn: StepFn, init_state: Any, prompts: Sequence[Sequence[int]], *, scorer: Any, n: int,
                m: int = 1, rounds: int = 1, expansion: str = "sample", aggregation: str = "last",
                dvts: bool = False, sample_seed: int | None = None, rng: Any = None, top_p: float = 1.0,
                token_budget: int | None = None, scored_budget: int | None = None, pad_token_id: int | None = None,
                **controls: Any) -> StepResults:
    """Step search (beam search over reasoning steps scored by a verifier), or DVTS, or best-of-N.

    The first round expands each prompt into ``n`` candidate segments; every later round expands
    each of the ``n / m`` partial solutions kept into ``m``. ``expansion="sample"``: each
    candidate is sampled token by token (the processed distribution: ``temperature``, ``top_k``,
    ``no_repeat_ngram_size``, ``logits_processors``, then ``top_p``); ``"beam"``: the ``m``
    (first round: ``n``) best segments of a beam search of that width within the segment
    (finished segments first, then by logprob: SPEC section 6 with ``alpha = 0``). A segment ends
    with an eos id (the solution is finished), a stop sequence (a step delimiter: the solution
    goes on), or after ``max_steps`` tokens (it goes on). Then ``scorer(prompts,
    partial_solutions)`` is called once for all candidates of all prompts (``prompts[j]``:
    candidate j's prompt, ``partial_solutions[j]`` its generated tokens so far, both new lists of
    ints) and returns one real per candidate, the score of its newest step. A candidate's score
    aggregates its step scores (``aggregation``: ``last``, ``min``, ``prod``, ``mean``). Finished
    candidates are collected; of the others, each prompt keeps its ``n / m`` best (``dvts``:
    subtree j, made of the first round's candidates ``j*m`` to ``j*m + m - 1`` and their
    descendants, keeps its best one). Ranking: score, then logprob, then tokens in lexicographic
    order. After the last round, or when a budget would be exceeded by the next one, the partial
    solutions kept are results too (unfinished).

    Constraints go on across rounds: the row states of the processors that carry one (a grammar, a
    catalogue, a token automaton) are kept with each partial solution and forked for its
    expansions, processors that read the history see the prompt and the whole solution, stop
    sequences are matched from the solution's last delimiter; ``max_steps`` and
    ``min_new_tokens`` are per segment (docs/step_search.md, "Per solution, per segment").

    Sampling noise: candidate c of a prompt in round r (0 for the first) takes
    ``uniforms(mix(key, r, c), t)`` at its segment's t-th token (t from 1)
    (:mod:`beamsearch.strategies.step`), with ``key = mix(seed, *prompt_tokens)``; a kept partial
    solution at place s among its prompt's keeps (best first; with DVTS by subtree, a subtree
    with nothing kept skipped) has candidates ``c = s*m .. s*m + m - 1``.
    So numpy and torch models give the same solutions, and a prompt's solutions do not depend on
    the other prompts of its batch. Equal prompts (an encoder-decoder's, whose inputs are in the
    state) share their draws, each from its own distribution; give one seed per prompt to part them.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt (axis 0 of every array leaf).
        prompts: ``P`` non-empty lists of token ids (an empty one is ``[bos_token_id]``).
        scorer: a callable as above (returning ``[C]`` reals), or ``"module:function"``.
        n: candidates per prompt and round (>= 1, a multiple of ``m``).
        m: expansions of each kept partial solution (>= 1).
        rounds: the most rounds (>= 1).
        expansion: ``"sample"`` or ``"beam"``.
        aggregation: ``"last"``, ``"min"``, ``"prod"`` (step scores in ``[0, inf)``, a
            verifier's probabilities) or ``"mean"``.
        dvts: diverse verifier tree search: ``n / m`` independent subtrees.
        sample_seed, rng: the seed (an int, or one int per prompt), or a numpy / torch Generator
            that gives one; with neither, fresh entropy.
        top_p: nucleus filtering of the sampled distribution, in (0, 1].
        token_budget: per prompt, the most rows its segments may pass to the model (each row is one
            generated token), or None. A round runs only if its segments cannot exceed it: each
            segment's limit is cut to what is left, shared evenly.
        scored_budget: per prompt, the most candidates it may have scored, or None.
        pad_token_id: fills :meth:`BatchResults.arrays`.
        **controls: the shared keywords of :func:`beamsearch.beam_search_batch`
            (``eos_token_id`` and ``max_steps``, the segment limit, required; ``stop_sequences``
            are the step delimiters); ``beam_size``, ``n_best``, ``early_stop``, ``alpha``,
            ``length_penalty``, ``prefix``, ``return_token_logprobs``, ``callback``, ``trace`` and
            ``trace_width`` are a TypeError saying why.

    Returns:
        A :class:`StepResults`: per prompt its :class:`StepSolution` objects, best first, and what
        it spent (``info[i]``: ``model_calls``, ``generated_tokens``, ``scorer_calls``,
        ``scored``, ``rounds``); ``model_calls`` and ``scorer_calls`` of the whole search.

    Raises:
        ValueError, TypeError: bad arguments (naming the parameter and the value), before any
            model call; a scorer answer that is not one finite-or-infinite real per candidate.
    """
    settings = step_settings(prompts, scorer=scorer, n=n, m=m, rounds=rounds, expansion=expansion,
                             aggregation=aggregation, dvts=dvts, sample_seed=sample_seed, rng=rng, top_p=top_p,
                             token_budget=token_budget, scored_budget=scored_budget, controls=controls)
    return run_rounds(step_fn, init_state, settings, pad_id(pad_token_id))


def step_settings(prompts: Any, *, scorer: Any, n: Any, m: Any, rounds: Any, expansion: Any, aggregation: Any,
                  dvts: Any, sample_seed: Any, rng: Any, top_p: Any, token_budget: Any, scored_budget: Any,
                  controls: dict[str, Any]) -> StepSettings:
    """Every argument of :func:`step_search` checked (before any model call)."""
    n, m, rounds, p = _sizes(n, m, rounds, expansion, aggregation, top_p)
    opts = mode_options("step_search", prompts, dict(controls), _REFUSED)
    given = dict(controls)
    if p < 1:
        given["logits_processors"] = (*given.get("logits_processors", ()), TopP(p))
    given.pop("max_steps")  # each round gives each segment its own limit
    ids = opts.prompts
    keys = _keys(ids, rng, sample_seed)
    history = opts.controls.reads_prompts
    return StepSettings(scorer_of(scorer), n, m, rounds, expansion, aggregation, check.flag("dvts", dvts), keys,
                        budgets("token_budget", token_budget, len(ids)),
                        budgets("scored_budget", scored_budget, len(ids)), given, opts.controls.max_steps, ids, history)


def _sizes(n: Any, m: Any, rounds: Any, expansion: Any, aggregation: Any, top_p: Any) -> tuple[int, int, int, float]:
    """``(n, m, rounds, top_p)`` checked, and ``expansion`` and ``aggregation``."""
    n, m = check.at_least("n", n, 1), check.at_least("m", m, 1)
    if n % m:
        raise ValueError(f"n must be a multiple of m (n / m partial solutions go on); got n={n}, m={m}")
    rounds = check.at_least("rounds", rounds, 1)
    for name, value, known in (("expansion", expansion, EXPANSIONS), ("aggregation", aggregation, AGGREGATIONS)):
        if not isinstance(value, str) or value not in known:
            raise ValueError(f"{name} must be one of {', '.join(known)}; got {value!r}")
    p = check.real("top_p", top_p, positive=True)
    if p > 1:
        raise ValueError(f"top_p must be in (0, 1]; got {top_p!r}")
    return n, m, rounds, p


def _prompt_free(kw: Any) -> None:
    """The checks of :func:`step_settings` that no prompt changes (:meth:`Mode.configure`): a
    list of seeds (one per prompt) is checked with the prompts."""
    _sizes(kw["n"], kw["m"], kw["rounds"], kw["expansion"], kw["aggregation"], kw["top_p"])
    seed = kw["sample_seed"]
    if kw["rng"] is not None and seed is not None:
        _keys([], kw["rng"], seed)  # refused: both given
    elif seed is not None and not isinstance(seed, (list, tuple, np.ndarray)):
        base_seed(None, seed, "sample_seed")
    scorer_of(kw["scorer"])
    check.flag("dvts", kw["dvts"])
    for name in ("token_budget", "scored_budget"):
        budgets(name, kw[name], 0)


def _keys(ids: list[list[int]], rng: Any, sample_seed: Any) -> np.ndarray:
    """uint64 ``[P]``: each prompt's noise key, ``mix(seed, *prompt)`` (one seed, or one per prompt)."""
    if rng is not None and sample_seed is not None:
        raise ValueError(f"give rng or sample_seed, not both; got rng={rng!r} and sample_seed={sample_seed!r}")
    if isinstance(sample_seed, (list, tuple, np.ndarray)):
        if len(sample_seed) != len(ids):
            raise ValueError(f"sample_seed must be one int or one int per prompt ({len(ids)}); got {len(sample_seed)}")
        seeds = [base_seed(rng, x, f"sample_seed[{i}]") for i, x in enumerate(sample_seed)]
    else:
        seeds = [base_seed(rng, sample_seed, "sample_seed")] * len(ids)
    return np.array([mix(seed, *x) for seed, x in zip(seeds, ids, strict=True)], np.uint64).reshape(len(ids))


def run_rounds(step_fn: StepFn, init_state: Any, s: StepSettings, pad_token_id: int | None) -> StepResults:
    """The rounds of step search over the settings' prompts (see :func:`step_search`)."""
    live = Live.roots(s.prompts, init_state)
    book = RowCount.books(len(s.prompts))
    done: list[list[StepSolution]] = [[] for _ in s.prompts]
    for r in range(s.rounds):
        width = s.n if r == 0 else s.m
        limit, going = _round_limits(live, s, book, width)
        done_now, live = live.split(going)
        for p, sol in done_now.solutions(s.aggregation):
            done[p].append(sol)
        if live.size == 0:
            break
        cand = _segments(step_fn, live, s, limit[live.prompt], width, r, book)
        live, finished = settle_round(cand, s, book, r)
        for p, sol in finished:
            done[p].append(sol)
    for p, sol in live.solutions(s.aggregation):
        done[p].append(sol)
    return StepResults.ranked(done, book, pad_token_id)


def _round_limits(live: Live, s: StepSettings, book: RowCount, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt, int64 ``[P]``: this round's segment limit (within its token budget: each of its
    segments may pass ``rows`` rows per step); and bool ``[L]``: the live partial solutions whose
    prompt can run the round (segment limit >= 1, scorer budget left for its candidates)."""
    inputs = np.bincount(live.prompt, minlength=len(s.prompts)) * (1 if s.expansion == "beam" else width)
    rows = width if s.expansion == "beam" else 1
    left = s.token_budget - book.rows
    limit = np.minimum(s.max_steps, left // np.maximum(inputs * rows, 1))
    candidates = inputs * (width if s.expansion == "beam" else 1)
    ok = (limit >= 1) & (book.scored + candidates <= s.scored_budget)
    return limit, ok[live.prompt]


def _segments(step_fn: StepFn, live: Live, s: StepSettings, limit: np.ndarray, width: int, r: int,
              book: RowCount) -> Any:
    """One round's segments: one engine search over every live partial solution's expansions.

    Returns:
        The round's :class:`~beamsearch.modes.step_rounds.Candidates` (see ``Live.candidates``).
    """
    sampling = s.expansion == "sample"
    parent = np.repeat(np.arange(live.size), width) if sampling else np.arange(live.size)  # --> [E]
    state = select_state(live.state, parent) if sampling else live.state  # the m copies share the prefix
    engine_prompts = [live.context(j, s.history) for j in parent.tolist()]
    keywords = dict(s.controls, max_steps=limit[parent].tolist())
    slot = live.slot[parent] * width  # --> [E]: candidate c of its prompt (the first, for a beam)
    if sampling:
        opts = mode_options("step_search", engine_prompts, keywords)
        slot = slot + np.tile(np.arange(width), live.size)
        strategy = SegmentSampler(mix(s.keys[live.prompt[parent]], r, slot))
        controls, per_input = opts.controls, 1
    else:
        plan = beam_plan(engine_prompts, BEAM.configure(dict(keywords, beam_size=width, n_best=width, alpha=0.0)))
        strategy, controls, per_input = plan.strategy, plan.opts.controls, width
    controls = replace(controls, input_of=live.prompt[parent])  # processors see each expansion's prompt
    counter = book.counter(live.prompt[parent])
    first = np.array([x[-1] for x in engine_prompts], np.int64)
    carried = select_state(live.carried, parent) if sampling and live.carried is not None else live.carried
    recent = None if controls.stops is None else live.recent(parent, controls.stops.window)
    outcome = run(step_fn, state, first, strategy, controls, observer=counter, keep_states=True, carried=carried,
                  recent=recent)
    rank, _ = ranking(outcome.ended, parent.shape[0], LENGTH_PENALTIES["gnmt"], 0.0, n_best=per_input,
                      finished_first=True)
    kept = {key for key, p in carriers(controls).items() if not p.needs_prompt}  # the others restart from whole prompts
    return live.candidates(outcome, rank, parent, slot, controls.eos, kept)


@dataclass(frozen=True)
class StepOptions:
    """The options of step search, beside the shared controls (``max_steps`` is the segment limit,
    ``stop_sequences`` the step delimiters)."""

    scorer: Any = option(None, "the scorer, module:function (scorer(prompts, partial_solutions) -> scores)",
                         metavar="MODULE:FUNCTION", required=True)
    n: int = option(4, "candidates per prompt and round", metavar="N")
    m: int = option(1, "expansions of each partial solution kept (n / m go on)", metavar="M")
    rounds: int = option(1, "the most rounds (segments per solution)", metavar="R")
    expansion: str = option("sample", "how a partial solution is expanded", choices=EXPANSIONS)
    aggregation: str = option("last", "a solution's score from its step scores", choices=AGGREGATIONS)
    dvts: bool = option(False, "diverse verifier tree search: n / m independent subtrees")
    sample_seed: int | None = option(None, "the seed of the sampled segments", metavar="S")
    top_p: float = option(1.0, "nucleus filtering of the sampled segments", metavar="P", hf="top_p",
                          selects_mode=False)  # generate's top_p: the sampled segments' with mode="step"
    token_budget: int | None = option(None, "per prompt, the most tokens generated (model rows)", metavar="T")
    scored_budget: int | None = option(None, "per prompt, the most candidates scored", metavar="C")


def _fixed_batch(step_fn: StepFn, init_state: Any, prompts: list[list[int]], max_rows: int,
                 **keywords: Any) -> StepResults:
    """A corpus batch: the prompts in one step search (the batch's rows are its prompts' candidates)."""
    return step_search(step_fn, init_state, prompts, **keywords)


def _report(results: StepResults, i: int) -> dict[str, Any]:
    """Prompt i's spending and each solution's step scores."""
    info: dict[str, Any] = dict(results.info[i])
    info["step_scores"] = [h.step_scores for h in cast(list[StepSolution], results[i])]
    return info


STEP = Mode("step", "step search: segments scored by a verifier, the best go on (records add each output's step "
                    "scores and the model calls, tokens and scorer calls spent)", step_search, batch=_fixed_batch,
            report=_report, options=StepOptions, rows=lambda keywords: keywords.get("n", StepOptions.n),
            refused=_REFUSED, sizes=("pad_token_id",), check=_prompt_free)
"""Step search (:func:`step_search`), in fixed batches (a round waits for all its prompts' segments)."""
