"""A minimum length (SPEC section 10): at steps ``t <= m`` every eos id's logit is -inf, before
any other processing. (That no stop sequence finishes at those steps is
:class:`~beamsearch.controls.stop_sequences.StopSequences`' part.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.processors import StepContext


@dataclass(frozen=True)
class MinNewTokens:
    """Mask ``eos`` (int64 ``[E]``) at steps ``t <= m``."""

    eos: np.ndarray
    m: int
    needs_history = False
    masks_only = True  # it only sets entries to -inf

    @property
    def last_step(self) -> int:
        """No-op after step m (the engine then skips it)."""
        return self.m

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        if ctx.step > self.m:
            return logits
        return ctx.backend.fill_columns(logits, self.eos, NEG_INF)
