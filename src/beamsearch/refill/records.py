"""The records a refill stream passes around: an input read and validated (:class:`Input`), a
result (:class:`Decoded`) and the stream's counts (:class:`StreamStats`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from beamsearch.core.hypothesis import Hypothesis

MakeState = Callable[[list[Any]], Any]
"""``make_state(items) -> state`` with one row per item (the items as the stream gave them)."""


@dataclass(frozen=True)
class Decoded:
    """One input's result from :func:`~beamsearch.refill.decode_stream`.

    Attributes:
        index: the input's position in the input iterable (0 for the first).
        hypotheses: its hypotheses, best first, as the mode's batch function returns them for it
            (empty when ``error`` is set).
        error: None, or the ``ValueError`` / ``TypeError`` its arguments raised (the input was
            not decoded; the stream goes on).
        info: what the mode reports per input beside the hypotheses (stochastic: ``kappa``).
    """

    index: int
    hypotheses: list[Hypothesis]
    error: Exception | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamStats:
    """Counts of a :class:`~beamsearch.refill.Stream` so far.

    Attributes:
        max_rows: the row budget per model call.
        calls: model calls made.
        rows: rows passed, over all calls.
        mixed_calls: calls whose rows came from more than one cohort (inputs that joined at
            different calls).
        cohorts: cohorts started (each a set of inputs joining at one call).
        inputs: results yielded (errors included).
        errors: results yielded with an error.
        max_tokens: the token budget per model call (None: none).
    """

    max_rows: int
    calls: int = 0
    rows: int = 0
    mixed_calls: int = 0
    cohorts: int = 0
    inputs: int = 0
    errors: int = 0
    max_tokens: int | None = None

    @property
    def rows_per_call(self) -> float:
        """Mean rows per model call (0 before the first)."""
        return self.rows / self.calls if self.calls else 0.0

    @property
    def utilisation(self) -> float:
        """``rows_per_call / max_rows``: how full the calls were, 1 at best."""
        return self.rows_per_call / self.max_rows


@dataclass(frozen=True)
class Input:
    """An input read from the stream and validated alone: its index, its fields (``prompt`` and
    the per-input keys it gave) and the item as given (what ``make_state`` gets)."""

    index: int
    fields: dict[str, Any]
    item: Any
    vocab_checks: tuple[tuple[str, Any], ...]  # its token ids, for the [0, V) check at its first call
    width: int  # the most positions one of its rows can hold: prompt + max_steps
