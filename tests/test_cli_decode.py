"""`beamsearch decode`: files and JSON Lines, per-line errors and exit status, usage errors, stdout
order, progress, --resume after SIGKILL (subprocesses), and a zoo model end to end. The oracle of
every record is the line decoded alone (beamsearch.corpus.decode_records on that one line, which
tests/test_corpus.py checks against beam_search_batch)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from beamsearch import corpus
from beamsearch.cli import main
from beamsearch.corpus import Line, decode_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def alone(text, **search):
    return next(decode_records(corpus.toy_model(), [Line(0, text)], **search))["nbest"]


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_mixed_file_one_record_per_line(tmp_path, capsys):
    long = "y" * 41
    src = tmp_path / "in.txt"
    src.write_bytes(b"first\r\n\nsmile \xf0\x9f\x98\x80\r\n" + long.encode() + b"\nbad \xff\n  \n"
                    + b"x" * 40 + b"\nlast")
    out = tmp_path / "out.jsonl"
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--beam", "3",
                 "--n-best", "2"]) == 1
    records = read(out)
    assert [r["index"] for r in records] == list(range(8))
    assert [r["input"] for r in records] == ["first", "", "smile 😀", long, "bad \ufffd", "  ", "x" * 40, "last"]
    errors = {r["index"]: r.get("error") for r in records}
    assert errors == {0: None, 1: "empty text", 2: "characters outside the vocabulary: '😀'",
                      3: "41 characters; the model reads at most 40", 4: "line is not UTF-8 (byte 4)",
                      5: "empty text", 6: None, 7: None}
    for i in (0, 6, 7):
        assert records[i]["nbest"] == alone(records[i]["input"], beam=3, n_best=2)
        assert set(records[i]["nbest"][0]) == {"text", "tokens", "logprob", "score", "finished"}
    assert capsys.readouterr().err.strip() == "beamsearch: 5 of 8 lines failed (see their error field)"


def test_jsonl_field_max_steps_prefix_and_bad_json(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"src": "hello", "max_steps": 2}\n{"src": "hello", "prefix": "fed"}\n{oops\n{"text": "a"}\n'
                   '{"src": "fine"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--jsonl", "--field", "src",
                 "--beam", "2", "--max-steps", "9"]) == 1
    records = read(out)
    model = corpus.toy_model()
    assert records[0]["nbest"] == next(decode_records(model, [Line(0, "hello", None, 2)], beam=2, max_steps=9))["nbest"]
    assert records[1]["nbest"][0]["text"].startswith("fed")
    assert records[1]["nbest"] == next(decode_records(model, [Line(0, "hello", None, None, "fed")], beam=2,
                                                      max_steps=9))["nbest"]
    assert records[2]["error"].startswith("bad JSON") and records[2]["input"] == "{oops"
    assert records[3]["error"] == "the JSON object has no string field 'src'"
    assert records[4]["nbest"] == alone("fine", beam=2, max_steps=9)


def test_all_good_exits_0_and_stdout_is_in_input_order(tmp_path, capsysbinary):
    texts = ["one", "a much longer line here", "two", "three", "four", "five"]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", "-", "--beam", "2",
                 "--max-rows", "4"]) == 0
    records = [json.loads(x) for x in capsysbinary.readouterr().out.decode().splitlines()]
    assert [r["index"] for r in records] == list(range(6))
    assert [r["nbest"] for r in records] == [alone(t, beam=2) for t in texts]


@pytest.mark.parametrize("argv, message", [
    (["--beam", "0"], "--beam must be >= 1; got 0"),
    (["--beam", "2", "--n-best", "3"], "--n-best must be <= --beam=2; got 3"),
    (["--beam", "4", "--max-rows", "3"], "--max-rows must be >= --beam=4; got 3"),
    (["--max-steps", "13"], "--max-steps must be in [1, 12] (the model's limit); got 13"),
    (["--model", "nonsense"], "--model must be one of seq2seq, transformer, a checkpoint folder or hf:DIR; "
                              "got 'nonsense'"),
    (["--model", "hf:somewhere"], "--model hf:DIR is not supported yet"),
    (["--output", "-", "--resume"], "--resume needs an --output file"),
    (["--input", "/nonexistent/in.txt"], "cannot read --input /nonexistent/in.txt"),
])
def test_usage_errors_exit_2_on_one_line(tmp_path, capsys, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    base = ["decode", "--model", "_toy", "--input", str(src), "--output", str(tmp_path / "out.jsonl")]
    assert main(base + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_model_folder_must_hold_one_checkpoint(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    assert main(["decode", "--model", str(tmp_path), "--input", str(src), "--output", str(tmp_path / "o")]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err


def test_progress_on_stderr(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("one\ntwo\n\nthree")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(tmp_path / "o"), "--progress"]) == 1
    err = capsys.readouterr().err
    assert "\r4/4 inputs, " in err and "tokens/s, ETA 0:00\n" in err


def test_sigkill_at_random_points_then_resume_gives_the_uninterrupted_output(tmp_path):
    """20 runs killed with SIGKILL at random times (fixed seed), each resumed to the end: the output
    is byte for byte the uninterrupted run's, each index once, in input order."""
    rng = random.Random(20)
    texts = [f"line {i} " + "ab" * (i % 7) for i in range(40)] + ["", "bad \u00e9"]
    rng.shuffle(texts)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))

    def command(out, *extra):
        return [sys.executable, "-m", "beamsearch", "decode", "--model", "_toy:0.004", "--input", str(src),
                "--output", str(out), "--beam", "3", "--max-rows", "6", *extra]

    reference = tmp_path / "reference.jsonl"
    started = time.monotonic()
    assert subprocess.run(command(reference), env=env, capture_output=True).returncode == 1
    whole = time.monotonic() - started
    expected = reference.read_bytes()
    assert [r["index"] for r in read(reference)] == list(range(len(texts)))
    interrupted = 0
    for trial in range(20):
        out = tmp_path / f"out{trial}.jsonl"
        run = subprocess.Popen(command(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        side = corpus.partial_path(out)
        if trial % 4:  # most kills land once records are being written (start-up time varies by machine)
            while run.poll() is None and not (side.exists() and side.stat().st_size > 0):
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, whole / 4))
        else:  # and some anywhere, start-up included
            time.sleep(rng.uniform(0.0, whole))
        run.send_signal(signal.SIGKILL)
        run.wait()
        interrupted += run.returncode == -signal.SIGKILL and side.exists() and side.stat().st_size > 0
        resumed = subprocess.run(command(out, "--resume"), env=env, capture_output=True)
        assert resumed.returncode == 1, resumed.stderr
        assert out.read_bytes() == expected, trial
        assert not side.exists()
    print(f"reference run {whole:.2f} s; {interrupted} of 20 kills left a partial side file")
    assert interrupted >= 5  # most kills land mid-run, with records already written


def test_zoo_seq2seq_end_to_end(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from beamsearch.zoo.translator import Translator

    texts = ["march 3 '87", "", "7 DEC '53", "2001-12-31", "june 14 '13"]
    src = tmp_path / "in.txt"
    src.write_text("\r\n".join(texts) + "\r\n")
    out = tmp_path / "out.jsonl"
    assert main(["decode", "--model", "seq2seq", "--input", str(src), "--output", str(out), "--beam", "3",
                 "--max-rows", "6"]) == 1
    records = read(out)
    assert records[1] == {"index": 1, "input": "", "error": "empty text"}
    good = [t for t in texts if t]
    fixed = Translator.load("seq2seq").beam(good, beam=3)
    assert [records[i]["nbest"][0]["text"] for i in (0, 2, 3, 4)] == [f[0].text for f in fixed]


def test_decode_trace_draws_the_chosen_lines_search(tmp_path, capsys):
    # the page's best node is the record's best output for that very line
    from beamsearch.viz import to_svg

    src = tmp_path / "in.txt"
    src.write_text("first\nsecond line\nthird\n")
    out, page = tmp_path / "out.jsonl", tmp_path / "tree.html"
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--beam", "3",
                 "--trace", str(page), "--trace-input", "1"]) == 0
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<script src" not in html and "second line" in html
    record = read(out)[1]
    tree, greedy = corpus.trace_line(corpus.toy_model(), "second line", beam=3)
    assert tree.tokens(tree.best(0)) == record["nbest"][0]["tokens"]
    assert len(greedy.results(0)) == 1 and to_svg(tree).count("<g") > 0


@pytest.mark.parametrize("argv,message", [
    (["--trace-input", "7"], "--trace-input 7: the file has fewer lines"),
    (["--trace-input", "1"], "--trace-input 1: cannot read '': empty text"),
])
def test_decode_trace_of_a_missing_or_bad_line_is_one_line(tmp_path, capsys, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("first\n\nthird\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
                 "--trace", str(tmp_path / "t.html"), *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not (tmp_path / "t.html").exists()


def test_decode_trace_needs_an_input_file(tmp_path, capsys):
    assert main(["decode", "--model", "_toy", "--input", "-", "--output", "-", "--trace", str(tmp_path / "t")]) == 2
    assert "--trace needs an --input file" in capsys.readouterr().err
