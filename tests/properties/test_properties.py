"""Property tests over random prefix-dependent models (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approx import FLOAT32, FLOAT64, assert_same_hypotheses
from beamsearch import beam_search, greedy_decode
from models import PrefixModel, brute_force, greedy_oracle, path_logprob, random_table

try:
    import torch
except ImportError:
    torch = None

models = st.builds(
    lambda vocab, seed, levels, shift: (vocab, random_table(vocab, seed, levels=levels, eos=0, eos_shift=shift)),
    vocab=st.integers(2, 6),
    seed=st.integers(0, 10_000),
    levels=st.sampled_from([None, 1, 2, 3]),  # rounded logits make ties common
    shift=st.sampled_from([-2.0, 0.0, 1.0]),
)
searches = st.tuples(models, st.integers(1, 6), st.integers(1, 5), st.sampled_from([0.0, 0.5, 1.0, 2.0]))


@settings(max_examples=60, deadline=None)
@given(searches)
def test_rows_never_exceed_the_beam_and_logprobs_are_path_sums(search):
    (vocab, table), beam, max_len, alpha = search
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 0, beam, max_len, alpha)
    finished_by = [0] * (max_len + 1)
    for h in out:
        assert h.logprob == pytest.approx(path_logprob(table, h.tokens), abs=1e-9)
        assert h.score == pytest.approx(h.logprob / len(h.tokens) ** alpha, abs=1e-9)
        assert h.finished == (h.tokens[-1] == 0) and h.tokens.count(0) == int(h.finished)
        assert h.finished or len(h.tokens) == max_len
        if h.finished:
            finished_by[len(h.tokens)] += 1
    assert sum(finished_by) + sum(not h.finished for h in out) == len(out) <= beam
    done = 0
    for t, rows in enumerate(model.calls):
        done += finished_by[t]
        assert len(rows) <= beam - done
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)


@settings(max_examples=40, deadline=None)
@given(models, st.integers(1, 4), st.sampled_from([0.0, 1.0]))
def test_exhaustive_beam_is_every_output_ranked(model_spec, max_len, alpha):
    vocab, table = model_spec
    expected = brute_force(table, vocab, 0, max_len, alpha)
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 0, vocab**max_len, max_len, alpha)
    assert sorted(tuple(h.tokens) for h in out) == sorted(e[0] for e in expected)
    assert [h.score for h in out] == pytest.approx([e[2] for e in expected], abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(models, st.integers(1, 6))
def test_greedy_equals_the_plain_loop(model_spec, max_len):
    _, table = model_spec
    tokens, lp = greedy_oracle(table, 0, max_len)
    model = PrefixModel(table)
    h = greedy_decode(model.step, model.init_state(), 0, 0, max_len)
    assert h.tokens == tokens and h.logprob == pytest.approx(lp, abs=1e-9) and h.score == h.logprob


@settings(max_examples=40, deadline=None)
@given(searches, st.integers(0, 1000))
def test_a_per_row_constant_changes_nothing(search, salt):
    (vocab, table), beam, max_len, alpha = search
    base = beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, beam, max_len, alpha)
    shifted = PrefixModel(table, offsets=lambda p: float(hash((salt,) + p) % 97) * 4.0 - 200.0)
    out = beam_search(shifted.step, shifted.init_state(), 0, 0, beam, max_len, alpha)
    # integer offsets keep the rounded logits exact, so even ties are preserved
    assert [h.tokens for h in out] == [h.tokens for h in base]
    assert [h.logprob for h in out] == pytest.approx([h.logprob for h in base], abs=1e-9)


@pytest.mark.skipif(torch is None, reason="torch not installed")
@settings(max_examples=60, deadline=None)
@given(searches, st.sampled_from([np.float64, np.float32]))
def test_numpy_and_torch_agree_including_ties(search, dtype):
    (vocab, table), beam, max_len, alpha = search
    if dtype == np.float32:
        # float32 log_softmax rounds differently per backend (1 ulp), which can reorder
        # candidates that tie only up to rounding across rows; exact ties are a float64 promise
        table = random_table(vocab, beam * 100 + max_len)
    runs = []
    for backend in ("numpy", "torch"):
        model = PrefixModel(table, backend=backend, dtype=dtype)
        runs.append(beam_search(model.step, model.init_state(), 0, 0, beam, max_len, alpha))
    assert_same_hypotheses([runs[0]], [runs[1]], tol=FLOAT64 if dtype == np.float64 else FLOAT32)


@settings(max_examples=40, deadline=None)
@given(models, st.integers(1, 4), st.integers(1, 5), st.sampled_from([0.0, 1.0]), st.integers(1, 5))
def test_beam_search_each_equals_each_input_alone(model_spec, beam, max_len, alpha, n):
    from beamsearch import beam_search_each
    from models import SequenceModel

    _, table = model_spec
    prompts = [[i, 0] for i in range(n)]  # the input id, then bos: each input its own model
    model = SequenceModel(table)
    together = beam_search_each(model.step, model.init_state(prompts), n, 0, 0, beam, max_len, alpha)
    assert len(together) == n
    for prompt, hyps in zip(prompts, together, strict=True):
        alone_model = SequenceModel(table)
        alone = beam_search(alone_model.step, alone_model.init_state([prompt]), 0, 0, beam, max_len, alpha)
        assert [(h.tokens, h.finished) for h in hyps] == [(h.tokens, h.finished) for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-12)
    assert all(len(call) <= beam * n for call in model.calls)


def test_beam_search_each_defaults_and_no_inputs():
    from beamsearch import beam_search_each

    def never(state, y_prev):
        raise AssertionError("no inputs: no model call")

    assert beam_search_each(never, None, 0, 0, 0, 2, 3) == []
    with pytest.raises(ValueError, match="^n_inputs must be >= 0; got -1"):
        beam_search_each(never, None, -1, 0, 0, 2, 3)
    table = random_table(4, 3, eos=0, eos_shift=1.0)
    default = beam_search_each(PrefixModel(table).step, PrefixModel(table).init_state(), 1, 0, 0, 3, 5)
    one = beam_search(PrefixModel(table).step, PrefixModel(table).init_state(), 0, 0, 3, 5, 1.0)
    assert [(h.tokens, h.score) for h in default[0]] == [(h.tokens, h.score) for h in one]
