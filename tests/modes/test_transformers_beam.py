"""``transformers_beam_search`` (``modes/transformers_beam.py``, ``strategies/transformers_beam.py``)
against a plain reference of ``generate``'s beam search rule, written here from the rule as
transformers documents and runs it (``GenerationMixin._beam_search``): one input at a time, Python
lists, every candidate of every beam sorted, then taken in rank order. The differential test
against ``model.generate`` itself, on ten architectures, is
``tests/hf/test_generation_models.py::test_the_transformers_rule_gives_generates_sequences_and_scores``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch import transformers_beam_search
from beamsearch.core.trace import PRUNED, SearchTree
from models import SequenceModel, random_table
from oracles.controls import banned_by_ngram, log_softmax

V = 6
NEG_INF = -math.inf


def reference_one(table, prompt, *, eos, beam, max_steps, alpha, early_stopping, n_best, ngram=0):
    """generate's rule for one prompt -> [(tokens, finished, score)], best first.

    Per step t = 1..max_steps: every extension of every beam (beam b, token v: flat index
    b * V + v) sorted by logprob so far, ties to the lower flat index; in that order an eos
    extension among the first ``beam`` candidates finishes (score logprob / t ** alpha, float32),
    another eos extension is dropped, any other extension is a next beam until there are
    ``beam`` of them. At t = max_steps the first ``beam`` candidates all end (unfinished unless
    eos). After the step the input is done when it has finished ``beam`` hypotheses and either
    ``early_stopping`` is True or its best beam's logprob / L ** alpha is not above its worst
    kept score (L = t, or max_steps for "never" with alpha > 0). The hypotheses kept: the
    ``beam`` best scores; the result: the first n_best of them (ties: the earlier ended)."""
    beams = [((), 0.0)]
    ended = []  # (score, order, tokens, finished)
    for t in range(1, max_steps + 1):
        candidates = []
        for b, (generated, lp) in enumerate(beams):
            history = tuple(prompt) + generated
            row = log_softmax(table(history))  # processors after log_softmax, no renormalizing
            for v in banned_by_ngram(history, ngram):
                row[v] = NEG_INF
            candidates += [(lp + x, b * V + v, generated + (v,)) for v, x in enumerate(row) if x > NEG_INF]
        candidates.sort(key=lambda c: (-c[0], c[1]))
        following = []
        for rank, (lp, _, generated) in enumerate(candidates):
            terminal = generated[-1] in eos
            if (terminal or t == max_steps) and rank < beam:
                score = float(np.float32(lp) / np.float32(t ** alpha))
                ended.append((score, len(ended), generated, terminal))
            elif not terminal and len(following) < beam and t < max_steps:
                following.append((generated, lp))
        beams = following
        if t == max_steps or not beams:
            break
        n_finished = len(ended)
        if n_finished >= beam:
            worst = sorted(e[0] for e in ended)[-beam]  # the worst of the beam best kept
            length = max_steps if early_stopping == "never" and alpha > 0 else t
            reach = float(np.float32(beams[0][1]) / np.float32(length ** alpha))
            if early_stopping is True or not reach > worst:
                break
    ended.sort(key=lambda e: (-e[0], e[1]))
    return [(list(e[2]), e[3], e[0]) for e in ended[:n_best]]


def run(table, prompts, **kw):
    model = SequenceModel(table)
    eos = kw.pop("eos")
    return transformers_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=eos, **kw)


PROMPTS = [[1, 4], [2], [5, 0, 3]]
CASES = [  # beam, eos ids, alpha, early_stopping, n-gram, max_steps
    (1, [0], 1.0, False, 0, 6),
    (2, [0], 1.0, False, 0, 6),
    (3, [0, 5], 1.0, False, 0, 7),
    (3, [0, 5], 1.0, True, 0, 7),
    (3, [0, 5], 1.0, "never", 0, 7),
    (3, [0], 0.0, "never", 0, 6),
    (3, [0], 0.0, False, 2, 6),
    (2, [0, 5], 2.0, False, 2, 8),
    (4, [5], 0.5, "never", 0, 5),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("beam,eos,alpha,early_stopping,ngram,max_steps", CASES)
def test_the_rule_equals_a_plain_reference(seed, beam, eos, alpha, early_stopping, ngram, max_steps):
    table = random_table(V, seed, eos=eos[0], eos_shift=1.5)
    n_best = min(2, beam)
    got = run(table, PROMPTS, eos=eos, beam_size=beam, n_best=n_best, max_steps=max_steps, alpha=alpha,
              early_stopping=early_stopping, no_repeat_ngram_size=ngram)
    for prompt, hyps in zip(PROMPTS, got, strict=True):
        expected = reference_one(table, prompt, eos=eos, beam=beam, max_steps=max_steps, alpha=alpha,
                                 early_stopping=early_stopping, n_best=n_best, ngram=ngram)
        assert [(h.tokens, h.finished) for h in hyps] == [(e[0], e[1]) for e in expected]
        assert [h.score for h in hyps] == pytest.approx([e[2] for e in expected], abs=1e-6)


def test_the_rule_drops_an_eos_outside_the_first_beam_candidates():
    """Hand-built: V = 3, eos 0, beam 1, max_steps 2, alpha 0 (score = logprob). Step 1: p(1) =
    0.6, p(0) = 0.35 (eos, rank 1 of the candidates, not among the first beam = 1: dropped).
    Step 2 from [1]: p(0) = 0.5 (eos, rank 0: finished, log(0.6 * 0.5) = -1.204). generate's
    rule returns [1, 0]; ours (beam_search_batch) keeps [0] with log(0.35) = -1.050, the better."""
    from beamsearch import beam_search_batch

    probs = {(): [0.35, 0.6, 0.05], (1,): [0.5, 0.25, 0.25]}

    def table(prefix):
        return np.log(np.asarray(probs.get(tuple(prefix[1:]), [1 / 3] * 3)))  # after the prompt's token

    (hyps,) = run(table, [[2]], eos=0, beam_size=1, n_best=1, max_steps=2, alpha=0.0)
    assert [(h.tokens, h.finished) for h in hyps] == [([1, 0], True)]
    assert hyps[0].score == pytest.approx(math.log(0.6 * 0.5), abs=1e-6)
    model = SequenceModel(table)
    (ours,) = beam_search_batch(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, beam_size=1,
                                max_steps=2, length_penalty="power", alpha=0.0)
    assert [(h.tokens, h.finished) for h in ours] == [([0], True)]
    assert ours[0].score == pytest.approx(math.log(0.35), abs=1e-12)


def test_a_batch_decodes_each_input_as_alone():
    table = random_table(V, 3, eos=0, eos_shift=1.5)
    kw = dict(eos=[0, 5], beam_size=3, n_best=3, max_steps=6)
    batch = run(table, PROMPTS, **kw)
    for prompt, hyps in zip(PROMPTS, batch, strict=True):
        (alone,) = run(table, [prompt], **dict(kw))
        assert [(h.tokens, h.finished) for h in hyps] == [(h.tokens, h.finished) for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-6)


@pytest.mark.parametrize("kw,error,match", [
    (dict(early_stopping="maybe"), ValueError, r"early_stopping must be True, False or 'never'; got 'maybe'"),
    (dict(early_stopping=1), ValueError, r"early_stopping must be True, False or 'never'; got 1"),
    (dict(length_penalty="gnmt"), ValueError, r"length_penalty must be 'power'.*got 'gnmt'"),
    (dict(temperature=0.5), TypeError, r"temperature"),
    (dict(top_k=2), TypeError, r"top_k"),
    (dict(alpha=-1.0), ValueError, r"alpha"),
    (dict(n_best=4), ValueError, r"n_best"),
])
def test_bad_arguments_name_the_parameter(kw, error, match):
    table = random_table(V, 0)
    args = dict(eos=0, beam_size=3, max_steps=4)
    args.update(kw)
    with pytest.raises(error, match=match):
        run(table, PROMPTS, **args)


# ``transformers_beam_search`` at the edges its other tests leave: its defaults (generate's:
# early_stopping False, alpha 1.0, one result, plain hypotheses) against the plain reference of the
# rule, ties broken by the flat index as generate sorts them, and what it hands on (the pad id of
# the arrays, token logprobs by teacher forcing, the trace).


def run_defaults(table, prompts, eos, beam, max_steps, **kw):
    model = SequenceModel(table)
    return transformers_beam_search(model.step, model.init_state(prompts), prompts, eos_token_id=eos,
                                    beam_size=beam, max_steps=max_steps, **kw)


def test_the_defaults_are_generates_rule_with_early_stopping_false_and_alpha_one():
    differs = 0
    for seed in range(12):
        table = random_table(V, 40 + seed, eos=0, eos_shift=2.0)
        got = run_defaults(table, PROMPTS, [0], 3, 7)
        for prompt, hyps in zip(PROMPTS, got, strict=True):
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
    for prompt, hyps in zip(PROMPTS, got, strict=True):
        want = reference_one(table, prompt, eos=[0, 5], beam=beam, max_steps=2, alpha=alpha,
                             early_stopping=early_stopping, n_best=beam)
        assert [(h.tokens, h.finished) for h in hyps] == [(e[0], e[1]) for e in want]


def test_token_logprobs_pad_and_trace_are_handed_on():
    table = random_table(V, 7, eos=0, eos_shift=1.0)
    tree = SearchTree()
    got = run_defaults(table, PROMPTS, [0], 3, 5, n_best=3, return_token_logprobs=True, pad_token_id=4,
                       trace=tree)
    for prompt, hyps in zip(PROMPTS, got, strict=True):
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


def test_a_callback_sees_every_step_and_may_stop_an_input():
    """The callback gets one record per model call, steps 1, 2, ...; an input it stops at step 2
    ends there (no hypothesis longer than 2 tokens) while the others decode as without a callback."""
    table = random_table(V, 7, eos=0, eos_shift=0.5)
    plain = run_defaults(table, PROMPTS, [0], 3, 6, n_best=3)
    steps = []

    def stop_input_1_at_step_2(record):
        steps.append(record.step)
        return [1] if record.step == 2 else None

    model = SequenceModel(table)
    got = transformers_beam_search(model.step, model.init_state(PROMPTS), PROMPTS, eos_token_id=[0], beam_size=3,
                                   max_steps=6, n_best=3, callback=stop_input_1_at_step_2)
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
    assert got[1] and all(len(h.tokens) <= 2 for h in got[1])
    assert any(len(h.tokens) > 2 for h in plain[1])
    for i in (0, 2):
        assert [(h.tokens, h.finished, h.score) for h in got[i]] == [(h.tokens, h.finished, h.score) for h in plain[i]]


def test_trace_width_sets_the_pruned_candidates_read_per_row():
    """trace_width=1: each traced row shows one pruned candidate at most (3 by default)."""
    table = random_table(V, 7, eos=0, eos_shift=1.0)
    tree = SearchTree()
    run_defaults(table, PROMPTS, [0], 3, 5, trace=tree, trace_width=1)
    pruned = tree.status == PRUNED
    assert np.bincount(tree.parent[pruned], minlength=len(tree)).max() == 1
