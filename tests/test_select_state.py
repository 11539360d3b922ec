"""select_state (SPEC section 2)."""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import NamedTuple

import numpy as np
import pytest

from beamsearch import select_state

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
