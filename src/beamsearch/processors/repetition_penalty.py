"""Repetition penalty, Keskar et al. (2019, CTRL), sign-aware as ``transformers`` defines it.

For every distinct token already in the row (prompt and generated tokens), its logit ``x``
becomes ``x / penalty`` when ``x > 0`` and ``x * penalty`` otherwise, so ``penalty > 1`` always
makes a seen token less likely. It acts on the logits before log_softmax (as every processor
here does), exactly where ``transformers``' ``RepetitionPenaltyLogitsProcessor`` acts on the
model's scores; the processed distribution is then renormalized by the search's log_softmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class RepetitionPenalty:
    """Divide positive / multiply non-positive logits of already-seen tokens by ``penalty`` (> 0)."""

    penalty: float
    needs_history = True

    def __post_init__(self) -> None:
        check.repetition_penalty(self.penalty)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows, tokens = seen_tokens(ctx.history)
        if rows.size == 0:
            return logits
        b = ctx.backend
        x = b.take(logits, rows, tokens)  # --> [p]
        return b.put(logits, rows, tokens, b.where(x > 0, x / self.penalty, x * self.penalty))


def seen_tokens(history: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, tokens)``: every distinct token id of each row's history (entries >= 0)."""
    rows, cols = np.nonzero(history >= 0)
    tokens = history[rows, cols]
    if tokens.size == 0:
        return rows, tokens
    key = np.unique(rows * (int(tokens.max()) + 1) + tokens)
    return key // (int(tokens.max()) + 1), key % (int(tokens.max()) + 1)
