"""generate's stopping rule in the TransformersBeam strategy (strategies/transformers_beam.py), on
hand-made ties; the search against the plain reference is in test_transformers_beam.py."""

from __future__ import annotations

import math

import pytest

from beamsearch import transformers_beam_search
from models import SequenceModel

PROBS = [0.4, 0.4, 0.2]  # eos 0 and token 1 tie; token 2 below


@pytest.mark.parametrize("early_stopping", [False, "never"])
def test_a_live_row_that_only_ties_the_worst_finished_score_stops_the_input(early_stopping):
    """Beam 1, alpha 0, every row [0.4, 0.4, 0.2] with eos 0: at step 1 eos (flat index 0) ranks
    first and finishes with score log 0.4; the best live row [1] has logprob log 0.4 too, so it
    cannot beat the worst kept score (generate's ``worst_score >= best attainable`` is done, a tie
    included): one model call, the result [0] finished at log 0.4 (by hand)."""
    model = SequenceModel(lambda prefix: [math.log(p) for p in PROBS])
    got = transformers_beam_search(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=4,
                                   beam_size=1, alpha=0.0, early_stopping=early_stopping)
    assert len(model.calls) == 1
    assert [(h.tokens, h.finished) for h in got[0]] == [([0], True)]
    assert got[0][0].logprob == pytest.approx(math.log(0.4), abs=1e-12)
