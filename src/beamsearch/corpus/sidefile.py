"""The files of ``decode_corpus``: the output's lock, its side file ``OUTPUT.partial`` and the final
ordered ``OUTPUT`` (see docs/corpus.md, "Guarantees").

- :func:`output_lock`: an exclusive ``fcntl.flock`` on ``OUTPUT.lock`` for the whole run; a second
  writer is refused at once with the holder's pid and host.
- :class:`SideFile`: ``OUTPUT.partial`` is a header line (format version and the run's options),
  then the records as lines finish, each flushed, with input checkpoints (lines read so far and
  the SHA-256 of those lines) written before a record of a line past the last checkpoint. Reading
  one never changes it; only the writer cuts a torn last line, when it appends.
- :func:`assemble`: the records copied into ``OUTPUT`` in input order from their offsets in the
  side file (a temporary file, then ``os.replace``), never all in memory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import pathlib
import re
import signal
import socket
import time
import zlib
from array import array
from typing import Any, BinaryIO, Iterator

FORMAT = "beamsearch decode side file"
VERSION = 1

LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate: a JSON "\\ud800" escape without its pair


class OutputError(ValueError):
    """The output cannot be written as asked (a folder, another writer holds it, a side file that
    refuses a resume); nothing has been decoded or written. The message starts with ``output`` or
    ``resume`` (``beamsearch decode`` shows it as ``--output ...`` / ``--resume ...``)."""


class Interrupted(KeyboardInterrupt):
    """A run stopped by KeyboardInterrupt (SIGINT), its side file ending with a whole record.

    Attributes:
        records: the records kept in the side file ``path`` (None: written to stdout).
    """

    def __init__(self, records: int, path: pathlib.Path | None) -> None:
        super().__init__(f"interrupted; {records} records " + (f"kept in {path}" if path else "written to stdout"))
        self.records, self.path = records, path


def line_name(index: int) -> str:
    """How messages name the line of record ``index``: ``line 4 (index 3)`` (lines count from 1,
    as in an editor; ``index`` is the record's, from 0)."""
    return f"line {index + 1} (index {index})"


def encode(record: dict) -> bytes:
    """One JSON line, UTF-8; a lone surrogate (``"\\ud800"`` in a JSON input) is written as its
    ``\\ud800`` escape, so the line stays valid UTF-8 JSON."""
    text = json.dumps(record, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # only inside JSON strings: json.dumps puts no raw character elsewhere
        return (LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n").encode("utf-8")


def sibling(output: str | os.PathLike, suffix: str) -> pathlib.Path:
    """``OUTPUT`` + ``suffix`` (``.partial``, ``.lock``, ``.tmp``), in the output's folder."""
    path = pathlib.Path(output)
    return path.with_name(path.name + suffix)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT held back for the ``with`` block and delivered at its end (as KeyboardInterrupt), so
    that a block writing whole records and counting them is never cut between the two. Where the
    signal mask cannot be set (not POSIX), the block runs as it is."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ---- the output and its lock --------------------------------------------------------------------------


def check_output(output: str | os.PathLike) -> None:
    """Refuse an ``output`` that names a folder, or lies in a folder that does not exist.

    Raises:
        OutputError: naming ``output`` and what is wrong.
    """
    path = pathlib.Path(output)
    if path.is_dir():
        raise OutputError(f"output {str(output)!r} is a folder; name a file")
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"output {str(output)!r}: the folder {str(folder)!r} does not exist")


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
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


# ---- the input fingerprint ---------------------------------------------------------------------------


class Fingerprint:
    """A running SHA-256 over the lines read so far: each line's index, text, error and JSON
    fields (max_steps, prefix, constraints, the files it names), everything a record depends on
    (the files by their paths: a resume does not read them again)."""

    def __init__(self) -> None:
        self.lines = 0
        self._hash = hashlib.sha256()

    def add(self, line: Any) -> None:
        """Count one :class:`~beamsearch.corpus.Line` into the hash."""
        fields = (line.index, line.text, line.error, line.max_steps, line.prefix, line.constraints)
        if getattr(line, "media", None) is not None:  # the files a line names (a text line's hash as before)
            fields += (line.media,)
        self._hash.update(ascii(fields).encode("ascii") + b"\n")  # ints, texts, None, tuples: one spelling each
        self.lines += 1

    def state(self) -> dict:
        """``{"lines": n, "sha256": hex}`` of the lines so far."""
        return {"lines": self.lines, "sha256": self._hash.hexdigest()}


def text_crc(text: str) -> int:
    """The CRC-32 of a record's input text (what a resume compares line by line)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


# ---- the side file -----------------------------------------------------------------------------------


class SideFile:
    """``OUTPUT.partial``: where each record is (by index), the input checkpoints, the header.

    Attributes:
        path: the file. header: its first line's object (``format``, ``version``, ``options``).
        checkpoints: ``[(lines, sha256)]`` in file order. errors: indices of error records.
        end: bytes of whole lines (a torn last line starts there).
    """

    def __init__(self, path: pathlib.Path, header: dict) -> None:
        self.path, self.header = path, header
        self.checkpoints: list[tuple[int, str]] = []
        self.errors: set[int] = set()
        self.end = 0
        self._slot: dict[int, int] = {}  # index -> slot of the arrays
        self._offset, self._length, self._crc = array("q"), array("q"), array("L")
        self._file: BinaryIO | None = None
        self._covered = 0  # lines the last checkpoint covers

    def __contains__(self, index: int) -> bool:
        return index in self._slot

    def __len__(self) -> int:
        return len(self._slot)

    def crc(self, index: int) -> int:
        """The CRC-32 of the input text of the record of ``index``."""
        return self._crc[self._slot[index]]

    def records(self) -> Iterator[tuple[int, bytes]]:
        """``(index, record line)`` of every record, in file order."""
        with open(self.path, "rb") as f:
            for index, slot in self._slot.items():
                yield index, os.pread(f.fileno(), self._length[slot], self._offset[slot])

    def record(self, index: int) -> bytes:
        """The record line of ``index``, as written."""
        slot = self._slot[index]
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), self._length[slot], self._offset[slot])

    def _note(self, index: int, offset: int, length: int, record: dict) -> None:
        self._slot[index] = len(self._offset)
        self._offset.append(offset)
        self._length.append(length)
        self._crc.append(text_crc(record.get("input", "")))
        if "error" in record:
            self.errors.add(index)

    @classmethod
    def create(cls, path: pathlib.Path, options: dict) -> SideFile:
        """A new side file holding only the header (an existing file is replaced)."""
        side = cls(path, {"format": FORMAT, "version": VERSION, "options": options})
        with open(path, "wb") as f:
            f.write(encode(side.header))
            side.end = f.tell()
        return side

    @classmethod
    def read(cls, path: pathlib.Path) -> SideFile:
        """Index an existing side file; the file is not changed (a torn last line is left for the
        writer to cut).

        Raises:
            OutputError: the file is not a side file of this format, or a whole line of it is not
                a record, a checkpoint, or repeats an index (a damaged file).
        """
        with open(path, "rb") as f:
            first = f.readline()
            header = json_object(first)
            if not first.endswith(b"\n") or header is None or header.get("format") != FORMAT:
                raise OutputError(f"resume: {path} is not a side file of beamsearch decode (its first line is not "
                                  "the header; an older version writes none); remove it or decode without resume")
            if header.get("version") != VERSION:
                raise OutputError(f"resume: {path} is of side file version {header.get('version')!r}; this "
                                  f"beamsearch reads version {VERSION}")
            side = cls(path, header)
            offset, number = len(first), 1
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a torn last line: a run killed mid-write
                number += 1
                side._read_line(raw, offset, number)
                offset += len(raw)
            side.end = offset
        return side

    def _read_line(self, raw: bytes, offset: int, number: int) -> None:
        item = json_object(raw)
        if item is not None and isinstance(item.get("read"), dict):
            lines, sha = item["read"].get("lines"), item["read"].get("sha256")
            if isinstance(lines, int) and isinstance(sha, str):
                self.checkpoints.append((lines, sha))
                self._covered = lines
                return
        index = item.get("index") if item is not None else None
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(item.get("input"), str):
            raise OutputError(f"resume: {self.path} line {number} is not a record of beamsearch decode (a damaged "
                              "file); remove it or decode without resume")
        if index in self._slot:
            raise OutputError(f"resume: {self.path} line {number} repeats the record of index {index} (a damaged "
                              "file); remove it or decode without resume")
        if not self.checkpoints:
            raise OutputError(f"resume: {self.path} line {number}: a record before any input checkpoint (a "
                              "damaged file); remove it or decode without resume")
        self._note(index, offset, len(raw), item)

    # ---- writing ------------------------------------------------------------------------------------

    def open(self) -> None:
        """Open for appending, first cutting a torn last line off."""
        self._file = open(self.path, "r+b")
        self._file.truncate(self.end)
        self._file.seek(self.end)

    def add(self, record: dict, position: int, fingerprint: Fingerprint) -> None:
        """Append ``record`` (of the line read at stream ``position``, 0-based) and flush it; a
        checkpoint of the lines read so far goes first when the last one does not cover it."""
        assert self._file is not None, "open() the side file first"
        data = encode(record)
        if position >= self._covered:
            state = fingerprint.state()
            self.checkpoints.append((state["lines"], state["sha256"]))
            self._covered = state["lines"]
            checkpoint = encode({"read": state})
            self._file.write(checkpoint)
            self.end += len(checkpoint)
        self._file.write(data)
        self._file.flush()
        self._note(record["index"], self.end, len(data), record)
        self.end += len(data)

    def close(self, whole: bool = False) -> None:
        """Close the file; ``whole``: first cut it back to its last whole record (a write that
        was interrupted)."""
        if self._file is None:
            return
        try:
            if whole:
                self._file.flush()
                self._file.truncate(self.end)
        finally:
            self._file.close()
            self._file = None

    def assemble(self, order: array, output: str | os.PathLike) -> tuple[int, int]:
        """Write the records of ``order`` (line indices in input order) to ``output``: a temporary
        ``OUTPUT.tmp``, fsync, ``os.replace``; then remove the side file. Returns ``(records,
        errors)``.

        Raises:
            ValueError: an index of ``order`` without a record.
        """
        temporary = sibling(output, ".tmp")
        try:
            with open(self.path, "rb") as src, open(temporary, "wb") as dst:
                for index in order:
                    slot = self._slot.get(index)
                    if slot is None:
                        raise ValueError(f"{line_name(index)} got no record")
                    dst.write(os.pread(src.fileno(), self._length[slot], self._offset[slot]))
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(temporary, output)
        finally:
            temporary.unlink(missing_ok=True)
        self.path.unlink()
        return len(order), sum(index in self.errors for index in order)


def json_object(raw: bytes) -> dict | None:
    """A JSON line's object, or None (not JSON, not an object)."""
    try:
        item = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return item if isinstance(item, dict) else None
