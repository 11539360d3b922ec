"""``decode``'s files: the output's lock, the checks that decode never writes over its input, and
what a resumed run must share with the first (the model's files, how the input is read)."""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
from collections.abc import Iterator
from typing import Any

from beamsearch.cli.common import CliError
from beamsearch.cli.options import flag_names


@contextlib.contextmanager
def output_locked(output: str) -> Iterator[None]:
    """Hold ``output``'s lock (not for stdout); another run holding it exits 2."""
    from beamsearch import corpus

    with contextlib.ExitStack() as stack:
        if output != "-":
            try:
                stack.enter_context(corpus.output_lock(output))
            except corpus.OutputError as e:
                raise CliError(f"beamsearch: error: {flag_names(str(e))}", 2) from None
        yield


def check_decode_files(args: argparse.Namespace) -> None:
    """Before anything is loaded or decoded: ``--output`` (and ``--trace``) name files in folders
    that exist, and none of the files decode writes (OUTPUT, OUTPUT.partial, .lock, .tmp, the
    trace page) is the ``--input`` file, also through a symbolic or hard link. Exit 2."""
    from beamsearch import corpus

    written: list[tuple[str, str]] = []  # (flag, path)
    if args.output != "-":
        try:
            corpus.check_output(args.output)
        except corpus.OutputError as e:
            raise CliError(f"beamsearch: error: {flag_names(str(e))}", 2) from None
        written += [("--output", args.output)] + [("--output", str(corpus.sibling(args.output, end)))
                                                   for end in (".partial", ".lock", ".tmp")]
    if args.trace is not None:
        folder = pathlib.Path(args.trace).parent
        if pathlib.Path(args.trace).is_dir() or not folder.is_dir():
            why = "is a folder" if folder.is_dir() else f"is in a folder that does not exist ({folder})"
            raise CliError(f"beamsearch: error: --trace {args.trace!r} {why}; name a file", 2)
        written.append(("--trace", args.trace))
    if args.input == "-" or not os.path.exists(args.input):
        return
    for flag, path in written:
        if os.path.exists(path) and os.path.samefile(args.input, path):
            named = args.output if flag == "--output" else path
            raise CliError(f"beamsearch: error: {flag} {named!r}: {path!r} is the --input file {args.input!r} "
                            "(the same file, or a link to it); decode would overwrite its input", 2)


def decode_identity(args: argparse.Namespace) -> dict[str, Any]:
    """What decode's records depend on besides the search options (the side file holds it, and
    --resume compares it): the model (its spec, and a folder's files by name, size and content),
    how the input is read, the calendar constraint."""
    spec = args.model
    folder = pathlib.Path(spec[3:] if spec.startswith("hf:") else spec)
    files = folder_files(folder) if folder.is_dir() else []
    return {"--model": spec, "--model files": files, "--jsonl": args.jsonl, "--field": args.field,
            "--no-calendar": not args.calendar}


def folder_files(folder: pathlib.Path, end: int = 1 << 20) -> list[list[Any]]:
    """``[name, size, SHA-256 of its first and last ``end`` bytes]`` per file of ``folder`` (cheap for
    any model size, and it changes when weights are retrained or replaced)."""
    import hashlib

    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        size = path.stat().st_size
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            digest.update(f.read(end))
            if size > end:
                f.seek(max(end, size - end))
                digest.update(f.read(end))
        out.append([path.name, size, digest.hexdigest()])
    return out
