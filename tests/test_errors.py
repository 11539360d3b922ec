"""Mistakes a new user makes, each answered by a clear error naming the parameter (SPEC section 7).

Length penalties so large that scores overflow, step functions that return the wrong thing, an
``init_state`` with the wrong number of rows; and integer logits, which are accepted as float64.
(test_validation.py covers the argument checks that predate these.)
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


def test_batch_init_state_rows():
    for state in state_variants(3, 2):
        check_rows_error(lambda: beam_search_batch(uniform_step, state, [[1], [2]], eos_token_id=0,
                                                   max_steps=3, beam_size=2), 3, 2)
    for state in state_variants(1, 2):
        check_rows_error(lambda: beam_search_batch(uniform_step, state, [[1], [2]], eos_token_id=0,
                                                   max_steps=3, beam_size=2), 1, 2)


def test_beam_search_init_state_must_have_one_row():
    for state in state_variants(2, 1):
        check_rows_error(lambda: beam_search(uniform_step, state, 1, 0, 2, 3), 2, 1)


def test_greedy_init_state_must_have_one_row():
    for state in state_variants(2, 1):
        check_rows_error(lambda: greedy_decode(uniform_step, state, 1, 0, 3), 2, 1)


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
