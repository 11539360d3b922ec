"""Teacher forcing: each input's one row follows its target, for ``score_sequences``.

The target token's processed log-probability is added whatever it is (``-inf`` when processing
masked it: that is the answer, not an error); the row ends after the target's last token,
finished when the target ends with an eos id or with a stop sequence completed after
``min_new_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores, accumulate
from beamsearch.strategies import Selection


@dataclass(frozen=True)
class Forced:
    """Attributes:
        targets: int64 ``[sum of lengths]``: the targets one after another.
        offset: int64 ``[N]``: where target i starts in ``targets``.
        lengths: int64 ``[N]``.
        finished: bool ``[N]``: whether each target counts as finished.
    """

    targets: np.ndarray
    offset: np.ndarray
    lengths: np.ndarray
    finished: np.ndarray

    def start(self, n_inputs: int) -> None:
        return None

    def select(self, state: None, scores: StepScores) -> tuple[Selection, None]:
        rows = np.arange(scores.beam.size)
        inputs = scores.beam.input
        token = self.targets[self.offset[inputs] + scores.step - 1]
        values = scores.backend.gather(scores.logp, rows, token)
        chosen = Candidates(rows, token, accumulate(scores, rows, values))
        last = self.lengths[inputs] == scores.step
        return Selection(chosen.take(~last), chosen.take(last), self.finished[inputs[last]]), None
