"""beam_search and greedy_decode (SPEC sections 4, 5): seed 000's test table, row by row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import Hypothesis, beam_search, beam_search_each, greedy_decode
from beamsearch.core.hypothesis import TokenLogprobHypothesis
from beamsearch.core.trace import PRUNED
from beamsearch.modes.beam import greedy_search
from beamsearch.refill import decode_stream
from beamsearch.viz import Trace
from models import (
    PrefixModel,
    SequenceModel,
    brute_force,
    dict_table,
    greedy_oracle,
    path_logprob,
    processed_logprobs,
    random_table,
)

try:
    import torch
except ImportError:
    torch = None

EOS, A, B = 0, 1, 2
# Seed 000 section 3: next-token probabilities after each prefix (eos, a, b).
HAND = {(): [0.1, 0.5, 0.4], (A,): [0.2, 0.1, 0.7], (B,): [0.9, 0.05, 0.05]}


def hand_model() -> PrefixModel:
    return PrefixModel(dict_table(HAND, 3))


def test_hand_example_beam_beats_greedy():
    model = hand_model()
    out = beam_search(model.step, model.init_state(), bos=EOS, eos=EOS, beam_size=2, max_len=2,
                      length_penalty=0.0)
    # b eos = 0.4 * 0.9 = 0.36 (finished), a b = 0.5 * 0.7 = 0.35 (cut at L = 2, unfinished)
    assert [h.tokens for h in out] == [[B, EOS], [A, B]]
    assert [h.finished for h in out] == [True, False]
    assert out[0].logprob == pytest.approx(math.log(0.36), abs=1e-12)
    assert out[1].logprob == pytest.approx(math.log(0.35), abs=1e-12)
    assert [h.score for h in out] == [h.logprob for h in out]
    assert [len(c) for c in model.calls] == [1, 2]


def test_hand_example_greedy_commits_to_a():
    model = hand_model()
    h = greedy_decode(model.step, model.init_state(), bos=EOS, eos=EOS, max_len=2)
    assert h.tokens == [A, B] and not h.finished
    assert h.logprob == pytest.approx(math.log(0.35), abs=1e-12)  # 0.5 * 0.7
    assert h.score == h.logprob
    assert [len(c) for c in model.calls] == [1, 1]


def test_hand_example_length_penalty():
    model = hand_model()
    out = beam_search(model.step, model.init_state(), bos=EOS, eos=EOS, beam_size=2, max_len=2,
                      length_penalty=1.0)
    assert [h.tokens for h in out] == [[B, EOS], [A, B]]
    assert out[0].score == pytest.approx(math.log(0.36) / 2, abs=1e-12)  # -0.5108: eos counted
    assert out[1].score == pytest.approx(math.log(0.35) / 2, abs=1e-12)  # -0.5249


def test_result_types_are_builtin():
    model = hand_model()
    for h in beam_search(model.step, model.init_state(), 0, 0, 2, 2):
        assert type(h) is Hypothesis
        assert type(h.logprob) is float and type(h.score) is float and type(h.finished) is bool
        assert all(type(t) is int for t in h.tokens)


SIX_MODELS = [
    random_table(3, 1), random_table(4, 2), random_table(5, 3, eos=0, eos_shift=1.0),
    random_table(6, 4, levels=2), random_table(3, 5, levels=1), random_table(7, 6, eos=0, eos_shift=-1.0),
]


@pytest.mark.parametrize("table", SIX_MODELS)
def test_beam_one_is_greedy(table):
    expected_tokens, expected_lp = greedy_oracle(table, eos=0, max_len=6)
    model = PrefixModel(table)
    (h,) = beam_search(model.step, model.init_state(), 0, 0, beam_size=1, max_len=6)
    g = greedy_decode(PrefixModel(table).step, model.init_state(), 0, 0, max_len=6)
    assert h.tokens == g.tokens == expected_tokens
    assert h.logprob == pytest.approx(expected_lp, abs=1e-9)
    assert g.logprob == pytest.approx(expected_lp, abs=1e-9)
    assert g.score == g.logprob
    assert g.finished == (expected_tokens[-1] == 0)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exhaustive_beam_equals_brute_force(alpha, seed):
    table = random_table(3, seed, eos=0, eos_shift=0.5)
    expected = brute_force(table, vocab=3, eos=0, max_len=4, alpha=alpha)
    assert len(expected) == 31  # 1 + 2 + 4 + 8 finished, 2**4 unfinished
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 0, beam_size=81, max_len=4, length_penalty=alpha)
    assert [tuple(h.tokens) for h in out] == [e[0] for e in expected]
    for h, (_, lp, score, finished) in zip(out, expected, strict=True):
        assert h.logprob == pytest.approx(lp, abs=1e-9)
        assert h.score == pytest.approx(score, abs=1e-9)
        assert h.finished == finished


@pytest.mark.parametrize("beam", [1, 2, 3, 4])
def test_small_beam_is_a_prefix_of_the_exhaustive_ranking_at_step_one(beam):
    table = random_table(5, 11)
    expected = brute_force(table, vocab=5, eos=4, max_len=1, alpha=0.0)
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 4, beam_size=beam, max_len=1, length_penalty=0.0)
    assert [tuple(h.tokens) for h in out] == [e[0] for e in expected[:beam]]


@pytest.mark.parametrize("beam", [1, 2, 3, 5])
def test_beam_never_holds_more_than_beam_size(beam):
    model = PrefixModel(random_table(6, 7, eos=0, eos_shift=-np.inf))  # eos never finite
    beam_search(model.step, model.init_state(), 0, 0, beam_size=beam, max_len=4)
    # 1 row, then min(K, 5 ** t) rows: the beam fills up and never exceeds K
    assert [len(c) for c in model.calls] == [min(beam, 5**t) for t in range(4)]


def test_eos_finishes_and_shrinks_the_beam():
    table = random_table(4, 21, eos=0, eos_shift=1.5)
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 0, beam_size=3, max_len=8)
    finished = [h for h in out if h.finished]
    assert finished, "eos is likely enough to finish some hypothesis"
    for h in out:
        assert h.tokens.count(0) == (1 if h.finished else 0)
        assert not h.finished or h.tokens[-1] == 0
        assert h.logprob == pytest.approx(path_logprob(table, h.tokens), abs=1e-9)
    # the beam never grows back: rows of call t+1 <= K - hypotheses finished in calls 1..t
    done = 0
    for t, rows in enumerate(model.calls[1:], start=1):
        done += sum(1 for h in finished if len(h.tokens) == t)
        assert len(rows) <= 3 - done
    # finished prefixes are never extended: no later call has a row starting with one
    for h in finished:
        for rows in model.calls:
            assert not any(r[: len(h.tokens)] == tuple(h.tokens) for r in rows)


def test_search_stops_when_the_last_hypothesis_finishes():
    # step 1: a or b; step 2: eos is certain (every other token masked)
    probs = {(): [0.0, 0.6, 0.4], (A,): [1.0, 0.0, 0.0], (B,): [1.0, 0.0, 0.0]}
    model = PrefixModel(dict_table(probs, 3))
    out = beam_search(model.step, model.init_state(), 0, 0, beam_size=2, max_len=10, length_penalty=0.0)
    assert [len(c) for c in model.calls] == [1, 2]
    assert [h.tokens for h in out] == [[A, EOS], [B, EOS]]
    assert [h.logprob for h in out] == pytest.approx([math.log(0.6), math.log(0.4)], abs=1e-12)


@pytest.mark.parametrize("beam", [1, 3])
def test_max_len_returns_unfinished(beam):
    def never_eos(prefix):
        row = random_table(4, 5)(prefix)
        row[0] = -np.inf
        return row

    model = PrefixModel(never_eos)
    out = beam_search(model.step, model.init_state(), 0, 0, beam_size=beam, max_len=5)
    assert len(out) == beam
    assert all(len(h.tokens) == 5 and not h.finished for h in out)
    assert len(model.calls) == 5
    assert all(0 not in h.tokens for h in out)
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)


def test_length_penalty_changes_the_winner():
    # hand-built: l(a eos) = ln .36 = -1.02; l(b b b eos) = ln(.3 * .9**3) = ln .2187 = -1.52;
    # per token: -0.51 against -0.38, so alpha 1 prefers the longer output.
    probs = {(): [0.1, 0.6, 0.3], (A,): [0.6, 0.2, 0.2], (B,): [0.05, 0.05, 0.9],
             (B, B): [0.05, 0.05, 0.9], (B, B, B): [0.9, 0.05, 0.05]}
    table = dict_table(probs, 3)
    raw = beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, 3, 4, 0.0)
    mean = beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, 3, 4, 1.0)
    assert raw[0].tokens == [A, EOS] and raw[0].logprob == pytest.approx(math.log(0.36))
    assert mean[0].tokens == [B, B, B, EOS]
    assert mean[0].score == pytest.approx(math.log(0.2187) / 4)
    for out in (raw, mean):
        assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)


def test_ties_go_to_the_lowest_id():
    model = PrefixModel(lambda prefix: np.zeros(4))
    out = beam_search(model.step, model.init_state(), 0, 3, beam_size=2, max_len=1)
    assert [h.tokens for h in out] == [[0], [1]]
    model = PrefixModel(lambda prefix: np.zeros(4))
    out = beam_search(model.step, model.init_state(), 0, 3, beam_size=2, max_len=2)
    # step 2 ranks (row 0: 0 0, 0 1, ...), (row 1: 1 0, ...): ties to the lower flat index
    assert [h.tokens for h in out] == [[0, 0], [0, 1]]
    g = greedy_decode(PrefixModel(lambda p: np.array([1.0, 3.0, 3.0, 3.0])).step,
                      model.init_state(), 0, 0, 3)
    assert g.tokens == [1, 1, 1]


def test_logits_need_not_be_normalized():
    table = random_table(4, 8, eos=0, eos_shift=0.5)
    base = beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, 3, 5)
    scaled = PrefixModel(table, offsets=lambda prefix: 100.0 * len(prefix) - 37.0 * sum(prefix))
    shifted = beam_search(scaled.step, scaled.init_state(), 0, 0, 3, 5)
    assert [h.tokens for h in shifted] == [h.tokens for h in base]
    assert [h.logprob for h in shifted] == pytest.approx([h.logprob for h in base], abs=1e-9)


def test_masked_tokens_are_never_chosen():
    # only tokens 1 and 2 are ever finite: a beam of 4 is never filled with masked ones
    def masked(prefix):
        row = np.full(5, -np.inf)
        row[1], row[2] = 0.3, -0.2
        if len(prefix) >= 2:
            row[0] = 0.0
        return row

    model = PrefixModel(masked)
    out = beam_search(model.step, model.init_state(), 0, 0, beam_size=4, max_len=4)
    assert out
    for h in out:
        assert set(h.tokens) <= {0, 1, 2}
        assert math.isfinite(h.logprob)
    assert [len(c) for c in model.calls][:2] == [1, 2]


def test_logprob_is_the_sum_along_the_path():
    table = random_table(5, 9, eos=0)
    model = PrefixModel(table)
    alpha = 0.7
    for h in beam_search(model.step, model.init_state(), 0, 0, 4, 6, alpha):
        assert h.logprob == pytest.approx(path_logprob(table, h.tokens), abs=1e-9)
        assert h.score == pytest.approx(h.logprob / len(h.tokens) ** alpha, abs=1e-12)


def test_state_follows_parents_in_a_real_search():
    table = random_table(5, 13, eos=0, eos_shift=-0.5)
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 0, 3, 6)
    # every row of call t+1 extends a prefix the search kept at step t: the rows of the next
    # call (after dropping their last token) are the prefixes of the previous call extended by
    # one kept token, and every returned hypothesis was scored along its own prefixes
    for t in range(1, len(model.calls)):
        previous = set(model.calls[t - 1])
        for row in model.calls[t]:
            assert row[:-1] in previous and len(row) == t
    for h in out:
        assert h.logprob == pytest.approx(path_logprob(table, h.tokens), abs=1e-9)
        for t in range(len(h.tokens) - 1):
            assert tuple(h.tokens[: t + 1]) in model.calls[t + 1]


def test_default_length_penalty_is_one():
    table = random_table(4, 3, eos=0, eos_shift=1.0)

    def run(*alpha):
        return beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, 3, 5, *alpha)

    default, one, two = run(), run(1.0), run(2.0)
    assert [(h.tokens, h.score) for h in default] == [(h.tokens, h.score) for h in one]
    assert [h.score for h in default] != [h.score for h in two]


@pytest.mark.parametrize("backend", ["numpy"] + (["torch"] if torch is not None else []))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_models_logits_are_never_written(backend, dtype):
    """The search owns its buffers: a model may return the same logits array every step."""
    from beamsearch import beam_search_batch

    base = np.random.default_rng(0).normal(size=(6, 5)).astype(dtype)
    fixed = torch.from_numpy(base.copy()) if backend == "torch" else base.copy()

    def step(state, y):
        return fixed[: len(y)], state

    beam_search(step, None, 0, 0, 3, 4)
    beam_search_batch(step, None, [[1], [2]], eos_token_id=0, max_steps=4, beam_size=3,
                      no_repeat_ngram_size=2, top_k=3)
    beam_search_batch(step, None, [[1], [2]], eos_token_id=0, max_steps=4, beam_size=3)
    assert np.array_equal(np.asarray(fixed), base)


@pytest.mark.parametrize("threshold", [0, 1 << 62])  # each row's top m + host merge, or one grouped top-m
def test_exhaustive_beam_equals_brute_force_with_either_ranking(threshold, monkeypatch):
    import beamsearch.core.select as select

    monkeypatch.setattr(select, "GROUPED_MAX_ELEMENTS", threshold)
    monkeypatch.setattr(select, "WIDE_FRACTION", 0 if threshold == 0 else select.WIDE_FRACTION)  # 0: no wide rule
    table = random_table(3, 4, eos=0, eos_shift=0.5)
    expected = brute_force(table, vocab=3, eos=0, max_len=4, alpha=1.0)
    out = beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, beam_size=81, max_len=4,
                      length_penalty=1.0)
    assert [tuple(h.tokens) for h in out] == [e[0] for e in expected]
    assert [h.logprob for h in out] == pytest.approx([e[1] for e in expected], abs=1e-9)


# The beam module's entry points pass their keywords on: greedy_search's padding, token log-
# probabilities (against teacher-forced rescoring), trace and callback; the default trace width (3
# pruned candidates per row) of beam_search, beam_search_each, greedy_decode and greedy_search.


V, EOS_LAST = 9, 8
PROMPTS = [[1], [2, 3]]


def pruned_per_row(trace):
    counts = {}
    for v in np.flatnonzero(trace.status == PRUNED):
        counts[int(trace.parent[v])] = counts.get(int(trace.parent[v]), 0) + 1
    return max(counts.values())


def test_greedy_search_passes_its_keywords_on():
    table = random_table(V, 2, eos=EOS_LAST, eos_shift=1.0)
    model = SequenceModel(table)
    plain = greedy_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS_LAST, max_steps=5,
                          pad_token_id=0)
    assert all(type(hyps[0]) is not TokenLogprobHypothesis and len(hyps) == 1 for hyps in plain)
    arrays = plain.arrays()
    for i, hyps in enumerate(plain):  # the argmax path of a plain loop over the oracle, padded with 0
        seq, want = list(PROMPTS[i]), []
        while len(want) < 5 and (not want or want[-1] != EOS_LAST):
            row = processed_logprobs(table(tuple(seq)), seq)
            want.append(max(range(V), key=lambda v: (row[v], -v)))
            seq.append(want[-1])
        assert hyps[0].tokens == want
        assert arrays.tokens[i, 0, : len(want)].tolist() == want and (arrays.tokens[i, 0, len(want):] == 0).all()
    assert (arrays.lengths < arrays.tokens.shape[2]).any()
    trace, seen = Trace(), []
    model = SequenceModel(table)
    got = greedy_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS_LAST, max_steps=5,
                        return_token_logprobs=True, trace=trace, callback=seen.append)
    for i, hyps in enumerate(got):
        h, seq = hyps[0], list(PROMPTS[i])
        assert isinstance(h, TokenLogprobHypothesis)
        for t, lp in zip(h.tokens, h.token_logprobs, strict=True):  # teacher-forced rescoring, token by token
            assert lp == pytest.approx(processed_logprobs(table(tuple(seq)), seq)[t], abs=1e-9)
            seq.append(t)
    assert len(trace) > len(PROMPTS) and len(seen) == int(trace.step.max()) and pruned_per_row(trace) == 3
    trace = Trace()
    model = SequenceModel(table)
    greedy_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS_LAST, max_steps=5, trace=trace,
                  trace_width=1)
    assert pruned_per_row(trace) == 1


def test_single_input_entry_points_read_three_pruned_per_row_by_default():
    """9 tokens, one eos: each row reads its kept ones, the eos and 3 more (or trace_width more)."""
    table = random_table(V, 3)
    for width, kw in [(3, {}), (2, dict(trace_width=2))]:
        trace = Trace()
        model = PrefixModel(table)
        beam_search(model.step, model.init_state(), 0, EOS_LAST, 2, 4, 0.6, trace=trace, **kw)
        assert pruned_per_row(trace) == width
        trace = Trace()
        model = PrefixModel(table)
        beam_search_each(model.step, model.init_state(2), 2, 0, EOS_LAST, 2, 4, 0.6, trace=trace, **kw)
        assert pruned_per_row(trace) == width
        trace, seen = Trace(), []
        model = PrefixModel(table)
        h = greedy_decode(model.step, model.init_state(), 0, EOS_LAST, 4, trace=trace, callback=seen.append, **kw)
        assert pruned_per_row(trace) == width and len(seen) == len(model.calls)
        assert h.tokens == greedy_oracle(table, EOS_LAST, 4)[0]


def test_a_greedy_stream_gives_plain_hypotheses_unless_asked():
    table = random_table(V, 2, eos=EOS_LAST, eos_shift=1.0)
    for asked in (False, True):
        model = SequenceModel(table)
        kw = dict(return_token_logprobs=True) if asked else {}
        got = {r.index: r.hypotheses for r in decode_stream(model.step, model.init_state, PROMPTS, max_rows=2,
                                                              mode="greedy", eos_token_id=EOS_LAST, max_steps=5,
                                                              **kw)}
        assert all((type(hyps[0]) is TokenLogprobHypothesis) == asked and len(hyps) == 1 for hyps in got.values())
