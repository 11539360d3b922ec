"""Hotwords (contextual biasing): a bonus for label positions inside given phrases.

The rule (docs/speech.md): the *match in progress* after each label is the longest suffix of the
hypothesis's labels that is a prefix of some phrase; a label position earns ``hotword_weight``
while it is part of the match in progress, and keeps it once it lies inside a completed phrase
occurrence (overlapping and nested occurrences all count); when a partial match is abandoned, the
positions it earned that lie in no completed occurrence are taken back; no position earns twice.
So a hypothesis's bonus is ``hotword_weight`` x (positions inside completed occurrences, plus,
while decoding, those of the match in progress); at the end of the utterance an unfinished match
is taken back.

The phrases are compiled once into a token trie with failure links (Aho-Corasick), held as arrays:
a transition is one binary search in a sorted table of ``(node, label)`` codes (the failure-link
closure precomputed, the root's own transitions a dense row), or one index into a dense table of
them all where that is small (:data:`DENSE`), so its cost does not grow with the number of
phrases. A hypothesis carries three integers: its node (the match in progress), a bit
mask of which of its last :data:`MAX_LEN` positions lie in completed occurrences, and how many
positions in all do (``done``). They depend only on the labels, so two alignments of one prefix
share them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from beamsearch.core import validate

MAX_LEN = 62
"""The longest phrase, in labels: a hypothesis's window of positions is an int64 bit mask."""
FULL = np.int64((1 << MAX_LEN) - 1)
DENSE = 1 << 22
"""The most entries of a dense transition table (one index per step instead of a binary search)."""
BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def popcount(x: np.ndarray) -> np.ndarray:
    """The number of set bits of each non-negative int64."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int64)
    total = np.zeros(np.shape(x), dtype=np.int64)
    for shift in range(0, 64, 8):
        total += BYTE_BITS[(x >> shift) & 255]
    return total


HotState = tuple[np.ndarray, np.ndarray, np.ndarray]  # (node, mask, done): a hotword state, int64 each


def hot_rows(hot: HotState, idx: Any) -> HotState:
    """The hotword state's entries at ``idx`` (an index of its arrays)."""
    node, mask, done = hot
    return node[idx], mask[idx], done[idx]


@dataclass(frozen=True)
class Hotwords:
    """Compiled phrases of a batch: one automaton per distinct phrase list, one node table.

    ``codes``/``targets`` int64 ``[E]``: sorted ``node * V + label`` of every transition that
    does not fall back to a root, and the node it goes to; ``root_next`` int64 ``[R, V]``: each
    root's transition by each label; ``root_of``, ``depth``, ``longest`` int64 ``[S]``: a node's
    root row, its length, and the length of the longest phrase that is a suffix of it (0: none);
    ``starts`` int64 ``[N]``: each utterance's root node."""

    weight: float
    vocab: int
    codes: np.ndarray
    targets: np.ndarray
    root_next: np.ndarray
    root_of: np.ndarray
    depth: np.ndarray
    longest: np.ndarray
    starts: np.ndarray
    dense: np.ndarray | None = None  # int64 [S, V]: every transition, where S x V <= DENSE (else None)

    def step(self, node: np.ndarray, mask: np.ndarray, done: np.ndarray,
             label: np.ndarray) -> HotState:
        """The state after one more label (all int64, same shapes)."""
        nxt = self.dense[node, label] if self.dense is not None else self.transition(node, label)
        shifted = (mask << 1) & FULL
        new = (np.int64(1) << self.longest[nxt]) - 1  # the completed occurrences end here: one run
        return nxt, shifted | new, done + popcount(new & ~shifted)

    def transition(self, node: np.ndarray, label: np.ndarray) -> np.ndarray:
        """The node after ``label`` from ``node`` (int64, same shapes): one binary search."""
        code = node * self.vocab + label
        nxt = self.root_next[self.root_of[node], label]
        if self.codes.size:
            pos = np.minimum(np.searchsorted(self.codes, code), self.codes.size - 1)
            nxt = np.where(self.codes[pos] == code, self.targets[pos], nxt)
        return nxt

    def count(self, node: np.ndarray, mask: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Positions earning while decoding: those in completed occurrences or the match."""
        d = self.depth[node]
        return done + d - popcount(mask & ((np.int64(1) << d) - 1))


@dataclass(frozen=True)
class HotTerm:
    """The hotword term of one frame's extensions, for :class:`beamsearch.speech.ranking.Extensions`:
    ``up`` float64 ``[n, B]`` an upper bound of the bonus of any extension of each slot."""

    hw: Hotwords
    node: np.ndarray
    mask: np.ndarray
    done: np.ndarray
    up: np.ndarray

    pairs: tuple[np.ndarray, ...]
    start: np.ndarray

    @staticmethod
    def of(hw: Hotwords, node: np.ndarray, mask: np.ndarray, done: np.ndarray) -> HotTerm:
        """The term for slots in these states (an extension earns at most one more position).

        Only three kinds of extension exist: by a label of ``pairs`` (the slot's node has its own
        transition by it: a few per slot, whatever the number of phrases), bounded by ``up``; by
        a label that starts a phrase (``start``, bool ``[n, V]``, per utterance), exactly
        ``weight * (done + 1)``; by any other label, exactly ``weight * done`` (the match falls
        back to the root)."""
        lo = np.searchsorted(hw.codes, node * hw.vocab)
        count = (np.searchsorted(hw.codes, (node + 1) * hw.vocab) - lo).ravel()
        flat = np.repeat(np.arange(count.size), count)
        pos = np.arange(flat.size) - np.repeat(np.cumsum(count) - count - lo.ravel(), count)
        utt, slot = np.divmod(flat, node.shape[1])
        pairs = (utt, slot, hw.codes[pos] % hw.vocab, count.reshape(node.shape))
        start = hw.depth[hw.root_next[hw.root_of[node[:, 0]]]] > 0
        return HotTerm(hw, node, mask, done, hw.weight * (hw.count(node, mask, done) + 1), pairs, start)

    def labels(self, masked: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, int]:
        """``(also, most)``: bool ``[n, V]`` the labels of ``pairs`` of each utterance (at or
        above ``floor``, float64 ``[n]``, in ``masked``, :func:`beamsearch.speech.tokens.startable`'s);
        the most ``pairs`` of a slot."""
        utt, _, label, count = self.pairs
        also = np.zeros(masked.shape, dtype=bool)
        also[utt, label] = True
        also &= (masked >= floor[:, None]) & (masked > -np.inf)
        return also, int(count.max(initial=0))

    def cols(self, tok: np.ndarray, tok_lp: np.ndarray) -> np.ndarray:
        """float64 ``[n, B, M]``: an upper bound of the bonus of each slot extended by each of
        ``tok`` (int64 ``[n, M]``; -inf ``tok_lp``: padding), exact but for ``pairs``."""
        row = np.arange(tok.shape[0])[:, None]
        up = self.hw.weight * (self.done[:, :, None] + np.take_along_axis(self.start, tok, 1)[:, None, :])
        lookup = np.full(self.start.shape, -1, dtype=np.int64)
        valid = tok_lp > -np.inf
        lookup[np.broadcast_to(row, tok.shape)[valid], tok[valid]] = np.nonzero(valid)[1]
        utt, slot, label, _ = self.pairs
        col = lookup[utt, label]
        ok = col >= 0
        up[utt[ok], slot[ok], col[ok]] = self.up[utt[ok], slot[ok]]
        return up

    def now(self) -> np.ndarray:
        """float64 ``[n, B]``: each slot's own bonus while decoding."""
        return self.hw.weight * self.hw.count(self.node, self.mask, self.done)

    def term(self, utt: np.ndarray, slot: np.ndarray, label: np.ndarray) -> np.ndarray:
        """float64 ``[K]``: the bonus of slot ``slot[k]`` of ``utt[k]`` extended by ``label[k]``."""
        state = self.hw.step(self.node[utt, slot], self.mask[utt, slot], self.done[utt, slot], label)
        return self.hw.weight * self.hw.count(*state)


def hotwords_of(value: Any, weight: Any, n: int, vocab: int, blank: int, vocabulary: Any) -> Hotwords | None:
    """``hotwords=`` checked and compiled: None, a list of phrases for the whole batch, or one
    such list per utterance; a phrase is a sequence of label ids or (with a character
    ``vocabulary``) a string. None when there is no phrase."""
    w = validate.real("hotword_weight", weight, finite=True)
    if w < 0:
        raise ValueError(f"hotword_weight must be >= 0; got {weight!r}")
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"hotwords must be a list of phrases or one list per utterance; got {value!r:.80}")
    items = list(value)
    per_utt = bool(items) and all(not is_phrase(x) for x in items)
    if per_utt and len(items) != n:
        raise ValueError(f"hotwords must have one list per utterance (N={n}); got {len(items)} lists")
    lists = [list(x) for x in items] if per_utt else [items]
    names = [f"hotwords[{u}]" for u in range(len(lists))] if per_utt else ["hotwords"]
    parsed = [tuple(phrase_ids(f"{name}[{i}]", p, vocab, blank, vocabulary) for i, p in enumerate(lst))
              for name, lst in zip(names, lists, strict=True)]
    if not any(parsed):
        return None
    return compile_lists(parsed if per_utt else parsed * n, w, vocab)


def is_phrase(x: Any) -> bool:
    """A string, or a non-empty sequence whose items are integers (not sequences)."""
    if isinstance(x, str):
        return True
    if not hasattr(x, "__len__") or len(x) == 0:
        return False
    return all(not hasattr(t, "__len__") for t in x)


def phrase_ids(name: str, phrase: Any, vocab: int, blank: int, vocabulary: Any) -> tuple[int, ...]:
    """One phrase as label ids: each in ``[0, V)`` and not the blank; 1 to MAX_LEN of them."""
    if isinstance(phrase, str):
        ids = text_ids(name, phrase, vocabulary)
    else:
        if not hasattr(phrase, "__len__"):
            raise TypeError(f"{name} must be a sequence of label ids or a string; got {phrase!r:.80}")
        ids = tuple(validate.integer(f"{name}[{j}]", t) for j, t in enumerate(phrase))
    if not 1 <= len(ids) <= MAX_LEN:
        raise ValueError(f"{name} must hold 1 to {MAX_LEN} labels; got {phrase!r:.80}")
    for j, t in enumerate(ids):
        if not 0 <= t < vocab or t == blank:
            raise ValueError(f"{name}[{j}] must be a label id in [0, V={vocab}) other than the blank {blank}; got {t}")
    return ids


def text_ids(name: str, text: str, vocabulary: Any) -> tuple[int, ...]:
    """A string phrase in a character vocabulary: one token per character, the word delimiter
    for a space."""
    if vocabulary is None:
        raise ValueError(f"{name} is text ({text!r}); text phrases need vocabulary= (else give label ids)")
    index = {tok: i for i, tok in reversed(list(enumerate(vocabulary.tokens)))}
    out = []
    for ch in " ".join(text.split()):
        tok = vocabulary.word_delimiter if ch == " " else ch
        if tok is None or tok not in index:
            raise ValueError(f"{name} = {text!r}: {ch!r} is no token of the vocabulary (text phrases "
                             "need one token per character; else give label ids)")
        out.append(index[tok])
    return tuple(out)


def compile_lists(lists: Sequence[tuple[tuple[int, ...], ...]], weight: float, vocab: int) -> Hotwords:
    """One automaton per distinct list (utterances with equal lists share it), in one table."""
    edges: dict[tuple[int, int], int] = {}
    depth: list[int] = []
    terminal: list[bool] = []
    root_ids: dict[tuple, int] = {}
    starts = []
    for phrases in lists:
        if phrases not in root_ids:
            root_ids[phrases] = len(depth)
            depth.append(0)
            terminal.append(False)
            for ph in phrases:
                node = root_ids[phrases]
                for t in ph:
                    if (node, t) not in edges:
                        edges[(node, t)] = len(depth)
                        depth.append(depth[node] + 1)
                        terminal.append(False)
                    node = edges[(node, t)]
                terminal[node] = True
        starts.append(root_ids[phrases])
    return link(edges, depth, terminal, list(root_ids.values()), starts, weight, vocab)


def link(edges: dict[tuple[int, int], int], depth: list[int], terminal: list[bool], roots: list[int],
         starts: list[int], weight: float, vocab: int) -> Hotwords:
    """Failure links by breadth-first search, and their closure as a sorted transition table."""
    size = len(depth)
    kids: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    for (u, t), v in edges.items():
        kids[u].append((t, v))
    fail, longest = [0] * size, [0] * size
    root_of = [0] * size
    trans: list[dict[int, int]] = [{} for _ in range(size)]
    queue: deque[int] = deque()
    for r, root in enumerate(roots):
        fail[root], root_of[root] = root, r
        queue.append(root)
    while queue:
        u = queue.popleft()
        root = roots[root_of[u]]
        if u != root:
            trans[u] = dict(trans[fail[u]])
            trans[u].update(kids[u])
        for t, v in kids[u]:
            f = fail[u]
            while f != root and (f, t) not in edges:
                f = fail[f]
            fail[v] = edges.get((f, t), root) if u != root else root
            root_of[v] = root_of[u]
            longest[v] = depth[v] if terminal[v] else longest[fail[v]]
            queue.append(v)
    root_next = np.broadcast_to(np.array(roots, dtype=np.int64)[:, None], (len(roots), vocab)).copy()
    for r, root in enumerate(roots):
        for t, v in kids[root]:
            root_next[r, t] = v
    pairs = sorted((u * vocab + t, v) for u in range(size) for t, v in trans[u].items())
    codes = np.array([c for c, _ in pairs], dtype=np.int64)
    targets = np.array([v for _, v in pairs], dtype=np.int64)
    hw = Hotwords(weight, vocab, codes, targets, root_next, np.array(root_of, dtype=np.int64),
                  np.array(depth, dtype=np.int64), np.array(longest, dtype=np.int64),
                  np.array(starts, dtype=np.int64))
    if size * vocab > DENSE:
        return hw
    nodes = np.arange(size, dtype=np.int64)[:, None]
    return replace(hw, dense=hw.transition(nodes, np.arange(vocab, dtype=np.int64)[None, :]))
