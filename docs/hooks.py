"""Build hooks of the documentation site (mkdocs.yml: ``hooks:``).

- ``<!-- cli-help -->`` in a page becomes the help of ``beamsearch`` and of each of its commands,
  rendered from the argparse parser at build time, so the command-line reference cannot go stale.
- ``<!-- include: FILE -->`` becomes FILE's text (a file at the repository's root, such as
  BENCHMARKS.md), its title dropped and its headings one level down.
- Links that are right on GitHub but leave the site (``../BENCHMARKS.md``, ``docs/x.md`` in an
  included root file) are pointed at the site's own pages.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# root files the site shows as pages of its own
SITE_PAGES = {"BENCHMARKS.md": "benchmarks.md", "CHANGELOG.md": "changelog.md", "README.md": "index.md"}


def cli_help() -> str:
    """``beamsearch --help`` and ``beamsearch COMMAND --help`` for every command, as Markdown."""
    sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, whatever is installed
    os.environ["COLUMNS"] = "100"          # argparse wraps to the terminal's width: fix it
    try:
        from beamsearch.cli.main import parser
    finally:
        sys.path.remove(str(ROOT / "src"))
    top = parser()
    commands = next(a for a in top._actions if a.__class__.__name__ == "_SubParsersAction").choices
    parts = ["## beamsearch", "", "```text", top.format_help().rstrip(), "```"]
    for name, sub in commands.items():
        parts += ["", f"## beamsearch {name}", "", "```text", sub.format_help().rstrip(), "```"]
    return "\n".join(parts) + "\n"


def include(name: str) -> str:
    """A root file's text for a page: its first-level title dropped, every heading one level down."""
    text = (ROOT / name).read_text(encoding="utf-8")
    text = re.sub(r"\A# [^\n]*\n", "", text)
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" + line if not fenced and re.match(r"#+ ", line) else line)
    return "\n".join(out) + "\n"


def site_links(markdown: str) -> str:
    """Point links to root files at their site pages, and ``docs/x.md`` (a root file's view) at ``x.md``."""
    for name, page in SITE_PAGES.items():
        markdown = re.sub(rf"\]\((?:\.\./)?{re.escape(name)}(#[^)]*)?\)", rf"]({page}\1)", markdown)
    return re.sub(r"\]\(docs/([^)]+)\)", r"](\1)", markdown)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs' hook signature)
    """Fill the markers of a page, then fix its links for the site."""
    if "<!-- cli-help -->" in markdown:
        with contextlib.redirect_stdout(io.StringIO()):
            markdown = markdown.replace("<!-- cli-help -->", cli_help())
    markdown = re.sub(r"<!-- include: ([\w.]+) -->", lambda m: include(m.group(1)), markdown)
    return site_links(markdown)
