"""The trie's edges: a trie of nothing (its width, its steps), a single edge, tokens at and past
the width, ids past 2**40 (kept exactly through the build, the lookups and a save), the padding
after an item ignored, the saved file's dtypes, and the load messages in full.

Oracles, written here from the definitions: the entries themselves (``items()`` gives each back,
``step`` walks each), a plain dict of prefixes for the children, the format's documented dtypes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from beamsearch.processors.trie import FORMAT, Trie


def build(entries):
    """The trie of ``entries`` (lists of ids), padded with a large id that must be ignored."""
    longest = max(len(e) for e in entries)
    items = np.full((len(entries), longest + 1), 10**12, np.int64)
    for i, e in enumerate(entries):
        items[i, :len(e)] = e
    return Trie.build(items, np.array([len(e) for e in entries]))


def test_a_trie_of_nothing():
    """No item (zero rows, with or without columns): only the root, width 1, every step off."""
    for items in (np.zeros((0, 3), np.int64), np.zeros((0, 0), np.int64)):
        trie = Trie.build(items, np.zeros(0, np.int64))
        assert trie.width == 1 and trie.n_nodes == 1 and trie.n_items == 0 and trie.items() == []
        assert trie.first.tolist() == [0, 0] and trie.token.dtype == np.int64 and trie.token.shape == (0,)
        got = trie.step(np.array([0, -1, 0]), np.array([0, 1, 2]))
        assert got.dtype == np.int64 and got.tolist() == [-1, -1, -1]
        assert trie.ending(np.array([0, -1])).tolist() == [False, False]


def test_a_single_edge_and_tokens_at_the_width():
    """[[5]]: root -5-> node 1 (an end). [[1, 0], [2]]: width 3; token 3 from the root is past
    the width (its key 0 * 3 + 3 equals node 1's edge by 0, 1 * 3 + 0): no child."""
    one = build([[5]])
    assert one.width == 6 and one.step(np.array([0, 0, 1]), np.array([5, 4, 5])).tolist() == [1, -1, -1]
    assert one.ending(np.array([0, 1, -1])).tolist() == [False, True, False]
    two = build([[1, 0], [2]])
    assert two.width == 3
    assert two.step(np.array([0, 0, 1]), np.array([3, 1, 0])).tolist() == [-1, 1, 3]


def test_ids_past_2_to_the_40_are_exact():
    """9000 entries (first id i, then the largest id 2**40 - 1): a parent numbered in the
    thousands times the width 2**40 is past float64's exact integers, so the parents must come
    from integer division. Each entry walks to an end; the children of node 8999 are that id."""
    big = 2**40 - 1
    entries = [[i, big] for i in range(1, 9001)]
    trie = build(entries)
    assert trie.width == big + 1
    node = trie.walk(np.array(entries))
    assert trie.ending(node).all()
    rows, cols = trie.children(trie.walk(np.array([[8999]])))
    assert rows.tolist() == [0] and cols.tolist() == [big]
    assert sorted(trie.items())[-3:] == [(8998, big), (8999, big), (9000, big)]


def test_save_keeps_ids_and_writes_the_documented_dtypes(tmp_path):
    """ids fitting int32 are stored as int32, wider ones as int64; ends as uint8, first as int64;
    a trie with ids past 2**31 loads back exactly."""
    from safetensors import safe_open

    for entries, token_dtype in (([[1, 2], [3]], np.int32), ([[2**40, 1], [3]], np.int64)):
        trie = build(entries)
        trie.save(tmp_path / "t.safetensors", np.array([0]))
        with safe_open(str(tmp_path / "t.safetensors"), framework="numpy") as f:
            assert f.metadata()["format"] == FORMAT
            assert [f.get_tensor(n).dtype for n in ("first", "token", "ends")] == [np.int64, token_dtype, np.uint8]
        back, eos = Trie.load(tmp_path / "t.safetensors")
        assert sorted(back.items()) == sorted(tuple(e) for e in entries) and eos.tolist() == [0]


def test_load_messages(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "other.safetensors"
    save_file({"x": np.zeros(3)}, str(path), metadata={"format": "other/1"})
    with pytest.raises(ValueError, match=rf"^catalogue file {re.escape(repr(str(path)))} is not a saved catalogue "
                                         rf"\(its safetensors metadata has format 'other/1', not {re.escape(repr(FORMAT))}\)$"):
        Trie.load(path)
    text = tmp_path / "t.txt"
    text.write_text("1 2\n")
    with pytest.raises(ValueError, match=rf"^catalogue file {re.escape(repr(str(text)))} cannot be read as safetensors: "):
        Trie.load(text)
