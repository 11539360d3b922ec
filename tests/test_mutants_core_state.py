"""State joins and selections at their edges, the engine's records (Beam, Candidates, Ended,
Trail) and the rules that route a step's ranking (grouped, sparse), against hand-written values
and the rules as their docstrings state them."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.core.beam import Beam, Candidates, Ended, Trail
from beamsearch.core.select import (GROUPED_MAX_ELEMENTS, SPARSE_FRACTION, WIDE_FRACTION, StepScores,
                                    Terminals, grouped, sparse)
from beamsearch.core.state import (concat_state, copy_if_shared, has_registered_leaf, pad_axis, select_state,
                                   take_state)
from beamsearch.backends.numpy_backend import NumpyBackend

try:
    import torch
except ImportError:
    torch = None


# --- concat_state and select_state ------------------------------------------------------------


def test_concat_state_error_messages_name_what_differs():
    with pytest.raises(ValueError, match=r"^concat_state needs at least one state; got none$"):
        concat_state([])
    with pytest.raises(ValueError, match=r"^concat_state: states\[1\] is a list of length 2 where states\[0\] is a "
                                         r"tuple of length 2; every state must have the same structure \(tuple\)$"):
        concat_state([(np.zeros(1), 1), [np.zeros(1), 1]])
    with pytest.raises(ValueError, match=r"states\[0\] has shape \(1, 3\), states\[1\] has \(2, 4\)\. A leaf whose "
                                         r"length differs between inputs \(a KV cache, an encoder memory\) needs a "
                                         r"registered concatenation that pads it: see pad_axis$"):
        concat_state([np.zeros((1, 3)), np.zeros((2, 4))])


class _ShapeNotASequence:
    shape = 5  # a ``shape`` without a length: not an array leaf

    def __eq__(self, other):
        return isinstance(other, _ShapeNotASequence)

    __hash__ = object.__hash__


class _ClassWithShape:
    shape = (2, 3)  # the class itself is a leaf (a type is never an array)


class _NoEquality:
    def __eq__(self, other):
        raise RuntimeError("no ==")

    __hash__ = object.__hash__


def test_concat_state_keeps_equal_non_array_leaves_once():
    """Leaves that are not arrays (a shape without a length, a class, a float, a 0-d array) are
    kept once when equal in every state, whatever object holds them; unequal or incomparable ones
    are a ValueError."""
    a, b = _ShapeNotASequence(), _ShapeNotASequence()
    x, y = float("3.5"), float("7.0") / 2  # equal, not the same object
    assert x is not y
    states = [{"s": a, "c": _ClassWithShape, "f": x, "z": np.array(2.0), "rows": np.array([[1, 2]])},
              {"s": b, "c": _ClassWithShape, "f": y, "z": np.array(2.0), "rows": np.array([[3, 4], [5, 6]])}]
    joined = concat_state(states)
    assert joined["s"] is a and joined["c"] is _ClassWithShape and joined["f"] is x
    assert float(joined["z"]) == 2.0 and joined["rows"].tolist() == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(ValueError, match="a leaf that is not an array must be equal in every state"):
        concat_state([np.array(2.0), np.array(3.0)])
    with pytest.raises(ValueError, match="a leaf that is not an array must be equal in every state"):
        concat_state([_NoEquality(), _NoEquality()])
    if torch is not None:  # a 0-d tensor beside a 0-d numpy array of the same value
        assert float(concat_state([torch.tensor(4.0), np.array(4.0)])) == 4.0
        with pytest.raises(ValueError, match="must be equal in every state"):
            concat_state([torch.tensor(4.0), np.array(5.0)])


def test_registered_leaves_are_found_in_lists_and_dicts_and_copied():
    """has_registered_leaf finds a registered list subclass itself and a registered leaf among a
    dict's values; copy_if_shared copies only then (a plain state comes back as it is)."""

    class Rows(list):
        pass

    @select_state.register(Rows)
    def _(rows, idx):
        return Rows([rows[i] for i in np.asarray(idx)])

    @concat_state.register(Rows)
    def _(states):
        return Rows([r for s in states for r in s])

    holder = Rows([np.zeros(2), np.zeros(2)])
    assert has_registered_leaf(holder)
    assert has_registered_leaf({"cache": holder, "x": np.zeros(2)})
    assert not has_registered_leaf({"x": np.zeros(2), "y": [np.zeros(2)]})
    plain = {"x": np.arange(3)}
    assert copy_if_shared(plain) is plain
    copied = copy_if_shared({"cache": holder})
    assert copied["cache"] is not holder and len(copied["cache"]) == 2
    assert take_state(plain, np.array([2, 0]))["x"].tolist() == [2, 0]


def test_pad_axis_by_hand_and_its_axis_range():
    a, b = np.array([[1, 2]]), np.array([[3, 4, 5, 6]])
    right = pad_axis([a, b], 1, 0)
    left = pad_axis([a, b], -1, 9, side="left")
    assert right[0].tolist() == [[1, 2, 0, 0]] and right[1] is b
    assert left[0].tolist() == [[9, 9, 1, 2]] and left[1] is b
    with pytest.raises(ValueError, match=r"^axis must be in \[1, 2\) \(axis 0 holds the rows\); got 2$"):
        pad_axis([a, b], 2, 0)
    with pytest.raises(ValueError, match=r"got 0$"):
        pad_axis([a, b], 0, 0)


# --- the engine's records -----------------------------------------------------------------------


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


# --- the routing rules ----------------------------------------------------------------------------


def test_grouped_is_the_documented_rule_at_its_edges():
    """Grouped ranking when some input has several rows (groups < k) and either k*V is at most
    GROUPED_MAX_ELEMENTS or the beam is wide: WIDE_FRACTION * min(m, V) >= V."""
    v = 1000
    small_k = GROUPED_MAX_ELEMENTS // v  # k*V <= the limit
    assert grouped(small_k, small_k - 1, v, 1)
    assert not grouped(small_k, small_k, v, 1)  # one row per input: never grouped
    big_k = small_k + 1  # k*V just over the limit
    assert not grouped(big_k, 1, v, v // WIDE_FRACTION - 1)  # narrow beam
    assert grouped(big_k, 1, v, v // WIDE_FRACTION)  # exactly V / WIDE_FRACTION: wide
    assert grouped(big_k, 1, v, 10 * v)  # m beyond V counts as V
    exact = GROUPED_MAX_ELEMENTS // 2  # k = 2 rows of V = exact: k*V == the limit
    assert grouped(2, 1, exact, 1) and not grouped(2, 1, exact + 1, 1)


def _scores(k: int, vocab: int, support_pairs: int, dtype=np.float64) -> StepScores:
    beam = Beam(np.zeros(k, np.int64), np.zeros(k), np.zeros(k, np.int64), None, None)
    rows = np.arange(support_pairs) % k
    tokens = np.arange(support_pairs) // k
    return StepScores(NumpyBackend(), np.zeros((k, vocab), dtype), beam,
                      Terminals(np.array([0]), np.zeros(0, np.int64), np.zeros(0, np.int64)), 1, (rows, tokens))


def test_sparse_is_the_documented_rule_at_its_edge():
    """A support is ranked alone when it holds at most k*V / SPARSE_FRACTION pairs."""
    k, v = 4, 16  # k*V = 64: at most 8 pairs
    limit = k * v // SPARSE_FRACTION
    assert sparse(_scores(k, v, limit)) and sparse(_scores(k, v, limit, np.float32))
    assert not sparse(_scores(k, v, limit + 1))
    no_support = _scores(k, v, 1)
    assert not sparse(StepScores(no_support.backend, no_support.logp, no_support.beam, no_support.terminals, 1))
