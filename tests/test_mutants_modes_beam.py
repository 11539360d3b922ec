"""The beam module's entry points pass their keywords on: greedy_search's padding, token
log-probabilities (against teacher-forced rescoring), trace and callback; the default trace width
(3 pruned candidates per row) of beam_search, beam_search_each, greedy_decode and greedy_search."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch import beam_search, beam_search_each, greedy_decode
from beamsearch.core.hypothesis import TokenLogprobHypothesis
from beamsearch.core.trace import PRUNED
from beamsearch.modes.beam import greedy_search
from beamsearch.refill import decode_stream
from beamsearch.viz import Trace
from models import PrefixModel, SequenceModel, greedy_oracle, processed_logprobs, random_table

V, EOS = 9, 8
PROMPTS = [[1], [2, 3]]


def pruned_per_row(trace):
    counts = {}
    for v in np.flatnonzero(trace.status == PRUNED):
        counts[int(trace.parent[v])] = counts.get(int(trace.parent[v]), 0) + 1
    return max(counts.values())


def test_greedy_search_passes_its_keywords_on():
    table = random_table(V, 2, eos=EOS, eos_shift=1.0)
    model = SequenceModel(table)
    plain = greedy_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS, max_steps=5,
                          pad_token_id=0)
    assert all(type(hyps[0]) is not TokenLogprobHypothesis and len(hyps) == 1 for hyps in plain)
    arrays = plain.arrays()
    for i, hyps in enumerate(plain):  # the argmax path of a plain loop over the oracle, padded with 0
        seq, want = list(PROMPTS[i]), []
        while len(want) < 5 and (not want or want[-1] != EOS):
            row = processed_logprobs(table(tuple(seq)), seq)
            want.append(max(range(V), key=lambda v: (row[v], -v)))
            seq.append(want[-1])
        assert hyps[0].tokens == want
        assert arrays.tokens[i, 0, : len(want)].tolist() == want and (arrays.tokens[i, 0, len(want):] == 0).all()
    assert (arrays.lengths < arrays.tokens.shape[2]).any()
    trace, seen = Trace(), []
    model = SequenceModel(table)
    got = greedy_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS, max_steps=5,
                        return_token_logprobs=True, trace=trace, callback=seen.append)
    for i, hyps in enumerate(got):
        h, seq = hyps[0], list(PROMPTS[i])
        assert isinstance(h, TokenLogprobHypothesis)
        for t, lp in zip(h.tokens, h.token_logprobs):  # teacher-forced rescoring, token by token
            assert lp == pytest.approx(processed_logprobs(table(tuple(seq)), seq)[t], abs=1e-9)
            seq.append(t)
    assert len(trace) > len(PROMPTS) and len(seen) == int(trace.step.max()) and pruned_per_row(trace) == 3
    trace = Trace()
    model = SequenceModel(table)
    greedy_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=EOS, max_steps=5, trace=trace,
                  trace_width=1)
    assert pruned_per_row(trace) == 1


def test_single_input_entry_points_read_three_pruned_per_row_by_default():
    """9 tokens, one eos: each row reads its kept ones, the eos and 3 more (or trace_width more)."""
    table = random_table(V, 3)
    for width, kw in [(3, {}), (2, dict(trace_width=2))]:
        trace = Trace()
        model = PrefixModel(table)
        beam_search(model.step, model.init_state(), 0, EOS, 2, 4, 0.6, trace=trace, **kw)
        assert pruned_per_row(trace) == width
        trace = Trace()
        model = PrefixModel(table)
        beam_search_each(model.step, model.init_state(2), 2, 0, EOS, 2, 4, 0.6, trace=trace, **kw)
        assert pruned_per_row(trace) == width
        trace, seen = Trace(), []
        model = PrefixModel(table)
        h = greedy_decode(model.step, model.init_state(), 0, EOS, 4, trace=trace, callback=seen.append, **kw)
        assert pruned_per_row(trace) == width and len(seen) == len(model.calls)
        assert h.tokens == greedy_oracle(table, EOS, 4)[0]


def test_a_greedy_stream_gives_plain_hypotheses_unless_asked():
    table = random_table(V, 2, eos=EOS, eos_shift=1.0)
    for asked in (False, True):
        model = SequenceModel(table)
        kw = dict(return_token_logprobs=True) if asked else {}
        got = {r.index: r.hypotheses for r in decode_stream(model.step, lambda items: model.init_state(items),
                                                              PROMPTS, max_rows=2, mode="greedy", eos_token_id=EOS,
                                                              max_steps=5, **kw)}
        assert all((type(hyps[0]) is TokenLogprobHypothesis) == asked and len(hyps) == 1 for hyps in got.values())
