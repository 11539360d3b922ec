"""Corpus decoding: reading a file of inputs, decoding it with refill, writing JSON Lines in input
order, and resuming a killed run (what ``beamsearch decode`` runs; see docs/corpus.md).

Importable with numpy alone: a zoo model (torch) is imported only by :func:`zoo_model`.

The pieces:

- :func:`read_lines` turns the bytes of a file into :class:`Line` values, one per line (LF or
  CRLF), text or JSON Lines; a line that cannot be read carries its ``error`` instead of failing
  the run.
- A :class:`CorpusModel` is what the corpus decoder needs of a model: a step function, a
  ``make_state`` for refill, its ids and limits, and its own text checks.
- :func:`decode_records` decodes lines with :func:`beamsearch.refill.decode_stream` and yields
  one JSON-ready record per line, in the order lines finish.
- :func:`decode_corpus` writes them, holding the output's lock: appended and flushed to a side
  file ``OUTPUT.partial`` as they finish (a killed run loses only the inputs in flight), then the
  ordered ``OUTPUT`` at the end, copied record by record, atomically (``os.replace``); with
  ``resume`` the side file's options and input are checked first, then the indices it holds are
  skipped (the files: :mod:`beamsearch._sidefile`).
"""

from __future__ import annotations

import codecs
import collections
import json
import math
import os
import pathlib
import re
import reprlib
import sys
import time
import zlib
from array import array
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.config import DecodingConfig, controls_of
from beamsearch.core.mode import Mode
from beamsearch.modes import registry
from beamsearch.refill import Decoded, decode_stream, per_input
from beamsearch._sidefile import (LONE_SURROGATE, Fingerprint, Interrupted, OutputError, SideFile, check_output,
                                  encode, interrupts_held, json_object, line_name, output_lock, sibling, text_crc)

__all__ = ["CorpusModel", "LengthRule", "Line", "Progress", "decode_corpus", "decode_records", "hf_model",
           "read_lines", "toy_model", "zoo_model"]


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
        constraints: the line's own constraints (JSON Lines; mode ``constrained``), or None: a
            tuple whose items are a target text (a phrase the output must contain) or a tuple of
            texts (one of them must appear).
    """

    index: int
    text: str
    error: str | None = None
    max_steps: int | None = None
    prefix: str | None = None
    constraints: tuple[str | tuple[str, ...], ...] | None = None

    OWN = ("constraints",)
    """The search options a line may give for itself (beside ``max_steps`` and ``prefix``), by
    their option names."""

    def own(self, name: str) -> Any:
        """The line's own value of option ``name`` (one of :attr:`OWN`), or None."""
        if name not in self.OWN:
            raise KeyError(name)
        return self.constraints


MAX_JSON_DEPTH = 100
"""The deepest nesting of arrays and objects a JSON line may have (deeper: that line's error record)."""

MAX_JSON_DIGITS = 4300
"""The most digits of an integer in a JSON line (Python's own limit for int from text)."""


def read_lines(data: Iterable[bytes], *, jsonl: bool = False, field: str = "text") -> Iterator[Line]:
    """The lines of a binary file as :class:`Line` values, lazily.

    Args:
        data: the file's lines as bytes (a file opened ``"rb"``, or a list of ``bytes``); each line
            ends with ``b"\\n"`` or ``b"\\r\\n"`` (removed), the last one may end without; a UTF-8
            byte order mark at the start of the first line is not part of it.
        jsonl: each line is a JSON object; its ``field`` is the text, and the optional
            ``max_steps`` (int >= 1), ``prefix`` (str) and ``constraints`` (a list of texts, or of
            lists of texts for alternatives) are the line's own; other keys are left alone (ids,
            metadata).
        field: the JSON key of the text.

    Yields:
        One :class:`Line` per line; a line that is not UTF-8, not a JSON object (bad JSON, nested
        deeper than :data:`MAX_JSON_DEPTH`, an integer of more than :data:`MAX_JSON_DIGITS`
        digits), lacks a string ``field``, or has a lone surrogate (a ``"\\ud800"`` escape) in a
        text it uses carries ``error`` (the rest of the file is still read).
    """
    for index, raw in enumerate(data):
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        if index == 0 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield Line(index, raw.decode("utf-8", errors="replace"), f"line is not UTF-8 (byte {e.start})")
            continue
        yield _parse_json(index, text, field) if jsonl else Line(index, text)


def _parse_json(index: int, text: str, field: str) -> Line:
    record, error = _json_line(text)
    if error is not None:
        return Line(index, text, error)
    if not isinstance(record, dict):
        return Line(index, text, f"a JSON line must be an object; got {type(record).__name__}")
    value = record.get(field)
    if not isinstance(value, str):
        return Line(index, text, f"the JSON object has no string field {field!r}")
    max_steps, prefix = record.get("max_steps"), record.get("prefix")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        return Line(index, value, f"max_steps must be an integer >= 1; got {_shown(max_steps)}")
    if prefix is not None and not isinstance(prefix, str):
        return Line(index, value, f"prefix must be a string; got {_shown(prefix)}")
    constraints = record.get("constraints")
    if constraints is not None:
        constraints = _constraint_texts(constraints)
        if isinstance(constraints, str):
            return Line(index, value, constraints)
    for name, texts in ((field, [value]), ("prefix", [prefix] if prefix else []), ("constraints", _flat(constraints))):
        error = _lone_surrogate(name, texts)
        if error is not None:
            return Line(index, value, error)
    return Line(index, value, None, max_steps, prefix, constraints)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _json_line(text: str) -> tuple[Any, str | None]:
    """``(json.loads(text), None)``, or ``(None, the error)``: bad JSON, too deep, an integer too long."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth(text) > MAX_JSON_DEPTH:
        return None, f"bad JSON: nested deeper than {MAX_JSON_DEPTH} arrays and objects"
    try:
        return json.loads(text, parse_int=_json_int), None
    except json.JSONDecodeError as e:
        return None, f"bad JSON: {e.msg} at column {e.colno}"
    except _LongInteger as e:
        return None, f"bad JSON: an integer of {e} digits (at most {MAX_JSON_DIGITS})"
    except RecursionError:  # belt and braces: _depth refuses it first
        return None, "bad JSON: nested too deeply"


class _LongInteger(ValueError):
    pass


def _json_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_JSON_DIGITS:
        raise _LongInteger(len(digits.lstrip("-")))
    return int(digits)


def _depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` outside JSON strings."""
    depth = deepest = 0
    for c in re.findall(r"[\[\]{}]", _JSON_STRING.sub("", text)):
        depth = depth + 1 if c in "[{" else depth - 1
        deepest = max(deepest, depth)
    return deepest


def _shown(value: Any) -> str:
    """A JSON value for an error message: at most 80 characters, any depth."""
    return _REPR.repr(value)[:80]


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 60


def _lone_surrogate(name: str, texts: Iterable[str]) -> str | None:
    """The error of a text holding a lone surrogate (a JSON ``"\\ud800"`` escape without its pair,
    not a character of any text: no model can read it, UTF-8 cannot write it), or None."""
    for text in texts:
        found = LONE_SURROGATE.search(text)
        if found is not None:
            return (f"{name} has a lone surrogate (\\u{ord(found.group()):04x} at character {found.start()}), "
                    "which is not a character of any text")
    return None


def _flat(constraints: tuple[str | tuple[str, ...], ...] | None) -> list[str]:
    return [t for c in constraints or () for t in ((c,) if isinstance(c, str) else c)]


def _constraint_texts(value: Any) -> tuple[str | tuple[str, ...], ...] | str:
    """A JSON ``constraints`` value as a tuple of texts and tuples of texts, or the error text."""
    def phrase(x: Any) -> bool:
        return isinstance(x, str) and bool(x)

    if isinstance(value, list) and all(phrase(c) or (isinstance(c, list) and c and all(map(phrase, c)))
                                       for c in value):
        return tuple(c if isinstance(c, str) else tuple(c) for c in value)
    return ("constraints must be a list whose items are non-empty texts or non-empty lists of them; "
            f"got {_shown(value)}")


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

    # Optional: ``source_length(text) -> int``, the length ``--max-steps A*len+B`` reads (tokens of
    # a tokenizer; default ``len(text)``, characters); ``prompt(text) -> list[int]``, the search's
    # prompt (a causal LM's tokens of the text; default ``[bos]``); ``refill: bool`` (default
    # True): False when the model's states of different inputs cannot be joined with
    # ``concat_state``, so inputs are decoded in fixed batches of at most ``max_rows`` rows;
    # ``verdicts(texts, hypotheses) -> list[str | None]``: per decoded line (its text and its
    # hypotheses, best first), None to keep its outputs or why it gets none (its record is then
    # ``{"index", "input", "error": why}``); called on up to ``max_rows // rows`` finished lines at
    # a time (the zoo models: ``Translator.verdict``, what ``beamsearch translate`` prints).


@dataclass(frozen=True)
class LengthRule:
    """``max_steps`` per line from its source length: ``floor(a * length + b)``, capped at the
    model's limit (``--max-steps A*len+B``).

    Attributes:
        a: steps per source unit (>= 0); ``b``: steps added (may be negative).
    """

    a: float
    b: float

    def steps(self, length: int) -> int:
        """``floor(a * length + b)``."""
        return math.floor(self.a * length + self.b)

    @staticmethod
    def parse(text: str) -> int | LengthRule:
        """``"N"`` (an int), or ``"A*len+B"`` / ``"A*len-B"`` / ``"A*len"`` / ``"len+B"`` (a rule).

        Raises:
            ValueError: anything else, naming ``max_steps`` and the text.
        """
        t = text.replace(" ", "")
        if re.fullmatch(r"\d+", t):
            return int(t)
        m = re.fullmatch(r"(?:(\d+(?:\.\d*)?|\.\d+)\*)?len(?:([+-])(\d+(?:\.\d*)?|\.\d+))?", t)
        if m is None:
            raise ValueError(f"max_steps must be an integer or A*len+B (e.g. 2*len+10); got {text!r}")
        a = float(m.group(1)) if m.group(1) is not None else 1.0
        b = float(m.group(3)) * (-1 if m.group(2) == "-" else 1) if m.group(3) is not None else 0.0
        return LengthRule(a, b)


NO_OUTPUT = ("no output could be produced: every continuation has probability 0 under the model and the "
             "search's rules (the prefix, constraints, no-repeat n-grams, minimum length)")
"""The error of a line whose search ends with no output at all."""

MODES = tuple(registry.MODES)
"""The search modes of :func:`decode_records`: the registered ones (:mod:`beamsearch.modes.registry`)."""


def decode_records(model: CorpusModel, lines: Iterable[Line], *, mode: str = "beam", max_rows: int = 320,
                   max_tokens: int | None = None, skip: Callable[[int], bool] = lambda index: False,
                   **options: Any) -> Iterator[dict]:
    """Decode ``lines`` with a registered search mode; one record per line, in the order lines finish.

    Args:
        model: a :class:`CorpusModel`.
        lines: :class:`Line` values (read lazily, as there is room in the batch).
        mode: a registered mode (:mod:`beamsearch.modes.registry`): ``"beam"``
            (:func:`~beamsearch.beam_search_batch`), ``"greedy"`` (one row per line, what
            ``generate`` does for ``num_beams=1``; its ``alpha`` defaults to 0: the score is the
            logprob), ``"constrained"`` (``constraints``, or each line's own, and ``ordered``),
            ``"diverse"`` (``num_groups``, ``diversity_penalty``), ``"stochastic"`` (``k``,
            ``seed``: a record holds the ``k`` samples; line i of the stream gets the noise of
            ``stochastic_beam_search(all lines, seed=seed)``'s input i), ``"exact"``
            (:func:`~beamsearch.exact_search`: ``node_budget``, ``seed_beam``; the lines are
            decoded in fixed batches of ``max_rows // rows``, ``max_rows`` rows per model call;
            each record also has ``proven`` and ``expanded``). Modes with a plan decode with
            refill (:func:`beamsearch.refill.decode_stream`), the others in fixed batches.
        max_rows: the most rows (hypotheses) per model call, >= the rows of one line (the mode's:
            ``beam_size``, ``k``, ...).
        max_tokens: None, or the most decoder tokens the rows of one call may hold, padding
            included: lines join only when (rows in flight + theirs) x (the widest prompt +
            max_steps among them) fits (:func:`beamsearch.refill.decode_stream`); a line whose
            own rows need more gets an error record. Not for a mode without refill (exact).
        skip: lines whose index it accepts are not decoded and get no record (``--resume``).
        **options: the search's options by their library names: the fields of
            :class:`~beamsearch.core.config.DecodingConfig` that ``beamsearch decode`` offers
            (``beam_size``, ``n_best``, ``length_penalty``, ``alpha``, ``no_repeat_ngram_size``,
            ``min_new_tokens``, ``temperature``, ``top_k``, ``stop_sequences``,
            ``return_token_logprobs``, ``max_steps``) and the mode's own options (its options
            dataclass); one not given takes its default there (the mode's own default where it has
            one). The model gives the rest (eos, processors, the prompt). ``stop_sequences`` and
            ``constraints`` are target texts, each through ``model.tokens`` (a constraint that is
            a list of texts: one of them). ``max_steps``: the most tokens per output (default and
            upper bound: ``model.max_steps``), or a :class:`LengthRule` (or its text, ``A*len+B``):
            per line ``floor(a * source length + b)`` capped at ``model.max_steps`` (the source
            length is ``model.source_length(text)``, else ``len(text)``; a line where it is < 1
            gets an error record); a line's own ``max_steps`` overrides both. An option of
            another mode, or one this mode does not take, is an error naming it.

    Yields:
        ``{"index", "input", "nbest": [{"text", "tokens", "logprob", "score", "finished"[,
        "token_logprobs"]}]}`` per decoded line (best first; ``tokens`` without the start token,
        the end token included iff ``finished``), or ``{"index", "input", "error"}`` for a line
        that cannot be decoded.

    Raises:
        ValueError / TypeError: a bad keyword (named, with its value), raised by the first
            ``next()``, before any model call.
    """
    limit = model.max_steps
    spec = registry.mode(mode)
    search = search_keywords(model, spec, options)
    max_steps = search.pop("length_rule", None) or search["max_steps"]
    line_options = {name: search.pop(name) for name in _line_options(spec)}  # for lines without their own
    token_logprobs = bool(search.get("return_token_logprobs", False))
    reported = spec.report is not None  # a mode whose records carry its report (exact: proven, expanded)
    rows = spec.rows(search)  # the search checks it (a bad beam size is its error): 1 until then
    rows = rows if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1 else 1
    max_rows = check.at_least("max_rows", max_rows, 1)
    prompt = _prompt_of(model)
    judge = getattr(model, "verdicts", None)
    judged = max(1, max_rows // rows) if judge is not None else 1  # finished lines judged together
    # a model without refill (its states cannot be joined) decodes in fixed batches: inputs join
    # only when nothing is in flight
    min_join = _min_join(max_rows, rows) if getattr(model, "refill", True) else max(1, max_rows // rows)
    texts: dict[int, str] = {}  # stream position -> text, for inputs in flight
    indices: dict[int, int] = {}  # stream position -> line index
    early: list[dict] = []  # error records of lines refused before the stream

    def stream_item(line: Line) -> dict | str:
        """The stream item of ``line``, or why it cannot be decoded."""
        error = line.error or model.problem(line.text) or _line_problem(model, line, limit, spec)
        steps = None if error is not None else line_max_steps(model, line, max_steps)
        if error is not None or isinstance(steps, str):
            return error or steps
        fields: dict[str, Any] = {"prompt": prompt(line.text), "source": line.text}
        if steps != search["max_steps"]:
            fields["max_steps"] = steps
        if line.prefix is not None:
            fields["prefix"] = model.tokens(line.prefix)
        for name, every_line in line_options.items():
            own = line.own(name)
            fields[name] = every_line if own is None else _texts_ids(model, own, name)
        return fields

    def items() -> Iterator[dict]:
        position = 0
        for line in lines:
            if skip(line.index):
                continue
            try:
                fields = stream_item(line)
            except Exception as e:  # the model's own checks (problem, tokens, prompt) raised: this line alone fails
                fields = f"the model cannot read this line: {type(e).__name__}: {e}"
            if isinstance(fields, str):
                early.append({"index": line.index, "input": line.text, "error": fields})
                continue
            indices[position], texts[position] = line.index, line.text
            position += 1
            yield fields

    if spec.plan is None:  # a mode without refill: fixed batches of its batch runner
        if max_tokens is not None:
            raise ValueError(f"max_tokens does not apply to mode {mode!r} (it decodes in fixed batches of max_rows "
                             f"rows per call); got max_tokens={max_tokens!r}")
        spec.batch(model.step, None, [], max_rows, **search)  # checks the keywords; no model call
        if max_rows < rows:
            raise ValueError(f"max_rows={max_rows} is smaller than the rows of one line ({rows}); raise max_rows")
        results: Iterable[Decoded] = _batch_results(model, spec, items(), search, max(1, max_rows // rows), max_rows)
    else:
        results = decode_stream(model.step, model.make_state, items(), max_rows=max_rows, max_tokens=max_tokens,
                                min_join=min_join, mode=mode, **search)
    finished: list[Decoded] = []
    for result in results:
        yield from early
        early.clear()
        finished.append(result)
        if len(finished) == judged:
            yield from _records(model, finished, [(indices.pop(r.index), texts.pop(r.index)) for r in finished],
                                judge, token_logprobs, reported)
            finished = []
    yield from _records(model, finished, [(indices.pop(r.index), texts.pop(r.index)) for r in finished], judge,
                        token_logprobs, reported)
    yield from early


def _records(model: CorpusModel, results: list[Decoded], lines: list[tuple[int, str]],
             judge: Callable[[list[str], list[list[Any]]], list[str | None]] | None,
             token_logprobs: bool, reported: bool) -> list[dict]:
    """The records of ``results``, ``lines`` their (line index, text); a decoded line that
    ``judge`` (the model's ``verdicts``) gives a reason gets an error record with it."""
    decoded = [i for i, r in enumerate(results) if r.error is None and r.hypotheses]
    reasons = {}
    if judge is not None and decoded:
        reasons = dict(zip(decoded, judge([lines[i][1] for i in decoded], [results[i].hypotheses for i in decoded])))
    records = []
    for i, ((index, text), result) in enumerate(zip(lines, results)):
        error = str(result.error) if result.error is not None else reasons.get(i)
        if error is None and not result.hypotheses:
            error = NO_OUTPUT
        if error is not None:
            records.append({"index": index, "input": text, "error": error})
            continue
        records.append({"index": index, "input": text,
                        "nbest": [_output(model, h, token_logprobs) for h in result.hypotheses],
                        **(result.info if reported else {})})
    return records


def _batch_results(model: CorpusModel, spec: Mode, items: Iterable[dict], search: dict[str, Any], lines: int,
                   rows: int) -> Iterator[Decoded]:
    """A mode without refill (exact): its batch runner over ``lines`` items at a time (their
    stream positions counted from 0), ``rows`` rows per model call, each input's ``info`` its
    report. A batch that raises a ``ValueError`` / ``TypeError`` (an input's token id outside the
    model's vocabulary, found at its first call) is decoded again one item at a time, so only the
    bad items get the error; when every one of them fails, the error is the model's, not theirs,
    and is raised."""

    def run(batch: list[dict]) -> Any:
        return spec.batch(model.step, model.make_state(batch), [i["prompt"] for i in batch], rows,
                          **per_input(search, batch))

    def decoded(batch: list[dict], start: int) -> Iterator[Decoded]:
        try:
            found = run(batch)
        except (ValueError, TypeError) as error:
            if len(batch) == 1:
                yield Decoded(start, [], error)
                return
            alone = [d for j, item in enumerate(batch) for d in decoded([item], start + j)]
            if all(d.error is not None for d in alone):
                raise
            yield from alone
            return
        for j, hyps in enumerate(found):
            yield Decoded(start + j, hyps, None, spec.report(found, j) if spec.report is not None else {})

    batch: list[dict] = []
    position = 0
    for item in items:
        batch.append(item)
        if len(batch) == lines:
            yield from decoded(batch, position)
            position, batch = position + len(batch), []
    if batch:
        yield from decoded(batch, position)


def _output(model: CorpusModel, h: Any, token_logprobs: bool) -> dict:
    out = {"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob, "score": h.score,
           "finished": h.finished}
    if token_logprobs:
        out["token_logprobs"] = h.token_logprobs
    return out


def search_keywords(model: CorpusModel, spec: Mode, options: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``spec``'s search for ``options`` (see :func:`decode_records`): the options
    given, the defaults of those not given that the mode takes (the mode's own default first), the
    model's eos and processors, target texts as token ids. Checks what the search does not check
    itself: the names (an unknown one, another mode's option), the mode's required options,
    ``max_steps`` against the model's limit, the texts. ``length_rule``: a :class:`LengthRule`
    ``max_steps``, where one is given (``max_steps`` is then the model's limit)."""
    owners = corpus_options()
    for name, value in options.items():
        if name not in owners:
            raise TypeError(f"decode_records() got an unexpected keyword argument {name!r}")
        if owners[name] and owners[name] != spec.name:
            raise ValueError(f"{name} is an option of mode {owners[name]!r}, not of mode {spec.name!r}; "
                             f"got {name}={value!r}")
    steps = _max_steps(options.get("max_steps"), model.max_steps)
    search: dict[str, Any] = {"eos_token_id": model.eos, "logits_processors": list(model.processors),
                              "max_steps": steps if isinstance(steps, int) else model.max_steps}
    if isinstance(steps, LengthRule):
        search["length_rule"] = steps
    for name, (default, c) in controls_of(DecodingConfig).items():
        if c.cli and name != "max_steps" and (name in options or spec.takes(name)):
            search[name] = options.get(name, spec.defaults.get(name, default))
    for name, (default, c) in spec.own.items():
        search[name] = options.get(name, default)
        if c.required and search[name] is None:
            needed = [n for n, (_, o) in spec.own.items() if o.required]
            raise ValueError(f"mode {spec.name!r} needs {' and '.join(needed)}; got "
                             + ", ".join(f"{n}={options.get(n)!r}" for n in needed))
    for name, (_, c) in {**controls_of(DecodingConfig), **spec.own}.items():
        if c.texts and name in search:
            search[name] = _texts_ids(model, search[name], name)
    return search


def corpus_options() -> dict[str, str]:
    """The options :func:`decode_records` takes by name -> the mode that owns it ("" for the
    shared controls): the fields of :class:`~beamsearch.core.config.DecodingConfig` the command
    line offers, and every registered mode's own options."""
    out = {name: "" for name, (_, c) in controls_of(DecodingConfig).items() if c.cli}
    for spec in registry.MODES.values():
        out.update({name: spec.name for name in spec.own})
    return out


def _line_options(spec: Mode) -> list[str]:
    """The options of ``spec`` that a line may give for itself (its JSON field of that name);
    the stream's value is each other line's."""
    return [name for name in spec.per_input if name not in spec.stream_only and name in Line.OWN]


def _max_steps(value: Any, limit: int) -> int | LengthRule:
    """``max_steps``: None (the model's limit), an int in ``[1, limit]``, or a :class:`LengthRule`
    (or its text)."""
    if value is None:
        return limit
    if isinstance(value, str):
        value = LengthRule.parse(value)
    if isinstance(value, LengthRule):
        if not (math.isfinite(value.a) and value.a >= 0 and math.isfinite(value.b)):
            raise ValueError(f"max_steps: A*len+B needs a finite A >= 0 and a finite B; got {value}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise ValueError(f"max_steps must be an integer in [1, {limit}] (the model's limit) or a LengthRule; "
                         f"got {value!r}")
    return value


def line_max_steps(model: CorpusModel, line: Line, max_steps: int | LengthRule | None) -> int | str:
    """The ``max_steps`` of ``line``: its own, else ``max_steps`` (a :class:`LengthRule` applied to
    its source length, capped at ``model.max_steps``), else the model's limit; or the error text
    when a rule gives less than 1."""
    if line.max_steps is not None:
        return line.max_steps
    if max_steps is None:
        return model.max_steps
    if isinstance(max_steps, int):
        return max_steps
    length = getattr(model, "source_length", len)(line.text)
    steps = max_steps.steps(length)
    if steps < 1:
        return (f"max_steps {max_steps.a:g}*len{max_steps.b:+g} is {steps} for this line (length {length}); "
                "it must be >= 1")
    return min(steps, model.max_steps)


def _min_join(max_rows: int, rows: int) -> int:
    """Inputs that join together: new inputs wait until half the budget is free. Every cohort
    costs its own scoring and selection per step, and rows that join together share a length (a
    causal LM's cache is padded to its oldest row), so joining in larger waves is cheaper per
    input (one thread, bench_corpus.py's models, refill over fixed batches: GPT-2 via hf: 0.72x
    joining an eighth at a time, 0.83x half; the dates models about the same either way,
    1.01-1.07x)."""
    return max(1, max_rows // rows // 2)


def _line_problem(model: CorpusModel, line: Line, limit: int, spec: Mode) -> str | None:
    if line.max_steps is not None and line.max_steps > limit:
        return f"max_steps must be <= {limit} (the model's limit); got {_shown(line.max_steps)}"
    if line.prefix is not None:
        try:
            model.tokens(line.prefix)
        except ValueError as e:
            return f"prefix: {e}"
    for name in Line.OWN:
        own = line.own(name)
        if own is None:
            continue
        if name not in _line_options(spec):
            owner = corpus_options().get(name) or "constrained"
            return f"{name} apply to mode {owner!r}; got mode {spec.name!r}"
        try:
            _texts_ids(model, own, name)
        except ValueError as e:
            return str(e)
    return None


def _texts_ids(model: CorpusModel, texts: Sequence[str | Sequence[str]], name: str) -> list[Any]:
    """Target texts (option ``name``) as token ids: a text is a phrase, a list of texts an
    :class:`AnyOf` (a constraint that one of them meets)."""
    from beamsearch import AnyOf

    def ids(text: Any) -> list[int]:
        if not isinstance(text, str) or not text:
            raise ValueError(f"{name} must be non-empty texts (or lists of them); got {text!r}")
        try:
            return model.tokens(text)
        except ValueError as e:
            raise ValueError(f"{name}: {text!r}: {e}") from None

    if isinstance(texts, str):
        raise ValueError(f"{name} must be a list of texts, not one text; got {texts!r}")
    return [ids(c) if isinstance(c, str) else AnyOf(*(ids(t) for t in c)) for c in texts]


# ---- files: the lock, the side file, resume, the ordered output ----------------------------------


def partial_path(output: str | os.PathLike) -> pathlib.Path:
    """The side file of ``output``: records appended as lines finish (``OUTPUT.partial``)."""
    return sibling(output, ".partial")


def load_partial(path: pathlib.Path) -> dict[int, dict]:
    """The records of a side file by index ({} when there is none); the file is not changed.

    Raises:
        OutputError (a ValueError): the file is not a side file of this format, or is damaged (a
            whole line that is not a record).
    """
    if not path.exists():
        return {}
    return {index: json.loads(raw) for index, raw in SideFile.read(path).records()}


def decode_corpus(model: CorpusModel, lines: Iterable[Line], output: str | os.PathLike, *, resume: bool = False,
                  progress: Progress | None = None, identity: dict[str, Any] | None = None,
                  **search: Any) -> tuple[int, int]:
    """Decode ``lines`` into ``output`` (JSON Lines in input order, each index once).

    One writer at a time: the run holds an exclusive lock on ``OUTPUT.lock``, and another run on
    the same output is refused at once, naming its pid and host. Records are appended and flushed
    to :func:`partial_path` ``(output)`` as lines finish, after a header holding the run's options
    and with checkpoints of the input read so far; at the end they are copied in input order to
    ``output`` (a temporary file, then ``os.replace``; one record in memory at a time) and the
    side file is removed. ``output == "-"`` writes to stdout in input order (each record as soon
    as every earlier one is out; no lock, no side file, no resume).

    Args:
        model, lines, **search: as for :func:`decode_records` (``mode``, ``max_rows``, the
            search's options by name: ``beam_size``, ``n_best``, ``alpha``, ``max_steps``, ...).
        output: a file path, or ``"-"``.
        resume: continue from the side file: its options must be this run's (every keyword that
            changes a record; not ``max_rows``), and the first lines of ``lines``, as many as its
            last checkpoint covers, those it was written for (their SHA-256, and each record's
            input text); both are checked before anything is written. Without a side file, a
            finished ``output`` must hold exactly the records of ``lines`` (nothing is decoded);
            with neither, the run starts afresh.
        progress: updated with every record, closed at the end.
        identity: JSON values naming what else the records depend on that ``model`` does not say
            (``beamsearch decode``: the model's spec and files, how the input is read), stored
            with the options. Default: the model's class.

    Returns:
        ``(records, errors)``: the lines in the output, and how many of them have ``error``.

    Raises:
        OutputError (a ValueError): ``output`` is a folder or in a folder that does not exist;
            another run holds it; its side file exists and ``resume`` is False; ``resume`` is
            refused (other options, another input, a damaged side file). Nothing is written then.
        Interrupted (a KeyboardInterrupt): SIGINT; the side file ends with its last whole record.
        ValueError / TypeError: a bad search keyword (before any file is touched); ``resume``
            with ``output == "-"``.
    """
    if output == "-":
        if resume:
            raise ValueError("--resume needs an --output file (records of stdout cannot be read back)")
        return _to_stdout(model, lines, progress, search)
    output = os.fspath(output)
    check_output(output)
    next(decode_records(model, [], **search), None)  # the keywords, before any file is touched
    options = _run_options(model, search, identity)
    with output_lock(output):
        return _decode_file(model, iter(lines), output, resume, progress, options, search)


def _decode_file(model: CorpusModel, lines: Iterator[Line], output: str, resume: bool, progress: Progress | None,
                 options: dict[str, Any], search: dict[str, Any]) -> tuple[int, int]:
    """:func:`decode_corpus` to a file, its lock held."""
    path = partial_path(output)
    fingerprint, order = Fingerprint(), array("q")  # order: the line indices in input order
    if path.exists() and not resume:
        raise OutputError(f"output {output!r}: {path} holds the records of an unfinished run; continue it with "
                          "resume, or remove that file to start again")
    if path.exists():
        side = SideFile.read(path)
        _same_options(side, options)
        if options["mode"] == "stochastic" and options["seed"] is not None and len(side):
            raise OutputError(f"resume: {path} is of mode 'stochastic' with a seed, which cannot be resumed "
                              "exactly: a line's noise is that of its position among the lines decoded, and "
                              "skipping the done lines moves it; decode without resume")
        first = _same_input(side, lines, fingerprint, order)
    elif resume and os.path.exists(output):
        return _finished(output, lines)
    else:
        side, first = SideFile.create(path, options), []
    positions: dict[int, int] = {}  # line index -> stream position, for the lines in flight

    def fed() -> Iterator[Line]:
        for position, line in first:  # read by the resume check, not yet decoded
            positions[line.index] = position
            yield line
        for line in lines:
            positions[line.index] = fingerprint.lines
            fingerprint.add(line)
            order.append(line.index)
            yield line

    side.open()
    try:
        for record in decode_records(model, fed(), **search):
            side.add(record, positions.pop(record["index"]), fingerprint)
            if progress is not None:
                progress.update(record)
        side.close()
        if progress is not None:
            progress.close()
        return side.assemble(order, output)
    except KeyboardInterrupt:
        side.close(whole=True)
        raise Interrupted(len(side), path) from None
    finally:
        side.close(whole=True)


def _run_options(model: CorpusModel, search: dict[str, Any], identity: dict[str, Any] | None) -> dict[str, Any]:
    """What a record depends on, as the side file's header holds it (JSON values): every keyword
    of :func:`decode_records` but ``max_rows`` and ``skip`` (how lines are batched into model
    calls, not what they get): the mode, ``max_tokens`` and every option the mode takes (given or
    default), the model and its limit, and this beamsearch's version."""
    from beamsearch import __version__

    spec = registry.mode(search.get("mode", "beam"))
    options: dict[str, Any] = {"mode": spec.name, "max_tokens": search.get("max_tokens")}
    for name, (default, c) in {**controls_of(DecodingConfig), **spec.own}.items():
        if name in search or (c.cli and spec.takes(name)):
            options[name] = search.get(name, spec.defaults.get(name, default))
    if options["max_steps"] is None:
        options["max_steps"] = model.max_steps  # the default: the same search as that number
    elif isinstance(options["max_steps"], (LengthRule, str)):
        options["max_steps"] = repr(_max_steps(options["max_steps"], model.max_steps))
    options.update(identity if identity is not None else {"model": f"{type(model).__module__}."
                                                                      f"{type(model).__qualname__}"})
    options.update(model_limit=model.max_steps, beamsearch=__version__)
    return json.loads(json.dumps(options))


def _same_options(side: SideFile, options: dict[str, Any]) -> None:
    """Refuse a resume whose options are not those the side file was written with."""
    old = side.header.get("options")
    old = old if isinstance(old, dict) else {}
    differ = [f"{key}={_shown(old.get(key))} there, {_shown(options.get(key))} here"
              for key in sorted(set(old) | set(options)) if old.get(key) != options.get(key)]
    if differ:
        raise OutputError(f"resume: {side.path} was written with other options ({'; '.join(differ)}); resume "
                          "with the same options, or remove that file to start again")


def _same_input(side: SideFile, lines: Iterator[Line], fingerprint: Fingerprint,
                order: array) -> list[tuple[int, Line]]:
    """Read as many lines as the side file's last checkpoint covers, refusing the resume when they
    are not those it was written for (a record's input text, or the SHA-256 at a checkpoint); the
    lines read are counted into ``fingerprint`` and ``order``. Returns those of them without a
    record, with their stream positions."""
    marks = dict(side.checkpoints)
    covered = side.checkpoints[-1][0] if side.checkpoints else 0
    first: list[tuple[int, Line]] = []
    checked = 0  # lines proven equal by a checkpoint
    another = f"resume: {side.path} was written for another input"
    while fingerprint.lines < covered:
        line = next(lines, None)
        if line is None:
            raise OutputError(f"{another}: of at least {covered} lines; this one has {fingerprint.lines}")
        position = fingerprint.lines
        fingerprint.add(line)
        order.append(line.index)
        if line.index not in side:
            first.append((position, line))
        elif side.crc(line.index) != text_crc(line.text):
            old = json.loads(side.record(line.index)).get("input", "")
            raise OutputError(f"{another}: {line_name(line.index)} is {old!r:.60} there, {line.text!r:.60} here; "
                              "resume with that input, or remove that file to start again")
        mark = marks.get(fingerprint.lines)
        if mark is not None and mark != fingerprint.state()["sha256"]:
            raise OutputError(f"{another}: lines {checked + 1}-{fingerprint.lines} differ (their SHA-256); "
                              "resume with that input, or remove that file to start again")
        checked = fingerprint.lines if mark is not None else checked
    return first


def _finished(output: str, lines: Iterator[Line]) -> tuple[int, int]:
    """A resume whose side file is gone (the run finished): ``output`` must hold exactly the
    records of ``lines``, in order; nothing is decoded. Returns ``(records, errors)``."""
    records = errors = 0
    finished = f"resume: {output!r} is finished (it has no side file)"
    with open(output, "rb") as f:
        for line in lines:
            record = json_object(f.readline())
            if record is None or record.get("index") != line.index or record.get("input") != line.text:
                raise OutputError(f"{finished}, and not of this input: its record {records + 1} is not that of "
                                  f"{line_name(line.index)}; decode without resume")
            records, errors = records + 1, errors + ("error" in record)
        if f.readline():
            raise OutputError(f"{finished}, and of more lines than this input's {records}; decode without resume")
    return records, errors


def _to_stdout(model: CorpusModel, lines: Iterable[Line], progress: Progress | None,
               search: dict[str, Any]) -> tuple[int, int]:
    ready: dict[int, dict] = {}  # records that finished before an earlier line's
    order: collections.deque[int] = collections.deque()  # line indices in input order, not yet written
    written, errors = 0, 0

    def noted(lines: Iterable[Line]) -> Iterator[Line]:
        for line in lines:
            order.append(line.index)
            yield line

    out = sys.stdout.buffer
    try:
        for record in decode_records(model, noted(lines), **search):
            ready[record["index"]] = record
            errors += "error" in record
            if progress is not None:
                progress.update(record)
            with interrupts_held():  # a record counted is a record out: SIGINT waits for the flush
                while order and order[0] in ready:
                    out.write(encode(ready.pop(order.popleft())))
                    written += 1
                out.flush()
    except KeyboardInterrupt:
        raise Interrupted(written, None) from None
    if progress is not None:
        progress.close()
    return written, errors


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
    the searches are those of ``Translator.beam`` (calendar constraint by default), and a line gets
    the translator's verdict (``beamsearch translate``'s answer)."""

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

    def verdicts(self, texts: list[str], hypotheses: list[list[Any]]) -> list[str | None]:
        """``Translator.verdict`` of each line on its best hypothesis (rescored in one batch)."""
        best = self._translator.outputs(texts, [h[:1] for h in hypotheses])
        return [self._translator.verdict(text, outputs) for text, outputs in zip(texts, best)]


def _prompt_of(model: CorpusModel) -> Callable[[str], list[int]]:
    """The model's ``prompt(text)`` (a causal LM's tokens of the text), or ``[bos]`` for every text."""
    return getattr(model, "prompt", lambda text: [model.bos])


def trace_line(model: CorpusModel, text: str, *, max_steps: int | None = None, trace_width: int = 1,
               **options: Any) -> tuple[Any, Any]:
    """The search tree of one line, as :func:`decode_records` searches it in mode ``beam``:
    ``(trace, greedy)``, the beam search's :class:`~beamsearch.Trace` and greedy's (one live row,
    the same processors) for the overlay of :func:`beamsearch.viz.to_html`. ``options``: as for
    :func:`decode_records` (mode beam's). ValueError if the model cannot read ``text``."""
    from beamsearch import Trace, beam_search_batch

    problem = model.problem(text)
    if problem is not None:
        raise ValueError(f"cannot read {text[:40]!r}: {problem}")
    search = search_keywords(model, registry.mode("beam"), {**options, "max_steps": max_steps})
    search.pop("length_rule", None)
    beam, n_best = search.pop("beam_size"), search.pop("n_best")
    trees = []
    for width in (beam, 1):
        tree = Trace()
        beam_search_batch(model.step, model.make_state([{"source": text}]), [_prompt_of(model)(text)],
                          beam_size=width, n_best=min(n_best, width), trace=tree, trace_width=trace_width, **search)
        trees.append(tree)
    return trees[0], trees[1]


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


def zoo_model(name: str, directory: str | os.PathLike | None = None, *, calendar: bool = True) -> CorpusModel:
    """A zoo model as a :class:`CorpusModel` (needs the ``zoo`` extra: torch, safetensors).

    Args:
        name: ``"seq2seq"`` or ``"transformer"``.
        directory: a checkpoint folder (``beamsearch train --out DIR``); default: the shipped one.
        calendar: constrain outputs to real dates (as ``beamsearch translate`` does).
    """
    from beamsearch.zoo.translator import Translator

    return translator_model(Translator.load(name, directory), calendar)


def translator_model(translator: Any, calendar: bool = True) -> CorpusModel:
    """A loaded :class:`beamsearch.zoo.translator.Translator` as a :class:`CorpusModel` (its
    searches those of ``Translator.beam``; ``calendar`` constrains outputs to real dates)."""
    return _ZooModel(translator, calendar)


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


class _HFModel:
    """A local ``transformers`` directory (model and tokenizer) as a :class:`CorpusModel`, through
    :mod:`beamsearch.hf`: a causal LM's prompt is the line's tokens, an encoder-decoder's source is.
    Both decode with refill (their states join with ``concat_state``: decoder caches left-padded,
    positions per row; an encoder-decoder's encoder side right-padded), an encoder-decoder whose
    decoder positions cannot be given per row in fixed batches (``refill = False``,
    :func:`beamsearch.hf.joinable`). A line is refused when empty, when a word is not in the tokenizer's
    vocabulary (its unknown token), or when its tokens plus ``max_steps`` pass the model's positions."""

    processors: Sequence[Any] = ()

    def __init__(self, directory: str | os.PathLike, max_steps: int) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        from transformers.utils import logging as hf_logging

        from beamsearch import hf

        self._hf, self._torch = hf, torch
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        self.encoder_decoder = bool(config.is_encoder_decoder)
        auto = AutoModelForSeq2SeqLM if self.encoder_decoder else AutoModelForCausalLM
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # decode's stderr holds its own lines (progress, notes, errors)
        try:
            self.model = auto.from_pretrained(directory, local_files_only=True).eval()
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        self.refill = hf.joinable(self.model)
        self.tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.max_steps = check.at_least("max_steps", max_steps, 1)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"{directory}: neither the generation config nor the tokenizer has an eos token")
        self.eos = eos
        start = self.model.generation_config.decoder_start_token_id if self.encoder_decoder else None
        self.bos = start if start is not None else self.tokenizer.bos_token_id
        self._limit = hf.position_limit(self.model)
        self._prepared: Any = None

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def problem(self, text: str) -> str | None:
        if not text.strip():
            return "empty text"
        ids = self._ids(text)
        unk = self.tokenizer.unk_token_id
        if unk is not None and unk in ids:
            return "words outside the tokenizer's vocabulary"
        if not ids:
            return "no tokens"
        need = len(ids) + (0 if self.encoder_decoder else self.max_steps)
        if self._limit is not None and need > self._limit:
            return f"{len(ids)} tokens; the model has {self._limit} positions (max_steps {self.max_steps})"
        return None

    def source_length(self, text: str) -> int:
        return len(self._ids(text))

    def prompt(self, text: str) -> list[int]:
        return [self.bos] if self.encoder_decoder else self._ids(text)

    def make_state(self, items: list[dict]) -> Any:
        sources = [self._ids(i["source"]) for i in items]
        adapter = self._hf.seq2seq_lm if self.encoder_decoder else self._hf.causal_lm
        self._prepared = adapter(self.model, sources, eos_token_id=self.eos, max_new_tokens=self.max_steps)
        return self._prepared.init_state

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        # the last adapter made: its step reads all it needs per row from the state, so it runs the
        # rows of every input in flight (inputs prepared by earlier adapters of the same model too)
        return self._prepared.step(state, y_prev)

    def tokens(self, text: str) -> list[int]:
        ids = self._ids(text)
        if not ids or self.tokenizer.unk_token_id in ids:
            raise ValueError(f"{text!r} is not in the tokenizer's vocabulary")
        return ids

    def text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)


def hf_model(directory: str | os.PathLike, *, max_steps: int = 64) -> CorpusModel:
    """A local ``transformers`` directory (``save_pretrained`` model and tokenizer; nothing is
    downloaded) as a :class:`CorpusModel` (``beamsearch decode --model hf:DIR``); needs the ``hf``
    extra. A causal LM continues each line; an encoder-decoder reads it as its source.

    Args:
        directory: the folder.
        max_steps: the most tokens per output (the model's limit for ``--max-steps``).
    """
    return _HFModel(directory, max_steps)


def toy_model(delay: float = 0.0) -> CorpusModel:
    """The numpy toy :class:`CorpusModel` of the tests (``beamsearch decode --model _toy[:DELAY]``)."""
    return _ToyModel(delay)
