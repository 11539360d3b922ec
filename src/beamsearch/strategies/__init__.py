"""The strategy seam: a search mode is a :class:`Strategy`, one module each.

Per step the engine hands the strategy the step's scores (:class:`beamsearch.core.select.StepScores`:
``[k, V]`` processed log-probabilities, the live rows, the terminal extensions) and the strategy's
own state, a frozen value; the strategy returns a :class:`Selection` and its next state (both
defined in :mod:`beamsearch.core.protocols`, where the engine reads them). The
engine never branches on which strategy runs: it extends the kept rows, records what ended,
retires stopped inputs and reorders the model state.

Strategies: :mod:`.narrowing` (SPEC section 4: eos competes for a slot, the beam narrows),
:mod:`.batch` (SPEC section 6: finished outside the beam, lossless early stop), :mod:`.forced`
(teacher forcing, for ``score_sequences``). A new search mode is a new module here.
"""

from __future__ import annotations

from beamsearch.core.protocols import Selection as Selection
from beamsearch.core.protocols import Strategy as Strategy

__all__ = ["Selection", "Strategy"]
