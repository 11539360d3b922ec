"""The trace and the step record field by field: every number against teacher-forced rescoring or
a hand computation, every array's documented dtype, the stop bookkeeping against the plain
reference of tests/models.py, and the callback's answers (`stop_mask`) by hand."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from beamsearch import beam_search_batch, diverse_beam_search
from beamsearch.controls import Controls
from beamsearch.core.engine import run
from beamsearch.core.penalties import length_wu
from beamsearch.core.trace import (CALLBACK, EARLY_STOP, FINISHED, KEPT, MAX_STEPS, PRUNED, ROOT, UNFINISHED,
                                   stop_mask, tracer)
from beamsearch.strategies.forced import Forced
from beamsearch.viz import Trace
from models import SequenceModel, dict_table, gnmt, processed_logprobs, random_table, reference_batch

V, EOS = 5, 4
PROMPTS = [[0], [1, 2], [3], [0, 1, 3]]


def search(table, prompts=PROMPTS, **kw):
    model = SequenceModel(table)
    return beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, **kw)


def rescored(table, prompt, tokens):
    """Teacher-forced logprob of ``tokens`` after ``prompt`` (a plain loop over the oracle's rows)."""
    seq, total = list(prompt), 0.0
    for t in tokens:
        total += processed_logprobs(table(tuple(seq)), seq)[t]
        seq.append(t)
    return total


# ---- stop_mask: the callback's answer ------------------------------------------------------------

def test_stop_mask_by_hand():
    assert stop_mask(None, 3).tolist() == [False, False, False]
    assert stop_mask([0, 2], 4).tolist() == [True, False, True, False]  # two ids: a 1-d answer kept 1-d
    assert stop_mask(np.array([3, 1], np.uint8), 4).tolist() == [False, True, False, True]
    assert stop_mask(2, 3).tolist() == [False, False, True]  # one id as a scalar
    assert stop_mask([], 2).tolist() == [False, False]
    assert stop_mask([0], 1).tolist() == [True]  # id 0 and id n - 1 are in range
    mask = np.array([True, False])
    got = stop_mask(mask, 2)
    assert got.tolist() == [True, False] and got is not mask


@pytest.mark.parametrize("answer, n, error, message", [
    (np.ones(2, bool), 4, ValueError,
     r"^callback returned a bool mask of shape \(2,\); expected \(4,\), one per input$"),
    ([[0, 1]], 4, TypeError, r"^callback must return None, a bool mask \[N\] or input ids to stop; got \[\[0, 1\]\]$"),
    (np.zeros((1, 1, 1), np.int64), 4, TypeError, r"^callback must return None"),
    ([0.5], 4, TypeError, r"^callback must return None, a bool mask \[N\] or input ids to stop; got \[0\.5\]$"),
    ([4], 4, ValueError, r"^callback returned input ids \[4\]; each must be in \[0, 4\)$"),  # n itself is out
    ([-1], 4, ValueError, r"^callback returned input ids \[-1\]; each must be in \[0, 4\)$"),
    ([1, -1], 4, ValueError, r"input ids \[1, -1\]"),
    (7, 3, ValueError, r"^callback returned input ids \[7\]; each must be in \[0, 3\)$"),  # a scalar, listed
])
def test_stop_mask_refuses_by_name(answer, n, error, message):
    with pytest.raises(error, match=message):
        stop_mask(answer, n)


# ---- the tracer's own arguments ----------------------------------------------------------------

def test_a_fresh_trace_is_empty_and_says_so():
    trace = Trace()
    assert trace.n_inputs == 0 and trace.prompts == [] and len(trace) == 0
    assert repr(trace) == "Trace(0 inputs, 0 nodes, 0 steps)"


def test_trace_width_zero_records_no_pruned_node_and_a_used_trace_is_refused_by_name():
    table = random_table(V, 3, eos=EOS)
    trace = Trace()
    search(table, max_steps=3, beam_size=2, trace=trace, trace_width=0)
    assert len(trace) > len(PROMPTS) and not (trace.status == PRUNED).any()
    with pytest.raises(ValueError, match=r"^trace already holds a search; pass a new Trace\(\) to each search$"):
        search(table, max_steps=3, beam_size=2, trace=trace)


# ---- the record and the tree, number by number -------------------------------------------------

def test_records_and_tree_against_rescoring_and_hand_scores():
    """Per record: each row's logprob is the rescored logprob of its node's tokens and its score
    that over gnmt(t - 1) (gnmt(1) at step 1, where the logprob is 0); each candidate's
    token_logprob is the oracle's processed log-probability of its token in its row, its logprob
    the row's plus that, its score that over gnmt(t). Roots: parent and token -1, step 0, status
    ROOT; nodes not returned: rank -1."""
    alpha = 0.8
    table = random_table(V, 5, eos=EOS, eos_shift=0.3)
    trace, records = Trace(), []
    results = search(table, max_steps=4, beam_size=2, n_best=2, alpha=alpha, trace=trace, trace_width=2,
                     callback=records.append)
    n = len(PROMPTS)
    assert trace.prompts == PROMPTS
    assert [r.step for r in records] == list(range(1, len(records) + 1))
    assert repr(trace) == f"Trace({n} inputs, {len(trace)} nodes, {len(records)} steps)"
    for name, dtype in [("input", np.int64), ("parent", np.int64), ("token", np.int64), ("step", np.int64),
                        ("logprob", np.float64), ("token_logprob", np.float64), ("score", np.float64),
                        ("status", np.int8), ("rank", np.int64), ("stop_step", np.int64), ("stop_reason", np.int8)]:
        assert getattr(trace, name).dtype == dtype, name
    assert trace.parent[:n].tolist() == [-1] * n and trace.token[:n].tolist() == [-1] * n
    assert trace.step[:n].tolist() == [0] * n and (trace.status[:n] == ROOT).all()
    assert trace.logprob[:n].tolist() == [0.0] * n and trace.score[:n].tolist() == [0.0] * n
    returned = {int(v) for i in range(n) for v in trace.results(i)}
    assert all(trace.rank[v] == -1 for v in range(len(trace)) if v not in returned)
    for r in records:
        t = r.step
        assert r.logprobs is None and r.status.dtype == np.int8 and r.stop_reason.dtype == np.int8
        assert (r.status == PRUNED).any()
        for j in range(r.row_input.shape[0]):
            prompt, tokens = PROMPTS[r.row_input[j]], trace.tokens(int(r.row_node[j]))
            assert len(tokens) == t - 1
            want = rescored(table, prompt, tokens)
            assert r.row_logprob[j] == pytest.approx(want, abs=1e-9)
            assert r.row_score[j] == pytest.approx(want / gnmt(max(t - 1, 1), alpha), abs=1e-9)
        for c in range(r.token.shape[0]):
            j = r.parent[c]
            prompt = PROMPTS[r.input[c]]
            seq = list(prompt) + trace.tokens(int(r.row_node[j]))
            tok = processed_logprobs(table(tuple(seq)), seq)[r.token[c]]
            assert r.token_logprob[c] == pytest.approx(tok, abs=1e-9)
            assert r.logprob[c] == pytest.approx(r.row_logprob[j] + tok, abs=1e-9)
            assert r.score[c] == pytest.approx(r.logprob[c] / gnmt(t, alpha), abs=1e-9)
            assert r.tokens([c])[0].tolist() == trace.tokens(int(r.row_node[j])) + [int(r.token[c])]
        assert r.tokens([]).shape == (0, t)
    # the tree's queries, against plain scans over its arrays
    for v in range(len(trace)):
        assert trace.children(v).tolist() == [u for u in range(len(trace)) if trace.parent[u] == v]
    assert trace.best() == trace.best(0) != trace.best(1)
    assert trace.results().tolist() == trace.results(0).tolist()
    assert trace.best(n + 3) == -1 and trace.results(n + 3).tolist() == []
    for i, hyps in enumerate(results):
        assert [trace.tokens(int(v)) for v in trace.results(i)] == [h.tokens for h in hyps]


def test_a_teacher_forced_path_at_minus_inf_is_recorded_without_a_numpy_warning():
    """Teacher forcing (the engine with the Forced strategy, as score_sequences runs it) adds a
    forced token of probability 0 (logprob -inf) and goes on; the next step's token_logprob is
    -inf - -inf there, computed under errstate: no RuntimeWarning reaches the caller. By hand:
    after prompt [0] the target's token 0 has p = 0, then token 1 has p = 1/5 (uniform row)."""
    table = dict_table({(0,): [0.0, 0.5, 0.25, 0.15, 0.1]}, V)
    model = SequenceModel(table)
    forced = Forced(np.array([0, 1]), np.array([0]), np.array([2]), np.array([False]))
    trace, records = Trace(), []
    observer = tracer(records.append, trace, 0, 1, length_wu, 0.0, keep=1, prompts=[[0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(model.step, model.init_state([[0]]), np.array([0]), forced, Controls(np.array([EOS]), np.array([2])),
            observer=observer)
    assert [r.token.tolist() for r in records] == [[0], [1]]
    assert records[0].logprob.tolist() == [-math.inf] and records[1].row_logprob.tolist() == [-math.inf]
    assert records[1].logprob.tolist() == [-math.inf] and math.isnan(records[1].token_logprob[0])


# ---- stopping: the callback, max_steps and early stop at once ----------------------------------

def test_stopped_and_best_per_record_when_every_input_is_named_at_the_last_step():
    """Named at the step where max_steps stops them anyway, the inputs keep the reason max_steps;
    record.stopped() lists them by name. Input 0, named at step 1, stops there (CALLBACK) and is
    not stopped again later, although the callback keeps naming it; from step 2 on it has no
    candidate, so record.best() gives -1 for it."""
    table = random_table(V, 1, eos=EOS, eos_shift=-3.0)  # eos unlikely: every input lives to the end
    trace, stopped, best = Trace(), {}, {}

    def callback(record):
        stopped[record.step] = record.stopped()
        best[record.step] = record.best().tolist()
        return [0] if record.step < 3 else list(range(len(PROMPTS)))

    search(table, max_steps=3, beam_size=2, early_stop=False, trace=trace, callback=callback)
    assert trace.stop_step.tolist() == [1, 3, 3, 3]
    assert trace.stop_reason.tolist() == [CALLBACK, MAX_STEPS, MAX_STEPS, MAX_STEPS]
    assert stopped == {1: {}, 2: {}, 3: {1: "max_steps", 2: "max_steps", 3: "max_steps"}}
    assert best[2][0] == -1 and best[3][0] == -1 and min(best[2][1:]) >= 0
    at1 = (trace.input == 0) & (trace.step == 1)
    assert not (trace.status[at1] == KEPT).any() and (trace.status[at1] == UNFINISHED).sum() == 2


def test_a_callback_stop_does_not_drop_an_early_stop_of_the_same_step():
    """Seed 7: the reference stops input 2 early at step 3 (it needs 6 calls without early stop)
    while input 1 is still live; the callback stops input 1 at step 3. Input 2 still stops early
    there, input 1 gives what the reference gives with max_steps 3."""
    table = random_table(V, 7, eos=EOS, eos_shift=2.0)
    steps, steps_no_early = [], []
    reference_batch(table, PROMPTS, eos=EOS, max_steps=6, beam=2, n_best=1, steps=steps)
    reference_batch(table, PROMPTS, eos=EOS, max_steps=6, beam=2, n_best=1, steps=steps_no_early,
                    early_stop=False)
    assert steps[2] == 3 and steps_no_early[2] == 6 and steps[1] > 3  # the setting, as described
    trace = Trace()
    results = search(table, max_steps=6, beam_size=2, n_best=1, trace=trace,
                     callback=lambda record: [1] if record.step == 3 else None)
    assert (trace.stop_step[2], trace.stop_reason[2]) == (3, EARLY_STOP)
    assert (trace.stop_step[1], trace.stop_reason[1]) == (3, CALLBACK)
    for i, max_steps in [(1, 3), (2, 6)]:
        want = reference_batch(table, [PROMPTS[i]], eos=EOS, max_steps=max_steps, beam=2, n_best=1)[0]
        assert [(tuple(h.tokens), h.finished) for h in results[i]] == [(w[0], w[3]) for w in want]
        assert [h.logprob for h in results[i]] == pytest.approx([w[1] for w in want], abs=1e-9)
    assert (trace.status[(trace.input == 2) & (trace.step == 3)] != KEPT).all()
    assert FINISHED in trace.status[trace.input == 2]


def test_an_output_ended_once_per_group_is_ranked_in_the_order_its_nodes_were_made():
    """Diverse search without a penalty: both groups end the same outputs, and the results list
    each twice; the first of the two results is the node made first (the lower node id)."""
    table = random_table(V, 3, eos=EOS, eos_shift=1.0)
    model = SequenceModel(table)
    trace = Trace()
    results = diverse_beam_search(model.step, model.init_state(PROMPTS[:2]), PROMPTS[:2], eos_token_id=EOS,
                                  max_steps=3, num_groups=2, diversity_penalty=0.0, beam_size=4, n_best=4,
                                  trace=trace)
    twice = 0
    for i, hyps in enumerate(results):
        nodes = trace.results(i).tolist()
        assert [trace.tokens(v) for v in nodes] == [h.tokens for h in hyps]
        for a in range(len(nodes)):
            for b in range(a + 1, len(nodes)):
                if hyps[a].tokens == hyps[b].tokens:
                    twice += 1
                    assert nodes[a] < nodes[b]
    assert twice >= 2
