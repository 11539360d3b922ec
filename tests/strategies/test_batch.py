"""beam_search_batch (SPEC section 6): seed 001's self-tests, oracles and properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approx import assert_same_hypotheses
from beamsearch import BatchResults, Hypothesis, TokenLogprobHypothesis, beam_search_batch
from beamsearch.processors import banned_ngram_tokens
from models import SequenceModel, brute_force_batch, random_table, reference_batch

try:
    import torch
except ImportError:
    torch = None

BOS, A, B, C, EOS = 0, 1, 2, 3, 4
# Seed 001's toy model: logits by the previous token.
SEED_LOGITS = {
    BOS: [-10, 3.0, 2.0, 1.0, 0.5],
    A: [-10, 0.5, 1.0, 0.0, 2.5],
    B: [-10, 1.5, 0.5, 0.0, 1.0],
    C: [-10, 0.0, 1.0, 0.5, 2.0],
    EOS: [-math.inf] * 5,
}


def seed_table(seq):
    return SEED_LOGITS[seq[-1]]


def lp(prev, token, temperature=1.0, keep=None):
    """log p(token | prev) under the seed model, written out: x/t - log(sum exp(x/t))."""
    x = [v / temperature for v in SEED_LOGITS[prev]]
    idx = keep if keep is not None else range(5)
    return x[token] - math.log(sum(math.exp(x[i]) for i in idx))


def gnmt(length, alpha):
    return ((5 + length) / 6) ** alpha


def run(prompts, **kw):
    model = SequenceModel(seed_table)
    out = beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, **kw)
    return out, model


def check(hyps, expected):
    assert [tuple(h.tokens) for h in hyps] == [e[0] for e in expected]
    for h, (_, logprob, score) in zip(hyps, expected, strict=True):
        assert h.finished and type(h) is Hypothesis
        assert h.logprob == pytest.approx(logprob, abs=1e-12)
        assert h.score == pytest.approx(score, abs=1e-12)


def test_seed_001_test_1_basic_and_length_penalty():
    out, model = run([[BOS]], max_steps=4, beam_size=3, n_best=2, alpha=0.6)
    # step 1 expands A, B, C (one initial hypothesis, never three copies of it)
    assert sorted(p[-1] for p in model.calls[1]) == [A, B, C]
    # By hand: A eos = ln p(A|bos) + ln p(eos|A) = -0.4608 - 0.3650 = -0.8258, / lp(2) = 1.0969
    # B A eos = -1.4608 - 0.7874 - 0.3650 = -2.6131, / lp(3) = 1.1884 -> -2.1989, which beats
    # B eos = -2.7482 / 1.0969 = -2.5055 and C eos -> -2.741 and A B A eos -> -2.727.
    a_eos = lp(BOS, A) + lp(A, EOS)
    b_a_eos = lp(BOS, B) + lp(B, A) + lp(A, EOS)
    check(out[0], [((A, EOS), a_eos, a_eos / gnmt(2, 0.6)), ((B, A, EOS), b_a_eos, b_a_eos / gnmt(3, 0.6))])
    assert out[0][0].score > out[0][1].score
    # the brute-force optimum over every output agrees
    best = brute_force_batch(seed_table, [BOS], 5, eos=EOS, max_steps=4, alpha=0.6)[:2]
    assert [b[0] for b in best] == [(A, EOS), (B, A, EOS)]


def test_seed_001_test_2_top_k_and_temperature():
    out, model = run([[BOS]], max_steps=4, beam_size=3, n_best=2, alpha=0.6, temperature=0.7, top_k=2)
    # from bos only A and B survive top-2; so only two rows at step 2
    assert sorted(p[-1] for p in model.calls[1]) == [A, B]
    # by hand: after bos keep {A, B}; after A keep {eos, B}; after B keep {A, eos}
    a_eos = lp(BOS, A, 0.7, keep=[A, B]) + lp(A, EOS, 0.7, keep=[EOS, B])
    b_a_eos = lp(BOS, B, 0.7, keep=[A, B]) + lp(B, A, 0.7, keep=[A, EOS]) + lp(A, EOS, 0.7, keep=[EOS, B])
    check(out[0], [((A, EOS), a_eos, a_eos / gnmt(2, 0.6)), ((B, A, EOS), b_a_eos, b_a_eos / gnmt(3, 0.6))])
    for h in out[0]:
        assert C not in h.tokens


def test_seed_001_test_3_no_repeat_bigram():
    out, model = run([[BOS, A]], max_steps=5, beam_size=3, n_best=2, alpha=0.0, no_repeat_ngram_size=2)
    # the prompt holds the bigram (bos, A): after bos nothing is banned (bos never follows), but
    # after A every token already seen after A is banned: at step 1 the prompt ends in A and no
    # bigram (A, x) exists yet, so eos is free: eos = ln p(eos|A) = -0.3650 (alpha 0: score = logprob)
    eos_now = lp(A, EOS)
    # second: A -> A is the bigram (A, A); then after A the bigram (A, A) is banned: p(eos | A)
    # renormalized without A: eos logit 2.5 against {bos -10, B 1.0, C 0.0, eos 2.5}
    a_then_eos = lp(A, A) + lp(A, EOS, keep=[BOS, B, C, EOS])
    check(out[0], [((EOS,), eos_now, eos_now), ((A, EOS), a_then_eos, a_then_eos)])
    for h in out[0]:
        seq = [BOS, A] + h.tokens
        grams = [tuple(seq[i:i + 2]) for i in range(len(seq) - 1)]
        assert len(grams) == len(set(grams))


def test_seed_001_test_4_batch_and_early_stop():
    prompts = [[BOS], [BOS, A]]
    out, model = run(prompts, max_steps=5, beam_size=2, n_best=1, alpha=0.6)
    a_eos = lp(BOS, A) + lp(A, EOS)
    check(out[0], [((A, EOS), a_eos, a_eos / gnmt(2, 0.6))])
    check(out[1], [((EOS,), lp(A, EOS), lp(A, EOS) / gnmt(1, 0.6))])
    late, late_model = run(prompts, max_steps=5, beam_size=2, n_best=1, alpha=0.6, early_stop=False)
    # equal bit for bit, here and alone below: one backend, a model that computes each row alone,
    # and every float the search computes is a row's own (tests/approx.py)
    assert late == out
    # early stop made fewer model calls, and each input stopped on its own
    assert sum(map(len, model.calls)) < sum(map(len, late_model.calls))
    for prompts_alone, result in (([[BOS]], out[0]), ([[BOS, A]], out[1])):
        alone, _ = run(prompts_alone, max_steps=5, beam_size=2, n_best=1, alpha=0.6)
        assert alone[0] == result


def test_token_logprobs_of_finished_hypotheses_by_hand():
    out, _ = run([[BOS]], max_steps=4, beam_size=3, n_best=2, alpha=0.6, return_token_logprobs=True)
    a_eos, b_a_eos = out[0]
    assert type(a_eos) is TokenLogprobHypothesis and a_eos.finished
    assert a_eos.token_logprobs == pytest.approx([lp(BOS, A), lp(A, EOS)], abs=1e-12)
    assert b_a_eos.token_logprobs == pytest.approx([lp(BOS, B), lp(B, A), lp(A, EOS)], abs=1e-12)


def test_defaults_are_gnmt_with_alpha_0_6():
    default, _ = run([[BOS]], max_steps=4, beam_size=3, n_best=2)
    explicit, _ = run([[BOS]], max_steps=4, beam_size=3, n_best=2, alpha=0.6, length_penalty="gnmt")
    assert default == explicit
    assert default[0][0].score == pytest.approx(default[0][0].logprob / gnmt(2, 0.6), abs=1e-12)


def test_results_fill_with_live_rows_and_view_as_arrays():
    # eos is masked: nothing finishes, so the live rows fill up to n_best, unfinished
    def no_eos(seq):
        row = list(SEED_LOGITS[seq[-1]])
        row[EOS] = -math.inf
        return row

    model = SequenceModel(no_eos)
    prompts = [[BOS], [BOS, C]]
    out = beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=3,
                            beam_size=3, n_best=2, pad_token_id=9, return_token_logprobs=True)
    assert isinstance(out, BatchResults)
    for hyps in out:
        assert len(hyps) == 2 and all(not h.finished and len(h.tokens) == 3 for h in hyps)
        assert all(isinstance(h, TokenLogprobHypothesis) for h in hyps)
        for h in hyps:
            assert sum(h.token_logprobs) == pytest.approx(h.logprob, abs=1e-12)
    arrays = out.arrays()
    assert arrays.tokens.shape == (2, 2, 3) and arrays.scores.shape == (2, 2)
    assert arrays.tokens[1, 0].tolist() == out[1][0].tokens
    assert arrays.token_logprobs[0, 1].tolist() == pytest.approx(out[0][1].token_logprobs)


def test_arrays_pad_short_and_missing_results():
    def kill_input_1(logits, ctx):  # processing leaves input 1's rows with no finite entry
        logits[ctx.row_input == 1] = -np.inf
        return logits

    out, model = run([[BOS], [BOS]], max_steps=4, beam_size=3, n_best=2, alpha=0.6, pad_token_id=7,
                     logits_processors=[kill_input_1])
    assert out[1] == [] and len(model.calls[1]) == 3  # no error, no extension, no more rows
    arrays = out.arrays()
    assert arrays.tokens[0, 0].tolist() == [A, EOS, 7]
    assert arrays.lengths.tolist() == [[2, 3], [0, 0]]
    assert arrays.scores[1].tolist() == [-math.inf, -math.inf] and arrays.token_logprobs is None
    with pytest.raises(ValueError, match="pad_token_id"):
        run([[BOS]], max_steps=2, beam_size=2)[0].arrays()


def test_power_length_penalty_and_custom_processor():
    def ban_b(logits, ctx):  # a user's token mask: B is never allowed
        logits[:, B] = -np.inf
        return logits

    out, _ = run([[BOS]], max_steps=4, beam_size=3, n_best=3, alpha=1.0, length_penalty="power",
                 logits_processors=[ban_b])
    expected = reference_batch(lambda s: [v if i != B else -math.inf for i, v in enumerate(seed_table(s))],
                               [[BOS]], eos=EOS, max_steps=4, beam=3, n_best=3, alpha=1.0,
                               penalty=lambda n, a: n ** a)
    assert [tuple(h.tokens) for h in out[0]] == [e[0] for e in expected[0]]
    assert [h.score for h in out[0]] == pytest.approx([e[2] for e in expected[0]], abs=1e-12)
    assert all(B not in h.tokens for h in out[0])


def test_stopped_inputs_are_not_passed_again():
    # input 0 ends at step 1 (its only finite token is eos); input 1 goes on
    def table(seq):
        if seq[0] == C:
            return [-math.inf, -math.inf, -math.inf, -math.inf, 0.0]
        return SEED_LOGITS[seq[-1]]

    model = SequenceModel(table)
    prompts = [[C], [BOS]]
    beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=4,
                      beam_size=2, early_stop=False)
    assert model.calls[0] == [(C,), (BOS,)]
    assert all(p[0] == BOS for call in model.calls[1:] for p in call)
    assert [len(c) for c in model.calls] == [2, 2, 2, 2]


# ---- properties over random models -----------------------------------------------------------

batch_cases = st.fixed_dictionaries({
    "vocab": st.integers(2, 6),
    "seed": st.integers(0, 10_000),
    "levels": st.sampled_from([None, 1, 2]),
    "prompts": st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=4),
    "beam": st.integers(1, 4),
    "n_best": st.integers(1, 4),
    "max_steps": st.integers(1, 5),
    "alpha": st.sampled_from([0.0, 0.6, 1.5]),
    "ngram": st.sampled_from([0, 0, 1, 2, 3]),
    "temperature": st.sampled_from([1.0, 0.5, 2.0]),
    "top_k": st.sampled_from([None, 1, 2, 3]),
})


def _setup(case):
    vocab = case["vocab"]
    prompts = [[t % vocab for t in p] for p in case["prompts"]]
    table = random_table(vocab, case["seed"], levels=case["levels"], eos=0, eos_shift=0.5)
    kw = dict(eos_token_id=0, max_steps=case["max_steps"], beam_size=case["beam"],
              n_best=min(case["n_best"], case["beam"]), alpha=case["alpha"],
              no_repeat_ngram_size=case["ngram"], temperature=case["temperature"], top_k=case["top_k"])
    return table, prompts, kw


def _search(table, prompts, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    return beam_search_batch(model.step, model.init_state(prompts), prompts, **kw), model


def _as_tuples(results):
    return [[(tuple(h.tokens), h.finished) for h in hyps] for hyps in results]


@settings(max_examples=80, deadline=None)
@given(batch_cases)
def test_equals_the_plain_reference(case):
    table, prompts, kw = _setup(case)
    out, model = _search(table, prompts, **kw)
    ref = reference_batch(table, prompts, eos=0, max_steps=kw["max_steps"], beam=kw["beam_size"],
                          n_best=kw["n_best"], alpha=kw["alpha"], ngram=case["ngram"],
                          temperature=kw["temperature"], top_k=kw["top_k"])
    assert _as_tuples(out) == [[(e[0], e[3]) for e in r] for r in ref]
    for hyps, r in zip(out, ref, strict=True):
        assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in r], abs=1e-9)
        assert [h.score for h in hyps] == pytest.approx([e[2] for e in r], abs=1e-9)
    # one row per input at the first call, never more than beam_size per input after
    assert len(model.calls[0]) == len(prompts)
    assert all(len(call) <= kw["beam_size"] * len(prompts) for call in model.calls)


@settings(max_examples=60, deadline=None)
@given(batch_cases)
def test_early_stop_is_lossless_and_inputs_are_independent(case):
    table, prompts, kw = _setup(case)
    early, early_model = _search(table, prompts, **kw, early_stop=True)
    late, late_model = _search(table, prompts, **kw, early_stop=False)
    assert early == late  # bit for bit, and alone below: one backend, rows computed alone (tests/approx.py)
    assert sum(map(len, early_model.calls)) <= sum(map(len, late_model.calls))
    for i, prompt in enumerate(prompts):
        alone, alone_model = _search(table, [prompt], **kw)
        assert alone[0] == early[i]
        # it stops at the very step the plain reference stops
        steps: list[int] = []
        reference_batch(table, [prompt], eos=0, max_steps=kw["max_steps"], beam=kw["beam_size"],
                        n_best=kw["n_best"], alpha=kw["alpha"], ngram=case["ngram"], temperature=kw["temperature"],
                        top_k=kw["top_k"], steps=steps)
        assert len(alone_model.calls) == steps[0]


@settings(max_examples=60, deadline=None)
@given(batch_cases)
def test_output_invariants(case):
    table, prompts, kw = _setup(case)
    out, _ = _search(table, prompts, **kw)
    n, k = kw["no_repeat_ngram_size"], kw["top_k"]
    for prompt, hyps in zip(prompts, out, strict=True):
        assert len(hyps) <= kw["n_best"]
        finished = [h for h in hyps if h.finished]
        assert hyps[: len(finished)] == finished  # finished first, then the fill
        assert [h.score for h in finished] == sorted((h.score for h in finished), reverse=True)
        for h in hyps:
            assert h.tokens.count(0) == int(h.finished) and (not h.finished or h.tokens[-1] == 0)
            assert h.score == pytest.approx(h.logprob / gnmt(len(h.tokens), kw["alpha"]), abs=1e-12)
            seq = list(prompt) + h.tokens
            for end in range(len(prompt) + 1, len(seq) + 1) if n > 0 else ():
                # the n-gram a generated token completes was not in the sequence before it
                earlier = [tuple(seq[i:i + n]) for i in range(end - n)]
                assert end < n or tuple(seq[end - n:end]) not in earlier, "a repeated n-gram"
            for t in range(len(h.tokens)):
                row = np.asarray(table(tuple(seq[: len(prompt) + t])))
                if k is not None and k < len(row):
                    assert row[h.tokens[t]] >= np.sort(row)[::-1][k - 1], "a token outside top-k"


@pytest.mark.skipif(torch is None, reason="torch not installed")
@settings(max_examples=60, deadline=None)
@given(batch_cases)
def test_numpy_and_torch_agree(case):
    table, prompts, kw = _setup(case)
    a, _ = _search(table, prompts, "numpy", **kw)
    b, _ = _search(table, prompts, "torch", **kw)
    assert_same_hypotheses(a, b)


@pytest.mark.parametrize("vocab, max_steps, alpha", [(3, 4, 0.6), (4, 3, 1.0), (3, 3, 0.0)])
def test_nothing_pruned_equals_brute_force(vocab, max_steps, alpha):
    table = random_table(vocab, 31, eos=0, eos_shift=0.3)
    beam = vocab ** max_steps
    best = brute_force_batch(table, [1], vocab, eos=0, max_steps=max_steps, alpha=alpha)
    out, _ = _search(table, [[1]], eos_token_id=0, max_steps=max_steps, beam_size=beam, n_best=len(best),
                     alpha=alpha)
    assert [tuple(h.tokens) for h in out[0]] == [b[0] for b in best]
    assert [h.logprob for h in out[0]] == pytest.approx([b[1] for b in best], abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=9), min_size=1, max_size=5),
       st.integers(1, 4))
def test_ngram_blocker_equals_a_plain_loop(sequences, n):
    width = max(len(s) for s in sequences)
    history = np.full((len(sequences), width), -1, dtype=np.int64)
    for i, s in enumerate(sequences):
        if s:
            history[i, width - len(s):] = s
    rows, tokens = banned_ngram_tokens(history, n)
    got = {(int(r), int(t)) for r, t in zip(rows, tokens, strict=True)}
    expected = set()
    for i, s in enumerate(sequences):
        if len(s) < n - 1:
            continue
        tail = tuple(s[len(s) - (n - 1):])
        for j in range(len(s) - n + 1):
            if tuple(s[j:j + n - 1]) == tail:
                expected.add((i, s[j + n - 1]))
    assert got == expected


@pytest.mark.parametrize("backend", ["numpy"] + (["torch"] if torch is not None else []))
def test_fixed_cases_equal_the_plain_reference(backend):
    """30 fixed tie-heavy cases per backend (the property tests explore more, randomly)."""
    rng = np.random.default_rng(5)
    for case in range(30):
        vocab = int(rng.integers(2, 6))
        table = random_table(vocab, case, levels=int(rng.integers(1, 3)), eos=0, eos_shift=0.5)
        prompts = [[int(t) for t in rng.integers(0, vocab, size=rng.integers(1, 4))] for _ in range(3)]
        beam = int(rng.integers(1, 4))
        kw = dict(max_steps=int(rng.integers(1, 5)), n_best=int(rng.integers(1, beam + 1)),
                  alpha=float(rng.choice([0.0, 0.6])), temperature=float(rng.choice([1.0, 0.5])))
        ngram, top_k = int(rng.choice([0, 2, 3])), [None, 1, 2][case % 3]
        out, _ = _search(table, prompts, backend, eos_token_id=0, beam_size=beam, no_repeat_ngram_size=ngram,
                         top_k=top_k, **kw)
        ref = reference_batch(table, prompts, eos=0, beam=beam, ngram=ngram, top_k=top_k, **kw)
        assert _as_tuples(out) == [[(e[0], e[3]) for e in r] for r in ref], case
        for hyps, r in zip(out, ref, strict=True):
            assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in r], abs=1e-9)


BOTH_RANKINGS = ["grouped", "merged"]


@pytest.fixture
def ranking(request, monkeypatch):
    """The two exact rankings of an input's rows (one [G, r*V] top-m on the device for small
    arrays, each row's top m then a host merge for large ones), forced either way; and either one
    with torch's two-stage top-m (buckets of 2, taken whenever it can answer, so on these tiny
    vocabularies too)."""
    import importlib

    import beamsearch.core.select as select

    kind = request.param.split("+")[0]
    monkeypatch.setattr(select, "GROUPED_MAX_ELEMENTS", 1 << 62 if kind == "grouped" else 0)
    monkeypatch.setattr(select, "WIDE_FRACTION", select.WIDE_FRACTION if kind == "grouped" else 0)  # 0: no wide rule
    if request.param.endswith("+two-stage") and torch is not None:
        tb = importlib.import_module("beamsearch.backends.torch_backend")
        for name, value in (("BUCKET", 2), ("SPARE", 1), ("TWO_STAGE_WIDTH", 0), ("TWO_STAGE_ENTRIES", 0)):
            monkeypatch.setattr(tb, name, value)
    return request.param


@pytest.mark.parametrize("ranking", BOTH_RANKINGS + ["grouped+two-stage", "merged+two-stage"], indirect=True)
@pytest.mark.parametrize("backend", ["numpy"] + (["torch"] if torch is not None else []))
def test_both_rankings_equal_the_plain_reference(ranking, backend):
    # fixed random cases (tie-heavy tables: levels) so both paths meet ties across rows and inputs
    for seed in range(40):
        rng = np.random.default_rng(seed)
        vocab = int(rng.integers(2, 6))
        prompts = [[int(t) for t in rng.integers(0, vocab, size=rng.integers(1, 4))]
                   for _ in range(rng.integers(1, 4))]
        table = random_table(vocab, seed, levels=[None, 2, 3][seed % 3], eos=0, eos_shift=0.5)
        beam = int(rng.integers(1, 5))
        kw = dict(eos_token_id=0, max_steps=int(rng.integers(1, 5)), beam_size=beam, n_best=1 + seed % beam,
                  alpha=0.6, no_repeat_ngram_size=seed % 3)
        out, _ = _search(table, prompts, backend, **kw)
        ref = reference_batch(table, prompts, eos=0, max_steps=kw["max_steps"], beam=beam, n_best=kw["n_best"],
                              alpha=0.6, ngram=kw["no_repeat_ngram_size"])
        assert _as_tuples(out) == [[(e[0], e[3]) for e in r] for r in ref], seed
        for hyps, r in zip(out, ref, strict=True):
            assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in r], abs=1e-9)
