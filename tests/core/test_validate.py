"""Bad input: ValueError / TypeError naming the parameter and the value (SPEC section 7)."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch import beam_search, beam_search_batch, greedy_decode
from models import PrefixModel, random_table


def never_called(state, y_prev):
    raise AssertionError("the model must not be called for invalid arguments")


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        (dict(beam_size=0), ValueError, "^beam_size .*0"),
        (dict(beam_size=-2), ValueError, "^beam_size .*-2"),
        (dict(max_len=0), ValueError, "^max_len .*0"),
        (dict(length_penalty=-0.5), ValueError, "^length_penalty .*-0.5"),
        (dict(length_penalty=float("nan")), ValueError, "^length_penalty .*nan"),
        (dict(beam_size=2.0), TypeError, "^beam_size .*2.0"),
        (dict(beam_size=True), TypeError, "^beam_size .*True"),
        (dict(max_len=None), TypeError, "^max_len .*None"),
        (dict(eos="0"), TypeError, "^eos .*'0'"),
        (dict(bos=1.5), TypeError, "^bos .*1.5"),
        (dict(eos=-1), ValueError, "^eos .*-1"),
        (dict(length_penalty="1"), TypeError, "length_penalty"),
    ],
)
def test_beam_search_arguments(kwargs, error, pattern):
    args = dict(bos=0, eos=0, beam_size=2, max_len=3, length_penalty=1.0) | kwargs
    with pytest.raises(error, match=pattern):
        beam_search(never_called, np.zeros(1), **args)


def test_numpy_integers_are_accepted():
    model = PrefixModel(random_table(3, 0))
    out = beam_search(model.step, model.init_state(), np.int64(0), np.int32(0), np.int16(2), np.uint8(2))
    assert len(out) >= 1


def test_greedy_arguments():
    with pytest.raises(ValueError, match="max_len.*0"):
        greedy_decode(never_called, None, 0, 0, 0)


def test_token_ids_outside_vocabulary():
    model = PrefixModel(random_table(3, 0))
    with pytest.raises(ValueError, match=r"^eos must be in \[0, V\) with V=3; got 3"):
        beam_search(model.step, model.init_state(), 0, 3, 2, 3)
    with pytest.raises(ValueError, match=r"^bos must be in \[0, V\) with V=3; got 7"):
        beam_search(model.step, model.init_state(), 7, 0, 2, 3)


def fixed(logits_per_call):
    calls = iter(logits_per_call)

    def step(state, y_prev):
        return next(calls), state

    return step


@pytest.mark.parametrize(
    "logits, pattern",
    [
        ([np.zeros(3)], r"2-D.*\(3,\)"),
        ([np.zeros((1, 3, 1))], r"2-D.*\(1, 3, 1\)"),
        ([np.zeros((2, 3))], r"k=1.*\(2, 3\)"),
        ([np.array([[0.0, np.nan, 1.0]])], "row 0 contains NaN"),
        ([np.array([[-np.inf, -np.inf]])], "row 0 has no finite entry"),
        ([np.array([[np.inf, 0.0]])], r"row 0 contains \+inf"),
        ([np.zeros((1, 3)), np.zeros((2, 4))], r"V changed.*was 3.*\(2, 4\)"),
        ([np.zeros((1, 0))], "V >= 1"),
    ],
)
def test_bad_logits(logits, pattern):
    with pytest.raises(ValueError, match=pattern):
        beam_search(fixed(logits), np.zeros(1), 0, 0, 3, 3)


def test_bad_logits_row_is_named():
    calls = [np.zeros((1, 3)), np.array([[0.0, 1.0, 2.0], [0.0, np.nan, 1.0]])]
    with pytest.raises(ValueError, match="row 1 contains NaN"):
        beam_search(fixed(calls), np.zeros(1), 1, 0, 3, 3)


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        (dict(beam_size=0), ValueError, "^beam_size .*0"),
        (dict(max_steps=0), ValueError, "^max_steps .*0"),
        (dict(n_best=0), ValueError, "^n_best .*0"),
        (dict(n_best=3), ValueError, "^n_best .*beam_size=2.*3"),
        (dict(alpha=-1.0), ValueError, "^alpha .*-1.0"),
        (dict(alpha=float("nan")), ValueError, "^alpha .*nan"),
        (dict(temperature=0.0), ValueError, "^temperature .*0.0"),
        (dict(temperature=-1.0), ValueError, "^temperature .*-1.0"),
        (dict(temperature=float("nan")), ValueError, "^temperature .*nan"),
        (dict(top_k=0), ValueError, "^top_k .*0"),
        (dict(no_repeat_ngram_size=-1), ValueError, "^no_repeat_ngram_size .*-1"),
        (dict(eos_token_id=None), TypeError, "^eos_token_id .*None"),
        (dict(eos_token_id=1.0), TypeError, "^eos_token_id .*1.0"),
        (dict(top_k=2.5), TypeError, "^top_k .*2.5"),
        (dict(bos_token_id="a"), TypeError, "^bos_token_id .*'a'"),
        (dict(prompts=[[]]), ValueError, r"prompts\[0\] is empty and bos_token_id is None"),
        (dict(prompts=[[1], [2, "x"]]), TypeError, r"prompts\[1\]\[1\].*'x'"),
        (dict(prompts=[[1], [-3]]), ValueError, r"prompts\[1\]\[0\].*-3"),
        (dict(prompts="abc"), TypeError, "prompts"),
        (dict(length_penalty="wu"), ValueError, "^length_penalty .*'wu'"),
        (dict(early_stop=None), TypeError, "^early_stop .*None"),
        (dict(logits_processors=[3]), TypeError, r"logits_processors\[0\].*3"),
    ],
)
def test_beam_search_batch_arguments(kwargs, error, pattern):
    args = dict(prompts=[[1]], eos_token_id=0, max_steps=3, beam_size=2) | kwargs
    prompts = args.pop("prompts")
    with pytest.raises(error, match=pattern):
        beam_search_batch(never_called, np.zeros(1), prompts, **args)


def test_batch_token_ids_outside_vocabulary():
    model = PrefixModel(random_table(3, 0))
    with pytest.raises(ValueError, match=r"^eos_token_id must be in \[0, V\) with V=3; got 5"):
        beam_search_batch(model.step, model.init_state(), [[0]], eos_token_id=5, max_steps=2, beam_size=2)
    with pytest.raises(ValueError, match=r"prompts\[0\]\[1\].*V=3.*got 4"):
        beam_search_batch(model.step, model.init_state(), [[0, 4]], eos_token_id=0, max_steps=2, beam_size=2)


def test_no_inputs_makes_no_call():
    assert beam_search_batch(never_called, None, [], eos_token_id=0, max_steps=2, beam_size=2) == []


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_processor_faults_are_named_and_emptied_rows_are_not():
    model = PrefixModel(random_table(3, 0))

    def nan_row_1(logits, ctx):
        logits[ctx.row_input == 1, 0] = np.nan
        return logits

    with pytest.raises(ValueError, match=r"row 1 contains NaN after logits_processors\[0\] \(function "
                                         r"test_processor_faults_are_named_and_emptied_rows_are_not"
                                         r".<locals>.nan_row_1\) "):
        beam_search_batch(model.step, model.init_state(2), [[0], [0]], eos_token_id=0, max_steps=2,
                          beam_size=2, logits_processors=[nan_row_1])
    huge = PrefixModel(lambda prefix: np.array([1e308, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"row 0 contains \+inf after temperature=0.5 "):
        beam_search_batch(huge.step, huge.init_state(1), [[0]], eos_token_id=0, max_steps=2, beam_size=2,
                          temperature=0.5)


class _Named:
    """A processor that records the rows it is given and applies ``fn`` (its repr: ``name``)."""

    def __init__(self, name, fn):
        self.name, self.fn, self.calls = name, fn, []

    def __repr__(self):
        return self.name

    def __call__(self, logits, ctx):
        self.calls.append(ctx.row_input.tolist())
        return self.fn(logits, ctx)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_flagged_rows_are_reprocessed_together_and_the_first_fault_in_order_is_named():
    from beamsearch.backends import backend_of
    from beamsearch.core.model_checks import bad_rows
    from beamsearch.processors import StepContext

    raw = np.arange(20, dtype=np.float64).reshape(5, 4)  # every row valid as the model returns it

    def empty_0_and_2(x, ctx):  # rows of inputs 0 and 2 (row i is input i here) lose every token
        x[np.isin(ctx.row_input, [0, 2])] = -np.inf
        return x

    def nan_in_3(x, ctx):
        x[ctx.row_input == 3, 1] = np.nan
        return x

    def run(raw, rows):
        first, second = _Named("empties", empty_0_and_2), _Named("nan-maker", nan_in_3)
        ctx = StepContext(1, np.zeros((5, 0), np.int64), np.arange(5), backend_of(raw))
        bad_rows(backend_of(raw), raw, np.array(rows), [first, second], ctx)
        return first.calls, second.calls

    # rows emptied by processing: no error; the flagged rows went through each processor once, together
    assert run(raw, [0, 2]) == ([[0, 2]], [[0, 2]])
    # a row made NaN: named with the processor that did it, though an emptied row comes first
    with pytest.raises(ValueError, match=r"^logits row 3 contains NaN after nan-maker \(logits shape \(5, 4\)\)$"):
        run(raw, [0, 2, 3])
    # the first faulty row in order is the one named: row 2 as the model returned it (+inf, so no
    # processor is blamed), before row 3's processed NaN
    model_inf = raw.copy()
    model_inf[2, 3] = np.inf
    with pytest.raises(ValueError, match=r"^logits row 2 contains \+inf \(logits shape \(5, 4\)\)$"):
        run(model_inf, [0, 2, 3])
    # a row the model returned with no finite entry
    model_empty = raw.copy()
    model_empty[4] = -np.inf
    with pytest.raises(ValueError, match=r"^logits row 4 has no finite entry \(logits shape \(5, 4\)\)$"):
        run(model_empty, [0, 4])


@pytest.mark.parametrize("kind", ["numpy int64", "torch int64", "torch bfloat16", "torch float16"])
def test_rows_a_processor_empties_die_whatever_the_logits_dtype(kind):
    """Logits of an integer or a low-precision dtype (read as float64 / float32 by the search): a
    processor that leaves rows no finite entry kills them exactly as with float64 logits of the
    same values (small integers, exact in every dtype here); the flagged rows are re-processed in
    the dtype the search processed them in (an int array cannot hold -inf)."""
    torch = pytest.importorskip("torch") if kind.startswith("torch") else None
    table = np.arange(16).reshape(4, 4) * 7 % 5  # row: the previous token's logits, integers 0..4

    def step_of(dtype):
        def step(state, y_prev):
            rows = table[np.asarray(y_prev.tolist() if hasattr(y_prev, "tolist") else y_prev)]
            if dtype is None:
                return rows.astype(np.float64), state
            if torch is None:
                return rows.astype(dtype), state
            return torch.tensor(rows.tolist(), dtype=getattr(torch, dtype)), state
        return step

    def empty_input_1(logits, ctx):  # input 1's rows lose every token from step 2
        logits[(ctx.row_input == 1) & (ctx.step >= 2)] = -np.inf
        return logits

    def run(dtype):
        return beam_search_batch(step_of(dtype), np.zeros((2, 1)), [[1], [2]], eos_token_id=0, max_steps=3,
                                 beam_size=2, n_best=2, logits_processors=[empty_input_1])

    want, got = run(None), run(np.int64 if torch is None else kind.split()[1])
    assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in want]
    assert [[h.logprob for h in r] for r in got] == [[pytest.approx(h.logprob, abs=1e-5) for h in r] for r in want]
    assert all(len(h.tokens) == 1 for h in want[1])  # input 1 ended at step 1
