"""`beamsearch decode`: files and JSON Lines, per-line errors and exit status, usage errors, stdout
order, progress, --resume after SIGKILL (subprocesses), and a zoo model end to end. The oracle of
every record is the line decoded alone (beamsearch.corpus.decode_records on that one line, which
tests/corpus/test_records.py checks against beam_search_batch)."""

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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--beam-size", "3",
                 "--n-best", "2"]) == 1
    records = read(out)
    assert [r["index"] for r in records] == list(range(8))
    assert [r["input"] for r in records] == ["first", "", "smile 😀", long, "bad \ufffd", "  ", "x" * 40, "last"]
    errors = {r["index"]: r.get("error") for r in records}
    assert errors == {0: None, 1: "empty text", 2: "characters outside the vocabulary: '😀'",
                      3: "41 characters; the model reads at most 40", 4: "line is not UTF-8 (byte 4)",
                      5: "empty text", 6: None, 7: None}
    for i in (0, 6, 7):
        assert records[i]["nbest"] == alone(records[i]["input"], beam_size=3, n_best=2)
        assert set(records[i]["nbest"][0]) == {"text", "tokens", "logprob", "score", "finished"}
    assert capsys.readouterr().err.strip() == "beamsearch: 5 of 8 lines failed (see their error field)"


def test_jsonl_field_max_steps_prefix_and_bad_json(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"src": "hello", "max_steps": 2}\n{"src": "hello", "prefix": "fed"}\n{oops\n{"text": "a"}\n'
                   '{"src": "fine"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--jsonl", "--field", "src",
                 "--beam-size", "2", "--max-steps", "9"]) == 1
    records = read(out)
    model = corpus.toy_model()
    want = next(decode_records(model, [Line(0, "hello", None, 2)], beam_size=2, max_steps=9))["nbest"]
    assert records[0]["nbest"] == want
    assert records[1]["nbest"][0]["text"].startswith("fed")
    assert records[1]["nbest"] == next(decode_records(model, [Line(0, "hello", None, None, "fed")], beam_size=2,
                                                      max_steps=9))["nbest"]
    assert records[2]["error"].startswith("bad JSON") and records[2]["input"] == "{oops"
    assert records[3]["error"] == "the JSON object has no string field 'src'"
    assert records[4]["nbest"] == alone("fine", beam_size=2, max_steps=9)


def test_jsonl_other_keys_are_copied_into_the_records(tmp_path, capsys):
    """An "id" (any key but the text and the line's options) follows "input" in the line's record,
    to a file and to stdout, error records included; a key the record writes itself is named in
    one note line on stderr."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a1", "src": "hello"}\n{"src": "x", "id": 2, "max_steps": 0}\n'
                   '{"src": "fine", "error": "mine", "tags": ["t"]}\n', encoding="utf-8")
    for output in (str(tmp_path / "out.jsonl"), "-"):
        code = main(["decode", "--model", "_toy", "--input", str(src), "--output", output, "--jsonl", "--field", "src",
                     "--beam-size", "2"])
        captured = capsys.readouterr()
        records = read(tmp_path / "out.jsonl") if output != "-" else [json.loads(x) for x in captured.out.splitlines()]
        assert code == 1
        assert captured.err.splitlines() == [
            "beamsearch: note: input JSON keys that are fields of the output records are not copied, the records' "
            "own values are written: 'error' (rename such keys to keep them)",
            "beamsearch: 1 of 3 lines failed (see their error field)"]
        assert [list(r) for r in records] == [["index", "input", "id", "nbest"], ["index", "input", "id", "error"],
                                              ["index", "input", "tags", "nbest"]]
        assert [records[0]["id"], records[1]["id"], records[2]["tags"]] == ["a1", 2, ["t"]]
        assert records[0]["nbest"] == alone("hello", beam_size=2) and records[2]["nbest"] == alone("fine", beam_size=2)


def test_all_good_exits_0_and_stdout_is_in_input_order(tmp_path, capsysbinary):
    texts = ["one", "a much longer line here", "two", "three", "four", "five"]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", "-", "--beam-size", "2",
                 "--max-rows", "4"]) == 0
    records = [json.loads(x) for x in capsysbinary.readouterr().out.decode().splitlines()]
    assert [r["index"] for r in records] == list(range(6))
    assert [r["nbest"] for r in records] == [alone(t, beam_size=2) for t in texts]


@pytest.mark.parametrize("argv, message", [
    (["--beam-size", "0"], "--beam-size must be >= 1; got 0"),
    (["--beam-size", "2", "--n-best", "3"], "--n-best must be <= --beam-size=2; got 3"),
    (["--beam-size", "4", "--max-rows", "3"],
     "--max-rows=3 is smaller than the rows one input may need (4, its beam size)"),
    (["--max-tokens", "0"], "--max-tokens must be >= 1; got 0"),
    (["--max-steps", "13"], "--max-steps must be in [1, 12] (the model's limit); got 13"),
    (["--model", "nonsense"], "--model must be one of seq2seq, transformer, speech, a checkpoint folder or hf:DIR; "
                              "got 'nonsense'"),
    (["--model", "hf:somewhere"], "--model hf:somewhere: 'somewhere' is not a folder"),
    (["--model", "_toy:slow"], "--model _toy:DELAY needs a number of seconds; got '_toy:slow'"),
    (["--output", "-", "--resume"], "--resume needs an --output file"),
    (["--input", "/nonexistent/in.txt"], "cannot read --input /nonexistent/in.txt"),
    (["--temperature", "inf"], "--temperature must be > 0 and finite; got inf"),
    (["--top-k", str(2**63)], f"--top-k must be <= 2**62 (sizes are counted in int64); got {2**63}"),
    (["--mode", "exact", "--no-repeat-ngram-size", str(2**63)], "--no-repeat-ngram-size must be <= 2**62"),
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
    assert "4/4 inputs, " in err and "tokens/s, ETA 0:00\n" in err
    assert "\r" not in err  # stderr is not a terminal here: a line per update, none joined by \r


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
                "--output", str(out), "--beam-size", "3", "--max-rows", "6", *extra]

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
    assert main(["decode", "--model", "seq2seq", "--input", str(src), "--output", str(out), "--beam-size", "3",
                 "--max-rows", "6"]) == 1
    records = read(out)
    assert records[1] == {"index": 1, "input": "", "error": "empty text"}
    good = [t for t in texts if t]
    fixed = Translator.load("seq2seq").beam(good, beam_size=3)
    assert [records[i]["nbest"][0]["text"] for i in (0, 2, 3, 4)] == [f[0].text for f in fixed]


def test_decode_trace_draws_the_chosen_lines_search(tmp_path, capsys):
    # the page's best node is the record's best output for that very line; it names the line as
    # errors and --resume do (line 2, index 1) and labels the end token <eos>, as translate's page
    from beamsearch.viz import to_svg

    src = tmp_path / "in.txt"
    src.write_text("first\nsecond line\nthird\n")
    out, page = tmp_path / "out.jsonl", tmp_path / "tree.html"
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--beam-size", "3",
                 "--trace", str(page), "--trace-input", "1"]) == 0
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<script src" not in html and "second line" in html
    assert "<title>line 2 (index 1): &#x27;second line&#x27;, beam 3</title>" in html
    assert ">line 2 (index 1): &lt;bos&gt;</text>" in html and ">input 0" not in html
    record = read(out)[1]
    tree, greedy = corpus.trace_line(corpus.toy_model(), "second line", beam_size=3)
    assert tree.tokens(tree.best(0)) == record["nbest"][0]["tokens"]
    assert record["nbest"][0]["tokens"][-1] == 2 and "&lt;eos&gt; 0." in html  # the finished edge's label
    assert len(greedy.results(0)) == 1 and to_svg(tree).count("<g") > 0


@pytest.mark.parametrize("argv,message", [
    (["--trace-input", "7"], "--trace-input 7: the input has 3 lines (indices 0 to 2)"),
    (["--trace-input", "1"], "--trace-input 1: line 2: cannot read '': empty text"),
])
def test_decode_trace_of_a_missing_or_bad_line_is_a_usage_error_before_decoding(tmp_path, capsys, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("first\n\nthird\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
                 "--trace", str(tmp_path / "t.html"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # nothing decoded or written


def test_decode_trace_needs_an_input_file(tmp_path, capsys):
    assert main(["decode", "--model", "_toy", "--input", "-", "--output", "-", "--trace", str(tmp_path / "t")]) == 2
    assert "--trace needs an --input file" in capsys.readouterr().err


# ---- the search options of decode (issue 12 part 2) ----------------------------------------------------
# Oracle: each line decoded alone by the library's batch functions (beam_search_batch,
# diverse_beam_search, stochastic_beam_search) on the toy model, with the same options.

OPTION_TEXTS = ["hello", "a much longer line of text", "x", "beam search", "zz"]


def toy_alone(fn, text, **kwargs):
    model = corpus.toy_model()
    hyps = fn(model.step, model.make_state([{"source": text}]), [[model.bos]], eos_token_id=model.eos, **kwargs)[0]
    return [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob, "score": h.score,
             "finished": h.finished, **({"token_logprobs": h.token_logprobs} if kwargs.get("return_token_logprobs")
                                        else {})} for h in hyps]


def run_decode(tmp_path, texts, *argv):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n")
    code = main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), *argv])
    return code, read(out)


def test_decode_flags_are_the_library_names_and_the_old_spellings_still_work(tmp_path):
    """Every search flag is a DecodingConfig field or a registered mode's option, spelled as its
    keyword (beam_size is --beam-size), with the field's default in its help; the older
    spellings decode the same records as the new ones."""
    import dataclasses

    from beamsearch.cli import parser
    from beamsearch.core.config import DecodingConfig
    from beamsearch.modes.registry import MODES

    decode = next(a for a in parser()._actions if a.dest == "command").choices["decode"]
    actions = {a.dest: a for a in decode._actions}
    fields = [f for f in dataclasses.fields(DecodingConfig) if f.metadata["option"].cli]
    fields += [f for m in MODES.values() for f in dataclasses.fields(m.options)]
    assert {"beam_size", "n_best", "num_groups", "k", "node_budget", "constraints"} <= {f.name for f in fields}
    for f in fields:
        action = actions[f.name]
        assert action.option_strings[0] == "--" + f.name.replace("_", "-"), f.name
        assert f.metadata["option"].help in action.help, f.name
        if f.default not in (None, (), False):
            assert f"(default {f.default})" in action.help, f.name
    pairs = [(["--beam", "3", "--no-repeat-ngram", "2", "--stop-sequence", "ab", "--token-logprobs"],
              ["--beam-size", "3", "--no-repeat-ngram-size", "2", "--stop-sequences", "ab", "--return-token-logprobs"]),
             (["--mode", "diverse", "--beam", "4", "--groups", "2", "--diversity-penalty", "1"],
              ["--mode", "diverse", "--beam-size", "4", "--num-groups", "2", "--diversity-penalty", "1"]),
             (["--mode", "constrained", "--constraint", "ab", "--constraint", "e", "--ordered-constraints"],
              ["--mode", "constrained", "--constraints", "ab", "--constraints", "e", "--ordered"])]
    for i, (old, new) in enumerate(pairs):
        (tmp_path / f"old{i}").mkdir()
        (tmp_path / f"new{i}").mkdir()
        code_old, old_records = run_decode(tmp_path / f"old{i}", OPTION_TEXTS, "--max-steps", "8", *old)
        code_new, new_records = run_decode(tmp_path / f"new{i}", OPTION_TEXTS, "--max-steps", "8", *new)
        assert code_old == code_new == 0 and old_records == new_records and len(new_records) == len(OPTION_TEXTS)


def test_the_zoo_commands_take_the_shared_controls_flags_as_decode_spells_them():
    """demo and translate run searches of their own with their own defaults; their beam size,
    n-best and alpha flags are DecodingConfig's (decode's option strings and help), not retyped."""
    import dataclasses

    from beamsearch.cli import parser
    from beamsearch.core.config import DecodingConfig

    commands = next(a for a in parser()._actions if a.dest == "command").choices
    decode = {a.dest: a for a in commands["decode"]._actions}
    defaults = {f.name: f.default for f in dataclasses.fields(DecodingConfig)}
    expected = {"demo": {"beam_size": 4}, "translate": {"beam_size": 5, "n_best": 1, "alpha": 0.6},
                "evaluate": {"alpha": 0.6}}
    for command, values in expected.items():
        actions = {a.dest: a for a in commands[command]._actions}
        for name, value in values.items():
            action = actions[name]
            assert action.option_strings == decode[name].option_strings, (command, name)
            assert action.help == DecodingConfig.__dataclass_fields__[name].metadata["option"].help
            assert action.default == value and action.type is decode[name].type, (command, name)
    # translate's are the fields'
    assert defaults["beam_size"] == 5 and defaults["n_best"] == 1 and defaults["alpha"] == 0.6
    assert main(["demo", "--beam", "2", "--models", "1", "--max-len", "3"]) == 0


def test_decode_beam_options_equal_beam_search_batch_alone(tmp_path):
    from beamsearch import beam_search_batch

    code, records = run_decode(tmp_path, OPTION_TEXTS, "--beam-size", "3", "--n-best", "2", "--max-rows", "6",
                               "--no-repeat-ngram-size", "2", "--min-new-tokens", "3", "--stop-sequences", "ab",
                               "--stop-sequences", "fc", "--return-token-logprobs", "--max-steps", "10")
    assert code == 0
    model = corpus.toy_model()
    for r in records:
        assert r["nbest"] == toy_alone(beam_search_batch, r["input"], beam_size=3, n_best=2, max_steps=10,
                                       no_repeat_ngram_size=2, min_new_tokens=3, return_token_logprobs=True,
                                       stop_sequences=[model.tokens("ab"), model.tokens("fc")])
        for h in r["nbest"]:
            assert len(h["tokens"]) >= 3 and abs(sum(h["token_logprobs"]) - h["logprob"]) < 1e-9


def test_decode_max_steps_from_the_source_length(tmp_path):
    # "len" is the line's length in characters (the toy model); floor(0.5 * len + 1), capped at the
    # model's limit 12: hello 5 -> 3, "a much longer line of text" 26 -> 14 -> 12, x 1 -> 1 (floor 1.5),
    # "beam search" 11 -> 6, zz 2 -> 2
    from beamsearch import beam_search_batch

    code, records = run_decode(tmp_path, OPTION_TEXTS, "--beam-size", "2", "--max-steps", "0.5*len+1")
    assert code == 0
    for r, steps in zip(records, [3, 12, 1, 6, 2], strict=True):
        assert r["nbest"] == toy_alone(beam_search_batch, r["input"], beam_size=2, max_steps=steps, alpha=0.6)
        assert len(r["nbest"][0]["tokens"]) <= steps
    # 1*len-3: hello -> 2, x -> -2 (an error record for that line alone)
    code, records = run_decode(tmp_path, ["hello", "x"], "--beam-size", "2", "--max-steps", "len-3")
    assert code == 1
    assert records[0]["nbest"] == toy_alone(beam_search_batch, "hello", beam_size=2, max_steps=2)
    assert records[1]["error"] == "max_steps 1*len-3 is -2 for this line (length 1); it must be >= 1"


def test_decode_diverse_mode_equals_diverse_beam_search_alone(tmp_path):
    from beamsearch import diverse_beam_search

    code, records = run_decode(tmp_path, OPTION_TEXTS, "--mode", "diverse", "--beam-size", "4", "--num-groups", "2",
                               "--diversity-penalty", "1.5", "--n-best", "3", "--max-rows", "8")
    assert code == 0
    for r in records:
        assert r["nbest"] == toy_alone(diverse_beam_search, r["input"], beam_size=4, num_groups=2,
                                       diversity_penalty=1.5, n_best=3, max_steps=12)


def test_decode_transformers_mode_equals_transformers_beam_search_alone(tmp_path):
    """--mode transformers (generate's own rule) with its option --early-stopping; its defaults
    are generate's: the power penalty, alpha 1.0."""
    from beamsearch import transformers_beam_search

    for early in ("never", "true", "false"):
        code, records = run_decode(tmp_path, OPTION_TEXTS, "--mode", "transformers", "--beam-size", "3",
                                   "--n-best", "2", "--early-stopping", early, "--max-rows", "7")
        assert code == 0 and len(records) == len(OPTION_TEXTS)
        for r in records:
            assert r["nbest"] == toy_alone(transformers_beam_search, r["input"], beam_size=3, n_best=2,
                                           max_steps=12, early_stopping=early)


def test_decode_stochastic_mode_equals_stochastic_beam_search(tmp_path):
    # line i gets the noise of input i of one stochastic_beam_search over all lines with the seed
    from beamsearch import stochastic_beam_search

    code, records = run_decode(tmp_path, OPTION_TEXTS, "--mode", "stochastic", "--k", "3", "--seed", "7",
                               "--max-rows", "3")
    assert code == 0
    model = corpus.toy_model()
    items = [{"source": t} for t in OPTION_TEXTS]
    whole = stochastic_beam_search(model.step, model.make_state(items), [[model.bos]] * len(items), k=3, seed=7,
                                   eos_token_id=model.eos, max_steps=12)
    for r, hyps in zip(records, whole, strict=True):
        assert r["nbest"] == [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob,
                               "score": h.score, "finished": h.finished} for h in hyps]
        assert len(r["nbest"]) == 3 and len({tuple(h["tokens"]) for h in r["nbest"]}) == 3  # without replacement


@pytest.mark.parametrize("argv, message", [
    (["--max-steps", "2*lenn"], "--max-steps must be an integer or A*len+B (e.g. 2*len+10); got '2*lenn'"),
    (["--num-groups", "2"], "--num-groups is an option of mode 'diverse', not of mode 'beam'; got --num-groups=2"),
    (["--mode", "diverse", "--num-groups", "2"],
     "mode 'diverse' needs --num-groups and --diversity-penalty; got --num-groups=2, --diversity-penalty=None"),
    (["--mode", "diverse", "--beam-size", "3", "--num-groups", "2", "--diversity-penalty", "1"],
     "--num-groups must divide --beam-size=3; got --num-groups=2"),
    (["--mode", "stochastic"], "mode 'stochastic' needs --k; got --k=None"),
    (["--mode", "stochastic", "--k", "4", "--max-rows", "3"],
     "--max-rows=3 is smaller than the rows one input may need (4, its beam size)"),
    (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size"),
    (["--min-new-tokens", "-2"], "--min-new-tokens"),
    (["--stop-sequences", "xyz"], "--stop-sequences: 'xyz': characters outside the target vocabulary: 'xyz'"),
    (["--constraints", "ab"], "--constraints is an option of mode 'constrained', not of mode 'beam'; got "
                             "--constraints=['ab']"),
    (["--mode", "constrained", "--constraints", "xyz"],
     "--constraints: 'xyz': characters outside the target vocabulary: 'xyz'"),
    (["--ordered"], "--ordered is an option of mode 'constrained', not of mode 'beam'; got --ordered=True"),
    (["--mode", "stochastic", "--k", "2", "--length-penalty", "power"],
     "--mode stochastic does not take --length-penalty (samples are ranked by their perturbed score"),
    (["--top-k", "0"], "--top-k must be >= 1; got 0"),
    (["--node-budget", "5"], "--node-budget is an option of mode 'exact', not of mode 'beam'"),
    (["--mode", "exact", "--node-budget", "0"], "--node-budget must be >= 1; got 0"),
    (["--mode", "exact", "--return-token-logprobs"], "--mode exact does not take --return-token-logprobs"),
    (["--mode", "exact", "--max-tokens", "100"], "--max-tokens does not apply to mode 'exact'"),
    (["--mode", "exact", "--seed-beam", "2", "--n-best", "6", "--max-rows", "4"],
     "--max-rows=4 is smaller than the rows of one line (6); raise --max-rows"),
    (["--mode", "exact", "--beam-size", "2"], "--mode exact does not take --beam-size (it expands every prefix"),
    (["--temperature", "0"], "--temperature"),
])
def test_decode_search_option_usage_errors(tmp_path, capsys, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(tmp_path / "o.jsonl"),
                 *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "o.jsonl").exists()


def test_decode_token_budget(tmp_path, capsys):
    """The toy model's prompt is [bos] and its limit 12 steps: a line at beam 3 reserves
    3 x (1 + 12) = 39 tokens, 3 x (1 + 2) = 9 with its own max_steps 2. Under --max-tokens 20 the
    first is an error record and the second decodes as alone; under 39 both decode as alone."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"src": "hello"}\n{"src": "short", "max_steps": 2}\n{"src": "world"}\n', encoding="utf-8")
    base = ["decode", "--model", "_toy", "--input", str(src), "--jsonl", "--field", "src", "--beam-size", "3"]
    out = tmp_path / "tight.jsonl"
    assert main(base + ["--output", str(out), "--max-tokens", "20"]) == 1
    records = read(out)
    need = "the input needs 39 tokens (3 rows x (prompt 1 + max_steps 12)), more than max_tokens=20"
    assert [r.get("error") for r in records] == [need, None, need]
    assert records[1]["nbest"] == alone("short", beam_size=3, max_steps=2)
    assert "2 of 3 lines failed" in capsys.readouterr().err
    out = tmp_path / "fits.jsonl"
    assert main(base + ["--output", str(out), "--max-tokens", "39"]) == 0
    records = read(out)
    assert [r["nbest"] for r in records] == [alone("hello", beam_size=3), alone("short", beam_size=3, max_steps=2),
                                           alone("world", beam_size=3)]


def test_decode_length_penalty_temperature_and_top_k_equal_beam_search_batch_alone(tmp_path):
    from beamsearch import beam_search_batch

    code, records = run_decode(tmp_path, OPTION_TEXTS, "--beam-size", "3", "--n-best", "2", "--length-penalty", "power",
                               "--alpha", "1.0", "--temperature", "0.7", "--top-k", "3", "--max-steps", "9")
    assert code == 0
    for r in records:
        assert r["nbest"] == toy_alone(beam_search_batch, r["input"], beam_size=3, n_best=2, max_steps=9,
                                       length_penalty="power", alpha=1.0, temperature=0.7, top_k=3)


def test_decode_constrained_mode_equals_constrained_beam_search_alone(tmp_path):
    """--constraint for every line; a JSON line's own constraints (a phrase, and alternatives)
    replace them; bad constraints are that line's error record."""
    from beamsearch import AnyOf, constrained_beam_search

    model = corpus.toy_model()
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join([
        '{"text": "hello"}',
        '{"text": "beam search", "constraints": ["fa", ["cc", "dd"]]}',
        '{"text": "zz", "constraints": "fa"}',
        '{"text": "x", "constraints": ["xyz"]}',
        '{"text": "a much longer line of text"}',
    ]) + "\n", encoding="utf-8")
    code = main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--jsonl",
                 "--mode", "constrained", "--constraints", "ab", "--constraints", "e", "--beam-size", "3",
                 "--n-best", "2"])
    assert code == 1
    records = read(out)
    ab, e = model.tokens("ab"), model.tokens("e")
    for i, constraints in [(0, [ab, e]), (1, [model.tokens("fa"), AnyOf(model.tokens("cc"), model.tokens("dd"))]),
                           (4, [ab, e])]:
        want = toy_alone(constrained_beam_search, records[i]["input"], beam_size=3, n_best=2, max_steps=12,
                         constraints=[constraints])
        assert records[i]["nbest"] == want
    for h in records[0]["nbest"] + records[4]["nbest"]:
        if h["finished"]:
            assert "ab" in h["text"] and "e" in h["text"]
    assert records[2]["error"].startswith("constraints must be a list whose items are non-empty texts")
    assert records[3]["error"] == "constraints: 'xyz': characters outside the target vocabulary: 'xyz'"


def test_a_line_with_constraints_outside_constrained_mode_is_an_error_record(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"text": "hello", "constraints": ["ab"]}\n{"text": "zz"}\n', encoding="utf-8")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--jsonl"]) == 1
    records = read(out)
    assert records[0]["error"] == "constraints apply to mode 'constrained'; got mode 'beam'"
    assert "nbest" in records[1]


def test_decode_exact_mode_equals_exact_search_alone(tmp_path):
    """Each record is exact_search's on the line alone (its --seed-beam), with its proof
    flag and cost; --n-best may exceed the seed beam; a tiny --node-budget leaves lines unproven."""
    from beamsearch import exact_search

    code, records = run_decode(tmp_path, OPTION_TEXTS, "--mode", "exact", "--seed-beam", "2", "--n-best", "3",
                               "--max-steps", "6", "--max-rows", "8", "--length-penalty", "power", "--alpha", "1")
    assert code == 0
    model = corpus.toy_model()
    for r in records:
        alone = exact_search(model.step, model.make_state([{"source": r["input"]}]), [[model.bos]],
                             eos_token_id=model.eos, max_steps=6, n_best=3, seed_beam=2, length_penalty="power",
                             alpha=1.0, batch_rows=8)
        assert r["nbest"] == [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob,
                               "score": h.score, "finished": h.finished} for h in alone[0]]
        assert r["proven"] is True and r["proven"] == bool(alone.proven[0])
        assert r["expanded"] == int(alone.expanded[0]) > 0
    code, records = run_decode(tmp_path, OPTION_TEXTS, "--mode", "exact", "--seed-beam", "2", "--max-steps", "6",
                               "--node-budget", "3")
    assert code == 0 and not all(r["proven"] for r in records)


def test_decode_exact_mode_never_passes_more_than_max_rows(monkeypatch, tmp_path):
    """The seed search of a line holds max(seed_beam, n_best) rows: lines are batched by that."""
    seen = []
    step = corpus.models.ToyModel.step

    def counting(self, state, y_prev):
        seen.append(len(y_prev))
        return step(self, state, y_prev)

    monkeypatch.setattr(corpus.models.ToyModel, "step", counting)
    code, _ = run_decode(tmp_path, OPTION_TEXTS, "--mode", "exact", "--seed-beam", "2", "--n-best", "6",
                         "--max-rows", "12", "--max-steps", "4")
    assert code == 0 and seen and max(seen) <= 12


def test_a_mode_registered_from_one_module_reaches_decode_without_edits(tmp_path, capsys):
    """A new mode is one module (its options dataclass, its plan, its Mode) and one registry line:
    decode --mode, its flags, --help and decode_records pick it up with no edit to corpus or CLI
    code. The mode here is beam search whose own option ``sharpness`` sets the temperature; each
    record equals beam_search_batch with temperature 1/sharpness on the line alone."""
    import dataclasses

    from beamsearch import beam_search_batch
    from beamsearch.core.config import option
    from beamsearch.core.mode import Mode
    from beamsearch.modes import registry
    from beamsearch.modes.beam import beam_plan

    @dataclasses.dataclass(frozen=True)
    class SharpOptions:
        sharpness: float = option(2.0, "logits multiplied by S (temperature 1/S)", metavar="S")

    def sharp_plan(prompts, config):  # its configuration: checked once, by SHARP.configure
        controls = config.controls.replace(temperature=1.0 / config.options.sharpness)
        return beam_plan(prompts, dataclasses.replace(config, controls=controls, checked=None))

    def sharp_search(step_fn, init_state, prompts, *, sharpness=2.0, **keywords):
        return SHARP.run(step_fn, init_state, prompts, SHARP.configure(dict(keywords, sharpness=sharpness)))

    SHARP = Mode("sharp", "beam search at temperature 1/S", sharp_search, plan=sharp_plan,
                 options=SharpOptions, rows=lambda keywords: keywords["beam_size"],
                 refused={"temperature": "its sharpness sets the temperature"},
                 sizes=("beam_size", "n_best", "early_stop", "return_token_logprobs", "pad_token_id"))
    registry.register(SHARP)
    try:
        assert main(["decode", "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "sharp: beam search at temperature 1/S" in text and "--sharpness S sharp: logits multiplied" in text
        code, records = run_decode(tmp_path, OPTION_TEXTS, "--mode", "sharp", "--sharpness", "4", "--beam-size", "3",
                                   "--n-best", "2", "--max-steps", "8")
        assert code == 0 and len(records) == len(OPTION_TEXTS)
        for r in records:
            assert r["nbest"] == toy_alone(beam_search_batch, r["input"], beam_size=3, n_best=2, max_steps=8,
                                           temperature=0.25)
        assert main(["decode", "--model", "_toy", "--input", str(tmp_path / "in.txt"), "--output", "-", "--mode",
                     "sharp", "--temperature", "2"]) == 2
        assert ("--mode sharp does not take --temperature (its sharpness sets the temperature)"
                in capsys.readouterr().err)
    finally:
        registry.MODES.pop("sharp")


def test_a_scorer_module_is_found_in_the_working_directory_and_a_changed_one_refuses_resume(tmp_path, monkeypatch,
                                                                                            capsys):
    """As the `beamsearch` command runs it (its script's folder first on the path, not the working
    directory), --scorer MODULE:FUNCTION imports MODULE from the working directory; the side file
    holds the SHA-256 of MODULE's file, and --resume after it changed is refused naming it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_scorer", raising=False)
    (tmp_path / "cwd_scorer.py").write_text("def score(prompts, partials):\n    return [len(s) for s in partials]\n")
    (tmp_path / "in.txt").write_text("hello\nworld\nbeam search\n")
    argv = ["decode", "--model", "_toy", "--input", "in.txt", "--output", "out.jsonl", "--mode", "step", "--scorer",
            "cwd_scorer:score", "--n", "2", "--max-steps", "3", "--max-rows", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    assert [r["input"] for r in read(tmp_path / "out.jsonl")] == ["hello", "world", "beam search"]
    step, calls = corpus.models.ToyModel.step, []

    def interrupted(self, state, y_prev):  # Ctrl-C at the 5th model call: the first line's record is kept
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return step(self, state, y_prev)

    with monkeypatch.context() as patch:
        patch.setattr(corpus.models.ToyModel, "step", interrupted)
        assert main([*argv[:6], "again.jsonl", *argv[7:]]) == 130
    side = tmp_path / "again.jsonl.partial"
    kept = side.read_bytes()
    assert b'"index": 0' in kept
    (tmp_path / "cwd_scorer.py").write_text("def score(prompts, partials):\n    return [-len(s) for s in partials]\n")
    capsys.readouterr()
    assert main([*argv[:6], "again.jsonl", *argv[7:], "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was written with other options (scorer_sha256=" in err[0], err
    assert side.read_bytes() == kept
    assert main(["decode", "--help"]) == 0
    assert "--scorer MODULE:FUNCTION imports MODULE from the working directory first" in \
        " ".join(capsys.readouterr().out.split())
