"""``hf.generate(json_schema=..., grammar=..., regex=...)``: a :class:`beamsearch.processors.Grammar`
over the model's tokenizer, appended to the generation config's logits processors."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from beamsearch.core.config import GRAMMAR_KINDS, GrammarOptions
from beamsearch.processors import Grammar

__all__ = ["OUTPUT_CONSTRAINTS", "grammars", "output_constraints"]


def output_constraints(given: dict[str, Any], generation_config: Any) -> GrammarOptions:
    """The grammar and catalogue keywords ``given`` as one value; one not given is
    ``generation_config``'s entry of that name, if it has one (a custom entry of a saved config)."""
    return GrammarOptions(**{name: given[name] if name in given else getattr(generation_config, name, None)
                             for name in OUTPUT_CONSTRAINTS})


OUTPUT_CONSTRAINTS = tuple(f.name for f in dataclasses.fields(GrammarOptions))
"""generate's keywords that constrain every output: the fields of :class:`GrammarOptions`."""


def grammars(constraints: GrammarOptions, tokenizer: Any, eos: np.ndarray | None) -> list[Grammar]:
    """The grammar the call asks for (``json_schema``: a schema dict or its JSON text,
    ``grammar``: Lark text, ``regex``: a pattern; at most one), over ``tokenizer`` with the
    search's eos ids ``eos`` (int64 ``[E]``); ``[]`` when none is set.

    Raises:
        ValueError: more than one is set, no tokenizer, or the model has no eos id.
    """
    given = {name: getattr(constraints, name) for name in GRAMMAR_KINDS}
    given = {name: value for name, value in given.items() if value is not None}
    if not given:
        return []
    if len(given) > 1:
        raise ValueError(f"json_schema=, grammar= and regex= exclude each other; got {sorted(given)}")
    (name, source), = given.items()
    if tokenizer is None:
        raise ValueError(f"{name}= needs the model's tokenizer: pass tokenizer=")
    if eos is None:
        raise ValueError(f"{name}= needs an eos_token_id (where the grammar ends); the generation config has none")
    return [Grammar(GRAMMAR_KINDS[name], source, tokenizer, eos.tolist())]
