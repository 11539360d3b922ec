"""``transformers_beam_search`` at the edges its other tests leave: its defaults (generate's:
early_stopping False, alpha 1.0, one result, plain hypotheses) against the plain reference of the
rule, ties broken by the flat index as generate sorts them, and what it hands on (the pad id of
the arrays, token logprobs by teacher forcing, the trace)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import transformers_beam_search
from beamsearch.core.trace import PRUNED, SearchTree
from models import SequenceModel, random_table
from oracle_controls import log_softmax
from test_transformers_beam import PROMPTS, V, reference_one


def run_defaults(table, prompts, eos, beam, max_steps, **kw):
    model = SequenceModel(table)
    return transformers_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=eos,
                                    beam_size=beam, max_steps=max_steps, **kw)


def test_the_defaults_are_generates_rule_with_early_stopping_false_and_alpha_one():
    differs = 0
    for seed in range(12):
        table = random_table(V, 40 + seed, eos=0, eos_shift=2.0)
        got = run_defaults(table, PROMPTS, [0], 3, 7)
        for prompt, hyps in zip(PROMPTS, got):
            want = reference_one(table, prompt, eos=[0], beam=3, max_steps=7, alpha=1.0, early_stopping=False,
                                 n_best=1)
            assert [(h.tokens, h.finished) for h in hyps] == [(e[0], e[1]) for e in want]
            assert [h.score for h in hyps] == pytest.approx([e[2] for e in want], abs=1e-6)
            assert not hasattr(hyps[0], "token_logprobs")
            # the same rule under other settings gives other results for some inputs: the defaults matter
            other = [reference_one(table, prompt, eos=[0], beam=3, max_steps=7, alpha=a, early_stopping=e,
                                   n_best=1) for a, e in ((2.0, False), (1.0, True))]
            differs += sum(o != want for o in other)
    assert differs > 0


TIED = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 1.0])  # V = 6, four tokens tied at the top, two below


@pytest.mark.parametrize("beam,early_stopping,alpha", [(3, False, 1.0), (2, "never", 0.5), (3, True, 0.0)])
def test_ties_go_to_the_lower_flat_index_as_generate_sorts(beam, early_stopping, alpha):
    # the same logits after every prefix, 2 steps: step 1's candidates tie by token, step 2's sums
    # lp(row) + lp(token) tie exactly (a + b = b + a) across rows; which row (its rank) and token
    # come first, beam row * V + token, decides what finishes and what goes on. (Beams of 4 and 5
    # are left out: there a finished and an unfinished hypothesis end at the last step with the
    # same score, and the results put the finished one first where the reference keeps the order
    # they ended in; generate's own order for such exact ties is torch.topk's, which promises none.)
    table = lambda prefix: TIED  # noqa: E731
    got = run_defaults(table, PROMPTS, [0, 5], beam, 2, n_best=beam, early_stopping=early_stopping, alpha=alpha)
    for prompt, hyps in zip(PROMPTS, got):
        want = reference_one(table, prompt, eos=[0, 5], beam=beam, max_steps=2, alpha=alpha,
                             early_stopping=early_stopping, n_best=beam)
        assert [(h.tokens, h.finished) for h in hyps] == [(e[0], e[1]) for e in want]


def test_token_logprobs_pad_and_trace_are_handed_on():
    table = random_table(V, 7, eos=0, eos_shift=1.0)
    tree = SearchTree()
    got = run_defaults(table, PROMPTS, [0], 3, 5, n_best=3, return_token_logprobs=True, pad_token_id=4,
                       trace=tree)
    for prompt, hyps in zip(PROMPTS, got):
        for h in hyps:
            # teacher forcing: each token's log-softmax after the prompt and the tokens before it
            want = [log_softmax(table(tuple(prompt) + tuple(h.tokens[:i])))[t] for i, t in enumerate(h.tokens)]
            assert list(h.token_logprobs) == pytest.approx(want, abs=1e-9)
            assert math.fsum(want) == pytest.approx(h.logprob, abs=1e-9)
    arrays = got.arrays()
    for i, hyps in enumerate(got):
        for j, h in enumerate(hyps):
            assert arrays.tokens[i, j, : len(h.tokens)].tolist() == h.tokens
            assert (arrays.tokens[i, j, len(h.tokens):] == 4).all()
    assert (arrays.lengths < arrays.tokens.shape[2]).any()  # some rows are padded
    assert len(tree) > 0
    pruned = tree.status == PRUNED
    assert np.bincount(tree.parent[pruned], minlength=len(tree)).max() == 3  # trace_width's default
