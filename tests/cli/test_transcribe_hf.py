"""``beamsearch transcribe --model hf:DIR``: a random-weight Whisper saved with its processor in the
test's folder (tests/hf_speech_zoo.py), audio written by numpy + soundfile (a 2.5 s and a 34 s
file: one window, and two). The output against the library call on the same samples
(:func:`beamsearch.hf.speech.transcribe` with whisper's fallback, best_of 5), and the errors."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")

from beamsearch.cli import main  # noqa: E402
from beamsearch.speech.audio import read_audio  # noqa: E402
from hf_speech_zoo import moonshine, noise, save_whisper  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory: Any) -> pathlib.Path:
    root = tmp_path_factory.mktemp("hf_whisper")
    save_whisper(root / "whisper", 3, 0.5, n_text_ctx=16)
    sf.write(root / "short.wav", noise(2.5, 0), 16000)
    sf.write(root / "long.wav", noise(34, 1), 16000, subtype="FLOAT")
    (root / "bad.wav").write_bytes(b"not audio")
    return root


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(["transcribe", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def library(folder: pathlib.Path, name: str, beam_size: int | None, n_best: int) -> Any:
    import transformers

    from beamsearch.hf.speech import transcribe
    from beamsearch.whisper import FallbackOptions, WhisperOptions

    model = transformers.WhisperForConditionalGeneration.from_pretrained(folder / "whisper").eval()
    processor = transformers.AutoProcessor.from_pretrained(folder / "whisper")
    [t] = transcribe(model, processor, [read_audio(folder / name, 16000)],
                     WhisperOptions(beam_size=beam_size, n_best=n_best), FallbackOptions(best_of=5))
    return t


@pytest.mark.parametrize("name, flags, beam_size, n_best", [("short.wav", ["--greedy"], None, 1),
                                                            ("long.wav", ["--beam-size", "2", "--n-best", "2"], 2, 2)])
def test_json_is_the_library_calls(folder: pathlib.Path, capsys: Any, name: str, flags: list[str],
                                   beam_size: int | None, n_best: int) -> None:
    code, out, _ = run(capsys, "--model", f"hf:{folder / 'whisper'}", str(folder / name), "--json", *flags)
    assert code == 0
    got = json.loads(out)
    want = library(folder, name, beam_size, n_best)
    assert got["text"] == want.text
    assert [(s["start"], s["end"], s["text"]) for s in got["segments"]] == \
        [(round(s.start, 3), round(s.end, 3), s.text) for s in want.segments]
    assert len(got["nbest"]) == n_best
    best = sum(w.candidates[0].logprob for w in want.windows)  # the windows' best candidates joined
    assert got["nbest"][0]["acoustic_score"] == pytest.approx(best, rel=1e-6)
    assert got["nbest"][0]["text"] == " ".join(w.texts[0] for w in want.windows if w.texts[0])
    if name == "long.wav":
        assert len(want.windows) == 2 and want.windows[1].start > 0  # the second window seeks into the file


def test_text_lines_with_timestamps(folder: pathlib.Path, capsys: Any) -> None:
    code, out, _ = run(capsys, "--model", f"hf:{folder / 'whisper'}", str(folder / "short.wav"), "--greedy",
                       "--timestamps")
    want = library(folder, "short.wav", None, 1)
    assert code == 0
    assert out.splitlines() == [want.text] + [f"  {s.start:8.2f} {s.end:8.2f}  {s.text}" for s in want.segments]


def test_an_unreadable_file_is_one_line_and_the_others_go_on(folder: pathlib.Path, capsys: Any) -> None:
    code, out, err = run(capsys, "--model", f"hf:{folder / 'whisper'}", str(folder / "bad.wav"),
                         str(folder / "short.wav"), "--greedy", "--json")
    records = [json.loads(x) for x in out.splitlines()]
    assert code == 1 and "error" in records[0] and records[1]["text"] == library(folder, "short.wav", None, 1).text
    assert err.count("beamsearch: error:") == 1 and "bad.wav" in err and "Traceback" not in err


@pytest.mark.parametrize("flags, message", [
    (["--lm", "none"], "--lm applies to the speech model trained here"),
    (["--hotwords", "a"], "--hotwords applies to the speech model"),
    (["--head", "tdt"], "--head applies to the speech model"),
    (["--max-chunk-seconds", "10"], "--max-chunk-seconds applies"),
    (["--greedy", "--n-best", "2"], "--greedy takes no --n-best"),
    (["--beam-size", "2", "--n-best", "3"], "--n-best must be <= --beam-size=2; got 3"),
])
def test_the_speech_models_flags_are_refused(folder: pathlib.Path, capsys: Any, flags: list[str],
                                             message: str) -> None:
    code, _, err = run(capsys, "--model", f"hf:{folder / 'whisper'}", str(folder / "short.wav"), *flags)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_missing_folder_and_a_folder_that_is_no_speech_model(folder: pathlib.Path, capsys: Any,
                                                               tmp_path: pathlib.Path) -> None:
    code, _, err = run(capsys, "--model", f"hf:{tmp_path / 'nope'}", str(folder / "short.wav"))
    assert code == 1 and "is not a folder" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    code, _, err = run(capsys, "--model", f"hf:{tmp_path}", str(folder / "short.wav"))
    assert code == 1 and "holds no speech encoder-decoder" in err and "'gpt2'" in err


def test_a_moonshine_folder(folder: pathlib.Path, capsys: Any, tmp_path: pathlib.Path) -> None:
    """Moonshine: generate's rule, one search per file: the library call's text."""
    model, processor = moonshine(1)
    model.save_pretrained(tmp_path)
    processor.save_pretrained(tmp_path)
    code, out, _ = run(capsys, "--model", f"hf:{tmp_path}", str(folder / "short.wav"), "--beam-size", "2", "--json")
    from beamsearch.hf.speech import transcribe
    from beamsearch.whisper import WhisperOptions

    [want] = transcribe(model, processor, [read_audio(folder / "short.wav", 16000)], WhisperOptions(beam_size=2))
    got = json.loads(out)
    assert code == 0 and got["text"] == want.text
    assert got["segments"] == [{"start": 0.0, "end": 2.5, "text": want.text}]
