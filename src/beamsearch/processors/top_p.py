"""Top-p (nucleus) filtering, Holtzman et al. (2020), with ties at the threshold kept.

Per row: order the tokens by logit, highest first; the nucleus is the shortest such prefix whose
softmax probability reaches ``p``; every logit strictly below the last nucleus token's logit
becomes -inf. Tokens tied with that last one are kept (as in :class:`TopK`), so the result does not
depend on how a sort orders ties. ``p = 1`` keeps every token.

Where it differs from ``transformers``' ``TopPLogitsWarper``: that one removes the tokens whose
cumulative probability, summed from the *least* likely, is at most ``1 - p``, and its choice among
tied tokens depends on the sort; on untied rows both keep the same set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beamsearch import _validate as check
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class TopP:
    """Keep the smallest set of most likely tokens whose probability reaches ``p`` (0 < p <= 1)."""

    p: float
    needs_history = False

    def __post_init__(self) -> None:
        p = check.real("p", self.p, positive=True)
        if p > 1:
            raise ValueError(f"p must be in (0, 1]; got {self.p!r}")

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        if self.p >= 1:
            return logits
        b = ctx.backend
        ordered = b.sort_desc(logits)  # --> [k, V], highest first
        reach = b.softmax_cumsum(ordered)  # --> [k, V], mass of the first j+1 tokens
        last = b.count_below(reach, self.p)  # --> [k, 1]: the nucleus ends at this position
        last = b.where(last < logits.shape[1], last, last * 0 + logits.shape[1] - 1)  # rounding
        return b.mask_below(logits, b.take_along(ordered, last))
