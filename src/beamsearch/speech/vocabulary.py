"""Tokens to words: the word-boundary conventions of CTC vocabularies.

- A character vocabulary marks the space between words with a delimiter token: ``|`` in
  wav2vec2's tokenizer, or a plain space. The delimiter ends the word before it and is never text.
- SentencePiece vocabularies mark the first piece of a word with ``▁`` (U+2581): a piece that
  starts with it starts a new word, without the marker; a piece that is ``▁`` alone only ends the
  word before it.
- Special tokens (padding, ``<s>``, ``</s>``, ``<unk>``, ``[PAD]``, ..., and the blank) are never
  text and do not end a word.

Text joins the words with single spaces, so no text starts or ends with a space or holds two.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

SP_MARK = "\u2581"
SPECIAL = re.compile(r"^(<[^<>\s]+>|\[[A-Za-z_]+\])$")
"""A token that looks like ``<pad>``, ``</s>``, ``<unk>``, ``[PAD]``, ``[UNK]`` is special by default."""


class Vocabulary:
    """The strings of a CTC model's labels, and where words begin and end.

    Args:
        tokens: the string of each label id (``len(tokens)`` is V).
        word_delimiter: the token string between words; by default ``"|"`` if a token is ``"|"``,
            else ``" "`` if a token is a space, else none (then only ``▁`` starts words).
        special_ids: the ids that are never text; by default every token that looks like
            ``<...>`` or ``[...]`` (the blank is never text either, whatever this says).
    """

    def __init__(self, tokens: Sequence[str], *, word_delimiter: str | None = None,
                 special_ids: Iterable[int] | None = None) -> None:
        if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
            raise TypeError(f"tokens must be a sequence of strings; got {tokens!r:.80}")
        self.tokens = list(tokens)
        for i, tok in enumerate(self.tokens):
            if not isinstance(tok, str):
                raise TypeError(f"tokens[{i}] must be a string; got {tok!r} of type {type(tok).__name__}")
        if word_delimiter is None:
            word_delimiter = "|" if "|" in self.tokens else (" " if " " in self.tokens else None)
        elif word_delimiter not in self.tokens:
            raise ValueError(f"word_delimiter must be one of the tokens; got {word_delimiter!r}")
        self.word_delimiter = word_delimiter
        if special_ids is None:
            self.special_ids = frozenset(i for i, tok in enumerate(self.tokens) if SPECIAL.match(tok))
        else:
            ids = list(special_ids)
            for j, i in enumerate(ids):
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.tokens):
                    raise ValueError(f"special_ids[{j}] must be a token id in [0, {len(self.tokens)}); got {i!r}")
            self.special_ids = frozenset(ids)

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> Vocabulary:
        """From a transformers tokenizer (or a processor holding one as ``.tokenizer``): its tokens
        by id, its special ids, and its ``word_delimiter_token`` where it has one (wav2vec2; that
        token is a word boundary, not a special token, here)."""
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        size = len(tokenizer)
        tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
        delimiter = getattr(tokenizer, "word_delimiter_token", None)
        delimiter = delimiter if delimiter in tokens else None
        return cls([str(t) for t in tokens], word_delimiter=delimiter,  # wav2vec2 lists its delimiter as special
                   special_ids=[i for i in tokenizer.all_special_ids if 0 <= i < size and tokens[i] != delimiter])

    def pieces(self, blank: int | None = None) -> tuple[np.ndarray, list[str]]:
        """Per label: whether it ends the word being spelled (bool ``[V]``: the delimiter, a piece
        that starts with ``▁``) and the text it adds to the next word (``""``: the delimiter, ``▁``
        alone, the blank, a special token, which also end nothing)."""
        ends = np.zeros(len(self.tokens), dtype=bool)
        texts = [""] * len(self.tokens)
        for i, tok in enumerate(self.tokens):
            if i == blank or i in self.special_ids:
                continue
            if tok == self.word_delimiter or tok.startswith(SP_MARK):
                ends[i] = True
                tok = "" if tok == self.word_delimiter else tok[len(SP_MARK):]
            texts[i] = tok
        return ends, texts

    def words(self, labels: Sequence[int], blank: int | None = None) -> list[tuple[str, int, int]]:
        """The words of a label sequence: ``(text, first, last)`` with ``first``/``last`` the
        positions in ``labels`` of the word's first and last text-bearing label."""
        out: list[tuple[str, int, int]] = []
        text, first, last = "", -1, -1
        for pos, label in enumerate(labels):
            tok = self.tokens[label]
            if label == blank or label in self.special_ids:
                continue
            if tok == self.word_delimiter or tok.startswith(SP_MARK):
                if text:
                    out.append((text, first, last))
                text, first = "", -1
                if tok == self.word_delimiter:
                    continue
                tok = tok[len(SP_MARK):]
            if tok:
                text, first, last = text + tok, pos if first < 0 else first, pos
        if text:
            out.append((text, first, last))
        return out

    def text(self, labels: Sequence[int], blank: int | None = None) -> str:
        """The words of ``labels`` joined by single spaces."""
        return " ".join(word for word, _, _ in self.words(labels, blank))
