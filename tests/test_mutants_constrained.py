"""constrained_beam_search at the edges its other tests leave: its defaults (one result, plain
hypotheses, three pruned candidates per row in the trace), early stopping counted in model calls
on a model worked by hand, rows of constraints that are not lists, and AnyOf's repr."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import AnyOf, constrained_beam_search
from beamsearch.core.trace import PRUNED, SearchTree
from models import SequenceModel, random_table
from test_constrained import _call, best_satisfying, enumerate_finished


def fixed(p):
    logp = np.log(np.asarray(p, dtype=np.float64))
    return lambda prefix: logp


def test_the_defaults_one_result_plain_hypotheses_and_a_trace_of_three():
    # V = 5, eos 4; an exhaustive beam (every row kept) returns the best satisfying output
    table = random_table(5, 11, eos=4, eos_shift=0.5)
    model = SequenceModel(table)
    tree = SearchTree()
    got = constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2, 1]]],
                                  beam_size=300, eos_token_id=4, max_steps=4, alpha=0.0, trace=tree)
    assert len(got[0]) == 1 and not hasattr(got[0][0], "token_logprobs")
    outputs = enumerate_finished(table, [0], 5, eos=4, max_steps=4, alpha=0.0)
    want = best_satisfying(outputs, [[2, 1]], False)[0]
    assert got[0][0].tokens == list(want[0])
    assert got[0][0].logprob == pytest.approx(want[1], abs=1e-9)
    # V = 5: a row's candidates beyond those kept are pruned, at most 3 of them recorded (the default)
    small = SearchTree()
    model = SequenceModel(table)
    constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2, 1]]], beam_size=1,
                            eos_token_id=4, max_steps=3, trace=small)
    pruned = small.status == PRUNED
    assert np.bincount(small.parent[pruned], minlength=len(small)).max() == 3
    one = SearchTree()  # and trace_width is handed on
    model = SequenceModel(table)
    constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2, 1]]], beam_size=1,
                            eos_token_id=4, max_steps=3, trace=one, trace_width=1)
    assert np.bincount(one.parent[one.status == PRUNED], minlength=len(one)).max() == 1
    assert len(tree) > 0


def test_early_stop_ends_when_no_live_row_can_win_counted_in_model_calls():
    # V = 4 {0, 1, 2, eos 3}, p = (.05, .45, .05, .45) after every prefix, constraint [1], beam 2,
    # alpha 0 (score = logprob). Step 1: [3] does not meet the constraint (discarded); the rows
    # are [1] (log .45, met) and [0] or [2] (not met). Step 2: [1, 3] finishes with log .45^2; every
    # live row then has logprob <= log .45^2 and can only fall: the input stops after 2 calls.
    # (Early stopping is always on in this search: it is lossless.)
    prompts = [[0]]
    stopped = SequenceModel(fixed([.05, .45, .05, .45]))
    got = constrained_beam_search(stopped.step, stopped.init_state(prompts), prompts, constraints=[[[1]]],
                                  beam_size=2, eos_token_id=3, max_steps=6, alpha=0.0)
    assert len(stopped.calls) == 2
    assert got[0][0].tokens == [1, 3] and got[0][0].finished
    assert got[0][0].logprob == pytest.approx(2 * math.log(.45), abs=1e-12)


@pytest.mark.parametrize("row", ["ab", 5, b"xy"])
def test_a_row_of_constraints_that_is_not_a_list_is_named(row):
    err, model = _call([row])
    assert err.type is TypeError
    assert err.match(r"constraints\[0\] must be a list of phrases and AnyOf")
    assert model.calls == []


def test_anyof_repr_lists_its_phrases():
    assert repr(AnyOf([1, 2], (3,))) == "AnyOf([1, 2], [3])"


def test_a_bank_short_of_its_quota_leaves_its_places_to_the_best_of_the_others():
    # V = 6 {0, 1, 2, 3, 4, eos 5}, p = (.25, .2, .03, .15, .12, .25 - .0) ... eos made unlikely:
    # p = (.3, .2, .03, .25, .21, .01). Constraint [2], beam 4, one step. The row's 4 best tokens
    # 0, 3, 4, 1 need 1 token more (bank need 1); the advancing token 2 meets it (bank need 0). Two
    # banks share the beam: quota 2 each, need 0 first. Bank 0 has one candidate, [2]; bank 1's
    # quota takes its best two, [0] and [3]; the place bank 0 leaves goes to the best of the rest
    # by logprob, [4] (.21) before [1] (.2). (max_steps 2: the constraint and eos need 2 steps;
    # the rows kept at step 1 are read from the trace.)
    model = SequenceModel(fixed([.3, .2, .03, .25, .21, .01]))
    tree = SearchTree()
    constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2]]], beam_size=4,
                            eos_token_id=5, max_steps=2, alpha=0.0, trace=tree)
    first = np.flatnonzero(tree.step == 1)
    kept = first[tree.status[first] != PRUNED]
    assert sorted(tree.token[kept].tolist()) == [0, 2, 3, 4]
    assert [p for p in model.calls[1]] == [(0, 0), (0, 3), (0, 4), (0, 2)]  # step 2's rows: best first


def test_every_advancing_token_of_a_row_is_a_candidate():
    # V = 5 {0, 1, 2, 3, eos 4}, p = (.8, .02, .1, .05, .03); unordered constraints [1] and [3],
    # beam 1. Step 1: the row's best token 0 needs 2 more; both 1 and 3 advance (need 1), though
    # neither is among the row's best. The need-1 bank takes the beam: 3 (.05) before 1 (.02).
    # Step 2 from [3]: 1 advances (need 0), the beam's only bank. Step 3: eos. Output [3, 1, 4].
    model = SequenceModel(fixed([.8, .02, .1, .05, .03]))
    got = constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[1], [3]]],
                                  beam_size=1, eos_token_id=4, max_steps=3, alpha=0.0)
    assert model.calls[1] == [(0, 3)]  # step 2 feeds the one row: the prompt, then 3
    assert got[0][0].tokens == [3, 1, 4] and got[0][0].finished
    assert got[0][0].logprob == pytest.approx(math.log(.05 * .02 * .03), abs=1e-12)
