"""Refill (continuous batching): decode_stream, concat_state and pad_axis.

The oracle of every stream is each input decoded alone by its mode's batch function (whose own
oracles are brute force and plain reference loops, tests/strategies/test_batch.py and the modes' tests), and
for plain beam search the plain one-hypothesis-at-a-time reference loop of tests/models.py as well.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

from beamsearch import (
    AnyOf,
    beam_search_batch,
    constrained_beam_search,
    diverse_beam_search,
    stochastic_beam_search,
    transformers_beam_search,
)
from beamsearch.core.state import concat_state, pad_axis, select_state
from beamsearch.modes.beam import greedy_search
from beamsearch.processors import RepetitionPenalty
from beamsearch.refill import decode_stream
from models import SequenceModel, random_table, reference_batch, row_cache_type

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]

V, EOS = 6, 5
# A prompt is [c, x]: class c in 0..4 sets the output length the model steers to (eos is very
# unlikely before it and ever likelier after it), so outputs run from 1 to about 13 tokens.
TARGET = {0: 1, 1: 2, 2: 4, 3: 9, 4: 13}
MAX_STEPS = 14


def length_table(seed: int):
    base = random_table(V, seed)

    def table(seq: tuple) -> np.ndarray:
        row = np.array(base(seq), dtype=np.float64)
        gen = len(seq) - 2  # tokens generated so far (every prompt has 2 tokens)
        target = TARGET[seq[0]]
        row[EOS] = -4.0 if gen + 1 < target else 3.0 + (gen + 1 - target)
        return row

    return table


TABLE = length_table(7)
PROMPTS = [[c, x] for c, x in zip([3, 0, 4, 1, 2, 0, 4, 1, 3, 2], [1, 2, 0, 3, 4, 0, 2, 1, 1, 3], strict=True)]


def plain(prompts):
    return list(prompts)


def with_prefix_and_limits(prompts):
    items: list[Any] = list(prompts)
    items[1] = {"prompt": prompts[1], "max_steps": 3}
    items[2] = {"prompt": prompts[2], "prefix": [1, 2]}
    items[5] = {"prompt": prompts[5], "prefix": [1], "max_steps": 2}
    items[8] = {"prompt": prompts[8], "max_steps": 6}
    return items


def with_constraints(prompts):
    items: list[Any] = list(prompts)
    items[0] = {"prompt": prompts[0], "constraints": [[1, 2]]}
    items[3] = {"prompt": prompts[3], "constraints": [AnyOf([3], [0, 0]), [4]], "max_steps": 8}
    items[4] = {"prompt": prompts[4], "constraints": [[2]], "prefix": [2]}
    items[7] = {"prompt": prompts[7], "constraints": [[0, 1, 0]]}
    return items


def with_seeds(prompts):
    items: list[Any] = list(prompts)
    items[2] = {"prompt": prompts[2], "seed": 5}
    items[3] = {"prompt": prompts[3], "max_steps": 4}
    items[6] = {"prompt": prompts[6], "seed": 9, "max_steps": 7}
    return items


CONTROLS = dict(min_new_tokens=2, stop_sequences=[[1, 2]], no_repeat_ngram_size=2, temperature=0.8, top_k=4,
                logits_processors=[RepetitionPenalty(1.5)])
CASES = {
    "beam": ("beam", dict(beam_size=3, n_best=2), plain),
    "beam-controls": ("beam", dict(beam_size=3, n_best=2, alpha=0.8, length_penalty="power",
                                   return_token_logprobs=True, **CONTROLS), with_prefix_and_limits),
    "beam-two-eos": ("beam", dict(beam_size=2, eos_token_id=[EOS, 4], early_stop=False), with_prefix_and_limits),
    "diverse": ("diverse", dict(num_groups=2, diversity_penalty=0.7, beam_size=4, n_best=3,
                                no_repeat_ngram_size=3), with_prefix_and_limits),
    "constrained": ("constrained", dict(beam_size=3, n_best=2, temperature=1.2), with_constraints),
    "stochastic": ("stochastic", dict(k=3, seed=11, temperature=0.9, min_new_tokens=1), with_seeds),
    "transformers": ("transformers", dict(beam_size=3, n_best=2, early_stopping="never", no_repeat_ngram_size=2,
                                          min_new_tokens=1, stop_sequences=[[1, 2]]), with_prefix_and_limits),
    "transformers-early": ("transformers", dict(beam_size=2, eos_token_id=[EOS, 4], alpha=0.5), plain),
}
FUNCS = {"beam": beam_search_batch, "diverse": diverse_beam_search, "constrained": constrained_beam_search,
         "stochastic": stochastic_beam_search, "transformers": transformers_beam_search}


def fields(item):
    return dict(item) if isinstance(item, dict) else {"prompt": item}


def kwargs_of(search):
    return {"eos_token_id": EOS, "max_steps": MAX_STEPS, **search}


def alone(mode, items, search, backend, table=TABLE):
    """Oracle: each input decoded alone by its mode's batch function (the stochastic inputs
    without a seed of their own: the whole list at once with the stream's seed)."""
    out = {}
    kw = kwargs_of(search)
    stream_seeded = [i for i, it in enumerate(items) if mode == "stochastic" and "seed" not in fields(it)]
    if stream_seeded:  # their noise is that of stochastic_beam_search(every input, seed=s)
        fs = [fields(it) for it in items]
        model = SequenceModel(table, backend=backend)
        prompts = [f["prompt"] for f in fs]
        res = stochastic_beam_search(model.step, model.init_state(prompts), prompts,
                                     **{**kw, "max_steps": [f.get("max_steps", MAX_STEPS) for f in fs]})
        for i in stream_seeded:
            out[i] = (res[i], res.kappa[i])
    for i, item in enumerate(items):
        if i in out:
            continue
        f = fields(item)
        one = dict(kw, max_steps=[f.get("max_steps", MAX_STEPS)])
        if "prefix" in f:
            one["prefix"] = [f["prefix"]]
        if mode == "constrained":
            one["constraints"] = [f.get("constraints", [])]
        if "seed" in f:
            one["seed"] = [f["seed"]]
        model = SequenceModel(table, backend=backend)
        res = FUNCS[mode](model.step, model.init_state([f["prompt"]]), [f["prompt"]], **one)
        out[i] = (res[0], res.kappa[0] if mode == "stochastic" else None)
    return out


def make_state_for(model):
    return lambda items: model.init_state([fields(it)["prompt"] for it in items])


def stream(mode, items, search, backend, max_rows, table=TABLE, **options):
    model = SequenceModel(table, backend=backend)
    s = decode_stream(model.step, make_state_for(model), items, max_rows=max_rows, mode=mode, **options,
                      **kwargs_of(search))
    results = list(s)
    return results, s.stats, model


ORACLE: dict = {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("budget", ["one", "some", "all"])
def test_refill_equals_each_input_alone(case, budget, backend):
    mode, search, build = CASES[case]
    items = build(PROMPTS)
    key = (case, backend)
    if key not in ORACLE:
        ORACLE[key] = alone(mode, items, search, backend)
    want = ORACLE[key]
    rows = search.get("beam_size", search.get("k"))
    max_rows = {"one": rows, "some": 2 * rows + 1, "all": rows * len(items)}[budget]
    results, stats, model = stream(mode, items, search, backend, max_rows)
    assert sorted(r.index for r in results) == list(range(len(items)))
    for r in results:
        assert r.error is None
        hyps, kappa = want[r.index]
        # tokens, and logprob and score to the last bit: one backend, and the model computes each
        # row alone, so a row's floats do not depend on the cohorts beside it (tests/approx.py)
        assert r.hypotheses == hyps
        assert r.hypotheses  # every input has results
        if mode == "stochastic":
            assert r.info == {"kappa": kappa}
    # the model saw at most max_rows rows per call; the counts are the model's own
    assert max(len(call) for call in model.calls) <= max_rows
    assert stats.calls == len(model.calls) and stats.rows == sum(len(c) for c in model.calls)
    assert stats.inputs == len(items) and stats.errors == 0
    if budget == "one":  # one input at a time: each its own cohort, calls never mixed
        assert stats.cohorts == len(items) and stats.mixed_calls == 0
    elif budget == "some":  # inputs joined mid-search: calls that mix cohorts
        assert stats.cohorts > 2 and stats.mixed_calls > 0
    else:  # everything at once: one cohort (two for stochastic: own seeds and the stream's)
        assert stats.cohorts == (2 if mode == "stochastic" else 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_beam_refill_equals_the_plain_reference_loop(backend):
    # the independent oracle: SPEC section 6 one input and one hypothesis at a time
    table = random_table(5, 21, eos=4, eos_shift=0.5)
    prompts = [[0], [1, 2], [3], [2, 2, 1], [0, 1], [4, 3]] * 2
    kw = dict(beam_size=3, n_best=2, alpha=0.6, no_repeat_ngram_size=2, temperature=0.7, top_k=4)
    model = SequenceModel(table, backend=backend)
    s = decode_stream(model.step, lambda items: model.init_state(items), prompts, max_rows=7, eos_token_id=4,
                      max_steps=6, **kw)
    got = {r.index: r.hypotheses for r in s}
    want = reference_batch(table, prompts, eos=4, max_steps=6, beam=3, n_best=2, alpha=0.6, ngram=2,
                           temperature=0.7, top_k=4)
    assert s.stats.mixed_calls > 0
    for i, ref in enumerate(want):
        assert [tuple(h.tokens) for h in got[i]] == [r[0] for r in ref]
        assert [h.finished for h in got[i]] == [r[3] for r in ref]
        assert [h.logprob for h in got[i]] == pytest.approx([r[1] for r in ref], abs=1e-9)
        assert [h.score for h in got[i]] == pytest.approx([r[2] for r in ref], abs=1e-9)


def test_results_come_out_as_soon_as_each_input_stops():
    # a long input (class 4: about 13 tokens) first, a short one (class 0: 1 token) second: the
    # short one is yielded after its own first step, long before the long one ends
    model = SequenceModel(TABLE)
    s = decode_stream(model.step, make_state_for(model), [[4, 0], [0, 1]], max_rows=6, beam_size=3,
                      eos_token_id=EOS, max_steps=MAX_STEPS)
    calls_at_yield = []
    order = []
    for r in s:
        order.append(r.index)
        calls_at_yield.append(len(model.calls))
    assert order == [1, 0]
    # the short input stopped at its first steps (eos is likely at once), the long one ran on
    assert calls_at_yield[0] <= 2 < calls_at_yield[1]


def test_the_input_iterable_is_read_lazily():
    # one input at a time (max_rows = beam): an item is read only when there is room for it
    model = SequenceModel(TABLE)
    pulled = []

    def items():
        for i, p in enumerate(PROMPTS):
            pulled.append(i)
            yield p

    s = decode_stream(model.step, make_state_for(model), items(), max_rows=3, beam_size=3, eos_token_id=EOS,
                      max_steps=MAX_STEPS)
    assert pulled == []  # nothing read before iteration
    for i, r in enumerate(s):  # item i + 1 is read only once item i is out and consumed
        assert r.index == i and pulled == list(range(i + 1))
    assert pulled == list(range(len(PROMPTS)))


@pytest.mark.parametrize("max_rows", [3, 9])
def test_an_error_of_the_iterable_comes_after_the_inputs_read_before_it(max_rows):
    # a generator that raises after item 4: items 0-4 are decoded and yielded first, then the
    # error is raised (whatever the budget: the inputs in flight are finished first)
    model = SequenceModel(TABLE)

    def items():
        yield from PROMPTS[:5]
        raise RuntimeError("the source broke")

    s = decode_stream(model.step, make_state_for(model), items(), max_rows=max_rows, beam_size=3,
                      eos_token_id=EOS, max_steps=MAX_STEPS)
    got = []
    with pytest.raises(RuntimeError, match="the source broke"):
        for r in s:
            got.append(r)
    want = alone("beam", PROMPTS[:5], dict(beam_size=3), "numpy")
    assert sorted(r.index for r in got) == [0, 1, 2, 3, 4]
    assert all(r.hypotheses == want[r.index][0] for r in got)


def test_bad_inputs_become_error_records_and_the_stream_goes_on():
    model = SequenceModel(TABLE)
    items = [
        PROMPTS[0],
        {"prompt": PROMPTS[1], "max_steps": 0},  # max_steps >= 1
        {"prompt": PROMPTS[2], "prefix": [1, EOS]},  # an eos in the prefix
        "hello",  # not token ids
        {"prompt": PROMPTS[3], "beam": 3},  # an unknown key
        {"max_steps": 3},  # no prompt
        [1, V + 2],  # a token id >= V: found at the first call (V unknown before)
        PROMPTS[4],
        [2, -1],  # a negative id
    ]
    late = [V + 7, 1]  # read after the first call: refused when read
    s = decode_stream(model.step, make_state_for(model), items + [late, PROMPTS[5]], max_rows=9, beam_size=3,
                      eos_token_id=EOS, max_steps=MAX_STEPS)
    got = {r.index: r for r in s}
    assert sorted(got) == list(range(11)) and s.stats.errors == 8
    messages = {i: str(got[i].error) for i in got if got[i].error is not None}
    assert "max_steps" in messages[1] and "0" in messages[1]
    assert "prefix" in messages[2]
    assert isinstance(got[3].error, TypeError) and "prompts" in messages[3]
    assert "'beam'" in messages[4] and "prompt" in messages[4]
    assert "'prompt'" in messages[5]
    assert "prompts" in messages[6] and str(V + 2) in messages[6]
    assert "prompts" in messages[8]
    assert "prompts" in messages[9] and str(V + 7) in messages[9]
    want = alone("beam", [PROMPTS[0], PROMPTS[4], PROMPTS[5]], dict(beam_size=3), "numpy")
    for i, j in [(0, 0), (7, 1), (10, 2)]:
        assert got[i].error is None and got[i].hypotheses == want[j][0]
    assert all(got[i].hypotheses == [] for i in messages)


def test_a_bad_id_in_the_first_cohort_leaves_its_companions_whole():
    # every input of the first call joins one cohort; one of them holds an id >= V, found only at
    # that call: its companions start again in a new cohort, with the same results
    model = SequenceModel(TABLE)
    items = [PROMPTS[0], {"prompt": PROMPTS[1], "prefix": [V]}, PROMPTS[2]]
    made = []

    def make_state(batch):
        made.append(len(batch))
        return make_state_for(model)(batch)

    s = decode_stream(model.step, make_state, items, max_rows=9, beam_size=3, eos_token_id=EOS, max_steps=MAX_STEPS)
    got = {r.index: r for r in s}
    assert made == [3, 2]
    assert "prefix" in str(got[1].error) and str(V) in str(got[1].error)
    want = alone("beam", [PROMPTS[0], PROMPTS[2]], dict(beam_size=3), "numpy")
    assert got[0].hypotheses == want[0][0] and got[2].hypotheses == want[1][0]


def test_stream_errors_are_raised_before_any_model_call():
    model = SequenceModel(TABLE)
    make = make_state_for(model)

    def call(**kw):
        args = dict(max_rows=6, beam_size=3, eos_token_id=EOS, max_steps=MAX_STEPS)
        args.update(kw)
        return decode_stream(model.step, make, PROMPTS, **{k: v for k, v in args.items() if v is not None})

    with pytest.raises(ValueError, match=r"max_rows=2 is smaller than the rows one input may need \(3"):
        call(max_rows=2)
    with pytest.raises(ValueError, match="max_rows must be >= 1; got 0"):
        call(max_rows=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        call(mode="sampling")
    with pytest.raises(ValueError, match="prefix is per input"):
        call(prefix=[[1]] * len(PROMPTS))
    with pytest.raises(TypeError, match="does not take callback"):
        call(callback=print)
    with pytest.raises(TypeError, match="needs max_steps"):
        call(max_steps=None)
    with pytest.raises(ValueError, match="alpha"):
        call(alpha=-1.0)
    with pytest.raises(ValueError, match="n_best"):
        call(n_best=4)
    with pytest.raises(ValueError, match="per-input seeds go in the input dicts"):
        call(mode="stochastic", beam_size=None, k=2, seed=[1, 2])
    with pytest.raises(TypeError, match="stochastic_beam_search does not take alpha"):
        call(mode="stochastic", beam_size=None, k=2, alpha=0.5)
    assert model.calls == []


def test_a_model_error_ends_the_stream():
    model = SequenceModel(TABLE)

    def step(state, y_prev):
        if len(model.calls) == 4:
            raise RuntimeError("device lost")
        return model.step(state, y_prev)

    s = decode_stream(step, make_state_for(model), PROMPTS, max_rows=9, beam_size=3, eos_token_id=EOS,
                      max_steps=MAX_STEPS)
    with pytest.raises(RuntimeError, match="device lost"):
        list(s)


def test_an_empty_stream_makes_no_call():
    model = SequenceModel(TABLE)
    s = decode_stream(model.step, make_state_for(model), iter([]), max_rows=3, beam_size=3, eos_token_id=EOS,
                      max_steps=4)
    assert list(s) == [] and model.calls == [] and s.stats.calls == 0 and s.stats.utilisation == 0.0


# --- concat_state and pad_axis ---------------------------------------------------------------


class Pair(NamedTuple):
    a: Any
    b: Any


def nested(rows: int, lib: str, start: float):
    mk = (lambda x: torch.tensor(x)) if lib == "torch" else np.asarray
    base = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) + start
    return Pair(mk(base), {"h": [mk(base[:, 0].copy()), "tag", 3], "z": mk(np.float64(1.5)), "none": None})


@pytest.mark.parametrize("lib", BACKENDS)
def test_concat_state_joins_rows_of_nested_states(lib):
    s1, s2, s3 = nested(2, lib, 0.0), nested(1, lib, 10.0), nested(3, lib, 100.0)
    out = concat_state([s1, s2, s3])
    to = (lambda x: x.numpy()) if lib == "torch" else np.asarray
    # by hand: the rows of s1 (0..3), then s2 (10, 11), then s3 (100..105)
    want = np.array([[0, 1], [2, 3], [10, 11], [100, 101], [102, 103], [104, 105]], np.float64)
    assert type(out) is Pair and type(out.b) is dict and list(out.b) == ["h", "z", "none"]
    np.testing.assert_array_equal(to(out.a), want)
    np.testing.assert_array_equal(to(out.b["h"][0]), want[:, 0])
    assert out.b["h"][1:] == ["tag", 3] and out.b["none"] is None and float(out.b["z"]) == 1.5
    if lib == "torch":
        assert isinstance(out.a, torch.Tensor)
    # select_state then concat_state: the rows in the order asked for
    again = concat_state([select_state(out, [5, 0]), select_state(out, [2])])
    np.testing.assert_array_equal(to(again.a), want[[5, 0, 2]])


def test_concat_state_errors():
    a = (np.zeros((2, 3)), "x")
    with pytest.raises(ValueError, match="at least one state"):
        concat_state([])
    with pytest.raises(ValueError, match=r"agree beyond axis 0; states\[0\] has shape \(2, 3\), "
                                         r"states\[1\] has \(1, 4\).*pad_axis"):
        concat_state([a, (np.zeros((1, 4)), "x")])
    with pytest.raises(ValueError, match=r"states\[1\] has the leaf 'y' where states\[0\] has 'x'"):
        concat_state([a, (np.zeros((1, 3)), "y")])
    with pytest.raises(ValueError, match=r"states\[1\] is a tuple of length 1"):
        concat_state([a, (np.zeros((1, 3)),)])
    with pytest.raises(ValueError, match=r"states\[1\] is a list"):
        concat_state([a, [np.zeros((1, 3)), "x"]])
    with pytest.raises(ValueError, match="same keys"):
        concat_state([{"p": np.zeros(1)}, {"q": np.zeros(1)}])
    with pytest.raises(ValueError, match="must be equal in every state"):
        concat_state([(np.float64(1.0),), (np.float64(2.0),)])
    with pytest.raises(TypeError, match="frozenset has no order"):
        concat_state([frozenset([1]), frozenset([1])])
    if torch is not None:
        with pytest.raises(ValueError, match=r"states\[1\] has the leaf Tensor where states\[0\] has a numpy"):
            concat_state([np.zeros((1, 2)), torch.zeros(1, 2)])


def test_concat_state_refuses_a_row_holder_it_was_not_taught():
    # a cache type select_state can reorder holds rows; joining two of them as "equal leaves" would
    # silently keep the first one's rows, so concat_state refuses it until a concatenation is registered
    Cache = row_cache_type()
    one = Cache(np.zeros(1))
    with pytest.raises(TypeError, match=r"type Cache is registered with select_state.*concat_state\.register\(Cache\)"):
        concat_state([(np.zeros(1), one), (np.zeros(1), one)])

    @concat_state.register(Cache)
    def _(caches):
        return Cache(np.concatenate([c.rows for c in caches]))

    joined = concat_state([(np.zeros(1), one), (np.ones(2), Cache(np.ones(2)))])
    np.testing.assert_array_equal(joined[1].rows, [0, 1, 1])


def test_pad_axis_by_hand():
    x, y = np.array([[1, 2]]), np.array([[3, 4, 5], [6, 7, 8]])
    left = pad_axis([x, y], 1, 0, side="left")
    np.testing.assert_array_equal(left[0], [[0, 1, 2]])
    assert left[1] is y
    right = pad_axis([x, y], -1, 9)
    np.testing.assert_array_equal(right[0], [[1, 2, 9]])
    assert right[0].dtype == x.dtype
    with pytest.raises(ValueError, match=r"axis must be in \[1, 2\)"):
        pad_axis([x], 0, 0)
    with pytest.raises(ValueError, match="side must be"):
        pad_axis([x], 1, 0, side="middle")
    if torch is not None:
        t = pad_axis([torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool)], 1, False)
        assert t[0].dtype == torch.bool and t[0].tolist() == [[True, True, False, False]]


# --- a model whose state has a per-row memory of the input's own length ------------------------


class Memory:
    """A source memory ``[k, S, d]`` with its mask ``[k, S]`` (True = a real position): S differs
    between cohorts, so joining them pads (a registered concatenation)."""

    def __init__(self, values, mask):
        self.values, self.mask = values, mask


@select_state.register(Memory)
def _select_memory(memory, idx):
    return Memory(select_state(memory.values, idx), select_state(memory.mask, idx))


@concat_state.register(Memory)
def _concat_memory(memories):
    values = pad_axis([m.values for m in memories], 1, 0.0)
    mask = pad_axis([m.mask for m in memories], 1, False)
    return Memory(concat_state(values), concat_state(mask))


class MemoryModel:
    """A toy encoder-decoder: the memory of source s is a fixed random [len(s), d] table; the
    logits are W (masked mean of the memory + embedding of y_prev + h), h the running sum of
    the embeddings. Everything is a function of the row's source and its tokens alone."""

    d = 4

    def __init__(self, lib="numpy"):
        rng = np.random.default_rng(3)
        self.embed = rng.normal(size=(V, self.d))
        self.out = rng.normal(size=(self.d, V)) * 1.5
        self.lib = lib
        self.calls = []

    def _arr(self, x):
        return torch.tensor(x) if self.lib == "torch" else x

    def init_state(self, sources):
        longest = max(len(s) for s in sources)
        values = np.zeros((len(sources), longest, self.d))
        mask = np.zeros((len(sources), longest), bool)
        for i, s in enumerate(sources):
            values[i, : len(s)] = np.random.default_rng(list(s)).normal(size=(len(s), self.d))
            mask[i, : len(s)] = True
        return (Memory(self._arr(values), self._arr(mask)), self._arr(np.zeros((len(sources), self.d))))

    def step(self, state, y_prev):
        memory, h = state
        values = np.asarray(memory.values)
        mask = np.asarray(memory.mask)
        y = np.asarray(y_prev)
        self.calls.append(len(y))
        # the masked mean, summed position by position: padding adds nothing, bit for bit
        total = np.zeros((values.shape[0], self.d))
        for j in range(values.shape[1]):
            total += np.where(mask[:, j, None], values[:, j], 0.0)
        mean = total / mask.sum(axis=1, keepdims=True)
        h = np.asarray(h) + self.embed[y]
        logits = np.tanh(mean + h) @ self.out
        return self._arr(logits), (memory, self._arr(h))


@pytest.mark.parametrize("lib", BACKENDS)
def test_a_padded_memory_state_under_refill_equals_each_input_alone(lib):
    sources = [[1] * n + [2, 3][: n % 2] for n in [5, 1, 3, 6, 2, 4, 1, 5]]
    prompts = [[0]] * len(sources)
    items = [{"prompt": [0], "max_steps": 3 + i % 4} for i in range(len(sources))]
    model = MemoryModel(lib)
    by_item = {id(it): s for it, s in zip(items, sources, strict=True)}
    s = decode_stream(model.step, lambda batch: model.init_state([by_item[id(it)] for it in batch]), items,
                      max_rows=5, beam_size=2, n_best=2, eos_token_id=EOS, max_steps=6)
    got = {r.index: r.hypotheses for r in s}
    assert s.stats.mixed_calls > 0
    for i, (src, it) in enumerate(zip(sources, items, strict=True)):
        solo = MemoryModel(lib)
        want = beam_search_batch(solo.step, solo.init_state([src]), [prompts[i]], beam_size=2, n_best=2,
                                 eos_token_id=EOS, max_steps=it["max_steps"])[0]
        assert [h.tokens for h in got[i]] == [h.tokens for h in want]
        assert [h.logprob for h in got[i]] == pytest.approx([h.logprob for h in want], abs=1e-12)


def test_without_a_padding_concatenation_the_stream_stops_with_a_clear_error():
    # plain array leaves of each cohort's own source length cannot be joined: a model error
    model = MemoryModel()
    lengths = iter([2, 5])

    def make_state(batch):  # each cohort's sources are of its own length
        n = next(lengths)
        memory, h = model.init_state([[1] * n for _ in batch])
        return (memory.values, h)

    def step(state, y_prev):
        values, h = state
        return model.step((Memory(values, np.ones(values.shape[:2], bool)), h), y_prev)[0], state

    # input 0 stops after one step, input 2 then joins while input 1 is in flight
    items = [{"prompt": [0], "max_steps": 1}, [0], [0]]
    s = decode_stream(step, make_state, items, max_rows=2, beam_size=1, eos_token_id=EOS, max_steps=3)
    with pytest.raises(ValueError, match=r"agree beyond axis 0; states\[0\] has shape \(1, 2, 4\), states\[1\] has "
                                         r"\(1, 5, 4\).*pad_axis"):
        list(s)


@pytest.mark.parametrize("min_join", [2, 3])
def test_min_join_joins_several_inputs_at_once_with_the_same_results(min_join):
    want = ORACLE.get(("beam", "numpy")) or alone("beam", PROMPTS, dict(beam_size=3, n_best=2), "numpy")
    results, stats, model = stream("beam", PROMPTS, dict(beam_size=3, n_best=2), "numpy", max_rows=9,
                                   min_join=min_join)
    assert all(r.hypotheses == want[r.index][0] for r in results) and len(results) == len(PROMPTS)
    # every cohort but the first and the last joins at least min_join inputs: fewer cohorts
    assert stats.cohorts <= 2 + (len(PROMPTS) - 3) // min_join
    with pytest.raises(ValueError, match="min_join must be >= 1; got 0"):
        stream("beam", PROMPTS, dict(beam_size=3), "numpy", max_rows=9, min_join=0)


@pytest.mark.parametrize("max_tokens", [48, 100, 170])
def test_a_token_budget_bounds_every_call_and_changes_no_result(max_tokens):
    """A row of an input holds at most prompt + max_steps positions: 2 + 14 = 16, or 5, 8 and 4
    for the lines with max_steps 3, 6 and 2. Every call's rows (beam 3 per input), each as wide as
    the widest of them, fit the budget: 3 x inputs x widest <= max_tokens (the inputs of a call are
    read from the state: each row carries its stream position); and every result is the input
    decoded alone."""
    mode, search, build = CASES["beam-controls"]
    items = build(PROMPTS)
    want = alone(mode, items, search, "numpy")
    width = [2 + fields(it).get("max_steps", MAX_STEPS) for it in items]
    model = SequenceModel(TABLE)
    seen = []

    def make_state(batch):
        return model.init_state([fields(it)["prompt"] for it in batch]), np.array([it["source"] for it in batch])

    def step(state, y_prev):
        inner, position = state
        seen.append(sorted(set(position.tolist())))
        logits, new = model.step(inner, y_prev)
        return logits, (new, position)

    tagged = [dict(fields(it), source=i) for i, it in enumerate(items)]
    s = decode_stream(step, make_state, tagged, max_rows=30, max_tokens=max_tokens, mode=mode, **kwargs_of(search))
    results = {r.index: r for r in s}
    assert sorted(results) == list(range(len(items)))
    for i, r in results.items():
        assert r.error is None and r.hypotheses == want[i][0]
    assert all(3 * len(inputs) * max(width[i] for i in inputs) <= max_tokens for inputs in seen)
    widest = max(len(inputs) for inputs in seen)
    assert widest < len(items)  # max_rows=30 alone would take all ten at once: the budget held them back
    assert widest > 1 or max_tokens < 96  # and it lets several in when it can (2 x 3 rows x 16 = 96)
    assert s.stats.max_tokens == max_tokens


def test_an_input_over_the_token_budget_is_an_error_record_and_the_rest_decode():
    model = SequenceModel(TABLE)
    items = [PROMPTS[0], {"prompt": PROMPTS[1], "max_steps": 3}, PROMPTS[2]]
    s = decode_stream(model.step, make_state_for(model), items, max_rows=9, max_tokens=20, beam_size=3,
                      eos_token_id=EOS, max_steps=MAX_STEPS)
    results = {r.index: r for r in s}
    for i in (0, 2):
        assert str(results[i].error) == ("the input needs 48 tokens (3 rows x (prompt 2 + max_steps 14)), more "
                                         "than max_tokens=20")
        assert results[i].hypotheses == []
    assert results[1].error is None and results[1].hypotheses
    assert s.stats.errors == 2


@pytest.mark.parametrize("bad, error", [(0, "max_tokens must be >= 1; got 0"), (-5, "max_tokens must be >= 1; got -5"),
                                        (2.5, "max_tokens"), ("10", "max_tokens")])
def test_a_bad_token_budget_is_refused_before_any_call(bad, error):
    model = SequenceModel(TABLE)
    with pytest.raises((ValueError, TypeError), match=error):
        decode_stream(model.step, make_state_for(model), PROMPTS, max_rows=6, max_tokens=bad, beam_size=3,
                      eos_token_id=EOS, max_steps=MAX_STEPS)
    assert model.calls == []


def _stochastic_kwargs():
    return dict(k=2, seed=11, eos_token_id=EOS, max_steps=MAX_STEPS)


def test_a_dropped_cohort_before_a_live_one_in_the_first_call():
    """Stochastic inputs with and without their own seed join the first call as two cohorts (the
    stream-seeded one first). The first holds an id >= V and is dropped at that call: the second,
    after it in the call, still gets its own rows' logits and its results alone."""
    model = SequenceModel(TABLE)
    items = [{"prompt": [0, V + 1]}, {"prompt": PROMPTS[2], "seed": 5}, {"prompt": PROMPTS[3], "seed": 6}]
    s = decode_stream(model.step, make_state_for(model), items, max_rows=9, mode="stochastic", **_stochastic_kwargs())
    got = {r.index: r for r in s}
    assert "prompts" in str(got[0].error)
    for i in (1, 2):
        f = items[i]
        one = SequenceModel(TABLE)
        want = stochastic_beam_search(one.step, one.init_state([f["prompt"]]), [f["prompt"]],
                                      **{**_stochastic_kwargs(), "seed": [f["seed"]]})
        assert got[i].error is None and got[i].hypotheses == want[0]


def test_two_dropped_cohorts_in_the_first_call_keep_every_companion():
    """Both cohorts of the first call hold a bad id: both errors are reported, and both good
    companions join again (the stream-seeded one keeps the noise of its stream position)."""
    model = SequenceModel(TABLE)
    items = [{"prompt": [0, V + 1]}, PROMPTS[1], {"prompt": PROMPTS[2], "seed": 5}, {"prompt": [1, V + 2], "seed": 6}]
    made = []

    def make_state(batch):
        made.append(len(batch))
        return make_state_for(model)(batch)

    s = decode_stream(model.step, make_state, items, max_rows=12, mode="stochastic", **_stochastic_kwargs())
    got = {r.index: r for r in s}
    assert sorted(got) == [0, 1, 2, 3] and made[:2] == [2, 2]
    assert "prompts" in str(got[0].error) and "prompts" in str(got[3].error)
    one = SequenceModel(TABLE)
    stand_ins = [PROMPTS[0], PROMPTS[1], PROMPTS[2], PROMPTS[3]]  # input 1's noise: that of position 1
    whole = stochastic_beam_search(one.step, one.init_state(stand_ins), stand_ins, **_stochastic_kwargs())
    assert got[1].error is None and got[1].hypotheses == whole[1]
    one = SequenceModel(TABLE)
    alone2 = stochastic_beam_search(one.step, one.init_state([PROMPTS[2]]), [PROMPTS[2]],
                                    **{**_stochastic_kwargs(), "seed": [5]})
    assert got[2].error is None and got[2].hypotheses == alone2[0]


def test_make_state_with_the_wrong_rows_is_refused():
    model = SequenceModel(TABLE)

    def make_state(batch):
        return make_state_for(model)(list(batch) + [batch[0]])  # one row too many

    with pytest.raises(ValueError, match=r"make_state\(items\)"):
        list(decode_stream(model.step, make_state, PROMPTS[:2], max_rows=6, beam_size=3, eos_token_id=EOS,
                           max_steps=MAX_STEPS))


def test_min_join_waits_for_room_even_with_one_row_per_input():
    """Beam 1: an input needs one row, but new inputs wait until min_join of them fit (every
    make_state batch but the last has at least min_join items), and the results are the same."""
    model = SequenceModel(TABLE)
    made = []

    def make_state(batch):
        made.append(len(batch))
        return make_state_for(model)(batch)

    s = decode_stream(model.step, make_state, PROMPTS, max_rows=4, min_join=3, beam_size=1, eos_token_id=EOS,
                      max_steps=MAX_STEPS)
    got = {r.index: r.hypotheses for r in s}
    assert len(made) > 2 and all(n >= 3 for n in made[:-1])
    want = alone("beam", PROMPTS, dict(beam_size=1), "numpy")
    assert all(got[i] == want[i][0] for i in range(len(PROMPTS)))


def greedy_alone(model, item):
    """Oracle for mode "greedy": a plain loop over one input: at each step the argmax of the
    log-softmax (the prefix forced), until eos or its max_steps."""
    f = fields(item)
    state, y = model.init_state([f["prompt"]]), f["prompt"][-1]
    forced, tokens, logprob = list(f.get("prefix", [])), [], 0.0
    for t in range(f.get("max_steps", MAX_STEPS)):
        logits, state = model.step(state, np.array([y]))
        row = np.asarray(logits, dtype=np.float64)[0]
        lp = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        y = forced[t] if t < len(forced) else int(np.argmax(lp))
        tokens.append(y)
        logprob += lp[y]
        if y == EOS:
            break
    return tokens, tokens[-1] == EOS, logprob


def test_greedy_mode_gives_each_input_its_greedy_decoding():
    """decode_stream(mode="greedy"): one row per input, each input what the plain greedy loop gives
    it (a beam of one differs: it may return a finished candidate greedy never takes), inputs
    joining as others stop; beam_size is refused in the mode's words."""
    model = SequenceModel(TABLE)
    items = with_prefix_and_limits(PROMPTS)
    s = decode_stream(model.step, make_state_for(model), items, max_rows=3, mode="greedy", eos_token_id=EOS,
                      max_steps=MAX_STEPS, alpha=0.0)
    got = {d.index: d.hypotheses for d in s}
    assert sorted(got) == list(range(len(items))) and s.stats.mixed_calls > 0
    for i, item in enumerate(items):
        tokens, finished, logprob = greedy_alone(SequenceModel(TABLE), item)
        (h,) = got[i]
        assert (h.tokens, h.finished) == (tokens, finished)
        assert abs(h.logprob - logprob) < 1e-9 and abs(h.score - logprob) < 1e-9  # alpha 0: score = logprob
    with pytest.raises(TypeError,
                       match=r"greedy_search does not take beam_size \(greedy decoding has one row per input\)"):
        decode_stream(model.step, make_state_for(model), PROMPTS, max_rows=3, mode="greedy", beam_size=2,
                      eos_token_id=EOS, max_steps=MAX_STEPS)


# Refill's stream at its edges (its argument errors word for word, an iterable read to its first end
# only, a model whose V changes, the rows and dtypes each call gets, inputs dropped at the first
# call). Oracles: the contract's own words, hand-built schedules
# (derivations in comments), and each input decoded alone by its batch function.


EDGE_TABLE = random_table(V, 4)


def _make_state(model):
    return lambda items: model.init_state([it["prompt"] if isinstance(it, dict) else it for it in items])


def _stream(items, *, model=None, **kw):
    model = model or SequenceModel(EDGE_TABLE)
    kw = {"max_rows": 4, "eos_token_id": EOS, "max_steps": 3, **kw}
    return decode_stream(model.step, _make_state(model), items, **kw)


def test_decode_stream_argument_errors_word_for_word():
    with pytest.raises(ValueError, match=r"^mode must be one of beam, greedy, constrained, diverse, stochastic"):
        _stream([], mode="nope")
    for name in ("trace", "trace_width", "callback"):
        with pytest.raises(TypeError, match=rf"^decode_stream does not take {name} \(a step record covers one "
                                            rf"batch\); got {name}=$"):
            _stream([], **{name: 1})
    with pytest.raises(TypeError, match=r"^decode_stream does not take positions \(each input's position in the "
                                        r"stream is used\)$"):
        _stream([], positions=[0])
    model = SequenceModel(EDGE_TABLE)
    with pytest.raises(TypeError, match=r"^decode_stream needs max_steps \(an int: the default of inputs that give "
                                        r"none\)$"):
        decode_stream(model.step, _make_state(model), [], max_rows=4, eos_token_id=EOS)


def test_a_per_input_max_steps_list_is_refused_for_a_stream_before_any_model_call():
    """A stream has no fixed inputs to align a list with: any list of max_steps is refused as having
    one entry per prompt of none (0), the message of the batch modes' length check."""
    model = SequenceModel(EDGE_TABLE)
    for steps in ([4], [4, 4]):
        with pytest.raises(ValueError, match=rf"^max_steps must have one entry per prompt \(0\); got {len(steps)} "
                                             r"entries$"):
            list(_stream([[1], [2]], model=model, beam_size=2, max_steps=steps))
    assert model.calls == []


def test_an_unknown_input_key_is_an_error_record_naming_the_keys_taken():
    results = list(_stream([{"prompt": [1], "colour": 2}], beam_size=2))
    assert str(results[0].error) == "input has the key 'colour'; an input dict takes max_steps, prefix, prompt, source"


def test_make_state_with_the_wrong_rows_is_named():
    model = SequenceModel(EDGE_TABLE)
    with pytest.raises(ValueError, match=r"array leaf; make_state\(items\)"):
        list(decode_stream(model.step, lambda items: model.init_state([[1]] * (len(items) + 1)), [[1], [2]],
                           max_rows=4, beam_size=1, eos_token_id=EOS, max_steps=3))


class _Restarting:
    """An iterator that ends once, then would go on (a queue read after it ran dry)."""

    def __init__(self, first, later):
        self.first, self.later, self.calls, self.ended = list(first), list(later), 0, False

    def __iter__(self):
        return self

    def __next__(self):
        self.calls += 1
        if self.first:
            return self.first.pop(0)
        if not self.ended:
            self.ended = True
            raise StopIteration
        if self.later:
            return self.later.pop(0)
        raise StopIteration


def test_the_stream_reads_its_iterable_to_its_first_end_only():
    """Two prompts, then the end: two results, and the iterable is asked three times, never after
    (the end is met when input 0 stops after its one step, while input 1 is still in flight)."""
    inputs = _Restarting([{"prompt": [1], "max_steps": 1}, [2]], [[3]])
    results = list(_stream(inputs, beam_size=2, max_rows=4, max_steps=4))
    assert sorted(r.index for r in results) == [0, 1] and inputs.calls == 3


def test_a_model_whose_v_changes_ends_the_stream():
    def table(prefix):
        return np.zeros(V if len(prefix) < 2 else V + 1)

    model = SequenceModel(table)
    with pytest.raises(ValueError, match=r"^logits V changed between calls: was 6, got shape \(1, 7\)"):
        list(_stream([[1]], model=model, beam_size=1, max_steps=4, max_rows=1))


def test_a_model_whose_v_changes_for_a_new_input_ends_the_stream():
    """One input at a time: input 0 (V = 6) stops, then input 1 joins and its first call has
    V = 7: the stream knows V from its first call, even when every cohort in flight is new."""
    def table(prefix):
        return np.zeros(V + 1 if prefix[0] == 3 else V)

    model = SequenceModel(table)
    with pytest.raises(ValueError, match=r"^logits V changed between calls: was 6, got shape \(1, 7\)"):
        list(_stream([[1], [3]], model=model, beam_size=1, max_steps=2, max_rows=1))


def test_each_call_gets_int64_tokens_and_the_state_it_returned_when_no_row_moves():
    """Greedy, one input at a time (max_rows 1): every row continues in place, so each call gets
    the very state object the last call returned (no gather); y_prev is int64 at every call,
    including after the stream emptied and a new input joined. Results: greedy worked out by
    hand on each input alone."""
    model = SequenceModel(EDGE_TABLE)
    seen, returned = [], []

    def step(state, y_prev):
        assert isinstance(y_prev, np.ndarray) and y_prev.dtype == np.int64
        seen.append(state)
        logits, new = model.step(state, y_prev)
        returned.append(new)
        return logits, new

    prompts = [[1, 2], [3], [4, 0]]
    results = list(decode_stream(step, _make_state(model), prompts, max_rows=1, mode="greedy", eos_token_id=EOS,
                                 max_steps=4))
    assert sorted(r.index for r in results) == [0, 1, 2]
    # all but a join
    assert sum(s is r for s, r in zip(seen[1:], returned[:-1], strict=True)) == len(seen) - len(prompts)
    for r in results:  # greedy by hand: each step the highest logit, the lowest id among ties
        tokens: list[int] = []
        while len(tokens) < 4 and EOS not in tokens:
            row = list(EDGE_TABLE(tuple(prompts[r.index]) + tuple(tokens)))
            tokens.append(row.index(max(row)))
        assert r.hypotheses[0].tokens == tokens


def test_bad_inputs_of_two_cohorts_release_all_their_rows():
    """Stochastic, k = 1, max_rows 3, max_tokens 12, max_steps 1. Inputs 0 and 1 (the stream's
    seed) and 2 (its own seed: a second cohort) have the id 99 >= V and are dropped at the first
    call; every row and width they held is released, so input 3 (width 5 + 1 = 6, alone:
    1 x 6 <= 12) joins next. Were the first cohort's two rows still held, 3 x 6 = 18 > 12 would
    leave it waiting with nothing in flight."""
    model = SequenceModel(EDGE_TABLE)
    items = [{"prompt": [99]}, {"prompt": [99]}, {"prompt": [99], "seed": 1}, {"prompt": [1, 1, 1, 1, 1]}]
    s = _stream(items, model=model, mode="stochastic", k=1, seed=0, max_rows=3, max_tokens=12, max_steps=1)
    results = {r.index: r for r in s}
    assert sorted(results) == [0, 1, 2, 3]
    assert all(results[i].error is not None for i in (0, 1, 2)) and results[3].error is None
    assert len(results[3].hypotheses) == 1 and s.stats.errors == 3


def test_a_dropped_second_cohort_leaves_the_first_one_its_rows_only():
    """Input 0 (stream seed) and input 1 (own seed, id 99 >= V: dropped at the first call) join
    together as two cohorts; from the second call on the state holds input 0's row only."""
    model = SequenceModel(EDGE_TABLE)

    def step(state, y_prev):
        assert len(state.prefix) == len(y_prev), "the state's rows are the rows of the call"
        return model.step(state, y_prev)

    items = [{"prompt": [1, 2]}, {"prompt": [99], "seed": 3}]
    results = {r.index: r for r in decode_stream(step, _make_state(model), items, max_rows=2, mode="stochastic", k=1,
                                                 seed=0, eos_token_id=EOS, max_steps=4)}
    assert results[1].error is not None and results[0].error is None and len(results[0].hypotheses) == 1


BAD_ALONE = [  # (mode, the stream's keywords, a bad input): each input's own options, checked alone
    ("beam", {"beam_size": 3}, {"prompt": PROMPTS[0], "max_steps": 0}),
    ("beam", {"beam_size": 3}, {"prompt": PROMPTS[0], "prefix": [1, EOS]}),
    ("beam", {"beam_size": 3}, {"prompt": PROMPTS[0], "prefix": [1] * (MAX_STEPS + 1)}),
    ("beam", {"beam_size": 3, "alpha": 300.0}, {"prompt": PROMPTS[0], "max_steps": 10**6}),
    ("greedy", {}, {"prompt": [], "max_steps": 3}),
    ("diverse", {"beam_size": 4, "num_groups": 2, "diversity_penalty": 1.0}, {"prompt": "ab"}),
    ("transformers", {"beam_size": 3}, {"prompt": PROMPTS[0], "prefix": [[1]]}),
    ("constrained", {"beam_size": 3}, {"prompt": PROMPTS[0], "constraints": [[1, EOS]]}),
    ("constrained", {"beam_size": 3}, {"prompt": PROMPTS[0], "constraints": [[1, 2, 3]], "max_steps": 3}),
    ("constrained", {"beam_size": 3}, {"prompt": PROMPTS[0], "constraints": [[1, 2, 3]], "prefix": [3] * 11}),
    ("constrained", {"beam_size": 3}, {"prompt": PROMPTS[0], "constraints": [AnyOf([])]}),
    ("constrained", {"beam_size": 3, "ordered": False}, {"prompt": PROMPTS[0], "constraints": "12"}),
    ("stochastic", {"k": 3, "seed": 1}, {"prompt": PROMPTS[0], "seed": -1}),
    ("stochastic", {"k": 3, "seed": 1}, {"prompt": PROMPTS[0], "seed": 2**63}),
    ("stochastic", {"k": 3, "seed": 1}, {"prompt": PROMPTS[0], "seed": "x"}),
]


@pytest.mark.parametrize(("mode", "search", "bad"), BAD_ALONE)
def test_an_input_checked_alone_fails_as_the_modes_function_fails_on_it(mode, search, bad):
    # no plan is made of one input: it is checked against the stream's configuration. Oracle: the
    # mode's public function over that input alone raises the same error, word for word.
    model = SequenceModel(TABLE)
    one = {**search, "eos_token_id": EOS, "max_steps": [bad.get("max_steps", MAX_STEPS)]}  # one per input
    for name in ("prefix", "constraints", "seed"):
        if name in bad:
            one[name] = [bad[name]]
    function = {"greedy": greedy_search, **FUNCS}[mode]
    with pytest.raises((TypeError, ValueError)) as raised:
        function(model.step, model.init_state([[0]]), [bad["prompt"]], **one)
    s = decode_stream(model.step, make_state_for(model), [PROMPTS[1], bad, PROMPTS[2]], max_rows=12, mode=mode,
                      eos_token_id=EOS, max_steps=MAX_STEPS, **search)
    got = {r.index: r for r in s}
    assert type(got[1].error) is raised.type and str(got[1].error) == str(raised.value)
    assert got[0].error is None and got[2].error is None and s.stats.errors == 1
