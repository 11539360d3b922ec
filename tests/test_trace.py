"""The step callback and the search trace, checked against the search itself and against plain
oracles from tests/models.py (teacher-forced rescoring, the one-hypothesis-at-a-time reference,
a plain per-row enumeration of each step's candidates)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import (AnyOf, beam_search, beam_search_batch, beam_search_each, constrained_beam_search,
                        diverse_beam_search, greedy_decode, stochastic_beam_search)
from beamsearch.core.trace import (CALLBACK, EARLY_STOP, FINISHED, KEPT, MAX_STEPS, NO_ROWS, PRUNED, ROOT,
                               UNFINISHED, StepRecord)
from beamsearch.viz import Trace
from models import (PrefixModel, SequenceModel, gnmt, greedy_oracle, log_softmax, processed_logprobs,
                    random_table, reference_batch)

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
        for node, h in zip(nodes, hyps):  # every returned hypothesis is a node, ranked as returned
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
