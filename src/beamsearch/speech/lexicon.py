"""Lexicon-constrained decoding: hypotheses spell only words of a given word list.

The rule (docs/speech.md, "Lexicon"): a hypothesis's labels split into words by the vocabulary's
conventions (:mod:`beamsearch.speech.vocabulary`: a word delimiter or a ``▁`` piece ends the word
being spelled; special tokens are no text). While decoding, every completed word must be a word
of the lexicon and the word being spelled a prefix of one (possibly empty); at the end of the
utterance the word being spelled must be empty or a whole word of the lexicon too. A hypothesis
breaking the rule is never a candidate, and one whose last word is unfinished at the end is not
returned.

The words are compiled once into a trie over their characters, held as arrays: a transition is
one binary search in a sorted table of ``node * C + char`` codes (C the characters of the
lexicon). A label steps the trie by each character of its text, so a word is accepted however
it is split into pieces (as the word LM hashes a word one character at a time,
:mod:`beamsearch.speech.fusion`). A hypothesis carries one integer: its node (0: the root, no
word begun; -1: outside the lexicon, never kept). It depends only on the labels, so two
alignments of one prefix share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.speech.vocabulary import Vocabulary


@dataclass(frozen=True)
class Lexicon:
    """A word list bound to a vocabulary's labels.

    ``codes``/``targets`` int64 ``[E]``: sorted ``node * C + char`` of every trie edge and the node
    it leads to; ``whole`` bool ``[S]``: whether a node ends a word of the lexicon. Per label:
    ``ends`` bool ``[V]`` whether it ends the word being spelled, ``chars`` int64 ``[V, K]`` the
    character ids of the text it adds (-1 pads; -2 a character of no lexicon word), ``size``
    int64 ``[V]`` their number."""

    codes: np.ndarray
    targets: np.ndarray
    whole: np.ndarray
    alphabet: int
    ends: np.ndarray
    chars: np.ndarray
    size: np.ndarray

    @staticmethod
    def of(words: Any, vocabulary: Vocabulary | Sequence[str] | None, blank: int) -> Lexicon | None:
        """``lexicon=`` checked (a sequence of words, each a non-empty string without spaces)
        and compiled over ``vocabulary``'s labels (a :class:`Vocabulary` or V token strings);
        None: no lexicon."""
        if words is None:
            return None
        if vocabulary is not None and not isinstance(vocabulary, Vocabulary):
            vocabulary = Vocabulary(vocabulary)
        if isinstance(words, Lexicon):
            if vocabulary is None or words.ends.size != len(vocabulary):
                raise ValueError(f"lexicon was compiled for {words.ends.size} labels; the decode has "
                                 f"{'no vocabulary' if vocabulary is None else f'V={len(vocabulary)}'}")
            return words
        if isinstance(words, (str, bytes)) or not hasattr(words, "__iter__"):
            raise TypeError(f"lexicon must be a sequence of words (strings); got {words!r:.80}")
        if vocabulary is None:
            raise ValueError("lexicon needs vocabulary= (the token strings that spell its words)")
        items = list(words)
        for i, w in enumerate(items):
            if not isinstance(w, str) or not w or w != "".join(w.split()):
                raise ValueError(f"lexicon[{i}] must be a non-empty string without spaces; got {w!r:.80}")
        return compile_words(items, vocabulary, blank)

    def step(self, node: np.ndarray, label: np.ndarray) -> np.ndarray:
        """int64, the shape of ``node``: the node after one more label (-1: outside the lexicon;
        a node of -1 stays -1; ``label`` -1: no label, the node unchanged)."""
        lab = np.where(label < 0, 0, label)
        ending = self.ends[lab] & (label >= 0)
        out = np.where(ending & (node > 0) & ~self.whole[np.maximum(node, 0)], -1, node)
        out = np.where(ending & (out >= 0), 0, out)
        chars = self.chars[lab]  # --> [..., K]
        for k in range(chars.shape[-1]):
            c = chars[..., k]
            walk = (k < np.where(label < 0, 0, self.size[lab])) & (out >= 0)
            out = np.where(walk, self.child(out, c), out)
        return out

    def child(self, node: np.ndarray, char: np.ndarray) -> np.ndarray:
        """The trie node after ``char`` from ``node`` (-1: no such edge; ``char`` -2: none)."""
        code = node * self.alphabet + char
        if not self.codes.size:
            return np.full(node.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.codes, code), self.codes.size - 1)
        return np.where((self.codes[pos] == code) & (char >= 0), self.targets[pos], -1)

    def finished(self, node: np.ndarray) -> np.ndarray:
        """bool, the shape of ``node``: whether a hypothesis may end here (no word begun, or a
        whole word of the lexicon)."""
        return (node == 0) | ((node > 0) & self.whole[np.maximum(node, 0)])


def compile_words(words: list[str], vocabulary: Vocabulary, blank: int) -> Lexicon:
    """The character trie of ``words`` and each label's characters."""
    alphabet = {ch: i for i, ch in enumerate(sorted({ch for w in words for ch in w}))}
    edges: dict[tuple[int, str], int] = {}
    whole = [False]
    for w in words:
        node = 0
        for ch in w:
            if (node, ch) not in edges:
                edges[(node, ch)] = len(whole)
                whole.append(False)
            node = edges[(node, ch)]
        whole[node] = True
    pairs = sorted((u * len(alphabet) + alphabet[ch], v) for (u, ch), v in edges.items())
    ends, texts = vocabulary.pieces(blank)
    width = max((len(t) for t in texts), default=0)
    chars = np.full((len(texts), max(width, 1)), -1, dtype=np.int64)
    for i, text in enumerate(texts):
        chars[i, : len(text)] = [alphabet.get(ch, -2) for ch in text]
    return Lexicon(np.array([c for c, _ in pairs], dtype=np.int64), np.array([v for _, v in pairs], dtype=np.int64),
                   np.array(whole), max(len(alphabet), 1), ends, chars,
                   np.array([len(t) for t in texts], dtype=np.int64))


@dataclass(frozen=True)
class LexTerm:
    """The lexicon's term of one frame's extensions (as :class:`beamsearch.speech.hotwords.HotTerm`):
    0 for an extension that keeps to the lexicon, -inf for one that leaves it; ``up`` float64
    ``[n, B]`` its bound (0)."""

    lex: Lexicon
    node: np.ndarray
    up: np.ndarray

    @staticmethod
    def of(lex: Lexicon, node: np.ndarray) -> LexTerm:
        return LexTerm(lex, node, np.zeros(node.shape))

    def now(self) -> np.ndarray:
        """float64 ``[n, B]``: each slot's own term (0: a slot is always inside the lexicon)."""
        return self.up

    def term(self, utt: np.ndarray, slot: np.ndarray, label: np.ndarray) -> np.ndarray:
        """float64 ``[K]``: 0 where slot ``slot[k]`` of ``utt[k]`` extended by ``label[k]`` keeps to
        the lexicon, else -inf."""
        return np.where(self.lex.step(self.node[utt, slot], label) >= 0, 0.0, NEG_INF)
