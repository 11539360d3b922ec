"""Check the house rules of the source tree: module and function sizes, import cycles, private names.

    python tools/check_structure.py            # check src/beamsearch; exit 1 and one line per breach
    python tools/check_structure.py --debts    # write today's breaches to tools/structure_debts.txt

A breach listed in ``tools/structure_debts.txt`` (a debt: one line each, as this script prints it)
is reported but does not fail the check, so the list can only shrink: a new breach fails, and so
does a listed one that is gone (strike it from the list). The list is empty when the house keeps
every rule.

The rules (CONTRIBUTING.md):

* no module over 400 lines;
* no function (or method) over 60 lines, its docstring not counted (public functions document
  every argument with its shapes), except one whose docstring says it is a documented
  state machine (its first line says ``(a state machine)``);
* no import cycle between the package's modules (every ``import`` counts, also one inside a function);
* no private name crosses a module line: ``from M import _x`` and ``M._x`` of another module of the
  package are refused (a name shared inside a package is that package's, without the underscore),
  and no module imports a private module (``_m``) of another package;
* the zoo uses the public API only: it imports ``beamsearch`` (its top-level names) and its own modules;
* the layers point one way: every module belongs to one layer of :data:`LAYERS` (bottom to top)
  and imports only modules of its own layer or of layers below it (every ``import`` counts, also
  one inside a function); docs/architecture.md says what each layer is.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "beamsearch"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
STATE_MACHINE = "(a state machine)"


def module_name(path: pathlib.Path) -> str:
    """The dotted name of a source file under src/ (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str, path: pathlib.Path) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to itself)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def resolve(module: str, path: pathlib.Path, level: int, target: str | None) -> str:
    """The absolute name of a (possibly relative) import's module."""
    if level == 0:
        return target or ""
    base = package_of(module, path).split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                todo.extend(child.orelse)
            else:
                todo.append(child)


class Module:
    """One source file: its name, its tree and the project modules it imports (with the names taken)."""

    def __init__(self, path: pathlib.Path, known: set[str]):
        self.path = path
        self.name = module_name(path)
        self.text = path.read_text(encoding="utf-8")
        self.tree = ast.parse(self.text, filename=str(path))
        self.imports: dict[str, set[str]] = {}  # module -> names taken from it ("" = the module itself)
        for node in runtime_nodes(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "beamsearch":
                        self.imports.setdefault(alias.name, set()).add("")
            elif isinstance(node, ast.ImportFrom):
                source = resolve(self.name, path, node.level, node.module)
                if source.split(".")[0] != "beamsearch":
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in known:  # `from pkg import module`
                        self.imports.setdefault(sub, set()).add("")
                    else:
                        self.imports.setdefault(source, set()).add(alias.name)

    def functions(self) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node


def modules() -> dict[str, Module]:
    paths = sorted(PACKAGE.rglob("*.py"))
    known = {module_name(p) for p in paths}
    found = {}
    for p in paths:
        m = Module(p, known)
        found[m.name] = m
    return found


def sizes(mods: dict[str, Module]) -> Iterator[str]:
    for m in sorted(mods.values(), key=lambda m: m.path):
        lines = len(m.text.splitlines())
        if lines > MAX_MODULE_LINES:
            yield f"{rel(m.path)}: {lines} lines (at most {MAX_MODULE_LINES})"
        for fn in m.functions():
            length = fn.end_lineno - fn.lineno + 1 - docstring_lines(fn)
            first = (ast.get_docstring(fn) or "").partition("\n")[0].rstrip()
            if length > MAX_FUNCTION_LINES and STATE_MACHINE not in first:
                yield (f"{rel(m.path)}: function {fn.name} (line {fn.lineno}) has {length} lines "
                       f"(at most {MAX_FUNCTION_LINES})")


def docstring_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1
    return 0


def key(breach: str) -> str:
    """What a debt is matched on: the breach without its line numbers and sizes, which move with
    every edit (``src/x.py: function f``, ``src/x.py: lines``)."""
    if " function " in breach:
        return re.sub(r" \(line \d+\)", "", breach.partition(" has ")[0])
    return re.sub(r": \d+ lines.*", ": lines", breach)


def cycles(mods: dict[str, Module]) -> Iterator[str]:
    graph = {name: {target_module(t, mods) for t in m.imports} - {None, name} for name, m in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    for comp in out:
        yield "import cycle: " + " <-> ".join(comp)


def target_module(name: str, mods: dict[str, Module]) -> str | None:
    """The project module an import names (a name inside a module resolves to that module)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def privacy(mods: dict[str, Module]) -> Iterator[str]:
    for m in sorted(mods.values(), key=lambda m: m.path):
        for target, names in sorted(m.imports.items()):
            owner = target_module(target, mods)
            if owner is None or owner == m.name:
                continue
            for n in sorted(names - {""}):
                if private(n):
                    yield f"{rel(m.path)}: imports the private name {n} of {owner}"
            parts = owner.split(".")
            home = package_of(m.name, m.path)
            for i, part in enumerate(parts[1:], start=1):
                owner_package = ".".join(parts[:i])
                if private(part) and not (home == owner_package or home.startswith(owner_package + ".")):
                    yield f"{rel(m.path)}: imports {owner}, a private module of another package"
                    break
            if m.name.startswith("beamsearch.zoo") and not (owner == "beamsearch" or owner.startswith("beamsearch.zoo")
                                                              or owner in PUBLIC_MODULES):
                yield f"{rel(m.path)}: the zoo imports {owner}; it uses the public API only"
        for node in ast.walk(m.tree):  # module._name of an imported project module
            if isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name):
                alias = imported_alias(m, node.value.id, mods)
                if alias and alias != m.name:
                    yield f"{rel(m.path)}:{node.lineno}: uses the private name {node.attr} of {alias}"


LAYERS: tuple[tuple[str, ...], ...] = (
    ("beamsearch.extras",),
    ("beamsearch.backends",),
    ("beamsearch.core",),
    ("beamsearch.processors", "beamsearch.strategies"),
    ("beamsearch.controls",),
    ("beamsearch.modes",),
    ("beamsearch.speech", "beamsearch.viz", "beamsearch.toy"),
    ("beamsearch.refill", "beamsearch.hf"),
    ("beamsearch",),
    ("beamsearch.zoo", "beamsearch.corpus"),
    ("beamsearch.distributed",),
    ("beamsearch.cli", "beamsearch.__main__"),
)
"""The layers of the package, bottom to top: a module or package named here and everything under
it, by the longest name that holds it (``beamsearch`` alone is the package's ``__init__``, the
public API). A module imports only its own layer and the layers below it (docs/architecture.md)."""


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module``'s layer (None: no layer names it)."""
    best, found = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            holds = module == name or (name != "beamsearch" and module.startswith(name + "."))
            if holds and len(name) > best:
                best, found = len(name), i
    return found


def layers(mods: dict[str, Module]) -> Iterator[str]:
    """A module outside every layer, and every import of a module from a layer above its own."""
    for m in sorted(mods.values(), key=lambda m: m.path):
        own = layer_of(m.name)
        if own is None:
            yield f"{rel(m.path)}: {m.name} is in no layer of LAYERS (tools/check_structure.py)"
            continue
        for owner in sorted({target_module(t, mods) for t in m.imports} - {None, m.name}):
            above = layer_of(owner)
            if above is not None and above > own:
                yield (f"{rel(m.path)}: imports {owner}, a layer above its own "
                       f"({layer_name(own)} below {layer_name(above)})")


def layer_name(index: int) -> str:
    """``processors/strategies``: a layer's names without the package's."""
    return "/".join(name.partition(".")[2] or name for name in LAYERS[index])


PUBLIC_MODULES = {"beamsearch.processors", "beamsearch.hf", "beamsearch.viz", "beamsearch.corpus",
                  "beamsearch.config", "beamsearch.toy", "beamsearch.speech"}


def imported_alias(m: Module, name: str, mods: dict[str, Module]) -> str | None:
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name and alias.name in mods:
                    return alias.name if alias.asname else None
        elif isinstance(node, ast.ImportFrom):
            source = resolve(m.name, m.path, node.level, node.module)
            for alias in node.names:
                if (alias.asname or alias.name) == name and f"{source}.{alias.name}" in mods:
                    return f"{source}.{alias.name}"
    return None


def rel(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


DEBTS = ROOT / "tools" / "structure_debts.txt"


def breaches() -> list[str]:
    """Every breach of the rules in the package, one line each (path order)."""
    mods = modules()
    return [*sizes(mods), *cycles(mods), *privacy(mods), *layers(mods)]


def debts() -> list[str]:
    """The breaches that are known and not yet mended (``tools/structure_debts.txt``)."""
    if not DEBTS.is_file():
        return []
    return [line for line in DEBTS.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]


def verdict(found: list[str], known: list[str]) -> tuple[list[str], list[str]]:
    """(new breaches, listed debts that are gone)."""
    have, owed = {key(b) for b in found}, {key(d) for d in known}
    return [b for b in found if key(b) not in owed], [d for d in known if key(d) not in have]


def main(argv: list[str]) -> int:
    found = breaches()
    if argv == ["--debts"]:
        DEBTS.write_text("# breaches of tools/check_structure.py's rules not yet mended; strike each when it is\n"
                         + "".join(f"{b}\n" for b in found), encoding="utf-8")
        return 0
    new, gone = verdict(found, debts())
    for line in new:
        print(line)
    for line in gone:
        print(f"mended, strike it from {rel(DEBTS)}: {line}")
    print(f"{len(found)} breaches, {len(found) - len(new)} of them listed debts", file=sys.stderr)
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
