"""Step search's records between rounds: the partial solutions that go on (:class:`Live`), a
round's candidates (:class:`Candidates`), what each prompt spent (:class:`RowCount`), the choice
after a round (:func:`settle_round`) and the results (:class:`StepSolution`, :class:`StepResults`).
Python lists per candidate, once per round (the scorer takes lists); the token steps in between
are the engine's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.engine import Outcome
from beamsearch.core.hypothesis import BatchResults, Hypothesis
from beamsearch.core.select import StepScores, positions
from beamsearch.core.state import concat_state, select_state
from beamsearch.modes.step_scorer import call_scorer
from beamsearch.strategies import Selection
from beamsearch.strategies.step import aggregate, keep_best

__all__ = ["Candidates", "Live", "RowCount", "StepResults", "StepSolution", "budgets", "settle_round"]

NO_LIMIT = 2**62


def budgets(name: str, value: Any, n_prompts: int) -> np.ndarray:
    """int64 ``[P]``: a per-prompt budget (an int >= 1, or None: no limit)."""
    limit = NO_LIMIT if value is None else check.at_least(name, value, 1)
    return np.full(n_prompts, limit, np.int64)


@dataclass
class StepSolution(Hypothesis):
    """A solution of step search: a :class:`Hypothesis` (``tokens``: all its segments' tokens;
    ``logprob``: their processed log-probability; ``score``: its aggregated step score;
    ``finished``: it ended with an eos id) with its steps.

    Attributes:
        segments: its segments' tokens, in order (they join into ``tokens``).
        step_scores: the scorer's score of each step (one per segment).
    """

    segments: list[list[int]] = field(default_factory=list)
    step_scores: list[float] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        """Its generated tokens."""
        return len(self.tokens)


@dataclass
class RowCount:
    """What each prompt spent, int64 ``[P]`` each: ``rows`` (model rows, one generated token
    each), ``calls`` (model calls that held some of its rows), ``scorer_calls``, ``scored``
    (candidates scored), ``rounds``; ``model_calls`` and ``scorer_total``: the whole search's."""

    rows: np.ndarray
    calls: np.ndarray
    scorer_calls: np.ndarray
    scored: np.ndarray
    rounds: np.ndarray
    model_calls: int = 0
    scorer_total: int = 0

    @staticmethod
    def books(n_prompts: int) -> RowCount:
        z = np.zeros(n_prompts, np.int64)
        return RowCount(z.copy(), z.copy(), z.copy(), z.copy(), z.copy())

    def counter(self, prompt_of_input: np.ndarray) -> _Counter:
        """An engine observer that counts each call's rows into these books (engine input i is
        a segment of prompt ``prompt_of_input[i]``)."""
        return _Counter(self, prompt_of_input)


class _Counter:
    """Counts each model call's rows per prompt (an engine observer; it changes nothing)."""

    def __init__(self, book: RowCount, prompt_of_input: np.ndarray) -> None:
        self.book, self.prompt_of_input = book, prompt_of_input

    def before_select(self, scores: StepScores) -> None:
        rows = np.bincount(self.prompt_of_input[scores.beam.input], minlength=self.book.rows.shape[0])
        self.book.rows += rows
        self.book.calls += rows > 0
        self.book.model_calls += 1

    def after_select(self, seen: Any, scores: StepScores, selection: Selection, controls: Any, trail: Any) -> Selection:
        return selection


@dataclass(frozen=True)
class Live:
    """The partial solutions that go on, ``[L]``, prompt-major.

    Attributes:
        prompt: int64 ``[L]``: each one's prompt.
        prompts: every prompt's token ids.
        tokens, segments, step_scores: each one's generated tokens, segments and step scores.
        logprob: float64 ``[L]``.
        subtree: int64 ``[L]``: its DVTS subtree (0 before round 1).
        slot: int64 ``[L]``: its place among its prompt's partial solutions.
        state: the model state, one row each (its last token not fed yet).
        carried: the row states of the processors that carry one (by ``id``), one row each, where
            its last segment left them (None: they start at the next segment's start).
        open_from: int64 ``[L]``: where in its tokens its open step begins (after its last
            delimiter): the stop sequences are matched from there, across segments.
    """

    prompt: np.ndarray
    prompts: list[list[int]]
    tokens: list[list[int]]
    segments: list[list[list[int]]]
    step_scores: list[list[float]]
    logprob: np.ndarray
    subtree: np.ndarray
    slot: np.ndarray
    state: Any
    carried: dict[int, Any] | None
    open_from: np.ndarray

    @staticmethod
    def roots(prompts: list[list[int]], init_state: Any) -> Live:
        n = len(prompts)
        z = np.zeros(n, np.int64)
        return Live(np.arange(n), prompts, [[] for _ in prompts], [[] for _ in prompts], [[] for _ in prompts],
                    np.zeros(n), z, z, init_state, None, z)

    @property
    def size(self) -> int:
        return int(self.prompt.shape[0])

    def take(self, idx: np.ndarray, state: Any, carried: dict[int, Any] | None) -> Live:
        """The partial solutions ``idx`` (int64 ``[j]``), with their ``state`` and ``carried``."""
        at = idx.tolist()
        return Live(self.prompt[idx], self.prompts, [self.tokens[j] for j in at], [self.segments[j] for j in at],
                    [self.step_scores[j] for j in at], self.logprob[idx], self.subtree[idx],
                    positions(self.prompt[idx]), state, carried, self.open_from[idx])

    def split(self, going: np.ndarray) -> tuple[Live, Live]:
        """(those that stop, those that go on), by ``going`` (bool ``[L]``)."""
        if going.all():
            return self.take(np.zeros(0, np.int64), None, None), self
        on = np.flatnonzero(going)
        state = select_state(self.state, on) if on.size else None
        carried = select_state(self.carried, on) if on.size and self.carried is not None else None
        return self.take(np.flatnonzero(~going), None, None), self.take(on, state, carried)

    def recent(self, parent: np.ndarray, window: int) -> np.ndarray:
        """int64 ``[E, w]``: the last ``window`` tokens of the open step of each partial solution
        ``parent`` (int64 ``[E]``), left-padded with -1: what a stop sequence is matched on."""
        out = np.full((parent.shape[0], window), -1, np.int64)
        for e, j in enumerate(parent.tolist()):  # once per round and expansion, like the prompts
            step = self.tokens[j][int(self.open_from[j]):]
            tail = step[max(len(step) - window, 0):]
            if tail:
                out[e, window - len(tail):] = tail
        return out

    def context(self, j: int, history: bool) -> list[int]:
        """The engine prompt of partial solution j: its prompt and tokens (or its last token only
        when no processor reads the history)."""
        whole = self.prompts[int(self.prompt[j])] + self.tokens[j]
        return whole if history else whole[-1:]

    def solutions(self, how: str) -> list[tuple[int, StepSolution]]:
        """Each one that has a step as an unfinished solution, with its prompt."""
        return [(int(p), StepSolution(t, float(lp), aggregate(sc, how), False, sg, sc))
                for p, t, lp, sg, sc in zip(self.prompt.tolist(), self.tokens, self.logprob, self.segments,
                                            self.step_scores, strict=True) if sc]

    def candidates(self, outcome: Outcome, rank: np.ndarray, parent: np.ndarray, engine_slot: np.ndarray,
                   eos: np.ndarray, kept: set[int]) -> Candidates:
        """A round's candidates: the hypotheses ``rank`` (positions in ``outcome.ended``, by
        engine input) of engine inputs that expand partial solutions ``parent`` (int64 ``[E]``);
        engine input e's k-th is candidate ``engine_slot[e] + k`` of its prompt. ``kept``: the
        processors (by ``id``) whose row states go on to the next round (the others, which start
        from a prompt, start again from the whole one: n-gram blocking)."""
        chosen = outcome.ended.take(rank)
        tokens, _ = outcome.trail.paths(chosen)
        steps = chosen.step.tolist()
        segs = [tokens[j, :s].tolist() for j, s in enumerate(steps)]
        last = tokens[np.arange(len(steps)), chosen.step - 1] if steps else np.zeros(0, np.int64)
        which = parent[chosen.input]
        slot = engine_slot[chosen.input] + positions(chosen.input)
        joined = concat_state(list(outcome.model_states)) if outcome.model_states else None
        carried = concat_state([{key: c[key] for key in kept} for c in outcome.carried_states]) \
            if outcome.carried_states and kept else None
        by_eos = np.isin(last, eos)
        return Candidates(self, which, segs, chosen.logprob, chosen.finished & by_eos, rank, slot, joined, carried,
                          chosen.finished & ~by_eos)


@dataclass(frozen=True)
class Candidates:
    """One round's candidates ``[C]``, by partial solution, each one's best first.

    Attributes:
        live: the partial solutions they extend; ``parent``: int64 ``[C]``, which one.
        segments: each one's new segment; ``logprob``: float64 ``[C]``, its logprob.
        done: bool ``[C]``: ended by an eos id (a finished solution).
        ended: int64 ``[C]``: its row in ``state``; ``slot``: int64 ``[C]``: candidate c of its prompt.
        state: the model state rows of the round's ended segments (``Outcome.model_states`` joined).
        carried: their processors' row states (``Outcome.carried_states`` joined), or None.
        delimited: bool ``[C]``: ended by a stop sequence (a step delimiter).
    """

    live: Live
    parent: np.ndarray
    segments: list[list[int]]
    logprob: np.ndarray
    done: np.ndarray
    ended: np.ndarray
    slot: np.ndarray
    state: Any
    carried: dict[int, Any] | None
    delimited: np.ndarray


def settle_round(cand: Candidates, s: Any, book: RowCount, round_index: int
                 ) -> tuple[Live, list[tuple[int, StepSolution]]]:
    """Score a round's candidates (one scorer call), collect the finished ones, keep the best of the
    others (per prompt its ``n / m``; with DVTS per subtree its best).

    Returns:
        The next :class:`Live` (its model state the kept rows of ``cand.state``) and the finished
        solutions, each with its prompt.
    """
    live, c = cand.live, cand.parent.shape[0]
    prompt = live.prompt[cand.parent]
    tokens = [live.tokens[j] + seg for j, seg in zip(cand.parent.tolist(), cand.segments, strict=True)]
    scores = call_scorer(s.scorer, [live.prompts[p] for p in prompt.tolist()], tokens, c, s.aggregation)
    book.scorer_total += 1
    book.scorer_calls += np.bincount(prompt, minlength=book.rows.shape[0]) > 0
    book.scored += np.bincount(prompt, minlength=book.rows.shape[0])
    book.rounds += np.bincount(prompt, minlength=book.rows.shape[0]) > 0
    steps = [live.step_scores[j] + [v] for j, v in zip(cand.parent.tolist(), scores.tolist(), strict=True)]
    segments = [live.segments[j] + [seg] for j, seg in zip(cand.parent.tolist(), cand.segments, strict=True)]
    with np.errstate(invalid="ignore", over="ignore"):  # a NaN is refused below
        agg = np.array([aggregate(x, s.aggregation) for x in steps], np.float64).reshape(c)
    if np.isnan(agg).any():  # +inf and -inf in a mean, or a product that overflowed to inf times a 0
        j = int(np.flatnonzero(np.isnan(agg))[0])
        raise ValueError(f"aggregation {s.aggregation!r} of candidate {j}'s step scores {steps[j]} is NaN (infinities "
                         "of both signs, or a product that overflows times 0): scores must aggregate to a number")
    logprob = live.logprob[cand.parent] + cand.logprob
    finished = [(int(prompt[j]), StepSolution(tokens[j], float(logprob[j]), float(agg[j]), True, segments[j], steps[j]))
                for j in np.flatnonzero(cand.done).tolist()]
    subtree = cand.slot // s.m if round_index == 0 else live.subtree[cand.parent]
    going = np.flatnonzero(~cand.done)
    groups = s.n // s.m
    group = prompt * groups + subtree if s.dvts else prompt
    kept = going[keep_best(agg[going], logprob[going], token_order(tokens, going), group[going],
                           1 if s.dvts else groups)]
    state = select_state(cand.state, cand.ended[kept]) if kept.size else None
    carried = select_state(cand.carried, cand.ended[kept]) if kept.size and cand.carried is not None else None
    at = kept.tolist()
    lengths = np.array([len(tokens[j]) for j in at], np.int64)
    open_from = np.where(cand.delimited[kept], lengths, live.open_from[cand.parent[kept]])
    nxt = Live(prompt[kept], live.prompts, [tokens[j] for j in at], [segments[j] for j in at], [steps[j] for j in at],
               logprob[kept], subtree[kept], positions(prompt[kept]), state, carried, open_from)
    return nxt, finished


def token_order(tokens: list[list[int]], among: np.ndarray) -> np.ndarray:
    """int64 ``[j]``: the place of each of ``tokens[among]`` when they are sorted (equal lists share one)."""
    lists = [tuple(tokens[j]) for j in among.tolist()]
    place = {t: i for i, t in enumerate(sorted(set(lists)))}
    return np.array([place[t] for t in lists], np.int64)


class StepResults(BatchResults):
    """``results[i]``: prompt i's solutions (:class:`StepSolution`), best first.

    Attributes:
        info: per prompt, what it spent: ``model_calls`` (calls that held its rows),
            ``generated_tokens`` (its model rows), ``scorer_calls``, ``scored`` (candidates),
            ``rounds``.
        model_calls: the whole search's model calls; ``scorer_calls``: its scorer calls.
    """

    def __init__(self, *args: object, pad_token_id: int | None = None, info: list[dict[str, int]] | None = None,
                 model_calls: int = 0, scorer_calls: int = 0) -> None:
        super().__init__(*args, pad_token_id=pad_token_id)
        self.info = info or []
        self.model_calls, self.scorer_calls = model_calls, scorer_calls

    @staticmethod
    def ranked(done: list[list[StepSolution]], book: RowCount, pad_token_id: int | None) -> StepResults:
        """Each prompt's solutions ranked: score, then logprob, then tokens (lexicographic)."""
        out = [sorted(sols, key=lambda h: (-h.score, -h.logprob, h.tokens)) for sols in done]
        info = [{"model_calls": int(book.calls[i]), "generated_tokens": int(book.rows[i]),
                 "scorer_calls": int(book.scorer_calls[i]), "scored": int(book.scored[i]),
                 "rounds": int(book.rounds[i])} for i in range(len(done))]
        return StepResults(out, pad_token_id=pad_token_id, info=info, model_calls=book.model_calls,
                           scorer_calls=book.scorer_total)
