"""The command line: end to end through ``python -m beamsearch`` subprocesses, and in-process through
``main(argv)`` where a test needs to patch something (the shipped checkpoints' folder)."""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys

import pytest

from beamsearch import __version__
from beamsearch.cli import main
from beamsearch.cli import parser as _parser


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "beamsearch", *args], capture_output=True, input=stdin, timeout=300)
    r.stdout, r.stderr = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    return r


def one_line_error(r: subprocess.CompletedProcess, message: str) -> None:
    assert r.stderr.count("\n") == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---- without a model -------------------------------------------------------------------------------

def test_demo_shows_beam_beating_greedy_on_the_hand_example():
    r = run("demo", "--models", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    greedy = next(line for line in lines if line.startswith("greedy"))
    beam = next(line for line in lines if line.startswith("beam 2"))
    assert greedy.split()[1:4] == ["1", "2", "-1.0498"]  # ln 0.35
    assert beam.split()[2:5] == ["2", "0", "-1.0217"]  # ln 0.36
    assert any(line.startswith("beam found a more likely output than greedy on") and line.endswith("of 3 models")
               for line in lines)


def test_bare_prints_usage_and_the_commands():
    r = run()
    assert r.returncode == 2 and r.stdout.startswith("usage: beamsearch")
    for command in ("demo", "translate", "evaluate", "train"):
        assert re.search(rf"^\s+{command}\s", r.stdout, flags=re.M), command
    assert "Exit status" in r.stdout


def test_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout == f"beamsearch {__version__}\n"


def test_every_option_has_help_and_its_default_is_shown():
    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        text = p.format_help()
        for action in p._actions:
            assert action.help, (name, action.dest)
            if action.option_strings and isinstance(action.default, (int, float, str)) \
                    and not isinstance(action.default, bool) and action.default != argparse.SUPPRESS:
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)
    assert "(default: 5)" in " ".join(sub.choices["translate"].format_help().split())


@pytest.mark.parametrize("args, message", [
    (("demo", "--beam-size", "0"), "--beam-size must be >= 1; got 0"),
    (("demo", "--max-len", "-1"), "--max-len must be >= 1; got -1"),
    (("demo", "--beam-size", "x"), "invalid int value: 'x'"),
    (("nonsense",), "invalid choice"),
    (("--json",), "unrecognized arguments: --json"),
    (("translate", "--model", "gpt", "x"), "invalid choice: 'gpt'"),
    (("translate", "--beam-size", "0", "march 3 1987"), "--beam-size must be >= 1; got 0"),
    (("translate", "--beam-size", "2", "--n-best", "3", "march 3 1987"), "--n-best must be <= --beam-size=2; got 3"),
    (("translate", "--threads", "0", "march 3 1987"), "--threads must be >= 1; got 0"),
    (("evaluate", "--beams", "1,x"), "--beams must be integers"),
    (("evaluate", "--beams", "0,5"), "--beams must be >= 1"),
    (("train", "--minutes", "0"), "--minutes must be > 0; got 0.0"),
])
def test_bad_input_is_one_line_and_exit_status_2(args, message):
    r = run(*args)
    assert r.returncode == 2 and r.stdout == ""
    one_line_error(r, message)


# ---- checkpoints: missing, corrupt, and what train --out writes ---------------------------------------

try:
    import safetensors  # noqa: F401
    import torch  # noqa: F401
except ImportError:  # pragma: no cover
    ZOO = False
else:
    ZOO = True
needs_zoo = pytest.mark.skipif(not ZOO, reason="the zoo extra (torch, safetensors) is not installed")


@needs_zoo
def test_a_missing_checkpoint_is_one_line_naming_the_file(tmp_path):
    r = run("translate", "--checkpoint", str(tmp_path), "march 3 1987")
    assert r.returncode == 1 and r.stdout == ""
    one_line_error(r, f"checkpoint file {tmp_path / 'seq2seq.json'} does not exist")


@needs_zoo
@pytest.mark.parametrize("broken", ["json", "safetensors"])
@needs_zoo
def test_a_corrupt_checkpoint_is_one_line_naming_the_file(tmp_path, broken):
    from beamsearch.zoo.translator import CHECKPOINTS

    for ext in ("json", "safetensors"):
        data = b"\x00garbage\nmore" if ext == broken else (CHECKPOINTS / f"transformer.{ext}").read_bytes()
        (tmp_path / f"transformer.{ext}").write_bytes(data)
    r = run("evaluate", "--model", "transformer", "--checkpoint", str(tmp_path), "--limit", "5")
    assert r.returncode == 1 and r.stdout == ""
    one_line_error(r, f"checkpoint file {tmp_path / f'transformer.{broken}'}")


@needs_zoo
def test_weights_of_another_model_are_refused_naming_the_file(tmp_path):
    from beamsearch.zoo.translator import CHECKPOINTS

    (tmp_path / "seq2seq.json").write_bytes((CHECKPOINTS / "seq2seq.json").read_bytes())
    (tmp_path / "seq2seq.safetensors").write_bytes((CHECKPOINTS / "transformer.safetensors").read_bytes())
    r = run("translate", "--checkpoint", str(tmp_path), "march 3 1987")
    assert r.returncode == 1
    one_line_error(r, f"checkpoint file {tmp_path / 'seq2seq.safetensors'} cannot be loaded")


@needs_zoo
def test_demo_with_a_broken_shipped_checkpoint_says_so_and_not_install_the_extra(tmp_path, monkeypatch, capsys):
    import beamsearch.zoo.translator as translator

    monkeypatch.setattr(translator, "CHECKPOINTS", tmp_path)
    assert main(["demo", "--models", "1"]) == 1
    out, err = capsys.readouterr()
    assert "install the zoo extra" not in out + err
    assert err == f"beamsearch: error: checkpoint file {tmp_path / 'seq2seq.json'} does not exist\n"


def tampered(folder, name="seq2seq", config=None, drop=(), tensors=None):
    """A copy of the shipped checkpoint ``name`` in ``folder``: its config's fields updated with
    ``config`` and those in ``drop`` removed, its tensors (a dict) passed through ``tensors``."""
    from safetensors.torch import load_file, save_file

    from beamsearch.zoo.translator import CHECKPOINTS

    meta = json.loads((CHECKPOINTS / f"{name}.json").read_text())
    meta["config"].update(config or {})
    for key in drop:
        del meta["config"][key]
    (folder / f"{name}.json").write_text(json.dumps(meta))  # float("nan") is written as NaN
    weights = load_file(str(CHECKPOINTS / f"{name}.safetensors"))
    save_file(tensors(weights) if tensors else weights, str(folder / f"{name}.safetensors"))
    return folder


def _nan_at(key, value=float("nan")):
    def edit(weights):
        weights[key].view(-1)[7] = value
        return weights
    return edit


@needs_zoo
@pytest.mark.parametrize("name,config,drop,message", [
    ("seq2seq", {"dropout": float("nan")}, (), "dropout must be a number in [0, 1); got nan"),
    ("seq2seq", {"dropout": 1.0}, (), "dropout must be a number in [0, 1); got 1.0"),
    ("seq2seq", {"dropout": "0.1"}, (), "dropout must be a number in [0, 1); got '0.1'"),
    ("seq2seq", {"eos": 99}, (), "eos must be 2 (the target vocabulary's <eos>); got 99"),
    ("seq2seq", {"bos": -1}, (), "bos must be 1 (the target vocabulary's <bos>); got -1"),
    ("seq2seq", {"pad": 3}, (), "pad must be 0 (the vocabularies' <pad>); got 3"),
    ("seq2seq", {"source_vocab": 71}, (), "source_vocab must be 72 (the size of the source vocabulary); got 71"),
    ("seq2seq", {"max_target": 1}, (), "max_target must be an integer >= 12 (decoder positions for bos, a "
                                        "YYYY-MM-DD date and eos); got 1"),
    ("seq2seq", {"hidden": 0}, (), "hidden must be an integer >= 1; got 0"),
    ("seq2seq", {"hidden": True}, (), "hidden must be an integer >= 1; got True"),
    ("seq2seq", {"layers": 2.0}, (), "layers must be an integer >= 1; got 2.0"),
    ("seq2seq", {"kind": "transformer"}, (), "kind must be 'seq2seq' (the file's name); got 'transformer'"),
    ("seq2seq", {"colour": "red"}, (), "unknown fields 'colour'"),
    ("seq2seq", {}, ("ff",), "it lacks ff"),
    ("transformer", {"hidden": 130}, (), "hidden must be a multiple of heads=4; got 130"),
])
def test_a_tampered_config_is_one_line_naming_the_file_exit_1(tmp_path, capsys, name, config, drop, message):
    tampered(tmp_path, name, config, drop)
    assert main(["translate", "--model", name, "--checkpoint", str(tmp_path), "march 3 1987"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"beamsearch: error: checkpoint file {tmp_path / f'{name}.json'} is not a model " \
                                 f"config: {message}\n"


@needs_zoo
@pytest.mark.parametrize("tensors,message", [
    (_nan_at("out.weight"), "tensor out.weight holds 1 NaN or infinite values (of 1920)"),  # 15 x 128
    (_nan_at("cell.weight_hh", float("-inf")), "tensor cell.weight_hh holds 1 NaN or infinite values (of 49152)"),
    (lambda w: {k: v.to(torch.int64) for k, v in w.items()}, "is int64, not a floating-point dtype"),
    (lambda w: {**w, "out.weight": w["out.weight"][:, :64].contiguous()},
     "tensor out.weight has shape (15, 64); its config needs (15, 128)"),
    (lambda w: {k: v for k, v in w.items() if k != "out.bias"}, "tensors missing for its config: out.bias"),
    (lambda w: {**w, "extra.weight": w["out.bias"].clone()}, "tensors its config has no use for: extra.weight"),
])
def test_tampered_weights_are_one_line_naming_the_file_exit_1(tmp_path, capsys, tensors, message):
    tampered(tmp_path, tensors=tensors)
    assert main(["translate", "--checkpoint", str(tmp_path), "march 3 1987"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"beamsearch: error: checkpoint file {tmp_path / 'seq2seq.safetensors'} "
                                        "cannot be loaded: ") and message in err and err.count("\n") == 1


@needs_zoo
def test_a_config_far_larger_than_its_weights_is_refused_without_building_it(tmp_path, capsys):
    """hidden 10**6 would be about 10**13 parameters: the shapes are checked on the meta device."""
    tampered(tmp_path, config={"hidden": 10**6})
    assert main(["translate", "--checkpoint", str(tmp_path), "march 3 1987"]) == 1
    assert "its config needs" in capsys.readouterr().err


@needs_zoo
@pytest.mark.parametrize("command", [
    ("translate", "march 3 1987"), ("evaluate", "--limit", "5"), ("decode", "--input", "-", "--output", "-")])
def test_every_command_loading_a_checkpoint_refuses_a_tampered_one(tmp_path, command):
    """Through real subprocesses: translate and evaluate (--checkpoint), decode (--model DIR)."""
    tampered(tmp_path, tensors=_nan_at("out.weight"))
    where = ("--model", str(tmp_path)) if command[0] == "decode" else ("--checkpoint", str(tmp_path))
    r = run(command[0], *where, *command[1:], stdin=b"march 3 1987\n")
    assert r.returncode == 1 and r.stdout == ""
    one_line_error(r, f"checkpoint file {tmp_path / 'seq2seq.safetensors'} cannot be loaded: tensor out.weight")


@needs_zoo
def test_demo_refuses_a_tampered_shipped_checkpoint(tmp_path, monkeypatch, capsys):
    import beamsearch.zoo.translator as translator

    monkeypatch.setattr(translator, "CHECKPOINTS", tampered(tmp_path, config={"eos": 99}))
    assert main(["demo", "--models", "1"]) == 1
    assert capsys.readouterr().err == (f"beamsearch: error: checkpoint file {tmp_path / 'seq2seq.json'} is not a "
                                       "model config: eos must be 2 (the target vocabulary's <eos>); got 99\n")


@needs_zoo
def test_train_out_is_loadable_by_translate_and_evaluate(tmp_path):
    """A tiny training run (1 epoch of 64 examples): what it writes loads with --checkpoint."""
    out = tmp_path / "my_ckpt"
    r = run("train", "--model", "seq2seq", "--out", str(out), "--epochs", "1", "--train-size", "64")
    assert r.returncode == 0, r.stderr
    assert f"--checkpoint {out}" in r.stdout
    r = run("translate", "--checkpoint", str(out), "--json", "march 3 1987")
    assert r.returncode in (0, 1) and "checkpoint" not in r.stderr  # an untrained model may find no date
    assert json.loads(r.stdout)["input"] == "march 3 1987"
    r = run("evaluate", "--checkpoint", str(out), "--beams", "1,2", "--limit", "10", "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "2 thread(s)" in r.stdout.splitlines()[0] and r.stdout.splitlines()[2].startswith("greedy")


@needs_zoo
def test_train_minutes_stops_on_time_with_the_schedule_sized_to_it(tmp_path):
    """A 3-second budget on the full training set (313 batches an epoch, well over 3 s): training
    stops inside the first epoch, and the last step's learning rate is near the end of the cosine
    (under 0.3 of the peak: the budget was mostly spent when the last step began)."""
    from beamsearch.zoo.train import lr_factor, train

    meta = train("seq2seq", tmp_path, minutes=0.05, progress=False, log=lambda _: None)
    assert meta["epochs_run"] == 1 and 1 <= meta["steps"] < 313
    assert meta["last_lr"] < 0.3 * 2e-3
    # the schedule by hand: warm-up to the peak at 5%, cosine to 0 at the end, half way at 52.5%
    assert [lr_factor(f) for f in (0.0, 0.025, 0.05, 0.525, 1.0)] == pytest.approx([0, 0.5, 1, 0.5, 0], abs=1e-12)


# ---- translate on the shipped model --------------------------------------------------------------------

@needs_zoo
def test_a_stdin_batch_keeps_going_past_bad_lines():
    long_line = "march 3 1987 " * 800
    stdin = ("3rd of March 1987\r\n"       # CRLF
             "\r\n"                        # empty
             "12/25/1999\n"
             "march 3 1987 \U0001F600\n"    # an emoji
             f"{long_line}\n"              # over-long
             "1987-03-03\r\n").encode() + b"\xff\xfe bytes\n" + b"2001.4.5"  # undecodable, no final newline
    r = run("translate", stdin=stdin)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert len(lines) == 8
    assert lines[0] == "1987-03-03" and lines[2] == "1999-12-25" and lines[5] == "1987-03-03"
    assert lines[7] == "2001-04-05"
    assert lines[1] == "error: cannot read '': empty text"
    assert lines[3].startswith("error: cannot read") and "outside the vocabulary: '\U0001F600'" in lines[3]
    assert lines[4].startswith("error: cannot read") and f"{len(long_line)} characters" in lines[4]
    assert lines[6].startswith("error: cannot read") and "outside the vocabulary" in lines[6]
    assert r.stderr == "beamsearch: 4 of 8 inputs got no date\n"


@needs_zoo
def test_json_lines():
    r = run("translate", "--json", "--n-best", "3", "1833/04/05", "hello world", "")
    assert r.returncode == 1
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["input"] for row in rows] == ["1833/04/05", "hello world", ""]
    assert rows[0]["date"] == "1833-04-05" and rows[0]["error"] is None and len(rows[0]["candidates"]) == 3
    best = rows[0]["candidates"][0]
    assert set(best) == {"date", "logprob", "score", "model_logprob"} and best["date"] == "1833-04-05"
    # GNMT by hand: 11 tokens (10 characters and eos), alpha 0.6: score = logprob / (16 / 6) ** 0.6
    assert best["score"] == pytest.approx(best["logprob"] / (16 / 6) ** 0.6, rel=1e-9)
    assert rows[1]["date"] is None and rows[1]["error"] == "no date in 'hello world'"
    assert rows[2] == {"input": "", "date": None, "error": "cannot read '': empty text", "candidates": []}


@needs_zoo
def test_n_best_lists_logprob_and_score():
    r = run("translate", "--model", "transformer", "--beam-size", "3", "--n-best", "2", "1987.3.3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "1987.3.3" and lines[1].split("\t")[:2] == ["  1", "1987-03-03"] and len(lines) == 3
    assert "logprob" in lines[1] and "score" in lines[2]


@needs_zoo
@pytest.mark.parametrize("text", ["Feb 29 2023", "00/00/00", "31 april 2001", "hello world", "yesterday"])
@needs_zoo
def test_impossible_dates_and_non_dates_get_an_error_and_exit_status_1(text):
    """(The shipped seq2seq reads "13/13/2013" as 2013-03-13: see tests/zoo/test_models.py.)"""
    r = run("translate", text)
    assert r.returncode == 1 and r.stdout.startswith("error: ") and r.stdout.count("\n") == 1


@needs_zoo
def test_no_calendar_still_never_prints_an_impossible_date():
    r = run("translate", "--no-calendar", "--json", "Feb 29 2023", "2001-04-31", "31.04.2001", "march 3 1987")
    import datetime as dt

    for row in map(json.loads, r.stdout.splitlines()):
        assert row["date"] is None or dt.date.fromisoformat(row["date"])
    assert json.loads(r.stdout.splitlines()[-1])["date"] == "1987-03-03"


def test_translate_trace_writes_the_search_tree_page(tmp_path):
    # the page holds the very search that printed the date: its best node's tokens are that date
    page = tmp_path / "tree.html"
    r = run("translate", "--trace", str(page), "march 3 '87")
    assert r.returncode == 0, r.stderr
    date = r.stdout.strip()
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<script src" not in html and date in html
    from beamsearch.zoo.dates import TARGET_VOCAB
    from beamsearch.zoo.translator import Translator

    tree, greedy, found = Translator.load("seq2seq").trace("march 3 '87")
    assert TARGET_VOCAB.decode(tree.tokens(tree.best(0))) == found[0] == date
    assert greedy.tokens(greedy.best(0)) != tree.tokens(tree.best(0))  # greedy took another century


def test_translate_trace_draws_one_text(tmp_path):
    r = run("translate", "--trace", str(tmp_path / "t.html"), "march 3 '87", "1999-01-02")
    one_line_error(r, "--trace draws one search; got 2 texts")
    assert r.returncode == 2 and not (tmp_path / "t.html").exists()


def test_a_trace_page_that_cannot_be_written_is_one_line(tmp_path):
    page = tmp_path / "no such folder" / "t.html"
    r = run("translate", "--trace", str(page), "march 3 '87")
    one_line_error(r, f"cannot write --trace {page}: No such file or directory")
    assert r.returncode == 1


# ---- years outside 1800-2099, one verdict for translate and decode, stdin on a terminal -------------------

def year_sources():
    """(source, the year it writes): each year 1700-2300 in two four-digit forms drawn by a seeded
    generator, the boundary years 1799, 1800, 2099, 2100 in every form, and every 10th year in a
    two-digit form (its year then is the last two digits, as a string)."""
    from beamsearch.zoo import dates

    rng = random.Random(19)
    names = list(dates.FOUR_DIGIT_FORMS)
    out = []
    for year in range(1700, 2301):
        chosen = names if year in (1799, 1800, 2099, 2100) else rng.sample(names, 2)
        for name in chosen:
            date = dates._random_date(year, rng)
            if name == "european slashes":
                date = date.replace(day=25)  # the form is written only for days over 12
            out.append((dates.FOUR_DIGIT_FORMS[name](date, rng), year))
        if year % 10 == 0:
            out.append((dates._two_digit_form(dates._random_date(year, rng), rng), f"{year % 100:02d}"))
    return out


def check_years(sources, dates, errors):
    """Every printed date has the year its source writes (a two-digit year: its last two digits, in
    1800-2099); every four-digit year outside 1800-2099 gets no date and says why; and most
    in-range four-digit years are printed (the check is not vacuous)."""
    printed_in_range = []
    for (source, year), date, error in zip(sources, dates, errors, strict=True):
        if isinstance(year, str):
            assert date is None or (date[2:4] == year and 1800 <= int(date[:4]) <= 2099), (source, date)
        elif 1800 <= year <= 2099:
            assert date is None or date[:4] == str(year), (source, date)
            printed_in_range.append(date is not None)
        else:
            assert date is None and f"year {year} is outside 1800-2099" in error, (source, date, error)
    assert sum(printed_in_range) / len(printed_in_range) > 0.95


@needs_zoo
@pytest.mark.parametrize("name", ["seq2seq", "transformer"])
def test_no_year_but_the_one_written_is_ever_printed(tmp_path, name):
    """Issue 19 item 3; the oracle is the year put into each source: translate and decode alike."""
    sources = year_sources()
    text = "".join(f"{s}\n" for s, _ in sources)
    r = run("translate", "--model", name, "--json", stdin=text.encode())
    assert r.returncode == 1
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["input"] for row in rows] == [s for s, _ in sources]
    check_years(sources, [row["date"] for row in rows], [row["error"] for row in rows])
    (tmp_path / "in.txt").write_text(text)
    r = run("decode", "--model", name, "--input", str(tmp_path / "in.txt"), "--output", "-")
    assert r.returncode == 1
    records = [json.loads(line) for line in r.stdout.splitlines()]
    check_years(sources, [r["nbest"][0]["text"] if "nbest" in r else None for r in records],
                [r.get("error") for r in records])


@needs_zoo
def test_no_calendar_says_an_impossible_date_does_not_exist():
    """The model is confident of 2023-02-29 (-0.05): the reason is the calendar, not confidence."""
    r = run("translate", "--no-calendar", "Feb 29 2023", "2001-04-31")
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        "error: no date in 'Feb 29 2023': its best reading 2023-02-29 is not a date (2023 is not a leap year)",
        "error: no date in '2001-04-31': its best reading 2001-04-31 is not a date (April has 30 days)"]


VERDICT_TEXTS = ["Feb 30 2021", "hello world", "2100-01-01", "march 3 1987", "march 3 '87", "13/13/2013", "",
                 "Feb 29 2023", "1999", "the first of june two thousand five", "aug 9", "January 1, 2100",
                 "2001-04-31", "march 3 1987 \U0001F600", "12/11/10", "1999 12 31"]


@needs_zoo
@pytest.mark.parametrize("options", [(), ("--no-calendar",), ("--model", "transformer", "--beam-size", "3")])
def test_decode_and_translate_give_every_line_the_same_answer(tmp_path, options):
    """Issue 19 item 4: the same date, or the same reason for no date (a line the model cannot read:
    translate's 'cannot read ...: ' and decode's bare reason), and exit status 1 for both."""
    text = "".join(f"{t}\n" for t in VERDICT_TEXTS)
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    model = options[1] if options[:1] == ("--model",) else "seq2seq"
    rest = options[2:] if options[:1] == ("--model",) else options
    t = run("translate", "--model", model, *rest, "--json", stdin=text.encode())
    d = run("decode", "--model", model, *rest, "--input", str(tmp_path / "in.txt"), "--output", "-")
    assert t.returncode == d.returncode == 1
    rows, records = [json.loads(x) for x in t.stdout.splitlines()], [json.loads(x) for x in d.stdout.splitlines()]
    assert len(rows) == len(records) == len(VERDICT_TEXTS)
    for source, row, record in zip(VERDICT_TEXTS, rows, records, strict=True):
        assert record["input"] == row["input"] == source
        if row["error"] is None:
            assert record["nbest"][0]["text"] == row["date"] and "error" not in record, source
        elif row["error"].startswith("cannot read "):
            assert row["error"] == f"cannot read {source!r}: {record['error']}"
        else:
            assert record == {"index": record["index"], "input": source, "error": row["error"]}
    assert [row["date"] for row in rows].count(None) >= 10  # the bad lines did fail


@needs_zoo
def test_translate_refuses_a_two_digit_year_whose_century_the_model_cannot_tell():
    """'12/11/10': the seq2seq's 1810, 1910 and 2010 readings lie within 0.03 of each other (by
    teacher forcing, tests/zoo/test_models.py), so no century is printed: one error line naming them, exit 1."""
    r = run("translate", "12/11/10", "1999 12 31")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "1999-12-31"
    assert re.fullmatch(r"error: no date in '12/11/10': the century of its two-digit year is not written and the "
                        r"model cannot tell it \(its readings, with their log-probabilities: 1810-12-11 \(-1\.1\d\d\), "
                        r"1910-12-11 \(-1\.1\d\d\), 2010-12-11 \(-1\.1\d\d\); 1810 is not 0\.05 above every "
                        r"other\)", lines[0]), lines[0]


@needs_zoo
def test_decode_says_a_line_was_cut_at_its_max_steps(tmp_path):
    """A date takes 11 steps (10 characters, then eos): a line's max_steps of 10 or 3 is named as
    the reason, not "no date"; 11 gives the date."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": "march 3 1987", "max_steps": n}) + "\n" for n in (10, 3, 11)))
    r = run("decode", "--model", "seq2seq", "--jsonl", "--input", str(src), "--output", "-")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    for record, n in zip(records[:2], (10, 3), strict=True):
        assert record["error"] == (f"no date in 'march 3 1987': max_steps={n} cuts every output short of a date "
                                   "(a date takes 11 steps: 10 characters, then eos)")
    assert records[2]["nbest"][0]["text"] == "1987-03-03"


@needs_zoo
def test_translate_on_a_terminal_says_it_reads_stdin():
    """Issue 19 item 8: stdin a terminal (a pty), no TEXT: one line on stderr, then it reads."""
    import os
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "beamsearch", "translate"], stdin=slave, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    os.close(slave)
    try:
        os.write(master, b"march 3 1987\n\x04")  # a line, then Ctrl-D (end of input on a terminal)
        out, err = p.communicate(timeout=300)
    finally:
        os.close(master)
    assert p.returncode == 0 and out.decode() == "1987-03-03\n"
    assert err.decode() == ("beamsearch translate: reading dates from stdin, one per line; end with Ctrl-D (or "
                            "pass TEXT arguments; see --help)\n")


def test_translate_help_says_what_happens_to_years_outside_the_range():
    r = run("translate", "--help")
    assert "years 1800-2099" in " ".join(r.stdout.split()) and "never another year" in " ".join(r.stdout.split())


# ---- install hints: the extra to install, from the checkout (beamsearch is not on the package index) ------

def without(module: str, code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter in which ``module`` cannot be imported (``None`` in
    ``sys.modules`` makes ``import module`` raise ModuleNotFoundError, as when it is not installed)."""
    r = subprocess.run([sys.executable, "-c", f"import sys; sys.modules[{module!r}] = None\n{code}"],
                       capture_output=True, text=True, timeout=300)
    return r


@pytest.mark.parametrize("module", ["torch", "transformers"])
def test_import_beamsearch_hf_without_its_extra_names_the_extra(module):
    r = without(module, "import beamsearch.hf")
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1 and last == (f"ModuleNotFoundError: beamsearch.hf: {module} is not installed: install "
                                          "the hf extra (in the beamsearch checkout: pip install -e '.[hf]')")


def test_import_beamsearch_needs_numpy_alone_and_hf_names_no_index_package():
    r = without("torch", "import beamsearch, beamsearch.corpus, beamsearch.processors; print('ok')")
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_a_command_without_torch_is_one_line_naming_the_extras():
    r = without("torch", "from beamsearch.cli import main; sys.exit(main(['translate', 'march 3 1987']))")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("beamsearch: error: torch is not installed: install the zoo or the hf extra (in the beamsearch "
                        "checkout: pip install -e '.[zoo]' or pip install -e '.[hf]')\n")
    assert "beamsearch[" not in r.stderr  # not a name on the package index


def test_no_message_or_doc_names_an_extra_by_a_package_index_name():
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    files = [*root.glob("src/beamsearch/**/*.py"), *root.glob("src/beamsearch/**/*.md"), *root.glob("docs/*.md"),
             root / "README.md"]
    found = [str(f.relative_to(root)) for f in files if re.search(r"beamsearch\[\w", f.read_text(encoding="utf-8"))]
    assert found == []
