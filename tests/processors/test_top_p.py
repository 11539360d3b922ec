"""TopP (nucleus filtering) against a plain per-row loop (random, tie-heavy inputs with -inf entries;
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
    history_matrix,
    random_histories,
    random_logits,
    top_p_cumsums,
    top_p_row,
)

# ---- TopP --------------------------------------------------------------------------------------

def safe_p(rng: np.random.Generator, x: np.ndarray, margin: float = 1e-5) -> float:
    """A p in (0, 1) with no cumulative sum of any row within ``margin`` of it."""
    sums = [s for r in range(x.shape[0]) for s in top_p_cumsums(x[r].astype(np.float64).tolist())]
    while True:
        p = float(rng.choice([rng.uniform(0.01, 0.99), rng.uniform(0.9, 0.999), rng.uniform(0.001, 0.2)]))
        if all(abs(s - p) > margin for s in sums):
            return p


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_top_p_equals_a_plain_loop(name, dtype):
    rng = np.random.default_rng(10)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        p = safe_p(rng, x)
        got = apply(P.TopP(p), x, name, random_histories(rng, x.shape[0], x.shape[1]))
        expected = [top_p_row(x[r].astype(np.float64).tolist(), p) for r in range(x.shape[0])]
        assert got.tolist() == expected, (case, x.tolist(), p)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_top_p_one_keeps_every_token(name, dtype):
    rng = np.random.default_rng(11)
    for _ in range(40):
        x = random_logits(rng, dtype)
        got = apply(P.TopP(1.0), x, name, history_matrix([[]] * x.shape[0]))
        assert got.tolist() == x.astype(np.float64).tolist()
    # tokens whose probability underflows to 0 are kept too, and an int p = 1 is a real number
    x = np.array([[0.0, -800.0, 5.0, -np.inf], [3.0, 3.0, -1000.0, 2.0]], dtype=dtype)
    for p in (1.0, 1):
        assert apply(P.TopP(p), x, name, history_matrix([[], []])).tolist() == x.astype(np.float64).tolist()


@pytest.mark.parametrize("name", BACKENDS)
def test_top_p_by_hand(name):
    # q = softmax([2, 2, 0, -inf]) = [0.4683, 0.4683, 0.0634, 0]: p = 0.3 stops at the first 2,
    # whose tie is kept; p = 0.95 needs the 0 too. [5, -800]: the first token alone has q = 1.
    x = np.array([[2.0, 2.0, 0.0, -np.inf], [2.0, 0.0, 2.0, 1.0], [5.0, -800.0, -np.inf, -np.inf]])
    h = history_matrix([[], [], []])
    assert apply(P.TopP(0.3), x, name, h).tolist() == [
        [2.0, 2.0, NEG_INF, NEG_INF], [2.0, NEG_INF, 2.0, NEG_INF], [5.0, NEG_INF, NEG_INF, NEG_INF]]
    assert apply(P.TopP(0.95), x, name, h).tolist() == [
        [2.0, 2.0, 0.0, NEG_INF], [2.0, 0.0, 2.0, 1.0], [5.0, NEG_INF, NEG_INF, NEG_INF]]
    # a single finite token, and V = 1
    assert apply(P.TopP(0.01), np.array([[-np.inf, 1.5]]), name, h[:1]).tolist() == [[NEG_INF, 1.5]]
    assert apply(P.TopP(0.5), np.array([[0.25]]), name, h[:1]).tolist() == [[0.25]]


@pytest.mark.parametrize("p", [0, 0.0, -0.1, 1.0000001, 1.5, float("nan"), float("inf"), -float("inf")])
def test_top_p_out_of_range(p):
    with pytest.raises(ValueError, match=r"(^|\W|_)p\b"):
        P.TopP(p)


@pytest.mark.parametrize("p", ["0.5", None, [0.5], 0.5j])
def test_top_p_not_a_real_number(p):
    with pytest.raises(TypeError, match=r"(^|\W|_)p\b"):
        P.TopP(p)


def test_top_p_accepts_numpy_reals():
    x = np.array([[1.0, 0.0, -1.0]])
    h = history_matrix([[]])
    assert apply(P.TopP(np.float64(0.5)), x, "numpy", h).tolist() == [top_p_row([1.0, 0.0, -1.0], 0.5)]
    assert apply(P.TopP(np.float32(0.9)), x, "numpy", h).tolist() == [top_p_row([1.0, 0.0, -1.0], 0.9)]
