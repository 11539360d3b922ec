"""Corpus decoding to a file: the output's lock, the side file (``OUTPUT.partial``) flushed as
lines finish, resume (its options and input checked before anything is written), and the ordered
output written at the end (the file formats: :mod:`beamsearch.corpus.sidefile`)."""

from __future__ import annotations

import collections
import hashlib
import importlib
import json
import os
import pathlib
import sys
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

from beamsearch.core.config import DecodingConfig, options_of
from beamsearch.corpus.grammar import GRAMMAR_OPTIONS, catalogue_crc
from beamsearch.corpus.lines import Line, shown
from beamsearch.corpus.models import CorpusModel
from beamsearch.corpus.options import LengthRule, max_steps_of
from beamsearch.corpus.output import OutputError, check_output, output_lock, sibling
from beamsearch.corpus.progress import Progress
from beamsearch.corpus.records import CorpusSearch, LineSearch, corpus_search, run_records
from beamsearch.corpus.sidefile import (
    Fingerprint,
    Interrupted,
    SideFile,
    encode,
    interrupts_held,
    json_object,
    line_name,
    text_crc,
)
from beamsearch.modes import registry

__all__ = ["decode_corpus", "load_partial", "partial_path"]


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
                  run: CorpusSearch | LineSearch | None = None, **search: Any) -> tuple[int, int]:
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
        run: the search of ``search`` already built and checked (:func:`corpus_search` of
            ``model`` and ``search``, as ``beamsearch decode`` builds it once); None: built here.

    Returns:
        ``(records, errors)``: the lines in the output, and how many of them have ``error``.

    Raises:
        OutputError (a ValueError): ``output`` is a folder or in a folder that does not exist;
            another run holds it; its side file exists and ``resume`` is False; ``resume`` is
            refused (other options, another input, a damaged side file). Nothing is written then.
        Interrupted (a KeyboardInterrupt): SIGINT; the side file ends with its last whole record.
        ValueError / TypeError: a bad search keyword (before any file is touched); ``resume``
            with ``output == "-"``; an error of the model that no line alone explains. Any
            exception but SIGINT removes a side file that holds no record (it would refuse the
            corrected run, with ``resume`` or without).
    """
    if output == "-":
        if resume:
            raise ValueError("--resume needs an --output file (records of stdout cannot be read back)")
        return _to_stdout(model, lines, progress, run or corpus_search(model, **search))
    output = os.fspath(output)
    check_output(output)
    run = run or corpus_search(model, **search)  # the keywords, before any file is touched
    options = _run_options(model, search, identity) if isinstance(run, CorpusSearch) else \
        _line_options(run, identity)
    with output_lock(output):
        return _decode_file(model, iter(lines), output, resume, progress, options, run)


def _decode_file(model: CorpusModel, lines: Iterator[Line], output: str, resume: bool, progress: Progress | None,
                 options: dict[str, Any], run: CorpusSearch | LineSearch) -> tuple[int, int]:
    """:func:`decode_corpus` to a file, its lock held."""
    path = partial_path(output)
    fingerprint, order = Fingerprint(), array("q")  # order: the line indices in input order
    if path.exists() and not resume:
        raise OutputError(f"output {output!r}: {path} holds the records of an unfinished run; continue it with "
                          "resume, or remove that file to start again")
    if path.exists():
        side = SideFile.read(path)
        _same_options(side, options)
        if options.get("mode") == "stochastic" and options["seed"] is not None and len(side):
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

    try:
        side.open()
        for record in run_records(model, fed(), run):
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
    except Exception:  # an error found by the search (a bad option at the first model call, ...)
        side.close(whole=True)
        if not len(side):  # a side file without a record would refuse the corrected command
            path.unlink(missing_ok=True)
        raise
    finally:
        side.close(whole=True)


def _run_options(model: CorpusModel, search: dict[str, Any], identity: dict[str, Any] | None) -> dict[str, Any]:
    """What a record depends on, as the side file's header holds it (JSON values): every keyword
    of :func:`decode_records` but ``max_rows`` and ``skip`` (how lines are batched into model
    calls, not what they get): the mode, ``max_tokens`` and every option the mode takes (given or
    default), the grammar given (its text: a resume with another grammar is refused), the
    catalogue file given (its path and the CRC-32 of its bytes), the scorer given (its name and its
    module file's SHA-256: :func:`scorer_identity`), the model and its limit, and this
    beamsearch's version."""
    from beamsearch import __version__

    spec = registry.mode(search.get("mode", "beam"))
    options: dict[str, Any] = {"mode": spec.name, "max_tokens": search.get("max_tokens")}
    for name, (_, c) in {**options_of(DecodingConfig), **spec.own}.items():
        if name in search or (c.cli and spec.takes(name)):
            options[name] = search.get(name, spec.default(name))
    options.update({name: search[name] for name in GRAMMAR_OPTIONS if search.get(name) is not None})
    if isinstance(options.get("catalogue"), str):  # the file's content too, not only its path
        options["catalogue_crc32"] = catalogue_crc(options["catalogue"])
    if options.get("scorer") is not None:  # its module's file too, not only its name
        options["scorer"], options["scorer_sha256"] = scorer_identity(options["scorer"])
    if options["max_steps"] is None:
        options["max_steps"] = model.max_steps  # the default: the same search as that number
    elif isinstance(options["max_steps"], (LengthRule, str)):
        options["max_steps"] = repr(max_steps_of(options["max_steps"], model.max_steps))
    options.update(identity if identity is not None else {"model": f"{type(model).__module__}."
                                                                      f"{type(model).__qualname__}"})
    options.update(model_limit=model.max_steps, beamsearch=__version__)
    return json.loads(json.dumps(options))


def _line_options(run: LineSearch, identity: dict[str, Any] | None) -> dict[str, Any]:
    """What a record of a model that decodes whole lines depends on: its search's options, the
    model (``identity``) and this beamsearch's version."""
    from beamsearch import __version__

    return json.loads(json.dumps({**run.options, **(identity or {}), "beamsearch": __version__}))


def scorer_identity(scorer: Any) -> tuple[str, str | None]:
    """What the side file holds of a step search's scorer: ``module:function`` (as given, or a
    callable's module and qualified name) and the SHA-256 of its module's file (None: a module
    without one), so that a resume after that file changed is refused. The scorer was imported
    by the search's checks."""
    if isinstance(scorer, str):
        name, module = scorer, scorer.partition(":")[0]
    else:
        module = getattr(scorer, "__module__", None) or type(scorer).__module__
        name = f"{module}:{getattr(scorer, '__qualname__', type(scorer).__qualname__)}"
    path = getattr(sys.modules.get(module) or importlib.import_module(module), "__file__", None)
    return name, hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest() if path else None


def _same_options(side: SideFile, options: dict[str, Any]) -> None:
    """Refuse a resume whose options are not those the side file was written with."""
    old = side.header.get("options")
    old = old if isinstance(old, dict) else {}
    differ = [f"{key}={shown(old.get(key))} there, {shown(options.get(key))} here"
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
               run: CorpusSearch | LineSearch) -> tuple[int, int]:
    ready: dict[int, dict] = {}  # records that finished before an earlier line's
    order: collections.deque[int] = collections.deque()  # line indices in input order, not yet written
    written, errors = 0, 0

    def noted(lines: Iterable[Line]) -> Iterator[Line]:
        for line in lines:
            order.append(line.index)
            yield line

    out = sys.stdout.buffer
    try:
        for record in run_records(model, noted(lines), run):
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
