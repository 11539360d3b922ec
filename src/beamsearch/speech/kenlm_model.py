"""Binary KenLM files through the ``kenlm`` package, for users who have no ARPA file.

A binary file cannot be read into arrays (its layout is KenLM's), so :class:`KenLMModel` asks
``kenlm.Model`` for every ``(state, word)`` pair, one at a time in Python, with a cache of the
pairs seen: slower than :class:`~beamsearch.speech.NgramLM` for large beams. It has the same
scoring interface (``score(states, words)``, ``words``, ``start``, ``end``, ``unk``), so
``ctc_beam_search(..., lm=KenLMModel(path, words))`` works as with an ARPA file. kenlm's Python
API does not list a model's vocabulary, so the words are given (the 1-grams, as pyctcdecode's
``unigrams``); any other word is ``<unk>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

LN10 = math.log(10.0)


class KenLMModel:
    """A KenLM model (binary or ARPA) scored through ``kenlm.Model``.

    Args:
        path: the model file.
        words: the words the model knows (its 1-grams); ``<s>``, ``</s>`` and ``<unk>`` are added.
    """

    def __init__(self, path: str, words: Sequence[str]) -> None:
        try:
            import kenlm
        except ImportError:
            raise ImportError("KenLMModel needs the kenlm package (pip install kenlm); "
                              "an ARPA file also loads without it: NgramLM.from_arpa") from None
        if isinstance(words, str) or not hasattr(words, "__iter__"):
            raise TypeError(f"words must be a sequence of strings; got {words!r:.80}")
        self.kenlm = kenlm
        self.model = kenlm.Model(str(path))
        listed = [w for w in dict.fromkeys(words) if w not in ("<s>", "</s>", "<unk>")]
        self.words = tuple(listed + ["<s>", "</s>", "<unk>"])
        self.index = {w: i for i, w in enumerate(self.words)}
        first = kenlm.State()
        self.model.BeginSentenceWrite(first)
        self.states: list[Any] = [first]
        self.ids: dict[Any, int] = {first: 0}
        self.cache: dict[tuple[int, int], tuple[float, int]] = {}

    @property
    def unk(self) -> int:
        return self.index["<unk>"]

    @property
    def start(self) -> int:
        return 0

    @property
    def end(self) -> int:
        return self.index["</s>"]

    def score(self, state: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`beamsearch.speech.NgramLM.score`: natural-log scores and new states ``[K]``."""
        out = np.zeros(len(state))
        new = np.zeros(len(state), dtype=np.int64)
        for k, pair in enumerate(zip(np.asarray(state).tolist(), np.asarray(word).tolist(), strict=True)):
            if pair not in self.cache:
                nxt = self.kenlm.State()
                logp = self.model.BaseScore(self.states[pair[0]], self.words[pair[1]], nxt)
                if nxt not in self.ids:
                    self.ids[nxt] = len(self.states)
                    self.states.append(nxt)
                self.cache[pair] = (logp * LN10, self.ids[nxt])
            out[k], new[k] = self.cache[pair]
        return out, new
