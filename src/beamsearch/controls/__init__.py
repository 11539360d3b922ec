"""The decoding controls of SPEC section 10, one module each, and the bundle the engine reads.

- several eos ids: :class:`beamsearch.core.select.Terminals` (every id is terminal for every row; the
  strategy finishes them);
- per-input length limits: ``max_steps [N]`` here, read by the engine's ``advance`` and by the
  batch strategy's early-stop bound;
- :mod:`.min_new_tokens`: no eos and no stop sequence at steps ``t <= m`` (a processor placed first);
- :mod:`.stop_sequences`: token sequences that finish a hypothesis like eos;
- :mod:`.prefix`: forced, scored first tokens (a mask after log_softmax).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from beamsearch.controls.stop_sequences import StopSequences


@dataclass(frozen=True)
class Controls:
    """Everything the engine applies around a strategy.

    Attributes:
        eos: int64 ``[E]``, the eos ids.
        max_steps: int64 ``[N]``, the most tokens each input generates.
        processors: applied in order to the ``[k, V]`` logits before log_softmax.
        masks: applied in order to the ``[k, V]`` log-probabilities after log_softmax.
        stops: stop sequences, or None.
        prompts: per input, its prompt tokens (kept in the history when a processor needs it).
        vocab_checks: ``(name, ids)`` pairs of token ids to check against ``[0, V)`` once V is known.
        input_of: None, or int64 ``[N]``: the input index the processors see for each input
            (``StepContext.row_input``; step search: the prompt an expansion belongs to).
    """

    eos: np.ndarray
    max_steps: np.ndarray
    processors: tuple[Any, ...] = ()
    masks: tuple[Any, ...] = ()
    stops: StopSequences | None = None
    prompts: Sequence[Sequence[int]] | None = None
    vocab_checks: tuple[tuple[str, Any], ...] = ()
    input_of: np.ndarray | None = None

    @property
    def keep_history(self) -> bool:
        return any(p.needs_history for p in (*self.processors, *self.masks))

    @property
    def reads_prompts(self) -> bool:
        """Whether a processor reads the prompts: through the history, or as the start of the row
        states it carries (``needs_prompt``; a caller's processor is read through its wrapper)."""
        return any(p.needs_history or getattr(getattr(p, "processor", p), "needs_prompt", False)
                   for p in (*self.processors, *self.masks))
