"""What the command line's commands share: its parser and help classes, the error that exits with
one line, argument checks and file helpers."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Callable
from typing import NoReturn

from beamsearch.speech.audio import AudioError

FASTEST_THREADS = 1  # torch threads: 1 was the fastest for translate and evaluate on a 2-core machine (README)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise CliError(f"{self.prog}: error: {message}", 2)


class Help(argparse.HelpFormatter):
    """Help with each option's default, where it has a value worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and not any(action.default is v for v in (None, True, False, argparse.SUPPRESS)):
            text += " (default: %(default)s)"
        return text


class CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def positive(args: argparse.Namespace, *flags: str) -> None:
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value < 1:
            raise CliError(f"beamsearch: error: {flag} must be >= 1; got {value}", 2)


def write_page(path: str, page: str) -> None:
    """``--trace HTML``'s page written to ``path``; a one-line error when it cannot be."""
    try:
        pathlib.Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise CliError(f"beamsearch: error: cannot write --trace {path}: {e.strerror}", 1) from None


def count_lines(path: str) -> int:
    """Lines of a file (a last line without a newline counts), read in blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def each_file(args: argparse.Namespace, transcribe_one: Callable[[str], int]) -> int:
    """Run ``transcribe_one(path)`` (it writes the file's result and returns its best hypothesis's
    number of labels, for the progress bar) over ``args.files`` in order. A file that cannot be
    read is one line on stderr (and a JSON error record with ``--json``) and the next goes on;
    with several files, a count of the failed at the end. Returns the exit status: 1 when some
    file failed, else 0."""
    from beamsearch import corpus

    several = len(args.files) > 1
    progress = corpus.Progress(len(args.files), sys.stderr) if args.progress or (several and sys.stderr.isatty()) \
        else None
    failed = 0
    for path in args.files:
        try:
            labels = transcribe_one(path)
        except AudioError as e:
            failed += 1
            print(f"beamsearch: error: {e}", file=sys.stderr)
            if args.json:
                print(json.dumps({"file": path, "error": str(e)}, ensure_ascii=False))
            continue
        sys.stdout.flush()
        if progress is not None:
            progress.update({"nbest": [{"tokens": range(labels)}]})
    if progress is not None:
        progress.close()
    if failed and several:
        print(f"beamsearch: {failed} of {len(args.files)} files failed", file=sys.stderr)
    return 1 if failed else 0
