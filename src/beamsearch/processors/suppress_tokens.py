"""Suppressed tokens: ids that are never generated, or not in the first steps.

``SuppressTokens(ids)`` is ``transformers``' ``SuppressTokensLogitsProcessor``;
``SuppressTokens(ids, first_steps=1)`` is its ``SuppressTokensAtBeginLogitsProcessor`` (the ids
are banned only for the first generated token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class SuppressTokens:
    """Set ``token_ids`` to -inf at every step, or at steps ``t <= first_steps`` only.

    Args:
        token_ids: a non-empty sequence of ids (each checked against ``[0, V)`` at the first call).
        first_steps: None, or the last step (>= 1) at which they are suppressed.
    """

    token_ids: Sequence[int]
    first_steps: int | None = None
    needs_history = False
    _given: list[int] = field(init=False, repr=False, compare=False)
    _ids: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = check.suppressed(self.token_ids, self.first_steps)
        object.__setattr__(self, "_given", ids)
        object.__setattr__(self, "_ids", np.unique(np.asarray(ids, dtype=np.int64)))

    @property
    def vocab_checks(self) -> tuple[tuple[str, list[int]], ...]:
        """The ids to check against ``[0, V)`` at the first call, named as given."""
        return (("token_ids", self._given),)

    @property
    def last_step(self) -> int | None:
        """No-op after ``first_steps`` (the search then skips it); None: acts at every step."""
        return self.first_steps

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        if self.first_steps is not None and ctx.step > self.first_steps:
            return logits
        return ctx.backend.fill_columns(logits, self._ids, NEG_INF)
