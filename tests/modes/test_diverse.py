"""diverse_beam_search (Vijayakumar et al. 2016): against beam_search_batch (G = 1; lambda = 0 as G
independent beams), a hand-computed example, and a plain one-hypothesis-at-a-time reference loop
written from the paper's definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import beam_search_batch
from beamsearch.core.trace import PRUNED, SearchTree
from beamsearch.modes.diverse import diverse_beam_search
from models import SequenceModel, gnmt, processed_logprobs, random_table

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]
EOS = 3


def reference_diverse(table, prompts, *, eos, max_steps, beam, groups, lam, n_best, alpha=0.6,
                      temperature=1.0, top_k=None, ngram=0):
    """Diverse beam search from the paper's definition, one input and one hypothesis at a time.

    Per step the groups choose in order; group g ranks each (row of group g, token) by
    logprob + log p(token) - lam * (times the earlier groups of this step chose the token), ties to
    the lower (row position in the group, token), and keeps its beam // groups best non-eos
    extensions; every finite eos extension of every row finishes. Each group is a beam of its own
    that starts from the empty hypothesis (so a step-1 eos finishes once per group). No early
    stop. Result: finished by score (stable, production order), cut to n_best, filled with the
    live rows at the end by score.
    Returns per input ``(tokens, logprob, score, finished)``.
    """
    width = beam // groups
    results = []
    for prompt in prompts:
        rows = [(g, (), 0.0) for g in range(groups)]  # (group, tokens, logprob)
        finished = []
        for _ in range(max_steps):
            logps = [processed_logprobs(table(tuple(prompt) + t), tuple(prompt) + t, temperature=temperature,
                                        top_k=top_k, ngram=ngram) for _, t, _ in rows]
            for (_, tokens, lp), row in zip(rows, logps, strict=True):
                if math.isfinite(row[eos]):
                    finished.append((tokens + (eos,), lp + row[eos]))
            chosen: dict[int, int] = {}
            new_rows = []
            for g in range(groups):
                mine = [(t, lp, row) for (grp, t, lp), row in zip(rows, logps, strict=True) if grp == g]
                cands = []
                for pos, (tokens, lp, row) in enumerate(mine):
                    for v, logp in enumerate(row):
                        if v != eos and math.isfinite(logp):
                            cands.append((lp + logp - lam * chosen.get(v, 0), pos, v, tokens + (v,), lp + logp))
                cands.sort(key=lambda c: (-c[0], c[1], c[2]))
                for _, _, v, tokens, lp in cands[:width]:
                    chosen[v] = chosen.get(v, 0) + 1
                    new_rows.append((g, tokens, lp))
            rows = new_rows
            if not rows:
                break
        done = sorted([(t, lp, lp / gnmt(len(t), alpha), True) for t, lp in finished], key=lambda h: -h[2])
        rest = sorted([(t, lp, lp / gnmt(len(t), alpha), False) for _, t, lp in rows], key=lambda h: -h[2])
        results.append((done + rest)[:n_best])
    return results


def run(table, prompts, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    return diverse_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, **kw), model


def plain(table, prompts, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    return beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, **kw)


def same(got, want):
    assert [[(tuple(h.tokens), h.finished) for h in hyps] for hyps in got] == \
           [[(tuple(w[0]), w[3]) for w in hyps] for hyps in want]
    for hyps, ws in zip(got, want, strict=True):
        assert [h.logprob for h in hyps] == pytest.approx([w[1] for w in ws], abs=1e-9)
        assert [h.score for h in hyps] == pytest.approx([w[2] for w in ws], abs=1e-9)


def as_tuples(results):
    return [[(tuple(h.tokens), h.logprob, h.score, h.finished) for h in hyps] for hyps in results]


PROMPTS = [[0], [1, 2], [4], [2, 2, 1]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_one_group_is_beam_search_batch(backend, seed):
    table = random_table(5, seed, eos=EOS, eos_shift=0.7)
    kw = dict(max_steps=5, beam_size=3, n_best=2)
    if seed % 2:
        kw.update(temperature=0.8, top_k=4, no_repeat_ngram_size=2, alpha=1.0)
    got, _ = run(table, PROMPTS, backend, num_groups=1, diversity_penalty=2.0, **kw)
    # tokens, logprobs, scores bit for bit: one backend, and G = 1 selects by the plain batched rule
    assert got == plain(table, PROMPTS, backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_zero_penalty_is_independent_beams_merged(backend, seed):
    # lambda = 0: G groups of width B/G are G independent beam_search_batch runs of beam B/G; the
    # merge: every group's results together, finished first, by score (stable: group order), cut
    # to n_best
    groups, width, n_best = 3, 2, 2
    table = random_table(5, 40 + seed, eos=EOS, eos_shift=0.5)
    got, _ = run(table, PROMPTS, backend, num_groups=groups, diversity_penalty=0.0, beam_size=groups * width,
                 n_best=n_best, max_steps=5)
    alone = plain(table, PROMPTS, backend, beam_size=width, n_best=n_best, max_steps=5)
    for i, hyps in enumerate(got):
        merged = [h for _ in range(groups) for h in alone[i]]  # the G runs are the same run
        merged.sort(key=lambda h: (not h.finished, -h.score))
        assert as_tuples([hyps]) == as_tuples([merged[:n_best]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_hand_computed_two_groups(backend):
    # V=4 {A=0, B=1, C=2, eos=3}. After the prompt: p(A, B, C, eos) = 0.5, 0.3, 0.2, 0; after any
    # token: eos for sure. beam 4 = 2 groups of 2, alpha = 0 (score = logprob).
    # Group 0 takes A (ln .5 = -0.693) and B (ln .3 = -1.204). Group 1 with lambda = 1 ranks
    # A: -0.693 - 1 = -1.693, B: -1.204 - 1 = -2.204, C: ln .2 = -1.609 -> C, then A (no penalty: A, B).
    # Step 2 finishes each row with eos (log 1 = 0), in row order: A, B (group 0), C, A (group 1).
    # Ranked by score: A eos (group 0), A eos (group 1, tie: produced later), B eos, C eos; the
    # logprobs are the model's: group 1's A is ln .5, not -1.693.
    probs = {1: [0.5, 0.3, 0.2, 0.0], 2: [0.0, 0.0, 0.0, 1.0]}

    def table(seq):
        with np.errstate(divide="ignore"):
            return np.log(probs[min(len(seq), 2)])

    got, model = run(table, [[0]], backend, num_groups=2, diversity_penalty=1.0, beam_size=4, n_best=4,
                     max_steps=3, alpha=0.0)
    assert [h.tokens for h in got[0]] == [[0, 3], [0, 3], [1, 3], [2, 3]]
    assert [h.logprob for h in got[0]] == pytest.approx([math.log(.5), math.log(.5), math.log(.3), math.log(.2)],
                                                        abs=1e-12)
    assert [p[-1] for p in model.calls[1]] == [0, 1, 2, 0]  # rows of step 2: group 0's, then group 1's
    # a weaker penalty (0.3: A -0.993 still beats C -1.609) leaves group 1 choosing as group 0
    weak, _ = run(table, [[0]], backend, num_groups=2, diversity_penalty=0.3, beam_size=4, n_best=4,
                  max_steps=3, alpha=0.0)
    assert [h.tokens for h in weak[0]] == [[0, 3], [0, 3], [1, 3], [1, 3]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_equals_the_reference_loop(backend, seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.integers(2, 4))
    width = int(rng.integers(1, 3))
    lam = float(rng.choice([0.3, 1.0, 2.5]))
    n_best = int(rng.integers(1, groups * width + 1))
    table = random_table(5, 100 + seed, eos=EOS, eos_shift=0.4)
    kw = dict(temperature=0.9, top_k=4, no_repeat_ngram_size=2) if seed % 2 else {}
    got, _ = run(table, PROMPTS, backend, num_groups=groups, diversity_penalty=lam, beam_size=groups * width,
                 n_best=n_best, max_steps=4, early_stop=False, **kw)
    ref_kw = {"temperature": kw.get("temperature", 1.0), "top_k": kw.get("top_k"),
              "ngram": kw.get("no_repeat_ngram_size", 0)}
    same(got, reference_diverse(table, PROMPTS, eos=EOS, max_steps=4, beam=groups * width, groups=groups,
                                lam=lam, n_best=n_best, **ref_kw))


@pytest.mark.parametrize("seed", range(6))
def test_early_stop_is_lossless(seed):
    table = random_table(5, 200 + seed, eos=EOS, eos_shift=1.0)
    kw = dict(num_groups=2, diversity_penalty=0.8, beam_size=4, n_best=3, max_steps=7)
    stopped, m1 = run(table, PROMPTS, early_stop=True, **kw)
    full, m2 = run(table, PROMPTS, early_stop=False, **kw)
    assert as_tuples(stopped) == as_tuples(full)
    assert sum(len(c) for c in m1.calls) <= sum(len(c) for c in m2.calls)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_independence(backend):
    table = random_table(5, 7, eos=EOS, eos_shift=0.5)
    kw = dict(num_groups=2, diversity_penalty=1.5, beam_size=4, n_best=3, max_steps=[5, 3, 6, 4])
    batch, _ = run(table, PROMPTS, backend, **kw)
    for i, p in enumerate(PROMPTS):
        alone, _ = run(table, [p], backend, **{**kw, "max_steps": kw["max_steps"][i]})
        assert as_tuples([batch[i]]) == as_tuples(alone)  # bit for bit: rows computed alone (tests/approx.py)


@pytest.mark.parametrize("backend", BACKENDS)
def test_controls_compose(backend):
    table = random_table(5, 17, eos=EOS, eos_shift=0.5)
    controls = dict(min_new_tokens=2, stop_sequences=[[1, 2]], prefix=[[4], [], [0, 1], []],
                    no_repeat_ngram_size=2, return_token_logprobs=True, pad_token_id=EOS)
    got, _ = run(table, PROMPTS, backend, num_groups=2, diversity_penalty=1.0, beam_size=4, n_best=3,
                 max_steps=6, **controls)
    # G = 1 with the same controls is the batched search exactly
    one, _ = run(table, PROMPTS, backend, num_groups=1, diversity_penalty=1.0, beam_size=2, n_best=2,
                 max_steps=6, **controls)
    assert one == plain(table, PROMPTS, backend, beam_size=2, n_best=2, max_steps=6, **controls)
    for prompt, pre, hyps in zip(PROMPTS, controls["prefix"], got, strict=True):
        assert hyps
        for h in hyps:
            assert h.tokens[: len(pre)] == pre
            if h.finished:
                assert len(h.tokens) > 2 and (h.tokens[-1] == EOS or h.tokens[-2:] == [1, 2])
            seq = prompt + h.tokens
            grams = [tuple(seq[i:i + 2]) for i in range(len(seq) - 1)]
            assert len(grams) == len(set(grams))
            assert sum(h.token_logprobs) == pytest.approx(h.logprob, abs=1e-9)
    assert got.arrays().tokens.shape[:2] == (4, 3)


def test_errors_before_any_model_call():
    table = random_table(5, 1, eos=EOS)
    model = SequenceModel(table)

    def call(**kw):
        args = dict(num_groups=2, diversity_penalty=1.0, beam_size=4, eos_token_id=EOS, max_steps=3)
        return diverse_beam_search(model.step, model.init_state([[0]]), [[0]], **{**args, **kw})

    with pytest.raises(ValueError, match="num_groups must divide beam_size=4; got num_groups=3"):
        call(num_groups=3)
    with pytest.raises(ValueError, match="num_groups must be >= 1; got 0"):
        call(num_groups=0)
    with pytest.raises(TypeError, match="num_groups must be an integer; got 2.0"):
        call(num_groups=2.0)
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="diversity_penalty must be >= 0 and finite"):
            call(diversity_penalty=bad)
    with pytest.raises(TypeError, match="diversity_penalty must be a real number"):
        call(diversity_penalty="1")
    with pytest.raises(ValueError, match="n_best must be <= beam_size=4; got 5"):
        call(n_best=5)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        call(top_k=0)
    assert model.calls == []


# diverse_beam_search at the edges its other tests leave: wide groups against the reference loop
# (more rows than a small sort keeps in order by chance), the documented defaults (one result per
# input, early stopping, three pruned candidates per row in the trace), early stopping counted in
# model calls on a model worked by hand, and errors that name the parameter and the mode.


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


@pytest.mark.parametrize("width", [1, 2])
def test_the_trace_records_trace_width_pruned_candidates_per_row(width):
    """V = 7, eos = 3: every row has 6 finite candidates that are not eos and its group keeps 2
    children in all, so every row has 4 or more pruned ones; the trace records exactly ``width``
    of them for some row and never more (both below the default 3)."""
    table = random_table(7, 5, eos=EOS, eos_shift=0.3)
    tree = SearchTree()
    run(table, [[0]], num_groups=2, diversity_penalty=1.0, beam_size=4, max_steps=2, trace=tree, trace_width=width)
    pruned = tree.status == PRUNED
    per_parent = np.bincount(tree.parent[pruned], minlength=len(tree))
    assert per_parent.max() == width


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
    """Logits of two levels, 0 for four tokens chosen per prefix by a hash and -1000 for the other
    three: ties everywhere (V = 7), exact by construction. exp(-1000) is 0 in float32 and float64,
    so every row's sum of exponentials is exactly 4 in any summation order and every row's
    log-probabilities are the same two values, -log 4 and -1000 - log 4: hypotheses of one length
    and one shape have bit-equal logprobs on every backend and CPU. (Levels 0 and 1 at positions
    that vary per row gave sums of exponentials whose rounding depends on where the ones sit in
    the vectorized reduction: one ulp apart on some CPUs, so no longer ties there.)"""
    def table(prefix):
        rng = np.random.default_rng(abs(hash((seed,) + tuple(prefix))) % (2**32))
        logits = np.full(7, -1000.0)
        logits[rng.permutation(7)[:4]] = 0.0
        return logits
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
