"""Every python example in README.md and docs/*.md runs and its assertions hold."""

from __future__ import annotations

import pathlib
import re
import warnings

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # README and every document under docs/
BLOCKS = [block for doc in DOCS for block in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)]


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    """Each example runs, its assertions hold, and it prints no warning: a reader who copies it
    sees only what it prints itself (transformers logs its config warnings to stderr)."""
    if "transformers" in BLOCKS[index]:
        pytest.importorskip("transformers", reason="the hf extra is not installed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(BLOCKS[index], f"README.md[{index}]", "exec"), {})
    err = capsys.readouterr().err
    assert "[transformers]" not in err and "warning" not in err.lower(), err
    assert [str(w.message) for w in caught if "beamsearch" in w.filename or "transformers" in w.filename
            or w.filename.startswith("README")] == []
