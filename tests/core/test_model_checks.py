"""Mistakes a new user makes, each answered by a clear error naming the parameter (SPEC section 7).

Length penalties so large that scores overflow, step functions that return the wrong thing, an
``init_state`` with the wrong number of rows; and integer logits, which are accepted as float64.
(tests/core/test_validate.py covers the argument checks that predate these.)
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from beamsearch import beam_search, beam_search_batch, greedy_decode
from models import PrefixModel, SequenceModel, object_rows, random_table

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None

V = 4


def never_called(state, y_prev):
    raise AssertionError("the model must not be called for invalid arguments")


def uniform_step(state, y_prev):
    """A well-behaved model that passes any state through: logits for exactly the rows asked."""
    return np.zeros((len(y_prev), V)), state


# ---- length penalties that overflow ------------------------------------------------------------

@pytest.mark.parametrize("alpha", [float("inf"), 1e308])
@pytest.mark.parametrize("length_penalty", ["gnmt", "power"])
def test_batch_alpha_that_overflows(alpha, length_penalty):
    model = SequenceModel(random_table(V, 0))
    with pytest.raises(ValueError, match="alpha"):
        beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                          beam_size=2, alpha=alpha, length_penalty=length_penalty)


def test_batch_infinite_alpha_before_any_call():
    with pytest.raises(ValueError, match="alpha"):
        beam_search_batch(never_called, np.zeros(1), [[1]], eos_token_id=0, max_steps=3, beam_size=2,
                          alpha=float("inf"))


def test_batch_alpha_whose_penalty_overflows_at_max_steps():
    # ((5 + 3) / 6) ** 5000 = exp(1438) overflows to inf: every score would be -0.0
    model = SequenceModel(random_table(V, 0))
    with pytest.raises(ValueError, match="alpha"):
        beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                          beam_size=2, alpha=5000.0)


def test_large_finite_alpha_is_fine():
    model = SequenceModel(random_table(V, 0, eos=0, eos_shift=1.0))
    out = beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                            beam_size=2, alpha=10.0)
    assert len(out[0]) == 1 and out[0][0].score < 0


@pytest.mark.parametrize("length_penalty", [float("inf"), 1e308])
def test_beam_search_length_penalty_that_overflows(length_penalty):
    model = PrefixModel(random_table(V, 0))
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(model.step, model.init_state(), 1, 0, 2, 3, length_penalty=length_penalty)


def test_beam_search_infinite_length_penalty_before_any_call():
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(never_called, np.zeros(1), 1, 0, 2, 3, length_penalty=float("inf"))


# ---- step functions that return the wrong thing -------------------------------------------------

def logits_only(state, y_prev):
    return np.zeros((len(y_prev), V))


def returns_none(state, y_prev):
    return None


def swapped_none(state, y_prev):
    return None, np.zeros((len(y_prev), V))


def swapped_dict(state, y_prev):
    return {"h": np.zeros((len(y_prev), 2))}, np.zeros((len(y_prev), V))


def swapped_object_rows(state, y_prev):
    return object_rows([(int(t),) for t in y_prev]), np.zeros((len(y_prev), V))


def torch_logits_only(state, y_prev):
    return torch.zeros((len(y_prev), V), dtype=torch.float64)


BAD_STEPS = [
    pytest.param(logits_only, r"ndarray|array|shape|tuple", id="logits_only"),
    pytest.param(returns_none, "None", id="returns_none"),
    pytest.param(swapped_none, "None", id="swapped_none"),
    pytest.param(swapped_dict, r"dict|\{", id="swapped_dict"),
    pytest.param(swapped_object_rows, r"object|ndarray|array|shape|dtype", id="swapped_object_rows"),
] + ([pytest.param(torch_logits_only, r"Tensor|tensor|shape|tuple", id="torch_logits_only")]
     if torch is not None else [])


def check_step_error(call, got):
    with pytest.raises((TypeError, ValueError), match="step_fn") as info:
        call()
    message = str(info.value)
    assert re.search(got, message), f"the message should say what step_fn returned: {message!r}"


@pytest.mark.parametrize("step, got", BAD_STEPS)
def test_beam_search_bad_step_return(step, got):
    check_step_error(lambda: beam_search(step, np.zeros(1), 1, 0, 2, 3), got)


@pytest.mark.parametrize("step, got", BAD_STEPS)
def test_greedy_bad_step_return(step, got):
    check_step_error(lambda: greedy_decode(step, np.zeros(1), 1, 0, 3), got)


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("step, got", BAD_STEPS)
def test_batch_bad_step_return(step, got, n):
    # with two prompts, a [2, V] array returned alone would unpack into two rows: still refused
    prompts = [[1]] * n
    check_step_error(lambda: beam_search_batch(step, np.zeros(n), prompts, eos_token_id=0, max_steps=3,
                                               beam_size=2), got)


def test_bad_step_return_after_good_calls():
    calls = []

    def step(state, y_prev):
        calls.append(len(y_prev))
        logits = np.array([[0.0, 2.0, 1.0, 0.5]] * len(y_prev))
        return (logits, state) if len(calls) == 1 else logits

    check_step_error(lambda: beam_search_batch(step, np.zeros(1), [[1]], eos_token_id=0, max_steps=3,
                                               beam_size=2), r"ndarray|array|shape|tuple")
    assert len(calls) == 2


# ---- init_state with the wrong number of rows --------------------------------------------------

def check_rows_error(call, wrong, right):
    with pytest.raises(ValueError, match="init_state") as info:
        call()
    message = str(info.value)
    assert re.search(rf"\b{wrong}\b", message) and re.search(rf"\b{right}\b", message), \
        f"the message should give both row counts ({wrong} and {right}): {message!r}"


def state_variants(rows: int, right: int):
    yield np.zeros((rows, 5))
    yield {"h": np.zeros((rows, 5)), "step": 0}
    yield (np.zeros((right, 2)), [np.zeros((rows,))])  # one good leaf, one bad
    if torch is not None:
        yield {"kv": (torch.zeros(rows, 2, 3), torch.zeros(rows, 2, 3))}


@pytest.mark.parametrize("dtype", ["bool", "complex128"]
                         + (["torch.bool", "torch.complex64"] if torch is not None else []))
def test_logits_of_a_dtype_that_is_not_numbers_are_named_so(dtype):
    """Logits of bool or complex dtype are refused saying the dtype (they were taken for a swapped
    pair); with a real array beside them, the message asks too whether the pair is swapped."""
    rows = (torch.zeros((1, V), dtype=getattr(torch, dtype.split(".")[1])) if dtype.startswith("torch.")
            else np.zeros((1, V), dtype=dtype))
    want = (rf"^step_fn returned logits (ndarray|Tensor) of shape \(1, {V}\) of dtype {re.escape(dtype)}; expected a "
            r"real-valued array \[k, V\] \(floats or integers\)$")
    with pytest.raises(TypeError, match=want):
        beam_search_batch(lambda state, y_prev: (rows, state), [None], [[1]], eos_token_id=0, max_steps=2, beam_size=2)
    # a real array beside them: maybe the pair is swapped (a bool state returned first), so that is asked too
    with pytest.raises(TypeError,
                       match=want[:-1] + rf"; or is the pair swapped\? the second is ndarray of shape \(1, {V}\)$"):
        beam_search_batch(lambda state, y_prev: (rows, np.zeros((1, V))), [None], [[1]], eos_token_id=0, max_steps=2,
                          beam_size=2)


def test_batch_init_state_rows():
    for state in state_variants(3, 2):
        check_rows_error(lambda state=state: beam_search_batch(uniform_step, state, [[1], [2]], eos_token_id=0,
                                                               max_steps=3, beam_size=2), 3, 2)
    for state in state_variants(1, 2):
        check_rows_error(lambda state=state: beam_search_batch(uniform_step, state, [[1], [2]], eos_token_id=0,
                                                               max_steps=3, beam_size=2), 1, 2)


def test_beam_search_init_state_must_have_one_row():
    for state in state_variants(2, 1):
        check_rows_error(lambda state=state: beam_search(uniform_step, state, 1, 0, 2, 3), 2, 1)


def test_greedy_init_state_must_have_one_row():
    for state in state_variants(2, 1):
        check_rows_error(lambda state=state: greedy_decode(uniform_step, state, 1, 0, 3), 2, 1)


def test_states_without_row_leaves_are_fine():
    # no array leaf (None, scalars, 0-d arrays) says nothing about rows
    for state in (None, {"t": 0, "name": "x"}, np.float64(1.0), np.array(2.0)):
        out = beam_search_batch(uniform_step, state, [[1], [2]], eos_token_id=0, max_steps=2, beam_size=2)
        assert len(out) == 2


# ---- integer logits ------------------------------------------------------------------------------

INT_TYPES = [("numpy", np.int64), ("numpy", np.int32)] + ([("torch", np.int64)] if torch is not None else [])


@pytest.mark.parametrize("backend, dtype", INT_TYPES)
def test_integer_logits_equal_float64(backend, dtype):
    for seed in range(4):
        table = random_table(5, seed, levels=2, eos=0, eos_shift=1.0)  # integer values, ties
        float_model = PrefixModel(table, backend=backend)
        int_model = PrefixModel(table, backend=backend, dtype=dtype)
        assert beam_search(int_model.step, int_model.init_state(), 1, 0, 3, 4) == \
            beam_search(float_model.step, float_model.init_state(), 1, 0, 3, 4)
        assert greedy_decode(int_model.step, int_model.init_state(), 1, 0, 4) == \
            greedy_decode(float_model.step, float_model.init_state(), 1, 0, 4)
        prompts = [[1], [2, 3], [4]]
        kw = dict(eos_token_id=0, max_steps=4, beam_size=3, n_best=2, temperature=0.5, top_k=3,
                  no_repeat_ngram_size=2)
        int_model = SequenceModel(table, backend=backend, dtype=dtype)
        float_model = SequenceModel(table, backend=backend)
        got = beam_search_batch(int_model.step, int_model.init_state(prompts), prompts, **kw)
        expected = beam_search_batch(float_model.step, float_model.init_state(prompts), prompts, **kw)
        assert got == expected
        assert all(type(h.logprob) is float for hyps in got for h in hyps)


# ---- a bad bos_token_id is named as the caller gave it (issue 19 item 2) ----------------------------

def _entries():
    """Every public entry that takes prompts, as ``call(model, prompts, **controls)`` for a
    :class:`SequenceModel` (its state is made from the prompts)."""
    from beamsearch import (
        constrained_beam_search,
        diverse_beam_search,
        exact_search,
        score_sequences,
        stochastic_beam_search,
    )
    from beamsearch.refill import decode_stream

    def stream(m, prompts, **kw):
        # decode_stream reports a bad input in its result: raise it, as the batch functions do
        results = sorted(decode_stream(m.step, m.init_state, prompts, max_rows=8, beam_size=2, **kw),
                         key=lambda r: r.index)
        for r in results:
            if r.error is not None:
                raise r.error
        return results

    def batch(search, **own):
        return lambda m, p, **kw: search(m.step, m.init_state(p), p, **own, **kw)

    return {
        "beam_search_batch": batch(beam_search_batch, beam_size=2),
        "score_sequences": lambda m, p, max_steps, **kw: score_sequences(m.step, m.init_state(p), p,
                                                                         [[1]] * len(p), **kw),
        "constrained_beam_search": lambda m, p, **kw: batch(constrained_beam_search, constraints=[[]] * len(p),
                                                            beam_size=2)(m, p, **kw),
        "diverse_beam_search": batch(diverse_beam_search, num_groups=2, diversity_penalty=0.5, beam_size=2),
        "stochastic_beam_search": batch(stochastic_beam_search, k=2, seed=0),
        "exact_search": batch(exact_search),
        "decode_stream": stream,
    }


ENTRIES = sorted(_entries())

# (prompts, bos_token_id, the message), V = 5: written by hand from the issue. An empty prompt
# has no element 0: a bad bos is bos_token_id's; a bad id inside a prompt is still named by its
# place (a stream validates each input alone, so its error, in input 1's result, says prompts[0])
BAD_IDS = [([[], [1, 2]], 5, "bos_token_id must be in [0, V) with V=5; got 5"),
           ([[], [1, 7]], 2, "prompts[1][1] must be in [0, V) with V=5; got 7")]


@pytest.mark.parametrize("prompts, bos, message", BAD_IDS, ids=["bos", "inside"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_bad_id_is_named_as_the_caller_gave_it(entry, prompts, bos, message):
    model = SequenceModel(random_table(5, 3))
    with pytest.raises(ValueError) as info:
        _entries()[entry](model, prompts, eos_token_id=4, bos_token_id=bos, max_steps=2)
    if entry == "decode_stream":  # the other input goes on: only the message is the point here
        message = message.replace("prompts[1]", "prompts[0]")
    else:
        assert len(model.calls) == 1  # the check runs at the first call, before any selection
    assert str(info.value) == message


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_good_bos_still_stands_in_for_the_empty_prompt(entry):
    # the model's first call gets bos as the empty prompt's y_prev (SequenceModel records prompt + y_prev)
    model = SequenceModel(random_table(5, 3))
    _entries()[entry](model, [[], [1, 2]], eos_token_id=4, bos_token_id=3, max_steps=1)
    assert sorted(model.calls[0]) == [(1, 2), (3,)]


# ---- large integers: a ValueError naming the parameter, not numpy's OverflowError (issue 20 item 5) ----

HUGE = 2**63


def _calls_with(name: str, value: int):
    """``(entry, thunk)`` pairs passing ``name=value`` to the function that takes it."""
    from beamsearch import diverse_beam_search, exact_search, stochastic_beam_search

    batch = dict(eos_token_id=0, max_steps=3, beam_size=2)
    batch_keys = {"beam_size", "n_best", "max_steps", "top_k", "no_repeat_ngram_size", "min_new_tokens",
                  "eos_token_id", "bos_token_id", "pad_token_id", "trace_width"}
    if name in batch_keys:
        kw = dict(batch, **{name: value})
        return lambda: beam_search_batch(never_called, np.zeros(1), [[1]], **kw)
    if name in ("prompts", "stop_sequences", "prefix"):
        prompts = [[1, value]] if name == "prompts" else [[1]]
        extra = {} if name == "prompts" else {name: [[value]]}
        return lambda: beam_search_batch(never_called, np.zeros(1), prompts, **batch, **extra)
    if name == "num_groups":
        return lambda: diverse_beam_search(never_called, np.zeros(1), [[1]], num_groups=value, diversity_penalty=0.5,
                                           eos_token_id=0, max_steps=3, beam_size=2)
    if name in ("k", "seed"):
        kw = {"k": 2, "seed": 0, name: value}
        return lambda: stochastic_beam_search(never_called, np.zeros(1), [[1]], eos_token_id=0, max_steps=3, **kw)
    if name in ("node_budget", "batch_rows", "seed_beam"):
        return lambda: exact_search(never_called, np.zeros(1), [[1]], eos_token_id=0, max_steps=3, **{name: value})
    if name in ("bos", "eos", "max_len", "beam_search.beam_size"):
        args = dict(bos=1, eos=0, beam_size=2, max_len=3)
        args[name.split(".")[-1]] = value
        return lambda: beam_search(never_called, np.zeros(1), **args)
    raise AssertionError(name)


SIZES = ["beam_size", "n_best", "max_steps", "top_k", "no_repeat_ngram_size", "min_new_tokens", "trace_width",
         "num_groups", "k", "node_budget", "batch_rows", "seed_beam", "max_len", "beam_search.beam_size"]
IDS = {"eos_token_id": "eos_token_id", "bos_token_id": "bos_token_id", "prompts": r"prompts\[0\]\[1\]",
       "stop_sequences": r"stop_sequences\[0\]\[0\]", "prefix": r"prefix\[0\]\[0\]", "bos": "bos", "eos": "eos"}


@pytest.mark.parametrize("name", SIZES)
def test_a_size_of_2_to_the_63_is_a_value_error_naming_it(name):
    shown = name.split(".")[-1]
    with pytest.raises(ValueError, match=rf"^{shown} must be <= 2\*\*62 \(sizes are counted in int64\); got {HUGE}$"):
        _calls_with(name, HUGE)()


@pytest.mark.parametrize("name", sorted(IDS))
def test_a_token_id_of_2_to_the_63_is_a_value_error_naming_it(name):
    # no V is above 2**63 - 1 (the most columns an array has), so it is refused before the model runs
    with pytest.raises(ValueError, match=rf"^{IDS[name]} must be in \[0, V\); got {HUGE}, and no V is larger"):
        _calls_with(name, HUGE)()


def test_a_pad_id_and_seeds_beyond_int64_are_value_errors_naming_them():
    with pytest.raises(ValueError, match=rf"^pad_token_id must fit in int64, in \[-2\*\*63, 2\*\*63\); got {HUGE}$"):
        _calls_with("pad_token_id", HUGE)()
    with pytest.raises(ValueError, match=rf"^seed must be < 2\*\*63; got {HUGE}$"):
        _calls_with("seed", HUGE)()


# what the sizes at the bound still do, each against brute-force enumeration (tests/oracles/controls.py)
BOUND = 2**62


def _ends_by_3(prefix: tuple) -> np.ndarray:
    """V = 3, eos 0, over prompt + generated tokens (prompt [1]): random logits for two tokens,
    then eos only (so every search ends by step 3)."""
    row = random_table(3, 11)(prefix)
    if len(prefix) >= 3:
        row = np.where(np.arange(3) == 0, row, -np.inf)
    return row


def _best_finished(**kw):
    from oracles.controls import brute_force

    return brute_force(_ends_by_3, [1], 3, eos=0, max_steps=3, **kw)[0]


@pytest.mark.parametrize("kwargs, oracle", [
    (dict(beam_size=BOUND), {}),  # an exhaustive beam: the best finished output
    (dict(max_steps=BOUND), {}),  # the model ends every output by step 3
    (dict(top_k=BOUND), {}),  # k >= V keeps every token
    (dict(no_repeat_ngram_size=BOUND), {}),  # no row holds that many tokens: nothing is blocked
    (dict(trace_width=BOUND, callback=lambda record: None), {}),
])
def test_sizes_at_the_bound_still_work(kwargs, oracle):
    model = SequenceModel(_ends_by_3)
    args = dict(eos_token_id=0, max_steps=3, beam_size=9) | kwargs
    best = beam_search_batch(model.step, model.init_state([[1]]), [[1]], **args)[0][0]
    tokens, logprob, score = _best_finished(**oracle)
    assert tuple(best.tokens) == tokens and best.finished
    assert abs(best.logprob - logprob) < 1e-9 and abs(best.score - score) < 1e-9


@pytest.mark.parametrize("kwargs", [dict(node_budget=BOUND), dict(batch_rows=BOUND), dict(seed_beam=BOUND),
                                    dict(max_steps=BOUND)])
def test_exact_search_sizes_at_the_bound_still_work(kwargs):
    from beamsearch import exact_search

    model = SequenceModel(_ends_by_3)
    results = exact_search(model.step, model.init_state([[1]]), [[1]], **(dict(eos_token_id=0, max_steps=3) | kwargs))
    tokens, logprob, _ = _best_finished()
    assert tuple(results[0][0].tokens) == tokens and abs(results[0][0].logprob - logprob) < 1e-9
    assert results.proven.tolist() == [True]


def test_ids_and_seeds_at_their_bounds_still_work():
    from beamsearch import stochastic_beam_search

    model = SequenceModel(_ends_by_3)
    # all 7 outputs (1 + 2 + 4 by length), padded to 3 tokens with the largest int64
    out = beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3, beam_size=9,
                            n_best=7, pad_token_id=2**63 - 1)
    tokens = out.arrays().tokens[0]
    assert sorted(len(h.tokens) for h in out[0]) == [1, 2, 2, 3, 3, 3, 3]
    assert all(tokens[j, len(h.tokens):].tolist() == [2**63 - 1] * (3 - len(h.tokens)) for j, h in enumerate(out[0]))
    a = stochastic_beam_search(model.step, model.init_state([[1]]), [[1]], k=2, eos_token_id=0, max_steps=3,
                               seed=2**63 - 1)
    b = stochastic_beam_search(model.step, model.init_state([[1]]), [[1]], k=2, eos_token_id=0, max_steps=3,
                               seed=[2**63 - 1])
    assert len(a[0]) == 2 and len(b[0]) == 2  # every output ends by step 3: at least 2 exist


# ---- modes refuse what they do not take, in their own words (issue 19 item 7) -------------------

# What each mode does not take of beam_search_batch's keywords (docs/CONTRACT.md section 11)
REFUSED = {
    "beam_search_batch": set(),
    "constrained_beam_search": {"early_stop"},
    "diverse_beam_search": set(),
    "stochastic_beam_search": {"alpha", "length_penalty", "prefix", "beam_size", "n_best", "early_stop"},
    "exact_search": {"beam_size", "early_stop", "return_token_logprobs", "callback", "trace", "trace_width"},
    "transformers_beam_search": {"temperature", "top_k", "early_stop"},
}


def _mode(name: str):
    """``call(step, state, prompts, **kw)`` with the mode's own required arguments."""
    import beamsearch

    own = {"constrained_beam_search": dict(constraints=[[[2]]]), "diverse_beam_search": dict(
        num_groups=1, diversity_penalty=0.5), "stochastic_beam_search": dict(k=2, seed=0)}.get(name, {})
    return lambda step, state, prompts, **kw: getattr(beamsearch, name)(step, state, prompts, **own, **kw)


def _a_value_of(keyword: str):
    """A valid, non-default value of each keyword of beam_search_batch (V = 4, eos 3)."""
    from beamsearch import Trace

    return {"eos_token_id": 3, "max_steps": 3, "beam_size": 2, "n_best": 2, "alpha": 1.0, "no_repeat_ngram_size": 2,
            "temperature": 0.9, "top_k": 3, "bos_token_id": 1, "pad_token_id": 0, "early_stop": False,
            "length_penalty": "power", "logits_processors": [lambda x, ctx: x], "return_token_logprobs": True,
            "min_new_tokens": 1, "stop_sequences": [[2, 2]], "prefix": [[1]], "callback": lambda record: None,
            "trace": Trace(), "trace_width": 2}[keyword]


def _batch_keywords() -> list[str]:
    import inspect

    return [p.name for p in inspect.signature(beam_search_batch).parameters.values() if p.kind is p.KEYWORD_ONLY]


PAIRS = [(mode, kw) for mode in sorted(REFUSED) for kw in _batch_keywords()]


@pytest.mark.parametrize("mode, keyword", PAIRS, ids=[f"{m}-{k}" for m, k in PAIRS])
def test_every_mode_takes_or_refuses_each_keyword_of_beam_search_batch(mode, keyword):
    model = SequenceModel(random_table(4, 5, eos=3))
    call = _mode(mode)
    base = dict(eos_token_id=3, max_steps=3) | ({} if "beam_size" in REFUSED[mode] or mode == "exact_search"
                                                 else dict(beam_size=2))
    kwargs = base | {keyword: _a_value_of(keyword)}
    if keyword in REFUSED[mode]:
        with pytest.raises(TypeError) as info:
            call(model.step, model.init_state([[1]]), [[1]], **kwargs)
        assert str(info.value).startswith(f"{mode} does not take {keyword} ("), str(info.value)
        assert model.calls == []
    else:  # taken: the search runs with it
        results = call(model.step, model.init_state([[1]]), [[1]], **kwargs)
        assert len(results) == 1 and model.calls


@pytest.mark.parametrize("mode", sorted(REFUSED))
def test_an_unknown_keyword_names_the_mode(mode):
    base = {} if mode in ("stochastic_beam_search", "exact_search") else dict(beam_size=2)
    with pytest.raises(TypeError, match=rf"^{mode}\(\) got an unexpected keyword argument 'beam_sizee'$"):
        _mode(mode)(never_called, np.zeros(1), [[1]], eos_token_id=3, max_steps=3, beam_sizee=2, **base)
    if mode != "beam_search_batch":  # its own signature requires them: Python's message names it
        with pytest.raises(TypeError, match=rf"^{mode}\(\) missing required keyword argument 'max_steps'$"):
            _mode(mode)(never_called, np.zeros(1), [[1]], eos_token_id=3, **base)
        with pytest.raises(TypeError, match=rf"^{mode}\(\) missing required keyword argument 'eos_token_id'$"):
            _mode(mode)(never_called, np.zeros(1), [[1]], max_steps=3, **base)


def test_stochastic_search_does_not_take_the_plans_positions():
    from beamsearch import stochastic_beam_search

    with pytest.raises(TypeError, match=r"^stochastic_beam_search\(\) got an unexpected keyword argument 'positions'"):
        stochastic_beam_search(never_called, np.zeros(1), [[1]], k=2, eos_token_id=3, max_steps=3, positions=[4])


@pytest.mark.parametrize("mode, keyword", [("beam", "k"), ("stochastic", "beam_size"), ("constrained", "early_stop")])
def test_a_stream_names_the_mode_function_whose_keywords_it_takes(mode, keyword):
    from beamsearch.refill import decode_stream

    names = {"beam": "beam_search_batch", "stochastic": "stochastic_beam_search",
             "constrained": "constrained_beam_search"}
    base = dict(k=2) if mode == "stochastic" else dict(beam_size=2)
    with pytest.raises(TypeError, match=rf"^{names[mode]}(\(\) got an unexpected keyword| does not take {keyword} )"):
        decode_stream(never_called, lambda items: None, [[1]], max_rows=4, mode=mode, eos_token_id=3, max_steps=3,
                      **base, **{keyword: _a_value_of(keyword) if keyword != "k" else 2})
