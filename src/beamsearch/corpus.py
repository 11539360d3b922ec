"""Corpus decoding: reading a file of inputs, decoding it with refill, writing JSON Lines in input
order, and resuming a killed run (what ``beamsearch decode`` runs; see docs/corpus.md).

Importable with numpy alone: a zoo model (torch) is imported only by :func:`zoo_model`.

The pieces:

- :func:`read_lines` turns the bytes of a file into :class:`Line` values, one per line (LF or
  CRLF), text or JSON Lines; a line that cannot be read carries its ``error`` instead of failing
  the run.
- A :class:`CorpusModel` is what the corpus decoder needs of a model: a step function, a
  ``make_state`` for refill, its ids and limits, and its own text checks.
- :func:`decode_records` decodes lines with :func:`beamsearch._refill.decode_stream` and yields
  one JSON-ready record per line, in the order lines finish.
- :func:`decode_corpus` writes them: appended and flushed to a side file ``OUTPUT.partial`` as
  they finish (a killed run loses only the inputs in flight), then the ordered ``OUTPUT`` at the
  end, atomically (``os.replace``); with ``resume`` the indices already in the side file are
  skipped.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
import zlib
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np

from beamsearch import _validate as check
from beamsearch._refill import decode_stream

__all__ = ["CorpusModel", "Line", "Progress", "decode_corpus", "decode_records", "read_lines", "toy_model",
           "zoo_model"]


@dataclass(frozen=True)
class Line:
    """One input line.

    Attributes:
        index: 0-based line number in the file.
        text: the text to decode (the line, or its JSON field); the raw line, decoded with
            replacement characters, when ``error`` is set.
        error: None, or why the line cannot be decoded (not UTF-8, bad JSON, a missing field).
        max_steps: the line's own ``max_steps`` (JSON Lines), or None.
        prefix: the line's own target ``prefix`` text (JSON Lines), or None.
    """

    index: int
    text: str
    error: str | None = None
    max_steps: int | None = None
    prefix: str | None = None


def read_lines(data: Iterable[bytes], *, jsonl: bool = False, field: str = "text") -> Iterator[Line]:
    """The lines of a binary file as :class:`Line` values, lazily.

    Args:
        data: the file's lines as bytes (a file opened ``"rb"``, or a list of ``bytes``); each line
            ends with ``b"\\n"`` or ``b"\\r\\n"`` (removed), the last one may end without.
        jsonl: each line is a JSON object; its ``field`` is the text, and the optional
            ``max_steps`` (int >= 1) and ``prefix`` (str) are the line's own; other keys are
            left alone (ids, metadata).
        field: the JSON key of the text.

    Yields:
        One :class:`Line` per line; a line that is not UTF-8, not a JSON object, or lacks a string
        ``field`` carries ``error`` (the rest of the file is still read).
    """
    for index, raw in enumerate(data):
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield Line(index, raw.decode("utf-8", errors="replace"), f"line is not UTF-8 (byte {e.start})")
            continue
        yield _parse_json(index, text, field) if jsonl else Line(index, text)


def _parse_json(index: int, text: str, field: str) -> Line:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        return Line(index, text, f"bad JSON: {e.msg} at column {e.colno}")
    if not isinstance(record, dict):
        return Line(index, text, f"a JSON line must be an object; got {type(record).__name__}")
    value = record.get(field)
    if not isinstance(value, str):
        return Line(index, text, f"the JSON object has no string field {field!r}")
    max_steps, prefix = record.get("max_steps"), record.get("prefix")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        return Line(index, value, f"max_steps must be an integer >= 1; got {max_steps!r}")
    if prefix is not None and not isinstance(prefix, str):
        return Line(index, value, f"prefix must be a string; got {prefix!r}")
    return Line(index, value, None, max_steps, prefix)


class CorpusModel(Protocol):
    """What :func:`decode_records` needs of a model.

    Attributes:
        bos, eos: the start token (every prompt is ``[bos]``) and the end token.
        max_steps: the most tokens the model can generate (a line may ask for fewer).
        processors: logits processors for every search (may be empty).
    """

    bos: int
    eos: int
    max_steps: int
    processors: Sequence[Any]

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


def decode_records(model: CorpusModel, lines: Iterable[Line], *, beam: int = 5, n_best: int = 1,
                   alpha: float = 0.6, max_steps: int | None = None, max_rows: int = 320,
                   skip: Callable[[int], bool] = lambda index: False) -> Iterator[dict]:
    """Decode ``lines`` with refill; one record per line, in the order lines finish.

    Args:
        model: a :class:`CorpusModel`.
        lines: :class:`Line` values (read lazily, as there is room in the batch).
        beam, n_best, alpha: beam size, outputs per line, GNMT length-penalty strength.
        max_steps: the most tokens per output (default and upper bound: ``model.max_steps``); a
            line's own ``max_steps`` overrides it, up to ``model.max_steps``.
        max_rows: the most rows (hypotheses) per model call, >= ``beam``.
        skip: lines whose index it accepts are not decoded and get no record (``--resume``).

    Yields:
        ``{"index", "input", "nbest": [{"text", "tokens", "logprob", "score", "finished"}]}``
        per decoded line (n-best best first; ``tokens`` without the start token, the end token
        included iff ``finished``), or ``{"index", "input", "error"}`` for a line that cannot be
        decoded.

    Raises:
        ValueError: a bad ``beam``, ``n_best``, ``alpha``, ``max_steps`` or ``max_rows`` (raised
            by the first ``next()``, before any model call).
    """
    beam, max_rows = check.at_least("beam", beam, 1), check.at_least("max_rows", max_rows, 1)
    limit = model.max_steps
    if max_steps is None:
        max_steps = limit
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= limit:
        raise ValueError(f"max_steps must be an integer in [1, {limit}] (the model's limit); got {max_steps!r}")
    texts: dict[int, str] = {}  # stream position -> text, for inputs in flight
    indices: dict[int, int] = {}  # stream position -> line index
    early: list[dict] = []  # error records of lines refused before the stream

    def items() -> Iterator[dict]:
        position = 0
        for line in lines:
            if skip(line.index):
                continue
            error = line.error or model.problem(line.text) or _line_problem(model, line, limit)
            if error is not None:
                early.append({"index": line.index, "input": line.text, "error": error})
                continue
            item: dict[str, Any] = {"prompt": [model.bos], "source": line.text}
            if line.max_steps is not None:
                item["max_steps"] = line.max_steps
            if line.prefix is not None:
                item["prefix"] = model.tokens(line.prefix)
            indices[position], texts[position] = line.index, line.text
            position += 1
            yield item

    stream = decode_stream(model.step, model.make_state, items(), max_rows=max_rows, min_join=_min_join(max_rows, beam),
                           beam_size=beam, n_best=n_best, alpha=alpha, eos_token_id=model.eos, max_steps=max_steps,
                           logits_processors=list(model.processors))
    for result in stream:
        yield from early
        early.clear()
        index, text = indices.pop(result.index), texts.pop(result.index)
        if result.error is not None:
            yield {"index": index, "input": text, "error": str(result.error)}
            continue
        yield {"index": index, "input": text,
               "nbest": [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob, "score": h.score,
                          "finished": h.finished} for h in result.hypotheses]}
    yield from early


def _min_join(max_rows: int, beam: int) -> int:
    """Inputs that join together: every cohort costs its own scoring and selection per step, so
    new inputs wait until an eighth of the budget is free (seq2seq, 2,000 dates, max_rows 320:
    4.96 s joining one at a time, 2.91 s an eighth; docs/corpus.md)."""
    return max(1, max_rows // beam // 8)


def _line_problem(model: CorpusModel, line: Line, limit: int) -> str | None:
    if line.max_steps is not None and line.max_steps > limit:
        return f"max_steps must be <= {limit} (the model's limit); got {line.max_steps}"
    if line.prefix is not None:
        try:
            model.tokens(line.prefix)
        except ValueError as e:
            return f"prefix: {e}"
    return None


# ---- files: the side file, resume, the ordered output --------------------------------------------


def partial_path(output: str | os.PathLike) -> pathlib.Path:
    """The side file of ``output``: records appended as lines finish (``OUTPUT.partial``)."""
    path = pathlib.Path(output)
    return path.with_name(path.name + ".partial")


def load_partial(path: pathlib.Path) -> dict[int, dict]:
    """The records of a side file by index. A torn last line (a run killed mid-write) is cut off
    the file, so that appending goes on from the last whole record.

    Raises:
        ValueError: a whole line of the file is not a record (not the side file of a run).
    """
    if not path.exists():
        return {}
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        with open(path, "r+b") as f:
            f.truncate(len(whole))
    done: dict[int, dict] = {}
    for number, raw in enumerate(whole.splitlines(), 1):
        try:
            record = json.loads(raw)
            done[int(record["index"])] = record
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path} line {number} is not a record of beamsearch decode; remove the file "
                             "or decode without --resume") from None
    return done


def decode_corpus(model: CorpusModel, lines: Iterable[Line], output: str, *, resume: bool = False,
                  progress: Progress | None = None, **search: Any) -> tuple[int, int]:
    """Decode ``lines`` into ``output`` (JSON Lines in input order, each index once).

    Records are appended and flushed to :func:`partial_path` ``(output)`` as lines finish; at the
    end they are written in input order to ``output`` (a temporary file, then ``os.replace``) and
    the side file is removed. ``output == "-"`` writes to stdout in input order (each record as
    soon as every earlier one is out; no side file, no resume).

    Args:
        model, lines, **search: as for :func:`decode_records` (``beam``, ``n_best``, ``alpha``,
            ``max_steps``, ``max_rows``).
        output: a file path, or ``"-"``.
        resume: skip the indices already in the side file (or, when it is gone, in ``output``
            itself: a finished run); a record must then be for the same input text.
        progress: updated with every record, closed at the end.

    Returns:
        ``(records, errors)``: the lines in the output, and how many of them have ``error``.

    Raises:
        ValueError: ``resume`` with ``output == "-"``; a side file that is not one, or one written
            for another input (a record's ``input`` differs from the line at its index).
    """
    if output == "-":
        if resume:
            raise ValueError("--resume needs an --output file (records of stdout cannot be read back)")
        return _to_stdout(model, lines, progress, search)
    side = partial_path(output)
    done = load_partial(side) if resume else {}
    from_output = resume and not side.exists() and os.path.exists(output)
    if from_output:  # a finished run: its records seed the new side file
        done = load_partial(pathlib.Path(output))
    seen: list[Line] = []

    def checked(lines: Iterable[Line]) -> Iterator[Line]:
        for line in lines:
            old = done.get(line.index)
            if old is not None and old.get("input") != line.text:
                raise ValueError(f"--resume: {side} holds line {line.index + 1} as {old.get('input')!r:.40}, "
                                 f"the input has {line.text!r:.40}; it was written for another input")
            seen.append(line)
            yield line

    with open(side, "ab" if resume else "wb") as f:
        if from_output:
            f.write(b"".join(_encode(r) for r in done.values()))
            f.flush()
        for record in decode_records(model, checked(lines), skip=done.__contains__, **search):
            f.write(_encode(record))
            f.flush()
            done[record["index"]] = record
            if progress is not None:
                progress.update(record)
    if progress is not None:
        progress.close()
    missing = [line.index for line in seen if line.index not in done]
    if missing:
        raise ValueError(f"line {missing[0] + 1} got no record")
    records = [done[line.index] for line in seen]
    temporary = pathlib.Path(str(output) + ".tmp")
    with open(temporary, "wb") as f:
        f.write(b"".join(_encode(r) for r in records))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, output)
    side.unlink()
    return len(records), sum("error" in r for r in records)


def _to_stdout(model: CorpusModel, lines: Iterable[Line], progress: Progress | None,
               search: dict[str, Any]) -> tuple[int, int]:
    ready: dict[int, dict] = {}
    order: list[int] = []  # line indices in input order
    written, errors = 0, 0

    def noted(lines: Iterable[Line]) -> Iterator[Line]:
        for line in lines:
            order.append(line.index)
            yield line

    out = sys.stdout.buffer
    for record in decode_records(model, noted(lines), **search):
        ready[record["index"]] = record
        errors += "error" in record
        if progress is not None:
            progress.update(record)
        while written < len(order) and order[written] in ready:
            out.write(_encode(ready.pop(order[written])))
            written += 1
        out.flush()
    if progress is not None:
        progress.close()
    return written, errors


def _encode(record: dict) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


# ---- progress ---------------------------------------------------------------------------------------


class Progress:
    """A one-line progress report on a text stream (stderr): inputs done, inputs/s, tokens/s, and
    the ETA when the input count is known. Redrawn at most every ``every`` seconds.

    Args:
        total: the number of inputs to decode, or None when unknown (stdin).
        out: the stream to write to.
        every: seconds between redraws.
    """

    def __init__(self, total: int | None, out: IO[str], every: float = 0.5) -> None:
        self.total, self.out, self.every = total, out, every
        self.inputs = self.tokens = 0
        self.start = self.shown = time.monotonic()

    def update(self, record: dict) -> None:
        """Count one record (its best output's tokens) and redraw when due."""
        self.inputs += 1
        self.tokens += len(record["nbest"][0]["tokens"]) if record.get("nbest") else 0
        now = time.monotonic()
        if now - self.shown >= self.every:
            self.shown = now
            self.out.write("\r" + self.line(now))
            self.out.flush()

    def line(self, now: float) -> str:
        """The report: ``done[/total] inputs, R inputs/s, T tokens/s[, ETA m:ss]``."""
        elapsed = max(now - self.start, 1e-9)
        rate = self.inputs / elapsed
        done = f"{self.inputs}/{self.total}" if self.total is not None else f"{self.inputs}"
        text = f"{done} inputs, {rate:.1f} inputs/s, {self.tokens / elapsed:.1f} tokens/s"
        if self.total is not None and rate > 0:
            left = max(self.total - self.inputs, 0) / rate
            text += f", ETA {int(left // 60)}:{int(left % 60):02d}"
        return text

    def close(self) -> None:
        """The final report, and a newline."""
        self.out.write("\r" + self.line(time.monotonic()) + "\n")
        self.out.flush()


# ---- models -------------------------------------------------------------------------------------------


class _ZooModel:
    """A zoo dates model (:class:`beamsearch.zoo.translator.Translator`) as a :class:`CorpusModel`;
    the searches are those of ``Translator.beam`` (calendar constraint by default)."""

    def __init__(self, translator: Any, calendar: bool) -> None:
        import torch

        from beamsearch.zoo.calendar import CalendarDates
        from beamsearch.zoo.dates import TARGET_VOCAB

        self._torch, self._translator, self._vocab = torch, translator, TARGET_VOCAB
        self.bos, self.eos = translator.cfg.bos, translator.cfg.eos
        self.max_steps = translator.max_steps
        self.processors = [CalendarDates()] if calendar else []

    def problem(self, text: str) -> str | None:
        return self._translator.problem(text)

    def make_state(self, items: list[dict]) -> Any:
        with self._torch.no_grad():
            return self._translator.model.init_state(self._translator.encode([i["source"] for i in items]))

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        with self._torch.no_grad():
            return self._translator.model.step(state, y_prev)

    def tokens(self, text: str) -> list[int]:
        unknown = [c for c in text if c not in self._vocab.stoi]
        if unknown:
            raise ValueError(f"characters outside the target vocabulary: {''.join(unknown)!r}")
        return self._vocab.encode(text)

    def text(self, tokens: Sequence[int]) -> str:
        return self._vocab.decode(list(tokens))


def trace_line(model: CorpusModel, text: str, *, beam: int = 5, n_best: int = 1, alpha: float = 0.6,
               max_steps: int | None = None, trace_width: int = 1) -> tuple[Any, Any]:
    """The search tree of one line, as :func:`decode_records` searches it: ``(trace, greedy)``,
    the beam search's :class:`~beamsearch.Trace` and greedy's (one live row, the same processors)
    for the overlay of :func:`beamsearch.viz.to_html`. ValueError if the model cannot read ``text``."""
    from beamsearch import Trace, beam_search_batch

    problem = model.problem(text)
    if problem is not None:
        raise ValueError(f"cannot read {text[:40]!r}: {problem}")
    trees = []
    for width in (beam, 1):
        tree = Trace()
        beam_search_batch(model.step, model.make_state([{"source": text}]), [[model.bos]], eos_token_id=model.eos,
                          max_steps=max_steps or model.max_steps, beam_size=width, n_best=min(n_best, width),
                          alpha=alpha, logits_processors=list(model.processors), trace=tree, trace_width=trace_width)
        trees.append(tree)
    return trees[0], trees[1]


class TokenLabels:
    """Token ids as the model's text, for :func:`beamsearch.viz.to_html`'s ``vocab`` (an object
    with ``decode``)."""

    def __init__(self, model: CorpusModel) -> None:
        self.model = model

    def decode(self, tokens: Sequence[int]) -> str:
        return self.model.text(tokens)


def zoo_model(name: str, directory: str | os.PathLike | None = None, *, calendar: bool = True) -> CorpusModel:
    """A zoo model as a :class:`CorpusModel` (needs the ``zoo`` extra: torch, safetensors).

    Args:
        name: ``"seq2seq"`` or ``"transformer"``.
        directory: a checkpoint folder (``beamsearch train --out DIR``); default: the shipped one.
        calendar: constrain outputs to real dates (as ``beamsearch translate`` does).
    """
    from beamsearch.zoo.translator import Translator

    return _ZooModel(Translator.load(name, directory), calendar)


class _ToyModel:
    """A numpy model for tests of the corpus machinery (fast to load, no torch): the source text's
    CRC-32 picks a row of a fixed random table at every step, so outputs differ between texts.
    Target tokens: 0 pad, 1 bos, 2 eos, 3.. the letters ``a``-``f``. Reads printable ASCII, at most
    ``max_source`` characters. ``delay`` seconds of sleep per step make a run slow enough to kill."""

    LETTERS = "abcdef"
    bos, eos, max_steps, max_source = 1, 2, 12, 40
    processors: Sequence[Any] = ()

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        rng = np.random.default_rng(12)
        self.table = rng.normal(0.0, 1.5, size=(997, 3 + len(self.LETTERS)))
        self.table[:, :2] = -np.inf  # never pad or bos

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
    return _ToyModel(delay)
