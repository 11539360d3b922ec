"""SuppressTokens against a plain per-row loop (random, tie-heavy inputs with -inf entries; numpy and
torch, float64 and float32), and by hand."""

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
    history_matrix,
    random_histories,
    random_logits,
    suppress_row,
)

# ---- SuppressTokens ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_suppress_tokens_equal_a_plain_loop(name, dtype):
    rng = np.random.default_rng(50)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        v = x.shape[1]
        ids = [int(t) for t in rng.integers(0, v, size=int(rng.integers(1, 4)))]
        first = [None, 1, 2, 3][case % 4]
        step = int(rng.integers(1, 5))
        hist = random_histories(rng, x.shape[0], v)
        got = apply(P.SuppressTokens(ids, first_steps=first), x, name, hist, step=step)
        expected = [suppress_row(x[r].astype(np.float64).tolist(), step, ids, first) for r in range(x.shape[0])]
        assert got.tolist() == expected, (case, step, first)


@pytest.mark.parametrize("name", BACKENDS)
def test_suppress_tokens_by_hand(name):
    x = np.array([[1.0, 2.0, 3.0], [-1.0, -np.inf, 0.5]])
    h = history_matrix([[0], []])
    for step in (1, 2, 7):
        assert apply(P.SuppressTokens([0, 2]), x, name, h, step=step).tolist() == [
            [NEG_INF, 2.0, NEG_INF], [NEG_INF, NEG_INF, NEG_INF]]
        assert apply(P.SuppressTokens((1,)), x, name, h, step=step).tolist() == [
            [1.0, NEG_INF, 3.0], [-1.0, NEG_INF, 0.5]]
    begin = P.SuppressTokens([2], first_steps=1)  # transformers' suppress at begin
    assert apply(begin, x, name, h, step=1).tolist() == [[1.0, 2.0, NEG_INF], [-1.0, NEG_INF, NEG_INF]]
    assert apply(begin, x, name, h, step=2).tolist() == x.tolist()
    two = P.SuppressTokens([0], first_steps=2)
    assert apply(two, x, name, h, step=2)[:, 0].tolist() == [NEG_INF, NEG_INF]
    assert apply(two, x, name, h, step=3).tolist() == x.tolist()


def test_suppress_tokens_refused():
    with pytest.raises(ValueError, match="token_ids"):
        P.SuppressTokens([1, -1])
    with pytest.raises(ValueError, match="first_steps"):
        P.SuppressTokens([1], first_steps=0)
