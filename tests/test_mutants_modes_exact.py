"""exact_search's bookkeeping worked by hand: the rows a hand-made model needs with and without
the seed's incumbent, the results object's defaults, the mode's report and fixed batches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.modes.exact import EXACT, ExactResults, exact_search
from models import SequenceModel

PROBS = {(): [0.1, 0.8, 0.1], (1,): [0.1, 0.8, 0.1], (1, 1): [0.9, 0.05, 0.05]}  # by generated tokens; eos = 0


def table(seq):
    """Prompt [2]; the generated tokens' row from PROBS, uniform elsewhere."""
    return np.log(PROBS.get(tuple(seq[1:]), [1 / 3] * 3))


def run(**kw):
    model = SequenceModel(table)
    args = dict(eos_token_id=0, max_steps=4, alpha=0.0, seed_beam=1, n_best=1)
    args.update(kw)
    return exact_search(model.step, model.init_state([[2]]), [[2]], **args), model


def test_the_seeds_incumbent_prunes_by_hand():
    """alpha 0: scores are logprobs, a prefix's bound its logprob. The seed (beam 1) feeds the root,
    [1] and [1, 1] (3 rows) and finishes [1, 1, 0], log .576 = -0.552, its one finished output:
    the incumbent. Branch and bound feeds the root (its children [1] at log .8 kept, [2] at log .1
    pruned), [1] ([1, 1] at log .64 kept), [1, 1] ([1, 1, 0] reached, the rest below): 3 rows, 6
    in all. Without the seed's incumbent [2] (log .1, equal to the best finished [0] so far) would
    be fed too: 7."""
    results, model = run()
    assert results[0][0].tokens == [1, 1, 0] and results[0][0].logprob == pytest.approx(math.log(0.576), abs=1e-12)
    assert results.proven[0] and results.expanded[0] == 6 == sum(len(c) for c in model.calls)
    assert results.model_calls[0] == 6


def test_exact_results_start_empty_with_their_types():
    fresh = ExactResults()
    assert fresh.proven.shape == (0,) and fresh.proven.dtype == bool
    two = ExactResults([[], []])
    assert two.proven.tolist() == [True, True] and two.proven.dtype == bool
    assert two.model_calls.tolist() == [0, 0] and two.model_calls.dtype == np.int64
    assert two.expanded.tolist() == [0, 0] and two.expanded.dtype == np.int64
    model = SequenceModel(table)
    empty = exact_search(model.step, model.init_state([]), [], eos_token_id=0, max_steps=3, pad_token_id=5)
    assert list(empty) == [] and empty.pad_token_id == 5


def test_the_modes_report_and_fixed_batch():
    model = SequenceModel(table)
    results = EXACT.batch(model.step, model.init_state([[2], [2]]), [[2], [2]], 1, eos_token_id=0, max_steps=4,
                          alpha=0.0, seed_beam=1)
    # the seed (beam 1) runs both inputs in its 3 calls; then branch and bound's 3 rows per input
    # (see above) go one per call: max_rows is its batch_rows
    assert [len(call) for call in model.calls] == [2, 2, 2] + [1] * 6
    assert EXACT.report(results, 1) == {"proven": True, "expanded": 6}
    tight, _ = run(node_budget=4)
    assert EXACT.report(tight, 0) == {"proven": False, "expanded": 4}
