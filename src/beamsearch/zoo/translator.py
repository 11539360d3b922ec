"""Loading a zoo checkpoint and decoding dates with it, through the public search API only.

By default every output is a real calendar date (:class:`beamsearch.zoo.calendar.CalendarDates`
masks the rest while decoding), and an output is only *accepted* when the model is confident it
read a date: the best hypothesis is not the empty "no date" answer, and the model's own
log-probability of it (without the constraint) is at least :data:`MIN_LOGPROB` (see
:meth:`Translator.accepts`).
"""

from __future__ import annotations

import datetime as dt
import pathlib
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from beamsearch import Hypothesis, beam_search_batch, beam_search_each, score_sequences, select_state
from beamsearch.zoo.calendar import CalendarDates
from beamsearch.zoo.checkpoint import CheckpointError, load_checkpoint
from beamsearch.zoo.dates import SOURCE_VOCAB, TARGET_VOCAB
from beamsearch.zoo.models import ModelConfig, Seq2Seq, Transformer

CHECKPOINTS = pathlib.Path(__file__).resolve().parent / "checkpoints"
MODELS = ("seq2seq", "transformer")
MIN_LOGPROB = -2.0  # the least model_logprob of an accepted date, chosen on the validation set (README)

__all__ = ["CHECKPOINTS", "MIN_LOGPROB", "MODELS", "CheckpointError", "Output", "Translator"]


@dataclass
class Output:
    """One decoded output: the text ("" for the "no date" answer), the hypothesis it came from, and
    ``model_logprob``, the model's own log-probability of it without the calendar constraint (the
    constraint renormalizes over real dates, which hides how much the model wanted an impossible
    one; equal to ``hypothesis.logprob`` when the search ran without it)."""

    text: str
    hypothesis: Hypothesis
    model_logprob: float


class Translator:
    """A trained dates model and the searches over it.

    ``greedy`` is plain greedy decoding (:func:`beamsearch.beam_search_each` with one row per
    input, no constraint); ``beam`` is :func:`beamsearch.beam_search_batch` (GNMT length penalty,
    n-best) with the calendar constraint by default; both decode many sources in one batch,
    ``chunk`` at a time. Sources are strings; outputs are :class:`Output` (text ``YYYY-MM-DD``, or
    "" for "no date", and the hypothesis).
    """

    def __init__(self, model: Seq2Seq | Transformer, chunk: int = 512) -> None:
        self.model: Any = model.eval()  # Seq2Seq or Transformer: the same step protocol
        self.cfg: ModelConfig = model.cfg
        self.chunk = chunk
        self.max_steps = self.cfg.max_target - 1  # positions: bos + up to max_target - 1 tokens

    @classmethod
    def load(cls, name: str = "seq2seq", directory: str | pathlib.Path | None = None) -> Translator:
        """Load ``<directory>/<name>.safetensors`` and ``<name>.json`` (default: the shipped ones,
        :data:`CHECKPOINTS`), as ``beamsearch train --out DIR`` writes them.

        Both files are validated as a whole first (:mod:`beamsearch.zoo.checkpoint`: every config
        field's type and range, the tensors' names, shapes, dtype and finiteness).

        Raises:
            ValueError: ``name`` is not one of :data:`MODELS`.
            CheckpointError: a file is missing, cannot be read or is not valid (the message names it).
        """
        if name not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {name!r}")
        return cls(load_checkpoint(name, pathlib.Path(directory) if directory is not None else CHECKPOINTS))

    def problem(self, text: str) -> str | None:
        """Why the model cannot read ``text`` (empty, characters outside its vocabulary, too long),
        or None."""
        if not text.strip():
            return "empty text"
        unknown = SOURCE_VOCAB.unknown(text)
        if unknown:
            return f"characters outside the vocabulary: {''.join(unknown)!r}"
        if len(text) > self.cfg.max_source:
            return f"{len(text)} characters; the model reads at most {self.cfg.max_source}"
        return None

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """int64 ``[N, S]`` source ids, padded; ValueError for a text the model cannot read."""
        rows = []
        for i, text in enumerate(texts):
            problem = self.problem(text)
            if problem is not None:
                raise ValueError(f"text {i + 1} ({text[:20]!r}): {problem}")
            rows.append(SOURCE_VOCAB.encode(text))
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.cfg.pad] * (width - len(r)) for r in rows], dtype=torch.int64)

    @torch.no_grad()
    def greedy(self, texts: Sequence[str]) -> list[Output]:
        """Greedy decoding of every text (the argmax at each step)."""
        out: list[Output] = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start : start + self.chunk]
            state = self.model.init_state(self.encode(part))
            results = beam_search_each(self.model.step, state, len(part), self.cfg.bos, self.cfg.eos,
                                       beam_size=1, max_len=self.max_steps, length_penalty=0.0)
            out += [self._output(hyps[0]) for hyps in results]
        return out

    @torch.no_grad()
    def beam(self, texts: Sequence[str], beam: int = 5, n_best: int = 1, alpha: float = 0.6,
             calendar: bool = True) -> list[list[Output]]:
        """Batched beam search; per text, its ``n_best`` outputs, best first. With ``calendar``
        every output is a real date or "" (no date); ``beam=1`` keeps one live row (greedy)."""
        processors = [CalendarDates()] if calendar else []
        out: list[list[Output]] = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start : start + self.chunk]
            state = self.model.init_state(self.encode(part))
            results = beam_search_batch(self.model.step, state, [[self.cfg.bos]] * len(part),
                                        eos_token_id=self.cfg.eos, max_steps=self.max_steps, beam_size=beam,
                                        n_best=n_best, alpha=alpha, logits_processors=processors)
            hyps = [h for row in results for h in row]
            rows = [i for i, row in enumerate(results) for _ in row]
            model_logprobs = [h.logprob for h in hyps]
            if calendar and hyps:  # the unconstrained model's own logprob of each output
                rescored = score_sequences(self.model.step, select_state(state, rows), [[self.cfg.bos]] * len(hyps),
                                           [h.tokens for h in hyps], eos_token_id=self.cfg.eos, alpha=alpha)
                model_logprobs = [r.logprob for r in rescored]
            found = iter(zip(hyps, model_logprobs))
            out += [[Output(TARGET_VOCAB.decode(h.tokens), h, lp) for h, lp in (next(found) for _ in row)]
                    for row in results]
        return out

    @torch.no_grad()
    def trace(self, text: str, beam: int = 5, n_best: int = 1, alpha: float = 0.6, calendar: bool = True,
              trace_width: int = 1) -> tuple[Any, Any, list[str]]:
        """The search tree of one text: ``(trace, greedy_trace, texts)``, the beam search's
        :class:`~beamsearch.Trace` (as :meth:`beam` runs it), the trace of greedy decoding (one live
        row, under the same constraint) for the overlay, and the beam's n-best texts, best first."""
        from beamsearch.corpus import trace_line, translator_model

        tree, greedy = trace_line(translator_model(self, calendar), text, beam=beam, n_best=n_best, alpha=alpha,
                                  trace_width=trace_width)
        return tree, greedy, [TARGET_VOCAB.decode(tree.tokens(int(v))) for v in tree.results(0)]

    def decode(self, texts: Sequence[str], beam: int, n_best: int = 1, alpha: float = 0.6,
               calendar: bool = True) -> list[list[Output]]:
        """Beam search; plain greedy decoding for ``beam == 1`` and ``n_best == 1`` without the
        calendar."""
        if beam == 1 and n_best == 1 and not calendar:
            return [[o] for o in self.greedy(texts)]
        return self.beam(texts, beam, n_best, alpha, calendar)

    @staticmethod
    def accepts(output: Output) -> bool:
        """Whether ``output`` is a date the model is confident of: a real date ``YYYY-MM-DD`` (not
        the "no date" answer; checked again here for searches without the calendar constraint), with
        ``model_logprob >= MIN_LOGPROB``."""
        return _real_date(output.text) and output.model_logprob >= MIN_LOGPROB

    @torch.no_grad()
    def rescore(self, text: str, tokens: Sequence[int]) -> float:
        """Teacher-forced log-probability of ``tokens`` (eos included if present) given ``text``."""
        state = self.model.init_state(self.encode([text]))
        total, prev = 0.0, self.cfg.bos
        for t in tokens:
            logits, state = self.model.step(state, torch.tensor([prev]))
            total += torch.log_softmax(logits[0].double(), dim=0)[t].item()
            prev = t
        return total

    def _output(self, h: Hypothesis) -> Output:
        return Output(TARGET_VOCAB.decode(h.tokens), h, h.logprob)


def _real_date(text: str) -> bool:
    try:
        return len(text) == 10 and dt.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False
