"""Check that tests/ mirrors src/beamsearch: every module's tests are found by its path.

- A module ``src/beamsearch/PACKAGE/MODULE.py`` has its tests in ``tests/PACKAGE/test_MODULE.py``;
  a module at the top (``viz.py``) in ``tests/test_viz.py``; a package's ``__init__.py`` (what
  the package does as a whole) in ``tests/PACKAGE/test_PACKAGE.py``. Where one file would be too
  long, more files beside it start with the same name (``tests/hf/test_recurrent_states.py``).
- A module with no such file is listed in ``tools/modules_without_tests.txt`` with why (a package
  that only re-exports, tests that are elsewhere and where).
- A folder of tests/ named like no package holds a suite that checks something across modules
  (``contract``, ``properties``, ``memory``...), named for what it checks; ``oracles`` holds the
  brute-force references the tests share.

Problems reported (exit 1 when there is one): a module with neither a test file nor a line in the
list; a line of the list naming no module, or a module that has its test file (strike the line);
a test file in a package's folder, or at the top of tests/, whose name starts with no module's
(a module renamed or removed, or a file put in the wrong place); a top-level test file is allowed
also when the list names it, with why it stays there.

Run from the repository root: ``python tools/check_tests_layout.py``.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIST = "tools/modules_without_tests.txt"


def modules(root: pathlib.Path) -> list[str]:
    """Every module of the package, as a path under ``src/beamsearch`` (``core/engine.py``)."""
    package = root / "src" / "beamsearch"
    return sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))


def packages(root: pathlib.Path) -> set[str]:
    """The package's folders that hold modules, as paths under ``src/beamsearch`` (``core``)."""
    return {str(pathlib.PurePosixPath(m).parent) for m in modules(root)} - {"."}


def test_stem(module: str) -> str:
    """The path under tests/ of ``module``'s test file, without ``.py``."""
    path = pathlib.PurePosixPath(module)
    if path.name == "__init__.py":
        if str(path.parent) == ".":
            return "test_beamsearch"
        return f"{path.parent}/test_{path.parent.name}"
    folder = "" if str(path.parent) == "." else f"{path.parent}/"
    return f"{folder}test_{path.stem}"


def listed(root: pathlib.Path) -> dict[str, str]:
    """The list's lines, path -> why (a line is ``path -- why``; a line starting ``#`` is a comment)."""
    out = {}
    for number, line in enumerate((root / LIST).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        path, sep, why = line.partition(" -- ")
        if not sep or not why.strip():
            raise ValueError(f"{LIST}:{number}: a line is 'path -- why'; got {line!r}")
        out[path.strip()] = why.strip()
    return out


def owner(test: str, stems: list[str]) -> str | None:
    """The test stem ``test`` (a path under tests/ without ``.py``) belongs to: the longest module
    stem it is, or starts with followed by ``_`` (``hf/test_recurrent_states``: ``hf/test_recurrent``)."""
    mine = [s for s in stems if test == s or test.startswith(s + "_")]
    return max(mine, key=len) if mine else None


def problems(root: pathlib.Path) -> list[str]:
    """Each way tests/ does not mirror src/beamsearch, one line each (none when it does)."""
    tests = root / "tests"
    files = sorted(str(p.relative_to(tests).with_suffix("")) for p in tests.rglob("test_*.py"))
    why = listed(root)
    stems = {module: test_stem(module) for module in modules(root)}
    folders = packages(root)
    owned, found = set(), []
    for f in files:
        folder = str(pathlib.PurePosixPath(f).parent)
        if folder != "." and folder.split("/")[0] not in folders:
            continue  # a suite across modules, in a folder named for what it checks
        stem = owner(f, list(stems.values()))
        if stem is not None:
            owned.add(stem)
        elif f"tests/{f}.py" not in why:
            where = "the top of tests/" if folder == "." else f"tests/{folder}/"
            found.append(f"tests/{f}.py: in {where} but named after no module there: move it to "
                         f"tests/PACKAGE/test_MODULE.py, or to a folder named for what it checks")
    for module, stem in stems.items():
        if stem not in owned and module not in why:
            found.append(f"src/beamsearch/{module}: no tests/{stem}.py and not in {LIST}")
        if stem in owned and module in why:
            found.append(f"{LIST}: {module} has tests/{stem}.py; strike its line")
    for path in why:
        if path not in stems and not path.startswith("tests/"):
            found.append(f"{LIST}: {path} is no module of src/beamsearch")
    return found


def main() -> int:
    found = problems(ROOT)
    for line in found:
        print(line)
    if not found:
        print(f"tests/ mirrors src/beamsearch: {len(modules(ROOT))} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
