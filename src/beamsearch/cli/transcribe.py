"""``beamsearch transcribe FILE [FILE ...]``: speech to text with the speech model trained here
(:mod:`beamsearch.zoo.speech`), its shipped word 3-gram LM, hotwords and word timestamps.

Each file is read (:func:`beamsearch.speech.audio.read_audio`: mono, resampled to the model's rate),
cut into chunks of at most ``--max-chunk-seconds`` at its quietest points, and each chunk decoded
as an utterance of its own (the LM starts a sentence at each chunk); the file's text is the chunks'
texts joined, its word times shifted by each chunk's start. Its n-best list is exact over the chunks:
the ``n`` best combinations of one hypothesis per chunk by the sum of their scores.

A file that cannot be transcribed (unreadable, empty, silent) prints one line on stderr (and, with
``--json``, a record ``{"file", "error"}``); the others go on, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
from typing import Any

from beamsearch.cli.common import CliError, each_file
from beamsearch.corpus.speech_lines import MAX_CHUNK_SECONDS, speech_lm, transcribe_file
from beamsearch.speech.audio import SEARCH_SECONDS

HOTWORD_SEPARATOR = ","
"""``--hotwords`` splits its phrases at commas (a phrase may hold spaces)."""


def add_command(sub: Any, fmt: type) -> None:
    """Register ``transcribe`` with its flags on the ``beamsearch`` parser's subcommands."""
    p = sub.add_parser("transcribe", formatter_class=fmt, help="speech to text with the speech model trained here",
                       description="Transcribe audio files (WAV, FLAC, ...: any rate and channels; mixed to mono "
                                   "and resampled) with the speech model trained here on spoken dates, clock times "
                                   "and numbers. Exit status: 0 done; 1 some file could not be transcribed, or the "
                                   "model or LM cannot be loaded; 2 usage error.")
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files")
    p.add_argument("--model", default=None, metavar="DIR|hf:DIR",
                   help="a speech model folder (default: the shipped one), or hf:DIR, a saved transformers speech "
                        "encoder-decoder with its processor (Whisper: whisper's rules, 30-second windows, "
                        "temperature fallback; Moonshine, Speech2Text): --beam-size (default 5), --greedy, "
                        "--n-best, --json, --timestamps (segment times) apply")
    p.add_argument("--head", choices=("ctc", "tdt"), default="ctc", help="which of the model's heads decodes")
    p.add_argument("--beam-size", type=int, default=None, metavar="N",
                   help="hypotheses kept per frame (default: the model's, 8)")
    p.add_argument("--greedy", action="store_true",
                   help="greedy decoding instead of beam search: one hypothesis (CTC: the best path, the most "
                        "probable label per frame; TDT: the most probable token per step); it takes no LM, hotwords, "
                        "n-best or --trace")
    p.add_argument("--lm", default=None, metavar="ARPA|none",
                   help="a word n-gram LM (ARPA file) fused into the beam search, or none (default: the shipped "
                        "3-gram of spoken dates, times and numbers)")
    p.add_argument("--alpha", type=float, default=None, help="the LM's weight (default: the model's)")
    p.add_argument("--beta", type=float, default=None, help="the bonus per word with an LM (default: the model's)")
    p.add_argument("--hotwords", default=None, metavar="PHRASES",
                   help=f"phrases to favour, separated by '{HOTWORD_SEPARATOR}' (a phrase may hold spaces): "
                        "\"june fifth,half past\"")
    p.add_argument("--hotword-weight", type=float, default=None,
                   help="the bonus per character of a hotword (default: the model's)")
    p.add_argument("--n-best", type=int, default=1, metavar="N", help="hypotheses per file")
    p.add_argument("--timestamps", action="store_true", help="each word's start and end in seconds")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per file: file, text and nbest (each with its text, scores and words "
                        "with start, end in seconds and confidence)")
    p.add_argument("--max-chunk-seconds", type=float, default=MAX_CHUNK_SECONDS, metavar="S",
                   help=f"longer files are cut into chunks of at most S seconds at their quietest point in the "
                        f"last {SEARCH_SECONDS:g} s before the limit")
    p.add_argument("--trace", default=None, metavar="PAGE.html",
                   help="draw the beam search as one interactive HTML page: CTC over frames (the prefixes after "
                        "each frame), TDT over its steps (the hypotheses after each step); merges, pruned ones, "
                        "the n-best; one FILE")
    p.add_argument("--progress", action="store_true",
                   help="progress on stderr (files as inputs/s, characters as tokens/s, ETA): on by default on a "
                        "terminal for several files")


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``SpeechModel.transcribe`` the flags give (those not given: the model's
    defaults), checked; a usage error is a CliError with exit status 2."""
    def usage(message: str) -> CliError:
        return CliError(f"beamsearch: error: {message}", 2)

    if args.n_best < 1:
        raise usage(f"--n-best must be >= 1; got {args.n_best}")
    if args.beam_size is not None and args.beam_size < 1:
        raise usage(f"--beam-size must be >= 1; got {args.beam_size}")
    if not args.max_chunk_seconds > SEARCH_SECONDS:
        raise usage(f"--max-chunk-seconds must be > {SEARCH_SECONDS:g}; got {args.max_chunk_seconds:g}")
    if args.beam_size is not None and args.n_best > args.beam_size:
        raise usage(f"--n-best must be <= --beam-size={args.beam_size}; got {args.n_best}")
    for flag in ("alpha", "beta", "hotword_weight"):
        value = getattr(args, flag)
        if value is not None and not math.isfinite(value):
            raise usage(f"--{flag.replace('_', '-')} must be a finite number; got {value}")
    trace_options(args)
    options: dict[str, Any] = {"head": args.head, "n_best": args.n_best}
    if args.greedy:
        given = [flag for flag, value in (("--beam-size", args.beam_size), ("--lm", args.lm), ("--alpha", args.alpha),
                                          ("--beta", args.beta), ("--hotwords", args.hotwords),
                                          ("--hotword-weight", args.hotword_weight)) if value is not None]
        if given or args.n_best > 1:
            raise usage(f"--greedy takes no {(given or ['--n-best'])[0]} (greedy decoding keeps one hypothesis, "
                        "without LM or hotwords)")
        return {**options, "beam_size": None}
    if args.lm is not None and args.lm.lower() == "none" and (args.alpha is not None or args.beta is not None):
        raise usage("--alpha and --beta weigh the LM: leave them out with --lm none")
    if args.hotword_weight is not None and args.hotwords is None:
        raise usage("--hotword-weight weighs --hotwords: give them too")
    for key in ("beam_size", "alpha", "beta", "hotword_weight"):  # the flags' names are the keywords
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if args.hotwords is not None:
        options["hotwords"] = hotword_list(args.hotwords)
    return options


def trace_options(args: argparse.Namespace) -> None:
    """``--trace``'s checks (usage errors, exit status 2)."""
    if args.trace is None:
        return
    if len(args.files) != 1:
        raise CliError(f"beamsearch: error: --trace draws one file's search; got {len(args.files)} files", 2)
    if args.greedy:
        raise CliError("beamsearch: error: --trace draws a beam search; got --greedy (give --beam-size 1 for a "
                       "beam of one)", 2)
    folder = pathlib.Path(args.trace).parent
    if not args.trace or not folder.is_dir() or pathlib.Path(args.trace).is_dir():
        raise CliError(f"beamsearch: error: --trace must be a file in an existing folder; got {args.trace!r}", 2)


def write_trace(page: str, trace: Any, path: str) -> None:
    """The page of the file's search (each chunk an utterance) written to ``page``; exit 1 if the
    model did not record it or the page cannot be written."""
    from beamsearch.speech.trace import CTCTrace
    from beamsearch.speech.trace_draw import ctc_html, transducer_html

    if not trace.finished:
        raise CliError("beamsearch: error: --trace: the model recorded no search (its transcribe takes no trace=)", 1)
    n = trace.n_utterances
    labels = [path if n == 1 else f"{path}, chunk {i + 1} of {n}" for i in range(n)]
    draw = ctc_html if isinstance(trace, CTCTrace) else transducer_html
    try:
        pathlib.Path(page).write_text(draw(trace, labels=labels, title=f"beamsearch transcribe {path}"),
                                      encoding="utf-8")
    except OSError as e:
        raise CliError(f"beamsearch: error: cannot write --trace {page}: {e.strerror}", 1) from None


def hotword_list(text: str) -> list[str]:
    """``--hotwords``' phrases: split at :data:`HOTWORD_SEPARATOR`, spaces inside a phrase made single."""
    phrases = [" ".join(part.split()) for part in text.split(HOTWORD_SEPARATOR)]
    if not all(phrases):
        raise CliError(f"beamsearch: error: --hotwords has an empty phrase: {text!r} (phrases are "
                       f"separated by '{HOTWORD_SEPARATOR}')", 2)
    return phrases


def load_model(path: str | None) -> Any:
    """The speech model (:func:`beamsearch.zoo.speech.load`); a file that cannot be loaded: exit 1."""
    from beamsearch.zoo import speech

    try:
        return speech.load(path)
    except (ValueError, OSError) as e:
        raise CliError(f"beamsearch: error: {e}", 1) from None


def load_lm(lm: str | None) -> Any:
    """``--lm``'s word LM as a :class:`beamsearch.speech.NgramLM` (None for ``none``)."""
    path = "the shipped LM" if lm is None else lm
    try:
        return speech_lm(lm)
    except OSError as e:
        raise CliError(f"beamsearch: error: cannot read --lm {path}: {e.strerror}", 1) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CliError(f"beamsearch: error: --lm {path} is no ARPA file: {e}", 1) from None


def write(path: str, nbest: list[dict], args: argparse.Namespace, several: bool) -> None:
    """One file's result on stdout: a JSON object, or its text lines (see ``--help``)."""
    if args.json:
        print(json.dumps({"file": path, "text": nbest[0]["text"], "nbest": nbest}, ensure_ascii=False))
        return
    prefix = f"{path}\t" if several else ""
    for rank, h in enumerate(nbest, 1):
        print(prefix + (f"{rank}\t{h['score']:.4f}\t{h['text']}" if args.n_best > 1 else h["text"]))
        if args.timestamps:
            for w in h["words"]:
                print(f"{prefix}  {w['start']:8.2f} {w['end']:8.2f}  {w['word']}")


def transcribe_command(args: argparse.Namespace) -> int:
    """``beamsearch transcribe``: each file's transcript; exit 1 when some file could not be read."""
    if args.model is not None and args.model.startswith("hf:"):
        from beamsearch.cli.transcribe_hf import hf_transcribe

        return hf_transcribe(args)
    options = search_options(args)
    model = load_model(args.model)
    if not args.greedy:  # greedy decoding takes no LM
        options["lm"] = load_lm(args.lm)
    if args.trace is not None:
        from beamsearch.speech.trace import CTCTrace
        from beamsearch.speech.transducer_trace import TransducerTrace

        options["trace"] = CTCTrace() if args.head == "ctc" else TransducerTrace()

    def one(path: str) -> int:
        nbest = transcribe_file(model, path, options, args.max_chunk_seconds)
        write(path, nbest, args, len(args.files) > 1)
        if args.trace is not None:
            write_trace(args.trace, options["trace"], path)
        return nbest[0]["labels"]

    return each_file(args, one)

