"""The command line, end to end through a subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "beamsearch", *args], capture_output=True, text=True, timeout=120)


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


@pytest.mark.parametrize("args, message", [
    (("demo", "--beam", "0"), "--beam must be >= 1; got 0"),
    (("demo", "--max-len", "-1"), "--max-len must be >= 1; got -1"),
    (("demo", "--beam", "x"), "invalid int value: 'x'"),
    (("nonsense",), "invalid choice"),
    ((), "required"),
])
def test_bad_input_is_one_line_and_nonzero(args, message):
    r = run(*args)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and message in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""
