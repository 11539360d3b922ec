"""The documentation site builds with ``mkdocs build --strict`` and no warning, offline, and what it
generates is there: the command-line reference from the parser, the API reference from the
docstrings, BENCHMARKS.md and CHANGELOG.md as pages. Skipped only where mkdocs is not installed
(the ``docs`` extra; ``make test`` installs it)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    assert [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line] == [], log
    return out


def page(site, name: str) -> str:
    return re.sub(r"<[^>]+>", "", (site / name / "index.html").read_text(encoding="utf-8"))


def test_the_site_builds_strict_with_no_warning(site):
    assert (site / "index.html").is_file()


def test_the_cli_reference_is_the_parsers_help(site):
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from beamsearch.cli.main import parser
    finally:
        sys.path.remove(str(ROOT / "src"))
    text = page(site, "cli").replace("&quot;", '"').replace("&#39;", "'").replace("&amp;", "&")
    text = text.replace("&lt;", "<").replace("&gt;", ">")
    top = parser()
    commands = next(a for a in top._actions if a.__class__.__name__ == "_SubParsersAction").choices
    assert set(commands) >= {"demo", "translate", "evaluate", "train", "decode"}
    for name, sub in commands.items():
        assert f"usage: beamsearch {name}" in text
        for action in sub._actions:  # every option of every command, by its flags
            for flag in action.option_strings:
                assert flag in text, (name, flag)


def test_the_api_reference_is_generated_from_the_docstrings(site):
    from beamsearch import beam_search_batch
    from beamsearch.processors import TopP

    first = lambda doc: " ".join(doc.split("\n\n")[0].split())[:30]  # noqa: E731 (the words before any term the site links)
    assert first(beam_search_batch.__doc__) in " ".join(page(site, "reference/search").split())
    assert first(TopP.__doc__) in " ".join(page(site, "reference/processors").split())


def test_results_and_history_are_pages_and_nothing_is_fetched(site):
    assert "Grammar-constrained beams" in page(site, "benchmarks")
    assert "Architecture v3" in page(site, "changelog")
    for html in site.rglob("*.html"):
        assert "fonts.googleapis" not in html.read_text(encoding="utf-8"), html


def test_no_page_names_what_a_reader_cannot_look_up(site):
    """The rendered pages, the API reference's docstrings included, name the contract by its page,
    never by a short name of the project's own (SPEC, seeds, course chapter, issue numbers)."""
    words = re.compile(r"\bSPEC\b|(?i:\bissue \d+|\(issue|\bcourse chapter|\bseed 00\d)")
    found = []
    for html in sorted(site.rglob("index.html")):
        name = html.parent.relative_to(site).as_posix()
        if name == "CONTRACT":  # the contract says what its source documents are
            continue
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html.read_text(encoding="utf-8")))
        found += [f"{name}: ...{text[max(0, m.start() - 40):m.end() + 20]}..." for m in words.finditer(text)]
    assert found == []
