"""SequenceBias and BadWords against plain per-row loops (random, tie-heavy inputs with -inf entries;
numpy and torch, float64 and float32), and by hand."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch import processors as P
from oracles.processors import (
    BACKENDS,
    CASES,
    DTYPES,
    NEG_INF,
    apply,
    assert_rows_close,
    bad_words_row,
    history_matrix,
    random_histories,
    random_logits,
    sequence_bias_row,
    tokens_of,
)

# ---- SequenceBias --------------------------------------------------------------------------------

def random_sequences(rng: np.random.Generator, vocab: int, hist: np.ndarray, count: int) -> list[tuple]:
    """Sequences of length 1-3, half of them built to match some row's history tail."""
    out = []
    for _ in range(count):
        length = int(rng.integers(1, 4))
        seq = [int(t) for t in rng.integers(0, vocab, size=length)]
        row = tokens_of(hist[int(rng.integers(hist.shape[0]))])
        if length > 1 and len(row) >= length - 1 and rng.random() < 0.5:
            seq[:-1] = row[len(row) - (length - 1):]
        out.append(tuple(seq))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_sequence_bias_equals_a_plain_loop(name, dtype):
    rng = np.random.default_rng(30)
    for _ in range(CASES):
        x = random_logits(rng, dtype)
        v = x.shape[1]
        hist = random_histories(rng, x.shape[0], v)
        seqs = random_sequences(rng, v, hist, int(rng.integers(1, 6)))
        bias = {s: float(rng.choice([-2.5, -1.0, 0.5, 1.25, 3.0])) for s in seqs}
        got = apply(P.SequenceBias(dict(bias)), x, name, hist)
        expected = [sequence_bias_row(x[r].astype(np.float64).tolist(), tokens_of(hist[r]), bias)
                    for r in range(x.shape[0])]
        assert_rows_close(got, expected, dtype)


@pytest.mark.parametrize("name", BACKENDS)
def test_sequence_bias_by_hand(name):
    x = np.zeros((3, 4))
    x[2, 3] = -np.inf
    hist = history_matrix([[0, 1], [2, 0, 2], [1]])
    bias = {(3,): 1.0, (1, 2): 2.0, (0, 1, 2): 4.0, (2, 3): -8.0, (0, 2, 1): 16.0, (1, 2, 0, 2, 0): 32.0}
    got = apply(P.SequenceBias(bias), x, name, hist)
    # row 0 ends (0, 1): (1, 2) and (0, 1, 2) add up on token 2; row 1 ends (.., 0, 2): (2, 3)
    # and (0, 2, 1); row 2 ends (1,): (1, 2); a longer sequence than the history never matches;
    # -inf stays -inf
    assert got.tolist() == [[0.0, 0.0, 6.0, 1.0], [0.0, 16.0, 0.0, -7.0], [0.0, 0.0, 2.0, NEG_INF]]


@pytest.mark.parametrize("bias, error", [
    ({(): 1.0}, ValueError),
    ({(1,): 1.0, (): -1.0}, ValueError),
    ({(-1,): 1.0}, ValueError),
    ({(0, -2): 1.0}, ValueError),
    ({(1.5,): 1.0}, TypeError),
    ({(0, "a"): 1.0}, TypeError),
    ({(None,): 1.0}, TypeError),
    ({(1,): float("nan")}, ValueError),
])
def test_sequence_bias_refused(bias, error):
    with pytest.raises(error, match="bias"):
        P.SequenceBias(bias)


# ---- BadWords ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_bad_words_equal_a_plain_loop(name, dtype):
    rng = np.random.default_rng(40)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        v = x.shape[1]
        hist = random_histories(rng, x.shape[0], v)
        seqs = random_sequences(rng, v, hist, int(rng.integers(1, 5)))
        sequences = [list(s) if rng.random() < 0.5 else s for s in seqs]
        got = apply(P.BadWords(sequences), x, name, hist)
        expected = [bad_words_row(x[r].astype(np.float64).tolist(), tokens_of(hist[r]), seqs)
                    for r in range(x.shape[0])]
        assert got.tolist() == expected, case


@pytest.mark.parametrize("name", BACKENDS)
def test_bad_words_by_hand(name):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    hist = history_matrix([[2, 1], [1, 2], []])
    got = apply(P.BadWords([[0], (2, 1, 3), [2, 2]]), x, name, hist)
    # [0] everywhere; (2, 1, 3) in row 0 only; [2, 2] in row 1 only; row 2 has no history
    assert got.tolist() == [[NEG_INF, 1.0, 2.0, NEG_INF], [NEG_INF, 5.0, NEG_INF, 7.0], [NEG_INF, 9.0, 10.0, 11.0]]


@pytest.mark.parametrize("sequences", [[[]], [[1], []], [(2, 3), ()]])
def test_bad_words_empty_sequence(sequences):
    with pytest.raises(ValueError, match="sequences"):
        P.BadWords(sequences)
