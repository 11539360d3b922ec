"""``decode``'s search flags, generated: one flag per field of
:class:`~beamsearch.core.config.DecodingConfig` that the command line offers, and one per option of
each registered mode (:mod:`beamsearch.modes.registry`), and one per grammar option
(:class:`~beamsearch.corpus.grammar.GrammarOptions`: ``--json-schema FILE``, ``--grammar FILE``,
``--regex PATTERN``), named after the field (``beam_size`` is
``--beam-size``), with its help. A flag's default is the field's: none is typed here. The values
given are passed to :func:`beamsearch.corpus.decode_records` by the fields' names; an hf: model's
saved generation config fills the fields it sets that were not given.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from typing import Any

from beamsearch.cli.common import CliError
from beamsearch.core.config import DecodingConfig, OptionInfo, flag, options_of
from beamsearch.corpus.grammar import GrammarOptions
from beamsearch.corpus.option_files import MAX_GRAMMAR_BYTES, read_option_file
from beamsearch.modes.registry import MODES

__all__ = ["RUNNER_FLAGS", "add_control_flags", "add_search_flags", "flag_names", "given", "hf_defaults",
           "option_names"]

RUNNER_FLAGS = ("max_rows", "max_tokens", "output", "resume")
"""decode's own options that the library's messages may name (corpus decoding's keywords)."""


def _flag_type(annotation: str) -> Any:
    """The value type of a flag from its field's annotation: int or float where every alternative
    but None is that, else the text as given (``--max-steps`` is an int or ``A*len+B``, which
    decode parses)."""
    kinds = {a.strip() for a in annotation.split("|")} - {"None"}
    return {"int": int, "float": float}.get(kinds.pop(), str) if len(kinds) == 1 else str


def _add(p: argparse.ArgumentParser, name: str, default: Any, c: OptionInfo, annotation: str, owner: str) -> None:
    """One flag (and its older spellings) for option ``name``; its value is None unless given."""
    shown = "" if default is None or default == () else f" (default {default})"
    # decode reads a saved generation config's settings (hf_defaults), a mode's own as ids are read by hf.generate
    read = f"; for --model hf:DIR, its generation config's {c.hf} when not given" if c.hf and not c.texts else ""
    text = f"{owner}{c.help}{shown}{read}"
    names = (flag(name), *c.aliases)
    if c.file:
        p.add_argument(*names, dest=name, default=None, metavar=c.metavar or "FILE", help=text)
    elif annotation.startswith("bool"):
        p.add_argument(*names, dest=name, action="store_const", const=True, default=None, help=text)
    elif c.texts:
        p.add_argument(*names, dest=name, action="append", default=None, metavar=c.metavar or "TEXT", help=text)
    else:
        p.add_argument(*names, dest=name, type=_flag_type(annotation), choices=c.choices, default=None,
                       metavar=c.metavar, help=text)


def option_names() -> dict[str, str]:
    """Every search option decode offers -> the mode that owns it ("" for the shared ones)."""
    out = {name: "" for name, (_, c) in options_of(DecodingConfig).items() if c.cli}
    out.update({name: "" for name in options_of(GrammarOptions)})
    for spec in MODES.values():
        out.update({name: spec.name for name in spec.own})
    return out


def add_search_flags(p: argparse.ArgumentParser) -> None:
    """The search flags of ``decode``: the shared controls', the grammar's, then each mode's own."""
    import dataclasses

    for f in (*dataclasses.fields(DecodingConfig), *dataclasses.fields(GrammarOptions)):
        c = f.metadata["option"]
        if c.cli:
            _add(p, f.name, f.default, c, str(f.type), "")
    for spec in MODES.values():
        for f in dataclasses.fields(spec.options):
            _add(p, f.name, f.default, f.metadata["option"], str(f.type), f"{spec.name}: ")


def add_control_flags(p: argparse.ArgumentParser, names: tuple[str, ...], **defaults: Any) -> None:
    """The flags of the shared controls ``names`` (fields of
    :class:`~beamsearch.core.config.DecodingConfig`: decode's flag, its other spellings, its type
    and help) for a command that runs its own search (the zoo's ``demo`` and ``translate``): the
    value when not given is the command's own default in ``defaults``, else the field's."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(DecodingConfig)}
    for name in names:
        f = fields[name]
        c, value = f.metadata["option"], defaults.get(name, f.default)
        p.add_argument(flag(name), *c.aliases, dest=name, type=_flag_type(str(f.type)), default=value,
                       metavar=c.metavar, help=c.help)  # the commands' formatter shows the default


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The search options given on the command line, by name; an option whose flag names a file
    (``--json-schema FILE``) holds the file's text.

    Raises:
        CliError: such a file cannot be read, or is not UTF-8 (exit 2, naming the flag and file).
    """
    out = {name: getattr(args, name) for name in option_names() if getattr(args, name) is not None}
    for name, (_, c) in options_of(GrammarOptions).items():
        if c.file and name in out:
            out[name] = _file_text(flag(name), out[name])
    return out


def _file_text(name: str, path: str) -> str:
    """The text of the file ``path`` given to flag ``name``: a regular file of at most
    :data:`~beamsearch.corpus.option_files.MAX_GRAMMAR_BYTES`."""
    try:
        return read_option_file(path, name, MAX_GRAMMAR_BYTES).decode("utf-8")
    except OSError as e:
        raise CliError(f"beamsearch: error: {name} {path}: cannot read it: {e.strerror}", 2) from None
    except UnicodeDecodeError as e:
        raise CliError(f"beamsearch: error: {name} {path}: not UTF-8 (byte {e.start})", 2) from None
    except ValueError as e:  # not a regular file, or over the limit: the message names both
        raise CliError(f"beamsearch: error: {e}", 2) from None


def hf_defaults(spec: str, mode: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The mode decode runs and, for ``--model hf:DIR``, the options its saved generation config
    gives that mode, as :func:`beamsearch.hf.generate` reads it for the same mode.

    The mode: ``--mode``, else (an hf: folder) the one ``generate`` runs for the config, with
    ``--beam-size`` in place of its ``num_beams`` where given (greedy for one beam, beam search for
    more, diverse beam search for ``num_beam_groups``); ``transformers`` with one beam decodes
    greedily, as ``generate`` does; beam search for other models. The options: the config's
    settings that the mode takes (the shared ones and its own, its ``max_new_tokens`` as
    ``max_steps``; a setting left at ``generate``'s default gives the mode's own default, as in
    ``hf.generate``), for the options ``options`` does not give. One line on stderr names the
    settings decode does not apply, another those the mode does not take.
    """
    folder = pathlib.Path(spec[3:]) if spec.startswith("hf:") else None
    if folder is None or not folder.is_dir():
        return mode or "beam", {}
    import copy

    from beamsearch import hf
    from beamsearch.hf.modes import choose_mode, config_keywords, generate_rule
    from beamsearch.hf.settings import generate_defaults

    try:
        saved = hf.saved_generation_config(folder)
        settings = hf.search_settings(saved)
    except (ValueError, TypeError, OSError) as e:
        raise CliError(f"beamsearch: error: --model {spec}: its generation config: {e}", 2) from None
    defaults = generate_defaults()
    cfg = copy.deepcopy(saved)  # its unset fields at generate's defaults, as hf.generate resolves it
    cfg.update(**defaults, defaults_only=True)
    beams = options.get("beam_size", settings["beam_size"])
    if mode is None:  # as generate chooses, the phrases of force_words_ids aside (decode's --constraints are texts)
        asked = copy.deepcopy(cfg)
        asked.num_beams, asked.force_words_ids = beams, None
        mode = choose_mode(None, asked, defaults, {}).name
    chosen = generate_rule(MODES[mode], beams)
    steps = settings.pop("max_new_tokens")
    keywords, dropped = config_keywords(chosen, settings, cfg, defaults)
    texts = {name for name, (_, c) in chosen.own.items() if c.texts}  # ids in the config; decode's are texts
    readable = {name for name, owner in option_names().items() if owner in ("", chosen.name) and name not in texts}
    read = {name: value for name, value in keywords.items() if name in readable}
    out = {name: value for name, value in read.items() if name not in options}
    if steps is not None and "max_steps" not in options:
        out["max_steps"] = str(steps)
    applied = {c.hf for name, (_, c) in chosen.own.items() if name in read}
    other = {k: v for k, v in hf.other_settings(saved).items() if k not in applied}
    if other:
        shown = ", ".join(f"{k}={v!r}" for k, v in other.items())
        print(f"beamsearch: note: the generation config of {spec} sets {shown}, which decode does not apply",
              file=sys.stderr)
    if dropped:
        shown = ", ".join(f"{setting}={value!r}" for setting, (_, value) in dropped.items())
        print(f"beamsearch: note: the generation config of {spec} sets {shown}, which --mode {chosen.name} does "
              "not take", file=sys.stderr)
    return chosen.name, out


def flag_names(message: str) -> str:
    """A library message about its keywords, in decode's words: each keyword as its flag
    (``beam_size`` is ``--beam-size``) and each mode's function as its ``--mode``. The names are
    the options' own (and decode's), so nothing is looked up in a table of renames. A name with an
    underscore is a keyword wherever it stands; a one-word name (``k``, ``seed``, ``output``) only
    where it is one: before ``=``, first in the message or a clause, or after "needs", "with" or "take"."""
    names = sorted((*option_names(), *RUNNER_FLAGS), key=len, reverse=True)
    joined = "|".join(n for n in names if "_" in n)
    words = "|".join(n for n in names if "_" not in n)
    message = re.sub(r"(?<![-\w'])(" + joined + r")\b(?![-'])", lambda m: flag(m.group(1)), message)
    message = re.sub(r"((?:^|; |: |needs |with |, | and )(?<!-))(" + words + r")\b(?=[ =:;,]|$)(?!\s*\()",
                     lambda m: m.group(1) + flag(m.group(2)), message)
    message = re.sub(r"(?<![-\w'])(" + words + r")(?==)", lambda m: flag(m.group(1)), message)
    message = re.sub(r"(does not take )(" + words + r")\b", lambda m: m.group(1) + flag(m.group(2)), message)
    for spec in MODES.values():
        message = re.sub(rf"\b{spec.function.__name__}\b", f"--mode {spec.name}", message)
    return message
