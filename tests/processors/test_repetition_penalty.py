"""RepetitionPenalty against a plain per-row loop (random, tie-heavy inputs with -inf entries; numpy
and torch, float64 and float32), and by hand."""

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
    history_matrix,
    random_histories,
    random_logits,
    repetition_row,
    tokens_of,
)

# ---- RepetitionPenalty ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_repetition_penalty_equals_a_plain_loop(name, dtype):
    rng = np.random.default_rng(20)
    for _ in range(CASES):
        x = random_logits(rng, dtype)
        hist = random_histories(rng, x.shape[0], x.shape[1])
        penalty = float(rng.choice([1.0, 1.3, 2.0, 0.7, 0.25, 5.0]))
        got = apply(P.RepetitionPenalty(penalty), x, name, hist)
        expected = [repetition_row(x[r].astype(np.float64).tolist(), tokens_of(hist[r]), penalty)
                    for r in range(x.shape[0])]
        assert_rows_close(got, expected, dtype)


@pytest.mark.parametrize("name", BACKENDS)
def test_repetition_penalty_by_hand(name):
    # token 1 appears three times: it is penalized once; -inf and 0 stay; token 4 is not in history
    x = np.array([[2.0, 3.0, -1.5, 0.0, 4.0, -np.inf], [2.0, 3.0, -1.5, 0.0, 4.0, -np.inf]])
    hist = history_matrix([[1, 1, 2, 3, 1, 5, 0], [4]])
    got = apply(P.RepetitionPenalty(2.0), x, name, hist)
    assert got.tolist() == [[1.0, 1.5, -3.0, 0.0, 4.0, NEG_INF], [2.0, 3.0, -1.5, 0.0, 2.0, NEG_INF]]
    # a penalty below 1 rewards repetition
    got = apply(P.RepetitionPenalty(0.5), x, name, hist)
    assert got.tolist() == [[4.0, 6.0, -0.75, 0.0, 4.0, NEG_INF], [2.0, 3.0, -1.5, 0.0, 8.0, NEG_INF]]
    # an empty history (width 0 or all padding) changes nothing
    for empty in (history_matrix([[], []]), history_matrix([[], []], 3)):
        assert apply(P.RepetitionPenalty(3.0), x, name, empty).tolist() == x.tolist()


@pytest.mark.parametrize("penalty", [0, 0.0, -1.0, float("nan"), float("inf"), -float("inf")])
def test_repetition_penalty_refused(penalty):
    with pytest.raises(ValueError, match="penalty"):
        P.RepetitionPenalty(penalty)
