"""No-repeat n-gram blocking over prompt + generated tokens (SPEC section 6).

A row may not take a token that would complete an n-gram already in its prompt + generated tokens.
Inside a search each row's n-grams are kept incrementally beside the row (:class:`NGramRows`, a
:class:`~beamsearch.processors.RowStates`: taken with its parent, forked for its children, advanced
by its new token), never rebuilt from the row's history, so a step's cost does not grow with the
output:

- the n-grams that every live row of an input shares (its prompt's, and its generated tokens up to
  the last step where all its rows agree: beam search's rows coalesce a few steps back) are in one
  table per search (:class:`NGramTable`), keyed by (input, the n-1 tokens before), written once;
- each row keeps its own tokens since that step (with the n-1 before them), a ``[k, W]`` window
  gathered by parent at each step, and scans it for its (n-1)-token suffix.

An entry is never removed: every later row of the input descends from the rows that shared it.
So a step costs O(k * W) for the windows plus one table lookup per row: W is how far back an
input's rows last agreed (tens of steps in beam search, plus up to ``SETTLE`` steps since the last
move to the table), not the output's length. Rows that stay
apart for long (a diverse search's groups, exact search's prefixes) keep long windows, the cost of
scanning their whole histories as before. Called outside a search (no carried state), the
processor scans ``ctx.history`` (:func:`banned_ngram_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from beamsearch.backends import NEG_INF
from beamsearch.core import validate as check
from beamsearch.core.state import select_state
from beamsearch.processors._base import RowCarrier, StepContext

__all__ = ["NGramRows", "NGramTable", "NoRepeatNGram", "banned_ngram_tokens"]

_NONE = np.empty(0, np.int64)
_MIX = np.uint64(0x9E3779B97F4A7C15)
SETTLE = 16
"""A row state moves its shared columns to the table when its rows' longest run of own tokens
is a multiple of this: each step then costs a scan of a window of about this many columns more,
and the move's fixed cost is paid once per ``SETTLE`` steps."""


@dataclass(frozen=True)
class NoRepeatNGram(RowCarrier):
    """Mask every token that would complete an n-gram already in the row's history (n >= 1)."""

    n: int
    needs_history = False  # inside a search the carried rows hold what is needed
    needs_prompt = True  # the rows start from the prompts (step search gives whole ones)
    last_step = None  # acts at every step
    masks_only = False  # a support set before it is dropped (StepContext.support)

    def __post_init__(self) -> None:
        check.at_least("n", self.n, 1)

    def start_rows(self, n: int) -> NGramRows:
        """``n`` rows with empty prompts."""
        return self.start_prompts([[] for _ in range(n)])

    def start_prompts(self, prompts: Sequence[Sequence[int]]) -> NGramRows:
        """One row per prompt, its n-grams in the table (:class:`NGramRows`)."""
        return NGramRows.start(self.n, prompts)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        carried = None if ctx.carried is None else ctx.carried.get(id(self))
        if carried is None:
            rows, tokens = banned_ngram_tokens(ctx.history, self.n)
        else:
            rows, tokens = carried.banned()
        if rows.size:
            logits = ctx.backend.put(logits, rows, tokens, NEG_INF)
        return logits


def _keys(ident: np.ndarray) -> np.ndarray:
    """uint64 ``[m]``: a hash of each row of ``ident [m, n]`` (an input, then its n-1 tokens): a
    polynomial in the columns modulo 2**64; equal rows, equal hashes."""
    columns = ident.astype(np.uint64)
    h = np.ones(ident.shape[0], np.uint64)
    with np.errstate(over="ignore"):
        for j in range(columns.shape[1]):  # the n columns, each over all rows
            h = (h + columns[:, j]) * _MIX
    return h


class NGramTable:
    """The n-grams every live row of an input shares, as entries ``(input, context [n-1])`` ->
    next token, sorted by a hash of the pair in two parts: the older entries and the latest
    ones, where new entries are merged (sorted merges, no sort of the whole table); the latest
    part is merged into the older one once it passes about the square root of its size. A lookup
    is two binary searches in each part. Mutable and shared by the row states of one search
    (entries are only added, for rows that all hold them)."""

    def __init__(self, width: int) -> None:
        # (ident is n wide once added to)
        empty: tuple[np.ndarray, ...] = (np.empty(0, np.uint64), np.empty((0, 1), np.int64), _NONE)
        self.old, self.new = empty, empty  # each (key [m], ident [m, n], token [m]), sorted by key

    def __len__(self) -> int:
        """The number of entries."""
        return int(self.old[0].size + self.new[0].size)

    def add(self, owner: np.ndarray, context: np.ndarray, token: np.ndarray) -> None:
        """Entries: input ``owner [m]``, tokens ``context [m, n-1]``, next ``token [m]``."""
        if token.size == 0:
            return
        ident = np.column_stack([owner, context])
        key = _keys(ident)
        order = np.argsort(key, kind="stable")
        self.new = _merged(self.new, (key[order], ident[order], np.asarray(token, np.int64)[order]))
        if self.new[0].size > max(256, 4 * int(np.sqrt(self.old[0].size))):
            self.old, self.new = _merged(self.old, self.new), tuple(a[:0] for a in self.new)

    def lookup(self, owner: np.ndarray, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(query, token)``: the tokens that follow ``context [q, n-1]`` in input ``owner [q]``'s
        entries, each with the index of its query."""
        ident = np.column_stack([owner, context])
        q = _keys(ident)
        queries, found, tokens = [], [], []
        for key, idents, token in (self.old, self.new):
            lo = np.searchsorted(key, q, "left")
            counts = np.searchsorted(key, q, "right") - lo
            hits = np.flatnonzero(counts)
            if hits.size:  # entries lo[i] .. lo[i] + counts[i] - 1 of query i, flattened
                counts = counts[hits]
                queries.append(np.repeat(hits, counts))
                at = np.arange(queries[-1].size) + np.repeat(lo[hits] - (np.cumsum(counts) - counts), counts)
                found.append(idents[at])
                tokens.append(token[at])
        if not queries:
            return _NONE, _NONE
        query, token = np.concatenate(queries), np.concatenate(tokens)
        same = np.all(np.concatenate(found) == ident[query], axis=1)  # a hash never decides alone
        return query[same], token[same]


def _merged(base: tuple[np.ndarray, ...], more: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Two runs of parallel arrays, each sorted by its first (the keys), as one sorted run (ties:
    ``base``'s first); O(size) copies."""
    if base[0].size == 0:  # (the empty table's idents are not n wide)
        return more
    at = np.searchsorted(base[0], more[0], "right") + np.arange(more[0].size)  # more's places
    size = base[0].size + more[0].size
    rest = np.ones(size, bool)
    rest[at] = False
    out = []
    for a, b in zip(base, more, strict=True):
        merged = np.empty((size, *a.shape[1:]), a.dtype)
        merged[at], merged[rest] = b, a
        out.append(merged)
    return tuple(out)


class NGramRows:
    """The n-gram state of ``k`` rows (a :class:`~beamsearch.processors.RowStates`).

    Attributes:
        n: the n-gram size.
        table: the search's :class:`NGramTable` (shared).
        owner: int64 ``[k]``: each row's input.
        window: int64 ``[k, W]``, right-aligned: each row's latest tokens, -1 before its first; the
            last ``fresh[r]`` are the row's own (their n-grams are not in the table), the n-1
            before them their context (W < n - 1 while no row holds that many tokens).
        fresh: int64 ``[k]``: each row's tokens since its input's rows last agreed (equal for the
            rows of one input).
    """

    __slots__ = ("n", "table", "owner", "window", "fresh")

    def __init__(self, n: int, table: NGramTable, owner: np.ndarray, window: np.ndarray, fresh: np.ndarray) -> None:
        self.n, self.table, self.owner, self.window, self.fresh = n, table, owner, window, fresh

    def __len__(self) -> int:
        return int(self.owner.shape[0])

    @staticmethod
    def start(n: int, prompts: Sequence[Sequence[int]]) -> NGramRows:
        """One row per prompt: every n-gram of the prompts in a new table, the last n-1 tokens
        of each prompt its window."""
        c, count = n - 1, len(prompts)
        width = max([0, *map(len, prompts)])  # not padded to n - 1: an n beyond any row's length costs nothing
        padded = np.full((count, width), -1, np.int64)  # --> [N, P], right-aligned
        for i, p in enumerate(prompts):  # the start only
            if len(p):
                padded[i, width - len(p) :] = p
        table = NGramTable(c)
        if width >= n:
            grams = sliding_window_view(padded, n, axis=1).reshape(-1, n)  # --> [N * (P - n + 1), n]
            owner = np.repeat(np.arange(count), width - n + 1)
            whole = np.all(grams >= 0, axis=1)
            table.add(owner[whole], grams[whole, :c], grams[whole, c])
        return NGramRows(n, table, np.arange(count), padded[:, max(width - c, 0) :], np.zeros(count, np.int64))

    def banned(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, tokens)``: row ``rows[i]`` may not take ``tokens[i]`` (int64, pairs may repeat)."""
        c = self.n - 1
        k, width = self.window.shape
        if width < c:  # no row holds n - 1 tokens yet (the window holds all a row has, with -1 before them)
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        suffix = self.window[:, width - c :]  # --> [k, c], the context the next token extends
        complete = np.all(suffix >= 0, axis=1)  # --> [k]: the row has n - 1 tokens
        whole = np.flatnonzero(complete)
        span = width - c  # n-grams ending at columns c .. W-1
        match = np.arange(c, width)[None, :] >= (width - self.fresh)[:, None]  # --> [k, span]: the row's own
        match &= complete[:, None]
        for d in range(c):
            match &= self.window[:, d : d + span] == suffix[:, d : d + 1]
        rows, ends = np.nonzero(match)
        query, tokens = self.table.lookup(self.owner[whole], suffix[whole])
        return np.concatenate([rows, whole[query]]), np.concatenate([self.window[rows, ends + c], tokens])

    def advance(self, tokens: np.ndarray) -> NGramRows:
        """Each row one token longer (int64 ``[k]``); every ``SETTLE`` own columns, the columns
        where all rows of an input agree go to the table and leave the windows."""
        window = np.concatenate([self.window, np.asarray(tokens, np.int64)[:, None]], axis=1)
        rows = NGramRows(self.n, self.table, self.owner, window, self.fresh + 1)
        return rows._settled() if int(rows.fresh.max(initial=0)) % SETTLE == 0 else rows

    def _settled(self) -> NGramRows:
        """The rows with the n-grams that all rows of an input share moved to the table."""
        k, width = self.window.shape
        if k == 0:
            return self
        c = self.n - 1
        inputs, first = np.unique(self.owner, return_index=True)
        group = np.searchsorted(inputs, self.owner)  # --> [k], each row's input among inputs
        start = width - self.fresh[first]  # --> [I]: each input's first column of its own
        rows, cols = np.nonzero(self.window != self.window[first[group]])
        apart = np.zeros((inputs.size, width + 1), bool)
        apart[group[rows], cols] = True
        apart[:, width] = True  # --> [I, W + 1]: columns where some row of the input differs
        apart &= np.arange(width + 1)[None, :] >= start[:, None]
        shared = np.argmax(apart, axis=1) - start  # --> [I]: the leading own columns all its rows share
        if not shared.any():
            return self
        lead = np.repeat(first, shared)
        ends = np.repeat(start, shared) + np.arange(lead.size) - np.repeat(np.cumsum(shared) - shared, shared)
        cols = ends[:, None] + np.arange(-c, 1)[None, :]  # --> [m, n]: each n-gram's columns (< 0: before the window)
        grams = self.window[lead[:, None], np.maximum(cols, 0)]
        whole = np.all(grams >= 0, axis=1) & (cols[:, 0] >= 0)
        self.table.add(self.owner[lead][whole], grams[whole, :c], grams[whole, c])
        fresh = self.fresh - shared[group]
        keep = int(fresh.max()) + c
        return NGramRows(self.n, self.table, self.owner, self.window[:, max(width - keep, 0) :], fresh)


@select_state.register(NGramRows)
def _select_ngram_rows(rows: NGramRows, idx: Any) -> NGramRows:
    """Rows ``idx`` (``[k']``; a row taken twice is copied: its window is a value, the table shared)."""
    if hasattr(idx, "detach"):
        idx = idx.detach().cpu().numpy()
    idx = np.asarray(idx, dtype=np.int64)
    return NGramRows(rows.n, rows.table, rows.owner[idx], rows.window[idx], rows.fresh[idx])


def banned_ngram_tokens(history: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, tokens)`` pairs that would repeat an n-gram of ``history``.

    Args:
        history: int ``[k, H]``, each row's sequence left-padded with negative values.
        n: the n-gram size, >= 1.

    Returns:
        Two int64 arrays of equal length: row ``rows[i]`` may not take ``tokens[i]``.
    """
    k, width = history.shape
    if n == 1:
        rows, cols = np.nonzero(history >= 0)
        return rows, history[rows, cols]
    if width < n:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    suffix = history[:, width - (n - 1) :]  # --> [k, n-1], the prefix the next token extends
    windows = sliding_window_view(history[:, :-1], n - 1, axis=1)  # --> [k, H-n+1, n-1]
    complete = np.all(suffix >= 0, axis=1, keepdims=True)  # --> [k, 1]: the row has n-1 tokens
    match = np.all(windows == suffix[:, None, :], axis=2) & complete  # --> [k, H-n+1]
    rows, starts = np.nonzero(match)
    return rows, history[rows, starts + n - 1]
