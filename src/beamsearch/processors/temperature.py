"""Temperature: divide every logit by T > 0 (T < 1 sharpens, T > 1 flattens)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class Temperature:
    """Divide every logit by ``temperature`` (> 0 and finite)."""

    temperature: float
    needs_history = False
    last_step = None  # acts at every step
    masks_only = False  # a support set before it is dropped (StepContext.support)

    def __post_init__(self) -> None:
        check.temperature("temperature", self.temperature)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        return logits / self.temperature  # a new array: no in-place write needed
