"""Corpus decoding's output constraints (``decode_records(json_schema=...)``, ``beamsearch decode
--json-schema FILE`` / ``--grammar FILE`` / ``--regex PATTERN`` / ``--catalogue FILE``): a
:class:`beamsearch.processors.Grammar` over the model's own tokenizer (``model.tokenizer``: an
``hf:`` folder's, or the text of each token of a zoo or toy model), and a
:class:`beamsearch.processors.Catalogue` read from a file, appended to the model's processors for
every line (docs/grammar.md, docs/retrieval.md)."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Mapping
from typing import Any

from beamsearch.core.config import GRAMMAR_KINDS, GrammarOptions, options_of
from beamsearch.corpus.option_files import MAX_CATALOGUE_BYTES, check_option_file

__all__ = ["GRAMMAR_KINDS", "GRAMMAR_OPTIONS", "GrammarOptions", "catalogue_crc", "catalogue_processors",
           "grammar_processors", "with_constraints"]


GRAMMAR_OPTIONS = tuple(options_of(GrammarOptions))


def grammar_processors(model: Any, options: dict[str, Any]) -> list[Any]:
    """The grammar processor ``options`` ask for (``json_schema``: a schema dict or its JSON
    text, ``grammar``: Lark text, ``regex``: a pattern; None: not given), over ``model.tokenizer``
    with ``model.eos``; ``[]`` when none is given.

    Raises:
        ValueError: more than one given, a model without a tokenizer, or a grammar that is not
            valid or that the engine refuses (one line naming the option). ImportError: no
            llguidance (the ``grammar`` extra).
    """
    given = {name: options[name] for name in GRAMMAR_KINDS if options.get(name) is not None}
    if not given:
        return []
    if len(given) > 1:
        raise ValueError(f"json_schema, grammar and regex exclude each other: give one; given: {', '.join(given)}")
    (name, source), = given.items()
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(f"{name} needs a model with a tokenizer the grammar can read (hf:DIR, a zoo or the toy "
                         f"model); {type(model).__name__} has none")
    from beamsearch.processors import Grammar

    try:
        return [Grammar(GRAMMAR_KINDS[name], source, tokenizer, eos_token_id=model.eos)]
    except (ValueError, TypeError) as e:
        raise type(e)(_one_line(name, GRAMMAR_KINDS[name], str(e))) from None


def catalogue_processors(model: Any, options: dict[str, Any]) -> list[Any]:
    """The catalogue ``options["catalogue"]`` names (a path: :meth:`Catalogue.from_file
    <beamsearch.processors.Catalogue.from_file>`), ending with ``model.eos``; ``[]`` when not given.
    A catalogue whose longest entry and eos need more than the run's ``max_steps`` (an int given,
    else the model's limit; a line's own ``max_steps`` is not looked at) is a warning, once per
    call (:meth:`Catalogue.cut_warning <beamsearch.processors.Catalogue.cut_warning>`).

    Raises:
        ValueError: a file that cannot be read, is not a regular file (a device, a FIFO), is over
            :data:`~beamsearch.corpus.option_files.MAX_CATALOGUE_BYTES`, or is not a catalogue
            (one line naming the option). TypeError: not a path.
    """
    path = options.get("catalogue")
    if path is None:
        return []
    if not isinstance(path, str):
        raise TypeError(f"catalogue must be the path of a catalogue file (a str); got {path!r:.80}")
    from beamsearch.processors import Catalogue

    check_option_file(path, "catalogue", MAX_CATALOGUE_BYTES)  # a device or FIFO is never read
    try:
        catalogue = Catalogue.from_file(path, model.eos)
    except (ValueError, TypeError) as e:
        raise type(e)(f"catalogue: {str(e).splitlines()[0]}") from None
    steps = options.get("max_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and 1 <= steps <= model.max_steps:
        warning = catalogue.cut_warning(steps, "max_steps")
    else:
        warning = catalogue.cut_warning(model.max_steps, "max_steps (the model's limit)")
    if warning is not None:
        warnings.warn(warning, stacklevel=3)
    return [catalogue]


def catalogue_crc(path: str) -> int | None:
    """The CRC-32 of the catalogue file's bytes (what a resume compares beside its path), or None
    when it cannot be read (the run then fails on it with its own message)."""
    crc = 0
    try:
        check_option_file(path, "catalogue", MAX_CATALOGUE_BYTES)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                crc = zlib.crc32(block, crc)
    except (OSError, ValueError):
        return None
    return crc


def with_constraints(message: str, options: Mapping[str, Any]) -> str:
    """``message`` (a line's error, ending with its list of the search's rules in parentheses)
    naming the output constraints ``options`` gives (``regex='...'``, ``catalogue='FILE'``; a
    grammar's text cut at 80 characters): a grammar every line's output must be accepted by is the
    first thing to suspect when no line gets an output."""
    given = [f"{name}={options[name]!r:.80}" for name in GRAMMAR_OPTIONS if options.get(name) is not None]
    if not given:
        return message
    return f"{message[:-1]}; the output constraints {', '.join(given)})" if message.endswith(")") else \
        f"{message} (the output constraints {', '.join(given)})"


def _one_line(name: str, kind: str, message: str) -> str:
    """The Grammar's ``message`` on one line, about option ``name`` (the engine's first line, not
    the grammar's text: it is the option's)."""
    lines = message.splitlines() or [""]
    # the engine's first line, and its reason where a regex's is on a line of its own ("error: ...")
    first = " ".join([lines[0], *(x.strip() for x in lines[1:] if x.startswith("error: "))])
    first = first.replace(": regex parse error: error: ", ": ")
    refused = " is refused by the grammar engine: "
    if refused in first:
        return f"{name}{refused}{first.split(refused, 1)[1]}"
    if first.startswith(kind + " "):
        return f"{name} {first[len(kind) + 1:]}"
    return f"{name}: {first}"
