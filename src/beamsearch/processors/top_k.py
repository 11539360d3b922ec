"""Top-k filtering with ties at the threshold kept (SPEC section 6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class TopK:
    """Keep the logits at or above the k-th value of the row sorted descending (ties kept).

    ``[4, 2, 2, 2, 0]`` with ``k = 3`` keeps the four values >= 2. ``k >= V`` keeps all.
    """

    k: int
    needs_history = False
    last_step = None  # acts at every step
    masks_only = False  # a support set before it is dropped (StepContext.support)

    def __post_init__(self) -> None:
        check.at_least("k", self.k, 1)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        if self.k >= logits.shape[1]:
            return logits
        threshold = ctx.backend.kth_largest(logits, self.k)  # --> [k_rows, 1]
        return ctx.backend.mask_below(logits, threshold)
