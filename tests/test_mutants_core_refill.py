"""Refill's stream at its edges (its argument errors word for word, an iterable read to its first
end only, a model whose V changes, the rows and dtypes each call gets, inputs dropped at the first
call) and the mode registry's rules. Oracles: the contract's own words, hand-built schedules
(derivations in comments), and each input decoded alone by its batch function."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from beamsearch.core.config import control
from beamsearch.modes import registry
from beamsearch.modes.beam import BEAM
from beamsearch.refill import decode_stream
from models import SequenceModel, random_table

V, EOS = 6, 5
TABLE = random_table(V, 4)


def _make_state(model):
    return lambda items: model.init_state([it["prompt"] if isinstance(it, dict) else it for it in items])


def _stream(items, *, model=None, **kw):
    model = model or SequenceModel(TABLE)
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
    model = SequenceModel(TABLE)
    with pytest.raises(TypeError, match=r"^decode_stream needs max_steps \(an int: the default of inputs that give "
                                        r"none\)$"):
        decode_stream(model.step, _make_state(model), [], max_rows=4, eos_token_id=EOS)


def test_an_unknown_input_key_is_an_error_record_naming_the_keys_taken():
    results = list(_stream([{"prompt": [1], "colour": 2}], beam_size=2))
    assert str(results[0].error) == "input has the key 'colour'; an input dict takes max_steps, prefix, prompt, source"


def test_make_state_with_the_wrong_rows_is_named():
    model = SequenceModel(TABLE)
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
    model = SequenceModel(TABLE)
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
    assert sum(s is r for s, r in zip(seen[1:], returned[:-1])) == len(seen) - len(prompts)  # all but a join
    for r in results:  # greedy by hand: each step the highest logit, the lowest id among ties
        tokens: list[int] = []
        while len(tokens) < 4 and EOS not in tokens:
            row = list(TABLE(tuple(prompts[r.index]) + tuple(tokens)))
            tokens.append(row.index(max(row)))
        assert r.hypotheses[0].tokens == tokens


def test_bad_inputs_of_two_cohorts_release_all_their_rows():
    """Stochastic, k = 1, max_rows 3, max_tokens 12, max_steps 1. Inputs 0 and 1 (the stream's
    seed) and 2 (its own seed: a second cohort) have the id 99 >= V and are dropped at the first
    call; every row and width they held is released, so input 3 (width 5 + 1 = 6, alone:
    1 x 6 <= 12) joins next. Were the first cohort's two rows still held, 3 x 6 = 18 > 12 would
    leave it waiting with nothing in flight."""
    model = SequenceModel(TABLE)
    items = [{"prompt": [99]}, {"prompt": [99]}, {"prompt": [99], "seed": 1}, {"prompt": [1, 1, 1, 1, 1]}]
    s = _stream(items, model=model, mode="stochastic", k=1, seed=0, max_rows=3, max_tokens=12, max_steps=1)
    results = {r.index: r for r in s}
    assert sorted(results) == [0, 1, 2, 3]
    assert all(results[i].error is not None for i in (0, 1, 2)) and results[3].error is None
    assert len(results[3].hypotheses) == 1 and s.stats.errors == 3


def test_a_dropped_second_cohort_leaves_the_first_one_its_rows_only():
    """Input 0 (stream seed) and input 1 (own seed, id 99 >= V: dropped at the first call) join
    together as two cohorts; from the second call on the state holds input 0's row only."""
    model = SequenceModel(TABLE)

    def step(state, y_prev):
        assert len(state.prefix) == len(y_prev), "the state's rows are the rows of the call"
        return model.step(state, y_prev)

    items = [{"prompt": [1, 2]}, {"prompt": [99], "seed": 3}]
    results = {r.index: r for r in decode_stream(step, _make_state(model), items, max_rows=2, mode="stochastic", k=1,
                                                 seed=0, eos_token_id=EOS, max_steps=4)}
    assert results[1].error is not None and results[0].error is None and len(results[0].hypotheses) == 1


# --- the registry --------------------------------------------------------------------------------


def test_mode_names_the_registered_modes():
    with pytest.raises(ValueError, match=r"^mode must be one of beam, greedy, constrained, diverse, stochastic, exact, "
                                         r"transformers, step(, \w+)*; got 'nope'$"):
        registry.mode("nope")
    assert registry.mode("beam") is BEAM


def test_register_refuses_a_taken_name_or_option_and_adds_a_new_mode():
    @dataclasses.dataclass(frozen=True)
    class Shared:
        alpha: float = control(0.5, "clashes with the shared control")

    @dataclasses.dataclass(frozen=True)
    class Grouped:
        num_groups: int = control(2, "clashes with diverse's option")

    @dataclasses.dataclass(frozen=True)
    class Fresh:
        probe_width: int = control(2, "an option of its own")

    before = dict(registry.MODES)
    with pytest.raises(ValueError, match=r"^a mode named 'beam' is already registered$"):
        registry.register(dataclasses.replace(BEAM))
    with pytest.raises(ValueError, match=r"^mode 'probe': option 'alpha' is already one of the shared controls$"):
        registry.register(dataclasses.replace(BEAM, name="probe", options=Shared))
    with pytest.raises(ValueError, match=r"^mode 'probe': option 'num_groups' is already one of mode 'diverse'$"):
        registry.register(dataclasses.replace(BEAM, name="probe", options=Grouped))
    assert registry.MODES == before
    spec = dataclasses.replace(BEAM, name="probe", options=Fresh)
    try:
        assert registry.register(spec) is spec and registry.mode("probe") is spec
    finally:
        registry.MODES.pop("probe", None)
