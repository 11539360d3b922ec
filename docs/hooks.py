"""Build hooks of the documentation site (mkdocs.yml: ``hooks:``).

- ``<!-- cli-help -->`` in a page becomes the help of ``beamsearch`` and of each of its commands,
  rendered from the argparse parser at build time, so the command-line reference cannot go stale.
- ``<!-- include: FILE -->`` becomes FILE's text (a file at the repository's root, such as
  BENCHMARKS.md), its title dropped and its headings one level down.
- Links that are right on GitHub but leave the site (``../BENCHMARKS.md``, ``docs/x.md`` in an
  included root file) are pointed at the site's own pages.
- In the pages generated from the code (the API and command-line reference), the docstrings' short
  names for the contract ("SPEC section 6", "seed 000") and for the README's former sections become
  what they name on the site: the contract's sections, linked, and the guide.
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


def code_terms(html: str, page_url: str) -> str:
    """The docstrings' names for the contract and the guide, in the text (never in tags) of a generated page."""
    up = "../" * page_url.count("/")
    contract, guide = f'<a href="{up}CONTRACT/">the contract</a>', f'<a href="{up}">the guide</a>'
    terms = [(r"\bSPEC (sections?)\b", contract + r"'s \1"), (r"\bSPEC\b", contract),
             (r"\bseed 000\b", "the contract's step-function tutorial"),
             (r"\bseed 001\b", "the contract's batched-search specification"), (r"\bREADME\b", guide)]
    parts = re.split(r"(<[^>]+>)", html)
    for i in range(0, len(parts), 2):  # the text between tags
        for pattern, replacement in terms:
            parts[i] = re.sub(pattern, replacement, parts[i])
    return "".join(parts)


def on_page_content(html, page, config, files):  # noqa: ARG001 (mkdocs' hook signature)
    """Generated pages: the code's short names made into what they name on the site."""
    if page.file.src_uri.startswith("reference/") or page.file.src_uri == "cli.md":
        return code_terms(html, page.url)
    return html


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs' hook signature)
    """Fill the markers of a page, then fix its links for the site."""
    if "<!-- cli-help -->" in markdown:
        with contextlib.redirect_stdout(io.StringIO()):
            markdown = markdown.replace("<!-- cli-help -->", cli_help())
    markdown = re.sub(r"<!-- include: ([\w.]+) -->", lambda m: include(m.group(1)), markdown)
    return site_links(markdown)
