"""The files a run's options name (``beamsearch decode --json-schema FILE``, ``--grammar FILE``,
``--catalogue FILE``): read only when each is a regular file of at most its size limit, so that a
device (``/dev/zero``, read until memory runs out) or a FIFO (which blocks until a writer comes)
is refused at once, naming the option, the file and what it is (docs/corpus.md, "Limits")."""

from __future__ import annotations

import os
import stat

__all__ = ["MAX_CATALOGUE_BYTES", "MAX_GRAMMAR_BYTES", "check_option_file", "read_option_file"]

MAX_GRAMMAR_BYTES = 16 * 2**20
"""The largest ``--json-schema`` / ``--grammar`` file read: 16 MiB."""

MAX_CATALOGUE_BYTES = 2**30
"""The largest ``--catalogue`` file read (a text catalogue or one ``Catalogue.save`` wrote): 1 GiB."""

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _bytes(n: int) -> str:
    """``16,777,216 bytes (16 MiB)``; under 1 MiB the bytes alone."""
    return f"{n:,} bytes" + (f" ({n / 2**20:g} MiB)" if n >= 2**20 else "")


def _refused(st: os.stat_result, path: str | os.PathLike, name: str, limit: int) -> str | None:
    """Why a file of status ``st`` is not read for option ``name``, or None."""
    where = f"{name} {os.fspath(path)}"
    if not stat.S_ISREG(st.st_mode):
        kind = next((kind for test, kind in _KINDS if test(st.st_mode)), "not a file")
        return f"{where}: not a regular file ({kind}); give a file"
    if st.st_size > limit:
        return f"{where}: {st.st_size:,} bytes, over the limit of {_bytes(limit)}"
    return None


def check_option_file(path: str | os.PathLike, name: str, limit: int) -> None:
    """Refuse ``path`` for option ``name`` when it is not a regular file of at most ``limit``
    bytes (its status only: a FIFO is not opened). A file that cannot be found passes: its reader
    says why it cannot be read.

    Raises:
        ValueError: one line naming ``name``, ``path`` and what it is, or its size and the limit.
    """
    try:
        st = os.stat(path)
    except OSError:
        return
    why = _refused(st, path, name, limit)
    if why is not None:
        raise ValueError(why)


def read_option_file(path: str | os.PathLike, name: str, limit: int) -> bytes:
    """The bytes of ``path`` for option ``name``: a regular file of at most ``limit`` bytes (checked
    on the opened file, opened without waiting for a FIFO's writer; at most ``limit`` bytes read
    even if it grows meanwhile).

    Raises:
        ValueError: not a regular file, or over the limit (one line naming ``name`` and ``path``).
        OSError: it cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # O_NONBLOCK: a FIFO's open does not wait
    with os.fdopen(fd, "rb") as f:
        why = _refused(os.fstat(fd), path, name, limit)
        if why is not None:
            raise ValueError(why)
        os.set_blocking(fd, True)
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{name} {os.fspath(path)}: over the limit of {_bytes(limit)} (it grew while read)")
    return data
