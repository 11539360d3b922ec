"""Catalogue files and inputs checked before any search: a saved catalogue's arrays (each field
damaged by hand from a good file, the error naming the file and the field), text files (UTF-8,
ASCII decimal ids only), inputs that are not a catalogue (named with their value), and the
warning when the longest entry and eos do not fit the new tokens a search allows.

Oracles: every damaged file is a good trie written out with one field changed by hand (the trie
of the entries [3, 1], [3, 2], [5]: nodes 0 root, 1 '3', 2 '5', 3 '3 1', 4 '3 2'; first
[0, 2, 4, 4, 4, 4], token [3, 5, 1, 2], ends [0, 0, 1, 1, 1]); the depth of a catalogue is its
longest entry's length, read off the entries.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from beamsearch.processors import Catalogue
from beamsearch.processors.trie import FORMAT

ENTRIES = [[3, 1], [3, 2], [5]]
GOOD = {"first": np.array([0, 2, 4, 4, 4, 4]), "token": np.array([3, 5, 1, 2], np.int32),
        "ends": np.array([0, 0, 1, 1, 1], np.uint8), "eos": np.array([0])}


def test_the_hand_written_trie_is_the_one_save_writes(tmp_path):
    from safetensors import safe_open

    Catalogue(ENTRIES, 0).save(tmp_path / "c.safetensors")
    with safe_open(str(tmp_path / "c.safetensors"), framework="numpy") as f:
        assert {name: f.get_tensor(name).tolist() for name in GOOD} == {k: v.tolist() for k, v in GOOD.items()}
        assert f.metadata() == {"format": FORMAT, "width": "6"}


def saved(tmp_path, width="6", good=GOOD, **fields):
    """``good``'s file (the good trie's by default) with ``fields`` replaced (None: left out) and
    metadata width ``width``."""
    from safetensors.numpy import save_file

    arrays = {k: v for k, v in {**good, **fields}.items() if v is not None}
    path = tmp_path / "c.safetensors"
    save_file(arrays, str(path),
              metadata={"format": FORMAT, "width": width} if width is not None else {"format": FORMAT})
    return path


DAMAGED = [
    # children out of order: node 1's tokens 2 then 1 (the lookup would never find '3 1')
    ({"token": np.array([3, 5, 2, 1])}, "6", "token", "must be ascending and distinct among a node's children; node 1 "
                                                     "has 2 then 1"),
    ({"token": np.array([3, 5, 1, 1])}, "6", "token", "node 1 has 1 then 1"),  # a repeated child
    ({}, "4", "token", "must hold ids in [0, width) = [0, 4); got ids from 1 to 5"),  # width below the largest id
    ({"token": np.array([3, -5, 1, 2])}, "6", "token", "got ids from -5 to 3"),
    ({}, "x", "width", "(metadata) must be a positive integer"),
    ({}, None, "width", "(metadata) must be a positive integer, one more than the largest token id; got None"),
    ({}, "0", "width", "got '0'"),
    ({"first": np.array([1, 2, 4, 4, 4, 4])}, "6", "first", "must rise from 0 to the edge count 4"),
    ({"first": np.array([0, 3, 2, 4, 4, 4])}, "6", "first", "never decrease"),
    ({"first": np.array([0, 2, 4, 4, 4, 9])}, "6", "first", "must rise from 0 to the edge count 4"),
    ({"first": np.array([0, 2, 4, 4, 4])}, "6", "first", "one offset per node and one more (6)"),
    # edge e leads to node e + 1: node 2 given edges 1..3 leads to itself by edge 1 (a loop)
    ({"first": np.array([0, 1, 1, 4, 4, 4])}, "6", "first", "makes edge 1 of node 2 lead to node 2, not after it"),
    # node 2 given edges 0, 1: node 1 hangs below node 2 and node 2 below itself; the root reaches nothing
    ({"first": np.array([0, 0, 0, 2, 4, 4])}, "6", "first", "makes edge 0 of node 2 lead to node 1, not after it"),
    ({"ends": np.array([0, 0, 1, 1, 2], np.uint8)}, "6", "ends", "must hold 0 or 1 for each node"),
    ({"ends": np.array([1, 0, 1, 1, 1], np.uint8)}, "6", "ends", "marks the root as an entry"),
    ({"ends": np.array([0, 0, 1, 0, 1], np.uint8)}, "6", "ends",
     "leaves node 3 with no child and no entry ending there"),
    ({"eos": np.array([-1])}, "6", "eos", "must hold one or more ids >= 0"),
    ({"token": np.array([[3, 5, 1, 2]])}, "6", "token", "must be a 1-D array of integers; got shape (1, 4)"),
    ({"first": np.array([0.0, 2, 4, 4, 4, 4])}, "6", "first", "dtype float64"),
]


@pytest.mark.parametrize("fields, width, field, why", DAMAGED)
def test_a_damaged_saved_catalogue_names_the_file_and_the_field(tmp_path, fields, width, field, why):
    path = saved(tmp_path, width, **fields)
    for load in (Catalogue.load, Catalogue.from_file):
        with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))}: field {field!r} .*"
                                             + re.escape(why)):
            load(path)


def test_a_saved_catalogue_without_a_field_is_named(tmp_path):
    path = saved(tmp_path, ends=None)
    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))} has no field 'ends'"):
        Catalogue.load(path)
    assert sorted(Catalogue.load(saved(tmp_path)).trie.items()) == [(3, 1), (3, 2), (5,)]  # the good one loads


@pytest.mark.parametrize("line", ["+7", "3 +7", "-1", "\u0663", "3 \u0661\u0662", "7\u00b2", "0x10", "1_000", "7.0"])
def test_a_text_catalogue_takes_ascii_decimal_ids_only(tmp_path, line):
    """int() reads '+7', '-1', Arabic-Indic digits and '1_000'; none is an id as a line of ids is written."""
    path = tmp_path / "c.txt"
    path.write_text(f"3 4\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))} line 2 is not token ids "
                                         f"separated by spaces: {re.escape(repr(line))}$"):
        Catalogue.from_file(path, 0)
    path.write_text("3 4\n\t12  7 \n", encoding="utf-8")
    assert sorted(Catalogue.from_file(path, 0).trie.items()) == [(3, 4), (12, 7)]


def test_a_text_catalogue_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"3 4\n5 \xff\n")
    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))} is not UTF-8 text \\(byte 6\\) "
                                         "nor a saved catalogue$"):
        Catalogue.from_file(path, 0)


def test_inputs_that_are_not_a_catalogue_name_the_value():
    for shape in ((3, 0), (1, 0)):  # one entry of no token is refused as three are
        with pytest.raises(ValueError, match=r"^outputs as an array \[M, L\] must have L >= 1 "
                                             r"\(every entry is non-empty\); "
                                             rf"got shape \({shape[0]}, 0\)$"):
            Catalogue(np.zeros(shape, int), 0)
    with pytest.raises(ValueError, match="^outputs must hold at least one token-id sequence; got an empty catalogue$"):
        Catalogue(np.zeros((0, 0), int), 0)
    for entries in ([[3, True]], [[True]], [[3, np.True_]], [[4], [3, False]]):
        bad = next((i, j) for i, e in enumerate(entries) for j, t in enumerate(e) if isinstance(t, (bool, np.bool_)))
        with pytest.raises(TypeError, match=rf"^outputs\[{bad[0]}\]\[{bad[1]}\] must be an integer; got "
                                            r"(np\.)?(True|False)_? of type bool$"):
            Catalogue(entries, 0)
    for value in ({1: [1, 2]}, {(1, 2), (3,)}, (e for e in [[1]])):
        with pytest.raises(TypeError, match=r"^outputs must be a sequence of token-id sequences; got "):
            Catalogue(value, 0)
    with pytest.raises(TypeError, match=r"^outputs\[1\] must be a sequence of token ids \(in order\); got \{2, 3\}$"):
        Catalogue([[1], {2, 3}], 0)


def test_the_depth_is_the_longest_entry():
    for entries in (ENTRIES, [[1]], [[1, 2, 3, 4, 5, 6], [2], [3, 4]], [[9] * 40, [8] * 39]):
        assert Catalogue(entries, 0).trie.depth == max(map(len, entries))


def test_the_cut_warning_names_both_numbers():
    cat = Catalogue([[1, 2, 3, 4], [5]], 0)  # 4 tokens, 5 steps with eos
    assert cat.cut_warning(5, "max_steps") is None
    assert cat.cut_warning(4, "max_new_tokens") == (
        "the catalogue's longest entry has 4 tokens, 5 with its eos, but max_new_tokens is 4: an output that follows "
        "an entry of 4 tokens or more ends unfinished, cut to a prefix of it (not an entry); set max_new_tokens to at "
        "least 5")


def test_decode_records_warn_once_when_the_catalogue_does_not_fit(tmp_path):
    """The toy model (eos 2): entries of 6 and 1 tokens with max_steps 4: one warning naming 6 and 4,
    and the outputs along the long entry are unfinished prefixes (what the warning says)."""
    from beamsearch import corpus
    from beamsearch.corpus import Line, decode_records

    path = tmp_path / "c.txt"
    path.write_text("3 4 5 6 7 8\n5\n", encoding="utf-8")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        records = list(decode_records(corpus.toy_model(), [Line(0, "hello"), Line(1, "x")], catalogue=str(path),
                                      max_steps=4, beam_size=3, n_best=3))
    assert [str(w.message) for w in seen] == [Catalogue([[3, 4, 5, 6, 7, 8]], 2).cut_warning(4, "max_steps")]
    assert "has 6 tokens, 7 with its eos, but max_steps is 4" in str(seen[0].message)
    for r in records:
        for h in r["nbest"]:
            assert (h["finished"] and h["tokens"] == [5, 2]) or (not h["finished"] and h["tokens"] == [3, 4, 5, 6])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        list(decode_records(corpus.toy_model(), [Line(0, "hello")], catalogue=str(path), max_steps=7, beam_size=2))
    assert seen == []


def test_a_saved_catalogue_read_as_a_file_takes_the_given_eos_ids(tmp_path):
    """``from_file`` on a saved catalogue: eos_token_id replaces the saved eos ids (as ``load``
    does), None keeps them; at the end of entry [5] the allowed tokens are exactly the eos ids."""
    path = saved(tmp_path)  # saved with eos [0]
    for eos, allowed in ((None, {0}), (7, {7}), ([7, 8], {7, 8})):
        cat = Catalogue.from_file(path, eos_token_id=eos)
        rows, cols = cat.allowed_pairs(cat.trie.walk(np.array([[5]])))
        assert set(cols.tolist()) == allowed and rows.tolist() == [0] * len(allowed)


def test_a_text_catalogue_that_cannot_be_read_names_the_file(tmp_path):
    """The reader of text catalogues, on a path it cannot read (a folder): the file and the
    reason are named. Called directly: through ``from_file`` the same path fails earlier, when its
    first bytes are read to recognize a saved catalogue, so this branch is reached only when the
    file becomes unreadable between the two reads."""
    from beamsearch.processors.catalogue import _text_entries

    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(tmp_path)))} cannot be read: "
                                         "Is a directory$"):
        _text_entries(tmp_path)
