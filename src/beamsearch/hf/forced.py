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
    but ``token_ids`` becomes -inf.

    Before log_softmax (the library's rule, greedy decoding) a single forced id then has logprob
    0, the 0 ``generate`` gives it. ``zero=True`` sets the forced ids' entries to 0 as
    ``generate``'s processors do, for scores processed after log_softmax (``mode="transformers"``,
    whose beam search does not renormalize: without it the forced token would keep the model's
    log-probability), and for ``generate``'s greedy ``scores``, the processed logits.

    Attributes:
        token_ids: int64 ``[E]``, the forced id (or every eos id).
        at: int64 ``[N]``, the step at which each input's rows are forced.
        zero: set the forced entries to 0 (``generate``'s value) instead of keeping them.
    """

    token_ids: np.ndarray
    at: np.ndarray
    zero: bool = False
    needs_history = False

    @property
    def last_step(self) -> int:
        return int(self.at.max())

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows = np.flatnonzero(self.at[ctx.row_input] == ctx.step)
        if rows.size == 0:
            return logits
        rows, cols = np.repeat(rows, self.token_ids.size), np.tile(self.token_ids, rows.size)
        kept = ctx.backend.keep_only(logits, rows, cols)
        return ctx.backend.put(kept, rows, cols, 0.0) if self.zero else kept
