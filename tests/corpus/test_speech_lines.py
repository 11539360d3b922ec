"""The speech model over a corpus of audio lines (SpeechLines): lines batched into model calls by
their chunks, per-line errors (unreadable files, lines without audio, a model that refuses one
file of a batch), the search's checks, and the corpus machinery's seam for it (decode_records,
decode_corpus with resume); with a stand-in model that records its calls (no torch)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from beamsearch import corpus
from beamsearch.corpus.speech_lines import SpeechLines, transcribe_audio, transcribe_file
from tests.cli.test_transcribe import RATE, StandIn, wav

pytest.importorskip("soundfile")


class Refusing(StandIn):
    """A stand-in that refuses (ValueError) any call holding an utterance of ``bad`` samples."""

    def __init__(self, bad):
        super().__init__()
        self.bad = bad

    def transcribe(self, audio, **options):
        if any(a.size == self.bad for a in audio):
            self.calls.append(([a.size for a in audio], "refused"))
            raise ValueError("too short")
        return super().transcribe(audio, **options)


def lines_of(*objects):
    return list(corpus.read_lines([json.dumps(o).encode() for o in objects], jsonl=True))


def files(tmp_path, *seconds):
    return [wav(tmp_path / f"{i}.wav", s, seed=i) for i, s in enumerate(seconds)]


def test_lines_join_a_model_call_while_their_chunks_fit_max_rows(tmp_path):
    paths = files(tmp_path, 2, 3, 45, 1)  # 45 s: three chunks of at most 20 s
    model = StandIn()
    run = SpeechLines(model).line_search(max_rows=3, lm="none")
    records = list(run.records(lines_of(*({"audio": p} for p in paths))))
    sizes = [sizes for sizes, _ in model.calls]
    assert [len(s) for s in sizes] == [2, 3, 1]  # 1 + 1 chunks; the 3 of the long file alone; then the last
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    for r, p in zip(records, paths, strict=True):  # each record is that file's transcription alone
        assert r["audio"] == p and r["nbest"] == transcribe_file(StandIn(), p, {"n_best": 1})
        assert r["text"] == r["nbest"][0]["text"]
    assert records[2]["nbest"][0]["score"] == pytest.approx(-3.0)  # three chunks of -1.0, joined


def test_a_line_that_cannot_be_transcribed_is_an_error_record_and_the_others_go_on(tmp_path):
    good, short = files(tmp_path, 2, 1)
    (tmp_path / "text.wav").write_text("not audio")
    lines = lines_of({"audio": good, "id": "x"}, {"audio": str(tmp_path / "none.wav")},
                     {"audio": str(tmp_path / "text.wav")}, {"text": "hello"}, {"image": good}, {"audio": short},
                     {"audio": good, "text": "said"}, {"audio": good})
    lines.insert(3, corpus.Line(8, "{bad", "bad JSON: here"))
    model = Refusing(bad=RATE)  # refuses the 1 s file: its batch is decoded again line by line
    records = list(SpeechLines(model).line_search(lm="none").records(lines))
    by_index = {r["index"]: r for r in records}
    assert set(by_index) == {0, 1, 2, 3, 4, 5, 6, 7, 8}
    assert by_index[0]["id"] == "x" and by_index[0]["text"] == "s2 r0" and by_index[7]["text"] == "s2 r0"
    errors = {i: r["error"] for i, r in by_index.items() if "error" in r}
    assert set(errors) == {1, 2, 3, 4, 5, 6, 8}
    assert errors[1].endswith("none.wav: no such file") and "cannot read audio" in errors[2]
    assert "names no audio file" in errors[3] and "reads no image files" in errors[4]
    assert errors[5] == "the model cannot transcribe it: too short" and "reads no text" in errors[6]
    assert errors[8] == "bad JSON: here"
    assert [s for s, how in model.calls if how == "refused"] == [[2 * RATE, RATE, 2 * RATE], [RATE]]


@pytest.mark.parametrize(("keywords", "message"), [
    ({"mode": "diverse"}, "mode must be 'beam' or 'greedy'"),
    ({"max_tokens": 100}, "max_tokens does not apply"),
    ({"max_rows": 0}, "max_rows must be >= 1"),
    ({"n_best": 0}, "n_best must be >= 1"),
    ({"head": "rnnt"}, "head must be 'ctc' or 'tdt'; got 'rnnt'"),
    ({"beam_size": 0}, "beam_size must be >= 1"),
    ({"beam_size": 2, "n_best": 3}, "n_best must be <= beam_size=2; got 3"),
    ({"max_chunk_seconds": 3}, "max_chunk_seconds must be > 4"),
    ({"mode": "greedy", "lm": "none"}, "takes no lm"),
    ({"mode": "greedy", "alpha": 0.3}, "takes no alpha"),
    ({"mode": "greedy", "n_best": 2}, "takes no n_best > 1"),
])
def test_bad_keywords_are_refused_by_name(keywords, message):
    with pytest.raises(ValueError, match=message):
        SpeechLines(StandIn()).line_search(**keywords)
    with pytest.raises(TypeError, match="no_repeat_ngram_size"):
        SpeechLines(StandIn()).line_search(no_repeat_ngram_size=2)


def test_greedy_and_beam_reach_the_model_as_transcribe_takes_them(tmp_path):
    (path,) = files(tmp_path, 2)
    model = StandIn()
    lines = lines_of({"audio": path})
    list(corpus.decode_records(SpeechLines(model), lines, mode="greedy", head="tdt"))
    list(corpus.decode_records(SpeechLines(model), lines, beam_size=4, n_best=2, lm="none", alpha=0.2, beta=1.5,
                               hotwords=["half past"], hotword_weight=3.0))
    assert model.calls[0][1] == {"head": "tdt", "n_best": 1, "beam_size": None}
    assert model.calls[1][1] == {"head": "ctc", "n_best": 2, "beam_size": 4, "alpha": 0.2, "beta": 1.5,
                                 "hotwords": ["half past"], "hotword_weight": 3.0, "lm": None}


def test_decode_corpus_resumes_a_speech_run_and_refuses_other_options(tmp_path):
    paths = files(tmp_path, 1, 2, 3)
    lines = lines_of(*({"audio": p} for p in paths))
    out = tmp_path / "out.jsonl"
    corpus.decode_corpus(SpeechLines(StandIn()), lines, out, lm="none")
    whole = out.read_text()

    class Cut(StandIn):  # killed after its first model call
        def transcribe(self, audio, **options):
            if self.calls:
                raise KeyboardInterrupt
            return super().transcribe(audio, **options)

    out.unlink()
    with pytest.raises(corpus.Interrupted):
        corpus.decode_corpus(SpeechLines(Cut()), lines, out, lm="none", max_rows=1)
    assert len(corpus.load_partial(corpus.partial_path(out))) == 1
    with pytest.raises(corpus.OutputError, match="other options.*head"):
        corpus.decode_corpus(SpeechLines(StandIn()), lines, out, resume=True, lm="none", head="tdt")
    model = StandIn()
    assert corpus.decode_corpus(SpeechLines(model), lines, out, resume=True, lm="none") == (3, 0)
    assert [sizes for sizes, _ in model.calls] == [[2 * RATE, 3 * RATE]]  # only the lines not yet decoded
    assert out.read_text() == whole


def test_transcribe_audio_splits_one_call_back_into_recordings():
    model = StandIn()
    audio = [np.full(RATE * s, 0.1, np.float32) for s in (2, 25, 1)]  # 25 s: two chunks
    got = transcribe_audio(model, audio, {"n_best": 2})
    (sizes, _), = model.calls  # one call of the four chunks
    first, second = (f"s{round(n / RATE)}" for n in sizes[1:3])
    assert len(sizes) == 4 and sizes[1] + sizes[2] == 25 * RATE and sizes[1] <= 20 * RATE
    # each recording's 2 best joins of its chunks' hypotheses (scores -1 and -2 per chunk)
    assert [[h["text"] for h in nbest] for nbest in got] == [
        ["s2 r0", "s2 r1"], [f"{first} r0 {second} r0", f"{first} r1 {second} r0"], ["s1 r0", "s1 r1"]]
