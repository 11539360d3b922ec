"""The step callback and the search trace, checked against the search itself and against plain
oracles from tests/models.py (teacher-forced rescoring, the one-hypothesis-at-a-time reference,
a plain per-row enumeration of each step's candidates)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from beamsearch import (
    AnyOf,
    beam_search,
    beam_search_batch,
    beam_search_each,
    constrained_beam_search,
    diverse_beam_search,
    greedy_decode,
    stochastic_beam_search,
)
from beamsearch.controls import Controls
from beamsearch.core.engine import run
from beamsearch.core.penalties import length_wu
from beamsearch.core.trace import (
    CALLBACK,
    EARLY_STOP,
    FINISHED,
    KEPT,
    MAX_STEPS,
    NO_ROWS,
    PRUNED,
    ROOT,
    UNFINISHED,
    StepRecord,
    stop_mask,
    tracer,
)
from beamsearch.strategies.forced import Forced
from beamsearch.viz import Trace
from models import (
    PrefixModel,
    SequenceModel,
    dict_table,
    gnmt,
    greedy_oracle,
    log_softmax,
    processed_logprobs,
    random_table,
    reference_batch,
)

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]
V, EOS = 5, 4
PROMPTS = [[0], [1, 2], [3], [0, 1, 3]]


def batch(backend, table, prompts=PROMPTS, **kw):
    model = SequenceModel(table, backend=backend)
    return beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, **kw), model


def plain(results):
    return [[(tuple(h.tokens), h.logprob, h.score, h.finished) for h in hyps] for hyps in results]


def candidates_by_row(trace, i, step):
    """{parent node: [(token, status, logprob)]} of input i's nodes at ``step``, in trace order."""
    out = {}
    for v in np.flatnonzero((trace.input == i) & (trace.step == step)):
        out.setdefault(int(trace.parent[v]), []).append((int(trace.token[v]), int(trace.status[v]),
                                                          float(trace.logprob[v])))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_trace_does_not_change_results_and_holds_them(backend, seed):
    table = random_table(V, seed, levels=3, eos=EOS, eos_shift=0.5)
    kw = dict(max_steps=5, beam_size=3, n_best=2, alpha=0.6)
    plain_results, _ = batch(backend, table, **kw)
    trace, seen = Trace(), []
    results, model = batch(backend, table, trace=trace, callback=seen.append, **kw)
    assert plain(results) == plain(plain_results)
    assert len(seen) == len(model.calls) == int(trace.step.max())  # one record per model call
    for i, hyps in enumerate(results):
        nodes = trace.results(i)
        assert len(nodes) == len(hyps)
        for node, h in zip(nodes, hyps, strict=True):  # every returned hypothesis is a node, ranked as returned
            assert trace.tokens(int(node)) == h.tokens
            assert trace.logprob[node] == h.logprob and trace.score[node] == h.score
            assert trace.status[node] == (FINISHED if h.finished else UNFINISHED)
        assert trace.best(i) == nodes[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tree_structure_and_numbers_against_rescoring(backend):
    """Every non-root node's parent was kept (or is the root) one step earlier; its logprob is the
    teacher-forced sum of the oracle's processed log-probabilities; its score is logprob / gnmt."""
    table = random_table(V, 7, eos=EOS)
    trace = Trace()
    batch(backend, table, max_steps=4, beam_size=2, n_best=1, alpha=0.8, trace=trace)
    assert (trace.status[: len(PROMPTS)] == ROOT).all()
    for v in range(len(PROMPTS), len(trace)):
        p = trace.parent[v]
        assert trace.step[p] == trace.step[v] - 1 and trace.status[p] in (ROOT, KEPT)
        assert trace.input[p] == trace.input[v]
        prompt = PROMPTS[trace.input[v]]
        seq = list(prompt)
        total = 0.0
        for t in trace.tokens(v):
            total += processed_logprobs(table(tuple(seq)), seq)[t]
            seq.append(t)
        assert trace.logprob[v] == pytest.approx(total, abs=1e-9)
        assert trace.score[v] == pytest.approx(total / gnmt(int(trace.step[v]), 0.8), abs=1e-9)
    kept = trace.status == KEPT  # a kept node (not of the last step) has children
    last = trace.step == trace.step.max()
    assert all(trace.children(int(v)).size for v in np.flatnonzero(kept & ~last))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("width", [1, 2, 4])
def test_pruned_are_each_rows_best_rest_by_plain_enumeration(backend, width):
    """Per row, the recorded pruned candidates are exactly its best ``width`` finite candidates
    that were neither kept nor finished (ties to the lower token id), from a plain per-row loop."""
    table = random_table(V, 11, levels=2, eos=EOS)  # rounded logits: ties
    trace = Trace()
    batch(backend, table, max_steps=4, beam_size=2, n_best=1, trace=trace, trace_width=width)
    for i, prompt in enumerate(PROMPTS):
        for step in range(1, int(trace.step[trace.input == i].max()) + 1):
            for parent, cands in candidates_by_row(trace, i, step).items():
                seq = list(prompt) + trace.tokens(parent)
                row = processed_logprobs(table(tuple(seq)), seq)
                chosen = {t for t, s, _ in cands if s != PRUNED}
                rest = sorted((t for t in range(V) if t not in chosen and math.isfinite(row[t])),
                              key=lambda t: (-row[t], t))
                assert [t for t, s, _ in cands if s == PRUNED] == rest[:width]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_pruned_never_beat_kept_under_each_rule(backend, seed):
    table = random_table(V, seed, levels=3, eos=EOS, eos_shift=1.0)
    # SPEC 6: pruned (never eos: a finite eos always finishes) <= every kept live row of its input
    trace = Trace()
    batch(backend, table, max_steps=5, beam_size=2, n_best=2, trace=trace, trace_width=3)
    for v in np.flatnonzero(trace.status == PRUNED):
        assert trace.token[v] != EOS
        same = (trace.input == trace.input[v]) & (trace.step == trace.step[v])
        live = same & ((trace.status == KEPT) | (trace.status == UNFINISHED))
        assert live.sum() == 2 and trace.score[v] <= trace.score[live].min()
    # SPEC 4: every candidate competes, finished ones too
    model = PrefixModel(table, backend=backend)
    trace = Trace()
    beam_search(model.step, model.init_state(), 0, EOS, 3, 5, 1.0, trace=trace)
    for v in np.flatnonzero(trace.status == PRUNED):
        same = trace.step == trace.step[v]
        chosen = same & np.isin(trace.status, [KEPT, FINISHED, UNFINISHED])
        assert trace.logprob[v] <= trace.logprob[chosen].min()


@pytest.mark.parametrize("backend", BACKENDS)
def test_callback_stop_equals_max_steps_cut(backend):
    """Stopping input 1 at step 2 from the callback gives what the plain reference gives for that
    input with max_steps 2 (its live rows end unfinished, as early stop ends them)."""
    table = random_table(V, 3, eos=EOS)
    stop_at = {1: 2, 3: 1}
    kw = dict(max_steps=5, beam_size=3, n_best=3, alpha=0.6)

    def callback(record):
        return [i for i, s in stop_at.items() if s == record.step]

    trace = Trace()
    results, model = batch(backend, table, callback=callback, trace=trace, **kw)
    for i, prompt in enumerate(PROMPTS):
        want = reference_batch(table, [prompt], eos=EOS, max_steps=stop_at.get(i, 5), beam=3, n_best=3)[0]
        got = plain([results[i]])[0]
        assert [h[0] for h in got] == [h[0] for h in want]
        assert [h[3] for h in got] == [h[3] for h in want]
        assert np.allclose([h[1] for h in got], [h[1] for h in want], atol=1e-9)
    cut, _ = batch(backend, table, **{**kw, "max_steps": [5, 2, 5, 1]})
    assert plain(results) == plain(cut)
    assert trace.stop_reason[1] == CALLBACK and trace.stop_step[1] == 2
    assert trace.stop_reason[3] == CALLBACK and trace.stop_step[3] == 1
    assert not any(set(map(tuple, call)) & {tuple(PROMPTS[3]) + (t,) for t in range(V)} for call in model.calls[1:])
    # its rows at that step are recorded as ended unfinished, and none of them goes on
    at = (trace.input == 1) & (trace.step == 2)
    assert not (trace.status[at] == KEPT).any() and (trace.status[at] == UNFINISHED).sum() == 3


def test_callback_can_return_a_mask_and_stream_the_best():
    table = random_table(V, 5, eos=EOS)
    streamed = {}

    def callback(record: StepRecord):
        best = record.best()
        for i in np.flatnonzero(best >= 0):
            j = best[i]
            # the oracle: a plain scan of the record's candidates, not pruned, highest score first
            scan = [c for c in range(len(record.token)) if record.input[c] == i and record.status[c] != PRUNED]
            assert j == max(scan, key=lambda c: (record.score[c], -c))
            streamed[int(i), record.step] = (record.tokens([j])[0].tolist(), float(record.logprob[j]))
        return np.arange(record.n_inputs) == 0 if record.step == 3 else None

    results, _ = batch("numpy", table, max_steps=5, beam_size=2, callback=callback)
    cut, _ = batch("numpy", table, max_steps=[3, 5, 5, 5], beam_size=2)
    assert plain(results) == plain(cut)
    assert max(s for i, s in streamed if i == 0) == 3  # input 0 streamed nothing after it stopped
    for (i, step), (tokens, logprob) in streamed.items():  # tokens and logprob agree with rescoring
        assert len(tokens) == step
        seq, total = list(PROMPTS[i]), 0.0
        for t in tokens:
            total += processed_logprobs(table(tuple(seq)), seq)[t]
            seq.append(t)
        assert logprob == pytest.approx(total, abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_reasons_match_the_reference(backend):
    """Early stop is recorded at the step the plain reference stops (its number of calls); an input
    that runs to the limit stops for max_steps."""
    table = random_table(V, 2, eos=EOS, eos_shift=2.0)  # eos likely: early stops happen
    steps = []
    reference_batch(table, PROMPTS, eos=EOS, max_steps=6, beam=2, n_best=1, steps=steps)
    trace = Trace()
    batch(backend, table, max_steps=6, beam_size=2, n_best=1, trace=trace)
    assert trace.stop_step.tolist() == steps
    for i, s in enumerate(steps):
        assert trace.stop_reason[i] in ((EARLY_STOP, NO_ROWS) if s < 6 else (EARLY_STOP, NO_ROWS, MAX_STEPS))
    trace = Trace()
    batch(backend, table, max_steps=6, beam_size=2, n_best=1, early_stop=False, trace=trace)
    assert set(trace.stop_reason.tolist()) <= {NO_ROWS, MAX_STEPS}


def test_no_rows_reason_when_the_beam_narrows_to_nothing():
    # SPEC 4 hand example (seed 000): beam 1, eos most likely at step 2 after b -> no live row left
    table = {(): [0.1, 0.3, 0.6], (2,): [0.9, 0.05, 0.05]}
    model = PrefixModel(lambda p: np.log(table.get(p, [1 / 3] * 3)))
    trace = Trace()
    out = beam_search(model.step, model.init_state(), 0, 0, 1, 4, 0.0, trace=trace)
    assert out[0].tokens == [2, 0]
    assert trace.stop_reason.tolist() == [NO_ROWS] and trace.stop_step.tolist() == [2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_independence_of_the_trace(backend):
    table = random_table(V, 9, eos=EOS)
    whole = Trace()
    batch(backend, table, max_steps=4, beam_size=2, trace=whole)
    for i, prompt in enumerate(PROMPTS):
        alone = Trace()
        batch(backend, table, prompts=[prompt], max_steps=4, beam_size=2, trace=alone)

        def nodes(t, inp):
            return sorted((tuple(t.tokens(int(v))), int(t.status[v]), float(t.logprob[v]), int(t.rank[v]))
                          for v in np.flatnonzero(t.input == inp))

        assert nodes(whole, i) == nodes(alone, 0)  # logprobs bit for bit: rows computed alone (tests/approx.py)
        assert (whole.stop_step[i], whole.stop_reason[i]) == (alone.stop_step[0], alone.stop_reason[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_trace_is_the_greedy_path(backend):
    table = random_table(V, 4, eos=EOS)
    model = PrefixModel(table, backend=backend)
    trace = Trace()
    h = greedy_decode(model.step, model.init_state(), 0, EOS, 6, trace=trace, trace_width=2)
    tokens, logprob = greedy_oracle(table, EOS, 6)
    assert trace.tokens(trace.best(0)) == tokens == h.tokens
    assert trace.logprob[trace.best(0)] == pytest.approx(logprob, abs=1e-9)
    assert ((trace.status == KEPT) | (trace.status == ROOT)).sum() == len(tokens)  # a chain
    for v in np.flatnonzero(trace.status == PRUNED):  # each pruned one is no better than the argmax
        seq = trace.tokens(int(trace.parent[v]))
        row = log_softmax(table(tuple(seq)))
        assert row[trace.token[v]] <= row[tokens[len(seq)]]


def test_beam_search_each_several_inputs_and_results_unchanged():
    table = random_table(V, 6, eos=EOS)
    model = PrefixModel(table)
    want = beam_search_each(model.step, model.init_state(3), 3, 0, EOS, 2, 4, 0.5)
    trace = Trace()
    got = beam_search_each(model.step, model.init_state(3), 3, 0, EOS, 2, 4, 0.5, trace=trace)
    assert got == want
    for i in range(3):
        assert [trace.tokens(int(v)) for v in trace.results(i)] == [h.tokens for h in want[i]]


def test_empty_batch_gives_an_empty_trace():
    trace = Trace()
    model = SequenceModel(random_table(V, 0))
    assert beam_search_batch(model.step, model.init_state([]), [], eos_token_id=EOS, max_steps=3,
                             beam_size=2, trace=trace) == []
    assert len(trace) == 0 and trace.n_inputs == 0


@pytest.mark.parametrize("kw, error, words", [
    (dict(callback=3), TypeError, ["callback", "3"]),
    (dict(trace="yes"), TypeError, ["trace", "yes"]),
    (dict(trace_width=-1), ValueError, ["trace_width", "-1"]),
    (dict(trace_width=2.0), TypeError, ["trace_width", "2.0"]),
    (dict(trace_width=True, trace=Trace()), TypeError, ["trace_width", "True"]),
])
def test_bad_arguments_before_any_model_call(kw, error, words):
    model = SequenceModel(random_table(V, 0))
    with pytest.raises(error) as e:
        beam_search_batch(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS, max_steps=3,
                          beam_size=2, **kw)
    assert all(w in str(e.value) for w in words) and model.calls == []
    model = PrefixModel(random_table(V, 0))
    with pytest.raises(error):
        beam_search(model.step, model.init_state(), 0, EOS, 2, 3, **kw)
    assert model.calls == []


def test_a_trace_holds_one_search():
    model = PrefixModel(random_table(V, 0))
    trace = Trace()
    beam_search(model.step, model.init_state(), 0, EOS, 2, 3, trace=trace)
    calls = len(model.calls)
    with pytest.raises(ValueError, match="trace already holds a search"):
        beam_search(model.step, model.init_state(), 0, EOS, 2, 3, trace=trace)
    assert len(model.calls) == calls


@pytest.mark.parametrize("answer, error, word", [
    ([7], ValueError, "[7]"), ([-1], ValueError, "[-1]"), (np.ones(2, bool), ValueError, "(2,)"),
    (["a"], TypeError, "'a'"), ([[0]], TypeError, "[[0]]"),
])
def test_bad_callback_answers(answer, error, word):
    model = SequenceModel(random_table(V, 0))
    with pytest.raises(error) as e:
        beam_search_batch(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS, max_steps=3,
                          beam_size=2, callback=lambda record: answer)
    assert "callback" in str(e.value) and word in str(e.value)


MODES = {  # every search mode, with the keywords that make it do its own thing
    "constrained": lambda step, state, prompts, **kw: constrained_beam_search(
        step, state, prompts, constraints=[[[1, 2]], [], [AnyOf([3], [0, 0])], [[2]]], beam_size=3, n_best=2, **kw),
    "diverse": lambda step, state, prompts, **kw: diverse_beam_search(
        step, state, prompts, num_groups=2, diversity_penalty=0.7, beam_size=4, n_best=2, **kw),
    "stochastic": lambda step, state, prompts, **kw: stochastic_beam_search(
        step, state, prompts, k=3, seed=5, **{k: v for k, v in kw.items() if k != "alpha"}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_search_mode_is_traced_without_changing_its_results(backend, mode):
    table = random_table(V, 11, levels=3, eos=EOS, eos_shift=0.5)
    run = MODES[mode]
    kw = dict(eos_token_id=EOS, max_steps=5, alpha=0.6)
    model = SequenceModel(table, backend=backend)
    untraced = run(model.step, model.init_state(PROMPTS), PROMPTS, **kw)
    trace, seen = Trace(), []
    model = SequenceModel(table, backend=backend)
    traced = run(model.step, model.init_state(PROMPTS), PROMPTS, trace=trace, callback=seen.append, **kw)
    assert plain(traced) == plain(untraced)
    assert len(seen) == len(model.calls)
    for i, hyps in enumerate(traced):
        nodes = trace.results(i)
        assert [trace.tokens(int(v)) for v in nodes] == [h.tokens for h in hyps]
        assert [float(trace.logprob[v]) for v in nodes] == [h.logprob for h in hyps]
        assert [bool(trace.status[v] == FINISHED) for v in nodes] == [h.finished for h in hyps]
    kept = np.flatnonzero(trace.status == KEPT)
    for v in np.flatnonzero(trace.status != ROOT):  # every node hangs off a kept node (or the root) one step up
        p = int(trace.parent[v])
        assert trace.status[p] in (KEPT, ROOT) and trace.step[p] == trace.step[v] - 1
    assert kept.size > 0


# The trace and the step record field by field: every number against teacher-forced rescoring or a
# hand computation, every array's documented dtype, the stop bookkeeping against the plain reference
# of tests/models.py, and the callback's answers (`stop_mask`) by hand.


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
