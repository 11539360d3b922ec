"""Word language-model fusion in CTC beam search: ``alpha`` x LM log-prob + ``beta`` x words.

A word is scored when it ends: at a word delimiter, or at the next piece that starts a word
(``▁``), and the last word, then ``</s>``, at the end of the utterance (:meth:`WordFusion.finish`).
The word being spelled is not scored until it ends. So each hypothesis carries, besides its
labels, five numbers that depend only on its labels (two alignments of one prefix share them):

- ``ctx``: its LM state (:class:`beamsearch.speech.ngram.NgramLM`), after ``<s>`` and its
  completed words;
- ``key``/``size``: a hash of the unfinished word's text and its length in characters (0: none);
  the text is hashed like the prefixes (two polynomial hashes modulo primes below 2**31), one
  character at a time, so a word spelled by any pieces has one hash; a finished word's hash is
  looked up in the sorted hashes of the LM's words (not found: ``<unk>``);
- ``lm``: the natural-log LM probability of its completed words, plus ``unk`` for each of them
  not in the LM's vocabulary (``unk_score_offset``; 0 when None); ``words``: how many there are.

A hypothesis's fused term is ``alpha * lm + beta * words``; an extension by a label that ends a
word adds ``alpha * log p(word | ctx) + beta``, any other label nothing, so within one slot the
term takes two values, computed once per slot and frame (:class:`LMTerm`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.core import validate
from beamsearch.speech.ngram import NgramLM
from beamsearch.speech.vocabulary import Vocabulary

P1, P2 = 2_147_483_647, 2_147_483_629  # primes below 2**31: each hash times its base fits in int64
BASE1, BASE2 = 1_000_003, 998_244_353 % P2
LOW = (1 << 31) - 1


def text_hash(text: str) -> tuple[int, int, int, int]:
    """``(h1, h2, base1**len, base2**len)`` of ``text``, each modulo its prime."""
    h1 = h2 = 0
    for ch in text:
        h1 = (h1 * BASE1 + ord(ch) + 1) % P1
        h2 = (h2 * BASE2 + ord(ch) + 1) % P2
    return h1, h2, pow(BASE1, len(text), P1), pow(BASE2, len(text), P2)


# (ctx, key, size, lm, words): a word-LM state; int64 but lm, the natural-log LM probability (float64)
LMState = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def lm_rows(state: LMState, idx: Any) -> LMState:
    """The word-LM state's entries at ``idx`` (an index of its arrays)."""
    ctx, key, size, lm, words = state
    return ctx[idx], key[idx], size[idx], lm[idx], words[idx]


@dataclass(frozen=True)
class WordFusion:
    """An n-gram LM bound to a vocabulary's labels, with its weights.

    Per label (int64/bool ``[V]``): ``ends`` whether it ends the word being spelled (a delimiter
    or a ``▁`` piece), ``h1``/``h2``/``m1``/``m2`` the hash of the text it adds and the factors
    that shift a hash past it, ``size`` its text's length. ``table``/``ids``: the LM words' sorted
    hashes and their word ids."""

    lm: NgramLM
    alpha: float
    beta: float
    ends: np.ndarray
    h1: np.ndarray
    h2: np.ndarray
    m1: np.ndarray
    m2: np.ndarray
    size: np.ndarray
    table: np.ndarray
    ids: np.ndarray
    unk: float = 0.0

    @staticmethod
    def of(lm: Any, alpha: Any, beta: Any, vocabulary: Vocabulary | None, blank: int,
           unk_score_offset: Any = None) -> WordFusion | None:
        """``lm=`` checked (an :class:`NgramLM` or an ARPA file's path) and bound; None: no LM.
        ``unk_score_offset`` (natural log, None: 0) is added to the LM log-probability of each
        completed word not in the LM's vocabulary; given without a word LM it is a ValueError."""
        a = validate.real("alpha", alpha, finite=True)
        b = validate.finite("beta", beta)
        if a < 0:
            raise ValueError(f"alpha must be >= 0; got {alpha!r}")
        unk = 0.0 if unk_score_offset is None else validate.finite("unk_score_offset", unk_score_offset)
        if lm is None:
            if unk_score_offset is not None:
                raise ValueError(f"unk_score_offset={unk_score_offset!r} needs a word n-gram lm= (an NgramLM "
                                 "or an ARPA file's path)")
            return None
        if isinstance(lm, (str, os.PathLike)):
            lm = NgramLM.from_arpa(os.fspath(lm))
        if not hasattr(lm, "score") or not hasattr(lm, "words"):
            raise TypeError(f"lm must be an NgramLM (or an ARPA file's path); got {type(lm).__name__}")
        if vocabulary is None:
            raise ValueError("lm needs vocabulary= (the token strings that spell its words)")
        ends, texts = vocabulary.pieces(blank)
        parts = np.array([text_hash(tok) for tok in texts], dtype=np.int64).reshape(-1, 4)
        size = np.array([len(tok) for tok in texts], dtype=np.int64)
        keys = np.array([(h1 << 31) | h2 for h1, h2, _, _ in map(text_hash, lm.words)], dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        h1, h2, m1, m2 = parts.T
        return WordFusion(lm, a, b, ends, h1, h2, m1, m2, size, keys[order], order.astype(np.int64), unk)

    def start(self, shape: tuple[int, ...]) -> LMState:
        """The state of the empty prefix: ``(ctx, key, size, lm, words)`` of this shape."""
        zero = np.zeros(shape, dtype=np.int64)
        return np.full(shape, self.lm.start, dtype=np.int64), zero, zero.copy(), np.zeros(shape), zero.copy()

    def word_of(self, key: np.ndarray) -> np.ndarray:
        """The LM word id of each hashed word (``<unk>`` where no LM word has that hash)."""
        pos = np.minimum(np.searchsorted(self.table, key), self.table.size - 1)
        return np.where(self.table[pos] == key, self.ids[pos], self.lm.unk)

    def close(self, ctx: np.ndarray, key: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where ``size > 0``, the unfinished word scored: ``(ends, logp, new ctx)`` (``logp``
        0.0 and ``ctx`` unchanged elsewhere; ``unk`` added where the word is not in the LM's
        vocabulary); all of the shape of ``ctx``."""
        ends = size > 0
        logp, new = np.zeros(ctx.shape), ctx.copy()
        if ends.any():
            word = self.word_of(key[ends])
            logp[ends], new[ends] = self.lm.score(ctx[ends], word)
            if self.unk:
                logp[ends] += np.where(word == self.lm.unk, self.unk, 0.0)
        return ends, logp, new

    def step(self, ctx: np.ndarray, key: np.ndarray, size: np.ndarray, lm: np.ndarray, words: np.ndarray,
             label: np.ndarray, closed: tuple[np.ndarray, np.ndarray] | None = None) -> LMState:
        """The state after one more label (all arrays of one shape). ``closed``: ``(logp, new
        ctx)`` of :meth:`close` on these ``ctx, key, size`` when already known (then the LM is
        not asked again; read only where the label ends a word)."""
        label = np.where(label < 0, 0, label)
        end = self.ends[label]
        if closed is None:
            closing, logp, new_ctx = self.close(ctx, key, np.where(end, size, 0))
        else:
            closing = end & (size > 0)
            logp, new_ctx = np.where(closing, closed[0], 0.0), np.where(closing, closed[1], ctx)
        h1 = np.where(end, 0, key >> 31) * self.m1[label] % P1
        h2 = np.where(end, 0, key & LOW) * self.m2[label] % P2
        new_key = (((h1 + self.h1[label]) % P1) << 31) | ((h2 + self.h2[label]) % P2)
        return (new_ctx, new_key, np.where(end, 0, size) + self.size[label], lm + logp, words + closing)

    def fused(self, lm: np.ndarray, words: np.ndarray) -> np.ndarray:
        """``alpha * lm + beta * words``."""
        return self.alpha * lm + self.beta * words

    def finish(self, ctx: np.ndarray, key: np.ndarray, size: np.ndarray, lm: np.ndarray,
               words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """At the end of an utterance: the last word and ``</s>`` scored; ``(lm, words)``."""
        closing, logp, ctx = self.close(ctx, key, size)
        last, _ = self.lm.score(ctx.ravel(), np.full(ctx.size, self.lm.end))
        return lm + logp + last.reshape(ctx.shape), words + closing


@dataclass(frozen=True)
class LMTerm:
    """The LM term of one frame's extensions (as :class:`beamsearch.speech.hotwords.HotTerm`):
    ``own`` float64 ``[n, B]`` each slot's fused term, ``gain`` what an extension by a label that
    ends a word adds to it, ``up`` an upper bound of any extension's term; ``closed``: the
    slots' unfinished words scored, ``(logp, new ctx)`` of :meth:`WordFusion.close`, which an
    extension's :meth:`WordFusion.step` reuses (the LM is asked once per slot and frame)."""

    fusion: WordFusion
    own: np.ndarray
    gain: np.ndarray
    up: np.ndarray
    closed: tuple[np.ndarray, np.ndarray]

    @staticmethod
    def of(fusion: WordFusion, ctx: np.ndarray, key: np.ndarray, size: np.ndarray, lm: np.ndarray,
           words: np.ndarray) -> LMTerm:
        ends, logp, after = fusion.close(ctx, key, size)
        gain = np.where(ends, fusion.alpha * logp + fusion.beta, 0.0)
        own = fusion.fused(lm, words)
        return LMTerm(fusion, own, gain, own + np.maximum(gain, 0.0), (logp, after))

    def closed_at(self, row: np.ndarray, slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``closed`` of slots ``slot`` of utterances ``row`` (broadcast index arrays)."""
        return self.closed[0][row, slot], self.closed[1][row, slot]

    def now(self) -> np.ndarray:
        return self.own

    def term(self, utt: np.ndarray, slot: np.ndarray, label: np.ndarray) -> np.ndarray:
        """float64 ``[K]``: the term of slot ``slot[k]`` of ``utt[k]`` extended by ``label[k]``."""
        return self.own[utt, slot] + np.where(self.fusion.ends[label], self.gain[utt, slot], 0.0)

    def cols(self, tok: np.ndarray, tok_lp: np.ndarray) -> np.ndarray:
        """float64 ``[n, B, M]``: the term of each slot extended by each of ``tok`` ``[n, M]``."""
        return self.own[:, :, None] + np.where(self.fusion.ends[tok][:, None, :], self.gain[:, :, None], 0.0)


@dataclass(frozen=True)
class Terms:
    """Several further terms as one: their sums."""

    parts: tuple
    up: np.ndarray

    @staticmethod
    def of(*parts: Any) -> Any:
        """None when every part is None; the part itself when only one is given."""
        live = tuple(p for p in parts if p is not None)
        if len(live) <= 1:
            return live[0] if live else None
        return Terms(live, sum(p.up for p in live))

    def now(self) -> np.ndarray:
        return sum(p.now() for p in self.parts)

    def term(self, utt: np.ndarray, slot: np.ndarray, label: np.ndarray) -> np.ndarray:
        return sum(p.term(utt, slot, label) for p in self.parts)
