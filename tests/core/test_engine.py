"""Engine pieces the end-to-end oracles reach only indirectly, each against a plain reference."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch import beam_search, beam_search_batch, beam_search_each
from beamsearch.controls.stop_sequences import StopSequences
from beamsearch.core.select import Terminals
from models import SequenceModel, random_table


def test_a_processor_without_needs_history_sees_the_generated_tokens():
    # ctx.history is rebuilt from the back-pointer trail on first access: it must equal each
    # row's generated tokens, which the model's own state records (its prefix after the prompt)
    table = random_table(4, 3, eos=0, eos_shift=-1.0)
    model = SequenceModel(table)
    prompts = [[1, 2], [3]]
    seen = []

    def record(logits, ctx):
        seen.append((ctx.step, ctx.row_input.copy(), ctx.history.copy()))
        return logits

    beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=0, max_steps=4, beam_size=3,
                      logits_processors=[record])
    assert [s for s, _, _ in seen] == [1, 2, 3, 4][: len(seen)] and len(seen) >= 3
    for (step, inputs, history), call in zip(seen, model.calls, strict=True):  # call: each row's prompt + generated
        assert history.shape == (len(call), step - 1)
        assert history.tolist() == [list(p[len(prompts[i]):]) for i, p in zip(inputs, call, strict=True)]


def test_a_processor_with_needs_history_sees_exactly_prompt_and_generated_tokens():
    # The kept history grows a column per step (it is never max_steps wide): at step t it is
    # [k, P + t - 1], each row its prompt left-padded with -1 to the widest, then its generated
    # tokens, which the model's own state records (its prefix after the prompt).
    table = random_table(4, 3, eos=0, eos_shift=-1.0)
    model = SequenceModel(table)
    prompts = [[1, 2, 3], [3]]
    seen = []

    class Record:
        needs_history = True

        def __call__(self, logits, ctx):
            seen.append((ctx.step, ctx.row_input.copy(), ctx.history.copy()))
            return logits

    beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=0, max_steps=10**6, beam_size=3,
                      logits_processors=[Record()], alpha=0.0, min_new_tokens=3)
    assert len(seen) >= 4
    for (step, inputs, history), call in zip(seen, model.calls, strict=True):
        assert history.shape == (len(call), 3 + step - 1)
        assert history.tolist() == [[-1] * (3 - len(prompts[i])) + list(prompts[i]) + list(p[len(prompts[i]):])
                                    for i, p in zip(inputs, call, strict=True)]


def test_terminals_contains_eos_ids_and_pairs():
    t = Terminals(np.array([0, 3]), np.array([1, 2, 2]), np.array([4, 1, 5]))
    parent = np.array([0, 1, 1, 2, 2, 2, 0])
    token = np.array([3, 4, 2, 1, 5, 4, 4])
    expected = [tok in (0, 3) or (p, tok) in {(1, 4), (2, 1), (2, 5)} for p, tok in zip(parent, token, strict=True)]
    assert t.contains(parent, token, vocab=6).tolist() == expected


def test_stop_sequence_pairs_equal_a_plain_loop():
    rng = np.random.default_rng(0)
    for case in range(200):
        seqs = tuple(tuple(int(v) for v in rng.integers(0, 4, size=rng.integers(1, 5)))
                     for _ in range(rng.integers(1, 4)))
        stops = StopSequences(seqs, min_new_tokens=int(rng.integers(0, 3)))
        w = stops.window
        k = int(rng.integers(1, 6))
        recent = rng.integers(-1, 4, size=(k, w))
        step = int(rng.integers(1, 5))
        rows, tokens = stops.pairs(recent, step)
        expected = set()
        if step > stops.min_new_tokens:
            for r in range(k):
                for s in seqs:
                    tail = recent[r, w - (len(s) - 1):].tolist() if len(s) > 1 else []
                    if tail == list(s[:-1]):
                        expected.add((r, s[-1]))
        assert list(zip(rows.tolist(), tokens.tolist(), strict=True)) == sorted(expected), case


@pytest.mark.parametrize("threshold", [0, 1 << 62])
def test_narrowing_inputs_with_different_widths_equal_each_alone(threshold, monkeypatch):
    # beam_search_each: inputs finish at different steps, so their widths (beam - finished) differ
    # within one step; each input's result must equal its search alone, with either ranking
    import beamsearch.core.select as select

    monkeypatch.setattr(select, "GROUPED_MAX_ELEMENTS", threshold)
    monkeypatch.setattr(select, "WIDE_FRACTION", 0 if threshold == 0 else select.WIDE_FRACTION)  # 0: no wide rule
    tables = [random_table(4, seed, eos=0, eos_shift=1.0) for seed in range(4)]

    def step(state, y_prev):  # state rows: (input, generated tokens so far, started?)
        rows = np.empty(len(state), dtype=object)
        rows[:] = [(i, g + (int(y),) if started else g, True) for (i, g, started), y in zip(state, y_prev, strict=True)]
        return np.stack([tables[i](g) for i, g, _ in rows]), rows

    def start(inputs):
        rows = np.empty(len(inputs), dtype=object)
        rows[:] = [(i, (), False) for i in inputs]
        return rows

    alone = [beam_search(step, start([i]), 0, 0, beam_size=3, max_len=5, length_penalty=0.5) for i in range(4)]
    batch = beam_search_each(step, start(range(4)), 4, 0, 0, beam_size=3, max_len=5, length_penalty=0.5)
    assert sum(h.finished for hyps in alone for h in hyps) >= 4  # inputs do finish hypotheses (widths differ)
    for got, want in zip(batch, alone, strict=True):
        assert [(h.tokens, h.finished) for h in got] == [(h.tokens, h.finished) for h in want]
        assert [h.logprob for h in got] == pytest.approx([h.logprob for h in want], abs=1e-12)


def test_strategy_tags_stay_aligned_with_the_rows_when_inputs_retire():
    # a strategy's per-row tags (Candidates.tags) come back as Beam.tags for exactly the rows the
    # next call gets, also after the engine retired inputs at their own max_steps
    from beamsearch.controls import Controls
    from beamsearch.core.engine import run
    from beamsearch.core.penalties import length_wu
    from beamsearch.strategies import Selection
    from beamsearch.strategies.batch import BatchBeam

    table = random_table(5, 3)
    model = SequenceModel(table)
    inner = BatchBeam(3, 1, length_wu, 0.0, np.ones(3), early_stop=False)
    seen = []

    class Tagging:
        def start(self, n):
            return inner.start(n)

        def select(self, state, scores):
            beam = scores.beam
            if scores.step > 1:  # the tag is (input, the row's last token) written one step before
                seen.append(beam.size)
                assert (beam.tags["input"] == beam.input).all()
                assert (beam.tags["token"] == beam.token).all()
            selection, state = inner.select(state, scores)
            live = selection.live
            tags = {"input": beam.input[live.parent], "token": live.token}
            return Selection(type(live)(live.parent, live.token, live.logprob, tags), selection.ended,
                             selection.ended_finished, selection.stop), state

    prompts = [[1], [2], [3]]
    controls = Controls(np.array([0]), np.array([2, 5, 3]))
    run(model.step, model.init_state(prompts), np.array([1, 2, 3]), Tagging(), controls)
    assert seen == [9, 6, 3, 3]  # inputs 0 and 2 retire after steps 2 and 3: tags follow the rows


# ---- a step function that indexes by the id: the first call's exception says what it was given --------

TABLE = np.array([[-10, 3.0, 2.0, 1.0, 0.5], [-10, 0.5, 1.0, 0.0, 2.5],   # README's toy model, V=5
                  [-10, 1.5, 0.5, 0.0, 1.0], [-10, 0.0, 1.0, 0.5, 2.0], [0.0, 0.0, 0.0, 0.0, 0.0]])


def table_step(state, y_prev):
    return TABLE[y_prev], state


def first_call_notes(search):
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 5") as info:
        search()
    return getattr(info.value, "__notes__", [])


@pytest.mark.skipif(not hasattr(Exception, "add_note"), reason="exception notes are Python 3.11+")
def test_the_first_calls_exception_names_each_id_and_where_it_came_from():
    # input 0's prompt is empty (bos_token_id stands in), input 1's last id is prompts[1][1]
    notes = first_call_notes(lambda: beam_search_batch(table_step, None, [[], [0, 5]], bos_token_id=5,
                                                       eos_token_id=4, max_steps=3, beam_size=2))
    assert notes == ["beamsearch: raised by the model's first call, whose y_prev was bos_token_id (input 0) = 5, "
                     "prompts[1][1] = 5; each id must be in [0, V), which is checked only once the call returns "
                     "its logits"]
    notes = first_call_notes(lambda: beam_search(table_step, None, 5, 4, 2, 3))  # beam_search's bos argument
    assert notes == ["beamsearch: raised by the model's first call, whose y_prev was bos (input 0) = 5; each id "
                     "must be in [0, V), which is checked only once the call returns its logits"]
    many = first_call_notes(lambda: beam_search_batch(table_step, None, [[i % 5, 5] for i in range(8)],
                                                      eos_token_id=4, max_steps=3, beam_size=2))
    assert many[0].startswith("beamsearch: raised by the model's first call, whose y_prev was prompts[0][1] = 5, ")
    assert "prompts[5][1] = 5, ... (8 ids);" in many[0] and "prompts[6]" not in many[0]


def test_a_later_calls_exception_gets_no_note():
    calls = []

    def step(state, y_prev):
        calls.append(y_prev.tolist())
        if len(calls) == 2:
            raise RuntimeError("the model broke")
        return TABLE[y_prev], state

    with pytest.raises(RuntimeError, match="the model broke") as info:
        beam_search_batch(step, None, [[0]], eos_token_id=4, max_steps=3, beam_size=2)
    assert len(calls) == 2 and not getattr(info.value, "__notes__", [])
