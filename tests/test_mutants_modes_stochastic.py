"""stochastic_beam_search's seeds, results object and trace, against its documentation: an rng
gives the seed ``rng.integers(2**63)``, a stream gets the noise of one search over all its inputs,
the results pad with ``pad_token_id``, a trace reads ``trace_width`` pruned candidates per row; the
conditional Gumbels of a row with impossible children raise no numpy warning; errors by name."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from beamsearch.refill import decode_stream
from beamsearch.modes.stochastic import StochasticResults, base_seed, stochastic_beam_search
from beamsearch.strategies.stochastic import conditional_gumbels
from beamsearch.core.trace import PRUNED
from beamsearch.viz import Trace
from models import SequenceModel, random_table

V, EOS = 8, 2
PROMPTS = [[1], [3, 4], [0]]


def search(prompts=PROMPTS, table=None, **kw):
    model = SequenceModel(table or random_table(V, 4, eos=EOS))
    return stochastic_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=EOS,
                                  max_steps=4, **kw)


def plain(results):
    return [[(h.tokens, h.logprob, h.score, h.finished) for h in hyps] for hyps in results]


def test_a_numpy_generator_gives_the_seed_it_draws_below_two_to_the_63():
    """Documented: a numpy Generator gives s = rng.integers(2**63); the search is then the one with
    seed=s (the same generator state, drawn here directly)."""
    s = int(np.random.default_rng(5).integers(2**63))
    assert s >= 2**32  # a draw over [0, 2**63), not over a small range
    got = search(k=3, rng=np.random.default_rng(5))
    assert plain(got) == plain(search(k=3, seed=s))
    assert base_seed(np.random.default_rng(5), None) == s
    assert max(base_seed(None, None) for _ in range(4)) >= 2**32  # fresh entropy: 63 bits too


def test_a_stream_with_an_rng_is_one_search_with_its_seed():
    table = random_table(V, 4, eos=EOS)
    s = int(np.random.default_rng(9).integers(2**63))
    whole = search(table=table, k=2, seed=s)
    model = SequenceModel(table)
    stream = decode_stream(model.step, lambda items: model.init_state(items), PROMPTS, max_rows=4,
                           mode="stochastic", k=2, rng=np.random.default_rng(9), eos_token_id=EOS, max_steps=4)
    got = {r.index: r.hypotheses for r in stream}
    assert [[(h.tokens, h.logprob, h.score) for h in got[i]] for i in range(len(PROMPTS))] == [
        [(h.tokens, h.logprob, h.score) for h in hyps] for hyps in whole]


def test_results_pad_with_pad_token_id_and_start_empty():
    got = search(k=3, seed=1, pad_token_id=7)
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
        search(k=1, seed=2, trace=trace, **kw)
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

    with pytest.raises(TypeError, match=r"^rng must be a numpy\.random\.Generator or a torch\.Generator; got Generator$"):
        base_seed(Generator(), None)
    with pytest.raises(ValueError, match=r"^give rng or seed, not both; got rng=Generator\(PCG64\) at .* and "
                                         r"seed=\[1, 2, 3\]$"):
        search(k=2, seed=[1, 2, 3], rng=np.random.default_rng(0))
    model = SequenceModel(random_table(V, 4, eos=EOS))
    with pytest.raises(ValueError, match=r"^seed of decode_stream is one int; per-input seeds go in the input dicts "
                                         r"\(\{'prompt': \.\.\., 'seed': \.\.\.\}\); got seed=\[1, 2, 3\]$"):
        list(decode_stream(model.step, lambda items: model.init_state(items), PROMPTS, max_rows=4,
                           mode="stochastic", k=2, seed=[1, 2, 3], eos_token_id=EOS, max_steps=4))
