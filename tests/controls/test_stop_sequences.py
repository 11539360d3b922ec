"""Stop-sequence matching called directly: the (row, token) pairs that complete a stop sequence,
against pairs worked out by hand."""

from __future__ import annotations

import numpy as np

from beamsearch.controls.stop_sequences import StopSequences


def test_stop_sequence_pairs_by_hand():
    """Rows' last generated tokens [3, 1] and [-1, 7]: (3, 1, 2) completes with 2 on row 0,
    (1, 5) with 5 on row 0, the one-token (6,) with 6 on every row; int64, by row then token."""
    stops = StopSequences(((3, 1, 2), (6,), (1, 5)))
    rows, tokens = stops.pairs(np.array([[3, 1], [-1, 7]]), 1)
    assert rows.dtype == np.int64 and tokens.dtype == np.int64
    assert list(zip(rows.tolist(), tokens.tolist(), strict=True)) == [(0, 2), (0, 5), (0, 6), (1, 6)]
    one = StopSequences(((1, 5),))
    rows, tokens = one.pairs(np.array([[1], [2]]), 1)
    assert rows.dtype == np.int64 and tokens.dtype == np.int64 and (rows.tolist(), tokens.tolist()) == ([0], [5])
    rows, tokens = StopSequences(((4,),), min_new_tokens=2).pairs(np.array([[1]]), 2)
    assert rows.size == 0 and tokens.size == 0  # no stop at steps t <= min_new_tokens
