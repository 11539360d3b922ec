"""`beamsearch transcribe`: flags to the model's keywords, usage errors, per-file errors, chunked files
(word times shifted by each chunk's start, n-best joins against enumerating every join), the output
formats; these with a stand-in model that records its calls. The shipped model end to end on speech
synthesized by espeak-ng is at the end."""

from __future__ import annotations

import importlib.util
import itertools
import json
import pathlib
import random
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from beamsearch.cli import main
from beamsearch.cli import transcribe as cli
from beamsearch.corpus.speech_lines import join_chunks
from beamsearch.speech import NgramLM, wer
from beamsearch.speech.audio import read_audio

sf = pytest.importorskip("soundfile")
pytest.importorskip("soxr")

RATE = 16000
E2E_WER = 0.25  # four sentences (17 words) by held-out voices, beam 8 + the domain LM: at most 4 words wrong


class StandIn:
    """A SpeechModel-like stand-in (only for argument handling): per audio, ``n_best`` hypotheses
    whose words say the chunk's length, at times 0.5-1.0 s and 1.0-1.5 s of the chunk."""

    sample_rate = RATE
    frame_duration = 0.04

    def __init__(self):
        self.calls = []

    def transcribe(self, audio, **options):
        self.calls.append(([a.size for a in audio], options))
        out = []
        for a in audio:
            seconds = f"s{round(a.size / RATE)}"
            hyps = []
            for rank in range(options.get("n_best", 1)):
                words = [SimpleNamespace(text=seconds, start=0.5, end=1.0, confidence=0.9),
                         SimpleNamespace(text=f"r{rank}", start=1.0, end=1.5, confidence=0.5)]
                hyps.append(SimpleNamespace(text=f"{seconds} r{rank}", words=words, tokens=[1] * 5,
                                            score=-1.0 - rank, acoustic_score=-2.0 - rank, lm_score=0.5,
                                            word_score=0.5, hotword_bonus=0.0))
            out.append(hyps)
        return out


@pytest.fixture
def model(monkeypatch):
    stand_in = StandIn()
    monkeypatch.setattr(cli, "load_model", lambda path: stand_in)
    return stand_in


def wav(path, seconds=2.0, rate=RATE, seed=0):
    rng = np.random.default_rng(seed)
    sf.write(path, rng.uniform(-0.3, 0.3, int(seconds * rate)).astype(np.float32), rate, subtype="FLOAT")
    return str(path)


def test_the_flags_reach_the_model_as_its_keywords(model, tmp_path, capsys):
    f = wav(tmp_path / "a.wav")
    assert main(["transcribe", f]) == 0
    sizes, options = model.calls[-1]
    assert sizes == [2 * RATE] and set(options) == {"head", "n_best", "lm"}
    assert options["head"] == "ctc" and options["n_best"] == 1 and isinstance(options["lm"], NgramLM)
    assert "march" in options["lm"].words  # the shipped domain LM
    assert capsys.readouterr().out == "s2 r0\n"
    assert main(["transcribe", f, "--head", "tdt", "--beam-size", "4", "--alpha", "0.3", "--beta", "2",
                 "--hotwords", " june  fifth ,half past", "--hotword-weight", "3", "--n-best", "2"]) == 0
    _, options = model.calls[-1]
    assert {k: v for k, v in options.items() if k != "lm"} == {
        "head": "tdt", "n_best": 2, "beam_size": 4, "alpha": 0.3, "beta": 2.0, "hotwords": ["june fifth", "half past"],
        "hotword_weight": 3.0}
    assert main(["transcribe", f, "--greedy"]) == 0
    assert model.calls[-1][1] == {"head": "ctc", "n_best": 1, "beam_size": None}  # no LM
    assert main(["transcribe", f, "--lm", "none"]) == 0
    assert model.calls[-1][1]["lm"] is None
    arpa = tmp_path / "lm.arpa"
    arpa.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n-1\tx\n\\end\\\n", encoding="utf-8")
    assert main(["transcribe", f, "--lm", str(arpa)]) == 0
    assert model.calls[-1][1]["lm"].words == ("<s>", "</s>", "x", "<unk>")


@pytest.mark.parametrize("flags, message", [
    (["--n-best", "0"], "--n-best must be >= 1; got 0"),
    (["--beam-size", "0"], "--beam-size must be >= 1; got 0"),
    (["--beam-size", "2", "--n-best", "3"], "--n-best must be <= --beam-size=2; got 3"),
    (["--max-chunk-seconds", "4"], "--max-chunk-seconds must be > 4; got 4"),
    (["--alpha", "nan"], "--alpha must be a finite number; got nan"),
    (["--hotword-weight", "inf", "--hotwords", "a"], "--hotword-weight must be a finite number; got inf"),
    (["--greedy", "--beam-size", "3"], "--greedy takes no --beam-size (greedy decoding keeps one hypothesis, "
                                       "without LM or hotwords)"),
    (["--greedy", "--lm", "none"], "--greedy takes no --lm (greedy decoding keeps one hypothesis, without LM or "
                                   "hotwords)"),
    (["--greedy", "--hotwords", "a"], "--greedy takes no --hotwords (greedy decoding keeps one hypothesis, without "
                                      "LM or hotwords)"),
    (["--greedy", "--n-best", "2"], "--greedy takes no --n-best (greedy decoding keeps one hypothesis, without LM "
                                    "or hotwords)"),
    (["--lm", "none", "--alpha", "1"], "--alpha and --beta weigh the LM: leave them out with --lm none"),
    (["--hotword-weight", "2"], "--hotword-weight weighs --hotwords: give them too"),
    (["--hotwords", "a,,b"], "--hotwords has an empty phrase: 'a,,b' (phrases are separated by ',')"),
    (["--head", "rnnt"], "argument --head: invalid choice: 'rnnt'"),
    (["--trace", "/no/such/p.html"], "--trace must be a file in an existing folder; got '/no/such/p.html'"),
    (["--trace", ""], "--trace must be a file in an existing folder; got ''"),
    (["--trace", "/"], "--trace must be a file in an existing folder; got '/'"),
])
def test_usage_errors_are_one_line_and_exit_2_before_the_model_loads(flags, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "load_model", lambda path: pytest.fail("loaded the model"))
    assert main(["transcribe", wav(tmp_path / "a.wav"), *flags]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err.startswith("beamsearch") and message in out.err, out.err


def test_an_lm_that_cannot_be_loaded_is_one_line_exit_1(tmp_path, capsys, model):
    f = wav(tmp_path / "a.wav")
    missing = tmp_path / "none.arpa"
    assert main(["transcribe", f, "--lm", str(missing)]) == 1
    assert capsys.readouterr().err == f"beamsearch: error: cannot read --lm {missing}: No such file or directory\n"
    bad = tmp_path / "bad.arpa"
    bad.write_text("hello\n", encoding="utf-8")
    assert main(["transcribe", f, "--lm", str(bad)]) == 1
    assert capsys.readouterr().err == (f"beamsearch: error: --lm {bad} is no ARPA file: {bad}: no \\data\\ header or "
                                       "no 1-grams: not an ARPA file\n")



def test_a_model_that_cannot_be_loaded_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    import beamsearch.zoo.speech

    def broken(path):
        raise ValueError(f"{path}/config.json: hidden must be an int >= 1; got -3")

    monkeypatch.setattr(beamsearch.zoo.speech, "load", broken, raising=False)
    assert main(["transcribe", wav(tmp_path / "a.wav"), "--model", "/m"]) == 1
    assert capsys.readouterr().err == "beamsearch: error: /m/config.json: hidden must be an int >= 1; got -3\n"


def test_files_that_cannot_be_read_are_one_line_each_and_the_others_go_on(model, tmp_path, capsys):
    good, missing, silent = wav(tmp_path / "good.wav"), str(tmp_path / "missing.wav"), str(tmp_path / "silent.wav")
    sf.write(silent, np.zeros(RATE, np.float32), RATE)
    assert main(["transcribe", missing, good, silent]) == 1
    out = capsys.readouterr()
    assert out.out == f"{good}\ts2 r0\n"
    assert out.err == (f"beamsearch: error: {missing}: no such file\n"
                       f"beamsearch: error: {silent}: the audio is silent (all zero; below -60 dBFS)\n"
                       "beamsearch: 2 of 3 files failed\n")
    assert main(["transcribe", "--json", missing, good]) == 1
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records[0] == {"file": missing, "error": f"{missing}: no such file"}
    assert records[1]["file"] == good and records[1]["text"] == "s2 r0"


def test_a_long_file_is_cut_into_chunks_and_its_word_times_shifted(model, tmp_path, capsys):
    rng = np.random.default_rng(1)
    audio = rng.uniform(-0.3, 0.3, 45 * RATE).astype(np.float32)
    audio[18 * RATE: 18 * RATE + 800] = 0.0  # a 50 ms pause 2 s before the 20 s limit
    path = tmp_path / "long.wav"
    sf.write(path, audio, RATE, subtype="FLOAT")
    assert main(["transcribe", str(path), "--json", "--max-chunk-seconds", "20"]) == 0
    sizes, _ = model.calls[-1]
    # the quietest 400-sample window lies in the pause: the latest starts at 18 s + 400, its centre + 200
    first = 18 * RATE + 600
    assert sizes[0] == first and sum(sizes) == audio.size and len(sizes) == 3 and max(sizes) <= 20 * RATE
    record = json.loads(capsys.readouterr().out)
    starts = [0.0, first / RATE, (first + sizes[1]) / RATE]
    assert record["text"] == f"s{round(sizes[0] / RATE)} r0 s{round(sizes[1] / RATE)} r0 s{round(sizes[2] / RATE)} r0"
    assert [w["start"] for w in record["nbest"][0]["words"]] == pytest.approx(
        [x for s in starts for x in (s + 0.5, s + 1.0)], abs=1e-3)
    assert record["nbest"][0]["score"] == pytest.approx(-3.0)  # three chunks of -1.0


@pytest.mark.parametrize("seed", range(10))
def test_n_best_joins_are_the_best_sums_over_every_join(seed):
    rng = random.Random(seed)
    per_chunk = []
    for c in range(rng.randint(1, 4)):
        scores = sorted((rng.uniform(-10, 0) for _ in range(rng.randint(1, 4))), reverse=True)
        per_chunk.append([{"text": f"c{c}h{i}", "score": s, "acoustic_score": s, "lm_score": 0.0, "word_score": 0.0,
                           "hotword_bonus": 0.0, "labels": 1, "words": []} for i, s in enumerate(scores)])
    n = rng.randint(1, 6)
    got = join_chunks(per_chunk, n)
    every = sorted(((sum(h["score"] for h in combo), " ".join(h["text"] for h in combo))
                    for combo in itertools.product(*per_chunk)), reverse=True)
    assert [h["text"] for h in got] == [text for _, text in every[:n]]  # random floats: no ties
    assert [h["score"] for h in got] == pytest.approx([score for score, _ in every[:n]])
    assert all(h["labels"] == len(per_chunk) for h in got)


def test_text_timestamps_n_best_and_several_files(model, tmp_path, capsys):
    a, b = wav(tmp_path / "a.wav"), wav(tmp_path / "b.wav", seconds=3.0)
    assert main(["transcribe", a, "--timestamps"]) == 0
    assert capsys.readouterr().out == "s2 r0\n      0.50     1.00  s2\n      1.00     1.50  r0\n"
    assert main(["transcribe", a, b, "--n-best", "2"]) == 0
    assert capsys.readouterr().out == (f"{a}\t1\t-1.0000\ts2 r0\n{a}\t2\t-2.0000\ts2 r1\n"
                                       f"{b}\t1\t-1.0000\ts3 r0\n{b}\t2\t-2.0000\ts3 r1\n")
    assert main(["transcribe", a, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {"file": a, "text": "s2 r0", "nbest": [{
        "text": "s2 r0", "score": -1.0, "acoustic_score": -2.0, "lm_score": 0.5, "word_score": 0.5,
        "hotword_bonus": 0.0, "labels": 5,
        "words": [{"word": "s2", "start": 0.5, "end": 1.0, "confidence": 0.9},
                  {"word": "r0", "start": 1.0, "end": 1.5, "confidence": 0.5}]}]}


def test_progress_counts_the_files(model, tmp_path, capsys):
    files = [wav(tmp_path / f"{i}.wav") for i in range(3)]
    assert main(["transcribe", "--progress", *files]) == 0
    assert capsys.readouterr().err.splitlines()[-1].startswith("3/3 inputs, ")


def test_help_names_the_separator_and_the_defaults():
    text = " ".join(cli_help().split())
    assert "separated by ','" in text and "(default: ctc)" in text and "(default: 20.0)" in text


def cli_help() -> str:
    from beamsearch.cli.main import parser

    sub = next(a for a in parser()._actions if a.dest == "command")
    return sub.choices["transcribe"].format_help()


# ---- the shipped model end to end, on speech made by espeak-ng with voices training never used ----------

ESPEAK = shutil.which("espeak-ng")
SHIPPED = pathlib.Path(cli.__file__).parents[1] / "zoo" / "speech" / "speech.safetensors"
needs_model = pytest.mark.skipif(ESPEAK is None or importlib.util.find_spec("torch") is None
                                 or importlib.util.find_spec("safetensors") is None or not SHIPPED.is_file(),
                                 reason="needs espeak-ng, the zoo extra and the shipped speech model")
SAID = [("en-us-nyc", "half past five"), ("en-gb-x-gbclan", "march third nineteen eighty seven"),
        ("en-us-nyc", "seven hundred and five"), ("en-gb-x-gbcwmd", "the fourth of july two thousand one")]


def espeak(path, voice: str, text: str) -> str:
    subprocess.run([ESPEAK, "-v", voice, "-w", str(path), text], check=True, capture_output=True)
    return str(path)  # 22,050 Hz: transcribe resamples it


@needs_model
def test_the_shipped_model_transcribes_espeak_ng_speech_with_word_times(tmp_path, capsys):
    files = [espeak(tmp_path / f"{i}.wav", voice, text) for i, (voice, text) in enumerate(SAID)]
    assert main(["transcribe", "--json", *files]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["file"] for r in records] == files
    assert wer([t for _, t in SAID], [r["text"] for r in records]) <= E2E_WER
    for r, f in zip(records, files, strict=True):
        seconds = sf.info(f).duration
        words = r["nbest"][0]["words"]
        assert [w["word"] for w in words] == r["text"].split()
        assert all(0 <= w["start"] < w["end"] <= seconds + 0.05 for w in words), (words, seconds)
        assert all(a["end"] <= b["start"] + 1e-9 for a, b in zip(words, words[1:], strict=False)), words


@needs_model
def test_a_file_cut_at_its_pause_reads_as_its_two_chunks_decoded_alone(tmp_path, capsys):
    # at 16 kHz (nothing resampled): A, 2 s of zeros, then B from its first sound. The latest
    # all-zero 25 ms window of the search ends where B starts: the cut is its centre, 200 samples
    # (12.5 ms) before B. Each chunk decoded as a file of its own is the oracle.
    a = read_audio(espeak(tmp_path / "a.wav", *SAID[1]))
    b = read_audio(espeak(tmp_path / "b.wav", *SAID[3]))
    b = b[np.flatnonzero(np.abs(b) > 1e-3)[0]:]
    boundary = a.size + 2 * RATE  # past 4 s: --max-chunk-seconds must exceed the 4 s searched
    cut = boundary - 200
    both = np.concatenate([a, np.zeros(2 * RATE, np.float32), b])
    files = []
    for name, audio in (("both", both), ("first", both[:cut]), ("second", both[cut:])):
        sf.write(tmp_path / f"{name}.wav", audio, RATE, subtype="FLOAT")
        files.append(str(tmp_path / f"{name}.wav"))
    assert main(["transcribe", "--json", *files[1:]]) == 0
    alone = [json.loads(line)["nbest"][0] for line in capsys.readouterr().out.splitlines()]
    limit = (boundary + 320) / RATE  # 20 ms after B's start: later windows all hold some of B
    assert main(["transcribe", "--json", files[0], "--max-chunk-seconds", f"{limit}"]) == 0
    joined = json.loads(capsys.readouterr().out)["nbest"][0]
    assert joined["text"] == f"{alone[0]['text']} {alone[1]['text']}"
    got = [w["start"] for w in joined["words"]]
    want = [w["start"] for w in alone[0]["words"]] + [w["start"] + cut / RATE for w in alone[1]["words"]]
    assert got == pytest.approx(want, abs=2e-3)  # each rounded to the millisecond
    for key in ("score", "acoustic_score", "lm_score"):
        assert joined[key] == pytest.approx(alone[0][key] + alone[1][key], abs=1e-3), key


class Searching(StandIn):
    """A stand-in that runs the CTC search: seeded random emissions over "_ab c", 3 frames a second
    of each chunk (the model's keywords as ``SpeechModel.transcribe`` takes them, ``trace`` too)."""

    def transcribe(self, audio, **options):
        from beamsearch.speech import Vocabulary, ctc_beam_search

        self.calls.append(([a.size for a in audio], options))
        lengths = [max(1, round(3 * a.size / RATE)) for a in audio]
        emissions = np.random.default_rng(5).normal(size=(len(audio), max(lengths), 5)) * 3.0
        return ctc_beam_search(emissions, lengths, blank=0, beam_size=options.get("beam_size") or 1,
                               n_best=options["n_best"], vocabulary=Vocabulary(["_", "a", "b", " ", "c"]),
                               frame_duration=1 / 3, trace=options.get("trace"))


def test_trace_writes_the_page_of_the_files_search(tmp_path, capsys, monkeypatch):
    import xml.etree.ElementTree as ET

    from beamsearch.speech.trace import CTCTrace

    stand_in = Searching()
    monkeypatch.setattr(cli, "load_model", lambda path: stand_in)
    page = tmp_path / "search.html"
    f = wav(tmp_path / "a.wav", seconds=3.0)
    assert main(["transcribe", f, "--trace", str(page), "--beam-size", "3", "--lm", "none"]) == 0
    text = capsys.readouterr().out.strip()
    trace = stand_in.calls[0][1]["trace"]
    assert isinstance(trace, CTCTrace) and trace.frames == [9]
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and f"beamsearch transcribe {f}" in html
    svg = ET.fromstring(html[html.index("<svg"): html.index("</svg>") + 6])
    ranked = [g for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("data-rank") == "1"]
    assert [" ".join(g.get("data-text").split()) for g in ranked] == [text] and text  # its labels, spaces as words
    long = tmp_path / "long.wav"  # two chunks: two utterances on the page, each headed by its place
    sf.write(long, np.random.default_rng(2).uniform(-0.3, 0.3, 30 * RATE).astype(np.float32), RATE, subtype="FLOAT")
    assert main(["transcribe", str(long), "--trace", str(page), "--beam-size", "1", "--lm", "none"]) == 0
    html = page.read_text(encoding="utf-8")
    assert f"{long}, chunk 1 of 2" in html and f"{long}, chunk 2 of 2" in html
    assert stand_in.calls[-1][1]["trace"].n_utterances == 2


def test_trace_takes_one_file_and_no_folder_for_its_page(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "load_model", lambda path: Searching())
    a, b = wav(tmp_path / "a.wav"), wav(tmp_path / "b.wav")
    assert main(["transcribe", a, b, "--trace", str(tmp_path / "p.html")]) == 2
    assert capsys.readouterr().err == "beamsearch: error: --trace draws one file's search; got 2 files\n"
    assert main(["transcribe", a, "--trace", str(tmp_path / "p.html"), "--greedy"]) == 2
    assert capsys.readouterr().err == ("beamsearch: error: --trace draws a beam search; got --greedy (give "
                                       "--beam-size 1 for a beam of one)\n")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "p.html").mkdir()  # a folder where the page would go
    assert main(["transcribe", a, "--trace", str(tmp_path / "locked" / "p.html"), "--lm", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace must be a file in an existing folder" in err


def test_trace_from_a_model_that_records_no_search_is_one_line_exit_1(model, tmp_path, capsys):
    page = tmp_path / "p.html"
    assert main(["transcribe", wav(tmp_path / "a.wav"), "--trace", str(page)]) == 1
    assert capsys.readouterr().err == ("beamsearch: error: --trace: the model recorded no search (its transcribe "
                                       "takes no trace=)\n")
    assert not page.exists()


@needs_model
def test_trace_of_the_tdt_head_is_the_page_of_its_transducer_search(tmp_path, capsys):
    """--head tdt --trace: the page holds the transducer search's steps; its returned hypotheses are
    the printed n-best (texts and scores, rounded as printed), each drawn from the start node."""
    import xml.etree.ElementTree as ET

    f = espeak(tmp_path / "a.wav", *SAID[0])
    page = tmp_path / "tdt.html"
    assert main(["transcribe", f, "--head", "tdt", "--beam-size", "4", "--n-best", "2", "--lm", "none",
                 "--trace", str(page)]) == 0
    printed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and f"beamsearch transcribe {f}" in html and "bs-transducer" in html
    svg = ET.fromstring(html[html.index("<svg"): html.index("</svg>") + 6])
    nodes = [g for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("data-rank")]
    ranked = sorted(nodes, key=lambda g: int(g.get("data-rank")))
    assert [g.get("data-rank") for g in ranked] == ["1", "2"] and len(printed) == 2
    for g, (rank, score, text) in zip(ranked, printed, strict=True):
        assert g.get("data-rank") == rank and " ".join(g.get("data-text").split()) == text
        assert f"ranked   {float(score):.4f}" in g.get("data-tip").replace("&#10;", "\n")
    assert len([g for g in svg.iter("{http://www.w3.org/2000/svg}g") if "item" in g.get("class", "")]) > 20
