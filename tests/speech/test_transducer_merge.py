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
    for size in (0, 1, 5, 200):
        keys = [rng.integers(0, h, size) for h in high]
        keys[-1][: size // 2] = keys[-1][:1]  # repeats in the last column
        assert group_ids(keys).tolist() == reference_ids(keys)


def test_merge_log_adds_equal_keys():
    """Per group, the best member (the first on ties) and the log of the summed probabilities."""
    u, node = np.array([0, 1, 0, 0, 1]), np.array([4, 2, 4, 3, 2])
    score = np.log(np.array([0.1, 0.2, 0.3, 0.1, 0.2]))
    rep, total = merge([u, node], score)
    assert rep.tolist() == [3, 2, 1]  # groups (0, 3), (0, 4), (1, 2); (1, 2)'s tie: the first
    np.testing.assert_allclose(np.exp(total), [0.1, 0.4, 0.4])


def test_the_pool_is_kept_best_first_with_ties_by_label_sequence():
    """keep_finished's pool holds distinct label sequences per utterance, best first, equal
    scores by label-sequence id, the empty slots last: the order a merge of the pool with no new
    candidates gives (so a step where nothing finished leaves the pool as it is). Scores are
    drawn from a few values so that ties and repeated label sequences occur."""
    from beamsearch.speech.transducer_merge import Cands, Plan, Pool, keep_finished

    rng = np.random.default_rng(0)
    plan = Plan(2, 3, 1, "frame", None)
    pool = Pool.empty(4, 3)
    for _ in range(6):
        k = int(rng.integers(0, 6))
        z = np.zeros(k, np.int64)
        u = rng.integers(0, 4, k)
        fin = Cands(u, u * 2, z - 1, np.log(rng.choice([0.1, 0.2, 0.4], k)), rng.integers(0, 5, k), z, z, z,
                    (z, z, z), plan.lm_start((k,)), z)
        pool = keep_finished(pool, fin, plan)
        for score, node in zip(pool.score, pool.node, strict=True):
            live = np.isfinite(score)
            assert (np.diff(live.astype(int)) <= 0).all()  # the empty slots last
            pairs = list(zip((-score[live]).tolist(), node[live].tolist(), strict=True))
            assert pairs == sorted(pairs) and len(set(node[live].tolist())) == live.sum()
        again = keep_finished(pool, fin.take(np.zeros(0, np.int64)), plan)
        assert again is pool
