"""The decoding configuration: the one list of the controls every search shares.

:class:`DecodingConfig` is a frozen dataclass whose fields are the shared controls of every
search mode, by the names and with the defaults of :func:`beamsearch.beam_search_batch`'s
keywords. Every layer reads its names from here: the search modes take them as ``**controls``
(:func:`beamsearch.controls.shared.mode_options` checks a mode's keywords against
:data:`SHARED_CONTROLS`), refill and corpus decoding pass them through by these names, and the
command line's ``decode`` flags, their help and their defaults are generated from the fields
(``beam_size`` is ``--beam-size``, :func:`flag`); :func:`beamsearch.hf.search_settings` maps a
``GenerationConfig`` onto them. A search mode's own options are a dataclass of the same kind in its
module (:mod:`beamsearch.modes.registry`).

Every option field, shared or a mode's own, is declared by :func:`option`; its
``metadata["option"]`` is an :class:`OptionInfo`: its help text and how the command line and
corpus decoding read it. ("Control", in the library, names only the shared controls: the fields of
:class:`DecodingConfig` that every search takes, and the engine's
:class:`~beamsearch.core.protocols.Controls` made of them.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from beamsearch.core.penalties import LengthPenalty

__all__ = ["DecodingConfig", "GRAMMAR_KINDS", "GrammarOptions", "OptionInfo", "PER_BATCH", "REQUIRED_CONTROLS",
           "SEARCH_SIZES", "SHARED_CONTROLS", "SearchConfig", "flag", "option", "options_of"]


@dataclass(frozen=True)
class OptionInfo:
    """What one option field is to the command line and to corpus decoding.

    Attributes:
        help: one line for ``--help`` and the docs.
        metavar: the flag's value name (None: the field's type decides).
        cli: whether ``beamsearch decode`` has a flag for it (False for what the model or each
            input gives: eos and bos ids, processors, a prefix).
        texts: corpus decoding takes it as target texts (each turned into token ids by the
            model; an item that is a list of texts: one of them); its flag is given once per text.
        choices: the values it takes, where they are a few names.
        aliases: older spellings of its flag, still accepted (``--beam`` for ``--beam-size``).
        required: a search cannot run without it.
        hf: the ``transformers`` ``GenerationConfig`` setting it is read from, where there is one:
            ``num_beams`` for ``beam_size`` (:func:`beamsearch.hf.search_settings`; ``decode
            --model hf:DIR`` reads these too), ``num_beam_groups`` for a mode's ``num_groups``
            (:func:`beamsearch.hf.generate`, which also picks the mode by them).
        selects_mode: for a mode's own option: whether its ``hf`` setting away from its default
            (or the option given to :func:`beamsearch.hf.generate` by its name) asks for the
            mode. False for a setting every ``generate`` call has (``early_stopping``): it is
            read as the option only when the mode runs.
        file: its flag names a file whose text is the option's value (``decode`` reads it; a
            file that cannot be read is a usage error naming the flag).
    """

    help: str
    metavar: str | None = None
    cli: bool = True
    texts: bool = False
    choices: tuple[str, ...] | None = None
    aliases: tuple[str, ...] = ()
    required: bool = False
    hf: str | None = None
    selects_mode: bool = True
    file: bool = False


def option(default: Any, help: str, **kw: Any) -> Any:
    """A dataclass field with an :class:`OptionInfo` (its ``metadata["option"]``)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("an option's default must be immutable")
    return field(default=default, metadata={"option": OptionInfo(help, **kw)})


@dataclass(frozen=True)
class DecodingConfig:
    """The shared controls of every search, as :func:`beamsearch.beam_search_batch` takes them
    (same names, defaults and meaning; see its docstring for the exact semantics and shapes).

    The library functions take these as keywords; a configuration is the same keywords as one
    value (:meth:`keywords`, :meth:`replace`). Nothing is validated on construction: each search
    checks its arguments once, at its entry, naming the keyword.
    """

    eos_token_id: int | Sequence[int] | None = option(
        None, "the token, or tokens, that finish a hypothesis", cli=False, required=True)
    max_steps: int | Sequence[int] | None = option(
        None, "the most tokens generated per output (one int, or one per input)", metavar="N|A*len+B",
        required=True, hf="max_new_tokens")
    beam_size: int = option(5, "beam size: the live rows per input", aliases=("--beam",), hf="num_beams")
    n_best: int = option(1, "outputs per input (<= the beam size)", hf="num_return_sequences")
    length_penalty: str = option(
        "gnmt", "the length penalty: gnmt ((5 + len) / 6) ** alpha, or power len ** alpha",
        choices=tuple(LengthPenalty.KINDS))
    alpha: float = option(0.6, "the length penalty's strength (>= 0; 0: the logprob)", metavar="A",
                          hf="length_penalty")
    no_repeat_ngram_size: int = option(0, "no n-gram of N tokens twice in an output (0: off)", metavar="N",
                                       aliases=("--no-repeat-ngram",), hf="no_repeat_ngram_size")
    min_new_tokens: int = option(0, "no end token (or stop sequence) before M tokens", metavar="M",
                                 hf="min_new_tokens")
    temperature: float = option(1.0, "logits divided by T before scoring", metavar="T")
    top_k: int | None = option(None, "only each row's K best tokens extend it", metavar="K")
    stop_sequences: Sequence[Any] = option(
        (), "an output ending with TEXT is finished, as with the end token (repeatable)", metavar="TEXT",
        texts=True, aliases=("--stop-sequence",))
    bos_token_id: int | None = option(None, "stands in for an empty prompt", cli=False)
    logits_processors: Sequence[Any] = option((), "processor(logits, ctx) -> logits, after the built-in ones",
                                              cli=False)
    prefix: Sequence[Sequence[int]] | None = option(
        None, "per input: token ids forced as its first generated tokens (and scored)", cli=False)
    early_stop: bool = option(True, "stop an input once no live row can beat its n_best-th output (lossless)",
                              cli=False)
    return_token_logprobs: bool = option(False, "each output also carries token_logprobs",
                                         aliases=("--token-logprobs",))
    pad_token_id: int | None = option(None, "fills the padded result arrays; never changes the search", cli=False)

    @property
    def penalty(self) -> LengthPenalty:
        """The length penalty as one value (its kind and strength)."""
        return LengthPenalty(self.length_penalty, self.alpha)

    def keywords(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The fields as keywords (those in ``names``, default all), for a search function."""
        names = tuple(f.name for f in dataclasses.fields(self)) if names is None else names
        return {name: getattr(self, name) for name in names}

    def replace(self, **changes: Any) -> DecodingConfig:
        """A copy with ``changes`` (field names)."""
        return dataclasses.replace(self, **changes)


def options_of(options: type) -> dict[str, tuple[Any, OptionInfo]]:
    """``name -> (default, OptionInfo)`` of an options dataclass (:class:`DecodingConfig`, or a
    mode's options), in field order."""
    return {f.name: (f.default, f.metadata["option"]) for f in dataclasses.fields(options)}


def flag(name: str) -> str:
    """The command-line flag of an option: ``beam_size`` is ``--beam-size``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class GrammarOptions:
    """The constraints on every output of a run, as fields of its configuration: at most one
    grammar (a :class:`~beamsearch.processors.Grammar` over the model's tokenizer, ending with its
    eos: ``json_schema``, ``grammar`` or ``regex``), and a catalogue (a
    :class:`~beamsearch.processors.Catalogue` ending with the model's eos). Corpus decoding and
    ``beamsearch decode`` take them by name (their help is the flags'; a grammar flag names a
    file), :func:`beamsearch.hf.generate` as keywords (a schema dict, a catalogue object too)."""

    json_schema: Any = option(
        None, "every output is JSON valid under the JSON Schema in FILE (compact, keys in the schema's order; "
        "docs/grammar.md; a regular file of at most 16 MiB)", metavar="FILE", file=True)
    grammar: str | None = option(None, "every output is a text of the Lark grammar in FILE (rule start; a regular "
                                 "file of at most 16 MiB)", metavar="FILE", file=True)
    regex: str | None = option(None, "every output fully matches the regular expression PATTERN", metavar="PATTERN")
    catalogue: str | None = option(
        None, "every output is an entry of the catalogue in FILE, then eos: a safetensors file of "
        "Catalogue.save, else a text file with one entry per line, its token ids separated by spaces "
        "(docs/retrieval.md); a regular file of at most 1 GiB", metavar="FILE")


GRAMMAR_KINDS = {"json_schema": "json_schema", "grammar": "lark", "regex": "regex"}
"""Each grammar option -> the :class:`~beamsearch.processors.Grammar` kind it builds."""

SEARCH_SIZES = ("beam_size", "n_best", "early_stop", "return_token_logprobs", "pad_token_id")
"""The fields that size a search and shape its results rather than process its logits: a mode
takes those that apply to it beside the shared controls (its plan function's own keywords)."""

SHARED_CONTROLS = tuple(name for name in options_of(DecodingConfig) if name not in SEARCH_SIZES)
"""The keywords of :func:`beamsearch.beam_search_batch` that every search mode takes as
``**controls`` (the rules of SPEC section 10, and the length penalty)."""

PER_BATCH = frozenset({"max_steps", "prefix"})
"""The shared controls that each batch checks with its prompts (one value per input), not the
configuration alone."""

REQUIRED_CONTROLS = tuple(name for name, (_, c) in options_of(DecodingConfig).items() if c.required)
"""The controls a search cannot run without."""


@dataclass(frozen=True)
class SearchConfig:
    """One search's configuration as one value: the mode, its shared controls and sizes (a
    :class:`DecodingConfig`) and its own options (the mode's options dataclass), built and checked
    once where a search is asked for (:meth:`beamsearch.core.mode.Mode.configure`) and passed
    down as it is: refill, corpus decoding, the command line and Ray read it, none rebuilds it.

    Attributes:
        mode: the registered mode's name.
        controls: the shared controls and sizes (those not given at their defaults).
        options: the mode's own options (an instance of its options dataclass).
        given: the names given (shared or own): :meth:`keywords` passes on these, so a mode's
            function keeps its own default for what was not given.
        checked: the shared controls that no prompt changes, as checked where the configuration was
            built (a :class:`~beamsearch.core.plan.CheckedControls`): a batch's controls are made of
            them and are not checked again (None: not checked yet).
    """

    mode: str
    controls: DecodingConfig
    options: Any
    given: frozenset[str]
    checked: Any = field(default=None, compare=False, repr=False)

    @property
    def names(self) -> frozenset[str]:
        """Every name it holds a value of: the shared controls and sizes, and the mode's own options."""
        return frozenset(f.name for f in (*dataclasses.fields(self.controls), *dataclasses.fields(self.options)))

    def value(self, name: str) -> Any:
        """The value of a shared control, size or own option ``name``."""
        return getattr(self.options if name in {f.name for f in dataclasses.fields(self.options)} else self.controls,
                       name)

    def keywords(self) -> dict[str, Any]:
        """The options given, as the mode's plan or batch function takes them."""
        return {name: self.value(name) for name in sorted(self.given)}

    def replace(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes`` (shared or own names; each counts as given), such as a cohort's
        own ``max_steps`` and ``prefix``: values that the plan of each batch checks."""
        own = {f.name for f in dataclasses.fields(self.options)}
        kept = self.checked if set(changes) <= own | PER_BATCH else None  # a changed prompt-free control: unchecked
        return SearchConfig(self.mode, dataclasses.replace(self.controls, **{k: v for k, v in changes.items()
                                                                              if k not in own}),
                            dataclasses.replace(self.options, **{k: v for k, v in changes.items() if k in own}),
                            self.given | frozenset(changes), kept)
