"""A word n-gram LM fused into Whisper-style decoding at word boundaries (docs/whisper.md).

The words of a text of byte-level BPE tokens (Whisper's tokenizer, GPT-2's pre-tokenizer):

- a token whose bytes start with whitespace (``" Hello"``) starts a new word: the word before it
  is complete;
- a token with no letter or digit (``","``, ``" -"``, ``"..."``; punctuation and whitespace) is a
  word boundary too, and adds no text: punctuation separates words and is never part of one;
- any other token (``"ing"``, ``"'s"``, a piece of a multi-byte character) adds its bytes to the
  word being spelled; so ``" don" "'t"`` is the word ``don't``;
- eot completes the last word, then ``</s>`` is scored; the special tokens and timestamps (ids
  from eot on) add nothing and end nothing.

A word's text is its bytes as UTF-8 (optionally lower-cased per token), compared exactly with the
ARPA's words; the word being spelled is not scored until it ends. The fused term is
:mod:`beamsearch.speech.fusion`'s: ``alpha`` x the natural-log LM probability of the completed
words (and ``</s>`` at eot) + ``beta`` x their number, the LM state starting at ``<s>`` in each
window. As a processor acting *after* log_softmax, each row's log-probabilities get, for every
next token, the change of that term if the token comes next, so a hypothesis's summed logprob is
the model's plus exactly its term (no renormalization).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from beamsearch.core import validate as check
from beamsearch.processors import RowCarrier, StepContext
from beamsearch.speech.fusion import WordFusion, text_hash
from beamsearch.speech.ngram import NgramLM

__all__ = ["WordLM", "WordLMFusion", "WordLMRows"]

SPACES = b" \t\n\r\x0b\x0c"


class WordLM:
    """An n-gram LM bound to a decoder's tokens (without weights): give it as
    ``WhisperOptions(lm=WordLM(...), lm_alpha=..., lm_beta=...)``.

    Args:
        lm: an :class:`~beamsearch.speech.ngram.NgramLM` or an ARPA file's path.
        token_bytes: per text token id (0 .. len - 1) its bytes (or str); the ids from
            ``len(token_bytes)`` on are no text (eot, the special tokens, timestamps).
        eot: the end-of-text id (>= ``len(token_bytes)``).
        vocab_size: V, the logits' width (> eot).
        lowercase: lower-case each token's text before it is looked up.
    """

    def __init__(self, lm: Any, token_bytes: Sequence[bytes | str], eot: int, vocab_size: int, *,
                 lowercase: bool = False) -> None:
        if isinstance(lm, (str, os.PathLike)):
            lm = NgramLM.from_arpa(os.fspath(lm))
        if not isinstance(lm, NgramLM):
            raise TypeError(f"lm must be an NgramLM or an ARPA file's path; got {type(lm).__name__}")
        self.vocab_size = check.at_least("vocab_size", vocab_size, 1)
        self.eot = check.integer("eot", eot)
        if not len(token_bytes) <= self.eot < self.vocab_size:
            raise ValueError(f"eot must be in [len(token_bytes)={len(token_bytes)}, vocab_size={self.vocab_size}); "
                             f"got {eot!r}")
        parts = [piece(t, lowercase) for t in token_bytes]
        parts += [(False, "")] * (self.vocab_size - len(parts))
        hashes = np.array([text_hash(text) for _, text in parts], dtype=np.int64).reshape(-1, 4)
        keys = np.array([(h1 << 31) | h2 for h1, h2, _, _ in (text_hash(latin(w)) for w in lm.words)], np.int64)
        order = np.argsort(keys, kind="stable")
        h1, h2, m1, m2 = hashes.T
        self.fusion = WordFusion(lm, 0.0, 0.0, np.array([e for e, _ in parts], dtype=bool), h1, h2, m1, m2,
                                 np.array([len(text) for _, text in parts], np.int64), keys[order],
                                 order.astype(np.int64))
        self.boundary = self.fusion.ends.astype(np.float32)  # [V]: 1.0 where a token ends a word

    @classmethod
    def from_openai(cls, lm: Any, tokenizer: Any, vocab_size: int, *, lowercase: bool = False) -> WordLM:
        """From an ``openai-whisper`` tokenizer (its tiktoken encoding gives each token's bytes)."""
        enc, eot = tokenizer.encoding, tokenizer.eot
        return cls(lm, [enc.decode_single_token_bytes(i) for i in range(eot)], eot, vocab_size, lowercase=lowercase)

    def scores(self, tokens: Sequence[int], alpha: float, beta: float) -> float:
        """The fused term of a text of token ids (eot included when it ended): ``alpha`` x the
        LM's natural-log probability of its completed words (and ``</s>`` after eot) + ``beta``
        x their number: what :class:`WordLMFusion` adds along it."""
        f = self.fusion
        state = f.start((1,))
        for t in tokens:
            if t == self.eot:
                lm, words = f.finish(*state)
                return float(alpha * lm[0] + beta * words[0])
            state = f.step(*state, np.array([t], np.int64))
        return float(alpha * state[3][0] + beta * state[4][0])


def latin(word: str) -> str:
    """A word's UTF-8 bytes as one character each (the tokens' texts are hashed byte-wise)."""
    return word.encode("utf-8").decode("latin-1")


def piece(token: bytes | str, lowercase: bool) -> tuple[bool, str]:
    """``(ends, text)`` of one token: whether it ends the word before it, and the bytes it adds to
    a word (as latin-1 characters; "" for punctuation and whitespace)."""
    raw = token.encode("utf-8") if isinstance(token, str) else bytes(token)
    body = raw.lstrip(SPACES)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:  # a piece of a multi-byte character: part of a word
        return len(body) < len(raw), body.decode("latin-1")
    if not any(ch.isalnum() for ch in text):
        return True, ""
    return len(body) < len(raw), latin(text.lower() if lowercase else text)


class WordLMRows(NamedTuple):
    """The rows' word-LM states (:data:`beamsearch.speech.fusion.LMState`: LM context, hash and
    length of the word being spelled, LM log-probability and words so far; ``[k]`` each) and the
    bound LM (passed through by ``select_state``)."""

    ctx: np.ndarray
    key: np.ndarray
    size: np.ndarray
    lm: np.ndarray
    words: np.ndarray
    fusion: WordFusion

    def advance(self, tokens: np.ndarray) -> WordLMRows:
        return WordLMRows(*self.fusion.step(*self[:5], np.asarray(tokens, np.int64)), self.fusion)


class WordLMFusion(RowCarrier):
    """Add each next token's change of ``alpha * ln P_LM + beta * words`` to the
    log-probabilities (after log_softmax; module docstring). Made by ``decode_windows`` from
    ``WhisperOptions(lm=, lm_alpha=, lm_beta=)``."""

    needs_history = False
    last_step = None  # acts at every step
    masks_only = False

    def __init__(self, lm: WordLM, alpha: float, beta: float) -> None:
        self.lm, self.alpha, self.beta = lm, float(alpha), float(beta)

    def start_rows(self, n: int) -> WordLMRows:
        return WordLMRows(*self.lm.fusion.start((n,)), self.lm.fusion)

    def deltas(self, rows: WordLMRows) -> np.ndarray:
        """float32 ``[k, V]``: each row's change of the fused term for each next token."""
        f = self.lm.fusion
        ends, logp, ctx = f.close(rows.ctx, rows.key, rows.size)  # the word being spelled, completed
        gain = np.where(ends, self.alpha * logp + self.beta, 0.0)  # --> [k]
        last, _ = f.lm.score(ctx, np.full(ctx.shape, f.lm.end))  # then </s>, at eot
        delta = gain.astype(np.float32)[:, None] * self.lm.boundary  # --> [k, V]: one pass
        delta[:, self.lm.eot] = gain + self.alpha * last
        return delta

    def __call__(self, logp: Any, ctx: StepContext) -> Any:
        if logp.shape[1] != self.lm.vocab_size:
            raise ValueError(f"lm was bound to vocab_size={self.lm.vocab_size}; the logits have {logp.shape[1]}")
        return logp + ctx.backend.from_host(self.deltas(ctx.row_states(self)), logp)
