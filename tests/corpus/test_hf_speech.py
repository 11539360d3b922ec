"""`beamsearch decode --model hf:DIR` over JSON lines naming audio files, for a Whisper folder saved
with its Whisper tokenizer (tests/hf_speech_zoo.py, random weights): the records equal
`beamsearch transcribe --model hf:DIR --json` of the same files, a bad path is a per-line error,
a cut run resumes, the flags that do not apply are refused, and Ray writes what one process does.
A Whisper saved with another tokenizer stays a plain encoder-decoder (tests/corpus/test_hf_media.py)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
sf = pytest.importorskip("soundfile")

from beamsearch.cli import main  # noqa: E402
from beamsearch.corpus import partial_path  # noqa: E402
from beamsearch.corpus.hf_speech import HFSpeech, is_whisper_folder, speech_model_type  # noqa: E402
from hf_speech_zoo import noise, save_whisper  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory: Any) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("hf_speech")
    save_whisper(folder / "whisper", 3, 0.5, n_text_ctx=16)
    for i, seconds in enumerate([2.0, 3.5, 1.5, 33.0]):
        sf.write(folder / f"{i}.wav", noise(seconds, i), 16000)
    return folder


def jsonl(path: pathlib.Path, *objects: Any) -> str:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return str(path)


def read(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_whisper_folder_is_told_by_its_tokenizer(root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    assert speech_model_type(root / "whisper") == "whisper" and is_whisper_folder(root / "whisper")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({"added_tokens": [{"content": "[PAD]"}]}))
    assert not is_whisper_folder(tmp_path)  # a Whisper with a word-level tokenizer: a plain encoder-decoder
    assert speech_model_type(tmp_path / "none") is None


@pytest.mark.parametrize("flags", [["--mode", "greedy"], ["--beam-size", "2", "--n-best", "2"]])
def test_records_equal_transcribe_json_of_the_same_files(root: pathlib.Path, tmp_path: pathlib.Path, capsys: Any,
                                                         flags: list[str]) -> None:
    files = [str(root / f"{i}.wav") for i in range(4)]
    src = jsonl(tmp_path / "in.jsonl", {"audio": files[0], "id": 7}, {"audio": str(tmp_path / "gone.wav")},
                *({"audio": f} for f in files[1:]))
    out = tmp_path / "out.jsonl"
    model = f"hf:{root / 'whisper'}"
    assert main(["decode", "--model", model, "--jsonl", "--input", src, "--output", str(out), *flags]) == 1
    as_transcribe = ["--greedy"] if flags[0] == "--mode" else flags
    assert main(["transcribe", "--model", model, "--json", *files, *as_transcribe]) == 0
    want = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    records = read(out)
    assert [r["index"] for r in records] == [0, 1, 2, 3, 4]
    assert records[1] == {"index": 1, "input": "", "error": f"{tmp_path / 'gone.wav'}: no such file"}
    decoded = records[:1] + records[2:]
    assert records[0]["id"] == 7 and [r["audio"] for r in decoded] == [w["file"] for w in want]
    for r, w in zip(decoded, want, strict=True):
        assert (r["text"], r["segments"]) == (w["text"], w["segments"])
        assert [h["text"] for h in r["nbest"]] == [h["text"] for h in w["nbest"]]
        assert [h["score"] for h in r["nbest"]] == pytest.approx([h["score"] for h in w["nbest"]], rel=1e-4)


def test_a_rerun_with_resume_skips_the_lines_already_in_the_cut_output(root: pathlib.Path, tmp_path: pathlib.Path,
                                                                       capsys: Any, monkeypatch: Any) -> None:
    src = jsonl(tmp_path / "in.jsonl", *({"audio": str(root / f"{i}.wav")} for i in range(3)))
    common = ["decode", "--model", f"hf:{root / 'whisper'}", "--jsonl", "--input", src, "--max-rows", "5"]
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    assert main([*common, "--output", str(whole)]) == 0  # beam 5, 5 rows: one line per batch
    calls: list[int] = []
    own = HFSpeech.transcribe

    def cut(self: HFSpeech, audio: list, **kw: Any) -> list:
        calls.append(len(audio))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return own(self, audio, **kw)

    monkeypatch.setattr(HFSpeech, "transcribe", cut)
    assert main([*common, "--output", str(out)]) == 130
    assert "2 records kept" in capsys.readouterr().err and partial_path(out).exists() and not out.exists()
    assert main([*common, "--output", str(out), "--beam-size", "3", "--resume"]) == 2  # other options: refused
    assert "other options" in capsys.readouterr().err
    calls.clear()
    monkeypatch.setattr(HFSpeech, "transcribe", lambda self, audio, **kw: calls.append(len(audio)) or own(self, audio,
                                                                                                          **kw))
    assert main([*common, "--output", str(out), "--resume"]) == 0
    assert calls == [1]  # the one line not yet decoded
    assert out.read_bytes() == whole.read_bytes() and not partial_path(out).exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-steps", "5"], "--max-steps does not apply to a Whisper folder"),
    (["--mode", "diverse"], "a Whisper folder decodes with --mode beam or greedy"),
    (["--max-tokens", "100"], "--max-tokens does not apply to a Whisper folder"),
    (["--lm", "none"], "--lm applies to --model speech"),
    (["--mode", "greedy", "--n-best", "2"], "keeps one candidate: it takes no --n-best"),
    (["--n-best", "3", "--beam-size", "2"], "--n-best must be <= --beam-size=2; got 3"),
    (["--max-rows", "3"], "--max-rows must be >= the rows of one window (5); got 3"),
    (["--trace", "t.html"], "--trace does not apply to a Whisper folder"),
])
def test_usage_errors_are_one_line_exit_2(root: pathlib.Path, tmp_path: pathlib.Path, capsys: Any,
                                          flags: list[str], message: str) -> None:
    src = jsonl(tmp_path / "in.jsonl", {"audio": str(root / "0.wav")})
    code = main(["decode", "--model", f"hf:{root / 'whisper'}", "--jsonl", "--input", src, "--output", "-", *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_decode_ray_writes_what_the_single_process_command_writes(root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    src = jsonl(tmp_path / "in.jsonl", {"audio": str(root / "0.wav")}, {"audio": str(tmp_path / "gone.wav")},
                {"audio": str(root / "2.wav")})
    alone, spread = tmp_path / "alone.jsonl", tmp_path / "ray.jsonl"
    common = ["decode", "--model", f"hf:{root / 'whisper'}", "--jsonl", "--input", src, "--mode", "greedy",
              "--threads", "1"]
    assert main([*common, "--output", str(alone)]) == 1
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        assert main([*common, "--output", str(spread), "--ray", "--ray-workers", "1", "--ray-batch", "2"]) == 1
    finally:
        ray.shutdown()
    got, want = read(spread), read(alone)
    assert [r.get("error") for r in got] == [r.get("error") for r in want]
    assert [(r.get("text"), r.get("segments")) for r in got] == [(r.get("text"), r.get("segments")) for r in want]
