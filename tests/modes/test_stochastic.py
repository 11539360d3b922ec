"""stochastic_beam_search (Kool, van Hoof & Welling 2019): samples without replacement, checked
against the exact inclusion probabilities of sampling without replacement, computed by
enumerating every output of tiny models."""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import numpy as np
import pytest

from approx import FLOAT64, assert_same_hypotheses
from beamsearch.core.trace import PRUNED
from beamsearch.modes.stochastic import StochasticResults, base_seed, stochastic_beam_search
from beamsearch.refill import decode_stream
from beamsearch.strategies.stochastic import conditional_gumbels
from beamsearch.viz import Trace
from models import SequenceModel, processed_logprobs, random_table

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]
EOS = 2


def cached(table):
    return functools.lru_cache(maxsize=None)(lambda seq: tuple(table(seq)))


def outputs(table, prompt, vocab, *, eos, max_steps, temperature=1.0, top_k=None, ngram=0):
    """Every output (ending with eos, or cut at max_steps) and its probability under the processed
    distribution, by walking the whole tree: ``{tokens: p}``."""
    out = {}

    def walk(tokens, lp):
        seq = tuple(prompt) + tokens
        row = processed_logprobs(table(seq), seq, temperature=temperature, top_k=top_k, ngram=ngram)
        for v in range(vocab):
            if not math.isfinite(row[v]):
                continue
            t = tokens + (v,)
            if v == eos or len(t) == max_steps:
                out[t] = math.exp(lp + row[v])
            else:
                walk(t, lp + row[v])

    walk((), 0.0)
    return out


def inclusion(probs, k):
    """P(y among the k) when k outputs are drawn one after another without replacement, each
    draw proportional to p among those not drawn yet: the sum over every ordered k-tuple."""
    items = list(probs)
    incl = dict.fromkeys(items, 0.0)
    for draw in itertools.permutations(items, min(k, len(items))):
        p, left = 1.0, 1.0
        for y in draw:
            p *= probs[y] / left
            left -= probs[y]
        for y in draw:
            incl[y] += p
    return incl


def search(table, prompts, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    return stochastic_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, **kw), model


def frequencies(results, k):
    counts: dict[tuple, int] = {}
    for hyps in results:
        assert len(hyps) == k
        assert len({tuple(h.tokens) for h in hyps}) == k  # without replacement: all distinct
        for h in hyps:
            counts[tuple(h.tokens)] = counts.get(tuple(h.tokens), 0) + 1
    return counts


@pytest.mark.parametrize("k, max_steps, vocab, controls", [
    (3, 3, 3, {}),
    (2, 2, 4, {"temperature": 0.7}),
    (4, 3, 4, {"top_k": 3}),
])
def test_inclusion_frequencies_match_exact_inclusion_probabilities(k, max_steps, vocab, controls):
    # 3000 independent runs (one input each, each its own noise stream), master seed fixed: the
    # frequency of each output among the k samples is within 4 binomial standard errors of its
    # exact inclusion probability (not flaky: the seed is fixed)
    runs = 3000
    table = cached(random_table(vocab, 11 + k, eos=EOS, eos_shift=0.5))
    probs = outputs(table, [0], vocab, eos=EOS, max_steps=max_steps, temperature=controls.get("temperature", 1.0),
                    top_k=controls.get("top_k"))
    assert abs(sum(probs.values()) - 1) < 1e-12 and len(probs) > k
    want = inclusion(probs, k)
    assert abs(sum(want.values()) - k) < 1e-9
    results, _ = search(table, [[0]] * runs, k=k, max_steps=max_steps, seed=1234, **controls)
    counts = frequencies(results, k)
    assert set(counts) <= set(probs)
    for y, q in want.items():
        se = math.sqrt(q * (1 - q) / runs)
        assert abs(counts.get(y, 0) / runs - q) <= 4 * se + 1e-9, (y, counts.get(y, 0) / runs, q)


def test_one_sample_follows_the_sequence_distribution():
    runs = 4000
    table = cached(random_table(3, 5, eos=EOS))
    probs = outputs(table, [1], 3, eos=EOS, max_steps=3)
    results, _ = search(table, [[1]] * runs, k=1, max_steps=3, seed=99)
    counts = frequencies(results, 1)
    for y, p in probs.items():
        assert abs(counts.get(y, 0) / runs - p) <= 4 * math.sqrt(p * (1 - p) / runs) + 1e-9, (y, p)


def test_importance_weights_estimate_each_output_probability_without_bias():
    # Kool et al. section 4.1: E[ sum over the sample of p(y)/q_kappa(y) f(y) ] = E[f]. With f the
    # indicator of one output y, the mean over runs of w_y 1[y sampled] estimates p(y): within 4
    # standard errors (the sample standard deviation of the per-run estimates / sqrt(runs)), for
    # every output expected among the samples at least 30 times (for rarer ones the sample
    # standard deviation itself is unreliable); with f = 1, the mean of sum(w) estimates 1
    runs, k = 3000, 2
    table = cached(random_table(3, 8, eos=EOS, eos_shift=0.3))
    probs = outputs(table, [0], 3, eos=EOS, max_steps=3)
    expected = inclusion(probs, k)
    results, _ = search(table, [[0]] * runs, k=k, max_steps=3, seed=7)
    weights = results.importance_weights()
    checked = 0
    for y, p in probs.items():
        if expected[y] * runs < 30:
            continue
        checked += 1
        est = np.array([sum(w for h, w in zip(hyps, ws, strict=True) if tuple(h.tokens) == y)
                        for hyps, ws in zip(results, weights, strict=True)])
        assert abs(est.mean() - p) <= 4 * est.std() / math.sqrt(runs), (y, est.mean(), p)
    assert checked >= 5
    total = np.array([ws.sum() for ws in weights])
    assert abs(total.mean() - 1) <= 4 * total.std() / math.sqrt(runs)
    # a finite threshold whenever more than k outputs exist; every sample clears it
    assert np.isfinite(results.kappa).all()
    assert all(h.score > kappa for hyps, kappa in zip(results, results.kappa, strict=True) for h in hyps)


def test_all_outputs_come_back_when_k_covers_them_with_exact_weights():
    # k >= the number of outputs: every output, kappa -inf, q = 1 and the weights are p itself
    table = cached(random_table(3, 2, eos=EOS))
    probs = outputs(table, [0], 3, eos=EOS, max_steps=2)  # 1 + 2 + 4 = 7 outputs
    results, _ = search(table, [[0]], k=9, max_steps=2, seed=3)
    assert sorted(tuple(h.tokens) for h in results[0]) == sorted(probs)
    assert results.kappa[0] == -np.inf
    for h, w in zip(results[0], results.importance_weights()[0], strict=True):
        assert w == pytest.approx(probs[tuple(h.tokens)], abs=1e-12)
        assert h.logprob == pytest.approx(math.log(probs[tuple(h.tokens)]), abs=1e-12)
        assert h.finished == (h.tokens[-1] == EOS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_samples_are_ranked_by_perturbed_score_with_the_model_logprob(backend):
    table = random_table(4, 21, eos=EOS)
    results, _ = search(table, [[0], [1, 3]], backend, k=3, max_steps=4, seed=5, return_token_logprobs=True)
    for prompt, hyps in zip([[0], [1, 3]], results, strict=True):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            want = [processed_logprobs(table(tuple(prompt) + tuple(h.tokens[:i])), ())[t]
                    for i, t in enumerate(h.tokens)]
            assert h.token_logprobs == pytest.approx(want, abs=1e-12)
            assert h.logprob == pytest.approx(sum(want), abs=1e-12)
            assert isinstance(h.logprob, float) and isinstance(h.score, float)


@pytest.mark.skipif(torch is None, reason="no torch")
def test_same_seed_same_samples_on_numpy_and_torch():
    table = random_table(5, 4, eos=EOS)
    prompts = [[0], [1], [3, 4]]
    a, _ = search(table, prompts, "numpy", k=4, max_steps=5, seed=2024)
    b, _ = search(table, prompts, "torch", k=4, max_steps=5, seed=2024)
    # the same noise (drawn on the host), and the backends' log-softmax agree to 1e-9, not bit for
    # bit: the logprobs, the perturbed scores and kappa come out within 1e-9
    assert_same_hypotheses(a, b)
    assert a.kappa == pytest.approx(b.kappa, abs=FLOAT64)
    # a numpy Generator and a torch Generator are seeds too, and reproducible: the same run twice
    # on one backend is the same bit for bit; the torch Generator on the other backend to 1e-9
    c, _ = search(table, prompts, k=4, max_steps=5, rng=np.random.default_rng(1))
    d, _ = search(table, prompts, k=4, max_steps=5, rng=np.random.default_rng(1))
    e, _ = search(table, prompts, k=4, max_steps=5, rng=torch.Generator().manual_seed(1))
    again, _ = search(table, prompts, k=4, max_steps=5, rng=torch.Generator().manual_seed(1))
    f, _ = search(table, prompts, "torch", k=4, max_steps=5, rng=torch.Generator().manual_seed(1))
    assert c == d and e == again
    assert_same_hypotheses(e, f)
    assert e.kappa == pytest.approx(f.kappa, abs=FLOAT64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_independence(backend):
    table = random_table(4, 9, eos=EOS)
    prompts = [[0], [1, 2], [3], [0, 0, 1]]
    # one seed per input: an input's samples equal its samples alone, wherever it sits (bit for bit:
    # one backend, rows computed alone, tests/approx.py)
    batch, _ = search(table, prompts, backend, k=3, max_steps=4, seed=[10, 11, 12, 13])
    for i, p in enumerate(prompts):
        alone, _ = search(table, [p], backend, k=3, max_steps=4, seed=[10 + i])
        assert batch[i] == alone[0] and batch.kappa[i] == alone.kappa[0]
    # one int seed: input i's noise depends on (seed, i) only, not on the other inputs
    a, _ = search(table, prompts, backend, k=3, max_steps=4, seed=77)
    b, _ = search(table, [[2, 2], prompts[1], [1], prompts[3]], backend, k=3, max_steps=[2, 4, 3, 4], seed=77)
    assert a[1] == b[1] and a[3] == b[3]


def test_controls_compose():
    table = random_table(4, 13, eos=EOS)
    results, _ = search(table, [[0]] * 50, k=3, max_steps=4, seed=1, min_new_tokens=2, stop_sequences=[[1, 1]],
                        no_repeat_ngram_size=2)
    for hyps in results:
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps) == 3
        for h in hyps:
            seq = [0] + h.tokens
            assert all(seq[i:i + 2] != seq[j:j + 2] for i in range(len(seq) - 1) for j in range(i))  # no repeat
            if h.finished:
                assert len(h.tokens) > 2 and (h.tokens[-1] == EOS or h.tokens[-2:] == [1, 1])
            else:
                assert len(h.tokens) == 4 and EOS not in h.tokens
    # per-input max_steps: each input's outputs stop at its own limit
    results, _ = search(table, [[0], [1]], k=5, max_steps=[1, 3], seed=2)
    assert all(len(h.tokens) == 1 for h in results[0]) and len(results[0]) == 4  # V=4 one-token outputs
    assert max(len(h.tokens) for h in results[1]) <= 3


def test_conditional_gumbels_match_the_direct_formula_and_keep_the_maximum():
    # G = -log(exp(-T) - exp(-Z) + exp(-G~)) written directly (fine in this moderate range)
    rng = np.random.default_rng(0)
    phi = np.log(rng.dirichlet(np.ones(6), size=4)) - 1.0
    noise = rng.gumbel(size=phi.shape)
    parent = np.array([0.5, -1.0, 2.0, -3.0])
    perturbed = phi + noise
    got = conditional_gumbels(perturbed, parent)
    z = perturbed.max(axis=1, keepdims=True)
    want = -np.log(np.exp(-parent[:, None]) - np.exp(-z) + np.exp(-perturbed))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.max(axis=1), parent, rtol=0, atol=0)
    # far from the maximum the direct formula underflows; the stable one stays finite and ordered
    far = conditional_gumbels(np.array([[0.0, -800.0, -900.0]]), np.array([0.0]))
    assert np.isfinite(far).all() and far[0, 0] > far[0, 1] > far[0, 2]
    # probability 0, and a row with no finite entry: -inf, no NaN
    masked = conditional_gumbels(np.array([[0.0, -np.inf], [-np.inf, -np.inf]]), np.zeros(2))
    assert masked.tolist() == [[0.0, -np.inf], [-np.inf, -np.inf]]


def test_errors_before_any_model_call():
    table = random_table(3, 1, eos=EOS)
    model = SequenceModel(table)

    def calls(**kw):
        return stochastic_beam_search(model.step, model.init_state([[0]]), [[0]], eos_token_id=EOS, max_steps=2,
                                      **kw)

    with pytest.raises(ValueError, match="k must be >= 1; got 0"):
        calls(k=0)
    with pytest.raises(TypeError, match="k must be an integer; got 2.0"):
        calls(k=2.0)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator or a torch.Generator; got int"):
        calls(k=2, rng=3)
    with pytest.raises(TypeError, match="rng must be .* got RandomState"):
        calls(k=2, rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="give rng or seed, not both"):
        calls(k=2, rng=np.random.default_rng(0), seed=1)
    with pytest.raises(ValueError, match=r"seed must be one int or one int per prompt \(1\); got 2 seeds"):
        calls(k=2, seed=[1, 2])
    with pytest.raises(ValueError, match="seed must be >= 0; got -1"):
        calls(k=2, seed=-1)
    with pytest.raises(ValueError, match=r"seed must be < 2\*\*63; got 9223372036854775808"):
        calls(k=2, seed=2**63)
    with pytest.raises(ValueError, match=r"seed\[0\] must be < 2\*\*63; got 9223372036854775808"):
        calls(k=2, seed=[2**63])
    with pytest.raises(TypeError, match="seed must be an integer; got 1.5"):
        calls(k=2, seed=1.5)
    for name, value in [("alpha", 0.6), ("length_penalty", "gnmt"), ("prefix", [[1]])]:
        with pytest.raises(TypeError, match=f"^stochastic_beam_search does not take {name} "):
            calls(k=2, **{name: value})
    with pytest.raises(ValueError, match="temperature"):
        calls(k=2, temperature=0)
    assert model.calls == []


def test_empty_batch():
    results = stochastic_beam_search(lambda s, y: None, None, [], k=2, eos_token_id=0, max_steps=3, seed=0)
    assert isinstance(results, StochasticResults) and results == [] and results.kappa.shape == (0,)


def test_the_best_perturbed_score_is_a_standard_gumbel():
    # the largest G over all outputs is max_y (log p(y) + Gumbel) ~ Gumbel(log sum p) = Gumbel(0):
    # mean Euler's gamma 0.5772, variance pi^2 / 6; over 3000 runs within 4 standard errors
    runs = 3000
    results, _ = search(cached(random_table(3, 6, eos=EOS)), [[0]] * runs, k=2, max_steps=3, seed=31)
    top = np.array([hyps[0].score for hyps in results])
    assert abs(top.mean() - np.euler_gamma) <= 4 * math.sqrt(math.pi ** 2 / 6 / runs)
    assert abs(top.var() - math.pi ** 2 / 6) <= 0.15 * math.pi ** 2 / 6


# stochastic_beam_search's seeds, results object and trace, against its documentation: an rng gives
# the seed ``rng.integers(2**63)``, a stream gets the noise of one search over all its inputs, the
# results pad with ``pad_token_id``, a trace reads ``trace_width`` pruned candidates per row; the
# conditional Gumbels of a row with impossible children raise no numpy warning; errors by name.


V = 8
PROMPTS = [[1], [3, 4], [0]]


def seeded_search(prompts=PROMPTS, table=None, **kw):
    model = SequenceModel(table or random_table(V, 4, eos=EOS))
    return stochastic_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=EOS,
                                  max_steps=4, **kw)


def plain(results):
    return [[(h.tokens, h.logprob, h.score, h.finished) for h in hyps] for hyps in results]


def test_inclusion_probabilities_refuse_inputs_without_their_own_kappa():
    """The probabilities are per input, each with its own kappa: results extended with another
    search's input (whose kappa they do not hold), or made without kappa, are refused rather than
    answered for fewer inputs than they hold. The oracle for the intact results: q = 1 - exp(-exp(
    logprob - kappa)), written here."""
    got = seeded_search(k=2, seed=1)
    for hyps, kappa, q in zip(got, got.kappa, got.inclusion_probabilities(), strict=True):
        assert q == pytest.approx([-math.expm1(-math.exp(h.logprob - kappa)) for h in hyps], rel=1e-12)
    extended = StochasticResults(got, kappa=got.kappa)
    extended.extend(seeded_search(prompts=PROMPTS[:1], k=2, seed=2))
    for results in (extended, StochasticResults(got)):
        with pytest.raises(ValueError):
            results.inclusion_probabilities()
        with pytest.raises(ValueError):
            results.importance_weights()


def test_a_numpy_generator_gives_the_seed_it_draws_below_two_to_the_63():
    """Documented: a numpy Generator gives s = rng.integers(2**63); the search is then the one with
    seed=s (the same generator state, drawn here directly)."""
    s = int(np.random.default_rng(5).integers(2**63))
    assert s >= 2**32  # a draw over [0, 2**63), not over a small range
    got = seeded_search(k=3, rng=np.random.default_rng(5))
    assert plain(got) == plain(seeded_search(k=3, seed=s))
    assert base_seed(np.random.default_rng(5), None) == s
    assert max(base_seed(None, None) for _ in range(4)) >= 2**32  # fresh entropy: 63 bits too


def test_a_stream_with_an_rng_is_one_search_with_its_seed():
    table = random_table(V, 4, eos=EOS)
    s = int(np.random.default_rng(9).integers(2**63))
    whole = seeded_search(table=table, k=2, seed=s)
    model = SequenceModel(table)
    stream = decode_stream(model.step, lambda items: model.init_state(items), PROMPTS, max_rows=4,
                           mode="stochastic", k=2, rng=np.random.default_rng(9), eos_token_id=EOS, max_steps=4)
    got = {r.index: r.hypotheses for r in stream}
    assert [[(h.tokens, h.logprob, h.score) for h in got[i]] for i in range(len(PROMPTS))] == [
        [(h.tokens, h.logprob, h.score) for h in hyps] for hyps in whole]


def test_results_pad_with_pad_token_id_and_start_empty():
    got = seeded_search(k=3, seed=1, pad_token_id=7)
    arrays = got.arrays()
    for i, hyps in enumerate(got):
        for j, h in enumerate(hyps):
            assert arrays.tokens[i, j, : len(h.tokens)].tolist() == h.tokens
            assert (arrays.tokens[i, j, len(h.tokens):] == 7).all()
    assert (arrays.tokens == 7).any()
    model = SequenceModel(random_table(V, 4, eos=EOS))
    empty = stochastic_beam_search(model.step, model.init_state([]), [], k=2, eos_token_id=EOS, max_steps=3,
                                   pad_token_id=7)
    assert list(empty) == [] and empty.pad_token_id == 7 and empty.kappa.shape == (0,)
    fresh = StochasticResults()
    assert fresh.pad_token_id is None and fresh.kappa.shape == (0,) and fresh.kappa.dtype == np.float64


def test_the_trace_reads_trace_width_pruned_candidates_per_row():
    """With 8 tokens, k=1 and one eos id, a row's best 1 + 1 + width are read: it shows width
    pruned candidates (3 by default) unless it kept more or has fewer finite ones."""
    for width, kw in [(3, {}), (1, dict(trace_width=1))]:
        trace = Trace()
        seeded_search(k=1, seed=2, trace=trace, **kw)
        per_row = {}
        for v in np.flatnonzero(trace.status == PRUNED):
            per_row[int(trace.parent[v])] = per_row.get(int(trace.parent[v]), 0) + 1
        assert max(per_row.values()) == width


def test_conditional_gumbels_of_impossible_children_raise_no_warning():
    """A row with children of probability 0 (-inf) and a row with none at all: -inf there, the
    maximum child gets the parent's G, without a numpy warning (invalid or divide)."""
    perturbed = np.array([[0.5, -math.inf, -1.0], [-math.inf, -math.inf, -math.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = conditional_gumbels(perturbed, np.array([2.0, 1.0]))
    assert g[0, 0] == 2.0 and g[0, 1] == -math.inf and g[0, 2] < 2.0
    assert g[1].tolist() == [-math.inf] * 3


def test_seed_errors_name_what_was_given():
    class Generator:  # not numpy's nor torch's
        pass

    with pytest.raises(TypeError,
                       match=r"^rng must be a numpy\.random\.Generator or a torch\.Generator; got Generator$"):
        base_seed(Generator(), None)
    with pytest.raises(ValueError, match=r"^give rng or seed, not both; got rng=Generator\(PCG64\) at .* and "
                                         r"seed=\[1, 2, 3\]$"):
        seeded_search(k=2, seed=[1, 2, 3], rng=np.random.default_rng(0))
    model = SequenceModel(random_table(V, 4, eos=EOS))
    with pytest.raises(ValueError, match=r"^seed of decode_stream is one int; per-input seeds go in the input dicts "
                                         r"\(\{'prompt': \.\.\., 'seed': \.\.\.\}\); got seed=\[1, 2, 3\]$"):
        list(decode_stream(model.step, lambda items: model.init_state(items), PROMPTS, max_rows=4,
                           mode="stochastic", k=2, seed=[1, 2, 3], eos_token_id=EOS, max_steps=4))
