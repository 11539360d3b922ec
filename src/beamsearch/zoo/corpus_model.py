"""A zoo dates model as a :class:`beamsearch.corpus.CorpusModel` (``beamsearch decode --model
seq2seq``): its searches are those of ``Translator.beam`` and each line gets the translator's
verdict."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from beamsearch.zoo.calendar import CalendarDates
from beamsearch.zoo.dates import TARGET_VOCAB
from beamsearch.zoo.translator import Translator

__all__ = ["ZooModel", "translator_model", "zoo_model"]


class ZooModel:
    """A zoo dates model (:class:`beamsearch.zoo.translator.Translator`) as a
    :class:`beamsearch.corpus.CorpusModel`; the searches are those of ``Translator.beam`` (calendar
    constraint by default), and a line gets the translator's verdict (``beamsearch translate``'s
    answer). Its prompt is ``[bos]``, its source length the text's characters, its states join
    (refill)."""

    refill = True

    def __init__(self, translator: Translator, calendar: bool) -> None:
        self._translator, self._vocab = translator, TARGET_VOCAB
        self.bos, self.eos = translator.cfg.bos, translator.cfg.eos
        self.max_steps = translator.max_steps
        self.processors = [CalendarDates()] if calendar else []
        # each id's text, for a grammar (--regex): pad, bos, eos and unk have none
        self.tokenizer = ["" if i <= self._vocab.unk else c for i, c in enumerate(self._vocab.itos)]

    def problem(self, text: str) -> str | None:
        return self._translator.problem(text)

    def make_state(self, items: list[dict]) -> Any:
        with torch.no_grad():
            return self._translator.model.init_state(self._translator.encode([i["source"] for i in items]))

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        with torch.no_grad():
            return self._translator.model.step(state, y_prev)

    def source_length(self, text: str) -> int:
        return len(text)

    def prompt(self, text: str) -> list[int]:
        return [self.bos]

    def tokens(self, text: str) -> list[int]:
        unknown = [c for c in text if c not in self._vocab.stoi]
        if unknown:
            raise ValueError(f"characters outside the target vocabulary: {''.join(unknown)!r}")
        return self._vocab.encode(text)

    def text(self, tokens: Sequence[int]) -> str:
        return self._vocab.decode(list(tokens))

    def verdicts(self, texts: list[str], hypotheses: list[list[Any]], max_steps: list[int]) -> list[str | None]:
        """``Translator.verdicts`` of the lines on their best hypotheses (rescored in one batch),
        each searched with ``max_steps[i]`` steps."""
        best = self._translator.outputs(texts, [h[:1] for h in hypotheses])
        return self._translator.verdicts(texts, best, max_steps)


def zoo_model(name: str, directory: str | os.PathLike | None = None, *, calendar: bool = True) -> ZooModel:
    """A zoo model as a :class:`CorpusModel` (needs the ``zoo`` extra: torch, safetensors).

    Args:
        name: ``"seq2seq"`` or ``"transformer"``.
        directory: a checkpoint folder (``beamsearch train --out DIR``); default: the shipped one.
        calendar: constrain outputs to real dates (as ``beamsearch translate`` does).
    """
    return translator_model(Translator.load(name, directory), calendar)


def translator_model(translator: Translator, calendar: bool = True) -> ZooModel:
    """A loaded :class:`beamsearch.zoo.translator.Translator` as a :class:`CorpusModel` (its
    searches those of ``Translator.beam``; ``calendar`` constrains outputs to real dates)."""
    return ZooModel(translator, calendar)
