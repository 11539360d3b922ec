"""speech.transducer_merge: the grouping of candidates by equal keys, against a plain reference
(the sorted distinct rows as Python tuples)."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech.transducer_merge import group_ids, merge


def reference_ids(keys):
    rows = list(zip(*(k.tolist() for k in keys), strict=True))
    order = {r: i for i, r in enumerate(sorted(set(rows)))}
    return [order[r] for r in rows]


@pytest.mark.parametrize("high", [[3, 50, 7, 2], [2, 1 << 40, 1 << 30], [1, 1, 1]])
def test_group_ids_rank_the_distinct_rows(high):
    """Packed into one code while it fits (the first two cases' spans multiply past 2**62 in
    the second: the rows are then compared as rows), the ids are the rows' ranks in
    lexicographic order; rows with equal keys share an id."""
    rng = np.random.default_rng(len(high))
    for size in (1, 5, 200):
        keys = [rng.integers(0, h, size) for h in high]
        keys[-1][: size // 2] = keys[-1][0]  # repeats in the last column
        assert group_ids(keys).tolist() == reference_ids(keys)


def test_merge_log_adds_equal_keys():
    """Per group, the best member (the first on ties) and the log of the summed probabilities."""
    u, node = np.array([0, 1, 0, 0, 1]), np.array([4, 2, 4, 3, 2])
    score = np.log(np.array([0.1, 0.2, 0.3, 0.1, 0.2]))
    rep, total = merge([u, node], score)
    assert rep.tolist() == [3, 2, 1]  # groups (0, 3), (0, 4), (1, 2); (1, 2)'s tie: the first
    np.testing.assert_allclose(np.exp(total), [0.1, 0.4, 0.4])
