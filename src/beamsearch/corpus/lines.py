"""Reading a corpus file: its lines as :class:`Line` values (text or JSON Lines), each line that
cannot be read carrying its ``error`` instead of failing the run."""

from __future__ import annotations

import codecs
import dataclasses
import json
import re
import reprlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from beamsearch.corpus.sidefile import LONE_SURROGATE

__all__ = ["MAX_JSON_DEPTH", "MAX_JSON_DIGITS", "MEDIA", "Line", "read_lines"]


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
        media: the files the line names beside its text (JSON Lines ``"image"`` / ``"audio"``:
            a path, relative to the current directory), as ``((kind, path), ...)``, or None.
        extra: the JSON object's other keys (an ``"id"``, metadata) in its order, copied into the
            line's record; None when it has none (or is not a JSON line).
    """

    index: int
    text: str
    error: str | None = None
    max_steps: int | None = None
    prefix: str | None = None
    constraints: tuple[str | tuple[str, ...], ...] | None = None
    media: tuple[tuple[str, str], ...] | None = None
    extra: dict[str, Any] | None = dataclasses.field(default=None, hash=False)

    OWN = ("constraints",)
    """The search options a line may give for itself (beside ``max_steps`` and ``prefix``), by
    their option names."""

    def own(self, name: str) -> Any:
        """The line's own value of option ``name`` (one of :attr:`OWN`), or None."""
        if name not in self.OWN:
            raise KeyError(name)
        return self.constraints


MEDIA = ("image", "audio")
"""The JSON Lines keys naming a line's files beside its text, in the order a model reads them."""

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
            lists of texts for alternatives) are the line's own, and so are the files ``image``
            and ``audio`` (a path each, read by a model that takes them: :data:`MEDIA`; with one,
            ``field`` may be absent: the text is then ``""``); its other keys (ids, metadata) are
            the line's :attr:`Line.extra`, copied into its record.
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
    media = tuple((kind, record[kind]) for kind in MEDIA if kind in record) or None
    extra = {key: v for key, v in record.items()
             if key not in (field, "max_steps", "prefix", *Line.OWN, *MEDIA)} or None
    for kind, path in media or ():
        if not isinstance(path, str) or not path:
            return Line(index, text, f"{kind} must be a file path (a non-empty string); got {shown(path)}", extra=extra)
    value = record.get(field, "" if media and field not in record else None)
    if not isinstance(value, str):
        return Line(index, text, f"the JSON object has no string field {field!r}", extra=extra)
    max_steps, prefix = record.get("max_steps"), record.get("prefix")
    error = None
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        error = f"max_steps must be an integer >= 1; got {shown(max_steps)}"
    elif prefix is not None and not isinstance(prefix, str):
        error = f"prefix must be a string; got {shown(prefix)}"
    constraints = record.get("constraints")
    if error is None and constraints is not None:
        constraints = _constraint_texts(constraints)
        error = constraints if isinstance(constraints, str) else None
    texts = () if error is not None else ((field, [value]), ("prefix", [prefix] if prefix else []),
                                          ("constraints", _flat(constraints)),
                                          *((kind, [path]) for kind, path in media or ()))
    for name, some in texts:
        error = error or _lone_surrogate(name, some)
    if error is not None:
        return Line(index, value, error, extra=extra)
    return Line(index, value, None, max_steps, prefix, constraints, media=media, extra=extra)


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
    _depth = deepest = 0
    for c in re.findall(r"[\[\]{}]", _JSON_STRING.sub("", text)):
        _depth = _depth + 1 if c in "[{" else _depth - 1
        deepest = max(deepest, _depth)
    return deepest


def shown(value: Any) -> str:
    """A JSON value for an error message: at most 80 characters, any _depth."""
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
            f"got {shown(value)}")
