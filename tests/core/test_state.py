"""select_state (SPEC section 2); take_state, concat_state, pad_axis and registered leaves (core/state.py)."""

from __future__ import annotations

import functools
from collections import OrderedDict, defaultdict
from typing import NamedTuple

import numpy as np
import pytest

from beamsearch import select_state
from beamsearch.core.state import (
    _dispatched_by,
    concat_state,
    copy_if_shared,
    has_registered_leaf,
    pad_axis,
    take_state,
)

try:
    import torch
except ImportError:
    torch = None


class Decoder(NamedTuple):
    h: np.ndarray
    feed: np.ndarray
    step: int


def test_select_state_keeps_the_structure():
    h = np.arange(12.0).reshape(3, 4)
    feed = np.array([10, 11, 12])
    state = {
        "dec": Decoder(h, feed, 7),
        "layers": [np.array([0, 1, 2]), (np.array([5, 6, 7]), "name")],
        "scalar": np.float64(3.0),
        "zero_d": np.array(9.0),
        "none": None,
    }
    idx = [2, 2, 0]
    out = select_state(state, idx)
    assert type(out) is dict and list(out) == list(state)
    assert type(out["dec"]) is Decoder and out["dec"].step == 7
    np.testing.assert_array_equal(out["dec"].h, h[[2, 2, 0]])
    np.testing.assert_array_equal(out["dec"].feed, [12, 12, 10])
    assert type(out["layers"]) is list and len(out["layers"]) == 2  # a list is a container
    np.testing.assert_array_equal(out["layers"][0], [2, 2, 0])
    assert type(out["layers"][1]) is tuple and out["layers"][1][1] == "name"
    np.testing.assert_array_equal(out["layers"][1][0], [7, 7, 5])
    assert out["scalar"] == 3.0 and out["zero_d"] is state["zero_d"] and out["none"] is None
    # the input is not modified
    np.testing.assert_array_equal(state["dec"].feed, [10, 11, 12])


def test_dict_class_and_object_array_leaf():
    od = OrderedDict(b=np.array([1, 2]), a=np.array([3, 4]))
    out = select_state(od, np.array([1]))
    assert type(out) is OrderedDict and list(out) == ["b", "a"]
    dd = defaultdict(list, x=np.array([1, 2]))
    out = select_state(dd, [0, 0])
    assert type(out) is defaultdict and out.default_factory is list
    rows = np.empty(2, dtype=object)
    rows[0], rows[1] = (1,), (1, 2)
    assert list(select_state(rows, [1, 0, 1])) == [(1, 2), (1,), (1, 2)]


@pytest.mark.parametrize("bad", [{np.float64(1.0)}, frozenset({1}), [1, {2}]])
def test_sets_raise_type_error(bad):
    with pytest.raises(TypeError, match="set"):
        select_state({"x": np.zeros(2), "bad": bad}, [0])


def test_register_a_cache_type():
    class Cache:
        def __init__(self, keys):
            self.keys = keys

    before = select_state(Cache(np.arange(3)), [0])
    assert isinstance(before, Cache) and before.keys.shape == (3,)  # unknown objects pass through

    @select_state.register(Cache)
    def _(cache, idx):
        return Cache(select_state(cache.keys, idx))

    out = select_state({"cache": Cache(np.arange(3))}, [2, 1])
    np.testing.assert_array_equal(out["cache"].keys, [2, 1])


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_torch_leaves_and_index_types():
    t = torch.arange(6.0).reshape(3, 2)
    for idx in ([2, 0], np.array([2, 0]), torch.tensor([2, 0])):
        out = select_state((t, np.array([7, 8, 9])), idx)
        assert isinstance(out[0], torch.Tensor) and out[0].device == t.device
        assert out[0].tolist() == [[4.0, 5.0], [0.0, 1.0]]
        assert out[1].tolist() == [9, 7]
    assert select_state(torch.tensor(5.0), [0]).item() == 5.0  # 0-d passes through


class CountingLeaf:
    """A state leaf that counts how often the search reorders it."""

    selects = 0

    def __init__(self, rows):
        self.rows = np.asarray(rows)


@select_state.register(CountingLeaf)
def _(leaf, idx):
    CountingLeaf.selects += 1
    return CountingLeaf(leaf.rows[np.asarray(idx)])


def test_the_engine_skips_identity_reorders():
    from beamsearch import beam_search_batch, greedy_decode

    def step(state, y_prev):  # token 1 always best; eos (0) never finite: parents are the identity
        logits = np.tile([-np.inf, 2.0, 0.0], (len(y_prev), 1))
        assert len(state.rows) == len(y_prev)
        return logits, state

    CountingLeaf.selects = 0
    greedy_decode(step, CountingLeaf([0]), 1, 0, 6)
    beam_search_batch(step, CountingLeaf([0, 1, 2]), [[1], [1], [1]], eos_token_id=0, max_steps=6, beam_size=1)
    assert CountingLeaf.selects == 0
    beam_search_batch(step, CountingLeaf([0, 1]), [[1], [1]], eos_token_id=0, max_steps=3, beam_size=2)
    # steps 1 and 2 change the rows (1 -> 2 rows, then parents [0, 0]); no reorder after the last step
    assert CountingLeaf.selects == 2


# State joins and selections at their edges, against hand-written values and the rules as their
# docstrings state them.


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


# concat_state, pad_axis and the registered-leaf checks on hand-made states: which leaves are
# arrays, which must be equal, what is copied, and each refusal's message.


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


def test_a_function_dispatched_by_a_singledispatch_is_taught_new_types_through_it():
    """The private decorator behind ``concat_state.register`` (it runs once, at import, so no call
    of the public functions reaches it again): the decorated function gets the dispatcher's own
    ``register``, ``dispatch`` and ``registry``, so a type registered through the function is
    the dispatcher's case for it, and the function's call (which asks the dispatcher) uses it."""
    @functools.singledispatch
    def dispatcher(states):
        return "default"

    @_dispatched_by(dispatcher)
    def joined(states):
        return dispatcher.dispatch(type(states[0]))(states)

    class Rows:
        pass

    @joined.register(Rows)
    def _(states):
        return f"{len(states)} Rows"

    assert joined([Rows(), Rows()]) == "2 Rows" and joined([1]) == "default"
    assert joined.dispatch(Rows) is dispatcher.dispatch(Rows) and joined.dispatch(int) is dispatcher.dispatch(int)
    assert joined.registry is dispatcher.registry and Rows in joined.registry
