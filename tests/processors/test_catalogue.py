"""The catalogue's edges: a processor called alone (nodes walked from the generated tokens) and
inside a search (carried nodes, never the history), the support it leaves on the host and on a
device, the input forms at their limits (one entry, no entry, ids past 2**53, mixed integer
types) and every error message in full.

Oracles, written here from the definitions: a plain dict of prefixes (``prefix -> next tokens``,
eos where an entry ends) for every allowed set; the pair count ``p`` of the sparse rule counted
from that dict by hand (the support is left when ``p * SPARSE_FRACTION <= k * V``); the messages
as the docstrings state them.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from beamsearch import select_state
from beamsearch.backends import backend_of
from beamsearch.core.select import SPARSE_FRACTION
from beamsearch.processors import Catalogue, StepContext, catalogue
from beamsearch.processors.catalogue import TrieRows, on_accelerator
from beamsearch.processors.trie import Trie
from tests.processors.test_trie import prefix_sets  # the plain dict-of-prefixes oracle

torch = pytest.importorskip("torch")

EOS = 0


def finite_sets(out):
    """Each row's finite columns, as a set."""
    finite = np.isfinite(backend_of(out).to_numpy(out))
    return [set(np.flatnonzero(f).tolist()) for f in finite]


def pair_sets(pairs, k):
    rows, cols = (np.asarray(a) for a in pairs)
    return [set(cols[rows == r].tolist()) for r in range(k)]


def context(history, step, logits, carried=None):
    k = history.shape[0]
    return StepContext(step, history, np.zeros(k, np.int64), backend_of(logits), carried)


# ---- where the nodes come from -----------------------------------------------------------------


def test_called_alone_the_nodes_are_walked_from_the_generated_tokens():
    """No carried state: each row's allowed tokens are those of its last t - 1 history columns
    (the prompt columns before them ignored), on and off the catalogue."""
    entries = [[1, 2], [1, 3, 4], [2], [1]]
    allowed = prefix_sets(entries)
    cat = Catalogue(entries, EOS)
    # two prompt columns (9, 9 and -1 padding), then the t - 1 = 2 generated tokens
    history = np.array([[9, 9, 1, 3], [-1, 9, 1, 2], [9, 9, 2, 1], [9, 1, 1, 3]])
    logits = np.zeros((4, 10))
    got = finite_sets(cat(logits.copy(), context(history, 3, logits)))
    assert got == [allowed.get(tuple(h[2:]), set()) for h in history.tolist()]
    assert got == [{4}, {EOS}, set(), {4}]


def test_inside_a_search_the_carried_nodes_are_read_not_the_history():
    """A carried state decides (here it disagrees with the history on purpose): each row gets
    the children of its carried node."""
    entries = [[1, 2], [1, 3, 4], [2]]
    allowed = prefix_sets(entries)
    cat = Catalogue(entries, EOS)
    carried_paths = [(1,), (1, 3), (), (2,)]
    rows = TrieRows(cat.trie, np.array([cat.trie.walk(np.array([p], np.int64).reshape(1, -1))[0]
                                        for p in carried_paths]))
    history = np.full((4, 2), 7)  # off the catalogue: walking it would allow nothing
    logits = np.zeros((4, 8))
    ctx = context(history, 3, logits, carried={id(cat): rows, id(object()): None})
    got = finite_sets(cat(logits.copy(), ctx))
    assert got == [allowed[p] for p in carried_paths]
    assert got == [{2, 3}, {4}, {1, 2}, {EOS}]


def test_advance_moves_each_row_by_its_token():
    """From the root by (1, 2, 5): nodes (1,), (2,) and off; then (1,) by 3 is (1, 3)."""
    cat = Catalogue([[1, 3], [2]], EOS)
    rows = cat.start_rows(3).advance([1, 2, 5])
    nxt = rows.advance(np.array([3, 0, 1], np.int32))
    assert finite_sets(cat(np.zeros((3, 6)), context(np.zeros((3, 0), np.int64), 1, np.zeros((3, 6)),
                                                        {id(cat): rows}))) == [{3}, {EOS}, set()]
    assert finite_sets(cat(np.zeros((3, 6)), context(np.zeros((3, 0), np.int64), 1, np.zeros((3, 6)),
                                                        {id(cat): nxt}))) == [{EOS}, set(), set()]


# ---- the support left for the search -----------------------------------------------------------


def test_on_accelerator_reads_the_device_type():
    """True only for a device whose type is not "cpu"; no device (a list), a device without a
    type, numpy ("cpu") and CPU tensors are the host."""
    assert on_accelerator(SimpleNamespace(device=SimpleNamespace(type="cuda")))
    assert on_accelerator(torch.empty(2, 3, device="meta"))
    assert not on_accelerator([[0.0]])
    assert not on_accelerator(SimpleNamespace(device=object()))
    assert not on_accelerator(np.zeros((2, 3)))
    assert not on_accelerator(torch.zeros(2, 3))


def test_the_host_path_always_leaves_the_support():
    """Numpy logits, dense pairs (p * SPARSE_FRACTION > k * V): the support is still left, and
    it is the plain set's pairs. Root of [[1], [2], [3]]: p = 3 pairs, 3 * 8 = 24 > 1 * 4."""
    entries = [[1], [2], [3]]
    cat = Catalogue(entries, EOS)
    logits = np.zeros((1, 4))
    ctx = context(np.zeros((1, 0), np.int64), 1, logits)
    out = cat(logits, ctx)
    assert 3 * SPARSE_FRACTION > 1 * 4
    assert isinstance(ctx.support[0], np.ndarray) and pair_sets(ctx.support, 1) == [{1, 2, 3}]
    assert finite_sets(out) == [{1, 2, 3}]


@pytest.mark.parametrize("entries, vocab, left", [
    ([[1], [2]], 16, True),  # p = 2 pairs at the root of one row: 2 * 8 = 16 <= 1 * 16, the boundary
    ([[1], [2], [3]], 16, False),  # p = 3: 24 > 16
    ([[1]], 16, True),  # p = 1: 8 <= 16
])
def test_the_device_path_leaves_the_support_only_when_sparse(monkeypatch, entries, vocab, left):
    """Pairs computed on the logits' device (forced for a CPU tensor) go to the host only when
    the search ranks them alone: p * SPARSE_FRACTION <= k * V (k = 1 row, V = 16)."""
    assert SPARSE_FRACTION == 8  # the counts in the cases above
    monkeypatch.setattr(catalogue, "on_accelerator", lambda x: True)
    cat = Catalogue(entries, EOS)
    logits = torch.zeros(1, vocab)
    ctx = context(np.zeros((1, 0), np.int64), 1, logits)
    out = cat(logits, ctx)
    want = {e[0] for e in entries}
    assert finite_sets(out) == [want]
    if left:
        assert isinstance(ctx.support[0], np.ndarray) and pair_sets(ctx.support, 1) == [want]
    else:
        assert ctx.support is None


# ---- the input forms at their limits -----------------------------------------------------------


def test_one_entry_and_ids_past_2_to_the_53_are_kept_exactly():
    """A single entry is a catalogue; ids above 2**53 (not exact as float64) stay exact from
    lists, arrays and tensors."""
    big = 2**53 + 1
    assert Catalogue([[4]], EOS).trie.items() == [(4,)]
    assert Catalogue(Trie.build(np.array([[4]]), np.array([1])), EOS).trie.items() == [(4,)]
    for outputs in ([[big, 3]], np.array([[big, 3]]), torch.tensor([[big, 3]])):
        assert Catalogue(outputs, EOS).trie.items() == [(big, 3)]
    mixed = [[big, 3], np.array([big + 2], np.uint64)]  # mixed id types: checked entry by entry, still exact
    assert sorted(Catalogue(mixed, EOS).trie.items()) == [(big, 3), (big + 2,)]


def test_entries_of_mixed_integer_types_are_taken_one_by_one():
    """Entries whose ids do not share one signed type (int64 and uint64 arrays, uint8) are valid
    ids: the catalogue holds them; an uint64 id past int64 is refused, named."""
    cat = Catalogue([np.array([1, 2]), np.array([3], np.uint64), np.array([4, 5], np.uint8)], EOS)
    assert sorted(cat.trie.items()) == [(1, 2), (3,), (4, 5)]
    with pytest.raises(ValueError, match=r"^outputs\[0\]\[0\] must be in \[0, V\); got 9223372036854775808"):
        Catalogue([np.array([2**63], np.uint64)], EOS)


def test_an_uint64_array_id_past_int64_is_refused_as_given_not_wrapped():
    """An uint64 ``[M, L]`` array: an id past 2**63 - 1 is named with its own value (cast to int64 it
    would read negative; 2**64 - 1 would read as the pad -1 and end its row silently)."""
    for big, at in ((2**64 - 1, (0, 1)), (2**63 + 5, (1, 0))):
        items = np.array([[1, 2, 3], [4, 5, 6]], np.uint64)
        items[at] = big
        with pytest.raises(ValueError, match=rf"^outputs\[{at[0]}\]\[{at[1]}\] must be in \[0, V\); got {big}, "
                                             r"and no V "
                                             r"is larger than 2\*\*63 - 1$"):
            Catalogue(items, EOS)
    assert Catalogue(np.array([[1, 2], [3, 2**40]], np.uint64), EOS).trie.items() == [(1, 2), (3, 2**40)]


def test_ids_whose_trie_keys_would_pass_int64_are_refused():
    """The trie's lookup keys are ``node * (largest id + 1) + token`` in int64, which numpy would
    wrap silently: a trie whose nodes x (largest id + 1) reaches 2**63 is refused (2**63 - 1 after
    the root alone: 1 x 2**63; 2**53 in 512 entries: 1,025 nodes x (2**53 + 1) > 2**63), from lists,
    arrays and a trie's own arrays; below the limit the items are kept exactly, and repeated
    entries count once (the nodes, not the ids, bound the keys)."""
    big = 2**53
    many = [[i + 1, big] for i in range(512)]  # 1 + 512 + 512 nodes
    for outputs, nodes in (([[3, 2**63 - 1]], 1), (np.array([[3, 2**63 - 1]], np.uint64), 1), (many, 1025),
                           (np.array(many), 1025)):
        with pytest.raises(ValueError, match=rf"^outputs: a trie of {nodes} nodes over token ids up to \d+ "
                                             r"does not fit "
                                             r"its int64 keys \(nodes x \(largest id \+ 1\) must be < 2\*\*63\)"):
            Catalogue(outputs, EOS)
    few = many[:500]  # 1,001 x (2**53 + 1) < 2**63
    assert sorted(Catalogue(few, EOS).trie.items()) == sorted(map(tuple, few))
    assert Catalogue([[1, big]] * 2000, EOS).trie.items() == [(1, big)]  # 3 nodes, however many repeats
    trie = Catalogue(few, EOS).trie
    with pytest.raises(ValueError, match=r"^the trie: a trie of 1001 nodes over token ids up to 9223372036854775807 "):
        Trie(trie.first, trie.token, trie.ends, 2**63)
    one = Catalogue([[7]], EOS).trie  # 2 nodes: the limit is a width under 2**62
    assert Trie(one.first, one.token, one.ends, 2**62 - 1).step(np.array([1]), np.array([2**62 - 2])).tolist() == [-1]
    assert Trie(one.first, one.token, one.ends, 2**62 - 1).items() == [(7,)]
    with pytest.raises(ValueError, match=r"^the trie: a trie of 2 nodes over token ids up to 4611686018427387903 "):
        Trie(one.first, one.token, one.ends, 2**62)


def test_the_messages_in_full():
    with pytest.raises(ValueError, match=r"^outputs must hold at least one token-id sequence; got an empty catalogue$"):
        Catalogue([], EOS)
    with pytest.raises(ValueError, match=r"^outputs must hold at least one token-id sequence; got an empty catalogue$"):
        Catalogue(np.zeros((0, 3), np.int64), EOS)
    empty = Trie.build(np.zeros((0, 1), np.int64), np.zeros(0, np.int64))
    with pytest.raises(ValueError, match=r"^outputs must hold at least one token-id sequence; got an empty trie$"):
        Catalogue(empty, EOS)
    with pytest.raises(ValueError, match=r"^outputs holds an eos id \(3\) in some entry; the catalogue lists outputs "
                                         r"without eos \(eos is allowed where an entry ends\)$"):
        Catalogue(Catalogue([[1, 3]], EOS).trie, 3)
    # lists, an array, and entries of mixed id types (checked entry by entry)
    for outputs in ([[1, 2, 5], [3, 7]], np.array([[1, 2, 5], [3, 7, -1]]), [[1, 2, 5], np.array([3, 7], np.uint64)]):
        with pytest.raises(ValueError, match=r"^outputs\[1\] holds the eos id 7: \[3, 7\]; the catalogue lists outputs "
                                             r"without eos \(eos is allowed where an entry ends\)$"):
            Catalogue(outputs, 7)
    with pytest.raises(ValueError,
                       match=r"^outputs\[1\] has an id after pad_id -1: \[2, -1, 3\]; pad only ends a row$"):
        Catalogue(np.array([[1, -1, -1], [2, -1, 3]]), EOS)
    with pytest.raises(TypeError, match=r"^pad_id must be an integer; got 1.5 of type float$"):
        Catalogue(np.array([[1]]), EOS, pad_id=1.5)
    for outputs in (5, "ab"):
        with pytest.raises(TypeError, match=rf"^outputs must be a sequence of token-id sequences; got {outputs!r}$"):
            Catalogue(outputs, EOS)
    with pytest.raises(ValueError, match=r"^outputs\[1\] must be a non-empty sequence of token ids; got \[\]$"):
        Catalogue([[1], []], EOS)
    with pytest.raises(TypeError, match=r"^outputs\[1\] must be a sequence of token ids; got 3$"):
        Catalogue([[1, 2], 3], EOS)
    with pytest.raises(ValueError, match=r"^outputs\[1\]\[1\] must be in \[0, V\); got -4$"):
        Catalogue([[1, 2], [3, -4]], EOS)
    with pytest.raises(TypeError, match=r"^outputs\[0\]\[1\] must be an integer; got 2.5 of type float$"):
        Catalogue([[1, 2.5]], EOS)
    with pytest.raises(TypeError, match=r"^outputs\[0\]\[0\] must be an integer; got True of type bool$"):
        Catalogue([[True]], EOS)


def test_files_and_their_messages(tmp_path):
    """A saved catalogue is recognized by its content; a text file needs the eos ids; an
    unreadable file and a bad line are named with the path."""
    cat = Catalogue([[1, 2], [3]], EOS)
    cat.save(tmp_path / "saved.bin")
    assert sorted(Catalogue.from_file(tmp_path / "saved.bin").trie.items()) == [(1, 2), (3,)]
    missing = tmp_path / "missing.txt"
    with pytest.raises(ValueError, match=rf"^catalogue file {re.escape(repr(str(missing)))} cannot be read: "
                                         r"No such file or directory$"):
        Catalogue.from_file(missing)
    text = tmp_path / "c.txt"
    text.write_text("1 2\n\n3\n")
    assert sorted(Catalogue.from_file(text, EOS).trie.items()) == [(1, 2), (3,)]
    with pytest.raises(ValueError, match=r"^eos_token_id is required with a text catalogue file "
                                         rf"\({re.escape(repr(str(text)))}\)$"):
        Catalogue.from_file(text)
    text.write_text("1 2\nx 3\n")
    with pytest.raises(ValueError, match=rf"^catalogue file {re.escape(repr(str(text)))} line 2 is not token ids "
                                         r"separated by spaces: "
                                         r"'x 3'$"):
        Catalogue.from_file(text, EOS)


def test_plain_lists_take_the_one_pass_path(monkeypatch):
    """Lists of plain ids >= 0 of one signed type are flattened in one pass: the per-entry check
    (a Python call per entry, slow for a million entries) is not run; entries that are not plain
    (an uint64 array among int lists, a negative id) go through it, which names a bad one."""
    calls = []
    real = catalogue.check.token_list
    monkeypatch.setattr(catalogue.check, "token_list", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    entries = [[1, 2], [3], [2, 1, 4]]
    assert sorted(Catalogue(entries, EOS).trie.items()) == sorted(map(tuple, entries))
    assert Catalogue((np.array([5, 6]), [7]), EOS).trie.items() == [(7,), (5, 6)]  # numpy int rows are plain too
    assert Catalogue([[0, 1], [0]], 9).trie.items() == [(0,), (0, 1)]  # id 0 is a plain id (with another eos)
    assert calls == []
    assert sorted(Catalogue([[1, 2], np.array([3], np.uint64)], EOS).trie.items()) == [(1, 2), (3,)]
    assert calls == ["outputs[0]", "outputs[1]"]
    with pytest.raises(ValueError, match=r"^outputs\[1\]\[0\] must be in \[0, V\); got -3$"):
        Catalogue([[1], [-3]], EOS)


def test_trie_rows_count_their_rows():
    """The row states of a catalogue hold one node per row: ``len`` is the row count, through a
    start, a selection (a row taken twice counted twice) and an advance."""
    cat = Catalogue([[1, 2], [3]], EOS)
    rows = cat.start_rows(3)
    assert len(rows) == 3
    taken = select_state(rows, np.array([0, 0, 2, 1, 1]))
    assert len(taken) == 5 and len(taken.advance(np.array([1, 3, 9, 1, 2]))) == 5
