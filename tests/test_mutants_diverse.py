"""diverse_beam_search at the edges its other tests leave: wide groups against the reference loop
(more rows than a small sort keeps in order by chance), the documented defaults (one result per
input, early stopping, three pruned candidates per row in the trace), early stopping counted in
model calls on a model worked by hand, and errors that name the parameter and the mode."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.core.trace import PRUNED, SearchTree
from beamsearch.modes.diverse import diverse_beam_search
from models import SequenceModel, random_table
from test_diverse import EOS, PROMPTS, reference_diverse, run, same

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]
WIDE_PROMPTS = PROMPTS + [[5, 1], [0, 0, 4], [2]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed, groups, width, lam", [(0, 4, 3, 0.5), (1, 4, 3, 2.0), (2, 3, 4, 1.0), (3, 5, 2, 0.7)])
def test_wide_groups_equal_the_reference_loop(backend, seed, groups, width, lam):
    # 7 inputs x 12 rows and more: the engine's rows are regrouped input by input at every step
    # (a stable sort keeps each group's rows in rank order), more rows than a sort of 16 keeps by luck
    table = random_table(7, 300 + seed, eos=EOS, eos_shift=0.3)
    beam = groups * width
    got, _ = run(table, WIDE_PROMPTS, backend, num_groups=groups, diversity_penalty=lam, beam_size=beam,
                 n_best=beam, max_steps=4, early_stop=False)
    same(got, reference_diverse(table, WIDE_PROMPTS, eos=EOS, max_steps=4, beam=beam, groups=groups, lam=lam,
                                n_best=beam))


def test_the_defaults_one_result_early_stop_and_a_trace_of_three():
    table = random_table(7, 5, eos=EOS, eos_shift=0.3)
    got, _ = run(table, PROMPTS, num_groups=2, diversity_penalty=1.0, beam_size=4, max_steps=4)
    want = reference_diverse(table, PROMPTS, eos=EOS, max_steps=4, beam=4, groups=2, lam=1.0, n_best=1)
    same(got, want)  # n_best defaults to 1
    tree = SearchTree()
    run(table, [[0]], num_groups=2, diversity_penalty=1.0, beam_size=4, max_steps=2, trace=tree)
    # V = 7: each row has 6 candidates that are not eos; its best are kept or pruned, and at most 3
    # pruned ones a row and step are recorded (trace_width's default)
    pruned = tree.status == PRUNED
    per_parent = np.bincount(tree.parent[pruned], minlength=len(tree))
    assert per_parent.max() == 3


def fixed(p):
    """A model whose every next-token distribution is ``p`` (V = len(p)), as logits."""
    logp = np.log(np.asarray(p, dtype=np.float64))
    return lambda prefix: logp


def test_early_stop_ends_when_no_live_row_can_win_counted_in_model_calls():
    # V = 5, eos = 3, p = (.04, .05, .06, .8, .05) after every prefix; 2 groups of 1 row, n_best 1,
    # alpha 0: a score is the logprob. Step 1 (one call, the one row): eos finishes with log .8 in
    # each group; each group's live row has logprob <= log .06 < log .8, and a live row's logprob
    # only falls, so no live row can reach the n_best-th score: the input stops after 1 call.
    # Without early stopping the groups go on to max_steps = 6 calls.
    prompts = [[0]]
    stopped = SequenceModel(fixed([.04, .05, .06, .8, .05]))
    a = diverse_beam_search(stopped.step, stopped.init_state(prompts), prompts, eos_token_id=EOS, num_groups=2,
                            diversity_penalty=1.0, beam_size=2, max_steps=6, alpha=0.0)
    full = SequenceModel(fixed([.04, .05, .06, .8, .05]))
    b = diverse_beam_search(full.step, full.init_state(prompts), prompts, eos_token_id=EOS, num_groups=2,
                            diversity_penalty=1.0, beam_size=2, max_steps=6, alpha=0.0, early_stop=False)
    assert len(stopped.calls) == 1 and len(full.calls) == 6
    assert [h.tokens for h in a[0]] == [h.tokens for h in b[0]] == [[3]]
    assert a[0][0].logprob == pytest.approx(math.log(.8), abs=1e-12)


def test_errors_name_the_parameter_and_the_mode():
    table = random_table(5, 1, eos=EOS)
    with pytest.raises(TypeError, match="early_stop must be a bool"):
        run(table, PROMPTS, num_groups=2, diversity_penalty=1.0, beam_size=4, max_steps=3, early_stop="yes")
    with pytest.raises(TypeError, match="diverse_beam_search"):
        run(table, PROMPTS, num_groups=2, diversity_penalty=1.0, beam_size=4, max_steps=3, num_beams=4)


def tied_table(seed):
    """Logits of two levels only, chosen per prefix by a hash: ties everywhere (V = 7)."""
    def table(prefix):
        rng = np.random.default_rng(abs(hash((seed,) + tuple(prefix))) % (2**32))
        return rng.integers(0, 2, 7).astype(np.float64)
    return table


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_ties_go_to_the_lower_row_of_the_group_as_the_reference_breaks_them(backend, seed):
    # equal scores everywhere: which row of a group (its rank order) and token win decides the
    # outputs, so the rows of each group must stay in rank order when regrouped by input
    table = tied_table(seed)
    got, _ = run(table, WIDE_PROMPTS, backend, num_groups=4, diversity_penalty=0.5, beam_size=12, n_best=12,
                 max_steps=4, early_stop=False)
    same(got, reference_diverse(table, WIDE_PROMPTS, eos=EOS, max_steps=4, beam=12, groups=4, lam=0.5, n_best=12))


def test_step_one_terminals_finish_once_per_group_in_group_then_token_order():
    # V = 5, two eos ids {3, 4} with equal probability .3 each, 0-2 share the rest: at step 1 every
    # group finishes [3] and [4] (the one row is every group's), scores all log .3 (alpha 0). Ties
    # rank in production order: group 0's [3], [4], then group 1's [3], [4]; 12 inputs make the
    # step's terminal list long (48 entries) so that only a stable regrouping keeps that order.
    prompts = [[i % 3] for i in range(12)]
    model = SequenceModel(fixed([.4 / 3, .4 / 3, .4 / 3, .3, .3]))
    got = diverse_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=[3, 4], num_groups=2,
                              diversity_penalty=1.0, beam_size=4, n_best=4, max_steps=1, alpha=0.0)
    for hyps in got:
        assert [h.tokens for h in hyps] == [[3], [4], [3], [4]]
        assert [h.logprob for h in hyps] == pytest.approx([math.log(.3)] * 4, abs=1e-12)
