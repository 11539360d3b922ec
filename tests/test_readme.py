"""Every python example in README.md and docs/**/*.md runs and its assertions hold.

A block may be preceded by an HTML comment ``<!-- setup ... -->`` whose lines after the first run
before it (the README's three-line call gets a tiny model that way), and followed by
``<!-- check ... -->`` whose lines run after it: a reader sees the lines that matter, the test
runs them with what they need and checks what the text around them says."""

from __future__ import annotations

import pathlib
import re
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("**/*.md"))]  # README and every document under docs/
NOT_A_COMMENT_END = r"(?:(?!-->).)*?"
BLOCK = re.compile(rf"(?:<!-- setup[^\n]*\n(?P<setup>{NOT_A_COMMENT_END})-->\s*)?```python\n(?P<code>.*?)```"
                   rf"(?:\s*<!-- check[^\n]*\n(?P<check>{NOT_A_COMMENT_END})-->)?", flags=re.S)
BLOCKS = [(doc.relative_to(ROOT).as_posix(), (m["setup"] or "") + m["code"] + (m["check"] or ""))
          for doc in DOCS for m in BLOCK.finditer(doc.read_text(encoding="utf-8"))]


def test_readme_has_examples():
    assert len(BLOCKS) >= 2
    assert sum(name == "README.md" for name, _ in BLOCKS) >= 2


def test_the_readme_is_a_front_page():
    """A newcomer reaches the Hugging Face call within the first screen, and the page stays short."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    assert any("hf.generate(model" in line for line in lines[:60])


def test_no_document_names_what_a_reader_cannot_look_up():
    """README, docs and BENCHMARKS speak of no internal notes: the contract's source documents,
    the project's issue numbers or a specification by another name than docs/CONTRACT.md."""
    words = re.compile(r"\bSPEC\b|(?i:\bissue \d+|\(issue|\bcourse chapter|\bseed 00\d)")
    found = []
    for doc in [*DOCS, ROOT / "BENCHMARKS.md", ROOT / "CHANGELOG.md"]:
        if doc.name == "CONTRACT.md":  # the contract says what its source documents are
            continue
        found += [f"{doc.name}:{i}: {line}" for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
                  if words.search(line)]
    assert found == []


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    """Each example runs, its assertions hold, and it prints no warning: a reader who copies it
    sees only what it prints itself (transformers logs its config warnings to stderr)."""
    name, code = BLOCKS[index]
    if "transformers" in code:
        pytest.importorskip("transformers", reason="the hf extra is not installed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, f"README.md[{index}]", "exec"), {})
    err = capsys.readouterr().err
    assert "[transformers]" not in err and "warning" not in err.lower(), (name, err)
    assert [str(w.message) for w in caught if "beamsearch" in w.filename or "transformers" in w.filename
            or w.filename.startswith("README")] == [], name
