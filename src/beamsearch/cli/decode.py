"""``beamsearch decode``: a corpus file decoded to JSON Lines (refill, per-line errors, resume, Ray)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any, BinaryIO, TextIO

from beamsearch.cli.common import FASTEST_THREADS, CliError, count_lines, positive, write_page
from beamsearch.cli.decode_files import check_decode_files, decode_identity, output_locked
from beamsearch.cli.decode_speech import (
    add_speech_flags,
    is_hf_whisper,
    is_speech,
    speech_search,
    text_model_flags,
    whisper_search,
)
from beamsearch.cli.options import add_search_flags, flag_names, given, hf_defaults, option_names
from beamsearch.core.config import DecodingConfig, flag
from beamsearch.corpus.load import HF_MAX_STEPS
from beamsearch.corpus.load import ZOO_MODELS as MODELS  # numpy only: torch is not imported here
from beamsearch.modes.registry import MODES as SEARCH_MODES


def _decode_model(args: argparse.Namespace) -> Any:
    """``--model``: what :func:`beamsearch.corpus.load_model` takes (a zoo name, a checkpoint
    folder, ``hf:DIR``, or the hidden test model ``_toy[:DELAY]``); a spec naming no model is a
    usage error (exit 2), files that cannot be read exit 1."""
    from beamsearch.corpus.load import ModelSpecError, load_model

    steps = args.max_steps
    try:  # an hf: model's limit: an integer --max-steps, else HF_MAX_STEPS (what A*len+B is capped at)
        return load_model(args.model, calendar=args.calendar, threads=args.threads,
                          hf_max_steps=steps if isinstance(steps, int) else HF_MAX_STEPS)
    except ModelSpecError as e:
        raise CliError(f"beamsearch: error: --{e}", 2) from None
    except OSError as e:
        raise CliError(f"beamsearch: error: --model {args.model}: {e}", 1) from None
    except ValueError as e:  # the speech model's files (a message naming the file)
        raise CliError(f"beamsearch: error: {e}", 1) from None
    except Exception as e:  # the zoo's CheckpointError (a message naming the file); torch is imported lazily
        if type(e).__name__ != "CheckpointError":
            raise
        raise CliError(f"beamsearch: error: {e}", 1) from None


def decode_command(args: argparse.Namespace) -> int:
    """``beamsearch decode``; SIGINT (Ctrl-C) is one line and exit status 130."""
    try:
        return _decode(args)
    except KeyboardInterrupt:
        raise CliError("beamsearch: interrupted", 130) from None


def _search(args: argparse.Namespace) -> dict[str, Any]:
    """decode_records' keywords: the search options given (by their names), an hf: model's
    generation-config defaults for those not given, ``--max-steps`` parsed, and the runner's own."""
    options = given(args)
    asked = args.mode
    args.mode, defaults = hf_defaults(args.model, asked, options)
    dropped = [k for k in options if asked != args.mode and option_names()[k] == asked]
    if dropped:  # transformers with one beam: generate's greedy decoding, which has none of its options
        print(f"beamsearch: note: --mode {asked} with one beam is generate's greedy decoding, which takes no "
              f"{', '.join(flag(k) for k in dropped)}", file=sys.stderr)
        options = {k: v for k, v in options.items() if k not in dropped}
    if args.mode == "greedy":
        for name in ("beam_size", "n_best"):
            if options.get(name) == 1:
                del options[name]  # greedy's one row and one output, as given
    options = {**defaults, **options}
    if "max_steps" in options:
        options["max_steps"] = _max_steps(options["max_steps"])
    return {"mode": args.mode, "max_rows": args.max_rows, "max_tokens": args.max_tokens, **options}


def _decode(args: argparse.Namespace) -> int:
    from beamsearch import corpus

    if is_speech(args.model):
        search = speech_search(args)
    elif is_hf_whisper(args.model):
        search = whisper_search(args)
    else:
        text_model_flags(args)
        search = _search(args)
    if isinstance(search.get("scorer"), str):
        _working_directory_first()
    args.max_steps = search.get("max_steps")
    positive(args, "--max-rows", "--threads")
    if args.max_tokens is not None:
        positive(args, "--max-tokens")
    if args.resume and args.output == "-":
        raise CliError("beamsearch: error: --resume needs an --output file", 2)
    if args.trace is not None and args.input == "-":
        raise CliError("beamsearch: error: --trace needs an --input file (the traced line is read again)", 2)
    if args.trace is not None and is_speech(args.model):
        raise CliError("beamsearch: error: --trace with --model speech: beamsearch transcribe --trace draws a "
                       "file's search", 2)
    if args.trace is not None and is_hf_whisper(args.model):
        raise CliError("beamsearch: error: --trace does not apply to a Whisper folder", 2)
    if args.trace is not None and args.mode != "beam":
        raise CliError(f"beamsearch: error: --trace draws a beam search; got --mode {args.mode}", 2)
    if args.trace_input < 0:
        raise CliError(f"beamsearch: error: --trace-input must be >= 0; got {args.trace_input}", 2)
    check_decode_files(args)
    if args.ray is not None:
        return _decode_on_ray(args, search)
    model = _decode_model(args)
    steps = search.get("max_steps")
    if isinstance(steps, int) and not 1 <= steps <= model.max_steps:
        raise CliError(f"beamsearch: error: --max-steps must be in [1, {model.max_steps}] (the model's limit); "
                       f"got {steps}", 2)
    try:  # the search, built and checked once, before any input is read or model call made
        run = corpus.corpus_search(model, **search)
    except (ValueError, TypeError) as e:
        raise CliError(f"beamsearch: error: {flag_names(str(e))}", 2) from None
    page = _decode_trace(model, args, search) if args.trace is not None else None  # before decoding
    source = _open_input(args.input)
    with source:
        progress = None
        if args.progress or sys.stderr.isatty():
            total = None if args.input == "-" else count_lines(args.input)
            progress = corpus.Progress(total, sys.stderr)
        lines = corpus.read_lines(source, jsonl=args.jsonl, field=args.field)
        with _notes_on_one_line(corpus.RecordKeyWarning):
            records, failed = _decode_lines(model, lines, args, progress, search, run)
    if page is not None:
        write_page(args.trace, page)
    if failed:
        print(f"beamsearch: {failed} of {records} lines failed (see their error field)", file=sys.stderr)
    return 1 if failed else 0


def _open_input(path: str) -> BinaryIO:
    """``--input`` opened for reading bytes (``-``: standard input); the caller closes it."""
    try:
        return sys.stdin.buffer if path == "-" else open(path, "rb")
    except OSError as e:
        raise CliError(f"beamsearch: error: cannot read --input {path}: {e.strerror}", 2) from None


@contextlib.contextmanager
def _notes_on_one_line(noted: type[Warning]) -> Iterator[None]:
    """Warnings of category ``noted`` shown as one line on stderr, ``beamsearch: note: ...`` (each text
    once, as Python shows a warning); others as Python shows them."""
    with warnings.catch_warnings():
        python_shows = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            if issubclass(category, noted):
                print(f"beamsearch: note: {message}", file=sys.stderr)
            else:
                python_shows(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def _working_directory_first() -> None:
    """``--scorer MODULE:FUNCTION``: MODULE is looked for in the working directory first, as
    ``python -m beamsearch`` does and as ``module:function`` arguments are (uvicorn's app); the
    ``beamsearch`` command's script puts its own folder first instead."""
    here = os.getcwd()
    if sys.path[:1] not in ([""], [here]):
        sys.path.insert(0, here)


def _decode_lines(model: Any, lines: Any, args: argparse.Namespace, progress: Any,
                  search: dict[str, Any], run: Any) -> tuple[int, int]:
    """:func:`beamsearch.corpus.decode_corpus` to ``--output`` (``run``: the search, built once):
    a refusal (the output's lock held, a side file without --resume, a resume of other options or
    another input) exits 2, SIGINT 130, each with one line."""
    from beamsearch import corpus

    try:
        return corpus.decode_corpus(model, lines, args.output, resume=args.resume, progress=progress,
                                    identity=decode_identity(args), run=run, **search)
    except corpus.OutputError as e:
        raise CliError(f"beamsearch: error: {flag_names(str(e))}", 2) from None
    except corpus.Interrupted as e:
        kept = (f"{e.records} records kept in {e.path}; rerun with --resume to continue" if e.path is not None
                else f"{e.records} records written to stdout")
        raise CliError(f"beamsearch: interrupted; {kept}", 130) from None


def _max_steps(text: str | None) -> Any:
    """``--max-steps``: None, an int, or a :class:`beamsearch.corpus.LengthRule` (``A*len+B``)."""
    from beamsearch.corpus import LengthRule

    if text is None:
        return None
    try:
        return LengthRule.parse(text)
    except ValueError:
        raise CliError(f"beamsearch: error: --max-steps must be an integer or A*len+B (e.g. 2*len+10); "
                        f"got {text!r}", 2) from None


def _decode_on_ray(args: argparse.Namespace, search: dict[str, Any]) -> int:
    """``--ray [ADDRESS]``: the input decoded by :func:`beamsearch.distributed.decode_ray` (which
    checks the model and ``search`` before Ray starts); the output written once, at the end,
    its lock held for the run."""
    from beamsearch import corpus

    positive(args, "--ray-workers", "--ray-batch")
    for name, on in (("--resume", args.resume), ("--trace", args.trace is not None)):
        if on:
            raise CliError(f"beamsearch: error: {name} does not apply with --ray", 2)
    source = _open_input(args.input)
    with source, output_locked(args.output):
        lines = list(corpus.read_lines(source, jsonl=args.jsonl, field=args.field))
        return _ray_records(args, lines, search)


def _ray_records(args: argparse.Namespace, lines: list[Any], search: dict[str, Any]) -> int:
    """``--ray``: decode ``lines`` on Ray and write the output."""
    from beamsearch import distributed

    try:
        records = distributed.decode_ray(args.model, lines, address=None if args.ray == "local" else args.ray,
                                         num_workers=args.ray_workers, batch_size=args.ray_batch,
                                         calendar=args.calendar, threads=args.threads, **search)
    except (ValueError, TypeError, ModuleNotFoundError) as e:
        raise CliError(f"beamsearch: error: {flag_names(str(e))}", 2) from None
    total, failed = distributed.write_records(records, args.output)
    if failed:
        print(f"beamsearch: {failed} of {total} lines failed (see their error field)", file=sys.stderr)
    return 1 if failed else 0


def _decode_trace(model: Any, args: argparse.Namespace, search: dict[str, Any]) -> str:
    """``--trace HTML``: the page of the search tree of the line of index ``--trace-input`` (read
    from the file here, before decoding; a line that is missing or cannot be decoded exits 2)."""
    from beamsearch import corpus
    from beamsearch.viz import to_html

    index = args.trace_input
    with open(args.input, "rb") as source:
        line = next((x for x in corpus.read_lines(source, jsonl=args.jsonl, field=args.field) if x.index == index),
                    None)
    if line is None:
        lines = count_lines(args.input)
        which = f" (indices 0 to {lines - 1})" if lines else ""
        raise CliError(f"beamsearch: error: --trace-input {index}: the input has {lines} lines{which}", 2)
    options = {k: v for k, v in search.items() if k not in ("mode", "max_rows", "max_tokens", "max_steps")}
    try:
        if line.error is not None:
            raise ValueError(line.error)
        steps = corpus.line_max_steps(model, line, search.get("max_steps"))
        if isinstance(steps, str):
            raise ValueError(steps)
        tree, greedy = corpus.trace_line(model, line.text, max_steps=steps, **options)
    except (ValueError, TypeError) as e:
        raise CliError(f"beamsearch: error: --trace-input {index}: line {index + 1}: {flag_names(str(e))}", 2) from None
    name = corpus.line_name(index)
    beam = options.get("beam_size", DecodingConfig.beam_size)
    return to_html(tree, vocab=corpus.TokenLabels(model), greedy=greedy, labels=[name],
                   title=f"{name}: {line.text[:60]!r}, beam {beam}")


def add_command(sub: Any, fmt: type) -> None:
    """The ``decode`` subcommand, on the subparsers ``sub``."""
    p = sub.add_parser("decode", help="decode a corpus file to JSON Lines (refill, per-line errors, resume)",
                       formatter_class=fmt,
                       description="One JSON object per input line, in input order: index, input, nbest (text, "
                                   "tokens, logprob, score, finished), or error for a line that cannot be decoded "
                                   "(exit status 1 if any; 2 usage error; 130 Ctrl-C). Records are flushed to "
                                   "OUTPUT.partial as inputs finish; --resume continues a killed run from it. One "
                                   "run writes an output at a time (OUTPUT.lock).")
    p.add_argument("--model", required=True, metavar="NAME|DIR",
                   help=f"a zoo model ({', '.join(MODELS)}), a checkpoint folder as `train --out DIR` writes it, or "
                        "hf:DIR, a local transformers folder (model and tokenizer, save_pretrained; causal LM "
                        f"or encoder-decoder, decoded with refill; the search flags not given come from its saved "
                        f"generation config, as generate reads it; at most {HF_MAX_STEPS} tokens unless "
                        "max_new_tokens or --max-steps N), or speech, the speech model (JSON lines {\"audio\": PATH}; "
                        "see speech options)")
    p.add_argument("--input", required=True, metavar="FILE", help="input lines (UTF-8, LF or CRLF); - for stdin")
    p.add_argument("--output", required=True, metavar="FILE", help="JSON Lines output; - for stdout")
    p.add_argument("--jsonl", action="store_true",
                   help="the input is JSON Lines: the text in --field, optional per-line max_steps, prefix and "
                        "constraints, and an image or audio file (\"image\": PATH, \"audio\": PATH) for an hf: "
                        "model with a processor; its other keys (an id) are copied into the line's record")
    p.add_argument("--field", default="text", help="the JSON field holding the text (with --jsonl)")
    p.add_argument("--max-rows", type=int, default=320,
                   help="most rows (hypotheses) per model call; it changes no token, only the last bits of a torch "
                        "model's logprob and score (within 1e-4 of the value; docs/corpus.md, Resume and floats), "
                        "so --resume may take another")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="most decoder tokens the rows of one model call may hold, padding included: lines join "
                        "when (rows in flight + theirs) x (the widest prompt + max steps among them) fits; a line "
                        "whose own rows need more gets an error record")
    p.add_argument("--mode", choices=tuple(SEARCH_MODES), default=None,
                   help="the search: " + "; ".join(f"{m.name}: {m.summary}" for m in SEARCH_MODES.values())
                        + " (default: beam; for --model hf:DIR, the one generate runs for its generation config: "
                          "greedy for one beam (--beam-size 1, or num_beams 1 there), beam for more, diverse for "
                          "num_beam_groups; transformers with one beam decodes greedily, as generate does)")
    group = p.add_argument_group(
        "search options", "the decoding configuration's fields and each mode's own options, by their library names "
        "(the mode's name before an option's help); for --model hf:DIR, one not given takes its saved generation "
        "config's value where it sets one (length_penalty as power's alpha; max_new_tokens unset: at most "
        f"{HF_MAX_STEPS}); --max-steps also takes A*len+B: per line from its source length (characters; tokens for "
        "hf:), e.g. 2*len+10, capped at the model's limit; --scorer MODULE:FUNCTION imports MODULE from the working "
        "directory first, then the Python path (as python -m does), and --resume refuses a changed MODULE file")
    add_search_flags(group)
    p.add_argument("--no-calendar", dest="calendar", action="store_false",
                   help="do not constrain zoo dates models to real calendar dates")
    p.add_argument("--threads", type=int, default=FASTEST_THREADS, help="torch threads")
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run: skip the inputs already in OUTPUT.partial (refused, before "
                        "anything is written, when it was written with other options or for another input)")
    p.add_argument("--progress", action="store_true",
                   help="progress on stderr (inputs/s, tokens/s, ETA): redrawn in place on a terminal (on by default "
                        "there), one line per update to a file or pipe")
    _add_ray_and_trace(p)
    add_speech_flags(p)


def _add_ray_and_trace(p: Any) -> None:
    """decode's ``--ray`` and ``--trace`` flags."""
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="decode with Ray Data (the ray extra) on the cluster at ADDRESS (`ray start --head` prints "
                        "it), or on a local one started for the run when no ADDRESS is given")
    p.add_argument("--ray-workers", type=int, default=2, metavar="N", help="with --ray: actors, one CPU each")
    p.add_argument("--ray-batch", type=int, default=256, metavar="LINES", help="with --ray: lines per batch")
    p.add_argument("--trace", metavar="HTML", default=None,
                   help="also write the search tree of one input line (--trace-input) as an interactive page")
    p.add_argument("--trace-input", type=int, default=0, metavar="I",
                   help="the line --trace draws, by its record's index (0 is the first line; the page names it "
                        "line I+1, as errors and --resume do)")
