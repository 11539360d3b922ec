"""What every processor reads (``processors/_base.py``): a row's history suffix test by hand, and
the row states a search starts, refused by name outside a search."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.backends import backend_of
from beamsearch.processors._base import StepContext, history_suffix_matches


def test_history_suffix_matches_by_hand():
    history = np.array([[5, 1, 2], [-1, 2, 2], [1, 2, 1]], np.int64)  # 3 rows, 3 columns (-1: left padding)
    got = history_suffix_matches(history, (1, 2))
    assert got.dtype == np.bool_ and got.tolist() == [True, False, False]
    assert history_suffix_matches(history, (2,)).tolist() == [True, True, False]
    empty = history_suffix_matches(history, ())  # an empty prefix: every row
    assert empty.dtype == np.bool_ and empty.tolist() == [True, True, True]
    short = history_suffix_matches(history[:, :1], (1, 2))  # a prefix longer than the history: no row
    assert short.dtype == np.bool_ and short.tolist() == [False, False, False]
    wide = history_suffix_matches(np.zeros((2, 1), np.int64), (0, 0))  # 2 rows, 1 column
    assert wide.shape == (2,) and wide.dtype == np.bool_ and not wide.any()
    assert history_suffix_matches(np.zeros((0, 2), np.int64), (1,)).shape == (0,)


class Carrier:
    """A processor that carries a state per row."""


def test_row_states_outside_a_search_are_refused_by_name():
    ctx = StepContext(1, np.zeros((2, 0), np.int64), np.zeros(2, np.int64), backend_of(np.zeros(1)))
    message = ("Carrier carries a state per row that the search starts and advances: pass it in "
               "logits_processors= of a search, do not call it alone")
    with pytest.raises(ValueError) as err:
        ctx.row_states(Carrier())
    assert str(err.value) == message
    carrier = Carrier()
    ctx = StepContext(1, np.zeros((2, 0), np.int64), np.zeros(2, np.int64), backend_of(np.zeros(1)),
                      {id(carrier): "rows"})
    assert ctx.row_states(carrier) == "rows"
    with pytest.raises(ValueError, match="^Carrier carries"):
        ctx.row_states(Carrier())  # another object of the class: not started


ROWS = {3: [3.0, 2.9, -9.0, -9.0, -9.0], 1: [-9.0, 9.0, -9.0, -9.0, 9.0]}  # after any other token: flat


def widening(after):
    """A model whose vocabulary changes between calls: V = 5 for the first ``after`` calls, 6 then.
    From the prompt [3], greedy takes 0 (then a flat row at every step); 1 then 1 then eos is far
    likelier, so exact search goes on past its greedy seed."""
    calls = []

    def step(state, y_prev):
        calls.append(len(y_prev))
        rows = np.array([ROWS.get(int(y), [0.0] * 5) for y in y_prev])
        return (rows if len(calls) <= after else np.pad(rows, ((0, 0), (0, 1)), constant_values=-9.0)), state
    return step


@pytest.mark.parametrize("search, after", [("beam_search_batch", 1), ("exact_search", 1), ("exact_search", 5)])
def test_logits_whose_vocabulary_changes_between_calls_are_refused(search, after):
    # exact search: at its greedy seed's second call, or at the first call of the branch and bound
    # that follows the seed's calls (5 of one row each here, counted by running it)
    import beamsearch
    from beamsearch.modes.exact import exact_search
    fn = exact_search if search == "exact_search" else beamsearch.beam_search_batch
    kw = dict(seed_beam=1) if search == "exact_search" else dict(beam_size=2)
    with pytest.raises(ValueError, match=r"logits V changed between calls: was 5, got shape \(\d+, 6\)"):
        fn(widening(after), np.zeros((1, 1)), [[3]], eos_token_id=4, max_steps=4, min_new_tokens=3, **kw)
