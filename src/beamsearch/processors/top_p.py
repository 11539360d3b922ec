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

from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext


@dataclass(frozen=True)
class TopP:
    """Keep the smallest set of most likely tokens whose probability reaches ``p`` (0 < p <= 1)."""

    p: float
    needs_history = False

    def __post_init__(self) -> None:
        check.top_p(self.p)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        if self.p >= 1:
            return logits
        b = ctx.backend
        ordered = b.sort_desc(logits)  # --> [k, V], highest first
        reach = b.softmax_cumsum(ordered)  # --> [k, V], mass of the first j+1 tokens
        # the nucleus ends at the first position whose mass reaches p; the last position always
        # ends it (so a sum that rounds below p at the end keeps every token)
        last = b.count_below(reach[:, :-1], self.p)  # --> [k, 1], in [0, V-1]
        return b.mask_below(logits, b.take_along(ordered, last))
