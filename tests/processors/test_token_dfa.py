"""The token automaton's edges: the compiled automaton against ``re.fullmatch`` on every token
sequence of a small vocabulary (multi-character, empty and eos tokens), the two closures of the
trimming on a hand-made table that loops back into a state (the compiled ones never do), the
token walk on a hand-made character table, the mask made once per library and dtype (and one per
device: the meta device stands in for a GPU; arrays without ``device`` as numpy < 2 makes them),
the row states' length, a torch table read on the host, and every message in full.

Oracles: ``re.fullmatch`` over all token sequences up to a length (acceptance, and the allowed
next tokens of a finite language: those that some accepted sequence continues with); the hand
tables' results derived beside them.
"""

from __future__ import annotations

import itertools
import re
import sys

import numpy as np
import pytest

from beamsearch.backends import backend_of
from beamsearch.processors import StepContext, TokenDFA, token_dfa

pytest.importorskip("interegular")

EOS = 0
VOCAB = ["<eos>", "a", "b", "ab", "", "ba", "c", "bab"]


def sequences(n):
    """Every sequence of non-eos tokens (the empty token included) of at most n tokens."""
    ids = range(1, len(VOCAB))
    return [s for k in range(n + 1) for s in itertools.product(ids, repeat=k)]


def text(seq):
    return "".join(VOCAB[t] for t in seq)


@pytest.mark.parametrize("pattern", ["(ab)*c", "a(ba)*b?", "(a|bc)*", "b{1,3}a?", "c|ab|ba", "a{0}", "", "()"])
def test_accepts_equals_fullmatch(pattern):
    """Every sequence of up to 4 tokens: accepted iff its text fully matches (the empty token has
    no transition: a sequence holding it is refused). ``a{0}`` is a character automaton
    of one state: only the empty sequence is accepted; so are ``""`` and ``"()"``, whose
    automaton has no symbol at all (not even one for the characters it does not name)."""
    dfa = TokenDFA.from_regex(pattern, VOCAB, EOS)
    for seq in sequences(4):
        want = re.fullmatch(pattern, text(seq)) is not None and 4 not in seq
        assert dfa.accepts(list(seq)) == want, (pattern, seq)
    assert (np.asarray(dfa.transitions)[:, [EOS, 4]] == -1).all()


@pytest.mark.parametrize("pattern", ["c|ab|ba", "b{1,3}a?", "(ab|b){0,2}c", "a{0}", ""])
def test_masks_of_a_finite_language_equal_its_continuations(pattern):
    """A finite language (texts of at most 5 characters, so 5 tokens suffice): after each prefix
    of tokens, the allowed tokens are those some accepted sequence continues with, eos where the
    prefix itself matches; a dead end is never allowed."""
    dfa = TokenDFA.from_regex(pattern, VOCAB, EOS)
    accepted = [s for s in sequences(5) if 4 not in s and re.fullmatch(pattern, text(s))]
    prefixes = sorted({s[:j] for s in accepted for j in range(len(s) + 1)} | {(2, 2, 2, 2), (6, 6)})
    for prefix in prefixes:
        want = {s[len(prefix)] for s in accepted if len(s) > len(prefix) and s[:len(prefix)] == prefix}
        if prefix in accepted:
            want.add(EOS)
        history = np.array([list(prefix)], dtype=np.int64).reshape(1, len(prefix))
        logits = np.zeros((1, len(VOCAB)))
        out = dfa(logits, StepContext(len(prefix) + 1, history, np.zeros(1, np.int64), backend_of(logits)))
        assert set(np.flatnonzero(np.isfinite(out[0])).tolist()) == want, (pattern, prefix)


# a hand table: 0 -t0-> 1, 0 -t1-> 2 (final), 1 -t0-> 0 (back), 1 -t2-> 3, 2 -t2-> 4,
# 3 -t0-> 3 (a loop that never reaches 2), 4: no move. Live (a final reachable): 2; 0 (by t1);
# 1 (by t0 to 0). 3 and 4 are not.
HAND = np.array([[1, 2, -1], [0, -1, 3], [-1, -1, 4], [3, -1, -1], [-1, -1, -1]])
FINALS = np.array([False, False, True, False, False])


def test_trim_follows_moves_back_into_a_state():
    """From 0: the moves into 3 and 4 are dropped, 0, 1, 2 kept as they are. From 1: reached
    1, 0 (by t0), 2; numbered start first: 1 -> 0, 0 -> 1, 2 -> 2."""
    table, start, finals = token_dfa._trim(HAND.copy(), 0, FINALS, "p")
    assert table.tolist() == [[1, 2, -1], [0, -1, -1], [-1, -1, -1]] and start == 0 and finals == [2]
    table, start, finals = token_dfa._trim(HAND.copy(), 1, FINALS, "p")
    assert table.tolist() == [[1, -1, -1], [0, 2, -1], [-1, -1, -1]] and start == 0 and finals == [2]
    with pytest.raises(ValueError, match=r"^pattern 'p' matches no sequence of the vocabulary's tokens$"):
        token_dfa._trim(HAND.copy(), 3, FINALS, "p")


class Alphabet(dict):
    """interegular's alphabet: a symbol per named character, ``anything_else`` (2) for others."""

    def __missing__(self, ch):
        return 2


def test_token_walk_on_a_hand_character_table():
    """Characters: 0 -a-> 1, 1 -b-> 0 (back to 0), 'x' (anything else) has no move. Tokens
    'a', 'b', 'ab', 'ba', '', 'x': from 0: 1, -, 0, -, 0, -; from 1: -, 0, -, 1, 1, -."""
    chars = np.array([[1, -1, -1], [-1, 0, -1]])
    table = token_dfa._token_table(chars, Alphabet(a=0, b=1), ["a", "b", "ab", "ba", "", "x"])
    assert table.tolist() == [[1, -1, 0, -1, 0, -1], [-1, 0, -1, 1, 1, -1]]


def test_the_mask_is_made_once_per_library_and_dtype(monkeypatch):
    torch = pytest.importorskip("torch")
    dfa = TokenDFA([[-1, 1, -1], [-1, -1, 1]], 0, [1], EOS)
    made = []
    for logits in (np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32), np.zeros((2, 3)),
                   torch.zeros(2, 3), torch.zeros(1, 3), torch.zeros(2, 3, dtype=torch.float64)):
        backend = backend_of(logits)
        real = backend.from_host
        monkeypatch.setattr(backend, "from_host",
                            lambda a, like, real=real: made.append(str(like.dtype)) or real(a, like=like))
        k = logits.shape[0]
        history = np.array([[1], [2]])[:k]  # row 0: 0 -t1-> 1 (accepting: eos, t2); row 1: no move
        out = dfa(logits, StepContext(2, history, np.zeros(k, np.int64), backend))
        finite = np.isfinite(np.asarray(out, dtype=np.float64))
        assert finite.tolist() == [[True, False, True], [False, False, False]][:k]
        monkeypatch.undo()
    assert made == ["float32", "float64", "torch.float32", "torch.float64"]


def test_a_mask_made_on_one_device_is_not_used_on_another():
    """One processor on torch logits of one dtype on two devices: first the meta device (it stands
    in for a GPU on a machine without one: its tensors have no values), then the CPU. The CPU
    logits get the CPU mask: row 0 in state 1 (accepting) keeps eos and t2, row 1 (no move) keeps
    nothing, as the table says."""
    torch = pytest.importorskip("torch")
    dfa = TokenDFA([[-1, 1, -1], [-1, -1, 1]], 0, [1], EOS)
    history = np.array([[1], [2]])  # row 0: 0 -t1-> 1; row 1: no move on t2 from 0
    for device in ("meta", "cpu"):
        logits = torch.zeros(2, 3, device=device)
        out = dfa(logits, StepContext(2, history, np.zeros(2, np.int64), backend_of(logits)))
        assert out.device.type == device
    assert torch.isfinite(out).tolist() == [[True, False, True], [False, False, False]]


class DeviceLess(np.ndarray):
    """A numpy array without a ``device`` attribute, as numpy before 2.0 makes them (the project
    supports numpy >= 1.24; numpy 2 arrays all have one)."""

    @property
    def device(self):
        raise AttributeError("device")


def test_logits_without_a_device_attribute_are_masked():
    """Numpy logits without ``device`` (numpy < 2.0): masked as the table says, row 0 (state 1,
    accepting) keeps eos and t2, row 1 (no move) nothing."""
    dfa = TokenDFA([[-1, 1, -1], [-1, -1, 1]], 0, [1], EOS)
    logits = np.zeros((2, 3)).view(DeviceLess)
    assert not hasattr(logits, "device")
    out = dfa(logits, StepContext(2, np.array([[1], [2]]), np.zeros(2, np.int64), backend_of(logits)))
    assert np.isfinite(np.asarray(out)).tolist() == [[True, False, True], [False, False, False]]


def test_row_states_count_their_rows():
    """``len`` of the carried states is the number of rows: 3 started, 4 after taking rows
    [0, 0, 2, 1] (a row forked), still 4 once advanced, 0 when no row is taken."""
    from beamsearch.core.state import select_state

    rows = TokenDFA([[-1, 1, -1], [-1, -1, 1]], 0, [1], EOS).start_rows(3)
    assert len(rows) == 3
    rows = select_state(rows, np.array([0, 0, 2, 1]))
    assert len(rows) == 4
    assert len(rows.advance(np.array([1, 2, 1, 1]))) == 4
    assert len(select_state(rows, np.zeros(0, np.int64))) == 0


def test_a_torch_table_is_read_on_the_host():
    """A torch tensor as ``transitions``: an integer one gives the automaton of the same lists
    (0 -t1-> 1 -t2-> 1, state 1 accepting: t1 t2* accepted); a float one, even one that requires
    grad (a learned table), is refused by the dtype check, not by torch."""
    torch = pytest.importorskip("torch")
    table = [[-1, 1, -1], [-1, -1, 1]]
    dfa = TokenDFA(torch.tensor(table), 0, [1], EOS)
    assert [dfa.accepts(s) for s in ([], [1], [1, 2, 2], [2], [1, 1])] == [False, True, True, False, False]
    learned = torch.tensor(table, dtype=torch.float32, requires_grad=True)
    with pytest.raises(TypeError, match=r"^transitions must hold integers \(state ids, -1 for none\); "
                                        r"got dtype float32$"):
        TokenDFA(learned, 0, [1], EOS)


def test_the_messages():
    table = [[-1, 1, -1], [-1, -1, 1]]
    with pytest.raises(TypeError, match=r"^eos_token_id must be an integer; got 'x' of type str$"):
        TokenDFA(table, 0, [1], "x")
    with pytest.raises(TypeError, match=r"^accepting must be a sequence of token ids; got 'x'$"):
        TokenDFA(table, 0, "x", EOS)
    with pytest.raises(ValueError, match=r"^transitions has a transition on eos id 0 from state 1; "
                                         r"the eos columns must "
                                         r"be -1 \(eos is allowed in accepting states, by `accepting` alone\)$"):
        TokenDFA([[-1, -1, -1], [1, 1, -1]], 0, [1], EOS)
    with pytest.raises(ValueError, match=r"^transitions\[0, 1\] is 2; entries must be -1 \(no transition\) or a "
                                         r"state in \[0, 2\)$"):
        TokenDFA([[-1, 2, -1], [-1, 1, -1]], 0, [1], EOS)
    with pytest.raises(TypeError, match=r"^tokens must be a sequence of token ids; got 'x'$"):
        TokenDFA(table, 0, [1], EOS).accepts("x")
    with pytest.raises(TypeError, match=r"^eos_token_id must be an integer; got 'x' of type str$"):
        TokenDFA.from_regex("a", ["<eos>", "a"], "x")
    with pytest.raises(TypeError, match=r"^pattern must be a str; got 5$"):
        TokenDFA.from_regex(5, ["<eos>", "a"], EOS)
    with pytest.raises(ValueError, match=r"^pattern 'a\\\\1' is not supported: Unsupported: "):
        TokenDFA.from_regex("a\\1", ["<eos>", "a"], EOS)


def test_without_interegular_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "interegular", None)
    with pytest.raises(ImportError, match=r"^TokenDFA\.from_regex needs the interegular package: install the regex "
                                          r"extra \(in the beamsearch checkout: pip install -e '\.\[regex\]'\), "
                                          r"or pip install interegular==0\.3\.3$"):
        TokenDFA.from_regex("a", ["<eos>", "a"], EOS)
