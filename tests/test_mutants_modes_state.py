"""concat_state, pad_axis and the registered-leaf checks on hand-made states: which leaves are
arrays, which must be equal, what is copied, and each refusal's message."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

from beamsearch.core.state import (concat_state, copy_if_shared, has_registered_leaf, pad_axis, select_state,
                                   take_state)


class ShapedClass:
    shape = (2,)  # a class attribute: the class itself is no array


class OddShape:
    shape = 5  # no length: not an array

    def __eq__(self, other):
        return isinstance(other, OddShape)

    __hash__ = object.__hash__


class NoEquality:
    def __eq__(self, other):
        raise RuntimeError("no ==")

    __hash__ = object.__hash__


class Cache(NamedTuple):  # a state type taught to select_state: it holds rows
    rows: np.ndarray


@select_state.register(Cache)
def _select_cache(state, idx):
    return Cache(state.rows[np.asarray(idx)])


@concat_state.register(Cache)
def _concat_cache(states):
    return Cache(np.concatenate([s.rows for s in states]))


def test_non_array_leaves_are_kept_once_when_equal():
    a, b = np.arange(2), np.arange(3)
    joined = concat_state([(a, ShapedClass, OddShape(), "ab" + str(1), np.array(3.0)),
                           (b, ShapedClass, OddShape(), "".join(["a", "b", "1"]), np.array(3.0))])
    assert joined[0].tolist() == [0, 1, 0, 1, 2]
    assert joined[1] is ShapedClass and isinstance(joined[2], OddShape) and joined[3] == "ab1"
    assert float(joined[4]) == 3.0


@pytest.mark.parametrize("states, message", [
    ([], r"^concat_state needs at least one state; got none$"),
    ([(np.zeros((1, 2)),), (np.zeros((1, 3)),)],
     r"^concat_state: array leaves must agree beyond axis 0; states\[0\] has shape \(1, 2\), states\[1\] has "
     r"\(1, 3\)\. A leaf whose length differs between inputs \(a KV cache, an encoder memory\) needs a registered "
     r"concatenation that pads it: see pad_axis$"),
    ([(1, 2), [1, 2]], r"^concat_state: states\[1\] is a list of length 2 where states\[0\] is a tuple of length 2; "
                       r"every state must have the same structure \(tuple\)$"),
    ([(np.zeros(1), np.array(3.0)), (np.zeros(1), np.array(4.0))], r"concat_state"),
    ([(np.zeros(1), NoEquality()), (np.zeros(1), NoEquality())], r"concat_state"),
])
def test_concat_state_refusals_by_name(states, message):
    with pytest.raises(ValueError, match=message):
        concat_state(states)


def test_registered_leaves_are_found_and_copied_plain_states_are_not():
    plain = (np.arange(3), {"a": np.arange(3)})
    assert not has_registered_leaf(plain) and copy_if_shared(plain) is plain
    cache = Cache(np.arange(3))
    assert has_registered_leaf(cache) and has_registered_leaf({"c": cache}) and has_registered_leaf([1, cache])
    copied = copy_if_shared(cache)
    assert copied is not cache and copied.rows.tolist() == [0, 1, 2]
    assert take_state({"c": cache}, [2, 0])["c"].rows.tolist() == [2, 0] and cache.rows.tolist() == [0, 1, 2]


def test_pad_axis_by_hand():
    a, b = np.ones((1, 2)), np.ones((1, 3))
    right = pad_axis([a, b], 1, 0.0)
    assert right[0].tolist() == [[1.0, 1.0, 0.0]] and right[1] is b
    left = pad_axis([a, b], -1, 0.0, side="left")
    assert left[0].tolist() == [[0.0, 1.0, 1.0]]
    for axis in (0, 2, -2):
        with pytest.raises(ValueError, match=rf"^axis must be in \[1, 2\) \(axis 0 holds the rows\); got {axis}$"):
            pad_axis([a, b], axis, 0.0)
