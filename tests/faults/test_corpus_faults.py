"""Corpus decoding under faults.

`beamsearch decode --mode step` under a failing scorer: a scorer that raises, returns NaN or the
wrong number of scores for one call fails the lines whose candidates were in that call (each
decoded again alone to tell which), never the run, also when the run is killed and resumed.

The faulty scorer is the clean one (a fixed function of a partial solution's tokens) that fails
on "poisoned" partial solutions: those that the chosen lines' searches score and no other line's
does (found by running each line alone with a recording scorer). Oracle: every other line's
record equals the clean run's, and each chosen line gets an error record naming it and its
fault.

What a resume keeps of an `hf:` model's records, whose floats depend on the lines that share a
batch (docs/corpus.md, "Resume and floats"): runs interrupted (Ctrl-C at random model calls, and
SIGKILL at random times) and resumed under other --max-rows give the uninterrupted run's records
with tokens, texts, flags, order and errors equal, and logprob / score within the stated
tolerance."""

from __future__ import annotations

import json
import os
import random
import runpy
import signal
import subprocess
import sys
import time

import pytest

from beamsearch import corpus
from beamsearch.cli import main
from beamsearch.corpus import Line, decode_corpus, decode_records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXTS = [f"line {i} " + "ab" * (i % 5) for i in range(16)]
SEARCH = dict(mode="step", n=4, m=2, rounds=3, max_steps=3, sample_seed=5)
FLAGS = ["--mode", "step", "--n", "4", "--m", "2", "--rounds", "3", "--max-steps", "3", "--sample-seed", "5"]
FAULTS = {3: "raise", 8: "nan", 9: "short", 13: "raise"}  # line index -> how the scorer fails on it
PROBLEMS = {"raise": "RuntimeError: verifier down", "nan": "NaN", "short": "one real per candidate"}

SCORER = '''
import json, os

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "poison.json")) as f:
    POISON = {tuple(tokens): fault for tokens, fault in json.load(f)}


def score(prompts, partials):
    out = [((sum((i + 1) * t for i, t in enumerate(s)) * 31) % 97 + 1) / 98 for s in partials]
    for j, s in enumerate(partials):
        fault = POISON.get(tuple(s))
        if fault == "raise":
            raise RuntimeError("verifier down")
        if fault == "nan":
            out[j] = float("nan")
            return out
        if fault == "short":
            return out[:-1]
    return out
'''


def scorer_module(folder, poisoned):
    """``fault_scorer.py`` and its ``poison.json`` written to ``folder``; its functions."""
    (folder / "fault_scorer.py").write_text(SCORER)
    (folder / "poison.json").write_text(json.dumps([[list(p), f] for p, f in poisoned.items()]))
    return runpy.run_path(str(folder / "fault_scorer.py"))


def poison(faults, clean):
    """``{partial solution: fault}``: the partials that the lines of ``faults`` score alone and no
    other line of TEXTS does (scored by ``clean``)."""
    model = corpus.toy_model()
    seen = []
    for text in TEXTS:
        scored = set()

        def recording(prompts, partials, scored=scored):
            scored.update(map(tuple, partials))
            return clean(prompts, partials)

        list(decode_records(model, [Line(0, text)], scorer=recording, **SEARCH))
        seen.append(scored)
    others = set().union(*(s for i, s in enumerate(seen) if i not in faults))
    out = {}
    for i, fault in faults.items():
        mine = seen[i] - others
        assert mine, f"line {i} scores no partial solution of its own"
        out.update({p: fault for p in mine})
    return out


def check_records(records, reference, scorer_name):
    """Each line of FAULTS has its error record naming the line and its fault; every other
    record equals the clean run's."""
    assert [r["index"] for r in records] == list(range(len(TEXTS)))
    for r, want in zip(records, reference, strict=True):
        i = r["index"]
        if i in FAULTS:
            assert set(r) == {"index", "input", "error"} and r["input"] == TEXTS[i], r
            assert r["error"].startswith(f"the scorer {scorer_name!r} failed on {corpus.line_name(i)}: "), r
            assert PROBLEMS[FAULTS[i]] in r["error"], r
        else:
            assert r == want


def test_a_failing_scorer_fails_only_the_lines_of_its_calls(tmp_path):
    """In process, at 1, 2, 3 and 16 lines per scorer call (n=4 rows a line): the raising, NaN and
    short answers each end only the lines that fail alone; the clean run has no error at all."""
    model = corpus.toy_model()
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    clean = scorer_module(tmp_path, {})["score"]
    reference = sorted(decode_records(model, lines, scorer=clean, max_rows=64, **SEARCH), key=lambda r: r["index"])
    assert all("nbest" in r for r in reference)
    score = scorer_module(tmp_path, poison(FAULTS, clean))["score"]
    for max_rows in (4, 8, 12, 64):
        records = sorted(decode_records(model, lines, scorer=score, max_rows=max_rows, **SEARCH),
                         key=lambda r: r["index"])
        check_records(records, reference, "score")


def test_a_scorer_that_always_raises_is_an_error_record_per_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    (tmp_path / "down.py").write_text("def score(prompts, partials):\n    raise RuntimeError('verifier down')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(TEXTS[:5]) + "\n")
    code = main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--scorer", "down:score",
                 *FLAGS, "--max-rows", "8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err == ["beamsearch: 5 of 5 lines failed (see their error field)"]
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["error"] for r in records] == [f"the scorer 'down:score' failed on {corpus.line_name(i)}: "
                                             "RuntimeError: verifier down" for i in range(5)]
    assert not corpus.partial_path(out).exists()


def test_scorer_failures_killed_and_resumed_at_random_points(tmp_path):
    """8 runs of a faulty scorer killed with SIGKILL at random times (fixed seed), then resumed,
    some killed again: each ends with every other line's record equal to the clean run's and an
    error record for each failing line."""
    rng = random.Random(40)
    clean = scorer_module(tmp_path, {})["score"]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))

    def command(out, *extra):
        return [sys.executable, "-m", "beamsearch", "decode", "--model", "_toy:0.01", "--input", str(src),
                "--output", str(out), "--scorer", "fault_scorer:score", *FLAGS, "--max-rows", "12", *extra]

    reference = tmp_path / "reference.jsonl"
    started = time.monotonic()
    done = subprocess.run(command(reference), env=env, cwd=tmp_path, capture_output=True, text=True)
    whole = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    want = [json.loads(x) for x in reference.read_text().splitlines()]
    scorer_module(tmp_path, poison(FAULTS, clean))
    killed = 0
    for trial in range(8):
        out = tmp_path / f"out{trial}.jsonl"
        side = corpus.partial_path(out)
        for attempt in range(1 + trial % 2):  # odd trials: killed, resumed, killed again
            run = subprocess.Popen(command(out, *(["--resume"] if attempt else [])), env=env, cwd=tmp_path,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while run.poll() is None and not (side.exists() and side.stat().st_size > 400):
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, whole / 3))
            run.send_signal(signal.SIGKILL)
            run.wait()
            killed += run.returncode == -signal.SIGKILL
        resumed = subprocess.run(command(out, "--resume"), env=env, cwd=tmp_path, capture_output=True, text=True)
        assert resumed.returncode == 1, resumed.stderr
        assert resumed.stderr.strip().splitlines()[-1] == f"beamsearch: {len(FAULTS)} of {len(TEXTS)} lines failed " \
                                                          "(see their error field)"
        check_records([json.loads(x) for x in out.read_text().splitlines()], want, "fault_scorer:score")
        assert not side.exists()
    print(f"clean run {whole:.2f} s; {killed} of 12 kills landed mid-run")
    assert killed >= 6


# ---- resume and floats: an hf: model -------------------------------------------------------------------

try:  # the tiny random-weight GPT-2 and BART folders
    from tests.corpus.test_hf_folder import bart_dir, gpt2_dir  # noqa: F401 (fixtures)
except pytest.skip.Exception:  # no torch or transformers
    @pytest.fixture
    def gpt2_dir():
        pytest.skip("needs torch and transformers")

    bart_dir = gpt2_dir

FLOATS = 1e-4  # docs/corpus.md: a float of a record agrees to 1e-4 x max(1, |value|) across batchings
HF_TEXTS = [" ".join(random.Random(i).choice(["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away",
                                               "and", "then", "slept", "by", "door"]) for _ in range(1 + i % 7))
            for i in range(24)] + ["", "an unknown word"]


def same_but_floats(got, want):
    """The statement: the same records in the same order, every field equal but logprob and score,
    which agree to FLOATS; returns the largest float difference seen."""
    assert [(r["index"], r["input"], r.get("error")) for r in got] == [(r["index"], r["input"], r.get("error"))
                                                                       for r in want]
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for a, b in zip(g.get("nbest", []), w.get("nbest", []), strict=True):
            assert {k: v for k, v in a.items() if k not in ("logprob", "score")} == \
                {k: v for k, v in b.items() if k not in ("logprob", "score")}, g["input"]
            for key in ("logprob", "score"):
                assert abs(a[key] - b[key]) <= FLOATS * max(1.0, abs(b[key])), (g["input"], key, a[key], b[key])
                worst = max(worst, abs(a[key] - b[key]))
        assert len(g.get("nbest", [])) == len(w.get("nbest", []))
    return worst


def read(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


DATES = [f"{['march', 'june', 'oct', 'dec'][i % 4]} {1 + i * 7 % 28} {1850 + i * 37 % 240}" if i % 3 else
         f"{1 + i % 12}/{1 + i * 5 % 28}/{1900 + i * 13 % 150}" for i in range(30)]


@pytest.mark.parametrize("kind", ["gpt2", "bart", "seq2seq"])
def test_a_torch_model_resumed_under_other_max_rows_keeps_the_stated_guarantee(kind, request, tmp_path):
    """In process: 4 runs stopped by Ctrl-C at a random model call under --max-rows 5, each resumed
    under --max-rows 7, 9 or 320, against the uninterrupted run under --max-rows 12 (hf: GPT-2 and
    BART, and the zoo seq2seq model with its verdicts)."""
    if kind == "seq2seq":
        pytest.importorskip("torch")
        model, texts = corpus.load_model("seq2seq"), DATES
    else:
        model, texts = corpus.load_model(f"hf:{request.getfixturevalue(f'{kind}_dir')}", hf_max_steps=8), HF_TEXTS
    lines = [Line(i, t) for i, t in enumerate(texts)]
    search = dict(beam_size=3, n_best=2)
    reference = tmp_path / "reference.jsonl"
    decode_corpus(model, lines, str(reference), max_rows=12, **search)
    want = read(reference)
    rng, worst = random.Random(7), 0.0
    for trial, rows in enumerate((7, 9, 320, 7)):
        out = tmp_path / f"out{trial}.jsonl"
        step, calls, stop = model.step, [], rng.randint(4, 24)

        def interrupted(state, y_prev, step=step, calls=calls, stop=stop):
            calls.append(1)
            if len(calls) == stop:
                raise KeyboardInterrupt
            return step(state, y_prev)

        model.step = interrupted
        try:
            with pytest.raises(corpus.Interrupted):
                decode_corpus(model, lines, str(out), max_rows=5, **search)
        finally:
            del model.step
        decode_corpus(model, lines, str(out), resume=True, max_rows=rows, **search)
        worst = max(worst, same_but_floats(read(out), want))
    print(f"{kind}: largest float difference {worst:.3g}")


def test_an_hf_run_killed_at_random_times_and_resumed_keeps_the_stated_guarantee(gpt2_dir, tmp_path):
    """SIGKILL: 2 runs of `beamsearch decode --model hf:DIR --max-rows 5` killed at a random time
    once records are written, each resumed under --max-rows 7, against the uninterrupted run under
    --max-rows 12."""
    src = tmp_path / "in.txt"
    src.write_text("\n".join(HF_TEXTS) + "\n", encoding="utf-8")
    flags = ["--model", f"hf:{gpt2_dir}", "--input", str(src), "--beam-size", "3", "--n-best", "2", "--max-steps", "8"]
    reference = tmp_path / "reference.jsonl"
    assert main(["decode", *flags, "--output", str(reference), "--max-rows", "12"]) == 1
    want = read(reference)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    rng = random.Random(8)
    for trial in range(2):
        out = tmp_path / f"out{trial}.jsonl"
        side = corpus.partial_path(out)
        run = subprocess.Popen([sys.executable, "-m", "beamsearch", "decode", *flags, "--output", str(out),
                                "--max-rows", "5"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while run.poll() is None and not (side.exists() and b'"index"' in side.read_bytes()):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.5))
        run.send_signal(signal.SIGKILL)
        assert run.wait() == -signal.SIGKILL  # killed mid-run, its side file holding records
        assert main(["decode", *flags, "--output", str(out), "--max-rows", "7", "--resume"]) == 1
        same_but_floats(read(out), want)
        assert not side.exists()
