"""constrained_beam_search on inputs without constraints: documented to be searched as by
beam_search_batch, early stopping included; checked against the plain one-input reference of
tests/models.py, its results and its number of model calls."""

from __future__ import annotations

import pytest

from beamsearch import constrained_beam_search
from models import SequenceModel, random_table, reference_batch

V, EOS = 5, 4


@pytest.mark.parametrize("seed", [1, 2, 7])
def test_an_input_without_constraints_stops_early_as_the_reference_does(seed):
    table = random_table(V, seed, eos=EOS, eos_shift=2.0)  # eos likely: early stops happen
    stopped_early = 0
    for prompt in ([1, 2], [3]):
        steps = []
        want = reference_batch(table, [prompt], eos=EOS, max_steps=6, beam=2, n_best=1, steps=steps)[0]
        model = SequenceModel(table)
        got = constrained_beam_search(model.step, model.init_state([prompt]), [prompt], constraints=[[]],
                                      eos_token_id=EOS, max_steps=6, beam_size=2, n_best=1)[0]
        assert [(tuple(h.tokens), h.finished) for h in got] == [(w[0], w[3]) for w in want]
        assert [h.logprob for h in got] == pytest.approx([w[1] for w in want], abs=1e-9)
        assert len(model.calls) == steps[0]
        stopped_early += steps[0] < 6
    assert stopped_early
