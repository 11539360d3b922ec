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
    assert results.proven.dtype == bool and results.model_calls.dtype == results.expanded.dtype == np.int64


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


def test_the_seed_returns_n_best_outputs_for_the_incumbent_by_hand():
    """n_best 2, seed beam 2, root row [0.12, 0.8, 0.08]. The seed feeds the root, [1], [2], [1, 1],
    [1, 2] (5 rows; it stops when its best live row, log .8 + log .8 + log .05 = -3.44, is below
    its second finished output [0] at log .12 = -2.12); its two outputs [1, 1, 0] and [0] make the
    incumbent -2.12. Branch and bound feeds the root ([2] at log .08 is below it), [1] ([1, 2] at
    log .08 too), [1, 1]: 3 rows, 8 in all. With one seed output there would be no incumbent and
    [2] would be fed as well."""
    probs = {(): [0.12, 0.8, 0.08], (1,): [0.1, 0.8, 0.1], (1, 1): [0.9, 0.05, 0.05]}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq[1:]), [1 / 3] * 3)))
    results = exact_search(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, max_steps=4, alpha=0.0,
                           seed_beam=2, n_best=2)
    assert [h.tokens for h in results[0]] == [[1, 1, 0], [0]]
    assert results.proven[0] and results.expanded[0] == 8 == sum(len(c) for c in model.calls)


def test_defaults_seed_beam_four_and_the_state_rows_checked():
    """A uniform row over 6 tokens (eos 0): the seed's second call holds its 4 live rows."""
    model = SequenceModel(lambda seq: np.zeros(6))
    exact_search(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, max_steps=3)
    assert [len(c) for c in model.calls[:2]] == [1, 4]
    model = SequenceModel(table)
    with pytest.raises(ValueError, match=r"^init_state must have 2 rows \(one per input\) on axis 0"):
        exact_search(model.step, model.init_state([[2], [2], [2]]), [[2], [2]], eos_token_id=0, max_steps=3)
    assert model.calls == []


def test_an_output_found_by_branch_and_bound_becomes_the_incumbent_by_hand():
    """Seed beam 1 follows token 1 ([1] at .5 beats [2] at .45; then [1, 1] at .25): its only
    finished outputs are [0] (.05, log -3.0), [1, 0] and [1, 1, 0], so its incumbent is -3.0 (3 rows).
    Branch and bound feeds the root, then [1] and [2]; [2, 0] (log .45 * .99 = -0.81) finishes and
    is the incumbent, so [1, 1] (-1.39) and [1, 2] (-1.50) are not fed: 3 rows, 6 in all (8 if the
    seed's incumbent stayed)."""
    probs = {(): [0.05, 0.5, 0.45], (1,): [0.05, 0.5, 0.45], (2,): [0.99, 0.005, 0.005],
             (1, 1): [0.05, 0.5, 0.45]}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq[1:]), [1 / 3] * 3)))
    results = exact_search(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, max_steps=3, alpha=0.0,
                           seed_beam=1, n_best=1)
    assert [h.tokens for h in results[0]] == [[2, 0]] and results[0][0].logprob == pytest.approx(
        math.log(0.45 * 0.99), abs=1e-12)
    assert results.proven[0] and results.expanded[0] == 6 == sum(len(c) for c in model.calls)


def test_the_seed_keeps_an_early_stop_beside_an_input_out_of_budget():
    """Node budget 2, seed beam 2. Prompt [2] (uniform over eos, 1, 2) would hold 1 + 2 rows after
    the seed's first step: it stops there (over budget) and its branch and bound feeds the root
    only, its children [1] and [2] being left out by the budget: not proven. Prompt [1] (eos at
    .9, token 1 at .1, token 2 impossible) stops early at the same step (its one live row, log .1,
    cannot beat [0] at log .9): 1 seed row, then its root, whose child [1] is below the incumbent:
    2 rows, proven."""
    rows = {(1,): [0.9, 0.1, 0.0]}

    def table(seq):
        with np.errstate(divide="ignore"):
            return np.log(rows.get(tuple(seq), [1 / 3] * 3))

    model = SequenceModel(table)
    results = exact_search(model.step, model.init_state([[2], [1]]), [[2], [1]], eos_token_id=0, max_steps=3,
                           alpha=0.0, seed_beam=2, node_budget=2)
    assert results.proven.tolist() == [False, True] and results.expanded.tolist() == [2, 2]
    assert results[1][0].tokens == [0]
