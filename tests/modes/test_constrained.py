"""constrained_beam_search: against brute-force enumeration of every output on tiny vocabularies.

The oracle here knows nothing of the search: it walks every output token by token under the
processed distribution (SPEC sections 6 and 10, ``models.processed_logprobs``), and decides
whether an output meets its constraints from the definition alone (``satisfies``: a phrase occurs
contiguously; ``AnyOf``: one of its phrases does; ``ordered``: an occurrence of each constraint
begins after the previous one's ends, tried over every placement).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from beamsearch import TokenLogprobHypothesis, beam_search_batch
from beamsearch.core.trace import PRUNED, SearchTree
from beamsearch.modes.constrained import AnyOf, constrained_beam_search
from models import SequenceModel, gnmt, processed_logprobs, random_table, reference_batch

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy"] + (["torch"] if torch is not None else [])


# ---- the oracle ------------------------------------------------------------------------------


def alternatives(constraint):
    return [tuple(p) for p in constraint.phrases] if isinstance(constraint, AnyOf) else [tuple(constraint)]


def occurs(tokens, phrase, start):
    return tuple(tokens[start:start + len(phrase)]) == phrase


def satisfies(tokens, constraints, ordered):
    """Whether ``tokens`` meet every constraint, from the definition (every placement tried)."""
    alts = [alternatives(c) for c in constraints]
    if not ordered:
        return all(any(occurs(tokens, p, s) for p in alt for s in range(len(tokens))) for alt in alts)

    def place(j, pos):  # constraint j somewhere at or after pos, the rest after it
        if j == len(alts):
            return True
        return any(occurs(tokens, p, s) and place(j + 1, s + len(p))
                   for p in alts[j] for s in range(pos, len(tokens) - len(p) + 1))

    return place(0, 0)


def enumerate_finished(table, prompt, vocab, *, eos, max_steps, alpha=0.6, ngram=0, min_new_tokens=0,
                       stop_sequences=(), prefix=()):
    """Every finished output of at most ``max_steps`` tokens: ``(tokens, logprob, score)``.

    Per step t: eos masked while ``t <= min_new_tokens`` (first), then SPEC processing, then the
    forced prefix token alone at ``t <= len(prefix)``; an output ends with eos, or with a stop
    sequence completed at ``t > min_new_tokens`` (it cannot continue past it).
    """
    out = []

    def walk(tokens, lp):
        t = len(tokens) + 1
        seq = tuple(prompt) + tokens
        logits = np.array(table(seq), dtype=np.float64)
        if t <= min_new_tokens:
            logits[eos] = -math.inf
        row = processed_logprobs(logits, seq, ngram=ngram)
        for v in range(vocab):
            if not math.isfinite(row[v]) or (t <= len(prefix) and v != prefix[t - 1]):
                continue
            new, total = tokens + (v,), lp + row[v]
            stop = t > min_new_tokens and any(new[-len(s):] == tuple(s) for s in stop_sequences)
            if v == eos or stop:
                out.append((new, total, total / gnmt(len(new), alpha)))
            elif t < max_steps:
                walk(new, total)

    walk((), 0.0)
    return out


def best_satisfying(outputs, constraints, ordered):
    """The satisfying outputs, best score first."""
    return sorted((o for o in outputs if satisfies(o[0], constraints, ordered)), key=lambda o: -o[2])


def search(table, prompts, constraints, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    out = constrained_beam_search(model.step, model.init_state(prompts), prompts, constraints=constraints, **kw)
    return out, model


def assert_best(found, expected, n):
    """The finished results are the n best satisfying outputs (scores equal to 1e-9, tokens equal
    where the score is not tied: an exact tie may be broken either way); unfinished rows only
    fill up after them."""
    finished = [h for h in found if h.finished]
    assert found[:len(finished)] == finished and len(finished) == min(n, len(expected))
    for h, (tokens, logprob, sc) in zip(finished, expected, strict=False):
        assert h.score == pytest.approx(sc, abs=1e-9)
        ties = [o for o in expected if abs(o[2] - sc) < 1e-9]
        if len(ties) == 1:
            assert tuple(h.tokens) == tokens
            assert h.logprob == pytest.approx(logprob, abs=1e-9)


def random_constraints(rng, vocab, eos, n_max):
    """0..n_max constraints over the non-eos tokens: phrases of 1-2 tokens, some AnyOf."""
    tokens = [v for v in range(vocab) if v != eos]

    def phrase():
        return [int(t) for t in rng.choice(tokens, size=int(rng.integers(1, 3)))]

    cons = []
    for _ in range(int(rng.integers(0, n_max + 1))):
        cons.append(AnyOf(phrase(), phrase()) if rng.random() < 0.3 else phrase())
    return cons


# ---- exhaustive beam == enumeration ----------------------------------------------------------

CASES = [(seed, ordered) for seed in range(12) for ordered in (False, True)]


def exhaustive_case(seed):
    """A random model (V 4-5, max_steps 3-4) and two inputs' random constraints."""
    rng = np.random.default_rng(seed)
    vocab, max_steps = int(rng.choice([4, 5])), 4 if seed % 3 else 3
    eos = vocab - 1
    cons = [random_constraints(rng, vocab, eos, 2), random_constraints(rng, vocab, eos, 2)]
    return vocab, eos, max_steps, random_table(vocab, seed, eos=eos, eos_shift=-1.0), cons


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed,ordered", CASES)
def test_exhaustive_beam_is_best_satisfying_output(backend, seed, ordered):
    vocab, eos, max_steps, table, cons = exhaustive_case(seed)
    prompts = [[0], [1, 2]]
    kw = dict(eos_token_id=eos, max_steps=max_steps, beam_size=vocab ** max_steps, n_best=3, ordered=ordered)
    expected = [best_satisfying(enumerate_finished(table, p, vocab, eos=eos, max_steps=max_steps), c, ordered)
                for p, c in zip(prompts, cons, strict=True)]
    if not all(expected):  # nothing satisfies within max_steps: refused before any model call
        model = SequenceModel(table, backend=backend)
        with pytest.raises(ValueError, match=r"constraints\[\d\] cannot be met within max_steps"):
            constrained_beam_search(model.step, model.init_state(prompts), prompts, constraints=cons, **kw)
        assert model.calls == []
        return
    out, _ = search(table, prompts, cons, backend, **kw)
    for found, exp in zip(out, expected, strict=True):
        assert_best(found, exp, 3)


def test_exhaustive_cases_cover_every_kind_of_constraint():
    """The random cases above hold inputs with 0, 1 and 2 constraints, AnyOf, repeated tokens,
    and both feasible and infeasible sets."""
    kinds = set()
    for seed, ordered in CASES:
        vocab, eos, max_steps, table, cons = exhaustive_case(seed)
        for c in cons:
            kinds.add(len(c))
            kinds |= {"any"} if any(isinstance(x, AnyOf) for x in c) else set()
            kinds |= {"repeat"} if any(len(set(p)) < len(p) for x in c for p in alternatives(x)) else set()
        outputs = enumerate_finished(table, [0], vocab, eos=eos, max_steps=max_steps)
        kinds.add("feasible" if best_satisfying(outputs, cons[0], ordered) else "infeasible")
    assert kinds >= {0, 1, 2, "any", "repeat", "feasible", "infeasible"}


def test_hand_example_overlap_and_order():
    """V=4, eos=3, max_steps=4; the model prefers eos at once (logit 2 against 0).

    Unordered [1, 2] and [2, 0] overlap in 1 2 0 (3 tokens + eos = 4 steps: fits); ordered, they
    need 1 2 2 0 + eos = 5 steps: refused. By hand, every step's log-probabilities are the same:
    log p(eos) = 2 - log(3 + e^2) = -0.4076, log p(other) = -log(3 + e^2) = -2.4076, so the
    best unordered output is the only 3-token one, 1 2 0 eos: logprob 3 * -2.4076 - 0.4076.
    """

    def table(seq):
        return [0.0, 0.0, 0.0, 2.0]

    z = math.log(3 + math.exp(2))
    logprob = -3 * z + 2 - z
    out, _ = search(table, [[0]], [[[1, 2], [2, 0]]], eos_token_id=3, max_steps=4, beam_size=2)
    assert out[0][0].tokens == [1, 2, 0, 3]
    assert out[0][0].logprob == pytest.approx(logprob, abs=1e-12)
    with pytest.raises(ValueError, match=r"constraints\[0\] cannot be met within max_steps=4.*5 tokens"):
        search(table, [[0]], [[[1, 2], [2, 0]]], eos_token_id=3, max_steps=4, beam_size=2, ordered=True)


def test_a_stream_input_checked_alone_is_refused_by_the_order_of_its_constraints():
    """decode_stream checks each input alone before it joins: with ordered=True, an input whose own
    constraints [1, 2], [2, 0] fit max_steps=4 only unordered (1 2 0 eos; ordered they need 1 2 2 0
    eos, 5 tokens, as in the hand example above) gets constrained_beam_search's error for it, word
    for word, while an input whose constraint fits decodes as constrained_beam_search decodes it."""
    from beamsearch.refill import decode_stream

    def table(seq):
        return [0.0, 0.0, 0.0, 2.0]

    with pytest.raises(ValueError) as raised:
        search(table, [[0]], [[[1, 2], [2, 0]]], eos_token_id=3, max_steps=4, beam_size=2, ordered=True)
    alone, _ = search(table, [[0]], [[[2, 1]]], eos_token_id=3, max_steps=4, beam_size=2, ordered=True)
    model = SequenceModel(table)
    items = [{"prompt": [0], "constraints": [[1, 2], [2, 0]]}, {"prompt": [0], "constraints": [[2, 1]]}]
    got = {r.index: r for r in decode_stream(model.step, lambda its: model.init_state([it["prompt"] for it in its]),
                                             items, max_rows=4, mode="constrained", beam_size=2, ordered=True,
                                             eos_token_id=3, max_steps=4)}
    assert type(got[0].error) is ValueError and str(got[0].error) == str(raised.value)
    assert "5 tokens" in str(raised.value)
    assert got[1].error is None
    assert [h.tokens for h in got[1].hypotheses] == [h.tokens for h in alone[0]]
    assert [h.logprob for h in got[1].hypotheses] == pytest.approx([h.logprob for h in alone[0]], abs=1e-12)


def test_a_broken_phrase_falls_back_to_its_longest_restart():
    """Phrase [1, 1, 2] in 1 1 1 2: after the third 1 the match is still 1 1 (not reset).

    V=4, eos=3, max_steps=5: the satisfying outputs, counted by hand, are 1 1 2 eos, then
    x 1 1 2 eos and 1 1 2 x eos for x in {0, 1, 2}: 7, among them 1 1 1 2 eos. With an exhaustive
    beam and n_best=7 the search returns all 7 in the enumeration's order.
    """

    def table(seq):
        return [0.0, 3.0, 0.0, 1.5]  # the model likes 1: the search meets 1 1 1 often

    expected = best_satisfying(enumerate_finished(table, [0], 4, eos=3, max_steps=5), [[1, 1, 2]], False)
    assert len(expected) == 7
    out, _ = search(table, [[0]], [[[1, 1, 2]]], eos_token_id=3, max_steps=5, beam_size=256, n_best=7)
    assert_best(out[0], expected, 7)
    assert (1, 1, 1, 2, 3) in [tuple(h.tokens) for h in out[0]]


# ---- small beams: what is guaranteed ---------------------------------------------------------


@functools.cache
def _small_beam_outputs(seed, prompt, min_new_tokens):
    """The enumeration for the test below, once per model, prompt and min_new_tokens."""
    table = random_table(5, seed, eos=4, eos_shift=2.0)
    return enumerate_finished(table, prompt, 5, eos=4, max_steps=5, min_new_tokens=min_new_tokens)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("beam", [1, 2, 3])
@pytest.mark.parametrize("ordered", [False, True])
@pytest.mark.parametrize("min_new_tokens", [0, 3])
def test_small_beam_returns_a_satisfying_output_whenever_one_exists(backend, beam, ordered, min_new_tokens):
    """Random models where eos is likely (so plain beam search would stop early): every finished
    result meets its constraints, and input i's first result is finished whenever the
    enumeration finds a satisfying output within max_steps (the documented guarantee: no token
    is ever masked but eos by min_new_tokens)."""
    vocab, eos, max_steps = 5, 4, 5
    kw = dict(eos_token_id=eos, max_steps=max_steps, beam_size=beam, ordered=ordered, min_new_tokens=min_new_tokens)
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        table = random_table(vocab, 100 + seed, eos=eos, eos_shift=2.0)
        prompts = [[0], [1], [2, 3]]
        cons = [random_constraints(rng, vocab, eos, 3) for _ in prompts]
        every = [_small_beam_outputs(100 + seed, tuple(p), min_new_tokens) for p in prompts]
        exists = [bool(best_satisfying(o, c, ordered)) for o, c in zip(every, cons, strict=True)]
        if not all(exists) and min_new_tokens == 0:
            with pytest.raises(ValueError, match="cannot be met"):
                search(table, prompts, cons, backend, **kw)
            continue
        if not all(exists):  # min_new_tokens, not the constraints, leaves too few steps: searched
            continue
        out, _ = search(table, prompts, cons, backend, n_best=beam, **kw)
        for hyps, c in zip(out, cons, strict=True):
            assert hyps[0].finished, (seed, c)
            for h in hyps:
                assert not h.finished or satisfies(h.tokens, c, ordered)


def test_plain_beam_search_misses_what_the_banks_keep():
    """The case the banks exist for: the model's eos is so likely that beam 2 of plain search
    finishes only outputs without the phrase; constrained beam 2 returns one with it."""
    vocab, eos = 5, 4
    table = random_table(vocab, 7, eos=eos, eos_shift=4.0)
    plain = beam_search_batch(SequenceModel(table).step, SequenceModel(table).init_state([[0]]), [[0]],
                              eos_token_id=eos, max_steps=5, beam_size=2, n_best=2)
    assert all(not satisfies(h.tokens, [[2, 2, 1]], False) for h in plain[0])
    out, _ = search(table, [[0]], [[[2, 2, 1]]], eos_token_id=eos, max_steps=5, beam_size=2)
    assert out[0][0].finished and satisfies(out[0][0].tokens, [[2, 2, 1]], False)


# ---- batch independence and inputs without constraints ---------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_independence(backend):
    vocab, eos = 5, 4
    table = random_table(vocab, 11, eos=eos, eos_shift=1.0)
    prompts = [[0], [1, 2], [3], [0, 0]]
    cons = [[[1, 2]], [], [AnyOf([0, 0], [3]), [2]], [[1], [1]]]
    kw = dict(eos_token_id=eos, max_steps=[6, 5, 6, 4], beam_size=3, n_best=2, no_repeat_ngram_size=2)
    together, _ = search(table, prompts, cons, backend, **kw)
    for i in range(len(prompts)):  # bit for bit: one backend, rows computed alone (tests/approx.py)
        alone, _ = search(table, [prompts[i]], [cons[i]], backend, **{**kw, "max_steps": kw["max_steps"][i]})
        assert together[i] == alone[0]
    reordered, _ = search(table, prompts[::-1], cons[::-1], backend, **{**kw, "max_steps": kw["max_steps"][::-1]})
    assert list(reordered) == list(together)[::-1]


CONTROLS = [
    dict(),
    dict(no_repeat_ngram_size=2, top_k=3),
    dict(temperature=0.7, min_new_tokens=2),
    dict(stop_sequences=[[1, 1], [3]], alpha=1.0),
    dict(prefix=[[2], [0, 1]], length_penalty="power"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("controls", CONTROLS)
def test_inputs_without_constraints_equal_beam_search_batch(backend, controls):
    vocab, eos = 6, 5
    table = random_table(vocab, 5, eos=eos, levels=2)  # rounded logits: ties occur
    prompts = [[0], [1, 2]]
    kw = dict(eos_token_id=eos, max_steps=5, beam_size=3, n_best=2, return_token_logprobs=True, **controls)
    out, _ = search(table, prompts, [[], []], backend, **kw)
    model = SequenceModel(table, backend=backend)
    plain = beam_search_batch(model.step, model.init_state(prompts), prompts, **kw)
    assert out == plain
    assert all(isinstance(h, TokenLogprobHypothesis) for hyps in out for h in hyps)


# ---- composition with the decoding controls (exhaustive beam == enumeration) -----------------


COMPOSED = [
    dict(min_new_tokens=3),
    dict(no_repeat_ngram_size=2),
    dict(stop_sequences=[[2, 0], [1]]),
    dict(stop_sequences=[[0, 2]], min_new_tokens=2, no_repeat_ngram_size=2),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("controls", COMPOSED)
@pytest.mark.parametrize("ordered", [False, True])
def test_composes_with_controls(backend, controls, ordered):
    vocab, eos, max_steps = 4, 3, 5
    table = random_table(vocab, 21, eos=eos)
    prompts = [[0], [1, 2]]
    cons = [[[0, 2]], [AnyOf([1], [2, 2]), [0]]]
    oracle = dict(ngram=controls.get("no_repeat_ngram_size", 0), min_new_tokens=controls.get("min_new_tokens", 0),
                  stop_sequences=controls.get("stop_sequences", ()))
    out, _ = search(table, prompts, cons, backend, eos_token_id=eos, max_steps=max_steps, beam_size=vocab ** max_steps,
                    n_best=3, ordered=ordered, **controls)
    for p, c, found in zip(prompts, cons, out, strict=True):
        expected = best_satisfying(enumerate_finished(table, p, vocab, eos=eos, max_steps=max_steps, **oracle), c,
                                   ordered)
        assert expected
        assert_best(found, expected, 3)
        if "min_new_tokens" in controls:
            assert all(len(h.tokens) > controls["min_new_tokens"] for h in found)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forced_prefix_counts_toward_the_constraints(backend):
    """prefix [1, 2] meets phrase [1, 2] by itself, so max_steps 3 fits (2 forced + eos)."""
    vocab, eos = 4, 3
    table = random_table(vocab, 3, eos=eos)
    cons = [[[1, 2]], [[0]]]
    prefix = [[1, 2], [2]]
    out, _ = search(table, [[0], [0]], cons, backend, eos_token_id=eos, max_steps=3, beam_size=64, n_best=2,
                    prefix=prefix)
    for i in range(2):
        expected = best_satisfying(enumerate_finished(table, [0], vocab, eos=eos, max_steps=3, prefix=prefix[i]),
                                   cons[i], False)
        assert_best(out[i], expected, 2)
    with pytest.raises(ValueError, match=r"constraints\[1\] cannot be met within max_steps=2"):
        search(table, [[0], [0]], cons, backend, eos_token_id=eos, max_steps=[3, 2], beam_size=4, prefix=prefix)


def test_token_logprobs_and_padding_pass_through():
    table = random_table(5, 2, eos=4)
    out, _ = search(table, [[0]], [[[1]]], eos_token_id=4, max_steps=4, beam_size=2, n_best=2,
                    return_token_logprobs=True, pad_token_id=9)
    for h in out[0]:
        assert isinstance(h, TokenLogprobHypothesis)
        assert sum(h.token_logprobs) == pytest.approx(h.logprob, abs=1e-12)
    tokens = out.arrays().tokens
    assert tokens.shape[0] == 1 and (tokens[0, 0, len(out[0][0].tokens):] == 9).all()


# ---- errors: named, before any model call ----------------------------------------------------


def _call(constraints, prompts=([0],), **kw):
    model = SequenceModel(random_table(5, 0))
    args = dict(eos_token_id=4, max_steps=4, beam_size=2)
    args.update(kw)
    with pytest.raises((ValueError, TypeError)) as err:
        constrained_beam_search(model.step, model.init_state(list(prompts)), list(prompts),
                                constraints=constraints, **args)
    return err, model


@pytest.mark.parametrize("constraints,kind,message", [
    ([[[1]], [[2]]], ValueError, r"constraints must have one list per prompt \(1\); got 2"),
    ("ab", TypeError, r"constraints must be one list of constraints per prompt"),
    ([AnyOf([1])], TypeError, r"constraints\[0\] must be a list of phrases and AnyOf"),
    ([[[]]], ValueError, r"constraints\[0\]\[0\] must be a non-empty sequence of token ids"),
    ([[5]], TypeError, r"constraints\[0\]\[0\] must be a sequence of token ids; got 5"),
    ([[[1, 1.5]]], TypeError, r"constraints\[0\]\[0\]\[1\] must be an integer; got 1.5"),
    ([[[1, -2]]], ValueError, r"constraints\[0\]\[0\]\[1\] must be in \[0, V\); got -2"),
    ([[[1, 4]]], ValueError, r"constraints\[0\]\[0\] must not hold an eos id; got \[1, 4\] \(eos 4\)"),
    ([[AnyOf()]], ValueError, r"constraints\[0\]\[0\] is AnyOf\(\) without a phrase"),
    ([[AnyOf([1], [])]], ValueError, r"constraints\[0\]\[0\]\.phrases\[1\] must be a non-empty"),
    ([[AnyOf([1], [2, 4])]], ValueError, r"constraints\[0\]\[0\]\.phrases\[1\] must not hold an eos id"),
    ([[[1, 2], [3, 3]]], ValueError, r"constraints\[0\] cannot be met within max_steps=4: .* 5 tokens"),
])
def test_bad_constraints(constraints, kind, message):
    err, model = _call(constraints)
    assert err.type is kind
    assert err.match(message)
    assert model.calls == []


@pytest.mark.parametrize("kw,kind,message", [
    (dict(beam_size=0), ValueError, r"beam_size must be >= 1; got 0"),
    (dict(n_best=3), ValueError, r"n_best must be <= beam_size=2; got 3"),
    (dict(ordered=1), TypeError, r"ordered must be a bool; got 1"),
    (dict(temperature=0.0), ValueError, r"temperature must be > 0"),
    (dict(eos_token_id=[]), ValueError, r"eos_token_id"),
    (dict(max_steps=[4, 4]), ValueError, r"max_steps must have one entry per prompt"),
    (dict(prefix=[[4]]), ValueError, r"prefix\[0\] must not hold an eos id"),
])
def test_bad_arguments(kw, kind, message):
    err, model = _call([[[1]]], **kw)
    assert err.type is kind
    assert err.match(message)
    assert model.calls == []


def test_a_phrase_id_outside_the_vocabulary_fails_at_the_first_step():
    err, model = _call([[[1, 2], AnyOf([3], [0, 7])]])
    assert err.type is ValueError
    assert err.match(r"constraints\[0\]\[1\]\.phrases\[1\]\[1\] must be in \[0, V\) with V=5; got 7")
    assert len(model.calls) == 1  # V is known after the first call; nothing was selected


def test_too_many_unordered_constraints_are_refused_and_ordered_ones_are_not():
    many = [[[t] for t in range(17)]]  # 2 ** 17 subsets of met constraints
    err, model = _call(many, max_steps=40, eos_token_id=30)
    assert err.match(r"constraints\[0\] need more than 65536 tracker states \(17 unordered constraints\)")
    assert model.calls == []
    table = random_table(31, 0, eos=30)
    out, _ = search(table, [[0]], many, eos_token_id=30, max_steps=18, beam_size=1, ordered=True)
    assert out[0][0].tokens == list(range(17)) + [30]


# constrained_beam_search at the edges its other tests leave: its defaults (one result, plain
# hypotheses, three pruned candidates per row in the trace), early stopping counted in model calls
# on a model worked by hand, rows of constraints that are not lists, and AnyOf's repr.


def fixed(p):
    logp = np.log(np.asarray(p, dtype=np.float64))
    return lambda prefix: logp


def test_the_defaults_one_result_plain_hypotheses_and_a_trace_of_three():
    # V = 5, eos 4; an exhaustive beam (every row kept) returns the best satisfying output
    table = random_table(5, 11, eos=4, eos_shift=0.5)
    model = SequenceModel(table)
    tree = SearchTree()
    got = constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2, 1]]],
                                  beam_size=300, eos_token_id=4, max_steps=4, alpha=0.0, trace=tree)
    assert len(got[0]) == 1 and not hasattr(got[0][0], "token_logprobs")
    outputs = enumerate_finished(table, [0], 5, eos=4, max_steps=4, alpha=0.0)
    want = best_satisfying(outputs, [[2, 1]], False)[0]
    assert got[0][0].tokens == list(want[0])
    assert got[0][0].logprob == pytest.approx(want[1], abs=1e-9)
    # V = 5: a row's candidates beyond those kept are pruned, at most 3 of them recorded (the default)
    small = SearchTree()
    model = SequenceModel(table)
    constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2, 1]]], beam_size=1,
                            eos_token_id=4, max_steps=3, trace=small)
    pruned = small.status == PRUNED
    assert np.bincount(small.parent[pruned], minlength=len(small)).max() == 3
    one = SearchTree()  # and trace_width is handed on
    model = SequenceModel(table)
    constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2, 1]]], beam_size=1,
                            eos_token_id=4, max_steps=3, trace=one, trace_width=1)
    assert np.bincount(one.parent[one.status == PRUNED], minlength=len(one)).max() == 1
    assert len(tree) > 0


def test_early_stop_ends_when_no_live_row_can_win_counted_in_model_calls():
    # V = 4 {0, 1, 2, eos 3}, p = (.05, .45, .05, .45) after every prefix, constraint [1], beam 2,
    # alpha 0 (score = logprob). Step 1: [3] does not meet the constraint (discarded); the rows
    # are [1] (log .45, met) and [0] or [2] (not met). Step 2: [1, 3] finishes with log .45^2; every
    # live row then has logprob <= log .45^2 and can only fall: the input stops after 2 calls.
    # (Early stopping is always on in this search: it is lossless.)
    prompts = [[0]]
    stopped = SequenceModel(fixed([.05, .45, .05, .45]))
    got = constrained_beam_search(stopped.step, stopped.init_state(prompts), prompts, constraints=[[[1]]],
                                  beam_size=2, eos_token_id=3, max_steps=6, alpha=0.0)
    assert len(stopped.calls) == 2
    assert got[0][0].tokens == [1, 3] and got[0][0].finished
    assert got[0][0].logprob == pytest.approx(2 * math.log(.45), abs=1e-12)


@pytest.mark.parametrize("row", ["ab", 5, b"xy"])
def test_a_row_of_constraints_that_is_not_a_list_is_named(row):
    err, model = _call([row])
    assert err.type is TypeError
    assert err.match(r"constraints\[0\] must be a list of phrases and AnyOf")
    assert model.calls == []


def test_anyof_repr_lists_its_phrases():
    assert repr(AnyOf([1, 2], (3,))) == "AnyOf([1, 2], [3])"


def test_a_bank_short_of_its_quota_leaves_its_places_to_the_best_of_the_others():
    # V = 6 {0, 1, 2, 3, 4, eos 5}, p = (.25, .2, .03, .15, .12, .25 - .0) ... eos made unlikely:
    # p = (.3, .2, .03, .25, .21, .01). Constraint [2], beam 4, one step. The row's 4 best tokens
    # 0, 3, 4, 1 need 1 token more (bank need 1); the advancing token 2 meets it (bank need 0). Two
    # banks share the beam: quota 2 each, need 0 first. Bank 0 has one candidate, [2]; bank 1's
    # quota takes its best two, [0] and [3]; the place bank 0 leaves goes to the best of the rest
    # by logprob, [4] (.21) before [1] (.2). (max_steps 2: the constraint and eos need 2 steps;
    # the rows kept at step 1 are read from the trace.)
    model = SequenceModel(fixed([.3, .2, .03, .25, .21, .01]))
    tree = SearchTree()
    constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[2]]], beam_size=4,
                            eos_token_id=5, max_steps=2, alpha=0.0, trace=tree)
    first = np.flatnonzero(tree.step == 1)
    kept = first[tree.status[first] != PRUNED]
    assert sorted(tree.token[kept].tolist()) == [0, 2, 3, 4]
    assert [p for p in model.calls[1]] == [(0, 0), (0, 3), (0, 4), (0, 2)]  # step 2's rows: best first


def test_every_advancing_token_of_a_row_is_a_candidate():
    # V = 5 {0, 1, 2, 3, eos 4}, p = (.8, .02, .1, .05, .03); unordered constraints [1] and [3],
    # beam 1. Step 1: the row's best token 0 needs 2 more; both 1 and 3 advance (need 1), though
    # neither is among the row's best. The need-1 bank takes the beam: 3 (.05) before 1 (.02).
    # Step 2 from [3]: 1 advances (need 0), the beam's only bank. Step 3: eos. Output [3, 1, 4].
    model = SequenceModel(fixed([.8, .02, .1, .05, .03]))
    got = constrained_beam_search(model.step, model.init_state([[0]]), [[0]], constraints=[[[1], [3]]],
                                  beam_size=1, eos_token_id=4, max_steps=3, alpha=0.0)
    assert model.calls[1] == [(0, 3)]  # step 2 feeds the one row: the prompt, then 3
    assert got[0][0].tokens == [3, 1, 4] and got[0][0].finished
    assert got[0][0].logprob == pytest.approx(math.log(.05 * .02 * .03), abs=1e-12)


# constrained_beam_search on inputs without constraints: documented to be searched as by
# beam_search_batch, early stopping included; checked against the plain one-input reference of
# tests/models.py, its results and its number of model calls.


V, EOS = 5, 4


@pytest.mark.parametrize("seed", [1, 2, 7])
def test_an_input_without_constraints_stops_early_as_the_reference_does(seed):
    table = random_table(V, seed, eos=EOS, eos_shift=2.0)  # eos likely: early stops happen
    stopped_early = 0
    for prompt in ([1, 2], [3]):
        steps = []
        want = reference_batch(table, [prompt], eos=EOS, max_steps=6, beam=2, n_best=1, steps=steps)[0]
        model = SequenceModel(table)
        got = constrained_beam_search(model.step, model.init_state([prompt]), [prompt], constraints=[[]],
                                      eos_token_id=EOS, max_steps=6, beam_size=2, n_best=1)[0]
        assert [(tuple(h.tokens), h.finished) for h in got] == [(w[0], w[3]) for w in want]
        assert [h.logprob for h in got] == pytest.approx([w[1] for w in want], abs=1e-9)
        assert len(model.calls) == steps[0]
        stopped_early += steps[0] < 6
    assert stopped_early
