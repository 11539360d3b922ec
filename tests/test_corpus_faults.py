"""`beamsearch decode --mode step` under a failing scorer: a scorer that raises, returns NaN or the
wrong number of scores for one call fails the lines whose candidates were in that call (each
decoded again alone to tell which), never the run, also when the run is killed and resumed.

The faulty scorer is the clean one (a fixed function of a partial solution's tokens) that fails
on "poisoned" partial solutions: those that the chosen lines' searches score and no other line's
does (found by running each line alone with a recording scorer). Oracle: every other line's
record equals the clean run's, and each chosen line gets an error record naming it and its
fault."""

from __future__ import annotations

import json
import os
import random
import runpy
import signal
import subprocess
import sys
import time

from beamsearch import corpus
from beamsearch.corpus import Line, decode_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    for r, want in zip(records, reference):
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
    from beamsearch.cli import main

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
