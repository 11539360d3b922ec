"""The rules that route a step's ranking (grouped, sparse) at their edges, against the rules as
their docstrings state them."""

from __future__ import annotations

import numpy as np

from beamsearch.backends.numpy_backend import NumpyBackend
from beamsearch.core.beam import Beam
from beamsearch.core.select import (
    GROUPED_MAX_ELEMENTS,
    SPARSE_FRACTION,
    WIDE_FRACTION,
    StepScores,
    Terminals,
    grouped,
    sparse,
)


def test_grouped_is_the_documented_rule_at_its_edges():
    """Grouped ranking when some input has several rows (groups < k) and either k*V is at most
    GROUPED_MAX_ELEMENTS or the beam is wide: WIDE_FRACTION * min(m, V) >= V."""
    v = 1000
    small_k = GROUPED_MAX_ELEMENTS // v  # k*V <= the limit
    assert grouped(small_k, small_k - 1, v, 1)
    assert not grouped(small_k, small_k, v, 1)  # one row per input: never grouped
    big_k = small_k + 1  # k*V just over the limit
    assert not grouped(big_k, 1, v, v // WIDE_FRACTION - 1)  # narrow beam
    assert grouped(big_k, 1, v, v // WIDE_FRACTION)  # exactly V / WIDE_FRACTION: wide
    assert grouped(big_k, 1, v, 10 * v)  # m beyond V counts as V
    exact = GROUPED_MAX_ELEMENTS // 2  # k = 2 rows of V = exact: k*V == the limit
    assert grouped(2, 1, exact, 1) and not grouped(2, 1, exact + 1, 1)


def _scores(k: int, vocab: int, support_pairs: int, dtype=np.float64) -> StepScores:
    beam = Beam(np.zeros(k, np.int64), np.zeros(k), np.zeros(k, np.int64), None, None)
    rows = np.arange(support_pairs) % k
    tokens = np.arange(support_pairs) // k
    return StepScores(NumpyBackend(), np.zeros((k, vocab), dtype), beam,
                      Terminals(np.array([0]), np.zeros(0, np.int64), np.zeros(0, np.int64)), 1, (rows, tokens))


def test_sparse_is_the_documented_rule_at_its_edge():
    """A support is ranked alone when it holds at most k*V / SPARSE_FRACTION pairs."""
    k, v = 4, 16  # k*V = 64: at most 8 pairs
    limit = k * v // SPARSE_FRACTION
    assert sparse(_scores(k, v, limit)) and sparse(_scores(k, v, limit, np.float32))
    assert not sparse(_scores(k, v, limit + 1))
    no_support = _scores(k, v, 1)
    assert not sparse(StepScores(no_support.backend, no_support.logp, no_support.beam, no_support.terminals, 1))
