"""``hf.generate(json_schema=..., grammar=..., regex=...)``: a :class:`beamsearch.processors.Grammar`
over the model's tokenizer, appended to the generation config's logits processors."""

from __future__ import annotations

from typing import Any

import numpy as np

from beamsearch.processors import Grammar

__all__ = ["GRAMMAR_SETTINGS", "grammars"]

GRAMMAR_SETTINGS = {"json_schema": "json_schema", "grammar": "lark", "regex": "regex"}
"""generate's grammar keywords -> the :class:`Grammar` kind each builds."""


def grammars(cfg: Any, tokenizer: Any, eos: np.ndarray | None) -> list[Grammar]:
    """The grammar the call asks for (``cfg.json_schema``: a schema dict or its JSON text,
    ``cfg.grammar``: Lark text, ``cfg.regex``: a pattern; at most one), over ``tokenizer`` with
    the search's eos ids ``eos`` (int64 ``[E]``); ``[]`` when none is set.

    Raises:
        ValueError: more than one is set, no tokenizer, or the model has no eos id.
    """
    given = {name: getattr(cfg, name, None) for name in GRAMMAR_SETTINGS}
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
    return [Grammar(GRAMMAR_SETTINGS[name], source, tokenizer, eos.tolist())]
