"""The engine's records (Beam, Candidates, Ended, Trail) called directly, against hand-written
values."""

from __future__ import annotations

import numpy as np

from beamsearch.core.beam import Beam, Candidates, Ended, Trail


def test_beam_take_takes_every_field_by_row():
    beam = Beam(np.array([0, 0, 1]), np.array([-1.0, -2.0, -3.0]), np.array([4, 5, 6]),
                np.array([[1, 4], [1, 5], [2, 6]]), np.array([[7], [8], [9]]),
                tags={"g": np.array([10, 11, 12])}, carried={7: np.array([20, 21, 22])})
    got = beam.take(np.array([2, 0, 0]))
    assert got.input.tolist() == [1, 0, 0] and got.logprob.tolist() == [-3.0, -1.0, -1.0]
    assert got.token.tolist() == [6, 4, 4] and got.history.tolist() == [[2, 6], [1, 4], [1, 4]]
    assert got.recent.tolist() == [[9], [7], [7]]
    assert got.tags["g"].tolist() == [12, 10, 10] and got.carried[7].tolist() == [22, 20, 20]
    bare = Beam(np.array([0]), np.array([0.0]), np.array([1]), None, None).take(np.array([0, 0]))
    assert bare.history is None and bare.recent is None and bare.tags is None and bare.carried is None


def test_candidates_join_keeps_tags_and_ended_empty_is_empty():
    one = Candidates(np.array([0]), np.array([3]), np.array([-1.0]), {"g": np.array([5])})
    two = Candidates(np.array([1, 2]), np.array([4, 5]), np.array([-2.0, -3.0]), {"g": np.array([6, 7])})
    alone = Candidates.join([one])
    assert alone.tags["g"].tolist() == [5] and alone.token.tolist() == [3]
    both = Candidates.join([one, two])
    assert both.parent.tolist() == [0, 1, 2] and both.logprob.tolist() == [-1.0, -2.0, -3.0]
    assert both.tags["g"].tolist() == [5, 6, 7]
    assert Candidates.join([one, Candidates(np.array([1]), np.array([4]), np.array([-2.0]))]).tags is None
    empty = Ended.empty()
    assert [getattr(empty, f).shape for f in Ended.__dataclass_fields__] == [(0,)] * 7


def test_trail_generated_walks_back_by_hand():
    """Call 2's rows have last tokens 7, 8 (both from row 0 of call 1); call 3's rows 9, 4, 5
    from rows 1, 0, 1 of call 2. Rows 0 and 2 of call 3 generated (8, 9) and (8, 5)."""
    trail = Trail()
    trail.add(np.array([7, 8]), np.array([0, 0]), np.array([-0.5, -0.7]))
    trail.add(np.array([9, 4, 5]), np.array([1, 0, 1]), np.array([-0.1, -0.2, -0.3]))
    got = trail.generated(np.array([0, 2]), 3)
    assert got.dtype == np.int64 and got.tolist() == [[8, 9], [8, 5]]
    assert trail.generated(np.array([1]), 1).shape == (1, 0)
