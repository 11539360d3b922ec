"""Word n-gram language models from ARPA files, held as arrays and scored a batch at a time.

An ARPA file is read once into flat arrays: every n-gram has a global id (0 is the empty context,
then the 1-grams in word-id order, then the 2-grams, ...), its log10 probability, its back-off,
its order, and the id of its longest proper suffix that is an n-gram (``suffix``). The trie is one
sorted int64 array of codes ``context_id * W + word`` (``W`` words) with the child's id beside
it, searched with :func:`numpy.searchsorted`.

A *state* is the id of the longest suffix (at most ``order - 1`` words) of the words so far that
is an n-gram: what KenLM keeps. :meth:`NgramLM.score` scores a batch of ``(state, word)`` pairs
at once with back-off: ``log10 p(w | h) = p(h' w) + sum of the back-offs of the suffixes of h
longer than h'``, for ``h' w`` the longest n-gram ending the history, and returns natural logs.

Conventions, as KenLM's (``kenlm.Model.full_scores`` is the test oracle): a sentence starts in
the state of ``<s>``; a word not in the ARPA's vocabulary is ``<unk>`` with the ARPA's ``<unk>``
probability (log10 -100 when the file has no ``<unk>``), and ``<unk>`` is then a context like any
word; ``</s>`` is scored after the last word (:meth:`NgramLM.sentence_scores`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

LN10 = math.log(10.0)
UNK_LOG10 = -100.0
"""KenLM's log10 probability for ``<unk>`` when the ARPA file has none."""
HEADER = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)$")
SECTION = re.compile(r"^\\(\d+)-grams:$")


@dataclass(frozen=True)
class NgramLM:
    """A word n-gram LM as arrays (see the module docstring); build it with :meth:`from_arpa`.

    ``words``: the vocabulary, a word's id its index; ``logp``, ``backoff`` float64 ``[G]``
    (natural log) and ``order``, ``suffix`` int64 ``[G]`` per n-gram id; ``codes``/``child``
    int64 ``[G - 1]``: the sorted trie codes and the n-gram each leads to."""

    words: tuple[str, ...]
    index: dict
    max_order: int
    logp: np.ndarray
    backoff: np.ndarray
    order: np.ndarray
    suffix: np.ndarray
    codes: np.ndarray
    child: np.ndarray

    @property
    def unk(self) -> int:
        """The word id of ``<unk>``."""
        return self.index["<unk>"]

    @property
    def start(self) -> int:
        """The state of a sentence's start: the 1-gram ``<s>``."""
        return 1 + self.index["<s>"]

    @property
    def end(self) -> int:
        """The word id of ``</s>``."""
        return self.index["</s>"]

    @classmethod
    def from_arpa(cls, path: str) -> NgramLM:
        """Read an ARPA file (plain text; KenLM's and SRILM's format). A malformed file is a
        ValueError naming the file and the line."""
        with open(path, encoding="utf-8") as f:
            return cls.from_lines(f, str(path))

    @classmethod
    def from_lines(cls, lines: Iterable[str], name: str = "<arpa>") -> NgramLM:
        """The same as :meth:`from_arpa` from the file's lines."""
        grams, probs, bos = read_arpa(lines, name)
        return build(grams, probs, bos, name)

    def word_ids(self, words: Sequence[str]) -> np.ndarray:
        """int64 ``[k]``: each word's id, ``<unk>``'s for a word not in the vocabulary."""
        unk = self.unk
        return np.array([self.index.get(w, unk) for w in words], dtype=np.int64)

    def score(self, state: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each ``word[k]`` after state ``state[k]`` (int64 ``[K]`` both): ``(logp, new_state)``,
        float64 natural-log ``log p(word | history)`` with back-off and int64 ``[K]``."""
        state = np.asarray(state, dtype=np.int64).copy()
        word = np.asarray(word, dtype=np.int64)
        total = np.zeros(state.shape)
        new = np.zeros_like(state)
        todo = np.arange(state.size)
        width = len(self.words)
        while todo.size:
            code = state[todo] * width + word[todo]
            pos = np.minimum(np.searchsorted(self.codes, code), self.codes.size - 1)
            hit = self.codes[pos] == code
            got, kid = todo[hit], self.child[pos[hit]]
            total[got] += self.logp[kid]
            new[got] = np.where(self.order[kid] >= self.max_order, self.suffix[kid], kid)
            miss = todo[~hit]
            if (state[miss] == 0).any():  # every word id is a 1-gram, so the empty context finds it
                raise ValueError(f"word id out of range [0, {width}): {word[miss][state[miss] == 0][:4]}")
            total[miss] += self.backoff[state[miss]]
            state[miss] = self.suffix[state[miss]]
            todo = miss
        return total, new

    def sentence_scores(self, words: Sequence[str], eos: bool = True) -> np.ndarray:
        """float64 ``[len(words) (+ 1)]``: natural-log score of each word of a sentence started
        at ``<s>``, and of ``</s>`` (as ``kenlm.Model.full_scores`` times ln 10)."""
        ids = list(self.word_ids(words)) + ([self.end] if eos else [])
        out, state = [], np.array([self.start])
        for w in ids:
            s, state = self.score(state, np.array([w]))
            out.append(float(s[0]))
        return np.array(out)


def read_arpa(lines: Iterable[str], name: str) -> tuple[list[list[tuple[str, ...]]], list[list[tuple[float, float]]],
                                                        int]:
    """The n-grams of each order with their ``(log10 prob, log10 back-off)``, and the order."""
    counts: list[int] = []
    grams: list[list[tuple[str, ...]]] = []
    probs: list[list[tuple[float, float]]] = []
    section = -1  # -1: before \data\; 0: the counts; k: the k-grams
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line == "\\data\\":
            section = 0
        elif line == "\\end\\":
            break
        elif SECTION.match(line):
            section = int(SECTION.match(line).group(1))  # type: ignore[union-attr]
            if section != len(grams) + 1 or section > len(counts):
                raise ValueError(f"{name}:{number}: unexpected section {line!r}")
            grams.append([])
            probs.append([])
        elif section == 0:
            m = HEADER.match(line)
            if not m or int(m.group(1)) != len(counts) + 1:
                raise ValueError(f"{name}:{number}: expected 'ngram {len(counts) + 1}=count'; got {line!r}")
            counts.append(int(m.group(2)))
        elif section > 0:
            parts = line.split()
            if len(parts) not in (section + 1, section + 2):
                raise ValueError(f"{name}:{number}: a {section}-gram line needs log10 prob, {section} "
                                 f"words and an optional back-off; got {line!r}")
            try:
                p, b = float(parts[0]), float(parts[section + 1]) if len(parts) == section + 2 else 0.0
            except ValueError:
                raise ValueError(f"{name}:{number}: not a number in {line!r}") from None
            grams[-1].append(tuple(parts[1 : section + 1]))
            probs[-1].append((p, b))
    if not grams:
        raise ValueError(f"{name}: no \\data\\ header or no 1-grams: not an ARPA file")
    # the header may list more orders than the file has sections: only those present are compared
    for k, (c, g) in enumerate(zip(counts, grams, strict=False), 1):
        if c != len(g):
            raise ValueError(f"{name}: the header says {c} {k}-grams; the file has {len(g)}")
    return grams, probs, len(grams)


def build(grams: list[list[tuple[str, ...]]], probs: list[list[tuple[float, float]]], max_order: int,
          name: str) -> NgramLM:
    """The arrays of :class:`NgramLM` from the parsed n-grams."""
    words = [g[0] for g in grams[0]]
    uni = list(probs[0])
    if "<unk>" not in words:
        words.append("<unk>")
        uni.append((UNK_LOG10, 0.0))
    for needed in ("<s>", "</s>"):
        if needed not in words:
            raise ValueError(f"{name}: the 1-grams have no {needed}")
    index = {w: i for i, w in enumerate(words)}
    if len(index) != len(words):
        raise ValueError(f"{name}: a 1-gram is listed twice")
    width = len(words)
    codes = [np.arange(width, dtype=np.int64)]  # the empty context (0) to every 1-gram (1 + word)
    child = [1 + np.arange(width, dtype=np.int64)]
    logp, back, order = [np.zeros(1)], [np.zeros(1)], [np.zeros(1, np.int64)]
    pairs = np.array(uni, dtype=np.float64).reshape(-1, 2)
    logp.append(pairs[:, 0] * LN10)
    back.append(pairs[:, 1] * LN10)
    order.append(np.ones(width, np.int64))
    size = 1 + width
    table = Trie(codes[0], child[0], width)
    for k in range(2, max_order + 1):
        ids = np.array([[index.get(w, -1) for w in g] for g in grams[k - 1]], dtype=np.int64).reshape(-1, k)
        if (ids < 0).any():
            r = int(np.argwhere(ids < 0)[0, 0])
            raise ValueError(f"{name}: the {k}-gram {' '.join(grams[k - 1][r])!r} has a word that is no 1-gram")
        ctx = table.find(ids[:, :-1])
        if (ctx < 0).any():
            r = int(np.flatnonzero(ctx < 0)[0])
            raise ValueError(f"{name}: the {k}-gram {' '.join(grams[k - 1][r])!r} has no {k - 1}-gram for its context")
        new = size + np.arange(ids.shape[0], dtype=np.int64)
        table = table.add(ctx * width + ids[:, -1], new)
        pairs = np.array(probs[k - 1], dtype=np.float64).reshape(-1, 2)
        logp.append(pairs[:, 0] * LN10)
        back.append(pairs[:, 1] * LN10)
        order.append(np.full(ids.shape[0], k, np.int64))
        size += ids.shape[0]
    all_order = np.concatenate(order)
    suffix = suffixes(grams, index, table, size)
    if np.unique(table.codes).size != table.codes.size:
        raise ValueError(f"{name}: an n-gram is listed twice")
    return NgramLM(tuple(words), index, max_order, np.concatenate(logp), np.concatenate(back), all_order,
                   suffix, table.codes, table.child)


@dataclass(frozen=True)
class Trie:
    """Sorted codes ``context * W + word`` and the n-gram each leads to."""

    codes: np.ndarray
    child: np.ndarray
    width: int

    def add(self, codes: np.ndarray, child: np.ndarray) -> Trie:
        all_codes = np.concatenate([self.codes, codes])
        order = np.argsort(all_codes, kind="stable")
        return Trie(all_codes[order], np.concatenate([self.child, child])[order], self.width)

    def find(self, ids: np.ndarray) -> np.ndarray:
        """int64 ``[M]``: the id of each row of words (int64 ``[M, k]``), -1 where it is no n-gram."""
        cur = np.zeros(ids.shape[0], dtype=np.int64)
        for j in range(ids.shape[1]):
            code = cur * self.width + ids[:, j]
            pos = np.minimum(np.searchsorted(self.codes, code), self.codes.size - 1)
            ok = (cur >= 0) & (self.codes[pos] == code)
            cur = np.where(ok, self.child[pos], -1)
        return cur


def suffixes(grams: list[list[tuple[str, ...]]], index: dict, table: Trie, size: int) -> np.ndarray:
    """int64 ``[G]``: each n-gram's longest proper suffix that is an n-gram (0: the empty one)."""
    suffix = np.zeros(size, dtype=np.int64)
    for k in range(2, len(grams) + 1):
        ids = np.array([[index[w] for w in g] for g in grams[k - 1]], dtype=np.int64).reshape(-1, k)
        own = table.find(ids)
        best = np.zeros(ids.shape[0], dtype=np.int64)
        for drop in range(k - 1, 0, -1):  # the shortest suffix first; longer ones found overwrite it
            found = table.find(ids[:, drop:])
            best = np.where(found >= 0, found, best)
        suffix[own] = best
    return suffix
