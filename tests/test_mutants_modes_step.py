"""step_search's rounds, noise, budgets and book-keeping against plain references: SplitMix64 in
Python integers (checked on its published first outputs), a sampled step search written as a
Python-list loop from the docstring (candidate c of round r draws from mix(key, r, c)), the budget
arithmetic worked by hand, and the scorer's answers and the arguments' errors by name."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import step_search
from beamsearch.modes.step import StepResults
from beamsearch.processors import SuppressTokens
from beamsearch.strategies.step import aggregate, mix, uniforms
from approx import FLOAT64
from models import SequenceModel, random_table
from test_step_search import as_tuples, plain_sample, reference, scorer  # plain_sample: inverse CDF over uniforms,
# which test_mix_and_uniforms_against_plain_splitmix64 checks against plain integers

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

V, EOS, DELIM = 5, 0, 4  # as in test_step_search: 1, 2, 3 are words, 4 ends a step, 0 the solution
MASK = 2**64 - 1


def plain_splitmix(x):
    """SplitMix64's output for state ``x`` (Steele, Lea & Flood 2014) in Python integers."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def plain_mix(*parts):
    h = plain_splitmix(parts[0])
    for p in parts[1:]:
        h = plain_splitmix(h ^ p)
    return h


def plain_aggregate(steps, how):
    if how == "last":
        return steps[-1]
    if how == "min":
        return min(steps)
    if how == "prod":
        return math.prod(steps)
    return sum(steps) / len(steps)


def test_mix_and_uniforms_against_plain_splitmix64():
    # the generator seeded 0 outputs 0xE220A8397B1DCDAF, then 0x6E789E6AA1B965F4: its first two
    # outputs are the finalizer of 1 and 2 times the golden gamma, i.e. mix(0) and mix(golden)
    assert plain_splitmix(0) == 0xE220A8397B1DCDAF and plain_splitmix(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert int(mix(0)) == 0xE220A8397B1DCDAF and int(mix(0x9E3779B97F4A7C15)) == 0x6E789E6AA1B965F4
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, size=6, dtype=np.uint64)
    for parts in [(5,), (5, 1), (7, 2, 3), (2**63 + 11, 0, 9, 4)]:
        assert int(mix(*parts)) == plain_mix(*parts)
    got = mix(keys, 3, np.arange(6))
    assert got.tolist() == [plain_mix(int(k), 3, c) for c, k in enumerate(keys)]
    for t in (1, 2, 7):  # ((mix(key, t) >> 11) + 0.5) / 2**53, strictly inside (0, 1)
        u = uniforms(keys, t)
        assert u.tolist() == [((plain_mix(int(k), t) >> 11) + 0.5) / 2**53 for k in keys]
        assert ((u > 0) & (u < 1)).all()


def test_aggregate_by_hand():
    assert aggregate([10**10, 10**10], "prod") == 1e20  # integer step scores multiply as reals
    assert aggregate([0.5, 0.25], "prod") == 0.125
    assert aggregate([1, 2], "mean") == 1.5 and aggregate([0.5], "min") == 0.5 and aggregate([3, 1], "last") == 1


# ---- a sampled step search written as a plain loop ------------------------------------------------

def sampled_reference(table, prompt, seed, *, n, m, rounds, limit, how, dvts):
    """From step_search's docstring: key = mix(seed, *prompt); the kept partial solution at place s
    (its prompt's keeps: best first; with DVTS by subtree) has candidates c = s*m .. s*m + m - 1 in
    round r (round 0: the prompt, c = 0 .. n - 1), each sampled with mix(key, r, c); finished ones
    are collected, the n/m best others go on (DVTS: each subtree's best; subtree = c // m of round
    0). Ranked by aggregated score, logprob, tokens. Segments by inverse-CDF sampling (token t: the
    first whose running probability reaches u_t times the total, u_t = uniforms(key, t))."""
    key = plain_mix(seed, *prompt)
    live = [([], [], [], 0.0, 0)]  # tokens, segments, step scores, logprob, subtree
    done = []
    for r in range(rounds):
        width = n if r == 0 else m
        cands = []
        for s, (tokens, segs, steps, lp, sub) in enumerate(live):
            for j in range(width):
                c = s * width + j
                seg, slp = plain_sample(table, prompt + tokens, plain_mix(key, r, c), limit)
                cands.append((tokens + seg, segs + [seg], steps, lp + slp, c // m if r == 0 else sub))
        scores = scorer([prompt] * len(cands), [c[0] for c in cands])
        going = []
        for (tokens, segs, steps, lp, sub), v in zip(cands, scores):
            item = (tokens, segs, steps + [v], lp, sub)
            (done if tokens[-1] == EOS else going).append(item)
        key_of = lambda x: (-plain_aggregate(x[2], how), -x[3], x[0])  # noqa: E731
        going.sort(key=key_of)
        if dvts:
            live = [min((g for g in going if g[4] == t), key=key_of) for t in range(n // m) if any(g[4] == t for g in going)]
        else:
            live = going[: n // m]
    out = [(x, True) for x in done] + [(x, False) for x in live]
    out.sort(key=lambda x: (-plain_aggregate(x[0][2], how), -x[0][3], x[0][0]))
    return [(x[0], x[1], x[2], x[3], plain_aggregate(x[2], how), fin) for x, fin in out]


def assert_solutions(got, want):
    assert [(g[0], g[1], g[2], g[5]) for g in got] == [(w[0], w[1], w[2], w[5]) for w in want]
    assert [g[3] for g in got] == pytest.approx([w[3] for w in want], abs=FLOAT64)
    assert [g[4] for g in got] == pytest.approx([w[4] for w in want], abs=FLOAT64)


@pytest.mark.parametrize("how, dvts", [("last", False), ("min", True), ("prod", False), ("mean", True)])
def test_sampled_rounds_equal_the_plain_loop(how, dvts):
    table = random_table(V, 5)
    prompts = [[1, 2], [3]]
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=6, m=2, rounds=3,
                      aggregation=how, dvts=dvts, sample_seed=[5, 9], eos_token_id=EOS, max_steps=3,
                      stop_sequences=[[DELIM]])
    for i, (prompt, seed) in enumerate(zip(prompts, [5, 9])):
        want = sampled_reference(table, prompt, seed, n=6, m=2, rounds=3, limit=3, how=how, dvts=dvts)
        assert_solutions(as_tuples(got[i]), want)
    one = step_search(model.step, model.init_state(prompts[:1]), prompts[:1], scorer=scorer, n=6, m=2, rounds=3,
                      aggregation=how, dvts=dvts, sample_seed=5, eos_token_id=EOS, max_steps=3,
                      stop_sequences=[[DELIM]])
    assert_solutions(as_tuples(one[0]), sampled_reference(table, [1, 2], 5, n=6, m=2, rounds=3, limit=3, how=how,
                                                           dvts=dvts))


def test_beam_dvts_rounds_equal_the_plain_loop():
    """Exhaustive beams with DVTS: round 1's candidate c (its place among the prompt's n best
    segments) starts subtree c // m."""
    table = random_table(V, 2)
    prompts = [[2], [1, 3]]
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=6, m=3, rounds=3,
                      expansion="beam", aggregation="min", dvts=True, eos_token_id=EOS, max_steps=2,
                      stop_sequences=[[DELIM]])
    for i, prompt in enumerate(prompts):
        want = reference(table, prompt, n=6, m=3, rounds=3, limit=2, how="min", dvts=True)
        assert_solutions(as_tuples(got[i]), want)


def test_the_same_generator_state_gives_the_same_solutions():
    table = random_table(V, 5)
    runs = []
    for _ in range(2):
        model = SequenceModel(table)
        runs.append(step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=8, rounds=2, m=2,
                                rng=np.random.default_rng(7), eos_token_id=EOS, max_steps=4))
    assert as_tuples(runs[0][0]) == as_tuples(runs[1][0])


# ---- budgets and book-keeping, worked by hand ---------------------------------------------------

W7, DELIM7 = 7, 6


def no_end_table(prefix):
    """7 tokens; eos (0) and the delimiter (6) never drawn: every segment runs to its limit."""
    row = random_table(W7, 1)(prefix)
    row[EOS] = row[DELIM7] = -math.inf
    return row


def fed_rows(model):
    return sum(len(call) for call in model.calls)


def run_budget(expansion, **kw):
    model = SequenceModel(no_end_table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=4, m=2, rounds=5,
                      expansion=expansion, sample_seed=3, eos_token_id=EOS, max_steps=3,
                      stop_sequences=[[DELIM7]], **kw)
    return got, model


def test_sampled_budgets_by_hand():
    """Sampling, n=4, m=2, max_steps 3: each round runs 4 segments of one row per token. Token
    budget 26: round 1's limit is min(3, 26 // 4) = 3 (12 rows, 14 left), round 2's min(3, 14 // 4)
    = 3 (12 rows, 2 left), round 3's 2 // 4 = 0: it does not run. Scored budget 8: 4 + 4 <= 8, both
    rounds run (a third would need 12)."""
    got, model = run_budget("sample", token_budget=26, scored_budget=8)
    info = got.info[0]
    assert (info["rounds"], info["scored"], info["generated_tokens"], info["scorer_calls"]) == (2, 8, 24, 2)
    assert fed_rows(model) == 24 and got.model_calls == len(model.calls) == 6 and got.scorer_calls == 2
    assert sorted(len(h.segments) for h in got[0]) == [2, 2] and all(len(s) == 3 for h in got[0] for s in h.segments)
    got, _ = run_budget("sample", scored_budget=7)  # 4 + 4 > 7: one round
    assert got.info[0]["rounds"] == 1 and got.info[0]["scored"] == 4 and len(got[0]) == 2


def test_beam_budgets_by_hand():
    """Beams, n=4, m=2, max_steps 3: round 1 is one beam of width 4 (1 row at its first token, 4
    after), later rounds two beams of width 2 (1 row, then 2). Token budget 20: round 1's limit is
    min(3, 20 // (1 * 4)) = 3: 1 + 4 + 4 = 9 rows, 11 left; round 2's min(3, 11 // (2 * 2)) = 2:
    2 * (1 + 2) = 6 rows, 5 left; round 3's 5 // 4 = 1: 2 rows, 3 left; round 4's 3 // 4 = 0. Each
    round scores 4 candidates (n, then m per beam)."""
    got, model = run_budget("beam", token_budget=20)
    info = got.info[0]
    assert (info["rounds"], info["scored"], info["generated_tokens"]) == (3, 12, 17) and fed_rows(model) == 17
    assert all([len(s) for s in h.segments] == [3, 2, 1] for h in got[0]) and len(got[0]) == 2
    got, _ = run_budget("beam", scored_budget=7)  # 4 + 4 > 7: one round
    assert got.info[0]["rounds"] == 1 and got.info[0]["scored"] == 4


def test_budget_stopped_solutions_keep_their_aggregation_and_results_their_pad():
    got, _ = run_budget("sample", token_budget=26, aggregation="min", pad_token_id=9)
    for h in got[0]:
        assert h.score == min(h.step_scores) and len(h.step_scores) == 2
    model = SequenceModel(random_table(V, 4, eos=EOS, eos_shift=1.5))  # eos likely: lengths differ
    got = step_search(model.step, model.init_state([[1], [2]]), [[1], [2]], scorer=scorer, n=3, sample_seed=1,
                      eos_token_id=EOS, max_steps=4, pad_token_id=9)
    arr, padded = got.arrays().tokens, 0
    for i, hyps in enumerate(got):
        for j, h in enumerate(hyps):
            assert arr[i, j, : len(h.tokens)].tolist() == h.tokens
            assert (arr[i, j, len(h.tokens):] == 9).all()
            padded += arr.shape[2] - len(h.tokens)
    assert padded > 0


def test_a_prompt_that_finishes_in_round_one_is_not_counted_again():
    """Prompt [3]'s only token is eos: its 3 candidates finish in round 1 (3 rows, 1 scorer call,
    3 scored); prompt [1] goes on for 3 rounds of 3 candidates. n=1, m=1 (best of one) also counts
    a round that scores one candidate."""
    def table(prefix):
        if prefix[0] == 3:
            return np.array([0.0] + [-math.inf] * (V - 1))
        return no_end_table(prefix)[:V]

    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1], [3]]), [[1], [3]], scorer=scorer, n=3, m=3, rounds=3,
                      sample_seed=2, eos_token_id=EOS, max_steps=2)
    assert [(x["rounds"], x["scored"], x["scorer_calls"], x["generated_tokens"]) for x in got.info] == [
        (3, 9, 3, 18), (1, 3, 1, 3)]
    assert all(h.finished and h.tokens == [EOS] for h in got[1]) and len(got[1]) == 3
    model = SequenceModel(no_end_table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=1, rounds=3, sample_seed=2,
                      eos_token_id=EOS, max_steps=2)
    assert (got.info[0]["rounds"], got.info[0]["scored"], got.info[0]["scorer_calls"]) == (3, 3, 3)
    assert len(got[0]) == 1 and len(got[0][0].segments) == 3
    model = SequenceModel(no_end_table)  # rounds defaults to 1
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=2, sample_seed=2,
                      eos_token_id=EOS, max_steps=2)
    assert got.info[0]["rounds"] == 1 and got.scorer_calls == 1


def test_step_results_start_with_nothing_spent():
    empty = StepResults([])
    assert empty.model_calls == 0 and empty.scorer_calls == 0 and empty.info == []


# ---- what the processors see ------------------------------------------------------------------

def test_segments_see_the_whole_solution_and_top_p_keeps_the_processors():
    """no_repeat_ngram_size=1 bans every token already in prompt + solution: no solution repeats a
    word or one of its prompt's (each later round's segments must see the earlier segments). With
    top_p < 1 the given processors still apply: token 2, suppressed, never appears."""
    table = random_table(V, 6)
    model = SequenceModel(table)
    prompts = [[1], [3]]
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=4, m=2, rounds=3,
                      sample_seed=4, eos_token_id=EOS, max_steps=1, stop_sequences=[[DELIM]],
                      no_repeat_ngram_size=1)
    for prompt, hyps in zip(prompts, got):
        for h in hyps:
            words = [t for t in prompt + h.tokens if t not in (EOS, DELIM)]
            assert len(words) == len(set(words)), (prompt, h.tokens)
    assert max(len(h.segments) for hyps in got for h in hyps) == 3
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=8, m=2, rounds=2,
                      sample_seed=4, eos_token_id=EOS, max_steps=3, top_p=0.9,
                      logits_processors=[SuppressTokens([2])])
    assert all(2 not in h.tokens for hyps in got for h in hyps) and sum(len(x) for x in got) >= 8


# ---- the scorer's answers and the arguments, by name --------------------------------------------

def search_with(**kw):
    model = SequenceModel(random_table(V, 1))
    args = dict(scorer=scorer, n=4, m=2, eos_token_id=EOS, max_steps=3, sample_seed=0)
    args.update(kw)
    return step_search(model.step, model.init_state([[1], [2]]), [[1], [2]], **args)


@pytest.mark.skipif(torch is None, reason="no torch")
def test_a_scorer_may_answer_a_tensor_that_needs_grad():
    def tensor_scorer(prompts, partials):
        return torch.tensor(scorer(prompts, partials), dtype=torch.float64, requires_grad=True) * 1.0

    got = search_with(scorer=tensor_scorer, rounds=2)
    want = search_with(rounds=2)
    assert [as_tuples(x) for x in got] == [as_tuples(x) for x in want]


def test_integer_scores_are_kept_as_reals():
    got = search_with(scorer=lambda p, s: [len(x) for x in s], rounds=2)
    assert all(type(v) is float for hyps in got for h in hyps for v in h.step_scores)
    assert all(h.step_scores == [float(len(h.segments[0])), float(len(h.tokens))] for hyps in got for h in hyps
               if len(h.segments) == 2)


@pytest.mark.parametrize("kw, error, message", [
    (dict(m=0), ValueError, r"^m must be >= 1; got 0$"),
    (dict(rounds=0), ValueError, r"^rounds must be >= 1; got 0$"),
    (dict(dvts="yes"), TypeError, r"^dvts must be a bool; got 'yes'$"),
    (dict(scored_budget=0), ValueError, r"^scored_budget must be >= 1; got 0$"),
    (dict(top_p=0.0), ValueError, r"^top_p must be > 0"),
    (dict(top_p=1.5), ValueError, r"^top_p must be in \(0, 1\]; got 1\.5$"),
    (dict(aggregation="max"), ValueError, r"^aggregation must be one of last, min, prod, mean; got 'max'$"),
    (dict(expansion="greedy"), ValueError, r"^expansion must be one of sample, beam; got 'greedy'$"),
    (dict(sample_seed=[1]), ValueError, r"^sample_seed must be one int or one int per prompt \(2\); got 1$"),
    (dict(sample_seed=[1, 2], rng=np.random.default_rng(0)), ValueError,
     r"^give rng or sample_seed, not both; got rng=Generator\(PCG64\) at \w+ and sample_seed=\[1, 2\]$"),
    (dict(sample_seed=5, rng=np.random.default_rng(0)), ValueError, r"^give rng or sample_seed, not both; .* sample_seed=5$"),
    (dict(sample_seed=-1), ValueError, r"^sample_seed must be >= 0; got -1$"),
    (dict(sample_seed=[3, -2]), ValueError, r"^sample_seed\[1\] must be >= 0; got -2$"),
    (dict(sample_seed=1.5), TypeError, r"^sample_seed must be an integer; got 1\.5 of type float$"),
    (dict(scorer=":f"), ValueError, r"^scorer must be a callable or 'module:function'; got ':f'$"),
    (dict(scorer="math:"), ValueError, r"^scorer must be a callable or 'module:function'; got 'math:'$"),
    (dict(scorer="math:pi:x"), ValueError, r"has no attribute 'pi:x'$"),
    (dict(scorer=3), TypeError, r"^scorer must be callable \(prompts, partial_solutions\) -> scores; got int$"),
    (dict(beam_size=3), TypeError, r"^step_search does not take beam_size \(its widths are n \(candidates per round\)"),
    (dict(scorer=lambda p, s: ["a"] * len(s)), TypeError, r"^scorer must return one real per candidate \(8\); got"),
    (dict(scorer=lambda p, s: [float("nan")] + [0.5] * (len(s) - 1)), ValueError,
     r"^scorer returned NaN for candidate 0$"),
    (dict(aggregation="prod", scorer=lambda p, s: [0.5, 0.0, -0.25] + [0.5] * (len(s) - 3)), ValueError,
     r"^aggregation 'prod' multiplies step scores, which must be in \[0, inf\) \(a verifier's probabilities\); "
     r"scorer returned -0\.25 for candidate 2$"),
    (dict(aggregation="prod", scorer=lambda p, s: [0.5, float("inf")] + [0.5] * (len(s) - 2)), ValueError,
     r"scorer returned inf for candidate 1$"),
    (dict(aggregation="mean", rounds=2, scorer=lambda p, s: [float("inf") if len(x) <= 3 else -float("inf") for x in s]),
     ValueError, r"^aggregation 'mean' of candidate \d+'s step scores \[inf, -inf\] is NaN \(infinities of both signs, "
                 r"or a product that overflows times 0\): scores must aggregate to a number$"),
    (dict(aggregation="prod", rounds=3, scorer=lambda p, s: [1e200 if len(x) <= 6 else 0.0 for x in s]), ValueError,
     r"^aggregation 'prod' of candidate \d+'s step scores \[1e\+200, 1e\+200, 0\.0\] is NaN"),
])
def test_errors_name_the_parameter_and_value(kw, error, message):
    with pytest.raises(error, match=message):
        search_with(**kw)


def test_beam_segments_are_ranked_by_logprob_without_a_length_penalty():
    """One round, a beam of width 1 (n = m = 1) within a 2-token segment. Prompt [2]: eos first at
    log-probability -1.0 (p = e**-1); token 1 at p = 0.6, then eos at p = e**-1.05 / 0.6, so the
    segment [1, 0] has logprob -1.05. Both finish; by logprob [0] is the one segment kept (a length
    penalty with alpha 1 would prefer [1, 0]: -1.05 / (7 / 6) = -0.9 > -1.0)."""
    first = np.full(V, (1 - math.exp(-1.0) - 0.6) / 3)
    first[EOS], first[1] = math.exp(-1.0), 0.6
    second = np.full(V, (1 - math.exp(-1.05) / 0.6) / 4)
    second[EOS] = math.exp(-1.05) / 0.6
    probs = {(2,): first, (2, 1): second}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq), np.full(V, 1 / V))))
    got = step_search(model.step, model.init_state([[2]]), [[2]], scorer=scorer, n=1, expansion="beam",
                      eos_token_id=EOS, max_steps=2)
    assert [h.tokens for h in got[0]] == [[EOS]] and got[0][0].logprob == pytest.approx(-1.0, abs=1e-12)


def test_dvts_subtrees_keep_their_number_after_one_of_them_ends():
    """eos likely (seed 0, table 2): every candidate of one DVTS subtree (not the last) finishes
    in an early round, so the kept partial solutions' places are no longer their subtree numbers;
    the plain loop gives the same solutions."""
    table = random_table(V, 2, eos=EOS, eos_shift=1.5)
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1, 2]]), [[1, 2]], scorer=scorer, n=6, m=2, rounds=3,
                      dvts=True, sample_seed=0, eos_token_id=EOS, max_steps=2)
    want = sampled_reference(table, [1, 2], 0, n=6, m=2, rounds=3, limit=2, how="last", dvts=True)
    assert_solutions(as_tuples(got[0]), want)


def test_a_prompt_out_of_budget_stops_while_the_other_goes_on():
    """Token budget 14, sampling, n=2, m=1, max_steps 3. Prompt [1] never ends a segment early:
    rounds of 2 segments of min(3, left // 2) tokens: 3 (6 rows, 8 left), 3 (6 rows, 2 left), 1 (2
    rows, 0 left), then none: 3 rounds, 14 rows. Prompt [3] only ever draws the delimiter: 2 rows a
    round, all 5 rounds (10 rows); its partial solutions keep their own state rows after [1]'s
    stop: every one is the delimiter 5 times, logprob 0."""
    def table(seq):
        if seq[0] == 3:
            row = np.full(W7, -math.inf)
            row[DELIM7] = 0.0
            return row
        return no_end_table(seq)

    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1], [3]]), [[1], [3]], scorer=scorer, n=2, rounds=5,
                      sample_seed=6, eos_token_id=EOS, max_steps=3, stop_sequences=[[DELIM7]], token_budget=14)
    assert [(x["rounds"], x["generated_tokens"], x["scored"]) for x in got.info] == [(3, 14, 6), (5, 10, 10)]
    assert all([len(s) for s in h.segments] == [3, 3, 1] and not h.finished for h in got[0]) and len(got[0]) == 2
    assert [(h.tokens, h.segments, h.logprob) for h in got[1]] == [([DELIM7] * 5, [[DELIM7]] * 5, 0.0)] * 2


@pytest.mark.parametrize("aggregation, scorer, message", [
    # round 2 gives candidate 0 alone -inf after round 1's +inf: its mean alone is NaN
    ("mean", lambda p, s: [-float("inf") if len(x) > 3 and j == 0 else float("inf") for j, x in enumerate(s)],
     r"^aggregation 'mean' of candidate 0's step scores \[inf, -inf\] is NaN"),
    # 1e200 * 1e200 overflows to inf, then times 0
    ("prod", lambda p, s: [1e200 if len(x) <= 6 else 0.0 for x in s], r"^aggregation 'prod' of candidate \d+'s step"),
])
def test_an_aggregation_that_is_nan_is_an_error_without_a_numpy_warning(aggregation, scorer, message):
    """The refusal is the error alone: numpy's overflow and invalid-value warnings of the
    aggregation are silenced (with warnings made errors, they would come first)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=message):
            search_with(aggregation=aggregation, rounds=3, scorer=scorer)


def _with_candidate(value, j=1):
    """A scorer answering ``value`` for candidate j, the test scorer's value for the others."""
    def answer(prompts, partials):
        out = list(scorer(prompts, partials))
        out[j] = value
        return out
    return answer


@pytest.mark.parametrize("answer, error, message", [
    (_with_candidate("0.5"), TypeError, r"^scorer must return one real per candidate \(8\); got '0\.5' of type str "
                                        r"for candidate 1$"),
    (_with_candidate(True), TypeError, r"got True of type bool for candidate 1$"),
    (_with_candidate(np.bool_(False)), TypeError, r"got (np\.)?False(_)?\)? of type bool_? for candidate 1$"),
    (_with_candidate(0.5 + 0j), TypeError, r"got \(0\.5\+0j\) of type complex for candidate 1$"),
    (_with_candidate(None), TypeError, r"got None of type NoneType for candidate 1$"),
    (_with_candidate([0.5]), TypeError, r"got \[0\.5\] of type list for candidate 1$"),
    (_with_candidate(10**400), ValueError, r"^scorer returned an integer too large for a float64 "
                                           r"\(10000000000000000000\.\.\., 401 digits\) for candidate 1$"),
    (lambda p, s: None, TypeError, r"^scorer must return one real per candidate \(8\); got None of type NoneType$"),
    (lambda p, s: 0.5, TypeError, r"^scorer must return one real per candidate \(8\); got 0\.5 of type float$"),
    (lambda p, s: np.ones(len(s), bool), TypeError, r"^scorer must return one real per candidate \(8\); got an "
                                                    r"array of dtype bool$"),
    (lambda p, s: np.ones(len(s), complex), TypeError, r"got an array of dtype complex128$"),
    (lambda p, s: np.ones((len(s), 1)), ValueError, r"^scorer must return one real per candidate: shape \(8,\); "
                                                    r"got shape \(8, 1\)$"),
    (lambda p, s: [0.5] * (len(s) + 1), ValueError, r"^scorer must return one real per candidate: shape \(8,\); "
                                                    r"got shape \(9,\)$"),
])
def test_a_scorer_answer_that_is_not_reals_is_named_with_its_candidate(answer, error, message):
    """Bools, complex numbers, strings, None and other objects were taken as numbers (True as 1,
    '0.5' as 0.5) or called NaN; 10**400 was numpy's OverflowError."""
    with pytest.raises(error, match=message):
        search_with(scorer=answer)


@pytest.mark.skipif(torch is None, reason="no torch")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int32"])
def test_a_scorer_may_answer_a_tensor_of_any_real_dtype(dtype):
    """A bfloat16 tensor was torch's 'Got unsupported ScalarType BFloat16'. The scores are the
    tensor's values (rounded to its dtype): the same as a scorer answering those values as floats."""
    dt = getattr(torch, dtype)

    def values(prompts, partials):
        return [v * 100 for v in scorer(prompts, partials)]

    got = search_with(scorer=lambda p, s: torch.tensor(values(p, s)).to(dt), rounds=2)
    want = search_with(scorer=lambda p, s: torch.tensor(values(p, s)).to(dt).double().tolist(), rounds=2)
    assert [as_tuples(x) for x in got] == [as_tuples(x) for x in want]


@pytest.mark.skipif(torch is None, reason="no torch")
@pytest.mark.parametrize("dtype", ["bool", "complex64"])
def test_a_tensor_answer_of_bools_or_complex_numbers_is_refused(dtype):
    with pytest.raises(TypeError, match=rf"^scorer must return one real per candidate \(8\); got a tensor of dtype "
                                        rf"torch\.{dtype}$"):
        search_with(scorer=lambda p, s: torch.ones(len(s), dtype=getattr(torch, dtype)))


def test_the_mean_of_huge_finite_scores_is_finite():
    """Step scores near the float64 limit: their sum overflows, so numpy's mean was inf and the
    solution ranked above every other. The mean of finite reals lies between them: here the
    exact mean (Python fractions) rounded to float64."""
    from fractions import Fraction

    big = lambda p, s: [1.7e308 - 1e306 * (len(x) % 7) for x in s]  # noqa: E731
    got = search_with(scorer=big, aggregation="mean", rounds=3)
    solutions = [h for hyps in got for h in hyps]
    assert any(len(h.step_scores) >= 2 for h in solutions)
    for h in solutions:
        exact = float(sum(Fraction(v) for v in h.step_scores) / len(h.step_scores))
        assert h.score == pytest.approx(exact, rel=1e-15) and math.isfinite(h.score)
    assert aggregate([1e308, 1.5e308], "mean") == pytest.approx(1.25e308, rel=1e-15)
    assert aggregate([1e308, math.inf], "mean") == math.inf and aggregate([-1e308, -1e308], "mean") == -1e308


def test_a_scorer_that_edits_its_arguments_changes_nothing():
    """A scorer that appends a step tag to each partial solution (and to each prompt) in place,
    as some reward-model recipes do before reading, then scores what it was given: the search
    gives what it gives with a scorer that only reads (each solution's tokens its segments
    joined, the next rounds' prompts unchanged)."""
    def editing(prompts, partials):
        for p, s in zip(prompts, partials):
            s += [DELIM]
            p.append(DELIM)
        return scorer([p[:-1] for p in prompts], [s[:-1] for s in partials])

    for expansion in ("sample", "beam"):
        got = search_with(scorer=editing, rounds=3, expansion=expansion)
        want = search_with(rounds=3, expansion=expansion)
        assert [as_tuples(x) for x in got] == [as_tuples(x) for x in want]
        assert all(h.tokens == [t for seg in h.segments for t in seg] for hyps in got for h in hyps)
