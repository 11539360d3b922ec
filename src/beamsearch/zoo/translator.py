"""Loading a zoo checkpoint and decoding dates with it, through the public search API only.

By default every output is a real calendar date (:class:`beamsearch.zoo.calendar.CalendarDates`
masks the rest while decoding), and an output is only *accepted* when the model is confident it
read a date: the best hypothesis is not the empty "no date" answer, and the model's own
log-probability of it (without the constraint) is at least :data:`MIN_LOGPROB` (see
:meth:`Translator.accepts`). :meth:`Translator.verdict` gives the reason for every input that gets
no date (what ``beamsearch translate`` and ``beamsearch decode`` print): among them, a year outside
:data:`YEARS` (the years the models were trained on) and a best reading whose year is not the one
the source writes (:func:`beamsearch.zoo.dates.written_year`), so no other year is ever printed; a
two-digit year whose century the model cannot tell (its readings in the other centuries within
:data:`CENTURY_MARGIN` of the best, :meth:`Translator.century_readings`); and an output cut at
``max_steps`` (a date takes :data:`DATE_STEPS`), said as such, not as "no date".
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from beamsearch import Hypothesis, beam_search_batch, beam_search_each, select_state
from beamsearch.zoo.calendar import CalendarDates, why_not_a_date
from beamsearch.zoo.checkpoint import CheckpointError, load_checkpoint
from beamsearch.zoo.dates import SOURCE_VOCAB, TARGET_VOCAB, YEARS, written_year
from beamsearch.zoo.models import ModelConfig, Seq2Seq, Transformer

__all__ = ["CENTURY_MARGIN", "CHECKPOINTS", "DATE_STEPS", "MIN_LOGPROB", "MODELS", "YEARS", "CheckpointError", "Output",
           "Translator", "readable"]

CHECKPOINTS = pathlib.Path(__file__).resolve().parent / "checkpoints"
MODELS = ("seq2seq", "transformer")
MIN_LOGPROB = -2.0  # the least model_logprob of an accepted date, chosen on the validation set (README)
CENTURY_MARGIN = 0.05  # a two-digit year's best reading must beat each other century's by this much (log-probability)
DATE_STEPS = 11  # the steps of a date: 10 characters (YYYY-MM-DD), then eos


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
    def load(cls, name: str = "seq2seq", directory: str | os.PathLike | None = None) -> Translator:
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
        """int64 ``[N, S]`` source ids of the texts as the model reads them
        (:func:`readable`), padded; ValueError for a text it cannot read."""
        rows = []
        for i, text in enumerate(texts):
            problem = self.problem(text)
            if problem is not None:
                raise ValueError(f"text {i + 1} ({text[:20]!r}): {problem}")
            rows.append(SOURCE_VOCAB.encode(readable(text)))
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
    def beam(self, texts: Sequence[str], beam_size: int = 5, n_best: int = 1, alpha: float = 0.6,
             calendar: bool = True) -> list[list[Output]]:
        """Batched beam search; per text, its ``n_best`` outputs, best first. With ``calendar``
        every output is a real date or "" (no date); ``beam_size=1`` keeps one live row."""
        processors = [CalendarDates()] if calendar else []
        out: list[list[Output]] = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start : start + self.chunk]
            state = self.model.init_state(self.encode(part))
            results = beam_search_batch(self.model.step, state, [[self.cfg.bos]] * len(part),
                                        eos_token_id=self.cfg.eos, max_steps=self.max_steps, beam_size=beam_size,
                                        n_best=n_best, alpha=alpha, logits_processors=processors)
            out += self._outputs(state, results, rescore=calendar)
        return out

    @torch.no_grad()
    def outputs(self, texts: Sequence[str], hypotheses: Sequence[Sequence[Hypothesis]]) -> list[list[Output]]:
        """Per text, its ``hypotheses`` (found by any search) as :class:`Output`, each with the
        model's own log-probability, rescored without any constraint or processor (one batch)."""
        return self._outputs(self.model.init_state(self.encode(texts)), hypotheses, rescore=True) if texts else []

    def _outputs(self, state: Any, results: Sequence[Sequence[Hypothesis]], rescore: bool) -> list[list[Output]]:
        """Per source, its hypotheses ``results[i]`` as :class:`Output`; ``state``: the sources'
        initial state, one row each. With ``rescore``, ``model_logprob`` is the unconstrained
        model's own logprob of each output, else the search's."""
        hyps = [h for row in results for h in row]
        model_logprobs = [h.logprob for h in hyps]
        if rescore and hyps:
            rows = [i for i, row in enumerate(results) for _ in row]
            model_logprobs = self._model_logprobs(select_state(state, rows), [h.tokens for h in hyps])
        found = iter(zip(hyps, model_logprobs, strict=True))
        return [[Output(TARGET_VOCAB.decode(h.tokens), h, lp) for h, lp in (next(found) for _ in row)]
                for row in results]

    def _model_logprobs(self, state: Any, tokens: Sequence[Sequence[int]]) -> list[float]:
        """Each row's teacher-forced log-probability of ``tokens[i]`` (eos included if present)
        from ``state``'s row i (an initial state), without any constraint: one pass."""
        lengths = torch.tensor([len(t) for t in tokens])
        width = int(lengths.max())
        target = torch.tensor([list(t) + [self.cfg.pad] * (width - len(t)) for t in tokens])  # --> [N, T]
        inputs = torch.cat([torch.full_like(target[:, :1], self.cfg.bos), target[:, :-1]], dim=1)  # --> [N, T]
        logits = self.model.teacher_forced(state, inputs)  # --> [N, T, V]
        picked = torch.log_softmax(logits.double(), dim=-1).gather(2, target[..., None])[..., 0]  # --> [N, T]
        written = torch.arange(width)[None, :] < lengths[:, None]  # --> [N, T], False at padding
        return torch.where(written, picked, 0.0).sum(dim=1).tolist()

    @torch.no_grad()
    def trace(self, text: str, beam_size: int = 5, n_best: int = 1, alpha: float = 0.6, calendar: bool = True,
              trace_width: int = 1) -> tuple[Any, Any, list[str]]:
        """The search tree of one text: ``(trace, greedy_trace, texts)``, the beam search's
        :class:`~beamsearch.Trace` (as :meth:`beam` runs it), the trace of greedy decoding (one live
        row, under the same constraint) for the overlay, and the beam's n-best texts, best first.
        ValueError if the model cannot read ``text``."""
        from beamsearch import Trace

        problem = self.problem(text)
        if problem is not None:
            raise ValueError(f"cannot read {text[:40]!r}: {problem}")
        processors = [CalendarDates()] if calendar else []
        tree, greedy = Trace(), Trace()
        for trace, width in ((tree, beam_size), (greedy, 1)):  # the beam, then greedy (one live row)
            state = self.model.init_state(self.encode([text]))
            beam_search_batch(self.model.step, state, [[self.cfg.bos]], eos_token_id=self.cfg.eos,
                              max_steps=self.max_steps, beam_size=width, n_best=min(n_best, width), alpha=alpha,
                              logits_processors=processors, trace=trace, trace_width=trace_width)
        return tree, greedy, [TARGET_VOCAB.decode(tree.tokens(int(v))) for v in tree.results(0)]

    def decode(self, texts: Sequence[str], beam_size: int, n_best: int = 1, alpha: float = 0.6,
               calendar: bool = True) -> list[list[Output]]:
        """Beam search; plain greedy decoding for ``beam_size == 1`` and ``n_best == 1`` without the
        calendar."""
        if beam_size == 1 and n_best == 1 and not calendar:
            return [[o] for o in self.greedy(texts)]
        return self.beam(texts, beam_size, n_best, alpha, calendar)

    @staticmethod
    def accepts(output: Output) -> bool:
        """Whether ``output`` is a date the model is confident of: a real date ``YYYY-MM-DD`` (not
        the "no date" answer; checked again here for searches without the calendar constraint), with
        ``model_logprob >= MIN_LOGPROB``."""
        return why_not_a_date(output.text) is None and output.model_logprob >= MIN_LOGPROB

    def verdicts(self, texts: Sequence[str], outputs: Sequence[Sequence[Output] | None],
                 max_steps: Sequence[int] | None = None) -> list[str | None]:
        """:meth:`verdict` of each text on its outputs (searched with ``max_steps[i]`` steps;
        None: the model's own), the :meth:`century_readings` computed ``chunk`` texts at a time."""
        steps = list(max_steps) if max_steps is not None else [None] * len(texts)
        chunks = ((texts[start : start + self.chunk], outputs[start : start + self.chunk])
                  for start in range(0, len(texts), self.chunk))
        readings = [r for chunk in chunks for r in self.century_readings(*chunk)]
        return [self.verdict(text, out, n, r)
                for text, out, n, r in zip(texts, outputs, steps, readings, strict=True)]

    @torch.no_grad()
    def century_readings(self, texts: Sequence[str], outputs: Sequence[Sequence[Output] | None]
                         ) -> list[dict[str, float] | None]:
        """Per text that writes a two-digit year (:func:`~beamsearch.zoo.dates.written_year`) and
        whose best output is a real date: that date in each century of :data:`YEARS` where it is
        a real date, with the model's own log-probability of it (teacher-forced, unconstrained,
        one batch for all): ``{"1810-12-11": -1.106, "1910-12-11": -1.112, "2010-12-11": -1.129}``.
        None for any other text, and where one century alone makes a real date (the calendar
        tells it: February 29 of '00 is 2000)."""
        wanted: list[tuple[int, str]] = []  # (text's position, a reading)
        for i, (text, outs) in enumerate(zip(texts, outputs, strict=True)):
            if not outs or self.problem(text) is not None:
                continue
            year = written_year(readable(text))
            if year is None or len(year) != 2 or why_not_a_date(outs[0].text) is not None:
                continue
            dates = [f"{c}{outs[0].text[2:]}" for c in ("18", "19", "20")]
            dates = [d for d in dates if why_not_a_date(d) is None and _supported(int(d[:4]))]
            wanted += [(i, d) for d in dates] if len(dates) > 1 else []
        out: list[dict[str, float] | None] = [None] * len(texts)
        if wanted:
            row = {i: r for r, i in enumerate(dict.fromkeys(i for i, _ in wanted))}  # position -> source row
            state = self.model.init_state(self.encode([texts[i] for i in row]))
            logprobs = self._model_logprobs(select_state(state, [row[i] for i, _ in wanted]),
                                            [TARGET_VOCAB.encode(d) + [self.cfg.eos] for _, d in wanted])
            for (i, date), logprob in zip(wanted, logprobs, strict=True):
                out[i] = {**(out[i] or {}), date: logprob}
        return out

    def verdict(self, text: str, outputs: Sequence[Output] | None, max_steps: int | None = None,
                readings: dict[str, float] | None = None) -> str | None:
        """None when the best of ``outputs`` (best first; None: ``text`` was not decoded) is a
        date to print for ``text``; otherwise the reason it gets no date, one line naming the text:
        it cannot be read (:meth:`problem`); it writes a year outside :data:`YEARS`
        (:func:`~beamsearch.zoo.dates.written_year`); the output was cut at ``max_steps`` (the
        search's; None: the model's own, room for a date) before a date could end; the best output
        is "no date", not a real date (a search without the calendar), a year outside
        :data:`YEARS`, or a year other than the one ``text`` writes (a two-digit year: other last
        two digits); the model is not confident of it (:meth:`accepts`); or, given its
        :meth:`century_readings`, a two-digit year whose best reading does not beat each other
        century's by :data:`CENTURY_MARGIN`."""
        shown = _shown(text)
        problem = self.problem(text)
        if problem is not None:
            return f"cannot read {shown}: {problem}"
        year = written_year(readable(text))
        if year is not None and len(year) == 4 and not _supported(int(year)):
            return f"no date in {shown}: year {year} is outside {YEARS[0]}-{YEARS[1]}, the years the models read"
        best = outputs[0] if outputs else None
        cut = _cut(best, max_steps)
        if cut is not None:
            return f"no date in {shown}: {cut}"
        if best is None or best.text == "":
            return f"no date in {shown}"
        why = why_not_a_date(best.text)
        if why is not None:
            return f"no date in {shown}: its best reading {best.text} is not a date ({why})"
        if not _supported(int(best.text[:4])):
            return f"no date in {shown}: its best reading {best.text} is outside {YEARS[0]}-{YEARS[1]}"
        if year is not None and not best.text[:4].endswith(year):
            written = year if len(year) == 4 else f"'{year}"
            return f"no date in {shown}: its best reading {best.text} is not in the year it writes ({written})"
        if not self.accepts(best):
            return (f"not confident that {shown} is a date (best reading {best.text}, model logprob "
                    f"{best.model_logprob:.2f} < {MIN_LOGPROB})")
        return _century_unknown(shown, best.text, readings)

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


_SPACED = re.compile(r"(\s*)(\d{1,4}) +(\d{1,2}) +(\d{1,4})(\s*)")  # 1999 12 31, 12 31 1999


def readable(source: str) -> str:
    """``source`` as the models read it (its year read back from that,
    :func:`~beamsearch.zoo.dates.written_year`): a numeric date whose three numbers are separated
    by spaces, not among the forms they were trained on, written in the trained form of its order:
    year first (four digits) with dashes (``"1999 12 31"`` as ``"1999-12-31"``: year, month, day,
    as every year-first form), year last (four digits or two) with slashes (``"12 31 1999"`` as
    ``"12/31/1999"``: month first, or day first when the first number is over 12, as every slashed
    form); any other text as it is."""
    m = _SPACED.fullmatch(source)
    if m is None:
        return source
    lead, a, b, c, tail = m.groups()
    if len(a) == 4 and len(c) <= 2:
        return f"{lead}{a}-{b}-{c}{tail}"
    if len(a) <= 2 and len(c) in (2, 4):
        return f"{lead}{a}/{b}/{c}{tail}"
    return source


def _cut(best: Output | None, max_steps: int | None) -> str | None:
    """Why the search's output is a cut one, or None: ``max_steps`` (None: the model's own) leaves
    no room for a date, or the best hypothesis did not end (the search stopped it at its last step)."""
    if max_steps is not None and max_steps < DATE_STEPS:
        return (f"max_steps={max_steps} cuts every output short of a date (a date takes {DATE_STEPS} steps: "
                "10 characters, then eos)")
    if best is not None and not best.hypothesis.finished:
        steps = max_steps if max_steps is not None else len(best.hypothesis.tokens)
        return f"its best reading {best.text!r} was cut at max_steps={steps} before it ended"
    return None


def _century_unknown(shown: str, best: str, readings: dict[str, float] | None) -> str | None:
    """Why the century of ``best`` (the reading of the text ``shown``, which writes a two-digit
    year) is not told, or None: another century's reading is within :data:`CENTURY_MARGIN` of it
    (``readings``: each reading's model log-probability, :meth:`Translator.century_readings`)."""
    if not readings or best not in readings:
        return None
    others = [logprob for date, logprob in readings.items() if date != best]
    if readings[best] - max(others) >= CENTURY_MARGIN:
        return None
    listed = ", ".join(f"{date} ({logprob:.3f})" for date, logprob in readings.items())
    return (f"no date in {shown}: the century of its two-digit year is not written and the model cannot tell it "
            f"(its readings, with their log-probabilities: {listed}; {best[:4]} is not {CENTURY_MARGIN} above "
            "every other)")


def _supported(year: int) -> bool:
    return YEARS[0] <= year <= YEARS[1]


def _shown(text: str, width: int = 40) -> str:
    """``text`` quoted for a message, cut at ``width`` characters."""
    return repr(text if len(text) <= width else text[:width] + "...")
