"""Lexically constrained beam search with dynamic beam allocation (Post & Vilar 2018), vectorized
in the spirit of Hu et al. (2019).

Each input's constraints are compiled once, before the search, into a small deterministic
automaton (:class:`Trackers`) over the tokens its phrases use. A state records exactly which
constraints are met and every partial match in progress (Aho-Corasick goto/fail links, so a
phrase broken off falls back to the longest suffix that still starts a phrase, and several
partial matches advance together); with ``ordered`` it records which constraint is next and the
partial matches of its phrases. ``need[state]`` is the fewest tokens that still meet every
constraint from that state (0: all met). Each live row's state travels in ``Candidates.tags``;
one step is a table lookup per candidate.

Per step and input (:class:`ConstrainedBeam`):

- candidates: each row's ``beam_size`` best tokens (its best continuation among them), plus every
  token that advances its row (lowers ``need`` by one);
- banks: candidates are grouped by ``need`` (Post & Vilar's "constraint tokens met"); the
  ``beam_size`` slots are divided among the banks present, higher progress first for the
  remainder; a bank's slots go to its best candidates, slots a bank cannot fill go to the best
  remaining candidates; the kept rows are in rank order (logprob, then row, then token);
- a terminal extension (eos, stop sequence) finishes only when its row meets every constraint with
  it; the others are discarded. Early stopping is :class:`~.batch.BatchBeam`'s lossless bound.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores, accumulate, runs, split_terminals
from beamsearch.strategies import Selection
from beamsearch.strategies.batch import BatchBeam, BatchState

Phrase = tuple[int, ...]
Constraint = tuple[Phrase, ...]
"""One constraint: its alternative phrases (one for a plain phrase, several for ``AnyOf``)."""

TAG = "constraint_state"
"""The name of the per-row tag: int64 ``[k]``, each row's tracker state (a global state id)."""

MAX_STATES = 1 << 16
"""The most tracker states one input may need (unordered constraints: partial matches times the
subsets of met constraints); more is refused before the search starts."""

_ACCEPT = "accept"


class TooManyStates(Exception):
    """An input's constraints need more than :data:`MAX_STATES` tracker states."""


@dataclass(frozen=True)
class Trackers:
    """The constraint trackers of every input, stacked (global state ids).

    Attributes:
        start: int64 ``[N]``: each input's state before step 1.
        trans: int64 ``[S, A + 1]``: next state; column 0 for a token outside the input's
            alphabet (the tokens of its phrases), column ``1 + a`` for its a-th alphabet token.
        need: int64 ``[S]``: fewest tokens that still meet every constraint (0: all met).
        keys: int64 ``[L]``: sorted ``input * span + token`` over every input's alphabet.
        column: int64 ``[L]``: the ``trans`` column of each key.
        span: every alphabet token is below it.
        adv_start, adv_count: int64 ``[S]``: where each state's advancing tokens lie in ``adv_token``.
        adv_token: int64 ``[*]``: the tokens that lower ``need`` by one, state by state.
    """

    start: np.ndarray
    trans: np.ndarray
    need: np.ndarray
    keys: np.ndarray
    column: np.ndarray
    span: int
    adv_start: np.ndarray
    adv_count: np.ndarray
    adv_token: np.ndarray

    @staticmethod
    def build(constraints: Sequence[Sequence[Constraint]], ordered: bool) -> Trackers:
        """Compile each input's constraints (raises :class:`TooManyStates` with the input's index
        as its argument when one is too large)."""
        parts = []
        for i, cons in enumerate(constraints):
            try:
                parts.append(_compile(cons, ordered))
            except TooManyStates:
                raise TooManyStates(i) from None
        return _stack(parts)

    def next(self, state: np.ndarray, inputs: np.ndarray, token: np.ndarray) -> np.ndarray:
        """int64 ``[j]``: the states after ``token [j]`` from ``state [j]`` (rows of ``inputs [j]``)."""
        col = np.zeros(token.shape[0], np.int64)
        if self.keys.size:
            inside = token < self.span  # larger ids are in no alphabet (and would alias keys)
            query = inputs * self.span + token
            pos = np.minimum(np.searchsorted(self.keys, query), self.keys.shape[0] - 1)
            hit = inside & (self.keys[pos] == query)
            col[hit] = self.column[pos[hit]]
        return self.trans[state, col]

    def advancing(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, tokens)``, int64 ``[p]`` each: every token that lowers the need of row
        ``state [k]``, row by row."""
        count = self.adv_count[state]
        rows = np.repeat(np.arange(state.shape[0]), count)
        within = np.arange(rows.shape[0]) - np.repeat(np.cumsum(count) - count, count)
        return rows, self.adv_token[self.adv_start[state][rows] + within]


@dataclass(frozen=True)
class _Tracker:
    """One input's automaton (local state ids; state 0 is the start)."""

    alphabet: np.ndarray  # int64 [A], sorted
    trans: np.ndarray  # int64 [S, A + 1]
    need: np.ndarray  # int64 [S]


def _aho_corasick(phrases: Sequence[Phrase], labels: Sequence[int], alphabet: dict[int, int]
                  ) -> tuple[list[list[int]], list[int]]:
    """Aho-Corasick automaton over ``phrases`` (each with a bit ``label``).

    Returns ``goto [nodes][A + 1]`` (column 0: a token outside ``alphabet`` -> the root; column
    ``1 + alphabet[t]``: the node after token t) and ``out [nodes]``: the OR of the labels of the
    phrases that end at each node (as a suffix of its string).
    """
    children: list[dict[int, int]] = [{}]
    out = [0]
    for phrase, label in zip(phrases, labels, strict=True):
        node = 0
        for t in phrase:
            if t not in children[node]:
                children[node][t] = len(children)
                children.append({})
                out.append(0)
            node = children[node][t]
        out[node] |= label
    width = len(alphabet) + 1
    goto = [[0] * width for _ in children]
    fail = [0] * len(children)
    queue: deque[int] = deque()
    for t, child in children[0].items():
        goto[0][1 + alphabet[t]] = child
        queue.append(child)
    while queue:  # breadth first: a node's fail link is shallower, so already complete
        node = queue.popleft()
        out[node] |= out[fail[node]]
        for col in range(1, width):
            goto[node][col] = goto[fail[node]][col]
        for t, child in children[node].items():
            fail[child] = goto[fail[node]][1 + alphabet[t]]
            goto[node][1 + alphabet[t]] = child
            queue.append(child)
    return goto, out


def _compile(constraints: Sequence[Constraint], ordered: bool) -> _Tracker:
    """One input's tracker: the reachable states of (met constraints, partial matches), or with
    ``ordered`` (next constraint, its partial matches); every state meeting all is one state."""
    tokens = sorted({t for con in constraints for phrase in con for t in phrase})
    alphabet = {t: a for a, t in enumerate(tokens)}
    step: Callable[[Any, int], Any]
    if ordered:
        machines = [_aho_corasick(con, [1] * len(con), alphabet) for con in constraints]

        def in_order(key: Any, col: int) -> Any:
            j, node = key
            goto, out = machines[j]
            node = goto[node][col]
            if out[node]:  # constraint j met here; the next one starts after this token
                return _ACCEPT if j + 1 == len(constraints) else (j + 1, 0)
            return (j, node)

        step = in_order
    else:
        phrases = [p for con in constraints for p in con]
        labels = [1 << c for c, con in enumerate(constraints) for _ in con]
        goto, out = _aho_corasick(phrases, labels, alphabet)
        full = (1 << len(constraints)) - 1

        def in_any_order(key: Any, col: int) -> Any:
            met, node = key
            node = goto[node][col]
            met |= out[node]
            return _ACCEPT if met == full else (met, node)

        step = in_any_order

    trans, accept = _reachable((0, 0) if constraints else _ACCEPT, step, len(tokens) + 1)
    return _Tracker(np.array(tokens, np.int64), trans, _fewest_tokens(trans, accept))


def _reachable(start: Any, step: Callable[[Any, int], Any], width: int) -> tuple[np.ndarray, int]:
    """The transitions ``[S, width]`` of every state reachable from ``start`` (id 0), numbered
    breadth first, and the id of the accepting state (it loops to itself)."""
    ids = {start: 0}
    rows: list[list[int]] = []
    queue = deque([start])
    while queue:
        key = queue.popleft()
        row = []
        for col in range(width):
            nxt = _ACCEPT if key == _ACCEPT else step(key, col)
            if nxt not in ids:
                if len(ids) >= MAX_STATES:
                    raise TooManyStates()
                ids[nxt] = len(ids)
                queue.append(nxt)
            row.append(ids[nxt])
        rows.append(row)
    return np.array(rows, np.int64), ids[_ACCEPT]


def _fewest_tokens(trans: np.ndarray, accept: int) -> np.ndarray:
    """int64 ``[S]``: the fewest tokens from each state to ``accept`` (shortest paths with unit
    edges, relaxed until nothing changes: at most S passes, each vectorized)."""
    need = np.full(trans.shape[0], trans.shape[0], np.int64)  # S: more than any path
    need[accept] = 0
    while True:
        relaxed = np.minimum(need, 1 + need[trans].min(axis=1))
        if (relaxed == need).all():
            return need
        need = relaxed


def _stack(parts: Sequence[_Tracker]) -> Trackers:
    """One :class:`Trackers` from the inputs' trackers: state ids offset, columns padded."""
    sizes = np.array([p.trans.shape[0] for p in parts], np.int64)
    offset = np.cumsum(sizes) - sizes
    width = max((p.trans.shape[1] for p in parts), default=1)
    none = np.zeros(0, np.int64)  # heads every concatenation: no inputs, no alphabet

    def cat(arrays: list[np.ndarray], head: np.ndarray = none) -> np.ndarray:
        return np.concatenate([head, *arrays]).astype(np.int64)

    trans = cat([np.pad(p.trans, ((0, 0), (0, width - p.trans.shape[1])), mode="edge") + off
                 for p, off in zip(parts, offset, strict=True)], np.zeros((0, width), np.int64))  # padding never read
    advance = [np.nonzero(p.need[p.trans[:, 1:]] == p.need[:, None] - 1) for p in parts]  # (state, a)
    adv_count = cat([np.bincount(s, minlength=p.trans.shape[0]) for p, (s, _) in zip(parts, advance, strict=True)])
    span = max((int(p.alphabet.max()) + 1 for p in parts if p.alphabet.size), default=1)
    return Trackers(
        start=offset,
        trans=trans,
        need=cat([p.need for p in parts]),
        keys=cat([i * span + p.alphabet for i, p in enumerate(parts)]),
        column=cat([1 + np.arange(p.alphabet.shape[0]) for p in parts]),
        span=span,
        adv_start=np.cumsum(adv_count) - adv_count,
        adv_count=adv_count,
        adv_token=cat([p.alphabet[a] for p, (_, a) in zip(parts, advance, strict=True)]),
    )


@dataclass(frozen=True)
class ConstrainedBeam:
    """Constrained beam search with dynamic beam allocation (module docstring).

    Attributes:
        beam_size: live rows per input.
        trackers: every input's compiled constraints.
        finish: the batched rule whose finished-score record and lossless early stop are reused
            (its ``n_best``, length penalty and ``lp(max_steps)`` bound).
    """

    beam_size: int
    trackers: Trackers
    finish: BatchBeam

    def start(self, n_inputs: int) -> BatchState:
        return self.finish.start(n_inputs)

    def select(self, state: BatchState, scores: StepScores) -> tuple[Selection, BatchState]:
        beam, tr = scores.beam, self.trackers
        at = tr.start[beam.input] if beam.tags is None else beam.tags[TAG]  # --> [k]
        ends, logp = split_terminals(scores)
        after = tr.next(at[ends.parent], beam.input[ends.parent], ends.token)
        finished = ends.take(tr.need[after] == 0)  # the others are discarded
        live = self._allocate(scores, self._candidates(scores, logp, at))
        state = self.finish.with_finished(state, scores, finished)
        return Selection(live, finished, True, self.finish.stopped(state, scores, live)), state

    def _candidates(self, scores: StepScores, logp: Any, at: np.ndarray) -> Candidates:
        """Each row's ``beam_size`` best finite tokens and its finite advancing tokens (no pair
        twice), with their tracker states in the tags."""
        b, k, vocab = scores.backend, scores.beam.size, scores.vocab
        m = min(self.beam_size, vocab)
        idx, val = b.topk_stable(logp, m)  # --> [k, m] each, on the host
        parent, token, value = np.repeat(np.arange(k), m), idx.reshape(-1), val.reshape(-1)
        rows, extra = self.trackers.advancing(at)
        if rows.size:
            new = ~np.isin(rows * vocab + extra, parent * vocab + token)
            rows, extra = rows[new], extra[new]
            parent, token = np.concatenate([parent, rows]), np.concatenate([token, extra])
            value = np.concatenate([value, b.gather(logp, rows, extra)])
        ok = np.flatnonzero(np.isfinite(value))
        parent, token = parent[ok], token[ok]
        state = self.trackers.next(at[parent], scores.beam.input[parent], token)
        return Candidates(parent, token, accumulate(scores, parent, value[ok]), {TAG: state})

    def _allocate(self, scores: StepScores, cand: Candidates) -> Candidates:
        """Per input, ``beam_size`` of its candidates divided among its banks (equal need), in
        rank order: logprob, then row, then token (the flat-index tie rule)."""
        if cand.size == 0:
            return cand
        assert cand.tags is not None  # _candidates always tags its rows
        inputs = scores.beam.input[cand.parent]
        need = self.trackers.need[cand.tags[TAG]]
        by_bank = np.lexsort((cand.token, cand.parent, -cand.logprob, need, inputs))  # --> [j]
        bank_start, bank_len = runs(inputs[by_bank] * (int(need.max()) + 1) + need[by_bank])
        first_bank, n_banks = runs(inputs[by_bank][bank_start])  # --> [G]: each input's banks
        nth = np.arange(bank_start.shape[0]) - np.repeat(first_bank, n_banks)  # bank rank, progress first
        n_banks = np.repeat(n_banks, n_banks)  # --> [banks]
        quota = self.beam_size // n_banks + (nth < self.beam_size % n_banks)  # --> [banks]
        in_quota = np.empty(cand.size, bool)
        in_quota[by_bank] = (np.arange(cand.size) - np.repeat(bank_start, bank_len)) < np.repeat(quota, bank_len)
        # within quota first, then the rest by rank: each input's first beam_size are kept
        order = np.lexsort((cand.token, cand.parent, -cand.logprob, ~in_quota, inputs))
        start, length = runs(inputs[order])
        kept = order[(np.arange(cand.size) - np.repeat(start, length)) < self.beam_size]
        rank = np.lexsort((cand.token[kept], cand.parent[kept], -cand.logprob[kept], inputs[kept]))
        return cand.take(kept[rank])
