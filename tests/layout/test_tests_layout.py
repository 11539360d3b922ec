"""tests/ mirrors src/beamsearch (tools/check_tests_layout.py): on this repository, and on small
trees built here where each rule is broken once, against the messages written out by hand."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "check_tests_layout.py"
if not TOOL.is_file():  # mutmut copies tests/ into mutants/ without tools/
    pytest.skip("tools/ is not next to tests/", allow_module_level=True)

spec = importlib.util.spec_from_file_location("tools_check_tests_layout", TOOL)
layout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layout)

LIST = "tools/modules_without_tests.txt"


def tree(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


MIRRORED = {
    "src/beamsearch/__init__.py": "", "src/beamsearch/viz.py": "",
    "src/beamsearch/pkg/__init__.py": "", "src/beamsearch/pkg/grammar.py": "",
    "src/beamsearch/pkg/grammar_engine.py": "",
    "tests/test_viz.py": "", "tests/pkg/test_pkg.py": "", "tests/pkg/test_grammar.py": "",
    "tests/pkg/test_grammar_engine.py": "", "tests/pkg/test_grammar_engine_caches.py": "",
    "tests/contract/test_signatures.py": "", "tests/test_readme.py": "",
    LIST: "# a comment\n__init__.py -- re-exports\ntests/test_readme.py -- the README's examples\n",
}


def test_this_repository_mirrors_its_source():
    assert layout.problems(layout.ROOT) == []


def test_a_mirrored_tree_has_no_problem(tmp_path):
    assert layout.problems(tree(tmp_path, MIRRORED)) == []


def test_test_paths_of_modules_packages_and_the_top():
    assert layout.test_stem("core/engine.py") == "core/test_engine"
    assert layout.test_stem("hf/__init__.py") == "hf/test_hf"
    assert layout.test_stem("viz.py") == "test_viz"
    assert layout.test_stem("__init__.py") == "test_beamsearch"
    assert layout.test_stem("hf/generate_repo/custom_generate/generate.py") == \
        "hf/generate_repo/custom_generate/test_generate"


def test_a_file_belongs_to_the_module_of_the_longest_name_it_starts_with():
    stems = ["pkg/test_grammar", "pkg/test_grammar_engine"]
    assert layout.owner("pkg/test_grammar_engine_caches", stems) == "pkg/test_grammar_engine"
    assert layout.owner("pkg/test_grammar_refusals", stems) == "pkg/test_grammar"
    assert layout.owner("pkg/test_grammars", stems) is None  # no "_" after the module's name


def test_a_module_without_its_file_or_a_line_is_named(tmp_path):
    files = dict(MIRRORED)
    del files["tests/pkg/test_grammar.py"]  # test_grammar_engine*.py belong to grammar_engine.py
    assert layout.problems(tree(tmp_path, files)) == [
        f"src/beamsearch/pkg/grammar.py: no tests/pkg/test_grammar.py and not in {LIST}"]


def test_a_line_for_a_module_with_its_file_or_for_no_module_is_named(tmp_path):
    files = dict(MIRRORED)
    files[LIST] += "viz.py -- drawn by hand\ngone.py -- removed since\n"
    assert layout.problems(tree(tmp_path, files)) == [
        f"{LIST}: viz.py has tests/test_viz.py; strike its line",
        f"{LIST}: gone.py is no module of src/beamsearch"]


def test_a_test_file_named_after_no_module_of_its_folder_is_named(tmp_path):
    files = dict(MIRRORED, **{"tests/pkg/test_renamed.py": "", "tests/test_speech_thing.py": "",
                              "tests/pkg/test_viz.py": ""})  # viz.py is at the top, not in pkg/
    move = "move it to tests/PACKAGE/test_MODULE.py, or to a folder named for what it checks"
    assert layout.problems(tree(tmp_path, files)) == [
        f"tests/pkg/test_renamed.py: in tests/pkg/ but named after no module there: {move}",
        f"tests/pkg/test_viz.py: in tests/pkg/ but named after no module there: {move}",
        f"tests/test_speech_thing.py: in the top of tests/ but named after no module there: {move}"]


def test_a_line_without_its_reason_is_refused(tmp_path):
    files = dict(MIRRORED)
    files[LIST] += "viz.py\n"
    with pytest.raises(ValueError, match=rf"^{LIST}:4: a line is 'path -- why'; got 'viz.py'$"):
        layout.problems(tree(tmp_path, files))


def test_main_prints_the_problems_and_exits_1(monkeypatch, tmp_path, capsys):
    files = dict(MIRRORED)
    del files["tests/test_viz.py"]
    monkeypatch.setattr(layout, "ROOT", tree(tmp_path, files))
    assert layout.main() == 1
    assert capsys.readouterr().out == f"src/beamsearch/viz.py: no tests/test_viz.py and not in {LIST}\n"
    (tmp_path / "tests" / "test_viz.py").write_text("")
    assert layout.main() == 0
    assert capsys.readouterr().out == "tests/ mirrors src/beamsearch: 5 modules\n"
