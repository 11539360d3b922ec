"""The scripts in tools/: the mutation score's parsing and arithmetic, the pitfall runner's checks.
Nothing here runs mutmut or the suite."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[1] / "tools"
if not (TOOLS / "mutation_score.py").is_file():  # mutmut copies tests/ into mutants/ without tools/
    pytest.skip("tools/ is not next to tests/", allow_module_level=True)


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"tools_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


score_tool = load("mutation_score")
pitfalls = load("pitfall_mutants")

# as mutmut 3.8.1 prints it: "    {name}: {status}" per mutant, every status it knows
RESULTS = """\
    beamsearch.processors.xǁTopKǁ__call____mutmut_1: survived
    beamsearch.processors.xǁTopKǁ__call____mutmut_2: killed
    beamsearch.processors.x_banned_ngram_tokens__mutmut_10: killed
    beamsearch._engine.x_run__mutmut_1: killed
    beamsearch._engine.x_run__mutmut_2: timeout
    beamsearch._engine.x_run__mutmut_3: suspicious
    beamsearch._engine.x_run__mutmut_4: no tests
    beamsearch._engine.x_run__mutmut_5: skipped
    beamsearch._engine.x_run__mutmut_6: segfault
    beamsearch._engine.x_run__mutmut_7: not checked
    beamsearch._engine.x_run__mutmut_8: check was interrupted by user
    beamsearch._engine.x_run__mutmut_9: caught by type check
    beamsearch._engine.x_run__mutmut_10: killed
    beamsearch._engine.x_run__mutmut_11: killed

"""


def test_every_status_is_parsed_and_counts_in_the_denominator():
    statuses, unparsed = score_tool.parse_results(RESULTS + "some warning mutmut printed\n")
    assert unparsed == ["some warning mutmut printed"]
    assert len(statuses) == 14
    assert statuses["beamsearch._engine.x_run__mutmut_8"] == "check was interrupted by user"
    assert statuses["beamsearch.processors.xǁTopKǁ__call____mutmut_1"] == "survived"
    assert set(statuses.values()) == set(score_tool.STATUSES)
    killed, total, s = score_tool.score(statuses)
    # killed 5 + timeout 1 + caught by type check 1; the 7 others count against
    assert (killed, total) == (7, 14) and s == 0.5
    assert score_tool.score({}) == (0, 0, 0.0)


def test_statuses_match_mutmut():
    stats = pytest.importorskip("mutmut.stats")
    assert set(score_tool.STATUSES) == set(stats.status_by_exit_code.values())
    assert stats.status_by_exit_code[12345] in score_tool.NOT_KILLED  # mutmut's default status


def test_modules_and_table():
    assert score_tool.module_of("beamsearch.processors.xǁTopKǁ__call____mutmut_1") == "beamsearch.processors"
    assert score_tool.module_of("beamsearch._engine.x_run__mutmut_10") == "beamsearch._engine"
    statuses, _ = score_tool.parse_results(RESULTS)
    lines = score_tool.table(statuses).splitlines()
    assert lines[0].split()[:3] == ["module", "mutants", "killed"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith("-")}
    assert rows["beamsearch._engine"][1] == "11" and rows["beamsearch._engine"][-1] == "0.455"
    assert rows["beamsearch.processors"][1:3] == ["3", "2"] and rows["beamsearch.processors"][-1] == "0.667"
    assert rows["all"][1] == "14" and rows["all"][-1] == "0.500"


def test_the_survivors_file_lists_every_mutant_not_killed_with_its_diff():
    statuses, _ = score_tool.parse_results(RESULTS)
    text = score_tool.survivors_text(statuses, show=lambda name: f"-old {name}\n+new {name}")
    not_killed, timeouts = text.split("# counted as killed")
    for name, status in statuses.items():
        if status in ("killed", "caught by type check"):
            assert name not in text
        elif status == "timeout":
            assert f"## {name}: timeout\n-old {name}\n+new {name}" in timeouts
        else:
            assert f"## {name}: {status}\n-old {name}\n+new {name}" in not_killed
    assert text.startswith("# mutation score 0.500 = 7 killed / 14 mutants")


def test_main_scores_stored_results_and_exits_1_below_the_threshold(monkeypatch, tmp_path, capsys):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        assert cmd[:2] == ["mutmut", "results"]
        return score_tool.subprocess.CompletedProcess(cmd, 0, RESULTS, "")

    monkeypatch.setattr(score_tool.subprocess, "run", fake_run)
    monkeypatch.setattr(score_tool, "mutmut_show", lambda name: "(diff)")
    out = tmp_path / "survivors.txt"
    assert score_tool.main(["--no-run", "--survivors", str(out)]) == 1
    assert "mutation score 0.500" in capsys.readouterr().out and out.read_text().count("## ") == 8
    assert score_tool.main(["--no-run", "--survivors", str(out), "--threshold", "0.5"]) == 0
    # a glob scores the matching mutants only
    assert score_tool.main(["--no-run", "--survivors", str(out), "beamsearch.processors.*"]) == 1
    assert "mutation score 0.667 (2 killed of 3 mutants" in capsys.readouterr().out


def test_main_stops_when_mutmut_run_fails(monkeypatch, capsys):
    def fake_run(cmd, **kw):
        assert cmd[:4] == ["mutmut", "run", "--max-children", "2"]
        assert kw["env"]["OMP_NUM_THREADS"] == "1"
        return score_tool.subprocess.CompletedProcess(cmd, 1, "Failed to run clean test\n", "")

    monkeypatch.setattr(score_tool.subprocess, "run", fake_run)
    assert score_tool.main([]) == 2
    assert "Failed to run clean test" in capsys.readouterr().out


# ---- pitfall_mutants ------------------------------------------------------------------------------

@pytest.fixture
def package(tmp_path):
    src = tmp_path / "src" / "beamsearch"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "_engine.py").write_text("a = 1\nb = 2\nb = 2\n")
    return src


def test_texts_that_do_not_occur_exactly_once_are_reported_per_pitfall(package):
    table = [("p1", "once", "_engine.py", "a = 1", "a = 0"),
             ("p2", "twice", "_engine.py", "b = 2", "b = 0"),
             ("p3", "never", "_engine.py", "c = 3", "c = 0"),
             ("p4", "no module", "_gone.py", "a = 1", "a = 0")]
    problems = pitfalls.text_problems(package, table)
    assert set(problems) == {"p2", "p3", "p4"}
    assert "occurs 2 times" in problems["p2"] and "occurs 0 times" in problems["p3"]
    assert "not found" in problems["p4"]


def test_the_baseline_runs_the_command_on_an_unchanged_copy(package):
    # the command sees the copy first on PYTHONPATH, unchanged
    show = "import beamsearch._engine as e, sys; print('engine at', e.__file__, 'a =', e.a); sys.exit({})"
    ok, tail = pitfalls.run_baseline(package, [sys.executable, "-c", show.format(0)])
    assert ok and "a = 1" in tail and str(package) not in tail
    ok, tail = pitfalls.run_baseline(package, [sys.executable, "-c", show.format(1)])
    assert not ok and "a = 1" in tail
    # a planted change reaches the copy only
    assert pitfalls.run_one(package, "_engine.py", "a = 1", "a = 0",
                            [sys.executable, "-c", "import beamsearch._engine as e, sys; sys.exit(e.a == 0)"])
    assert (package / "_engine.py").read_text() == "a = 1\nb = 2\nb = 2\n"


def test_a_failing_baseline_stops_before_any_pitfall_is_judged(monkeypatch, capsys):
    monkeypatch.setattr(pitfalls, "text_problems", lambda src, chosen: {})
    monkeypatch.setattr(pitfalls, "run_baseline", lambda src, cmd: (False, "E   AssertionError: boom\n1 failed"))

    def planted(*args, **kw):
        raise AssertionError("a pitfall ran although the baseline failed")

    monkeypatch.setattr(pitfalls, "run_one", planted)
    assert pitfalls.main([]) == 2
    out = capsys.readouterr().out
    assert "baseline FAILED" in out and "1 failed" in out and "pitfalls killed" not in out


def test_broken_texts_fail_their_pitfall_and_the_others_still_run(monkeypatch, capsys):
    first, second = pitfalls.PITFALLS[0][0], pitfalls.PITFALLS[1][0]
    monkeypatch.setattr(pitfalls, "text_problems", lambda src, chosen: {first: "the text occurs 0 times"})
    monkeypatch.setattr(pitfalls, "run_baseline", lambda src, cmd: (True, ""))
    ran = []
    monkeypatch.setattr(pitfalls, "run_one", lambda src, module, old, new, cmd: ran.append(old) or True)
    assert pitfalls.main([first, second]) == 1
    out = capsys.readouterr().out
    assert f"{first}  BROKEN" in out and f"{second}  killed" in out and len(ran) == 1
    assert pitfalls.main(["nope"]) == 2
