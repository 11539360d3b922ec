"""beamsearch.corpus: reading lines, decoding them with refill, the side file and resume, and the
zoo models under refill (their concat_state registrations), against independent oracles: each
line decoded alone by beam_search_batch, and the zoo Translator's fixed batches."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from beamsearch import beam_search_batch, corpus
from beamsearch.corpus import Line, decode_corpus, decode_records, load_partial, partial_path, read_lines

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]

TEXTS = ["hello", "2024-01-02", "a much longer line of text", "x", "beam search", "refill me", "zz top",
         "one more", "q", "the end"]


class TorchToy(corpus.CorpusModelBase):
    """The toy corpus model with a step function that returns torch tensors (state and logits);
    its optional members at CorpusModelBase's defaults."""

    def __init__(self) -> None:
        self.inner = corpus.toy_model()
        for name in ("bos", "eos", "max_steps", "processors", "problem", "tokens", "text"):
            setattr(self, name, getattr(self.inner, name))

    def make_state(self, items):
        return tuple(torch.from_numpy(x) for x in self.inner.make_state(items))

    def step(self, state, y_prev):
        logits, new = self.inner.step(tuple(x.numpy() for x in state), y_prev.numpy())
        return torch.from_numpy(logits), tuple(torch.from_numpy(x) for x in new)


def test_a_model_without_the_members_of_a_corpus_model_is_refused_naming_them():
    class Partial:  # the required members only, without CorpusModelBase
        bos, eos, max_steps, processors = 1, 2, 5, ()

        def problem(self, text):
            return None

        make_state = step = tokens = text = problem

    with pytest.raises(TypeError, match=r"model Partial is not a CorpusModel: it has no refill, verdicts, "
                                        r"source_length, prompt \(subclass beamsearch.corpus.CorpusModelBase"):
        next(decode_records(Partial(), [Line(0, "x")], beam_size=2))

    class Whole(corpus.CorpusModelBase, Partial):  # the defaults: prompt [bos], source length in characters
        pass

    assert Whole().prompt("abc") == [1] and Whole().source_length("abc") == 3 and Whole().verdicts is None


def toy(backend):
    return corpus.toy_model() if backend == "numpy" else TorchToy()


def alone(model, text, beam, n_best, max_steps, prefix=None):
    """The oracle: one line decoded alone by beam_search_batch (a batch of one, no refill)."""
    kwargs = {} if prefix is None else {"prefix": [model.tokens(prefix)]}
    hyps = beam_search_batch(model.step, model.make_state([{"source": text}]), [[model.bos]], beam_size=beam,
                             n_best=n_best, eos_token_id=model.eos, max_steps=max_steps, alpha=0.6, **kwargs)[0]
    return [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob, "score": h.score,
             "finished": h.finished} for h in hyps]


# ---- reading -----------------------------------------------------------------------------------------


def test_read_lines_text_lf_crlf_and_bad_utf8():
    data = io.BytesIO(b"a b\r\nplain\n\n\xff\xfeoops\ncaf\xc3\xa9 \xf0\x9f\x98\x80\r\nno newline")
    lines = list(read_lines(data))
    assert [(x.index, x.text, x.error) for x in lines] == [
        (0, "a b", None), (1, "plain", None), (2, "", None), (3, "\ufffd\ufffdoops", "line is not UTF-8 (byte 0)"),
        (4, "café 😀", None), (5, "no newline", None)]


def test_read_lines_jsonl_fields_and_errors():
    rows = [b'{"text": "x", "max_steps": 3, "prefix": "ab", "id": 7}', b'{"text": 5}', b"[1]", b"{bad",
            b'{"src": "y"}', b'{"text": "z", "max_steps": 0}', b'{"text": "z", "max_steps": true}',
            b'{"text": "z", "prefix": [1]}']
    lines = list(read_lines([r + b"\r\n" for r in rows], jsonl=True))
    assert lines[0] == Line(0, "x", None, 3, "ab", extra={"id": 7})
    assert "no string field 'text'" in lines[1].error
    assert "must be an object; got list" in lines[2].error
    assert lines[3].error.startswith("bad JSON") and lines[3].text == "{bad"
    assert "no string field 'text'" in lines[4].error
    assert list(read_lines([rows[4]], jsonl=True, field="src"))[0] == Line(0, "y")
    assert "max_steps must be an integer >= 1; got 0" in lines[5].error
    assert "got True" in lines[6].error
    assert "prefix must be a string; got [1]" in lines[7].error


def test_a_utf8_bom_is_not_part_of_the_first_line():
    bom = b"\xef\xbb\xbf"
    assert [x.text for x in read_lines([bom + b"hello\r\n", bom + b"world\n"])] == ["hello", "\ufeffworld"]
    assert list(read_lines([bom + b'{"text": "hi"}\n'], jsonl=True)) == [Line(0, "hi")]
    assert list(read_lines([bom])) == [Line(0, "")]


def test_every_way_a_json_line_can_be_bad_is_its_own_error():
    deep = b"[" * 100_000
    rows = [b'{"text": "x", "max_steps": ' + b"9" * 5000 + b"}", deep, b"[" * 101 + b"]" * 101,
            b'{"text": "x", "meta": ' + b"[" * 99 + b"]" * 99 + b"}",
            b'{"text": "x", "max_steps": -' + b"1" * 4301 + b"}",
            b'{"text": "x", "max_steps": ' + b"1" * 4300 + b"}", b'"just a string"', b'{"text": "[[[[", "id": "{{{"}',
            b'{"text": "x", "constraints": [[[[[[[["a"]]]]]]]]}']
    lines = list(read_lines(rows, jsonl=True))
    assert [x.error for x in lines[:3]] == ["bad JSON: an integer of 5000 digits (at most 4300)",
                                            "bad JSON: nested deeper than 100 arrays and objects",
                                            "bad JSON: nested deeper than 100 arrays and objects"]
    assert lines[1].text == deep.decode()  # the line itself, as read
    assert lines[3].text == "x" and lines[3].error is None  # 100 levels deep (the object and 99 arrays) is allowed
    assert lines[4].error == "bad JSON: an integer of 4301 digits (at most 4300)"
    assert lines[5].text == "x" and lines[5].max_steps == int("1" * 4300)  # read; decode_records refuses it
    assert lines[6].error == "a JSON line must be an object; got str"
    assert lines[7] == Line(7, "[[[[", extra={"id": "{{{"})  # brackets inside strings are no nesting
    assert lines[8].error.startswith("constraints must be a list whose items are non-empty texts") and \
        len(lines[8].error) < 200
    records = {r["index"]: r for r in decode_records(corpus.toy_model(), lines, beam_size=2)}
    assert records[5]["error"].startswith("max_steps must be <= 12 (the model's limit); got 1111")
    assert len(records[5]["error"]) < 120  # the number shortened
    assert records[7]["nbest"] == alone(corpus.toy_model(), "[[[[", 2, 1, 12)


# ---- decoding ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_rows", [3, 7, 100])
def test_records_equal_each_line_decoded_alone(backend, max_rows):
    model = toy(backend)
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    records = list(decode_records(model, lines, beam_size=3, n_best=2, max_rows=max_rows))
    assert sorted(r["index"] for r in records) == list(range(len(TEXTS)))
    for r in records:
        expect = alone(model, TEXTS[r["index"]], 3, 2, model.max_steps)
        assert r["input"] == TEXTS[r["index"]]
        assert [h["tokens"] for h in r["nbest"]] == [h["tokens"] for h in expect]
        assert [h["text"] for h in r["nbest"]] == [h["text"] for h in expect]
        np.testing.assert_allclose([h["logprob"] for h in r["nbest"]], [h["logprob"] for h in expect], atol=1e-9)
        np.testing.assert_allclose([h["score"] for h in r["nbest"]], [h["score"] for h in expect], atol=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_line_max_steps_and_prefix(backend):
    model = toy(backend)
    lines = [Line(0, "hello", None, 2, None), Line(1, "hello", None, None, "ab"), Line(2, "world", None, 4, "c")]
    records = {r["index"]: r for r in decode_records(model, lines, beam_size=2, max_rows=4, max_steps=9)}
    assert records[0]["nbest"] == alone(model, "hello", 2, 1, 2)
    assert records[1]["nbest"] == alone(model, "hello", 2, 1, 9, prefix="ab")
    assert records[1]["nbest"][0]["text"].startswith("ab")
    assert records[2]["nbest"] == alone(model, "world", 2, 1, 4, prefix="c")
    assert len(records[0]["nbest"][0]["tokens"]) <= 2


def test_batch_independence():
    """A line's record is the same alone and among other lines, whatever joins beside it (floats
    bit for bit: the toy model computes each row alone, tests/approx.py)."""
    model = corpus.toy_model()
    each = [next(decode_records(model, [Line(i, t)], beam_size=3, max_rows=3)) for i, t in enumerate(TEXTS)]
    together = sorted(decode_records(model, [Line(i, t) for i, t in enumerate(TEXTS)], beam_size=3, max_rows=9),
                      key=lambda r: r["index"])
    assert together == each


def test_bad_lines_become_error_records_and_the_run_goes_on():
    model = corpus.toy_model()
    lines = [Line(0, "good"), Line(1, ""), Line(2, "emoji 😀"), Line(3, "x" * 41), Line(4, "{bad", "bad JSON: x"),
             Line(5, "ok", None, 99, None), Line(6, "ok", None, None, "xyz"), Line(7, "fine")]
    records = {r["index"]: r for r in decode_records(model, lines, beam_size=2, max_rows=4)}
    assert sorted(records) == list(range(8))
    assert records[1]["error"] == "empty text"
    assert records[2]["error"] == "characters outside the vocabulary: '😀'"
    assert records[3]["error"] == "41 characters; the model reads at most 40"
    assert records[4]["error"] == "bad JSON: x"
    assert records[5]["error"] == "max_steps must be <= 12 (the model's limit); got 99"
    assert records[6]["error"] == "prefix: characters outside the target vocabulary: 'xyz'"
    for i in (0, 7):
        assert records[i]["nbest"] == alone(model, lines[i].text, 2, 1, 12)


def test_a_model_whose_check_raises_fails_that_line_alone():
    model = corpus.toy_model()
    problem = model.problem

    def fragile(text):
        if text == "boom":
            raise RuntimeError("the tokenizer broke")
        return problem(text)

    model.problem = fragile
    lines = [Line(0, "hello"), Line(1, "boom"), Line(2, "world")]
    records = {r["index"]: r for r in decode_records(model, lines, beam_size=2, max_rows=4)}
    assert records[1] == {"index": 1, "input": "boom",
                          "error": "the model cannot read this line: RuntimeError: the tokenizer broke"}
    for i in (0, 2):
        assert records[i]["nbest"] == alone(model, lines[i].text, 2, 1, 12)


@pytest.mark.parametrize("mode", ["beam", "exact"])
def test_a_search_with_no_output_is_an_error_record(mode):
    """no_repeat_ngram 1 forbids any token twice, and the prefix "aa" forces the second a: every
    continuation of the forced prefix has probability 0 (by hand: step 2 may only be a, which is
    banned). A prefix "ab" is allowed and decodes as alone."""
    model = corpus.toy_model()
    lines = [Line(0, "hello", None, None, "aa"), Line(1, "hello", None, None, "ab")]
    beam = {"seed_beam": 2} if mode == "exact" else {"beam_size": 2}  # exact's seed search has its own beam
    records = {r["index"]: r for r in decode_records(model, lines, no_repeat_ngram_size=1, mode=mode, **beam)}
    assert records[0] == {"index": 0, "input": "hello", "error": corpus.NO_OUTPUT}
    assert records[1]["nbest"][0]["tokens"][:2] == model.tokens("ab")
    if mode == "beam":
        assert records[1]["nbest"] == [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob,
                                        "score": h.score, "finished": h.finished} for h in beam_search_batch(
            model.step, model.make_state([{"source": "hello"}]), [[model.bos]], beam_size=2, eos_token_id=model.eos,
            max_steps=12, no_repeat_ngram_size=1, prefix=[model.tokens("ab")])[0]]


def test_all_lines_bad():
    records = list(decode_records(corpus.toy_model(), [Line(0, ""), Line(1, " ")], beam_size=2))
    assert records == [{"index": 0, "input": "", "error": "empty text"},
                       {"index": 1, "input": " ", "error": "empty text"}]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_steps": 0}, "max_steps must be an integer in [1, 12]"),
    ({"max_steps": 13}, "got 13"),
    ({"beam_size": 0}, "beam_size must be"),
    ({"beam_size": 2, "n_best": 3}, "n_best"),
    ({"beam_size": 3, "max_rows": 2}, "max_rows=2"),
])
def test_bad_search_arguments_before_any_model_call(kwargs, message):
    model = corpus.toy_model()
    calls = []
    model.step = lambda state, y: calls.append(1)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        next(decode_records(model, [Line(0, "hi")], **kwargs))
    assert calls == []


# ---- files -------------------------------------------------------------------------------------------


def test_decode_corpus_writes_input_order_and_removes_the_side_file(tmp_path):
    model = corpus.toy_model()
    out = tmp_path / "out.jsonl"
    lines = [Line(i, t) for i, t in enumerate(TEXTS + [""])]
    assert decode_corpus(model, lines, str(out), beam_size=3, max_rows=6) == (len(TEXTS) + 1, 1)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(len(TEXTS) + 1))
    assert records[:-1] == sorted(decode_records(model, lines[:-1], beam_size=3, max_rows=3), key=lambda r: r["index"])
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no side file, lock or temporary file left


def _finished_run(tmp_path, **search):
    """A whole run of the toy model over TEXTS to tmp_path/out.jsonl: (model, lines, out path, the
    bytes written)."""
    model = corpus.toy_model()
    out = tmp_path / "out.jsonl"
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    decode_corpus(model, lines, str(out), **search)
    return model, lines, out, out.read_bytes()


def _interrupted_run(out, calls, lines=None, **search):
    """A run over ``lines`` (default TEXTS) to ``out`` stopped by a Ctrl-C (KeyboardInterrupt) in the
    model's call number ``calls``: the Interrupted error it raises."""
    model = corpus.toy_model()
    step, seen = model.step, []

    def interrupted(state, y_prev):
        seen.append(1)
        if len(seen) == calls:
            raise KeyboardInterrupt
        return step(state, y_prev)

    model.step = interrupted
    with pytest.raises(corpus.Interrupted) as stopped:
        decode_corpus(model, lines or [Line(i, t) for i, t in enumerate(TEXTS)], str(out), **search)
    return stopped.value


def test_resume_skips_done_lines_and_mends_a_torn_record(tmp_path):
    _, lines, reference, expected = _finished_run(tmp_path, beam_size=3, max_rows=6)
    out = tmp_path / "resumed.jsonl"
    stopped = _interrupted_run(out, 9, beam_size=3, max_rows=6)
    side = partial_path(out)
    done = load_partial(side)
    assert stopped.records == len(done) > 0 and stopped.path == side and side.read_bytes().endswith(b"\n")
    with open(side, "ab") as f:  # then half of a record, as a kill mid-write leaves it
        f.write(b'{"index": 3, "inp')
    model = corpus.toy_model()
    decoded, make_state = [], model.make_state

    def noting(items):  # the sources that reach the model
        decoded.extend(i["source"] for i in items)
        return make_state(items)

    model.make_state = noting
    decode_corpus(model, lines, str(out), resume=True, beam_size=3, max_rows=6)
    assert out.read_bytes() == expected
    assert sorted(decoded) == sorted(t for i, t in enumerate(TEXTS) if i not in done)
    assert not side.exists() and not corpus.sibling(out, ".lock").exists()


def test_resume_of_a_finished_run_decodes_nothing(tmp_path):
    model, lines, out, expected = _finished_run(tmp_path, beam_size=2, max_rows=4)
    model.step = lambda state, y: pytest.fail("no line is left to decode")
    assert decode_corpus(model, lines, str(out), resume=True, beam_size=2, max_rows=4) == (len(TEXTS), 0)
    assert out.read_bytes() == expected
    other = [Line(i, t + "!") for i, t in enumerate(TEXTS)]
    with pytest.raises(corpus.OutputError, match=r"is finished \(it has no side file\), and not of this input: its "
                                                 r"record 1 is not that of line 1 \(index 0\)"):
        decode_corpus(model, other, str(out), resume=True, beam_size=2, max_rows=4)
    with pytest.raises(corpus.OutputError, match="of more lines than this input's 3"):
        decode_corpus(model, lines[:3], str(out), resume=True, beam_size=2, max_rows=4)
    assert out.read_bytes() == expected


def test_a_json_lines_other_keys_are_copied_into_its_record(tmp_path):
    """Keys other than the text and the line's options follow ``input`` in its record, error
    records included; a key that is a field of the record keeps the record's value, with a
    warning naming it; a resume whose input differs only in such a key is refused (the record
    would differ), and with the same input gives the uninterrupted output."""
    rows = [b'{"id": "a1", "text": "hello", "meta": {"k": [1, 2]}}', b'{"text": "x", "id": 7, "max_steps": 0}',
            b'{"text": "beam search"}', b'{"text": "q", "index": 99, "nbest": 1, "id": 3}', b'{"id": 4}']
    lines = list(read_lines(rows, jsonl=True))
    assert [x.extra for x in lines] == [{"id": "a1", "meta": {"k": [1, 2]}}, {"id": 7}, None,
                                       {"index": 99, "nbest": 1, "id": 3}, {"id": 4}]
    model = corpus.toy_model()
    with pytest.warns(corpus.RecordKeyWarning, match="not copied.*: 'index', 'nbest' "):
        records = sorted(decode_records(model, lines, beam_size=2), key=lambda r: r["index"])
    assert list(records[0]) == ["index", "input", "id", "meta", "nbest"] and records[0]["meta"] == {"k": [1, 2]}
    assert records[0]["nbest"] == alone(model, "hello", 2, 1, 12)
    assert records[1] == {"index": 1, "input": "x", "id": 7, "error": "max_steps must be an integer >= 1; got 0"}
    assert list(records[2]) == ["index", "input", "nbest"]
    assert list(records[3]) == ["index", "input", "id", "nbest"] and records[3]["index"] == 3
    assert records[3]["nbest"] == alone(model, "q", 2, 1, 12)
    assert records[4] == {"index": 4, "input": rows[4].decode(), "id": 4,
                          "error": "the JSON object has no string field 'text'"}
    texts = [f'{{"text": "{t}", "id": "t{i}"}}'.encode() for i, t in enumerate(TEXTS)]
    lines = list(read_lines(texts, jsonl=True))
    reference = tmp_path / "reference.jsonl"
    decode_corpus(model, lines, str(reference), beam_size=3, max_rows=6)
    assert [json.loads(x)["id"] for x in reference.read_text().splitlines()] == [f"t{i}" for i in range(len(TEXTS))]
    out = tmp_path / "out.jsonl"
    _interrupted_run(out, 12, lines, beam_size=3, max_rows=6)
    assert load_partial(partial_path(out))
    renamed = list(read_lines([t.replace(b'"id": "t', b'"id": "u') for t in texts], jsonl=True))
    _refused(partial_path(out), "was written for another input: lines 1-",
             lambda: decode_corpus(model, renamed, str(out), resume=True, beam_size=3, max_rows=6))
    decode_corpus(model, lines, str(out), resume=True, beam_size=3, max_rows=6)
    assert out.read_bytes() == reference.read_bytes()


def test_a_step_search_scorer_is_recorded_by_name_and_module_file(tmp_path):
    """decode_corpus takes a scorer function (the header holds its module and name, not the
    function) and records the SHA-256 of its module's file (this file), which a resume compares."""
    import hashlib

    def score(prompts, partials):
        return [len(s) / 10 for s in partials]

    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    out = tmp_path / "out.jsonl"
    _interrupted_run(out, 4, lines, mode="step", scorer=score, n=2, max_steps=3, max_rows=4)
    options = corpus.sidefile.SideFile.read(partial_path(out)).header["options"]
    assert options["scorer"] == f"{__name__}:{score.__qualname__}"
    with open(__file__, "rb") as source:
        assert options["scorer_sha256"] == hashlib.sha256(source.read()).hexdigest()
    assert decode_corpus(corpus.toy_model(), lines, str(out), resume=True, mode="step", scorer=score, n=2,
                         max_steps=3, max_rows=4) == (len(TEXTS), 0)


def _refused(side, match, run):
    """``run()`` raises OutputError matching ``match`` and leaves ``side`` byte for byte as it was."""
    before = side.read_bytes()
    with pytest.raises(corpus.OutputError, match=match):
        run()
    assert side.read_bytes() == before


@pytest.mark.parametrize("change, message", [
    ({"beam_size": 4}, "beam_size=3 there, 4 here"),
    ({"alpha": 1.0}, "alpha=0.6 there, 1.0 here"),
    ({"no_repeat_ngram_size": 2}, "no_repeat_ngram_size=0 there, 2 here"),
    ({"max_steps": corpus.LengthRule(1.0, 2.0)}, r"max_steps=12 there, 'LengthRule\(a=1.0, b=2.0\)' here"),
    ({"stop_sequences": ["ab"]}, r"stop_sequences=\[\] there, \['ab'\] here"),
])
def test_resume_with_other_options_is_refused_before_anything_is_written(tmp_path, change, message):
    out = tmp_path / "out.jsonl"
    _interrupted_run(out, 9, beam_size=3, max_rows=6)
    with open(partial_path(out), "ab") as f:
        f.write(b'{"index": 3, "inp')  # a torn tail is not cut by a refused resume either
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    model = corpus.toy_model()
    model.step = lambda state, y: pytest.fail("a refused resume calls no model")
    _refused(partial_path(out), "resume: .* was written with other options \\(" + message,
             lambda: decode_corpus(model, lines, str(out), resume=True, **{"beam_size": 3, "max_rows": 6, **change}))
    # max_rows is how lines are batched, not what they get: the resume goes on, equal to a clean run
    decode_corpus(corpus.toy_model(), lines, str(out), resume=True, beam_size=3, max_rows=9)
    clean = tmp_path / "clean.jsonl"
    decode_corpus(corpus.toy_model(), lines, str(clean), beam_size=3, max_rows=6)
    assert out.read_bytes() == clean.read_bytes()


def test_resume_with_another_input_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "out.jsonl"
    texts = [f"line {i}" for i in range(30)]
    _interrupted_run(out, 12, [Line(i, t) for i, t in enumerate(texts)], beam_size=2, max_rows=8)
    side = partial_path(out)
    done = load_partial(side)
    header, *rest = [json.loads(x) for x in side.read_bytes().splitlines()]
    covered = max(x["read"]["lines"] for x in rest if "read" in x)
    assert header["options"]["beam_size"] == 2 and 0 < len(done) < covered < len(texts)
    model = corpus.toy_model()
    model.step = lambda state, y: pytest.fail("a refused resume calls no model")

    def resume(texts):
        return lambda: decode_corpus(model, [Line(i, t) for i, t in enumerate(texts)], str(out), resume=True,
                                     beam_size=2, max_rows=8)

    first = min(done)  # a line with a record: named, with both texts
    changed = texts[:first] + ["other"] + texts[first + 1:]
    _refused(side, rf"written for another input: line {first + 1} \(index {first}\) is 'line {first}' there, "
                   "'other' here", resume(changed))
    pending = min(i for i in range(covered) if i not in done)  # a line read but without a record: its checkpoint
    changed = texts[:pending] + ["other"] + texts[pending + 1:]
    _refused(side, r"written for another input: lines \d+-\d+ differ \(their SHA-256\)", resume(changed))
    _refused(side, f"written for another input: of at least {covered} lines; this one has {covered - 1}",
             resume(texts[:covered - 1]))
    # the side file is not poisoned: the right input resumes to the clean run's output
    decode_corpus(corpus.toy_model(), [Line(i, t) for i, t in enumerate(texts)], str(out), resume=True, beam_size=2,
                  max_rows=8)
    clean = tmp_path / "clean.jsonl"
    decode_corpus(corpus.toy_model(), [Line(i, t) for i, t in enumerate(texts)], str(clean), beam_size=2, max_rows=8)
    assert out.read_bytes() == clean.read_bytes()


def test_a_seeded_stochastic_run_is_not_resumed_into_other_samples(tmp_path):
    """Line i's noise is that of its position in the stream, so a resume (which skips the done
    lines) would give the remaining lines other samples than the clean run: refused instead."""
    out, clean = tmp_path / "out.jsonl", tmp_path / "clean.jsonl"
    search = {"mode": "stochastic", "k": 2, "seed": 3, "max_rows": 4}
    stopped = _interrupted_run(out, 9, **search)
    assert 0 < stopped.records < len(TEXTS)
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    decode_corpus(corpus.toy_model(), lines, str(clean), **search)
    skipped = {r["index"]: r for r in decode_records(corpus.toy_model(), lines, skip=load_partial(partial_path(out))
                                                     .__contains__, **search)}
    reference = {r["index"]: r for r in map(json.loads, clean.read_text().splitlines())}
    assert any(skipped[i] != reference[i] for i in skipped)  # what a resume would have written
    _refused(partial_path(out), "resume: .* is of mode 'stochastic' with a seed, which cannot be resumed exactly",
             lambda: decode_corpus(corpus.toy_model(), lines, str(out), resume=True, **search))


def test_a_side_file_without_resume_is_refused_not_emptied(tmp_path):
    out = tmp_path / "out.jsonl"
    _interrupted_run(out, 9, beam_size=3, max_rows=6)
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    _refused(partial_path(out), r"output .*: .*out.jsonl.partial holds the records of an unfinished run; continue "
                                "it with resume, or remove that file to start again",
             lambda: decode_corpus(corpus.toy_model(), lines, str(out), beam_size=3, max_rows=6))


def test_damaged_side_files_are_refused(tmp_path):
    out = tmp_path / "out.jsonl"
    _interrupted_run(out, 9, beam_size=3, max_rows=6)
    side = partial_path(out)
    whole = side.read_bytes()
    header, first, *rest = whole.splitlines(keepends=True)
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]

    def resume():
        decode_corpus(corpus.toy_model(), lines, str(out), resume=True, beam_size=3, max_rows=6)

    record = next(x for x in [first, *rest] if b'"index"' in x)
    for damaged, message in [(header + first + b"\0" * 40 + b"\n" + b"".join(rest), "line 3 is not a record"),
                             (whole + record, "repeats the record of index"),
                             (b"".join([first, *rest]), "is not a side file of beamsearch decode"),
                             (header.replace(b'"version": 1', b'"version": 7') + first + b"".join(rest),
                              "is of side file version 7")]:
        side.write_bytes(damaged)
        _refused(side, message, resume)
        with pytest.raises(corpus.OutputError, match=message):
            load_partial(side)


def test_a_second_writer_is_refused_at_once_naming_the_holder(tmp_path):
    out = tmp_path / "out.jsonl"
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    with corpus.output_lock(out) as lock:
        assert lock == corpus.sibling(out, ".lock") and f"pid {os.getpid()} on " in lock.read_text()
        with pytest.raises(corpus.OutputError, match=rf"output '.*out.jsonl' is being written by another run \(pid "
                                                     rf"{os.getpid()} on .*; wait for it to end"):
            decode_corpus(corpus.toy_model(), lines, str(out), beam_size=2)
        assert not out.exists() and not partial_path(out).exists()
    assert not corpus.sibling(out, ".lock").exists()
    assert decode_corpus(corpus.toy_model(), lines, str(out), beam_size=2) == (len(TEXTS), 0)


def test_an_output_folder_or_missing_folder_is_refused(tmp_path):
    lines = [Line(0, "hello")]
    with pytest.raises(corpus.OutputError, match="is a folder; name a file"):
        decode_corpus(corpus.toy_model(), lines, str(tmp_path))
    with pytest.raises(corpus.OutputError, match="the folder '.*nowhere' does not exist"):
        decode_corpus(corpus.toy_model(), lines, str(tmp_path / "nowhere" / "out.jsonl"))
    assert list(tmp_path.iterdir()) == []


def test_a_lone_surrogate_is_an_error_record_written_as_valid_utf8(tmp_path):
    # json.loads('"\\ud800"') is a str holding a lone surrogate, which UTF-8 cannot write
    data = [b'{"text": "\\ud800"}\n', b'{"text": "ok", "prefix": "a\\udfff"}\n', b'{"text": "smile \\ud83d\\ude00"}\n',
            b'{"text": "hello"}\n']
    lines = list(read_lines(data, jsonl=True))
    assert lines[0].error == "text has a lone surrogate (\\ud800 at character 0), which is not a character of any text"
    assert lines[1].error.startswith("prefix has a lone surrogate (\\udfff at character 1)")
    assert lines[2].text == "smile \U0001F600" and lines[2].error is None  # a pair is one character
    out = tmp_path / "out.jsonl"
    assert decode_corpus(corpus.toy_model(), lines, str(out), beam_size=2) == (4, 3)
    records = [json.loads(x) for x in out.read_bytes().decode("utf-8").splitlines()]  # strict UTF-8
    assert records[0] == {"index": 0, "input": "\ud800", "error": lines[0].error}
    assert b'"input": "\\ud800"' in out.read_bytes()
    assert records[3]["nbest"] == alone(corpus.toy_model(), "hello", 2, 1, 12)
class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line():
    """On a terminal each update redraws the line (``\r``); to a file or pipe each is a line."""
    for out, first in ((Terminal(), "\r1/4 inputs"), (io.StringIO(), "1/4 inputs")):
        progress = corpus.Progress(4, out, every=0.0)
        progress.start -= 2.0  # two seconds ago: 1 input and 3 tokens -> 0.5 inputs/s, 1.5 tokens/s, 6 s left
        progress.update({"nbest": [{"tokens": [3, 4, 2]}]})
        assert out.getvalue().startswith(f"{first}, 0.5 inputs/s, 1.5 tokens/s, ETA 0:06")
        progress.update({"error": "x"})
        assert "2/4 inputs" in out.getvalue()
        progress.close()
        assert out.getvalue().endswith("\n")
        shown = out.getvalue()
        if isinstance(out, Terminal):
            assert shown.count("\r") == 3 and shown.count("\n") == 1
        else:
            assert "\r" not in shown and [x[:10] for x in shown.splitlines()] == ["1/4 inputs", "2/4 inputs",
                                                                                  "2/4 inputs"]
    unknown = corpus.Progress(None, io.StringIO())
    assert "ETA" not in unknown.line(unknown.start + 1)


# ---- zoo models under refill ---------------------------------------------------------------------------

ZOO_TEXTS = ["march 3 '87", "03/03/87", "7 DEC '53", "june 14 '13", "3rd of March 1987", "not a date at all",
             "2001-12-31", "Tuesday, the 4th of July 1776", "12.10.1999", "31 feb 2003", "aug 9", "1/2/3",
             "the nineteenth of november, two thousand and four", "1999", "Sept 30 1950", "05-06-2007"]


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("name", ["seq2seq", "transformer"])
def test_zoo_refill_equals_the_fixed_batch_translator(name):
    pytest.importorskip("safetensors")
    from beamsearch.refill import decode_stream
    from beamsearch.zoo.corpus_model import zoo_model
    from beamsearch.zoo.translator import Translator

    torch.set_num_threads(1)
    fixed = Translator.load(name).beam(ZOO_TEXTS, beam_size=3, n_best=2)
    model = zoo_model(name)
    model.verdicts = None  # the searches alone (the verdict: tests/cli/test_zoo.py, decode agrees with translate)
    records = {r["index"]: r for r in decode_records(model, [Line(i, t) for i, t in enumerate(ZOO_TEXTS)],
                                                    beam_size=3, n_best=2, max_rows=9)}
    for i, outputs in enumerate(fixed):
        got = records[i]["nbest"]
        assert [h["tokens"] for h in got] == [o.hypothesis.tokens for o in outputs], ZOO_TEXTS[i]
        assert [h["text"] for h in got] == [o.text for o in outputs]
        # padding to another source length changes float sums in the last bits only
        np.testing.assert_allclose([h["logprob"] for h in got], [o.hypothesis.logprob for o in outputs], atol=1e-4)
    # the stream did mix cohorts of different source lengths and (transformer) decoder steps
    items = [{"prompt": [model.bos], "source": t} for t in ZOO_TEXTS]
    stream = decode_stream(model.step, model.make_state, items, max_rows=6, beam_size=3, eos_token_id=model.eos,
                           max_steps=model.max_steps, logits_processors=list(model.processors))
    assert len(list(stream)) == len(ZOO_TEXTS) and stream.stats.mixed_calls > 0


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_transformer_left_padded_cache_gives_the_same_logits():
    """Rows joined at different steps: the padded columns of the self-attention cache are masked
    and each row keeps its own position, so the next logits equal those of each row alone."""
    pytest.importorskip("safetensors")
    from beamsearch.core.state import concat_state
    from beamsearch.zoo.translator import Translator

    tr = Translator.load("transformer")
    model = tr.model
    with torch.no_grad():
        a = model.init_state(tr.encode(["march 3 '87"]))
        for token in (model.cfg.bos, 5, 7):  # row a has 3 cached steps
            _, a = model.step(a, torch.tensor([token]))
        b = model.init_state(tr.encode(["7 DEC 1953, a longer source"]))  # 0 steps, longer source
        joined = concat_state([a, b])
        assert joined.self_k[0].shape[2] == 3 and joined.self_pad.tolist() == [[False] * 3, [True] * 3]
        assert joined.pos.tolist() == [3, 0]
        y = torch.tensor([9, model.cfg.bos])
        both, _ = model.step(joined, y)
        first, _ = model.step(a, y[:1])
        second, _ = model.step(b, y[1:])
    torch.testing.assert_close(both, torch.cat([first, second]), atol=1e-5, rtol=1e-5)


def test_a_verdicts_hook_of_two_parameters_is_called_without_max_steps():
    """A model written for ``verdicts(texts, hypotheses)`` (before the hook took ``max_steps``)
    still decodes: its hook gets the two arguments; one of three gets the lines' max_steps."""
    from beamsearch import corpus

    seen = []

    class Two(type(corpus.toy_model())):
        def verdicts(self, texts, hypotheses):
            seen.append(list(texts))
            return ["no" if t == "ab" else None for t in texts]

    class Three(type(corpus.toy_model())):
        def verdicts(self, texts, hypotheses, max_steps):
            seen.append(list(max_steps))
            return [None] * len(texts)

    records = list(corpus.decode_records(Two(), corpus.read_lines([b"abc", b"ab"]), max_steps=3))
    assert [r.get("error") for r in records] == [None, "no"] and sorted(sum(seen, [])) == ["ab", "abc"]
    seen.clear()
    list(corpus.decode_records(Three(), corpus.read_lines([b"abc", b"ab"]), max_steps=3))
    assert sum(seen, []) == [3, 3]
