"""A corpus search's options: the keywords of a mode's search from the options given by name
(:func:`search_keywords`), per-line ``max_steps`` (a :class:`LengthRule` of the source length), and
the checks of what a line gives for itself (its prefix, its constraints)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from beamsearch.core.config import DecodingConfig, options_of
from beamsearch.core.mode import Mode
from beamsearch.corpus.grammar import GRAMMAR_OPTIONS, catalogue_processors, grammar_processors
from beamsearch.corpus.lines import Line, shown
from beamsearch.corpus.models import CorpusModel
from beamsearch.modes import registry

__all__ = ["LengthRule", "corpus_options", "line_max_steps", "search_keywords"]


@dataclass(frozen=True)
class LengthRule:
    """``max_steps`` per line from its source length: ``floor(a * length + b)``, capped at the
    model's limit (``--max-steps A*len+B``).

    Attributes:
        a: steps per source unit (>= 0); ``b``: steps added (may be negative).
    """

    a: float
    b: float

    def steps(self, length: int) -> int:
        """``floor(a * length + b)``."""
        return math.floor(self.a * length + self.b)

    @staticmethod
    def parse(text: str) -> int | LengthRule:
        """``"N"`` (an int), or ``"A*len+B"`` / ``"A*len-B"`` / ``"A*len"`` / ``"len+B"`` (a rule).

        Raises:
            ValueError: anything else, naming ``max_steps`` and the text.
        """
        t = text.replace(" ", "")
        if re.fullmatch(r"\d+", t):
            return int(t)
        m = re.fullmatch(r"(?:(\d+(?:\.\d*)?|\.\d+)\*)?len(?:([+-])(\d+(?:\.\d*)?|\.\d+))?", t)
        if m is None:
            raise ValueError(f"max_steps must be an integer or A*len+B (e.g. 2*len+10); got {text!r}")
        a = float(m.group(1)) if m.group(1) is not None else 1.0
        b = float(m.group(3)) * (-1 if m.group(2) == "-" else 1) if m.group(3) is not None else 0.0
        return LengthRule(a, b)


def search_keywords(model: CorpusModel, spec: Mode, options: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``spec``'s search for ``options`` (see :func:`decode_records`): the options
    given, the defaults of those not given that the mode takes (the mode's own default first), the
    model's eos and processors (and the grammar of ``json_schema`` / ``grammar`` / ``regex``, over
    the model's tokenizer: :mod:`beamsearch.corpus.grammar`), target texts as token ids. Checks what
    the search does not check itself: the names (an unknown one, another mode's option), the
    mode's required options, ``max_steps`` against the model's limit, the texts. ``length_rule``:
    a :class:`LengthRule` ``max_steps``, where one is given (``max_steps`` is then the model's limit)."""
    owners = corpus_options()
    for name, value in options.items():
        if name not in owners:
            raise TypeError(f"decode_records() got an unexpected keyword argument {name!r}")
        if owners[name] and owners[name] != spec.name:
            raise ValueError(f"{name} is an option of mode {owners[name]!r}, not of mode {spec.name!r}; "
                             f"got {name}={value!r}")
    steps = max_steps_of(options.get("max_steps"), model.max_steps)
    grammar = grammar_processors(model, options) + catalogue_processors(model, options)  # after the model's own
    search: dict[str, Any] = {"eos_token_id": model.eos, "logits_processors": [*model.processors, *grammar],
                              "max_steps": steps if isinstance(steps, int) else model.max_steps}
    if isinstance(steps, LengthRule):
        search["length_rule"] = steps
    for name, (_, c) in options_of(DecodingConfig).items():
        if c.cli and name != "max_steps" and (name in options or spec.takes(name)):
            search[name] = options.get(name, spec.default(name))
    for name, (default, c) in spec.own.items():
        search[name] = options.get(name, default)
        if c.required and search[name] is None:
            needed = [n for n, (_, o) in spec.own.items() if o.required]
            raise ValueError(f"mode {spec.name!r} needs {' and '.join(needed)}; got "
                             + ", ".join(f"{n}={options.get(n)!r}" for n in needed))
    for name, (_, c) in {**options_of(DecodingConfig), **spec.own}.items():
        if c.texts and name in search:
            search[name] = texts_ids(model, search[name], name)
    return search


def corpus_options() -> dict[str, str]:
    """The options :func:`decode_records` takes by name -> the mode that owns it ("" for the
    shared controls): the fields of :class:`~beamsearch.core.config.DecodingConfig` the command
    line offers, the grammar options, and every registered mode's own options."""
    out = {name: "" for name, (_, c) in options_of(DecodingConfig).items() if c.cli}
    out.update({name: "" for name in GRAMMAR_OPTIONS})
    for spec in registry.MODES.values():
        out.update({name: spec.name for name in spec.own})
    return out


def line_options(spec: Mode) -> list[str]:
    """The options of ``spec`` that a line may give for itself (its JSON field of that name);
    the stream's value is each other line's."""
    return [name for name in spec.per_input if name not in spec.stream_only and name in Line.OWN]


def max_steps_of(value: Any, limit: int) -> int | LengthRule:
    """``max_steps``: None (the model's limit), an int in ``[1, limit]``, or a :class:`LengthRule`
    (or its text)."""
    if value is None:
        return limit
    if isinstance(value, str):
        value = LengthRule.parse(value)
    if isinstance(value, LengthRule):
        if not (math.isfinite(value.a) and value.a >= 0 and math.isfinite(value.b)):
            raise ValueError(f"max_steps: A*len+B needs a finite A >= 0 and a finite B; got {value}")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise ValueError(f"max_steps must be an integer in [1, {limit}] (the model's limit) or a LengthRule; "
                         f"got {value!r}")
    return value


def line_max_steps(model: CorpusModel, line: Line, max_steps: int | LengthRule | None) -> int | str:
    """The ``max_steps`` of ``line``: its own, else ``max_steps`` (a :class:`LengthRule` applied to
    its source length, capped at ``model.max_steps``), else the model's limit; or the error text
    when a rule gives less than 1."""
    if line.max_steps is not None:
        return line.max_steps
    if max_steps is None:
        return model.max_steps
    if isinstance(max_steps, int):
        return max_steps
    length = model.source_length(line.text)
    steps = max_steps.steps(length)
    if steps < 1:
        return (f"max_steps {max_steps.a:g}*len{max_steps.b:+g} is {steps} for this line (length {length}); "
                "it must be >= 1")
    return min(steps, model.max_steps)


def line_problem(model: CorpusModel, line: Line, limit: int, spec: Mode) -> str | None:
    if line.max_steps is not None and line.max_steps > limit:
        return f"max_steps must be <= {limit} (the model's limit); got {shown(line.max_steps)}"
    if line.prefix is not None:
        try:
            model.tokens(line.prefix)
        except ValueError as e:
            return f"prefix: {e}"
    for name in Line.OWN:
        own = line.own(name)
        if own is None:
            continue
        if name not in line_options(spec):
            owner = corpus_options().get(name) or "constrained"
            return f"{name} apply to mode {owner!r}; got mode {spec.name!r}"
        try:
            texts_ids(model, own, name)
        except ValueError as e:
            return str(e)
    return None


def texts_ids(model: CorpusModel, texts: Sequence[str | Sequence[str]], name: str) -> list[Any]:
    """Target texts (option ``name``) as token ids: a text is a phrase, a list of texts an
    :class:`AnyOf` (a constraint that one of them meets)."""
    from beamsearch import AnyOf

    def ids(text: Any) -> list[int]:
        if not isinstance(text, str) or not text:
            raise ValueError(f"{name} must be non-empty texts (or lists of them); got {text!r}")
        try:
            return model.tokens(text)
        except ValueError as e:
            raise ValueError(f"{name}: {text!r}: {e}") from None

    if isinstance(texts, str):
        raise ValueError(f"{name} must be a list of texts, not one text; got {texts!r}")
    return [ids(c) if isinstance(c, str) else AnyOf(*(ids(t) for t in c)) for c in texts]
