"""What the command line's commands share: its parser and help classes, the error that exits with
one line, argument checks and file helpers."""

from __future__ import annotations

import argparse
import pathlib
from typing import NoReturn

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
