"""The files of ``decode_corpus``: its side file ``OUTPUT.partial`` and the final ordered ``OUTPUT``
(see docs/corpus.md, "Guarantees"; the output's lock: :mod:`beamsearch.corpus.output`).

- :class:`SideFile`: ``OUTPUT.partial`` is a header line (format version and the run's options),
  then the records as lines finish, each flushed, with input checkpoints (lines read so far and
  the SHA-256 of those lines) written before a record of a line past the last checkpoint. Reading
  one never changes it; only the writer cuts a torn last line, when it appends.
- :func:`assemble`: the records copied into ``OUTPUT`` in input order from their offsets in the
  side file (a temporary file of a name of its own, then ``os.replace``), never all in memory.

The side file is opened without following a symbolic link and the temporary file is created anew
(:func:`~beamsearch.corpus.output.open_beside`, :func:`~beamsearch.corpus.output.create_temporary`),
so a run never writes to a link's target.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import signal
import zlib
from array import array
from collections.abc import Iterator
from typing import Any, BinaryIO

from beamsearch.corpus.output import OutputError, create_temporary, open_beside

FORMAT = "beamsearch decode side file"
VERSION = 1

LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate: a JSON "\\ud800" escape without its pair


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


# ---- the input fingerprint ---------------------------------------------------------------------------


class Fingerprint:
    """A running SHA-256 over the lines read so far: each line's index, text, error and JSON
    fields (max_steps, prefix, constraints, the files it names, and the other keys a record
    copies), everything a record depends on (the files by their paths: a resume does not read
    them again)."""

    def __init__(self) -> None:
        self.lines = 0
        self._hash = hashlib.sha256()

    def add(self, line: Any) -> None:
        """Count one :class:`~beamsearch.corpus.Line` into the hash."""
        fields: tuple[Any, ...] = (line.index, line.text, line.error, line.max_steps, line.prefix, line.constraints)
        if getattr(line, "extra", None):  # a line without other keys hashes as before they were copied
            fields += (json.dumps(line.extra, ensure_ascii=True),)
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
        with os.fdopen(open_beside(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as f:
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
        with os.fdopen(open_beside(path, os.O_RDONLY), "rb") as f:
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
        if item is None or not isinstance(index, int) or isinstance(index, bool) \
                or not isinstance(item.get("input"), str):
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
        self._file = os.fdopen(open_beside(self.path, os.O_RDWR), "r+b")
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
        """Write the records of ``order`` (line indices in input order) to ``output``: a new
        temporary file beside it (:func:`create_temporary`), fsync, ``os.replace``; then remove the
        side file. Returns ``(records, errors)``.

        Raises:
            ValueError: an index of ``order`` without a record.
        """
        fd, temporary = create_temporary(output)
        try:
            with open(self.path, "rb") as src, os.fdopen(fd, "wb") as dst:
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
