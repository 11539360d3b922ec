"""SPEC section 10 (decoding controls): hand-computed cases, the plain oracle, brute force.

The oracle is ``tests/oracles/controls.py`` (written from the SPEC alone); its own tests
(``test_oracle_*``) check it against the section 6 reference of ``tests/models.py`` and against
exhaustive enumeration, so that it can be trusted as the reference for the library.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import beamsearch
from beamsearch import beam_search_batch
from models import SequenceModel, brute_force_batch, dict_table, path_logprob, random_table, reference_batch
from oracles.controls import (
    as_numpy,
    brute_force,
    ends_with_stop,
    eos_ids,
    gnmt,
    per_input,
    power,
    reference_score,
    reference_search,
    rounded_to_float32,
)

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None

NEG_INF = -math.inf
TOL = dict(rel=1e-9, abs=1e-9)


def score_sequences(*args, **kwargs):
    """The library's ``score_sequences``, looked up when called (SPEC 10: top-level import)."""
    return beamsearch.score_sequences(*args, **kwargs)


# ---- helpers ---------------------------------------------------------------------------------

def search(table, prompts, *, backend="numpy", dtype=np.float64, **kw):
    model = SequenceModel(table, backend=backend, dtype=dtype)
    return beam_search_batch(model.step, model.init_state(prompts), prompts, **kw), model


def rescore(table, prompts, targets, *, backend="numpy", dtype=np.float64, **kw):
    model = SequenceModel(table, backend=backend, dtype=dtype)
    return score_sequences(model.step, model.init_state(prompts), prompts, targets, **kw)


def const(probs):
    """Every row has these probabilities (as log-probability logits)."""
    with np.errstate(divide="ignore"):
        row = np.log(np.asarray(probs, dtype=np.float64))
    return lambda seq: row


def summary(results):
    """Per input: (tokens, finished) of each hypothesis."""
    return [[(tuple(h.tokens), h.finished) for h in hyps] for hyps in results]


def check(hyps, expected, tol=1e-12):
    """``expected``: (tokens, logprob, score, finished) per hypothesis, in result order."""
    assert [(tuple(h.tokens), h.finished) for h in hyps] == [(tuple(e[0]), e[3]) for e in expected]
    assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in expected], abs=tol)
    assert [h.score for h in hyps] == pytest.approx([e[2] for e in expected], abs=tol)


def assert_same(a, b, rel=1e-12):
    """Two searches' results are the same (tokens and flags exactly, values to ``rel``)."""
    assert summary(a) == summary(b)
    for x, y in zip(a, b, strict=True):
        assert [h.logprob for h in x] == pytest.approx([h.logprob for h in y], rel=rel, abs=rel)
        assert [h.score for h in x] == pytest.approx([h.score for h in y], rel=rel, abs=rel)


def assert_matches_reference(out, ref, **tol):
    tol = tol or TOL
    assert summary(out) == [[(e[0], e[3]) for e in r] for r in ref]
    for hyps, r in zip(out, ref, strict=True):
        assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in r], **tol)
        assert [h.score for h in hyps] == pytest.approx([e[2] for e in r], **tol)


def rows_of(call):
    """One model call's rows (prompt + generated prefixes) as plain tuples of ints."""
    return [tuple(int(t) for t in p) for p in call]


# ---- user processors (row-wise, numpy or torch; ``(logits, ctx) -> logits``) -----------------

class Ban:
    def __init__(self, token):
        self.token = token

    def __call__(self, logits, *_args, **_kwargs):
        out = logits * 1.0
        out[:, self.token] = NEG_INF
        return out

    def __repr__(self):
        return f"Ban({self.token})"


class Bias:
    values = (0.3, -0.4, 0.2, 0.0, -0.1)

    def __call__(self, logits, *_args, **_kwargs):
        out = logits * 1.0
        for j in range(out.shape[1]):
            out[:, j] = out[:, j] + self.values[j]
        return out

    def __repr__(self):
        return "Bias()"


class Lift:
    """Sets token ``token``'s logit to .25: undoes any earlier mask (top-k, n-gram) of it."""

    def __init__(self, token):
        self.token = token

    def __call__(self, logits, *_args, **_kwargs):
        out = logits * 1.0
        out[:, self.token] = 0.25
        return out

    def __repr__(self):
        return f"Lift({self.token})"


class Tie:
    """Gives token ``a`` the logit of token ``b``: exact ties (e.g. a stop token with an eos)."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __call__(self, logits, *_args, **_kwargs):
        out = logits * 1.0
        out[:, self.a] = out[:, self.b]
        return out

    def __repr__(self):
        return f"Tie({self.a}, {self.b})"


# "lift" and "tie" are only drawn where the token they set is not an eos (setting an eos at a step
# <= min_new_tokens would undo its mask, which the SPEC does not speak about)
PROCESSORS = {"ban1": [Ban(1)], "bias": [Bias()], "bias+ban2": [Bias(), Ban(2)], "lift": None, "tie": None}


def processors_of(case):
    name, vocab = case["processors"], case["vocab"]
    if name == "lift":
        return [Lift(vocab - 1)]
    if name == "tie":  # the lowest non-eos token ties with the highest eos id
        eos = eos_ids(case["eos"])
        return [Tie(min(v for v in range(vocab) if v not in eos), max(eos))]
    return list(PROCESSORS.get(name) or [])


# ==== (a) hand-computed cases ===================================================================

def test_several_eos_ids_by_hand():
    # V = 4, eos ids {0, 3}; after prompt [1]: p = [.3, .4, .1, .2]; every other row uniform (.25).
    # Step 1: eos 0 (.3) and eos 3 (.2) finish, in token order; live: 1 (.4), 2 (.1).
    # Step 2: row [1] finishes [1,0] and [1,3], both log(.4 * .25) = log .1 (an exact tie: same
    # row, same value; production order puts token 0 first); row [2] finishes at log .025.
    # GNMT alpha .6: lp(1) = 1, lp(2) = (7/6) ** .6.  n_best = 4 of the six finished.
    table = dict_table({(1,): [.3, .4, .1, .2]}, 4)
    for eos in ([3, 0], [0, 3], (0, 3)):
        out, _ = search(table, [[1]], eos_token_id=eos, max_steps=2, beam_size=4, n_best=4, alpha=0.6)
        l2 = gnmt(2, 0.6)
        check(out[0], [((0,), math.log(.3), math.log(.3), True), ((3,), math.log(.2), math.log(.2), True),
                       ((1, 0), math.log(.1), math.log(.1) / l2, True),
                       ((1, 3), math.log(.1), math.log(.1) / l2, True)])
    # eos 0 alone: 3 is an ordinary token. Step 1 finishes [0] (.3); live 1 (.4), 3 (.2), and
    # 2 (.1) is pruned by beam 2; step 2 finishes [1,0] = log .1 and [3,0] = log .05.
    for eos in (0, [0], np.int64(0)):
        out, model = search(table, [[1]], eos_token_id=eos, max_steps=2, beam_size=2, n_best=2, alpha=0.6)
        check(out[0], [((0,), math.log(.3), math.log(.3), True),
                       ((1, 0), math.log(.1), math.log(.1) / gnmt(2, 0.6), True)])
        assert rows_of(model.calls[1]) == [(1, 1), (1, 3)]


def test_per_input_max_steps_by_hand():
    # Every row p = [.1, .5, .4] (eos 0), alpha 0 (score = logprob), beam 2, n_best 2.
    # Input 0 (max 1): step 1 finishes [0] (.1); live [1] (.5), [2] (.4); at its limit the best
    # live row [1] fills the result, unfinished; its rows never go to the model again.
    # Input 1 (max 3): step 2 finishes [1,0] (.05), [2,0] (.04); live [1,1] (.25) and [1,2]
    # (.5*.4, tied with [2,1] = .4*.5: the lower row position wins); early stop: the bound
    # log .25 / lp(3) = log .25 > log .05 (the 2nd finished), so step 3 runs; its finishes
    # (.025, .02) rank below: result [0], [1,0].
    table = const([.1, .5, .4])
    prompts = [[1], [2]]
    out, model = search(table, prompts, eos_token_id=0, max_steps=[1, 3], beam_size=2, n_best=2, alpha=0.0)
    check(out[0], [((0,), math.log(.1), math.log(.1), True), ((1,), math.log(.5), math.log(.5), False)])
    check(out[1], [((0,), math.log(.1), math.log(.1), True), ((1, 0), math.log(.05), math.log(.05), True)])
    assert [rows_of(c) for c in model.calls] == [[(1,), (2,)], [(2, 1), (2, 2)], [(2, 1, 1), (2, 1, 2)]]
    # each input as if alone with its own limit
    alone, _ = search(table, [[1]], eos_token_id=0, max_steps=1, beam_size=2, n_best=2, alpha=0.0)
    assert_same([out[0]], alone)
    alone, _ = search(table, [[2]], eos_token_id=0, max_steps=[3], beam_size=2, n_best=2, alpha=0.0)
    assert_same([out[1]], alone)


def test_per_input_early_stop_bound_uses_its_own_limit():
    # Every row p = [.5, .3, .2] (eos 0), GNMT alpha 1.5, n_best 1, beam 2.
    # Step 1: [0] finishes at log .5 = -0.693 (lp(1) = 1); the best live row has log .3.
    # With limit 2: bound = log .3 / lp(2) = -1.204 / (7/6)**1.5 = -0.955 <= -0.693: stop.
    # With limit 20: bound = -1.204 / (25/6)**1.5 = -0.142 > -0.693: go on.
    table = const([.5, .3, .2])
    out, model = search(table, [[1], [2]], eos_token_id=0, max_steps=[2, 20], beam_size=2, n_best=1,
                        alpha=1.5)
    assert summary(out) == [[((0,), True)], [((0,), True)]]
    assert len(model.calls) > 2
    assert all(p[0] == 2 for call in model.calls[1:] for p in rows_of(call))  # input 0 stopped


def test_min_new_tokens_by_hand():
    # V = 3, eos 0; after [1]: p = [.5, .3, .2]; after [1,1]: [.5, .25, .25]; after [1,2]:
    # [.6, .2, .2]; other rows uniform. beam 2, max 2, n_best 2, GNMT alpha .6.
    table = dict_table({(1,): [.5, .3, .2], (1, 1): [.5, .25, .25], (1, 2): [.6, .2, .2]}, 3)
    kw = dict(eos_token_id=0, max_steps=2, beam_size=2, n_best=2, alpha=0.6)
    l2 = gnmt(2, 0.6)
    # m = 0: [0] = log .5 (-0.693), [1,0] = log .15 / lp(2) (-1.729) beats [2,0] = log .12 / lp(2)
    out, _ = search(table, [[1]], **kw)
    check(out[0], [((0,), math.log(.5), math.log(.5), True), ((1, 0), math.log(.15), math.log(.15) / l2, True)])
    # m = 1: at step 1 eos is -inf before processing: p(1) = .3/.5 = .6, p(2) = .4; step 2 is free:
    # [1,0] = log(.6 * .5), [2,0] = log(.4 * .6)
    out, _ = search(table, [[1]], min_new_tokens=1, **kw)
    a, b = math.log(.6) + math.log(.5), math.log(.4) + math.log(.6)
    check(out[0], [((1, 0), a, a / l2, True), ((2, 0), b, b / l2, True)])
    # m = 2 >= max_steps: nothing finishes; step 2 from [1] renormalizes [.25, .25] -> .5 each:
    # [1,1] and [1,2] at log(.6 * .5) (tie in one row: token order), [2,*] at log(.4 * .5)
    out, _ = search(table, [[1]], min_new_tokens=2, **kw)
    check(out[0], [((1, 1), a, a / l2, False), ((1, 2), a, a / l2, False)])
    # several eos ids are all masked: eos {0, 2} with m = 1 leaves only token 1 at step 1 (log 1 = 0)
    out, _ = search(table, [[1]], min_new_tokens=1, **(kw | dict(eos_token_id=[0, 2], n_best=1)))
    check(out[0], [((1, 0), math.log(.5), math.log(.5) / l2, True)])


def test_min_new_tokens_masks_eos_before_top_k():
    # After [1]: p = [.5, .3, .2], eos 0 is the argmax. With m = 1 the eos mask comes first, so
    # top-1 keeps token 1 (logprob 0); after [1,1] ([.5, .25, .25]) top-1 keeps eos (logprob 0).
    table = dict_table({(1,): [.5, .3, .2], (1, 1): [.5, .25, .25]}, 3)
    out, _ = search(table, [[1]], eos_token_id=0, max_steps=2, beam_size=1, top_k=1, min_new_tokens=1)
    check(out[0], [((1, 0), 0.0, 0.0, True)])
    # without it, top-1 leaves only eos at step 1: [0] with logprob 0, nothing live
    out, model = search(table, [[1]], eos_token_id=0, max_steps=2, beam_size=1, top_k=1)
    check(out[0], [((0,), 0.0, 0.0, True)])
    assert len(model.calls) == 1


def test_stop_sequence_by_hand():
    # V = 4, eos 0, stop (1, 2), prompt [1], beam 1, n_best 1, alpha 0 (score = logprob).
    # after [1]: [.1, .1, .7, .1]: generated [2] does not end with (1, 2) (the prompt's 1 is not
    #   generated), so [2] (.7) is the live row; [0] finishes at log .1;
    # after [1,2]: [.1, .6, .2, .1]: [2,0] finishes (.07), [2,1] (.42) lives;
    # after [1,2,1]: [.1, .1, .5, .3]: [2,1,2] completes (1, 2): finished at log .21 without a
    #   beam slot, so [2,1,3] (.126) is the live row; [2,1,0] finishes (.042).
    # best finished: [2,1,2] (.21 > .1 > .07 > .042).
    table = dict_table({(1,): [.1, .1, .7, .1], (1, 2): [.1, .6, .2, .1], (1, 2, 1): [.1, .1, .5, .3]}, 4)
    for stops in ([[1, 2]], ((1, 2),), [[3, 3], (1, 2)]):
        out, _ = search(table, [[1]], eos_token_id=0, max_steps=3, beam_size=1, alpha=0.0, stop_sequences=stops)
        check(out[0], [((2, 1, 2), math.log(.21), math.log(.21), True)])
    # one step more without early stop: the 4th call gets the row [2,1,3], not [2,1,2]
    out, model = search(table, [[1]], eos_token_id=0, max_steps=4, beam_size=1, alpha=0.0,
                        stop_sequences=[[1, 2]], early_stop=False)
    assert rows_of(model.calls[3]) == [(1, 2, 1, 3)]
    check(out[0], [((2, 1, 2), math.log(.21), math.log(.21), True)])
    # a single-token stop sequence finishes as soon as it is generated: [2] (.7)
    out, _ = search(table, [[1]], eos_token_id=0, max_steps=3, beam_size=1, alpha=0.0, stop_sequences=[[2]])
    check(out[0], [((2,), math.log(.7), math.log(.7), True)])


@pytest.mark.parametrize("eos, stop, first", [(3, 1, [.45, .05, .45, .05]), (0, 3, [.05, .45, .45, .05])])
def test_finished_order_within_a_step_by_hand(eos, stop, first):
    # V = 4, prompt [2]; step 1 (``first``): the eos and the stop token both finish at .05; the two
    # live rows are the .45 tokens (a tie: token order). Step 2 rows are uniform (.25): every row
    # finishes with eos and with the stop token, all at log(.45 * .25), an exact tie. Production
    # order: row position first, then token id (eos and stop alike). alpha 0.
    table = dict_table({(2,): first}, 4)
    out, _ = search(table, [[2]], eos_token_id=eos, stop_sequences=[[stop]], max_steps=2, beam_size=4,
                    n_best=4, alpha=0.0)
    rows = [v for v in range(4) if first[v] == .45]
    lp = math.log(.45) + math.log(.25)
    expected = [(r, v) for r in rows for v in sorted((eos, stop))]
    check(out[0], [(t, lp, lp, True) for t in expected])


def test_stop_sequence_inside_prefix_by_hand():
    # Uniform V = 4 (every logprob log .25), eos 0, stop (2,), prefix (1, 2, 3), max 4.
    table = const([.25] * 4)
    q = math.log(.25)
    # m = 0: step 1 forces 1; step 2 forces 2, which completes (2,): finished; nothing is live.
    out, model = search(table, [[1]], eos_token_id=0, max_steps=4, beam_size=2, n_best=1,
                        stop_sequences=[[2]], prefix=[[1, 2, 3]])
    check(out[0], [((1, 2), 2 * q, 2 * q / gnmt(2, 0.6), True)])
    assert len(model.calls) == 2
    # m = 2: eos is masked at steps 1-2, so the forced 1 and 2 get log(1/3) each (renormalized
    # over the three other tokens); the completion at step 2 stays live; step 3 forces 3 (log .25);
    # step 4 is free: eos 0 and stop 2 finish [1,2,3,0] and [1,2,3,2] at 2 log(1/3) + 2 log .25
    # (a tie: token order).
    out, _ = search(table, [[1]], eos_token_id=0, max_steps=4, beam_size=2, n_best=2, min_new_tokens=2,
                    stop_sequences=[[2]], prefix=[[1, 2, 3]])
    r = 2 * math.log(1 / 3) + 2 * q
    check(out[0], [((1, 2, 3, 0), r, r / gnmt(4, 0.6), True), ((1, 2, 3, 2), r, r / gnmt(4, 0.6), True)])


def test_processing_order_by_hand():
    # Every row's logits: [3, 2, 1, 0]; eos 0; prompt [2, 1, 2]; one step.
    # 1. min_new_tokens = 1 masks eos:      [-inf, 2, 1, 0]
    # 2. temperature 2:                     [-inf, 1, .5, 0]
    # 3. top-2 (threshold .5):              [-inf, 1, .5, -inf]
    # 4. no-repeat 2-gram: the prompt holds (2, 1), so 1 after 2 is banned: [-inf, -inf, .5, -inf]
    # 5. the user processor sees exactly that, and sets token 3 to .25: [-inf, -inf, .5, .25]
    # 6. log_softmax: token 3 gets .25 - log(e^.5 + e^.25)
    # 7. prefix (3,): every other token -inf; 3 keeps its log-probability (not renormalized to 0).
    seen = []

    def processor(logits, *_args, **_kwargs):
        seen.append(as_numpy(logits))
        out = logits * 1.0
        out[:, 3] = 0.25
        return out

    table = lambda seq: np.array([3.0, 2.0, 1.0, 0.0])  # noqa: E731
    out, _ = search(table, [[2, 1, 2]], eos_token_id=0, max_steps=1, beam_size=1, min_new_tokens=1,
                    temperature=2.0, top_k=2, no_repeat_ngram_size=2, logits_processors=[processor],
                    prefix=[[3]])
    assert seen[0].tolist() == [[NEG_INF, NEG_INF, 0.5, NEG_INF]]
    expected = 0.25 - math.log(math.exp(0.5) + math.exp(0.25))
    check(out[0], [((3,), expected, expected / gnmt(1, 0.6), False)])


def test_prefix_by_hand():
    # Every row p = [.5, .3, .2], eos 0; GNMT alpha .6; beam 2; n_best 1; max 2.
    table = const([.5, .3, .2])
    kw = dict(eos_token_id=0, max_steps=2, beam_size=2, n_best=1, alpha=0.6)
    # input 0, prefix (2,): step 1 keeps only 2 at log .2 (scored, not assumed); step 2 finishes
    # [2,0] = log(.2 * .5). input 1, no prefix: [0] = log .5 at step 1, and early stop ends it
    # there (best live log .3 / lp(2) = -1.10 <= -0.69); so the second call holds input 0 only.
    out, model = search(table, [[1], [2]], prefix=[[2], []], **kw)
    a = math.log(.2) + math.log(.5)
    check(out[0], [((2, 0), a, a / gnmt(2, 0.6), True)])
    check(out[1], [((0,), math.log(.5), math.log(.5), True)])
    assert [rows_of(c) for c in model.calls] == [[(1,), (2,)], [(1, 2)]]
    # a prefix as long as max_steps: the prefix itself, unfinished, log(.2 * .3)
    out, _ = search(table, [[1]], prefix=[(2, 1)], **kw)
    b = math.log(.2) + math.log(.3)
    check(out[0], [((2, 1), b, b / gnmt(2, 0.6), False)])
    # prefix tokens count for min_new_tokens (m = 2, max 3, beam 1): step 1 forces 2 at
    # log(.2/.5) (eos masked first, then renormalized); step 2 (eos masked) takes 1 at log(.3/.5);
    # step 3 finishes [2,1,0] at log .5
    out, _ = search(table, [[1]], prefix=[[2]], min_new_tokens=2, **(kw | dict(max_steps=3, beam_size=1)))
    c = math.log(.4) + math.log(.6) + math.log(.5)
    check(out[0], [((2, 1, 0), c, c / gnmt(3, 0.6), True)])


def test_prefix_token_masked_by_processing_leaves_no_result():
    # top-1 keeps only eos 0 at step 1, so the forced 2 has logprob -inf: no extension, no result
    table = const([.5, .3, .2])
    out, model = search(table, [[1], [1]], eos_token_id=0, max_steps=3, beam_size=2, n_best=1, top_k=1,
                        prefix=[[2], []])
    assert out[0] == [] and summary(out)[1] == [((0,), True)]
    assert len(model.calls) == 1
    # a no-repeat 2-gram ban of the forced token: prompt [1, 2, 1] holds (1, 2)
    out, _ = search(const([.4, .3, .3]), [[1, 2, 1]], eos_token_id=0, max_steps=2, beam_size=2,
                    no_repeat_ngram_size=2, prefix=[[2]])
    assert out[0] == []


def test_length_penalties_by_hand():
    # Every row p = [.5, .3, .2], eos 0, beam 2, max 2, n_best 2, alpha 1.5. Finished:
    # [0] = log .5 = -0.693, [1,0] = log .15 = -1.897, [2,0] = log .1 = -2.303.
    # power: [1,0] -> -1.897 / 2**1.5 = -0.671 beats [0] -> -0.693 (and [2,0] -> -0.814);
    # gnmt: lp(2) = (7/6)**1.5 = 1.260: [0] -0.693, [1,0] -1.505.
    table = const([.5, .3, .2])
    kw = dict(eos_token_id=0, max_steps=2, beam_size=2, n_best=2, alpha=1.5)
    a, b = math.log(.5), math.log(.15)
    out, _ = search(table, [[1]], length_penalty="power", **kw)
    check(out[0], [((1, 0), b, b / 2 ** 1.5, True), ((0,), a, a, True)])
    out, _ = search(table, [[1]], length_penalty="gnmt", **kw)
    check(out[0], [((0,), a, a, True), ((1, 0), b, b / (7 / 6) ** 1.5, True)])


def test_score_sequences_by_hand():
    # Every row p = [.5, .3, .2], eos 0.
    table = const([.5, .3, .2])
    lg = math.log
    # plain: [1, 2, 0] = log(.3 * .2 * .5), finished; GNMT alpha .6 over 3 tokens
    # [2] alone: unfinished, log .2; an empty prompt stands for [bos]
    out = rescore(table, [[1], []], [[1, 2, 0], [2]], eos_token_id=0, bos_token_id=1)
    x = lg(.3) + lg(.2) + lg(.5)
    check(out, [((1, 2, 0), x, x / gnmt(3, 0.6), True), ((2,), lg(.2), lg(.2), False)])
    assert all(type(h.logprob) is float and type(h.score) is float for h in out)
    # power penalty, alpha 1: score = logprob / len
    out = rescore(table, [[1]], [[1, 2, 0]], eos_token_id=0, alpha=1.0, length_penalty="power")
    check(out, [((1, 2, 0), x, x / 3, True)])
    # several eos ids: 2 is an eos too
    out = rescore(table, [[1]], [[1, 2]], eos_token_id=[0, 2])
    y = lg(.3) + lg(.2)
    check(out, [((1, 2), y, y / gnmt(2, 0.6), True)])
    # min_new_tokens = 3: the eos at step 3 is masked: -inf, yet the target is finished; steps 1-2
    # renormalize without eos: .3/.5 and .2/.5
    out = rescore(table, [[1]], [[1, 2, 0]], eos_token_id=0, min_new_tokens=3)
    check(out, [((1, 2, 0), NEG_INF, NEG_INF, True)])
    # a stop sequence completed after step m finishes the target; at a step <= m it does not
    out = rescore(table, [[1], [1]], [[1, 2], [1, 2]], eos_token_id=0, stop_sequences=[[2]])
    check(out, [((1, 2), y, y / gnmt(2, 0.6), True)] * 2)
    out = rescore(table, [[1]], [[1, 2]], eos_token_id=0, stop_sequences=[[2]], min_new_tokens=2)
    z = lg(.6) + lg(.4)
    check(out, [((1, 2), z, z / gnmt(2, 0.6), False)])
    # no-repeat 2-gram over prompt + the target's earlier tokens: after [1] + [1] the bigram (1, 1)
    # exists, so 1 is banned at step 2: [1, 1] is -inf; [1, 2] renormalizes without 1: .2/.7
    out = rescore(table, [[1], [1]], [[1, 1], [1, 2]], eos_token_id=0, no_repeat_ngram_size=2)
    w = lg(.3) + lg(.2 / .7)
    check(out, [((1, 1), NEG_INF, NEG_INF, False), ((1, 2), w, w / gnmt(2, 0.6), False)])
    # temperature 2 and top-2: p ** .5 renormalized over the two best tokens {0, 1}; token 1
    t = lg(.3 ** .5 / (.5 ** .5 + .3 ** .5))
    out = rescore(table, [[1]], [[1]], eos_token_id=0, temperature=2.0, top_k=2)
    check(out, [((1,), t, t / gnmt(1, 0.6), False)])


# ==== errors (SPEC 7 and 10), raised before any model call ======================================

def never_called(state, y_prev):
    raise AssertionError("the model must not be called for invalid arguments")


SEARCH_ERRORS = [
    (dict(eos_token_id=[]), ValueError, "eos_token_id"),
    (dict(eos_token_id=()), ValueError, "eos_token_id"),
    (dict(min_new_tokens=-1), ValueError, "min_new_tokens"),
    (dict(max_steps=[3]), ValueError, "max_steps"),
    (dict(max_steps=[3, 3, 3]), ValueError, "max_steps"),
    (dict(max_steps=[3, 0]), ValueError, "max_steps"),
    (dict(max_steps=[-1, 3]), ValueError, "max_steps"),
    (dict(stop_sequences=[[]]), ValueError, "stop_sequences"),
    (dict(stop_sequences=[[1], ()]), ValueError, "stop_sequences"),
    (dict(stop_sequences=[[1, 0]]), ValueError, "stop_sequences"),
    (dict(eos_token_id=[0, 2], stop_sequences=[[2]]), ValueError, "stop_sequences"),
    (dict(prefix=[[1]]), ValueError, "prefix"),
    (dict(prefix=[[1], [1], [1]]), ValueError, "prefix"),
    (dict(prefix=[[1], [0]]), ValueError, "prefix"),
    (dict(eos_token_id=[0, 2], prefix=[[2], []]), ValueError, "prefix"),
    (dict(prefix=[[1, 1, 1, 1], []]), ValueError, "prefix"),
    (dict(max_steps=[1, 3], prefix=[[1, 1], [1, 1]]), ValueError, "prefix"),
    (dict(eos_token_id=[0, 1.5]), TypeError, "eos_token_id"),
    (dict(eos_token_id=[0, True]), TypeError, "eos_token_id"),
    (dict(eos_token_id=[0, None]), TypeError, "eos_token_id"),
    (dict(eos_token_id="0"), TypeError, "eos_token_id"),
    (dict(max_steps=[3, 2.0]), TypeError, "max_steps"),
    (dict(min_new_tokens=1.5), TypeError, "min_new_tokens"),
    (dict(min_new_tokens=True), TypeError, "min_new_tokens"),
    (dict(stop_sequences=[[1.5]]), TypeError, "stop_sequences"),
    (dict(stop_sequences=[["1"]]), TypeError, "stop_sequences"),
    (dict(prefix=[[1.0], []]), TypeError, "prefix"),
    (dict(logits_processors=[5]), TypeError, "logits_processors"),
]


@pytest.mark.parametrize("kwargs, error, pattern", SEARCH_ERRORS)
def test_search_argument_errors(kwargs, error, pattern):
    args = dict(eos_token_id=0, max_steps=3, beam_size=2) | kwargs
    with pytest.raises(error, match=pattern):
        beam_search_batch(never_called, np.zeros(2), [[1], [2]], **args)


SCORE_ERRORS = [
    (dict(targets=[[1, 0]]), ValueError, "targets"),
    (dict(targets=[[1, 0], [2], [2]]), ValueError, "targets"),
    (dict(targets=[[1, 0], []]), ValueError, "targets"),
    (dict(targets=[[0, 1], [2]]), ValueError, "targets"),
    (dict(eos_token_id=[0, 2], targets=[[2, 1], [1]]), ValueError, "targets"),
    (dict(eos_token_id=[]), ValueError, "eos_token_id"),
    (dict(min_new_tokens=-1), ValueError, "min_new_tokens"),
    (dict(stop_sequences=[[]]), ValueError, "stop_sequences"),
    (dict(stop_sequences=[[0]]), ValueError, "stop_sequences"),
    (dict(targets=[[1.5], [2]]), TypeError, "targets"),
    (dict(eos_token_id=[0, "1"]), TypeError, "eos_token_id"),
    (dict(min_new_tokens=2.0), TypeError, "min_new_tokens"),
]


@pytest.mark.parametrize("kwargs, error, pattern", SCORE_ERRORS)
def test_score_sequences_argument_errors(kwargs, error, pattern):
    args = dict(targets=[[1, 0], [2]], eos_token_id=0) | kwargs
    targets = args.pop("targets")
    with pytest.raises(error, match=pattern):
        score_sequences(never_called, np.zeros(2), [[1], [2]], targets, **args)


def test_eos_id_outside_the_vocabulary():
    table = const([.5, .3, .2])
    with pytest.raises(ValueError, match="eos_token_id"):
        search(table, [[1]], eos_token_id=[0, 3], max_steps=2, beam_size=2)
    with pytest.raises(ValueError, match="eos_token_id"):
        rescore(table, [[1]], [[1]], eos_token_id=[0, 3])


# ==== the oracle's own checks (they need no library feature) ====================================

plain_cases = st.fixed_dictionaries({
    "vocab": st.integers(2, 5),
    "seed": st.integers(0, 10_000),
    "levels": st.sampled_from([None, 1, 2]),
    "prompts": st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3), min_size=1, max_size=3),
    "beam": st.integers(1, 4),
    "n_best": st.integers(1, 4),
    "max_steps": st.integers(1, 4),
    "alpha": st.sampled_from([0.0, 0.6, 1.5]),
    "ngram": st.sampled_from([0, 1, 2, 3]),
    "temperature": st.sampled_from([1.0, 0.5, 2.0]),
    "top_k": st.sampled_from([None, 1, 2, 3]),
    "early_stop": st.booleans(),
})


@settings(max_examples=150, deadline=None)
@given(plain_cases)
def test_oracle_without_controls_equals_the_section_6_reference(case):
    vocab = case["vocab"]
    table = random_table(vocab, case["seed"], levels=case["levels"], eos=0, eos_shift=0.5)
    prompts = [[t % vocab for t in p] for p in case["prompts"]]
    n_best = min(case["n_best"], case["beam"])
    common = dict(max_steps=case["max_steps"], beam=case["beam"], n_best=n_best, alpha=case["alpha"],
                  ngram=case["ngram"], temperature=case["temperature"], top_k=case["top_k"],
                  early_stop=case["early_stop"])
    steps: list[int] = []
    stats: dict = {}
    expected = reference_batch(table, prompts, eos=0, steps=steps, **common)
    got = reference_search(table, prompts, eos=0, stats=stats, **common)
    assert [[(e[0], e[3]) for e in r] for r in got] == [[(e[0], e[3]) for e in r] for r in expected]
    for g, e in zip(got, expected, strict=True):
        assert [h[1] for h in g] == pytest.approx([h[1] for h in e], abs=1e-12)
        assert [h[2] for h in g] == pytest.approx([h[2] for h in e], abs=1e-12)
    assert stats["steps"] == steps
    # every control at its neutral value changes nothing
    neutral = reference_search(table, prompts, eos=[0], stats=None, min_new_tokens=0, stop_sequences=(),
                               prefix=[[]] * len(prompts), penalty="gnmt",
                               **(common | dict(max_steps=[case["max_steps"]] * len(prompts))))
    assert neutral == got
    # the brute force without controls equals the section 6 brute force
    best = brute_force(table, prompts[0], vocab, eos=0, max_steps=case["max_steps"], alpha=case["alpha"],
                       ngram=case["ngram"], temperature=case["temperature"], top_k=case["top_k"])
    plain = brute_force_batch(table, prompts[0], vocab, eos=0, max_steps=case["max_steps"], alpha=case["alpha"],
                              ngram=case["ngram"], temperature=case["temperature"], top_k=case["top_k"])
    assert sorted(b[0] for b in best) == sorted(b[0] for b in plain)
    # and the teacher-forced score is the plain path logprob
    if case["ngram"] == 0 and case["temperature"] == 1.0 and case["top_k"] is None:
        for prompt, r in zip(prompts, got, strict=True):
            for tokens, logprob, _, _ in r:
                full = path_logprob(lambda s, prompt=prompt: table(tuple(prompt) + s), tokens)
                assert logprob == pytest.approx(full, abs=1e-12)


# ---- random cases with every control ----------------------------------------------------------

@st.composite
def control_cases(draw, max_vocab=5, max_len=4, max_beam=4, with_processors=True):
    vocab = draw(st.integers(3, max_vocab))
    n = draw(st.integers(1, 3))
    eos = draw(st.sampled_from([0, [0], [0, 1], [2, 0], (1,), [vocab - 1]]))
    free = [v for v in range(vocab) if v not in eos_ids(eos)]
    # input i's prompt starts with token i, so a model call's rows tell which input they are
    prompts = [[i] + draw(st.lists(st.integers(0, vocab - 1), max_size=2)) for i in range(n)]
    if draw(st.booleans()):
        max_steps = draw(st.lists(st.integers(1, max_len), min_size=n, max_size=n))
    else:
        max_steps = draw(st.integers(1, max_len))
    limits = per_input(max_steps, n)
    beam = draw(st.integers(1, max_beam))
    prefix = None
    if draw(st.booleans()):
        prefix = [draw(st.lists(st.sampled_from(free), max_size=min(2, limits[i]))) for i in range(n)]
    names = ["", "", "ban1", "bias", "bias+ban2"] + (["lift"] if vocab - 1 in free else []) + (
        ["tie", "tie"] if free[0] < max(eos_ids(eos)) else [])
    return {
        "vocab": vocab,
        "kind": draw(st.sampled_from(["prefix", "prefix", "markov", "flat"])),
        "seed": draw(st.integers(0, 10_000)),
        "levels": draw(st.sampled_from([None, None, 1, 2])),
        "prompts": prompts,
        "eos": eos,
        "max_steps": max_steps,
        "beam": beam,
        "n_best": draw(st.integers(1, beam)),
        "alpha": draw(st.sampled_from([0.0, 0.6, 1.5])),
        "penalty": draw(st.sampled_from(["gnmt", "power"])),
        "ngram": draw(st.sampled_from([0, 0, 1, 2, 3])),
        "temperature": draw(st.sampled_from([1.0, 0.5, 2.0])),
        "top_k": draw(st.sampled_from([None, None, 1, 2, 3])),
        "processors": draw(st.sampled_from(names)) if with_processors else "",
        "min_new_tokens": draw(st.sampled_from([0, 0, 1, 2, 3])),
        "stop_sequences": draw(st.lists(st.lists(st.sampled_from(free), min_size=1, max_size=2), max_size=2)),
        "prefix": prefix,
        "early_stop": draw(st.booleans()),
    }


def case_table(case):
    """``prefix``: logits depend on the whole sequence; ``markov``: on its last token only;
    ``flat``: one row everywhere (then paths that are permutations of each other tie exactly)."""
    vocab, seed, levels, kind = case["vocab"], case["seed"], case["levels"], case["kind"]
    if kind == "prefix":
        return random_table(vocab, seed, levels=levels, eos=0, eos_shift=0.5)

    def table(seq):
        rng = np.random.default_rng([seed] if kind == "flat" else [seed, seq[-1]])
        row = rng.normal(size=vocab) * 2.0
        if levels is not None:
            row = np.round(row * levels / 4.0)
        return row

    return table


def library_kwargs(case):
    return dict(eos_token_id=case["eos"], max_steps=case["max_steps"], beam_size=case["beam"],
                n_best=case["n_best"], alpha=case["alpha"], length_penalty=case["penalty"],
                no_repeat_ngram_size=case["ngram"], temperature=case["temperature"], top_k=case["top_k"],
                logits_processors=processors_of(case),
                min_new_tokens=case["min_new_tokens"], stop_sequences=case["stop_sequences"],
                prefix=case["prefix"], early_stop=case["early_stop"])


def score_kwargs(case):
    return dict(eos_token_id=case["eos"], alpha=case["alpha"], length_penalty=case["penalty"],
                no_repeat_ngram_size=case["ngram"], temperature=case["temperature"], top_k=case["top_k"],
                min_new_tokens=case["min_new_tokens"], stop_sequences=case["stop_sequences"])


def oracle_kwargs(case):
    return dict(eos=case["eos"], max_steps=case["max_steps"], beam=case["beam"], n_best=case["n_best"],
                alpha=case["alpha"], penalty=case["penalty"], ngram=case["ngram"],
                temperature=case["temperature"], top_k=case["top_k"],
                processors=processors_of(case), min_new_tokens=case["min_new_tokens"],
                stop_sequences=case["stop_sequences"], prefix=case["prefix"], early_stop=case["early_stop"])


def oracle_brute_kwargs(case, i):
    kw = oracle_kwargs(case)
    return dict(eos=kw["eos"], max_steps=per_input(case["max_steps"], len(case["prompts"]))[i],
                alpha=kw["alpha"], penalty=kw["penalty"], ngram=kw["ngram"], temperature=kw["temperature"],
                top_k=kw["top_k"], processors=kw["processors"], min_new_tokens=kw["min_new_tokens"],
                stop_sequences=kw["stop_sequences"], prefix=case["prefix"][i] if case["prefix"] else ())


def rescore_all(table, case, results, **model_kw):
    """Every returned hypothesis, teacher-forced by ``score_sequences`` in one call."""
    prompts = [case["prompts"][i] for i, hyps in enumerate(results) for _ in hyps]
    targets = [h.tokens for hyps in results for h in hyps]
    if not targets:
        return []
    return rescore(table, prompts, targets, **model_kw, **score_kwargs(case))


def check_invariants(case, results):
    eos = eos_ids(case["eos"])
    limits = per_input(case["max_steps"], len(case["prompts"]))
    m, stops = case["min_new_tokens"], case["stop_sequences"]
    lp = gnmt if case["penalty"] == "gnmt" else power
    assert len(results) == len(case["prompts"])
    for i, hyps in enumerate(results):
        assert len(hyps) <= case["n_best"]
        done = [h for h in hyps if h.finished]
        assert hyps[:len(done)] == done, "finished first, then the fill"
        for group in (done, hyps[len(done):]):
            assert [h.score for h in group] == sorted((h.score for h in group), reverse=True)
        for h in hyps:
            tokens = tuple(h.tokens)
            assert all(type(t) is int for t in h.tokens)
            assert type(h.logprob) is float and type(h.score) is float and math.isfinite(h.logprob)
            assert 1 <= len(tokens) <= limits[i]
            assert h.score == pytest.approx(h.logprob / lp(len(tokens), case["alpha"]), rel=1e-12, abs=1e-12)
            assert not any(t in eos for t in tokens[:-1])
            for j in range(m + 1, len(tokens)):  # no stop sequence completed before the end
                assert not ends_with_stop(tokens[:j], stops)
            if h.finished:
                assert len(tokens) > m
                assert tokens[-1] in eos or ends_with_stop(tokens, stops)
            else:
                assert tokens[-1] not in eos
            if case["prefix"] is not None:
                forced = tuple(case["prefix"][i])
                assert tokens[:len(forced)] == forced[:len(tokens)]


@settings(max_examples=150, deadline=None)
@given(control_cases())
def test_oracle_search_is_consistent(case):
    """The oracle itself: lossless early stop, rescoring, brute force where nothing is pruned."""
    table = case_table(case)
    kw = oracle_kwargs(case)
    got = reference_search(table, case["prompts"], **kw)
    assert reference_search(table, case["prompts"], **(kw | dict(early_stop=not case["early_stop"]))) == got
    for i, r in enumerate(got):
        scored = reference_score(table, [case["prompts"][i]] * len(r), [h[0] for h in r],
                                 eos=kw["eos"], alpha=kw["alpha"], penalty=kw["penalty"], ngram=kw["ngram"],
                                 temperature=kw["temperature"], top_k=kw["top_k"], processors=kw["processors"],
                                 min_new_tokens=kw["min_new_tokens"], stop_sequences=kw["stop_sequences"])
        assert [(h[0], h[3]) for h in scored] == [(h[0], h[3]) for h in r]
        assert [h[1] for h in scored] == pytest.approx([h[1] for h in r], abs=1e-12)
        best = brute_force(table, case["prompts"][i], case["vocab"], **oracle_brute_kwargs(case, i))
        done = [h for h in r if h[3]]
        if done:
            assert done[0][2] <= best[0][2] + 1e-12
        # nothing pruned: the oracle's search equals the enumeration
        limit = per_input(case["max_steps"], len(case["prompts"]))[i]
        wide = max(case["vocab"] ** limit, len(best), 1)
        full = reference_search(table, [case["prompts"][i]], **(kw | dict(
            beam=wide, n_best=max(len(best), 1), max_steps=[limit],
            prefix=None if case["prefix"] is None else [case["prefix"][i]])))[0]
        assert sorted(h[0] for h in full if h[3]) == sorted(b[0] for b in best)
        values = {b[0]: b[1:] for b in best}
        for h in full:
            if h[3]:
                assert h[1:3] == pytest.approx(values[h[0]], abs=1e-12)


# ==== (b) + (d) + (e): the library against the oracle ===========================================

@pytest.fixture(params=["grouped", "merged"])
def ranking(request):
    """Both exact rankings of an input's rows: one [G, r*V] top-m for small arrays (the default
    at these sizes), and each row's top m merged on the host (forced here)."""
    import beamsearch.core.select as select

    saved = select.GROUPED_MAX_ELEMENTS, select.WIDE_FRACTION
    select.GROUPED_MAX_ELEMENTS = 1 << 62 if request.param == "grouped" else 0
    select.WIDE_FRACTION = saved[1] if request.param == "grouped" else 0  # 0: no wide rule either
    yield request.param
    select.GROUPED_MAX_ELEMENTS, select.WIDE_FRACTION = saved


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(control_cases(), control_cases(max_vocab=3, max_len=8, max_beam=2)))
def test_equals_the_oracle(ranking, case):
    table = case_table(case)
    stats: dict = {}
    ref = reference_search(table, case["prompts"], **oracle_kwargs(case), stats=stats)
    out, model = search(table, case["prompts"], **library_kwargs(case))
    assert_matches_reference(out, ref)
    check_invariants(case, out)
    # each input is passed to the model for exactly the steps the oracle needed
    calls = [sum(any(p[0] == i for p in rows_of(c)) for c in model.calls) for i in range(len(case["prompts"]))]
    assert calls == stats["steps"]
    assert len(model.calls[0]) == len(case["prompts"])
    # (d) early stop is lossless under every control
    flipped, _ = search(table, case["prompts"], **(library_kwargs(case) | dict(early_stop=not case["early_stop"])))
    assert_same(out, flipped)
    # (e) teacher-forced rescoring of every returned hypothesis gives its logprob and score
    if not case["processors"]:  # score_sequences takes no logits_processors
        scored = rescore_all(table, case, out)
        flat = [h for hyps in out for h in hyps]
        assert [(tuple(s.tokens), s.finished) for s in scored] == [(tuple(h.tokens), h.finished) for h in flat]
        assert [s.logprob for s in scored] == pytest.approx([h.logprob for h in flat], **TOL)
        assert [s.score for s in scored] == pytest.approx([h.score for h in flat], **TOL)


@settings(max_examples=150, deadline=None)
@given(control_cases())
def test_inputs_are_independent(case):
    table = case_table(case)
    kw = library_kwargs(case)
    out, _ = search(table, case["prompts"], **kw)
    limits = per_input(case["max_steps"], len(case["prompts"]))
    for i, prompt in enumerate(case["prompts"]):
        alone_kw = kw | dict(max_steps=[limits[i]] if i % 2 else limits[i],
                             prefix=None if case["prefix"] is None else [case["prefix"][i]])
        alone, _ = search(table, [prompt], **alone_kw)
        assert_same([out[i]], alone)


@settings(max_examples=150, deadline=None)
@given(control_cases(max_vocab=4, max_len=3))
def test_score_sequences_equals_the_oracle(case):
    # random targets (not search outputs): masked tokens give -inf; eos only last
    table = case_table(case)
    rng = np.random.default_rng(case["seed"])
    eos = eos_ids(case["eos"])
    free = [v for v in range(case["vocab"]) if v not in eos]
    targets = []
    for _ in case["prompts"]:
        body = [int(rng.choice(free)) for _ in range(int(rng.integers(0, 4)))]
        targets.append(body + [eos[0]] if (rng.random() < 0.5 or not body) else body)
    ref = reference_score(table, case["prompts"], targets, eos=case["eos"], alpha=case["alpha"],
                          penalty=case["penalty"], ngram=case["ngram"], temperature=case["temperature"],
                          top_k=case["top_k"], min_new_tokens=case["min_new_tokens"],
                          stop_sequences=case["stop_sequences"])
    got = rescore(table, case["prompts"], targets, **score_kwargs(case))
    assert [(tuple(h.tokens), h.finished) for h in got] == [(r[0], r[3]) for r in ref]
    assert [h.logprob for h in got] == pytest.approx([r[1] for r in ref], **TOL)
    assert [h.score for h in got] == pytest.approx([r[2] for r in ref], **TOL)
    for h in got:
        assert all(type(t) is int for t in h.tokens) and type(h.logprob) is float and type(h.score) is float


# ==== (c) brute force ==========================================================================

@settings(max_examples=100, deadline=None)
@given(control_cases(max_len=3))
def test_nothing_pruned_equals_brute_force(case):
    table = case_table(case)
    for i, prompt in enumerate(case["prompts"][:2]):
        bkw = oracle_brute_kwargs(case, i)
        best = brute_force(table, prompt, case["vocab"], **bkw)
        # any beam: the search's best finished score is at most the enumeration's best
        kw = library_kwargs(case) | dict(max_steps=[bkw["max_steps"]],
                                         prefix=None if case["prefix"] is None else [case["prefix"][i]])
        out, _ = search(table, [prompt], **kw)
        done = [h for h in out[0] if h.finished]
        if done:
            assert best and done[0].score <= best[0][2] + 1e-9
        # a beam no smaller than V ** max_steps prunes nothing: every finished output, ranked
        wide = max(case["vocab"] ** bkw["max_steps"], len(best))
        out, _ = search(table, [prompt], **(kw | dict(beam_size=wide, n_best=max(len(best), 1))))
        done = [h for h in out[0] if h.finished]
        assert sorted(tuple(h.tokens) for h in done) == sorted(b[0] for b in best)
        values = {b[0]: b[1:] for b in best}
        for h in done:
            assert (h.logprob, h.score) == pytest.approx(values[tuple(h.tokens)], **TOL)
        assert [h.score for h in done] == sorted((h.score for h in done), reverse=True)


@pytest.mark.parametrize("vocab, max_steps", [(3, 4), (4, 3), (5, 2)])
def test_fixed_brute_force_cases(vocab, max_steps):
    # Every control at once, continuous logits (no ties): the ranked lists are identical.
    table = random_table(vocab, 7 * vocab + max_steps, eos=0, eos_shift=0.3)
    kw = dict(eos=[0, vocab - 1], max_steps=max_steps, alpha=0.6, penalty="gnmt", ngram=2, temperature=0.5,
              top_k=vocab - 1, min_new_tokens=1, stop_sequences=[[1, 1], [vocab - 2]], prefix=[1])
    best = brute_force(table, [1, 2], vocab, **kw)
    assert best, "the case must have finished outputs"
    wide = max(vocab ** max_steps, len(best))
    out, _ = search(table, [[1, 2]], eos_token_id=kw["eos"], max_steps=max_steps, beam_size=wide,
                    n_best=len(best), alpha=0.6, no_repeat_ngram_size=2, temperature=0.5, top_k=vocab - 1,
                    min_new_tokens=1, stop_sequences=kw["stop_sequences"], prefix=[kw["prefix"]])
    assert [(tuple(h.tokens), h.finished) for h in out[0]] == [(b[0], True) for b in best]
    assert [h.logprob for h in out[0]] == pytest.approx([b[1] for b in best], **TOL)
    assert [h.score for h in out[0]] == pytest.approx([b[2] for b in best], **TOL)


# ==== (f) backends and dtypes ====================================================================

BACKENDS = [
    pytest.param("numpy", np.float32, id="numpy-float32"),
    pytest.param("torch", np.float64, id="torch-float64",
                 marks=pytest.mark.skipif(torch is None, reason="torch not installed")),
    pytest.param("torch", np.float32, id="torch-float32",
                 marks=pytest.mark.skipif(torch is None, reason="torch not installed")),
]


@pytest.mark.parametrize("backend, dtype", BACKENDS)
@settings(max_examples=100, deadline=None)
@given(case=control_cases())
def test_backends_and_dtypes(backend, dtype, case):
    if dtype == np.float64:
        table = case_table(case)
        ref = reference_search(table, case["prompts"], **oracle_kwargs(case))
        out, _ = search(table, case["prompts"], backend=backend, dtype=dtype, **library_kwargs(case))
        assert_matches_reference(out, ref)
        tol = TOL
    else:
        # a float32 model: the oracle reads the same float32 logits in float64; tokens must agree
        # where every comparison the search made was clear of float32 rounding
        table = rounded_to_float32(case_table(case))
        stats: dict = {}
        ref = reference_search(table, case["prompts"], **oracle_kwargs(case), stats=stats)
        out, _ = search(table, case["prompts"], backend=backend, dtype=dtype, **library_kwargs(case))
        assert len(out) == len(ref)
        for hyps, r, margin in zip(out, ref, stats["margin"], strict=True):
            if margin > 1e-3:
                assert_matches_reference([hyps], [r], abs=1e-4, rel=0)
        tol = dict(abs=1e-4, rel=0)
    if dtype == np.float64:
        check_invariants(case, out)
    if not case["processors"]:
        scored = rescore_all(table, case, out, backend=backend, dtype=dtype)
        flat = [h for hyps in out for h in hyps]
        assert [tuple(s.tokens) for s in scored] == [tuple(h.tokens) for h in flat]
        assert [s.logprob for s in scored] == pytest.approx([h.logprob for h in flat], **tol)
        assert [s.score for s in scored] == pytest.approx([h.score for h in flat], **tol)


@pytest.mark.parametrize("backend", ["numpy", pytest.param(
    "torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))])
def test_float32_fixed_cases_agree_with_the_oracle(backend):
    """40 fixed continuous-logit cases: most are clear of float32 rounding, and those must agree."""
    rng = np.random.default_rng(11)
    compared = total = 0
    for case_id in range(40):
        vocab = int(rng.integers(4, 6))
        n = int(rng.integers(1, 4))
        table = rounded_to_float32(random_table(vocab, 100 + case_id, eos=0, eos_shift=0.5))
        prompts = [[i] + [int(t) for t in rng.integers(0, vocab, size=rng.integers(0, 3))] for i in range(n)]
        beam = int(rng.integers(1, 5))
        limits = [int(v) for v in rng.integers(1, 5, size=n)]
        common = dict(n_best=int(rng.integers(1, beam + 1)), alpha=0.6)
        controls = dict(min_new_tokens=int(rng.integers(0, 3)), stop_sequences=[[2]], prefix=[[1]] * n)
        stats: dict = {}
        ref = reference_search(table, prompts, eos=[0, vocab - 1], max_steps=limits, beam=beam, stats=stats,
                               **common, **controls)
        out, _ = search(table, prompts, backend=backend, dtype=np.float32, eos_token_id=[0, vocab - 1],
                        max_steps=limits, beam_size=beam, **common, **controls)
        assert len(out) == n
        for hyps, r, margin in zip(out, ref, stats["margin"], strict=True):
            total += 1
            if margin > 1e-3:
                compared += 1
                assert_matches_reference([hyps], [r], abs=1e-4, rel=0)
    assert compared >= 0.7 * total, (compared, total)


# ==== (g) the defaults keep section 6 ============================================================

@settings(max_examples=150, deadline=None)
@given(plain_cases)
def test_defaults_keep_section_6(case):
    vocab = case["vocab"]
    table = random_table(vocab, case["seed"], levels=case["levels"], eos=0, eos_shift=0.5)
    prompts = [[t % vocab for t in p] for p in case["prompts"]]
    n_best = min(case["n_best"], case["beam"])
    kw = dict(eos_token_id=0, max_steps=case["max_steps"], beam_size=case["beam"], n_best=n_best,
              alpha=case["alpha"], no_repeat_ngram_size=case["ngram"], temperature=case["temperature"],
              top_k=case["top_k"], early_stop=case["early_stop"])
    plain, _ = search(table, prompts, **kw)
    ref = reference_batch(table, prompts, eos=0, max_steps=case["max_steps"], beam=case["beam"], n_best=n_best,
                          alpha=case["alpha"], ngram=case["ngram"], temperature=case["temperature"],
                          top_k=case["top_k"], early_stop=case["early_stop"])
    assert_matches_reference(plain, ref)
    explicit, _ = search(table, prompts, min_new_tokens=0, stop_sequences=(), prefix=None, **kw)
    assert_same(plain, explicit, rel=0)
    # the same limits and ids written as lists, and empty prefixes
    n = len(prompts)
    as_lists, _ = search(table, prompts, **(kw | dict(eos_token_id=[0], max_steps=[case["max_steps"]] * n)),
                         stop_sequences=[], prefix=[[] for _ in prompts], length_penalty="gnmt")
    assert_same(plain, as_lists)


def test_a_batch_without_prompts_keeps_its_pad_token_id_and_gives_empty_arrays():
    """No prompts: no model call, no results, and ``arrays()`` of the empty batch works with the
    pad_token_id passed (shapes ``[0, 0]`` and ``[0, 0, 0]`` by hand: N = 0 inputs, no slot, no token);
    without a pad_token_id it is refused as for any batch."""
    results = beam_search_batch(never_called, np.zeros(0), [], eos_token_id=0, max_steps=3, beam_size=2,
                                pad_token_id=7)
    assert list(results) == [] and results.pad_token_id == 7
    arrays = results.arrays()
    assert arrays.tokens.shape == (0, 0, 0) and arrays.lengths.shape == (0, 0) and arrays.finished.shape == (0, 0)
    bare = beam_search_batch(never_called, np.zeros(0), [], eos_token_id=0, max_steps=3, beam_size=2)
    with pytest.raises(ValueError, match="pad_token_id is None"):
        bare.arrays()


def test_run_plan_records_three_pruned_candidates_per_row_by_default():
    """``run_plan`` without ``trace_width`` records each row's best 3 pruned candidates, the
    default of every mode (docs/trace.md): with V = 8 and beam 1 every row has at least 5 finite
    candidates that were neither kept nor finished, so exactly 3 of them per row and step."""
    from beamsearch.core.plan import run_plan
    from beamsearch.core.trace import PRUNED
    from beamsearch.modes.beam import BEAM, beam_plan
    from beamsearch.viz import Trace

    prompts = [[1], [2, 3]]
    model = SequenceModel(random_table(8, 3, eos=0))
    plan = beam_plan(prompts, BEAM.configure(dict(eos_token_id=0, max_steps=3, beam_size=1)))
    trace = Trace()
    run_plan(model.step, model.init_state(prompts), plan, trace=trace)
    pruned = trace.status == PRUNED
    rows = np.unique(trace.parent[trace.step >= 1])
    assert rows.size >= 2 and [int((pruned & (trace.parent == r)).sum()) for r in rows] == [3] * rows.size
