"""`beamsearch decode --model speech`: JSON lines naming audio files decoded by the shipped speech
model (records equal `beamsearch transcribe --json` of the same files, on espeak-ng speech), per-line
errors, resume after a cut output, the flags transcribe takes (and those that do not apply), and Ray."""

from __future__ import annotations

import json

import pytest

from beamsearch.cli import main
from beamsearch.corpus import partial_path
from beamsearch.corpus import speech_lines as speech_corpus
from tests.cli.test_transcribe import RATE, SAID, StandIn, espeak, needs_model, wav

pytest.importorskip("soundfile")


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def jsonl(path, *objects):
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return str(path)


def assert_same_nbest(got, want):
    """Texts, labels and word times exactly; scores to float32's rounding (a batch of several files
    is encoded with other shapes than one file alone)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g["text"] == w["text"] and g["labels"] == w["labels"]
        assert [(x["word"], x["start"], x["end"]) for x in g["words"]] == \
            [(x["word"], x["start"], x["end"]) for x in w["words"]]
        assert [x["confidence"] for x in g["words"]] == pytest.approx([x["confidence"] for x in w["words"]], abs=1e-3)
        for key in ("score", "acoustic_score", "lm_score", "word_score", "hotword_bonus"):
            assert g[key] == pytest.approx(w[key], rel=1e-5, abs=1e-5), key


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spoken")
    return [espeak(folder / f"{i}.wav", voice, text) for i, (voice, text) in enumerate(SAID)]


@needs_model
@pytest.mark.parametrize("flags", [[], ["--head", "tdt", "--beam-size", "4", "--n-best", "2", "--alpha", "0.3",
                                        "--hotwords", "half past,fourth"], ["--mode", "greedy"]])
def test_records_equal_transcribe_json_of_the_same_files(spoken, flags, tmp_path, capsys):
    # espeak-ng speech by voices training never used; a bad line between them
    src = jsonl(tmp_path / "in.jsonl", *({"audio": f, "id": i} for i, f in enumerate(spoken[:2])),
                {"audio": str(tmp_path / "gone.wav")}, *({"audio": f} for f in spoken[2:]))
    out = tmp_path / "out.jsonl"
    assert main(["decode", "--model", "speech", "--jsonl", "--input", src, "--output", str(out), *flags]) == 1
    assert main(["transcribe", "--json", *spoken, *(["--greedy"] if flags == ["--mode", "greedy"] else flags)]) == 0
    want = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    records = read(out)
    assert [r["index"] for r in records] == [0, 1, 2, 3, 4]
    assert records[2] == {"index": 2, "input": "", "error": f"{tmp_path / 'gone.wav'}: no such file"}
    decoded = records[:2] + records[3:]
    assert [r["audio"] for r in decoded] == [w["file"] for w in want] == spoken
    assert [r.get("id") for r in decoded] == [0, 1, None, None]
    for r, w in zip(decoded, want, strict=True):
        assert r["text"] == w["text"]
        assert_same_nbest(r["nbest"], w["nbest"])


@pytest.fixture
def stand_in(monkeypatch):
    model = StandIn()
    monkeypatch.setattr(speech_corpus, "speech_lines", lambda folder=None: speech_corpus.SpeechLines(model))
    return model


def test_a_rerun_with_resume_skips_the_lines_already_in_the_cut_output(stand_in, tmp_path, capsys):
    paths = [wav(tmp_path / f"{i}.wav", seconds=i + 1, seed=i) for i in range(4)]
    src = jsonl(tmp_path / "in.jsonl", *({"audio": p} for p in paths))
    common = ["decode", "--model", "speech", "--jsonl", "--input", src, "--lm", "none"]
    whole = tmp_path / "whole.jsonl"
    assert main([*common, "--output", str(whole)]) == 0
    out = tmp_path / "out.jsonl"
    calls = len(stand_in.calls)

    def cut(audio, **options):  # killed at its third model call: two lines are in the side file
        if len(stand_in.calls) == calls + 2:
            raise KeyboardInterrupt
        return StandIn.transcribe(stand_in, audio, **options)

    stand_in.transcribe = cut
    assert main([*common, "--output", str(out), "--max-rows", "1"]) == 130
    assert "2 records kept" in capsys.readouterr().err and partial_path(out).exists() and not out.exists()
    assert main([*common, "--output", str(out), "--head", "tdt", "--resume"]) == 2  # other options: refused
    assert "other options" in capsys.readouterr().err
    del stand_in.transcribe
    stand_in.calls.clear()
    assert main([*common, "--output", str(out), "--resume"]) == 0
    assert [sizes for sizes, _ in stand_in.calls] == [[3 * RATE, 4 * RATE]]  # the two lines not yet decoded
    assert out.read_bytes() == whole.read_bytes() and not partial_path(out).exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-steps", "5"], "--max-steps does not apply to --model speech"),
    (["--no-repeat-ngram-size", "2"], "--no-repeat-ngram-size does not apply to --model speech"),
    (["--mode", "diverse"], "--model speech decodes with --mode beam or greedy"),
    (["--max-tokens", "100"], "--max-tokens does not apply to --model speech"),
    (["--mode", "greedy", "--lm", "none"], "--mode greedy takes no --lm"),
    (["--n-best", "3", "--beam-size", "2"], "--n-best must be <= --beam-size=2; got 3"),
    (["--hotwords", "a,,b"], "--hotwords has an empty phrase"),
    (["--max-chunk-seconds", "2"], "--max-chunk-seconds must be > 4"),
    (["--trace", "t.html"], "--trace with --model speech"),
])
def test_usage_errors_are_one_line_exit_2(flags, message, stand_in, tmp_path, capsys):
    src = jsonl(tmp_path / "in.jsonl", {"audio": "a.wav"})
    args = ["decode", "--model", "speech", "--jsonl", "--input", src, "--output", str(tmp_path / "o.jsonl")]
    assert main([*args, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1 and not stand_in.calls


def test_greedy_with_one_beam_and_one_output_is_greedy_as_for_text_models(stand_in, tmp_path, capsys):
    """``--mode greedy --beam-size 1 --n-best 1`` is greedy's one row and one output, as given: the
    text models accept it (the toy model here), and so does the speech model, whose search then gets
    what ``--mode greedy`` alone gives it; a wider beam is still refused by both."""
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    toy = ["decode", "--model", "_toy", "--input", str(text), "--output", "-", "--max-steps", "3", "--mode", "greedy"]
    assert main([*toy, "--beam-size", "1", "--n-best", "1"]) == 0
    assert main(toy) == 0
    one, alone = capsys.readouterr().out.splitlines()
    assert one == alone
    src = jsonl(tmp_path / "in.jsonl", {"audio": wav(tmp_path / "a.wav")})
    args = ["decode", "--model", "speech", "--jsonl", "--input", src, "--mode", "greedy"]
    outs = [tmp_path / "one.jsonl", tmp_path / "alone.jsonl"]
    assert main([*args, "--output", str(outs[0]), "--beam-size", "1", "--n-best", "1"]) == 0
    assert main([*args, "--output", str(outs[1])]) == 0
    assert stand_in.calls[0] == stand_in.calls[1] and stand_in.calls[0][1]["beam_size"] is None
    assert read(outs[0]) == read(outs[1])
    assert main([*toy, "--beam-size", "2"]) == 2
    assert "--mode greedy does not take --beam-size" in capsys.readouterr().err
    assert main([*args, "--output", str(outs[0]), "--beam-size", "2"]) == 2
    assert capsys.readouterr().err == ("beamsearch: error: --mode greedy takes no --beam-size (greedy decoding keeps "
                                       "one hypothesis, without LM or hotwords)\n")


def test_speech_flags_are_refused_for_a_text_model(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", "-", "--head", "tdt"]) == 2
    assert "--head applies to --model speech; got --model _toy" in capsys.readouterr().err


def test_an_lm_that_cannot_be_read_is_one_line_exit_1(stand_in, tmp_path, capsys):
    src = jsonl(tmp_path / "in.jsonl", {"audio": "a.wav"})
    assert main(["decode", "--model", "speech", "--jsonl", "--input", src, "--output", "-", "--lm",
                 str(tmp_path / "no.arpa")]) == 1
    assert capsys.readouterr().err.startswith(f"beamsearch: error: cannot read --lm {tmp_path / 'no.arpa'}")


@needs_model
def test_decode_ray_writes_what_the_single_process_command_writes(spoken, tmp_path):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    src = jsonl(tmp_path / "in.jsonl", *({"audio": f} for f in spoken), {"audio": str(tmp_path / "gone.wav")})
    alone, spread = tmp_path / "alone.jsonl", tmp_path / "ray.jsonl"
    common = ["decode", "--model", "speech", "--jsonl", "--input", src, "--beam-size", "4", "--threads", "1"]
    assert main([*common, "--output", str(alone)]) == 1
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        assert main([*common, "--output", str(spread), "--ray", "--ray-workers", "2", "--ray-batch", "2"]) == 1
    finally:
        ray.shutdown()
    got, want = read(spread), read(alone)
    assert [r.get("error") for r in got] == [r.get("error") for r in want]
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys() and g.get("text") == w.get("text")
        if "nbest" in w:
            assert_same_nbest(g["nbest"], w["nbest"])


def test_progress_counts_the_files_and_their_labels(stand_in, tmp_path, capsys):
    src = jsonl(tmp_path / "in.jsonl", *({"audio": wav(tmp_path / f"{i}.wav", seed=i)} for i in range(2)))
    assert main(["decode", "--model", "speech", "--jsonl", "--input", src, "--output", "-", "--progress",
                 "--lm", "none"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["s2 r0", "s2 r0"]
    last = err.splitlines()[-1]  # the stand-in's hypotheses have 5 labels each
    assert last.startswith("2/2 inputs") and float(last.split(", ")[2].split()[0]) > 0, last
