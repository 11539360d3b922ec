"""docs/CONTRACT.md is kept in step with the code: every signature it writes out (an indented line
``name(...)`` naming a public function of ``beamsearch`` or a submodule) has the same parameters
as the function, in the same order and kind, with the same defaults."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import re

import pytest

CONTRACT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "CONTRACT.md"


def _signatures() -> list[tuple[str, str]]:
    """``(name, text)`` of each indented signature block, continuation lines joined."""
    lines = CONTRACT.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^    ((?:[a-z_]+\.)*[a-z_]+)\(", lines[i])
        if m:
            text = lines[i].strip()
            while text.count("(") > text.count(")") and i + 1 < len(lines):
                i += 1
                text += " " + lines[i].strip()
            out.append((m.group(1), text))
        i += 1
    return out


def _resolve(name: str):
    """The function ``name`` refers to: top level, or ``module.function`` under beamsearch; None
    for names that are not the library's (``step_fn``, the user's own)."""
    import beamsearch

    if "." not in name:
        return getattr(beamsearch, name, None)
    module, attr = name.rsplit(".", 1)
    return getattr(importlib.import_module(f"beamsearch.{module}"), attr)


def _parameters(text: str) -> tuple[list[tuple[str, str, object]], bool]:
    """The written parameters ``(name, kind, default)`` and whether the list is partial (``...``)."""
    args = text[text.index("(") + 1 : text.rindex(")")]
    partial = ", ...," in args or args.endswith(", ...")
    args = args.replace(", ...,", ",").replace(", ...", "")
    fn = ast.parse(f"def f({args}): pass").body[0].args
    out = []
    positional = fn.posonlyargs + fn.args
    defaults = ([inspect.Parameter.empty] * (len(positional) - len(fn.defaults))
                + [ast.literal_eval(d) for d in fn.defaults])
    for a, d in zip(positional, defaults, strict=True):
        out.append((a.arg, "positional", d))
    for a, d in zip(fn.kwonlyargs, fn.kw_defaults, strict=True):
        out.append((a.arg, "keyword", inspect.Parameter.empty if d is None else ast.literal_eval(d)))
    return out, partial


SIGNATURES = [(n, t) for n, t in _signatures() if _resolve(n) is not None]


def test_the_contract_writes_out_the_public_searches():
    names = {n for n, _ in SIGNATURES}
    assert {"beam_search", "greedy_decode", "beam_search_batch", "score_sequences", "constrained_beam_search",
            "diverse_beam_search", "stochastic_beam_search", "exact_search", "step_search", "viz.to_html"} <= names


@pytest.mark.parametrize("name,text", SIGNATURES, ids=[f"{n}:{i}" for i, (n, _) in enumerate(SIGNATURES)])
def test_signature_matches_the_code(name, text):
    written, partial = _parameters(text)
    actual = inspect.signature(_resolve(name)).parameters
    kinds = {inspect.Parameter.KEYWORD_ONLY: "keyword"}
    variadic = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)  # **controls: written as such
    real = [(p.name, kinds.get(p.kind, "positional"), p.default) for p in actual.values() if p.kind not in variadic]
    if not partial:  # the written order is the real order; the code may add optional keywords after
        assert [w[0] for w in written] == [r[0] for r in real][: len(written)], f"{name}: parameter order"
        extra = real[len(written):]
        assert all(d is not inspect.Parameter.empty for _, _, d in extra), f"{name}: a required parameter not written"
    by_name = {r[0]: r for r in real}
    for pname, kind, default in written:
        assert pname in by_name, f"{name}: no parameter {pname!r}"
        assert by_name[pname][1] == kind, f"{name}: {pname!r} should be {kind}"
        assert by_name[pname][2] == default, f"{name}: {pname!r} default {by_name[pname][2]!r}, written {default!r}"


def _refused_lists() -> dict[str, set[str]]:
    """Section 11's ``- `mode` refuses: `a`, `b``` lines, as mode -> keywords."""
    out = {}
    for line in CONTRACT.read_text().splitlines():
        m = re.match(r"^- `([a-z_]+)` refuses: (.*)$", line)
        if m:
            out[m.group(1)] = set(re.findall(r"`([a-z_]+)`", m.group(2).split("(")[0]))
    return out


def test_the_contract_lists_what_each_mode_refuses_as_the_code_does():
    import beamsearch.modes.constrained as constrained
    import beamsearch.modes.exact as exact
    import beamsearch.modes.step as step
    import beamsearch.modes.stochastic as stochastic
    import beamsearch.modes.transformers_beam as transformers_beam

    written = _refused_lists()
    assert written == {"constrained_beam_search": set(constrained._REFUSED), "diverse_beam_search": set(),
                       "stochastic_beam_search": set(stochastic._REFUSED), "exact_search": set(exact._REFUSED),
                       "transformers_beam_search": set(transformers_beam._REFUSED),
                       "step_search": set(step._REFUSED)}
