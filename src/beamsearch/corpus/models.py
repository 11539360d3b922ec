"""What corpus decoding needs of a model (:class:`CorpusModel`, with :class:`CorpusModelBase`
giving its optional members their defaults), token labels for the search picture, and the numpy
toy model of the tests."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from beamsearch.backends import NEG_INF

__all__ = ["CorpusModel", "CorpusModelBase", "MediaModel", "TokenLabels", "ToyModel", "check_model", "toy_model"]


class CorpusModel(Protocol):
    """What :func:`~beamsearch.corpus.decode_records` needs of a model (subclass
    :class:`CorpusModelBase` for the defaults of the members marked optional).

    Attributes:
        bos, eos: the start token (the default prompt is ``[bos]``) and the end token.
        max_steps: the most tokens the model can generate (a line may ask for fewer).
        processors: logits processors for every search (may be empty; optional: none).
        refill: whether the states of different inputs join with ``concat_state`` (optional:
            True); False decodes inputs in fixed batches of at most ``max_rows`` rows.
        verdicts: None (optional: the default), or ``verdicts(texts, hypotheses, max_steps) ->
            list[str | None]``: per decoded line (its text, its hypotheses, best first, and the
            ``max_steps`` it was searched with), None to keep its outputs or why it gets none (its
            record is then ``{"index", "input", "error": why}``; a hook of two parameters,
            ``verdicts(texts, hypotheses)``, is called without ``max_steps``); called on up to
            ``max_rows // rows`` finished lines at a time (the zoo models: ``Translator.verdicts``,
            what ``beamsearch translate`` prints).
        tokenizer: what a :class:`~beamsearch.processors.Grammar` reads the model's tokens with
            (``json_schema`` / ``grammar`` / ``regex``): a fast Hugging Face tokenizer, or the text
            of each token id (``""`` for a special one: never text); optional: None, no grammar.
        media: the kinds of files a JSON line may name for the model (``"image"``, ``"audio"``),
            read by ``media_item`` (a :class:`MediaModel`); optional: none.
    """

    bos: int
    eos: int
    max_steps: int
    refill: bool
    tokenizer: Any

    @property
    def processors(self) -> Sequence[Any]: ...

    @property
    def verdicts(self) -> Callable[[list[str], list[list[Any]], list[int]], list[str | None]] | None: ...

    def problem(self, text: str) -> str | None:
        """Why the model cannot read ``text`` (empty, too long, out of vocabulary), or None."""

    def make_state(self, items: list[dict]) -> Any:
        """The state before the first step, one row per item (``item["source"]`` is the text)."""

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        """``step(state, y_prev [k]) -> (logits [k, V], new_state)``."""

    def tokens(self, text: str) -> list[int]:
        """A target text as token ids (a prefix); ValueError if it cannot be written."""

    def text(self, tokens: Sequence[int]) -> str:
        """Token ids as target text (ids of special tokens dropped)."""

    def source_length(self, text: str) -> int:
        """The length ``max_steps=A*len+B`` reads (optional: ``len(text)``, characters; an hf:
        model's: its tokens)."""

    def prompt(self, text: str) -> list[int]:
        """The search's prompt for a line (optional: ``[bos]``; a causal LM's: the text's tokens)."""


class MediaModel(CorpusModel, Protocol):
    """A :class:`CorpusModel` that reads files named by a line (its ``media`` not empty)."""

    media: tuple[str, ...]

    def media_item(self, text: str, files: dict[str, str]) -> dict | str:
        """A line naming ``files`` (kind -> path, the kinds in ``media``): its stream fields
        (``"prompt"``, and the ``"source"`` that ``make_state`` reads), or why it cannot be decoded."""


class CorpusModelBase:
    """The optional members of a :class:`CorpusModel` at their defaults: no processors, refill
    on, no verdicts, no tokenizer, the source length in characters, the prompt ``[bos]``. A model subclasses it
    and defines the rest."""

    bos: int
    processors: Sequence[Any] = ()
    refill: bool = True
    verdicts: Callable[[list[str], list[list[Any]], list[int]], list[str | None]] | None = None
    tokenizer: Any = None
    media: tuple[str, ...] = ()

    def source_length(self, text: str) -> int:
        return len(text)

    def prompt(self, text: str) -> list[int]:
        return [self.bos]


MEMBERS = ("bos", "eos", "max_steps", "processors", "refill", "verdicts", "problem", "make_state", "step", "tokens",
           "text", "source_length", "prompt")
"""Every member of a :class:`CorpusModel` (``tokenizer`` aside: read only for a grammar, None when absent)."""


def check_model(model: Any) -> Any:
    """``model``, if it has every member of a :class:`CorpusModel`; else a TypeError naming the
    missing ones."""
    missing = [name for name in MEMBERS if not hasattr(model, name)]
    if missing:
        raise TypeError(f"model {type(model).__name__} is not a CorpusModel: it has no {', '.join(missing)} "
                        "(subclass beamsearch.corpus.CorpusModelBase for the defaults of processors, refill, "
                        "verdicts, source_length and prompt)")
    return model


class TokenLabels:
    """Token ids as the model's text, for :func:`beamsearch.viz.to_html`'s ``vocab`` (an object
    with ``decode``): the end token is ``<eos>`` and an unwritten start token ``<bos>``, as
    ``beamsearch translate --trace`` labels them (the model's text drops both)."""

    def __init__(self, model: CorpusModel) -> None:
        self.model = model

    def decode(self, tokens: Sequence[int]) -> str:
        """The labels of ``tokens``, one after the other."""
        return "".join(self._label(int(t)) for t in tokens)

    def _label(self, token: int) -> str:
        if token == self.model.eos:
            return "<eos>"
        text = self.model.text([token])
        return "<bos>" if token == self.model.bos and not text else text


class ToyModel(CorpusModelBase):
    """A numpy model for tests of the corpus machinery (fast to load, no torch): the source text's
    CRC-32 picks a row of a fixed random table at every step, so outputs differ between texts.
    Target tokens: 0 pad, 1 bos, 2 eos, 3.. the letters ``a``-``f``. Reads printable ASCII, at most
    ``max_source`` characters. ``delay`` seconds of sleep per step make a run slow enough to kill."""

    LETTERS = "abcdef"
    bos, eos, max_steps, max_source = 1, 2, 12, 40
    tokenizer = ("", "", "", *LETTERS)  # each id's text, for a grammar (pad, bos, eos: none)

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        rng = np.random.default_rng(12)
        self.table = rng.normal(0.0, 1.5, size=(997, 3 + len(self.LETTERS)))
        self.table[:, :2] = NEG_INF  # never pad or bos

    def problem(self, text: str) -> str | None:
        if not text.strip():
            return "empty text"
        unknown = sorted({c for c in text if not (" " <= c <= "~")})
        if unknown:
            return f"characters outside the vocabulary: {''.join(unknown)!r}"
        if len(text) > self.max_source:
            return f"{len(text)} characters; the model reads at most {self.max_source}"
        return None

    def make_state(self, items: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        seeds = np.array([zlib.crc32(i["source"].encode()) for i in items], dtype=np.int64)
        return seeds, np.zeros(len(items), np.int64)  # (seed [k], tokens generated [k])

    def step(self, state: tuple[np.ndarray, np.ndarray], y_prev: np.ndarray) -> tuple[np.ndarray, tuple]:
        if self.delay:
            time.sleep(self.delay)
        seeds, count = state
        logits = self.table[(seeds + 7919 * count + 31 * np.asarray(y_prev)) % len(self.table)].copy()
        logits[:, self.eos] += 0.5 * count  # --> [k, V]; longer outputs end more surely
        return logits, (seeds, count + 1)

    def tokens(self, text: str) -> list[int]:
        unknown = [c for c in text if c not in self.LETTERS]
        if unknown:
            raise ValueError(f"characters outside the target vocabulary: {''.join(unknown)!r}")
        return [3 + self.LETTERS.index(c) for c in text]

    def text(self, tokens: Sequence[int]) -> str:
        return "".join(self.LETTERS[t - 3] for t in tokens if t >= 3)


def toy_model(delay: float = 0.0) -> CorpusModel:
    """The numpy toy :class:`CorpusModel` of the tests (``beamsearch decode --model _toy[:DELAY]``)."""
    return ToyModel(delay)
