"""``generate``'s ForcedBOS / ForcedEOS logits processors as a processor of the search
(:class:`ForcedTokens`), which :func:`beamsearch.hf.generate` builds from ``forced_bos_token_id``
and ``forced_eos_token_id``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.processors import StepContext

__all__ = ["ForcedTokens"]


@dataclass(frozen=True)
class ForcedTokens:
    """``generate``'s ForcedBOS / ForcedEOS processors: at step ``at[i]`` of input i, every token
    but ``token_ids`` becomes -inf (after log_softmax a single forced id has logprob 0, the 0
    ``generate`` gives it).

    Attributes:
        token_ids: int64 ``[E]``, the forced id (or every eos id).
        at: int64 ``[N]``, the step at which each input's rows are forced.
    """

    token_ids: np.ndarray
    at: np.ndarray
    needs_history = False

    @property
    def last_step(self) -> int:
        return int(self.at.max())

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows = np.flatnonzero(self.at[ctx.row_input] == ctx.step)
        if rows.size == 0:
            return logits
        return ctx.backend.keep_only(logits, np.repeat(rows, self.token_ids.size), np.tile(self.token_ids, rows.size))
