"""The output's files (``decode_corpus`` to a file, docs/corpus.md): the output checked before a
run, its lock, and the files beside it, each opened without following a symbolic link.

- :func:`check_output`: a folder, a missing folder, or a symbolic link at ``OUTPUT.lock`` /
  ``OUTPUT.partial`` refused before anything is decoded.
- :func:`output_lock`: an exclusive ``fcntl.flock`` on ``OUTPUT.lock`` for the whole run; a second
  writer is refused at once with the holder's pid and host.
- :func:`open_beside`: a file beside the output opened with ``O_NOFOLLOW`` (a link there is
  refused: a run never writes to a link's target); :func:`create_temporary`: the output's
  temporary file, of a name of its own, created with ``O_EXCL``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pathlib
import secrets
import socket
import time
from collections.abc import Iterator

__all__ = ["BESIDE", "OutputError", "check_output", "create_temporary", "link_refused", "open_beside", "output_lock",
           "sibling"]


class OutputError(ValueError):
    """The output cannot be written as asked (a folder, another writer holds it, a symbolic link
    beside it, a side file that refuses a resume); nothing has been decoded or written. The message
    starts with ``output`` or ``resume`` (``beamsearch decode`` shows it as ``--output ...`` /
    ``--resume ...``)."""


def sibling(output: str | os.PathLike, suffix: str) -> pathlib.Path:
    """``OUTPUT`` + ``suffix`` (``.partial``, ``.lock``, ``.tmp``), in the output's folder."""
    path = pathlib.Path(output)
    return path.with_name(path.name + suffix)


BESIDE = (".lock", ".partial")  # sibling suffixes
"""The files a run opens beside its output, by suffix (its temporary file has a name of its own)."""


def link_refused(output: str | os.PathLike, path: pathlib.Path) -> OutputError:
    """The error for a symbolic link at ``path``, a file beside ``output``."""
    return OutputError(f"output {str(output)!r}: {path} is a symbolic link; a file beside the output is never "
                       "opened through one (its target would be written): remove the link")


def open_beside(path: pathlib.Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` of ``path``, a file beside an output (``OUTPUT.lock``, ``OUTPUT.partial``),
    never through a symbolic link (``O_NOFOLLOW``). Returns the file descriptor.

    Raises:
        OutputError: ``path`` is a symbolic link. OSError: it cannot be opened otherwise.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK) and path.is_symlink():  # Linux: ELOOP; FreeBSD: EMLINK
            raise link_refused(path.with_name(path.name.rsplit(".", 1)[0]), path) from None
        raise


def create_temporary(output: str | os.PathLike) -> tuple[int, pathlib.Path]:
    """A new empty file in the output's folder, of a name no file has (``OUTPUT.<random>.tmp``,
    ``O_CREAT | O_EXCL | O_NOFOLLOW``: never an existing file or link). Returns ``(fd, path)``."""
    for _ in range(100):
        path = sibling(output, f".{secrets.token_hex(6)}.tmp")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), path
        except FileExistsError:
            continue
    raise OutputError(f"output {str(output)!r}: no free name for a temporary file beside it after 100 tries")


# ---- the output and its lock --------------------------------------------------------------------------


def check_output(output: str | os.PathLike) -> None:
    """Refuse an ``output`` that names a folder, or lies in a folder that does not exist, or
    beside which ``OUTPUT.lock`` or ``OUTPUT.partial`` is a symbolic link.

    Raises:
        OutputError: naming ``output`` and what is wrong.
    """
    path = pathlib.Path(output)
    if path.is_dir():
        raise OutputError(f"output {str(output)!r} is a folder; name a file")
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"output {str(output)!r}: the folder {str(folder)!r} does not exist")
    for suffix in BESIDE:
        if sibling(output, suffix).is_symlink():
            raise link_refused(output, sibling(output, suffix))


@contextlib.contextmanager
def output_lock(output: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Hold an exclusive lock on ``output`` (``flock`` on ``OUTPUT.lock``, holding this process's
    pid and host) for the ``with`` block; the lock file is removed at the end. A process that dies
    releases its lock with it (the stale file is then taken over).

    Raises:
        OutputError: another process holds the lock (naming it), or the lock file cannot be made.
    """
    path = sibling(output, ".lock")
    while True:
        try:
            fd = open_beside(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise OutputError(f"output {str(output)!r}: cannot create the lock file {path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd)
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise OutputError(f"output {str(output)!r}: cannot lock {path}: {e.strerror}") from None
            raise OutputError(f"output {str(output)!r} is being written by another run ({holder}; lock file "
                              f"{path}); wait for it to end or choose another output") from None
        if _same_file(fd, path):  # else its holder removed it between our open and our lock: try again
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                  .encode(), 0)
        yield path
    finally:
        path.unlink(missing_ok=True)  # while still locked: a process waiting on this file then retries
        os.close(fd)


def _holder(fd: int, tries: int = 50) -> str:
    """What the lock file says of its holder (``pid P on HOST, since T``); a holder that has just
    taken the lock writes it within moments, so an empty file is read again for up to 0.5 s."""
    for _ in range(tries):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        if text:
            return text
        time.sleep(0.01)
    return "a process that has not said which"


def _same_file(fd: int, path: pathlib.Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))  # a link put there since is not the file
    except FileNotFoundError:
        return False
