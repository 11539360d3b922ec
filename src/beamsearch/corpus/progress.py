"""A one-line progress report of a corpus run (``beamsearch decode --progress``)."""

from __future__ import annotations

import time
from typing import IO

__all__ = ["Progress"]


class Progress:
    """A one-line progress report on a text stream (stderr): inputs done, inputs/s, tokens/s, and
    the ETA when the input count is known, at most every ``every`` seconds: redrawn in place (a
    carriage return) on a terminal; to a file or pipe, each update is a line of its own.

    Args:
        total: the number of inputs to decode, or None when unknown (stdin).
        out: the stream to write to.
        every: seconds between redraws.
    """

    def __init__(self, total: int | None, out: IO[str], every: float = 0.5) -> None:
        self.total, self.out, self.every = total, out, every
        self.inputs = self.tokens = 0
        self.start = self.shown = time.monotonic()
        isatty = getattr(out, "isatty", None)
        self.redraw = bool(isatty is not None and isatty())  # a terminal: each update overwrites the last

    def update(self, record: dict) -> None:
        """Count one record (its best output's tokens; a speech record's: its labels) and redraw when due."""
        self.inputs += 1
        best = record["nbest"][0] if record.get("nbest") else {}
        self.tokens += len(best["tokens"]) if "tokens" in best else best.get("labels", 0)
        now = time.monotonic()
        if now - self.shown >= self.every:
            self.shown = now
            self.out.write("\r" + self.line(now) if self.redraw else self.line(now) + "\n")
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
        self.out.write(("\r" if self.redraw else "") + self.line(time.monotonic()) + "\n")
        self.out.flush()
