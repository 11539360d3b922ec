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
    beamsearch.core.engine.x_run__mutmut_1: killed
    beamsearch.core.engine.x_run__mutmut_2: timeout
    beamsearch.core.engine.x_run__mutmut_3: suspicious
    beamsearch.core.engine.x_run__mutmut_4: no tests
    beamsearch.core.engine.x_run__mutmut_5: skipped
    beamsearch.core.engine.x_run__mutmut_6: segfault
    beamsearch.core.engine.x_run__mutmut_7: not checked
    beamsearch.core.engine.x_run__mutmut_8: check was interrupted by user
    beamsearch.core.engine.x_run__mutmut_9: caught by type check
    beamsearch.core.engine.x_run__mutmut_10: killed
    beamsearch.core.engine.x_run__mutmut_11: killed

"""


def test_every_status_is_parsed_and_counts_in_the_denominator():
    statuses, unparsed = score_tool.parse_results(RESULTS + "some warning mutmut printed\n")
    assert unparsed == ["some warning mutmut printed"]
    assert len(statuses) == 14
    assert statuses["beamsearch.core.engine.x_run__mutmut_8"] == "check was interrupted by user"
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
    assert score_tool.module_of("beamsearch.core.engine.x_run__mutmut_10") == "beamsearch.core.engine"
    statuses, _ = score_tool.parse_results(RESULTS)
    lines = score_tool.table(statuses).splitlines()
    assert lines[0].split()[:3] == ["module", "mutants", "killed"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith("-")}
    assert rows["beamsearch.core.engine"][1] == "11" and rows["beamsearch.core.engine"][-1] == "0.455"
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


def test_every_pitfall_text_occurs_once_in_the_source():
    """The planted pitfalls still find their text: a move or an edit of a module must carry the
    table along (s15 had drifted when greedy_decode's call was wrapped over two lines)."""
    source = TOOLS.parent / "src" / "beamsearch"
    assert pitfalls.text_problems(source, pitfalls.PITFALLS) == {}


# ---- check_structure ------------------------------------------------------------------------------

structure = load("check_structure")


def tree(tmp_path, files: dict[str, str]):
    pkg = tmp_path / "src" / "beamsearch"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def breaches(monkeypatch, tmp_path, files):
    pkg = tree(tmp_path, files)
    monkeypatch.setattr(structure, "PACKAGE", pkg)
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    mods = structure.modules()
    return [*structure.sizes(mods), *structure.cycles(mods), *structure.privacy(mods)]


def test_the_source_tree_keeps_the_house_rules():
    """No breach but the listed debts, and no listed debt that is mended (the list only shrinks)."""
    assert structure.verdict(structure.breaches(), structure.debts()) == ([], [])


def test_a_new_breach_or_a_mended_debt_fails_the_check():
    assert structure.verdict(["a", "b"], ["a"]) == (["b"], [])
    assert structure.verdict(["a"], ["a", "c"]) == ([], ["c"])
    # a debt is matched without its line number and size, which move with every edit
    assert structure.verdict(["src/x.py: function f (line 9) has 70 lines (at most 60)",
                              "src/x.py: 500 lines (at most 400)"],
                             ["src/x.py: function f (line 3) has 65 lines (at most 60)",
                              "src/x.py: 450 lines (at most 400)"]) == ([], [])


def test_structure_finds_long_modules_and_functions(monkeypatch, tmp_path):
    long_fn = "def f():\n" + "    x = 1\n" * 60
    documented = 'def h():\n    """One.\n\n    Two.\n    """\n' + "    x = 1\n" * 59
    machine = 'def g():\n    """Steps (a state machine)."""\n' + "    x = 1\n" * 60
    found = breaches(monkeypatch, tmp_path, {"__init__.py": "", "a.py": long_fn, "b.py": machine, "d.py": documented,
                                             "c.py": "x = 1\n" * 401})
    assert found == ["src/beamsearch/a.py: function f (line 1) has 61 lines (at most 60)",
                     "src/beamsearch/c.py: 401 lines (at most 400)"]


def test_structure_finds_cycles_also_through_imports_inside_functions(monkeypatch, tmp_path):
    found = breaches(monkeypatch, tmp_path, {
        "__init__.py": "", "a.py": "from beamsearch.b import y\nx = 1\n",
        "b.py": "y = 2\ndef f():\n    from beamsearch.a import x\n    return x\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from beamsearch.d import z\n",
        "d.py": "import beamsearch.c\nz = 1\n"})
    assert found == ["import cycle: beamsearch.a <-> beamsearch.b"]


def test_structure_finds_private_names_across_modules(monkeypatch, tmp_path):
    found = breaches(monkeypatch, tmp_path, {
        "__init__.py": "", "a.py": "_x = 1\ndef _f():\n    pass\n",
        "b.py": "from beamsearch.a import _x\nimport beamsearch.a as a\na._f()\n",
        "pkg/__init__.py": "", "pkg/_inner.py": "y = 1\n", "pkg/user.py": "from beamsearch.pkg._inner import y\n",
        "other.py": "from beamsearch.pkg._inner import y\n",
        "zoo/__init__.py": "", "zoo/m.py": "from beamsearch.a import x\nfrom beamsearch import y\n"})
    assert found == ["src/beamsearch/b.py: imports the private name _x of beamsearch.a",
                     "src/beamsearch/b.py:3: uses the private name _f of beamsearch.a",
                     "src/beamsearch/other.py: imports beamsearch.pkg._inner, a private module of another package",
                     "src/beamsearch/zoo/m.py: the zoo imports beamsearch.a; it uses the public API only"]


def test_a_package_whose_name_starts_like_the_owner_is_another_package(monkeypatch, tmp_path):
    found = breaches(monkeypatch, tmp_path, {
        "__init__.py": "", "pkg/__init__.py": "", "pkg/_inner.py": "y = 1\n",
        "pkgx/__init__.py": "", "pkgx/user.py": "from beamsearch.pkg._inner import y\n"})
    assert found == ["src/beamsearch/pkgx/user.py: imports beamsearch.pkg._inner, a private module of another package"]


def layer_breaches(monkeypatch, tmp_path, files):
    tree(tmp_path, files)
    monkeypatch.setattr(structure, "PACKAGE", tmp_path / "src" / "beamsearch")
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    return list(structure.layers(structure.modules()))


def test_structure_finds_an_import_from_a_layer_above_also_inside_a_function(monkeypatch, tmp_path):
    """core sits below modes and controls above processors (LAYERS): an upward import is a breach
    wherever it is written; a downward one, one inside a layer and one for annotations only are not."""
    found = layer_breaches(monkeypatch, tmp_path, {
        "__init__.py": "from beamsearch.modes.beam import x\n",
        "core/__init__.py": "", "core/select.py": "y = 1\n",
        "core/engine.py": "from beamsearch.core.select import y\ndef f():\n    from beamsearch.modes.beam import x\n",
        "core/trace.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from beamsearch.modes.beam import x\n",
        "modes/__init__.py": "",
        "modes/beam.py": "from beamsearch.core.select import y\nfrom beamsearch.controls import z\nx = 1\n",
        "controls/__init__.py": "from beamsearch.processors import p\nz = 1\n",
        "processors/__init__.py": "from beamsearch.controls import z\np = 1\n",
        "strategies/__init__.py": "import beamsearch.processors\n"})
    assert found == [
        "src/beamsearch/core/engine.py: imports beamsearch.modes.beam, a layer above its own (core below modes)",
        "src/beamsearch/processors/__init__.py: imports beamsearch.controls, a layer above its own "
        "(processors/strategies below controls)"]


def test_structure_names_a_module_outside_every_layer(monkeypatch, tmp_path):
    found = layer_breaches(monkeypatch, tmp_path, {"__init__.py": "", "newpkg/__init__.py": "",
                                                   "newpkg/m.py": "x = 1\n",
                                                   "corpusx.py": "x = 1\n"})
    assert found == [
        "src/beamsearch/corpusx.py: beamsearch.corpusx is in no layer of LAYERS (tools/check_structure.py)",
        "src/beamsearch/newpkg/__init__.py: beamsearch.newpkg is in no layer of LAYERS (tools/check_structure.py)",
        "src/beamsearch/newpkg/m.py: beamsearch.newpkg.m is in no layer of LAYERS (tools/check_structure.py)"]


def test_the_layers_of_the_source_tree_point_one_way():
    """Every module of src/beamsearch is in a layer and none imports from a layer above its own:
    core imports nothing above it."""
    mods = structure.modules()
    assert list(structure.layers(mods)) == []
    assert {structure.layer_of(name) for name in mods if name.startswith("beamsearch.core")} == {
        structure.layer_of("beamsearch.core")}


def test_docs_architecture_lists_the_layers_in_order():
    """docs/architecture.md names every layer of LAYERS, bottom to top, in the checked order."""
    text = (TOOLS.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2:3].isdigit()]
    assert [row.split("|")[2].strip() for row in rows] == [
        ", ".join(f"`{name}`" for name in names) for names in structure.LAYERS]


def test_make_pictures_writes_every_picture_the_docs_show(tmp_path, monkeypatch, capsys):
    """tools/make_pictures.py runs whole (the dates picture too, when the zoo extra is there) and
    writes an SVG and an HTML page of each picture, each SVG with as many nodes and items as the one
    docs/pictures holds (its text is not compared: scores are printed from floats)."""
    pictures = load("make_pictures")
    monkeypatch.setattr(pictures, "OUT", tmp_path)
    pictures.main()
    out = capsys.readouterr().out
    assert "skipped" not in out or importlib.util.find_spec("torch") is None, out
    names = ["hand_example", "ctc_example", "transducer_example"] + (["dates"] if "skipped" not in out else [])
    for name in names:
        assert (tmp_path / f"{name}.svg").read_text().startswith("<svg")
        assert "<html" in (tmp_path / f"{name}.html").read_text().lower()
        shipped = (TOOLS.parent / "docs" / "pictures" / f"{name}.svg").read_text()
        made = (tmp_path / f"{name}.svg").read_text()
        for kind in ('<g class="node', '<g class="item'):
            assert made.count(kind) == shipped.count(kind) > 0, (name, kind)
