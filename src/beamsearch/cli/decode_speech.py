"""``beamsearch decode --model speech``: the speech flags (those of ``beamsearch transcribe``, parsed
by its own checks) and the search keywords of :meth:`beamsearch.corpus.speech_lines.SpeechLines.line_search`."""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from beamsearch.cli import transcribe
from beamsearch.cli.common import CliError
from beamsearch.cli.options import flag, given
from beamsearch.corpus.load import SPEECH

__all__ = ["SPEECH_FLAGS", "add_speech_flags", "is_hf_whisper", "is_speech", "speech_search", "whisper_search"]

SPEECH_FLAGS = ("head", "lm", "beta", "hotwords", "hotword_weight", "max_chunk_seconds")
"""decode's flags for the speech model alone (their destinations)."""

_SHARED = ("beam_size", "n_best", "alpha")  # search flags the speech model reads too (alpha: the LM's weight)


def is_speech(spec: str) -> bool:
    """Whether ``--model`` names the speech model (``speech``, or a folder holding ``speech.json``)."""
    return spec == SPEECH or (pathlib.Path(spec) / f"{SPEECH}.json").is_file()


def is_hf_whisper(spec: str) -> bool:
    """Whether ``--model`` is ``hf:DIR`` of a Whisper folder with its Whisper tokenizer (decoded by
    whisper's rules over JSON lines ``{"audio": PATH}``: :mod:`beamsearch.corpus.hf_speech`)."""
    from beamsearch.corpus.hf_speech import is_whisper_folder

    return spec.startswith("hf:") and is_whisper_folder(spec[3:])


def whisper_search(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``HFSpeech.line_search`` the flags give for a Whisper folder: ``--beam-size``,
    ``--n-best``, ``--mode beam|greedy`` and ``--max-rows``; any other search or speech flag exits 2."""
    for name in SPEECH_FLAGS:
        if getattr(args, name) is not None:
            raise CliError(f"beamsearch: error: {flag(name)} applies to --model speech; got --model {args.model}", 2)
    other = [name for name in given(args) if name not in ("beam_size", "n_best")]
    if other:
        raise CliError(f"beamsearch: error: {flag(other[0])} does not apply to a Whisper folder (--model "
                       f"{args.model}: --beam-size, --n-best, --mode beam|greedy, --max-rows)", 2)
    if args.mode not in (None, "beam", "greedy"):
        raise CliError("beamsearch: error: a Whisper folder decodes with --mode beam or greedy; got --mode "
                       f"{args.mode}", 2)
    if args.max_tokens is not None:
        raise CliError("beamsearch: error: --max-tokens does not apply to a Whisper folder (see --max-rows)", 2)
    args.mode = args.mode or "beam"
    search = {"mode": args.mode, "max_rows": args.max_rows, "n_best": args.n_best or 1}
    if args.beam_size is not None:
        search["beam_size"] = args.beam_size
    return search


def add_speech_flags(p: argparse.ArgumentParser) -> None:
    """decode's speech flags, in a group of their own."""
    group = p.add_argument_group(
        "speech options (--model speech)",
        "each JSON line names an audio file, {\"audio\": PATH}; --beam-size, --n-best, --alpha (the LM's weight) and "
        "--mode greedy|beam apply too, as beamsearch transcribe takes them; --max-rows is the most audio chunks "
        "per model call (lines join a call while their chunks fit)")
    group.add_argument("--head", choices=("ctc", "tdt"), default=None, help="which of the model's heads decodes "
                       "(default: ctc)")
    group.add_argument("--lm", default=None, metavar="ARPA|none",
                       help="a word n-gram LM (ARPA file), or none (default: the shipped 3-gram of the domain)")
    group.add_argument("--beta", type=float, default=None, help="the bonus per word with an LM (default: the model's)")
    group.add_argument("--hotwords", default=None, metavar="PHRASES",
                       help=f"phrases to favour, separated by '{transcribe.HOTWORD_SEPARATOR}'")
    group.add_argument("--hotword-weight", type=float, default=None,
                       help="the bonus per character of a hotword (default: the model's)")
    group.add_argument("--max-chunk-seconds", type=float, default=None, metavar="S",
                       help="longer files are cut into chunks of at most S seconds (default: 20)")


def text_model_flags(args: argparse.Namespace) -> None:
    """A speech flag given for a text model: exit 2."""
    for name in SPEECH_FLAGS:
        if getattr(args, name) is not None:
            raise CliError(f"beamsearch: error: {flag(name)} applies to --model speech; got --model {args.model}", 2)


def speech_search(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``SpeechLines.line_search`` the flags give, checked by ``transcribe``'s own
    checks (a usage error exits 2; an ``--lm`` file that cannot be read exits 1, as there)."""
    other = [name for name in given(args) if name not in _SHARED]
    if other:
        raise CliError(f"beamsearch: error: {flag(other[0])} does not apply to --model speech", 2)
    if args.mode not in (None, "beam", "greedy"):
        raise CliError(f"beamsearch: error: --model speech decodes with --mode beam or greedy; got --mode {args.mode}",
                       2)
    if args.max_tokens is not None:
        raise CliError("beamsearch: error: --max-tokens does not apply to --model speech (see --max-rows)", 2)
    seconds = args.max_chunk_seconds if args.max_chunk_seconds is not None else transcribe.MAX_CHUNK_SECONDS
    beam_size = args.beam_size
    if args.mode == "greedy" and beam_size == 1:
        beam_size = None  # greedy's one hypothesis, as given: accepted as text models accept it
    as_transcribe = argparse.Namespace(
        files=[], trace=None, head=args.head or "ctc", greedy=args.mode == "greedy", n_best=args.n_best or 1,
        beam_size=beam_size, lm=args.lm, alpha=args.alpha, beta=args.beta, hotwords=args.hotwords,
        hotword_weight=args.hotword_weight, max_chunk_seconds=seconds)
    try:
        options = transcribe.search_options(as_transcribe)
    except CliError as e:  # transcribe's --greedy is decode's --mode greedy
        raise CliError(str(e).replace("--greedy", "--mode greedy"), e.code) from None
    if args.lm is not None and args.mode != "greedy":
        transcribe.load_lm(args.lm)  # a file that cannot be read: one line, exit 1, before any line is read
    if options.pop("beam_size", 0) is None:
        options["mode"] = "greedy"
    elif beam_size is not None:
        options["beam_size"] = beam_size
    args.mode = options.setdefault("mode", "beam")
    return {**options, "lm": args.lm, "max_chunk_seconds": seconds, "max_rows": args.max_rows}
