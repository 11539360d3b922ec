"""The library's logits processors (beamsearch.processors) together, against plain per-row loops.

End to end through ``beam_search_batch(..., logits_processors=[...])`` against the plain reference
search of models.py, fed with the same processing written out (tests/oracles/processors.py); the
prompt counted by the history readers; the errors every processor shares (ids outside the
vocabulary, bad arguments, a user processor returning the wrong thing, non-finite rows). Each
processor alone against its per-row loop: tests/processors/test_NAME.py. Processors are looked up
on the module in each test, so a missing one fails its own tests only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pytest

import beamsearch
from beamsearch import processors as P
from models import SequenceModel, gnmt, log_softmax, random_table, reference_batch
from oracles.processors import (
    BACKENDS,
    NEG_INF,
    bad_words_row,
    repetition_row,
    sequence_bias_row,
    suppress_row,
    tokens_of,
    top_p_cumsums,
    top_p_row,
)

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None


def test_history_readers_say_so():
    assert P.RepetitionPenalty.needs_history is True
    assert P.SequenceBias.needs_history is True
    assert P.BadWords.needs_history is True
    assert P.RepetitionPenalty(1.5).needs_history is True
    assert P.SequenceBias({(1,): 1.0}).needs_history is True
    assert P.BadWords([[1]]).needs_history is True


# ---- end to end through beam_search_batch ------------------------------------------------------

EOS = 0


def oracle_chain(specs: Sequence[tuple], row: Sequence[float], seq: Sequence[int], step: int) -> list[float]:
    """The processors described by ``specs`` applied in order to one row, as plain loops.

    ``seq`` is the row's prompt + generated tokens (its history), ``step`` the model call number.
    """
    x = [float(v) for v in row]
    for kind, arg in specs:
        if kind == "top_p":
            if any(v != NEG_INF for v in x):
                sums = top_p_cumsums(x)
                assert all(abs(s - arg) > 1e-7 for s in sums), "ambiguous test input: pick another seed"
                x = top_p_row(x, arg)
        elif kind == "repetition":
            x = repetition_row(x, list(seq), arg)
        elif kind == "bias":
            x = sequence_bias_row(x, list(seq), arg)
        elif kind == "bad":
            x = bad_words_row(x, list(seq), arg)
        elif kind == "suppress":
            x = suppress_row(x, step, arg[0], arg[1])
        else:  # pragma: no cover
            raise AssertionError(kind)
    return x


def build(specs: Sequence[tuple]) -> list:
    made = []
    for kind, arg in specs:
        if kind == "top_p":
            made.append(P.TopP(arg))
        elif kind == "repetition":
            made.append(P.RepetitionPenalty(arg))
        elif kind == "bias":
            made.append(P.SequenceBias(dict(arg)))
        elif kind == "bad":
            made.append(P.BadWords([list(s) for s in arg]))
        elif kind == "suppress":
            made.append(P.SuppressTokens(list(arg[0]), first_steps=arg[1]))
    return made


def search(table, prompts, specs, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    out = beamsearch.beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS,
                            logits_processors=build(specs), **kw)
    return out, model


def reference(table, prompts, specs, *, prompt_in_history=True, **kw):
    """reference_batch, one prompt at a time, over the table with the processing written out."""
    results = []
    for prompt in prompts:
        def processed(seq, prompt=tuple(prompt)):
            step = len(seq) - len(prompt) + 1
            hist = seq if prompt_in_history else seq[len(prompt):]
            return oracle_chain(specs, table(seq), hist, step)

        results += reference_batch(processed, [prompt], eos=EOS, **kw)
    return results


def rescored(table, prompt, tokens, specs) -> float:
    """The plain recomputation of a hypothesis's logprob: the processed log-softmax along it."""
    total = 0.0
    for t in range(len(tokens)):
        seq = tuple(prompt) + tuple(tokens[:t])
        total += log_softmax(oracle_chain(specs, table(seq), seq, t + 1))[tokens[t]]
    return total


def assert_matches(out, ref, table, prompts, specs, alpha):
    assert [[(tuple(h.tokens), h.finished) for h in hyps] for hyps in out] == \
        [[(e[0], e[3]) for e in r] for r in ref]
    for prompt, hyps, r in zip(prompts, out, ref, strict=True):
        assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in r], abs=1e-9)
        assert [h.score for h in hyps] == pytest.approx([e[2] for e in r], abs=1e-9)
        for h in hyps:
            assert h.logprob == pytest.approx(rescored(table, prompt, h.tokens, specs), abs=1e-9)
            assert h.score == pytest.approx(h.logprob / gnmt(len(h.tokens), alpha), abs=1e-9)


def random_specs(rng: np.random.Generator, vocab: int) -> list[tuple]:
    pool = []
    if rng.random() < 0.6:
        pool.append(("repetition", float(rng.choice([1.5, 2.0, 0.8]))))
    if rng.random() < 0.6:
        seqs = [tuple(int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 4)))) for _ in range(3)]
        pool.append(("bias", {s: float(rng.choice([-3.0, -1.0, 1.0, 2.0])) for s in seqs}))
    if rng.random() < 0.5:
        # at most two bans: with vocab >= 4 every row keeps a finite token
        pool.append(("bad", [tuple(int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 3))))
                             for _ in range(2)]))
    if rng.random() < 0.4:
        pool.append(("suppress", ([int(rng.integers(0, vocab))], [None, 1, 2][int(rng.integers(3))])))
    if rng.random() < 0.6:
        pool.append(("top_p", float(rng.choice([0.5, 0.8, 0.93]))))
    order = rng.permutation(len(pool))
    return [pool[i] for i in order]


@pytest.mark.parametrize("backend", BACKENDS)
def test_search_with_processors_equals_the_plain_reference(backend):
    rng = np.random.default_rng(60)
    for case in range(25):
        vocab = int(rng.integers(4, 7))
        table = random_table(vocab, 100 + case, eos=EOS, eos_shift=0.3)
        prompts = [[int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 4)))]
                   for _ in range(int(rng.integers(1, 4)))]
        beam = int(rng.integers(1, 4))
        kw = dict(max_steps=int(rng.integers(1, 5)), beam_size=beam, n_best=int(rng.integers(1, beam + 1)),
                  alpha=0.6)
        specs = random_specs(rng, vocab)
        out, _ = search(table, prompts, specs, backend, **kw)
        ref = reference(table, prompts, specs, max_steps=kw["max_steps"], beam=beam, n_best=kw["n_best"],
                        alpha=0.6)
        assert_matches(out, ref, table, prompts, specs, 0.6)


@pytest.mark.parametrize("specs", [
    [("top_p", 0.7)],
    [("repetition", 1.8)],
    [("bias", {(2,): 1.5, (3, 1): -2.0, (1, 2, 3): 2.5})],
    [("bad", [(1,), (2, 3)])],
    [("suppress", ([EOS], 1))],
    [("suppress", ([2, 3], None))],
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_processor_alone_in_the_search(backend, specs):
    for seed in range(4):
        table = random_table(5, 200 + seed, levels=2, eos=EOS, eos_shift=0.5)  # ties
        prompts = [[1], [3, 2], [2, 3, 1]]
        out, _ = search(table, prompts, specs, backend, max_steps=4, beam_size=3, n_best=2, alpha=0.6)
        ref = reference(table, prompts, specs, max_steps=4, beam=3, n_best=2, alpha=0.6)
        assert_matches(out, ref, table, prompts, specs, 0.6)


# the prompt counts: tokens that appear only in the prompt change the first step

FLAT = [0.0, 1.0, 2.0, -1.0, 0.5]  # eos = 0; the same logits after every prefix


def flat_table(seq):
    return FLAT


def first_step_logprobs(prompt, specs, backend="numpy"):
    """token -> logprob of the one-token hypotheses (every token kept: beam 5, one step)."""
    out, _ = search(flat_table, [prompt], specs, backend, max_steps=1, beam_size=5, n_best=5, alpha=0.6)
    got = {h.tokens[0]: h.logprob for h in out[0]}
    assert all(len(h.tokens) == 1 for h in out[0])
    return got


@pytest.mark.parametrize("backend", BACKENDS)
def test_repetition_penalty_counts_the_prompt(backend):
    prompt = [3, 2]  # 2 is the last prompt token (the first y_prev), 3 an earlier one
    got = first_step_logprobs(prompt, [("repetition", 2.0)], backend)
    expected = log_softmax([0.0, 1.0, 1.0, -2.0, 0.5])
    assert got == pytest.approx({v: expected[v] for v in range(5)}, abs=1e-12)
    assert abs(got[2] - log_softmax(FLAT)[2]) > 0.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_bias_and_bad_words_count_the_prompt(backend):
    bias = {(2, 4): 3.0, (3, 2, 1): -5.0, (1, 1): 7.0}
    got = first_step_logprobs([3, 2], [("bias", bias)], backend)
    expected = log_softmax([0.0, -4.0, 2.0, -1.0, 3.5])
    assert got == pytest.approx({v: expected[v] for v in range(5)}, abs=1e-12)
    got = first_step_logprobs([3, 2], [("bad", [(2, 4), (3, 2, 1), (1, 3)])], backend)
    expected = log_softmax([0.0, -math.inf, 2.0, -1.0, -math.inf])
    assert got == pytest.approx({v: expected[v] for v in (0, 2, 3)}, abs=1e-12)
    # a sequence that spans the prompt and the generated tokens
    table = random_table(5, 7, eos=EOS)
    specs = [("bad", [(2, 3, 1)]), ("bias", {(2, 1, 4): 2.0})]
    out, _ = search(table, [[3, 2]], specs, backend, max_steps=3, beam_size=5, n_best=5, alpha=0.6)
    ref = reference(table, [[3, 2]], specs, max_steps=3, beam=5, n_best=5, alpha=0.6)
    assert_matches(out, ref, table, [[3, 2]], specs, 0.6)
    assert all(h.tokens[:2] != [3, 1] for h in out[0])
    without = reference(table, [[3, 2]], specs, prompt_in_history=False, max_steps=3, beam=5, n_best=5,
                        alpha=0.6)
    assert [e[1] for e in ref[0]] != pytest.approx([e[1] for e in without[0]], abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_suppress_at_begin_in_the_search(backend):
    # eos is the best token everywhere but may not come first
    def table(seq):
        return [3.0, 1.0, 0.5, 0.0, -1.0]

    out, _ = search(table, [[1], [2, 2]], [("suppress", ([EOS], 1))], backend, max_steps=3, beam_size=2,
                    n_best=2, alpha=0.6)
    for hyps in out:
        assert len(hyps) == 2
        for h in hyps:
            assert h.finished and len(h.tokens) == 2 and h.tokens[0] != EOS
    first = log_softmax([-math.inf, 1.0, 0.5, 0.0, -1.0])
    assert [h.tokens for h in out[0]] == [[1, EOS], [2, EOS]]
    assert out[0][0].logprob == pytest.approx(first[1] + log_softmax(table(()))[EOS], abs=1e-12)


def test_history_processors_see_the_prompt_and_the_step():
    seen = []

    class Probe:
        needs_history = True

        def __call__(self, logits, ctx):
            seen.append((ctx.step, np.array(ctx.history, copy=True), np.array(ctx.row_input, copy=True)))
            return logits

    table = random_table(4, 3, eos=EOS)
    prompts = [[1, 2, 3], [2]]
    model = SequenceModel(table)
    beamsearch.beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=3,
                      beam_size=2, logits_processors=[Probe()])
    assert [s for s, _, _ in seen] == list(range(1, len(model.calls) + 1))
    for (_, hist, _), call in zip(seen, model.calls, strict=True):
        assert hist.dtype == np.int64
        assert [tuple(tokens_of(r)) for r in hist] == call  # prompt + generated tokens, per row
        for r in hist:  # left padding only
            pad = int((r < 0).sum())
            assert (r[:pad] == -1).all() and (r[pad:] >= 0).all()


# ---- clear errors: ids outside [0, V), empty arguments, what a processor returns (issue 20 item 5) ----

def never_called(state, y_prev):
    raise AssertionError("the model must not be called for invalid arguments")


# (processor, its index, the argument named, the bad id): V = 5 below
OUTSIDE = [
    (lambda: P.SuppressTokens([1, 7]), "SuppressTokens(token_ids=[1, 7], first_steps=None)", "token_ids[1]", 7),
    (lambda: P.BadWords([[1], [2, 9]]), "BadWords(sequences=[[1], [2, 9]])", "sequences[1][1]", 9),
    (lambda: P.SequenceBias({(1,): 0.5, (5, 2): -1.0}), "SequenceBias(bias={(1,): 0.5, (5, 2): -1.0})",
     "bias key (5, 2)[0]", 5),
]


@pytest.mark.parametrize("make, shown, argument, bad", OUTSIDE, ids=["suppress", "bad_words", "bias"])
@pytest.mark.parametrize("entry", ["beam_search_batch", "score_sequences", "decode_stream"])
def test_processor_ids_outside_the_vocabulary_are_named(make, shown, argument, bad, entry):
    model = SequenceModel(random_table(5, 1))
    processors = [P.TopP(0.9), make()]  # the second: logits_processors[1]
    if entry == "beam_search_batch":
        def call():
            return beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0,
                                                max_steps=3, beam_size=2, logits_processors=processors)
    elif entry == "score_sequences":
        def call():
            return beamsearch.score_sequences(model.step, model.init_state([[1]]), [[1]], [[2, 0]],
                                              eos_token_id=0, logits_processors=processors)
    else:
        from beamsearch.refill import decode_stream

        def call():
            (result,) = decode_stream(model.step, lambda items: model.init_state([[1]]), [[1]], max_rows=2,
                                      beam_size=2, eos_token_id=0, max_steps=3, logits_processors=processors)
            raise result.error
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == f"logits_processors[1] ({shown}) {argument} must be in [0, V) with V=5; got {bad}"
    assert len(model.calls) == 1  # the first call gives V; nothing is processed or selected after it


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: P.BadWords([]), ValueError, r"^sequences must hold at least one token-id sequence; got \[\]$"),
    (lambda: P.SequenceBias({}), ValueError, r"^bias must map at least one token-id sequence to a bias; got \{\}$"),
    (lambda: P.SuppressTokens([]), ValueError, r"^token_ids must be a non-empty sequence of token ids; got \[\]$"),
    (lambda: P.SequenceBias({(1,): "x"}), TypeError, r"^bias\[\(1,\)\] must be a real number; got 'x'"),
    (lambda: P.SequenceBias({(1,): None}), TypeError, r"^bias\[\(1,\)\] must be a real number; got None"),
    (lambda: P.SequenceBias({(1,): float("inf")}), ValueError, r"^bias\[\(1,\)\] must be finite; got inf$"),
    (lambda: P.Temperature(float("inf")), ValueError, r"^temperature must be > 0 and finite; got inf$"),
    (lambda: P.Temperature(0.0), ValueError, r"^temperature must be > 0 and finite; got 0.0$"),
    (lambda: P.Temperature("1"), TypeError, r"^temperature must be a real number; got '1'"),
    (lambda: P.TopK(0), ValueError, r"^k must be >= 1; got 0$"),
    (lambda: P.TopK(2**63), ValueError, r"^k must be <= 2\*\*62"),
    (lambda: P.NoRepeatNGram(0), ValueError, r"^n must be >= 1; got 0$"),
    (lambda: P.SuppressTokens([2**63]), ValueError, r"^token_ids\[0\] must be in \[0, V\); got 9223372036854775808"),
])
def test_processor_arguments_refused_at_construction(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize("temperature", [float("inf"), np.float32("inf"), 0.0, -1.0, float("nan")])
def test_temperature_keyword_must_be_positive_and_finite(temperature):
    with pytest.raises(ValueError, match=r"^temperature must be > 0 and finite; got "):
        beamsearch.beam_search_batch(never_called, np.zeros(1), [[1]], eos_token_id=0, max_steps=2, beam_size=2,
                                     temperature=temperature)


def _returning(value_of):
    """A user processor returning ``value_of(logits)``."""

    def bad(logits, ctx):
        return value_of(logits)

    return bad


RETURNS = [
    (lambda x: None, TypeError, r"returned None; expected a numpy float64 ndarray of shape \(1, 5\) like the logits "
     r"it was given \(did it write into the logits and not return them\?\)$"),
    (lambda x: x.tolist(), TypeError, r"returned list \[\[.*; expected a numpy float64 ndarray of shape \(1, 5\)"),
    (lambda x: x[:, :3], ValueError, r"returned shape \(1, 3\); expected a numpy float64 ndarray of shape \(1, 5\)"),
    (lambda x: x.astype(np.int64), TypeError, r"returned dtype int64; expected a numpy float64 ndarray"),
    (lambda x: x.astype(np.float32), TypeError, r"returned dtype float32; expected a numpy float64 ndarray"),
    (lambda x: x[0], ValueError, r"returned shape \(5,\); expected a numpy float64 ndarray of shape \(1, 5\)"),
] + ([(lambda x: torch.from_numpy(x), TypeError, r"returned Tensor of shape \(1, 5\); expected a numpy float64")]
     if torch is not None else [])


@pytest.mark.parametrize("value_of, error, pattern", RETURNS)
def test_a_user_processor_returning_the_wrong_thing_is_named(value_of, error, pattern):
    model = SequenceModel(random_table(5, 1))
    bad = _returning(value_of)
    shown = re.escape(f"function {bad.__qualname__}")
    with pytest.raises(error, match=rf"^logits_processors\[1\] \({shown}\) " + pattern):
        beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                                     beam_size=2, logits_processors=[P.TopP(1.0), bad])


@pytest.mark.skipif(torch is None, reason="no torch")
def test_a_user_processor_returning_numpy_for_torch_logits_is_named():
    model = SequenceModel(random_table(5, 1), backend="torch")
    bad = _returning(lambda x: x.numpy())
    shown = re.escape(f"function {bad.__qualname__}")
    with pytest.raises(TypeError, match=rf"^logits_processors\[0\] \({shown}\) returned ndarray of shape \(1, 5\); "
                                        r"expected a torch float64 Tensor of shape \(1, 5\) on cpu like the logits"):
        beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                                     beam_size=2, logits_processors=[bad])


def test_a_new_array_of_the_right_kind_is_fine():
    # a processor may return a new array instead of writing in place: results equal the in-place one's
    model = SequenceModel(random_table(5, 1))

    def run(p):
        return beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0,
                                            max_steps=3, beam_size=2, logits_processors=[p])


    def in_place(x, ctx):
        x[:, 2] = NEG_INF
        return x

    def new(x, ctx):
        return np.where(np.arange(5) == 2, NEG_INF, x)

    assert run(new) == run(in_place) and all(2 not in h.tokens for h in run(new)[0])


def nan_token_1(x, ctx):
    x[:, 1] = np.nan
    return x


def inf_token_0(x, ctx):
    x[:, 0] = np.inf
    return x


def mask_all(x, ctx):
    x[:] = NEG_INF
    return x


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_a_non_finite_row_is_blamed_on_the_processor_that_made_it():
    model = SequenceModel(lambda prefix: np.array([1.0, 0.0, 0.0]))

    def run(**kw):
        return beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0,
                                            max_steps=2, beam_size=2, **kw)

    # 1.0 / 1e-310 overflows to +inf: the temperature keyword did it, not logits_processors
    with pytest.raises(ValueError, match=r"^logits row 0 contains \+inf after temperature=1e-310 "):
        run(temperature=1e-310)

    with pytest.raises(ValueError, match=r"^logits row 0 contains NaN after logits_processors\[1\] "
                                         r"\(function nan_token_1\) "):
        run(logits_processors=[P.TopP(1.0), nan_token_1, P.TopP(1.0)])

    # +inf masked afterwards: the row is left with no entry, which is no error (no extension)
    assert run(logits_processors=[inf_token_0, mask_all]) == [[]]


