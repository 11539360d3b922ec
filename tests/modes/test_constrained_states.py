"""The tracker-state limit of constrained search (strategies/constrained.py, MAX_STATES) at its
boundary, with the limit lowered so that hand-counted trackers reach it; the search itself is in
test_constrained.py."""

from __future__ import annotations

import pytest

import beamsearch.modes.constrained as mode
import beamsearch.strategies.constrained as strategy
from beamsearch.modes.constrained import constrained_beam_search
from models import SequenceModel, random_table


@pytest.mark.parametrize("ordered", [False, True])
def test_an_input_needing_exactly_max_states_is_searched_and_one_more_is_refused(monkeypatch, ordered):
    """One phrase of L distinct tokens has L + 1 tracker states by hand: its L partial matches
    (0 .. L-1 tokens of it matched, a token outside it back to 0 matched) and the accepting
    state. With the limit at 4, the phrase [1, 2, 3] (4 states) is searched and met; [1, 2, 3, 4]
    (5 states) is refused before any model call, naming the input and the limit, and advising
    ordered=True only where the constraints are unordered."""
    monkeypatch.setattr(strategy, "MAX_STATES", 4)
    monkeypatch.setattr(mode, "MAX_STATES", 4)
    model = SequenceModel(random_table(6, 0, eos=0))
    out = constrained_beam_search(model.step, model.init_state([[5]]), [[5]], constraints=[[[1, 2, 3]]],
                                  beam_size=2, ordered=ordered, eos_token_id=0, max_steps=6)
    tokens = out[0][0].tokens
    assert any(tokens[i : i + 3] == [1, 2, 3] for i in range(len(tokens)))
    model = SequenceModel(random_table(6, 0, eos=0))
    advice = "1 ordered constraints\\); use fewer or shorter ones" if ordered else \
        "1 unordered constraints\\); use fewer or ordered=True"
    with pytest.raises(ValueError, match=rf"^constraints\[0\] need more than 4 tracker states \({advice}$"):
        constrained_beam_search(model.step, model.init_state([[5]]), [[5]], constraints=[[[1, 2, 3, 4]]],
                                beam_size=2, ordered=ordered, eos_token_id=0, max_steps=6)
    assert model.calls == []
