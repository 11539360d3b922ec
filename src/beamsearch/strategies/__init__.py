"""The strategy seam: a search mode is a :class:`Strategy`, one module each.

Per step the engine hands the strategy the step's scores (:class:`beamsearch.core.select.StepScores`:
``[k, V]`` processed log-probabilities, the live rows, the terminal extensions) and the strategy's
own state, a frozen value; the strategy returns a :class:`Selection` and its next state. The
engine never branches on which strategy runs: it extends the kept rows, records what ended,
retires stopped inputs and reorders the model state.

Strategies: :mod:`.narrowing` (SPEC section 4: eos competes for a slot, the beam narrows),
:mod:`.batch` (SPEC section 6: finished outside the beam, lossless early stop), :mod:`.forced`
(teacher forcing, for ``score_sequences``). A new search mode is a new module here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores


@dataclass(frozen=True)
class Selection:
    """What a strategy keeps at one step.

    Attributes:
        live: the next live rows, input-major, in rank order within each input.
        ended: the hypotheses that end at this step, in production order.
        ended_finished: bool ``[len(ended)]``: which of them are finished (ended by eos or a stop
            sequence); the rest end unfinished.
        stop: bool ``[N]``: inputs that stop now (their live rows end unfinished).
    """

    live: Candidates
    ended: Candidates
    ended_finished: np.ndarray | bool
    stop: np.ndarray | None = None


class Strategy(Protocol):
    """A selection rule. ``start`` gives the state before step 1; ``select`` never mutates it."""

    def start(self, n_inputs: int) -> Any: ...

    def select(self, state: Any, scores: StepScores) -> tuple[Selection, Any]: ...
