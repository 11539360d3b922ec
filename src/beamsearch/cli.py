"""The ``beamsearch`` command line: a thin layer over the library.

Exit status: 0 when everything asked for was done; 1 when some input got no date (each such input
gets an error line in place) or a checkpoint cannot be loaded; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import sys
from typing import Any, Iterator, NoReturn, Sequence

from beamsearch import Hypothesis, __version__, beam_search, greedy_decode
from beamsearch.distributed import HF_MAX_STEPS
from beamsearch.distributed import ZOO_MODELS as MODELS  # numpy only: torch is not imported here
from beamsearch.toy import HAND_EXAMPLE, RandomPrefixModel, TableModel

FASTEST_THREADS = 1  # torch threads: 1 was the fastest for translate and evaluate on a 2-core machine (README)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise _CliError(f"{self.prog}: error: {message}", 2)


class _Help(argparse.HelpFormatter):
    """Help with each option's default, where it has a value worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and not any(action.default is v for v in (None, True, False, argparse.SUPPRESS)):
            text += " (default: %(default)s)"
        return text


class _CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _row(name: str, h: Hypothesis) -> str:
    return f"{name:<10} {' '.join(map(str, h.tokens)):<18} {h.logprob:>9.4f} {h.score:>9.4f} {str(h.finished):>8}"


def demo(beam: int, max_len: int, seeds: int) -> int:
    """Greedy against beam search on seed 000's hand example and on small random models."""
    header = f"{'search':<10} {'tokens':<18} {'logprob':>9} {'score':>9} {'finished':>8}"
    model = TableModel(HAND_EXAMPLE, vocab=3)
    print("Seed 000 hand example (eos=0, a=1, b=2), max_len=2, length_penalty=0:")
    print(header)
    print(_row("greedy", greedy_decode(model.step, model.init_state(), 0, 0, 2)))
    print(_row("beam 2", beam_search(model.step, model.init_state(), 0, 0, 2, 2, 0.0)[0]))
    print(f"\nRandom prefix models (V=6, eos=0), max_len={max_len}, beam={beam}, length_penalty=0:")
    print(f"{'seed':<6} {'greedy logprob':>15} {'beam logprob':>13} {'beam wins':>10}")
    wins = 0
    for seed in range(seeds):
        m = RandomPrefixModel(seed=seed)
        g = greedy_decode(m.step, m.init_state(), 0, 0, max_len)
        b = beam_search(m.step, m.init_state(), 0, 0, beam, max_len, 0.0)
        best = max(b, key=lambda h: h.logprob)
        wins += best.logprob > g.logprob + 1e-12
        print(f"{seed:<6} {g.logprob:>15.4f} {best.logprob:>13.4f} {str(best.logprob > g.logprob + 1e-12):>10}")
    print(f"beam found a more likely output than greedy on {wins} of {seeds} models")
    try:
        from beamsearch.zoo.translator import CheckpointError, Translator
    except ImportError:
        print("\n(install the zoo extra, pip install -e '.[zoo]', to see the shipped dates model)")
        return 0
    try:
        translator = Translator.load("seq2seq")
    except CheckpointError as e:
        print(f"beamsearch: error: {e}", file=sys.stderr)
        return 1
    texts = ["march 3 '87", "03/03/87", "7 DEC '53", "june 14 '13", "3rd of March 1987"]
    print("\nThe shipped Seq2Seq dates model: a two-digit year is 18xx, 19xx or 20xx with probability "
          "0.3, 0.3, 0.4,\nso greedy commits to '1' (0.6) while the most likely date starts with '20':")
    print(f"{'source':<20} {'greedy':<12} {'logprob':>8}   {'beam 5':<12} {'logprob':>8}")
    for text, greedy_out, beam_out in zip(texts, translator.beam(texts, beam=1), translator.beam(texts, beam=5)):
        g, b = greedy_out[0], beam_out[0]
        print(f"{text:<20} {g.text:<12} {g.hypothesis.logprob:>8.4f}   {b.text:<12} {b.hypothesis.logprob:>8.4f}")
    return 0


def demo_command(args: argparse.Namespace) -> int:
    _positive(args, "--beam", "--max-len", "--models")
    return demo(args.beam, args.max_len, args.models)


def _positive(args: argparse.Namespace, *flags: str) -> None:
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value < 1:
            raise _CliError(f"beamsearch: error: {flag} must be >= 1; got {value}", 2)


def _texts(args: argparse.Namespace) -> list[str]:
    """The TEXT arguments, or stdin's lines (UTF-8, CRLF or LF; undecodable bytes become U+FFFD,
    which the model then refuses on that line alone)."""
    if args.text:
        return list(args.text)
    if sys.stdin.isatty():  # a user who typed the command alone: say what it waits for
        print("beamsearch translate: reading dates from stdin, one per line; end with Ctrl-D "
              "(or pass TEXT arguments; see --help)", file=sys.stderr)
    stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline=None)
    lines = [line.rstrip("\r\n") for line in stream]
    if not lines:
        raise _CliError("beamsearch: error: no text given (pass TEXT arguments or lines on stdin)", 2)
    return lines


def _load(args: argparse.Namespace) -> Any:
    """Set the torch threads, then load ``--model`` from ``--checkpoint`` (default: shipped)."""
    import torch

    from beamsearch.zoo.translator import CheckpointError, Translator

    _positive(args, "--threads")
    torch.set_num_threads(args.threads)
    try:
        return Translator.load(args.model, args.checkpoint)
    except CheckpointError as e:
        raise _CliError(f"beamsearch: error: {e}", 1) from None


def translate(args: argparse.Namespace) -> int:
    _positive(args, "--beam", "--n-best")
    if args.n_best > args.beam:
        raise _CliError(f"beamsearch: error: --n-best must be <= --beam={args.beam}; got {args.n_best}", 2)
    translator = _load(args)
    texts = _texts(args)
    if args.trace is not None:
        _write_trace(translator, texts, args)
    good = [t for t in texts if translator.problem(t) is None]
    decoded = iter(translator.decode(good, args.beam, args.n_best, args.alpha, calendar=args.calendar) if good else [])
    failed = 0
    for text in texts:
        outputs = next(decoded) if translator.problem(text) is None else None
        error = translator.verdict(text, outputs)
        failed += error is not None
        if args.json:
            candidates = [{"date": o.text or None, "logprob": o.hypothesis.logprob, "score": o.hypothesis.score,
                           "model_logprob": o.model_logprob} for o in outputs or []]
            print(json.dumps({"input": text, "date": None if error else outputs[0].text, "error": error,
                              "candidates": candidates}, ensure_ascii=False))
        elif error is not None:
            print(f"error: {error}")
        elif args.n_best == 1:
            print(outputs[0].text)
        else:
            print(text)
            for rank, o in enumerate(outputs, 1):
                h = o.hypothesis
                print(f"  {rank}\t{o.text or '(no date)'}\tlogprob {h.logprob:.4f}\tscore {h.score:.4f}")
    if failed:
        print(f"beamsearch: {failed} of {len(texts)} inputs got no date", file=sys.stderr)
    return 1 if failed else 0


def _write_page(path: str, page: str) -> None:
    """``--trace HTML``'s page written to ``path``; a one-line error when it cannot be."""
    try:
        pathlib.Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise _CliError(f"beamsearch: error: cannot write --trace {path}: {e.strerror}", 1) from None


def _write_trace(translator: Any, texts: list[str], args: argparse.Namespace) -> None:
    """``--trace HTML``: the search tree of the one text as an interactive page (greedy's path
    overlaid)."""
    from beamsearch.viz import to_html
    from beamsearch.zoo.dates import TARGET_VOCAB

    if len(texts) != 1:
        raise _CliError(f"beamsearch: error: --trace draws one search; got {len(texts)} texts", 2)
    if translator.problem(texts[0]) is not None:
        raise _CliError(f"beamsearch: error: {translator.verdict(texts[0], None)}", 1)
    tree, greedy, found = translator.trace(texts[0], args.beam, args.n_best, args.alpha, calendar=args.calendar)
    page = to_html(tree, vocab=TARGET_VOCAB.itos, greedy=greedy,
                   title=f"{texts[0]!r}: beam {args.beam} ({found[0] or 'no date'})")
    _write_page(args.trace, page)


def _beams(text: str) -> list[int]:
    try:
        beams = [int(b) for b in text.split(",")]
    except ValueError:
        raise _CliError(f"beamsearch: error: --beams must be integers separated by commas; got {text!r}", 2)
    if any(b < 1 for b in beams):
        raise _CliError(f"beamsearch: error: --beams must be >= 1; got {text!r}", 2)
    return beams


def evaluate(args: argparse.Namespace) -> int:
    from beamsearch.zoo.evaluate import evaluate_model

    beams = _beams(args.beams)
    _positive(args, "--limit")
    translator = _load(args)
    print(evaluate_model(translator, args.model, beams, alpha=args.alpha, limit=args.limit,
                         calendar=args.calendar, forms=args.forms))
    return 0


def train_command(args: argparse.Namespace) -> int:
    from beamsearch.zoo.train import train

    _positive(args, "--threads", "--train-size")
    if args.epochs is not None:
        _positive(args, "--epochs")
    if args.minutes is not None and not args.minutes > 0:
        raise _CliError(f"beamsearch: error: --minutes must be > 0; got {args.minutes}", 2)
    meta = train(args.model, args.out, seed=args.seed, epochs=args.epochs, minutes=args.minutes,
                 threads=args.threads, train_size=args.train_size, progress=sys.stderr.isatty())
    print(f"{args.model}: best valid loss {meta['valid_loss']:.4f} (greedy exact match "
          f"{meta['valid_exact_match']:.4f}) at epoch {meta['epoch']} of {meta['epochs_run']}, "
          f"{meta['minutes']} min; load it with --model {args.model} --checkpoint {args.out}")
    return 0


def _decode_model(args: argparse.Namespace) -> Any:
    """``--model``: what :func:`beamsearch.distributed.load_model` takes (a zoo name, a checkpoint
    folder, ``hf:DIR``, or the hidden test model ``_toy[:DELAY]``); a spec naming no model is a
    usage error (exit 2), files that cannot be read exit 1."""
    from beamsearch.distributed import ModelSpecError, load_model

    steps = _max_steps(args.max_steps)
    try:  # an hf: model's limit: an integer --max-steps, else HF_MAX_STEPS (what A*len+B is capped at)
        return load_model(args.model, calendar=args.calendar, threads=args.threads,
                          hf_max_steps=steps if isinstance(steps, int) else HF_MAX_STEPS)
    except ModelSpecError as e:
        raise _CliError(f"beamsearch: error: --{e}", 2) from None
    except OSError as e:
        raise _CliError(f"beamsearch: error: --model {args.model}: {e}", 1) from None
    except Exception as e:  # the zoo's CheckpointError (a message naming the file); torch is imported lazily
        if type(e).__name__ != "CheckpointError":
            raise
        raise _CliError(f"beamsearch: error: {e}", 1) from None


def decode_command(args: argparse.Namespace) -> int:
    """``beamsearch decode``; SIGINT (Ctrl-C) is one line and exit status 130."""
    try:
        return _decode(args)
    except KeyboardInterrupt:
        raise _CliError("beamsearch: interrupted", 130) from None


_DECODE_DEFAULTS = {"beam": 5, "n_best": 1, "alpha": 0.6, "length_penalty": None, "no_repeat_ngram": 0,
                    "min_new_tokens": 0}
"""decode's search flags without a value: a zoo or checkpoint model's defaults (length_penalty
None: decode_records' gnmt); an hf: model's come from its generation config."""

_GENERATION_KEYWORDS = {"beam": "beam_size", "n_best": "n_best", "alpha": "alpha", "length_penalty": "length_penalty",
                        "no_repeat_ngram": "no_repeat_ngram_size", "min_new_tokens": "min_new_tokens"}
"""decode's flags (as args names) -> the keywords of :func:`beamsearch.hf.search_settings`."""


def _search_defaults(args: argparse.Namespace) -> None:
    """Fill decode's search flags that were not given: for ``--model hf:DIR``, what the folder's
    saved generation config asks for, mapped as :func:`beamsearch.hf.generate` maps it (its
    ``max_new_tokens`` is the ``--max-steps`` default), with one line on stderr naming the
    settings it sets that decode does not apply; for other models, decode's own defaults."""
    defaults = dict(_DECODE_DEFAULTS)
    folder = pathlib.Path(args.model[3:]) if args.model.startswith("hf:") else None
    if folder is not None and folder.is_dir():
        from beamsearch import hf

        try:
            cfg = hf.saved_generation_config(folder)
            settings = hf.search_settings(cfg)
        except (ValueError, TypeError, OSError) as e:
            raise _CliError(f"beamsearch: error: --model {args.model}: its generation config: {e}", 2) from None
        defaults = {flag: settings[keyword] for flag, keyword in _GENERATION_KEYWORDS.items()}
        if (args.beam if args.beam is not None else settings["beam_size"]) == 1:
            defaults["alpha"] = 0.0  # generate's greedy has no length penalty
        if args.max_steps is None and settings["max_new_tokens"] is not None:
            args.max_steps = str(settings["max_new_tokens"])
        other = hf.other_settings(cfg)
        if other:
            shown = ", ".join(f"{k}={v!r}" for k, v in other.items())
            print(f"beamsearch: note: the generation config of {args.model} sets {shown}, which decode does not "
                  "apply", file=sys.stderr)
    if args.mode == "greedy":
        for flag in ("beam", "n_best"):
            if getattr(args, flag) not in (None, 1):
                raise _CliError(f"beamsearch: error: --{flag.replace('_', '-')} does not apply to --mode greedy "
                                f"(one output per line); got {getattr(args, flag)}", 2)
        defaults.update(beam=1, alpha=0.0)
    for flag, value in defaults.items():
        if getattr(args, flag) is None:
            setattr(args, flag, value)
    if folder is not None and args.mode == "beam" and args.beam == 1:
        args.mode = "greedy"  # as generate decodes num_beams=1


def _decode(args: argparse.Namespace) -> int:
    from beamsearch import corpus

    _search_defaults(args)
    _positive(args, "--beam", "--n-best", "--max-rows", "--threads")
    max_steps = _max_steps(args.max_steps)
    rows = args.k if args.mode == "stochastic" and args.k is not None else args.beam
    if args.mode == "exact":
        rows = max(args.beam, args.n_best)  # the seed search's rows per line
    if args.mode not in ("stochastic", "exact", "greedy") and args.n_best > args.beam:
        raise _CliError(f"beamsearch: error: --n-best must be <= --beam={args.beam}; got {args.n_best}", 2)
    if args.max_rows < rows:
        what = {"stochastic": f"--k={args.k}", "exact": f"max(--beam, --n-best)={rows}"}.get(args.mode,
                                                                                         f"--beam={args.beam}")
        raise _CliError(f"beamsearch: error: --max-rows must be >= {what}; got {args.max_rows}", 2)
    if args.max_tokens is not None:
        _positive(args, "--max-tokens")
    if args.resume and args.output == "-":
        raise _CliError("beamsearch: error: --resume needs an --output file", 2)
    if args.trace is not None and args.input == "-":
        raise _CliError("beamsearch: error: --trace needs an --input file (the traced line is read again)", 2)
    if args.trace is not None and args.mode != "beam":
        raise _CliError(f"beamsearch: error: --trace draws a beam search; got --mode {args.mode}", 2)
    if args.trace_input < 0:
        raise _CliError(f"beamsearch: error: --trace-input must be >= 0; got {args.trace_input}", 2)
    search = {"mode": args.mode, "beam": args.beam, "n_best": args.n_best, "alpha": args.alpha,
              "max_steps": max_steps, "max_rows": args.max_rows, "max_tokens": args.max_tokens,
              "no_repeat_ngram": args.no_repeat_ngram,
              "min_new_tokens": args.min_new_tokens, "stop_sequences": args.stop_sequence, "groups": args.groups,
              "diversity_penalty": args.diversity_penalty, "k": args.k, "seed": args.seed,
              "token_logprobs": args.token_logprobs, "temperature": args.temperature, "top_k": args.top_k,
              "constraints": args.constraint, "ordered": args.ordered_constraints, "node_budget": args.node_budget}
    if args.length_penalty is not None:
        search["length_penalty"] = args.length_penalty
    if args.mode == "stochastic":
        del search["alpha"]
    _check_decode_files(args)
    if args.ray is not None:
        return _decode_on_ray(args, search)
    model = _decode_model(args)
    if isinstance(max_steps, int) and not 1 <= max_steps <= model.max_steps:
        raise _CliError(f"beamsearch: error: --max-steps must be in [1, {model.max_steps}] (the model's limit); "
                        f"got {max_steps}", 2)
    try:  # the options, checked before any input is read or model call made
        next(corpus.decode_records(model, [], **search), None)
    except (ValueError, TypeError) as e:
        raise _CliError(f"beamsearch: error: {_flag_names(str(e))}", 2) from None
    page = _decode_trace(model, args, max_steps) if args.trace is not None else None  # before decoding
    try:
        source = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    except OSError as e:
        raise _CliError(f"beamsearch: error: cannot read --input {args.input}: {e.strerror}", 2) from None
    with source:
        progress = None
        if args.progress or sys.stderr.isatty():
            total = None if args.input == "-" else _count_lines(args.input)
            progress = corpus.Progress(total, sys.stderr)
        lines = corpus.read_lines(source, jsonl=args.jsonl, field=args.field)
        records, failed = _decode_lines(model, lines, args, progress, search)
    if page is not None:
        _write_page(args.trace, page)
    if failed:
        print(f"beamsearch: {failed} of {records} lines failed (see their error field)", file=sys.stderr)
    return 1 if failed else 0


def _decode_lines(model: Any, lines: Any, args: argparse.Namespace, progress: Any,
                  search: dict[str, Any]) -> tuple[int, int]:
    """:func:`beamsearch.corpus.decode_corpus` to ``--output``: a refusal (the output's lock held,
    a side file without --resume, a resume of other options or another input) exits 2, SIGINT
    130, each with one line."""
    from beamsearch import corpus

    try:
        return corpus.decode_corpus(model, lines, args.output, resume=args.resume, progress=progress,
                                    identity=_decode_identity(args), **search)
    except corpus.OutputError as e:
        raise _CliError(f"beamsearch: error: {_flag_names(str(e), _FILE_FLAGS)}", 2) from None
    except corpus.Interrupted as e:
        kept = (f"{e.records} records kept in {e.path}; rerun with --resume to continue" if e.path is not None
                else f"{e.records} records written to stdout")
        raise _CliError(f"beamsearch: interrupted; {kept}", 130) from None


@contextlib.contextmanager
def _output_locked(output: str) -> Iterator[None]:
    """Hold ``output``'s lock (not for stdout); another run holding it exits 2."""
    from beamsearch import corpus

    with contextlib.ExitStack() as stack:
        if output != "-":
            try:
                stack.enter_context(corpus.output_lock(output))
            except corpus.OutputError as e:
                raise _CliError(f"beamsearch: error: {_flag_names(str(e), _FILE_FLAGS)}", 2) from None
        yield


def _check_decode_files(args: argparse.Namespace) -> None:
    """Before anything is loaded or decoded: ``--output`` (and ``--trace``) name files in folders
    that exist, and none of the files decode writes (OUTPUT, OUTPUT.partial, .lock, .tmp, the
    trace page) is the ``--input`` file, also through a symbolic or hard link. Exit 2."""
    from beamsearch import corpus

    written: list[tuple[str, str]] = []  # (flag, path)
    if args.output != "-":
        try:
            corpus.check_output(args.output)
        except corpus.OutputError as e:
            raise _CliError(f"beamsearch: error: {_flag_names(str(e), _FILE_FLAGS)}", 2) from None
        written += [("--output", args.output)] + [("--output", str(corpus.sibling(args.output, end)))
                                                   for end in (".partial", ".lock", ".tmp")]
    if args.trace is not None:
        folder = pathlib.Path(args.trace).parent
        if pathlib.Path(args.trace).is_dir() or not folder.is_dir():
            why = "is a folder" if folder.is_dir() else f"is in a folder that does not exist ({folder})"
            raise _CliError(f"beamsearch: error: --trace {args.trace!r} {why}; name a file", 2)
        written.append(("--trace", args.trace))
    if args.input == "-" or not os.path.exists(args.input):
        return
    for flag, path in written:
        if os.path.exists(path) and os.path.samefile(args.input, path):
            named = args.output if flag == "--output" else path
            raise _CliError(f"beamsearch: error: {flag} {named!r}: {path!r} is the --input file {args.input!r} "
                            "(the same file, or a link to it); decode would overwrite its input", 2)


def _decode_identity(args: argparse.Namespace) -> dict[str, Any]:
    """What decode's records depend on besides the search options (the side file holds it, and
    --resume compares it): the model (its spec, and a folder's files by name, size and content),
    how the input is read, the calendar constraint."""
    spec = args.model
    folder = pathlib.Path(spec[3:] if spec.startswith("hf:") else spec)
    files = _folder_files(folder) if folder.is_dir() else []
    return {"--model": spec, "--model files": files, "--jsonl": args.jsonl, "--field": args.field,
            "--no-calendar": not args.calendar}


def _folder_files(folder: pathlib.Path, end: int = 1 << 20) -> list[list[Any]]:
    """``[name, size, SHA-256 of its first and last ``end`` bytes]`` per file of ``folder`` (cheap for
    any model size, and it changes when weights are retrained or replaced)."""
    import hashlib

    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        size = path.stat().st_size
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            digest.update(f.read(end))
            if size > end:
                f.seek(max(end, size - end))
                digest.update(f.read(end))
        out.append([path.name, size, digest.hexdigest()])
    return out


_FLAGS = {"no_repeat_ngram_size": "--no-repeat-ngram", "min_new_tokens": "--min-new-tokens",
          "stop_sequences": "--stop-sequence", "diversity_penalty": "--diversity-penalty", "num_groups": "--groups",
          "groups": "--groups", "max_steps": "--max-steps", "n_best": "--n-best", "beam_size": "--beam",
          "seed": "--seed", "alpha": "--alpha", "k": "--k", "length_penalty": "--length-penalty",
          "temperature": "--temperature", "top_k": "--top-k", "constraints": "--constraint",
          "ordered": "--ordered-constraints", "node_budget": "--node-budget", "seed_beam": "--beam",
          "token_logprobs": "--token-logprobs", "max_tokens": "--max-tokens"}


_FILE_FLAGS = {**_FLAGS, "output": "--output", "resume": "--resume", "beam": "--beam", "mode": "--mode",
               "no_repeat_ngram": "--no-repeat-ngram"}
"""The flags of decode_corpus's own messages (OutputError: they name ``output`` and ``resume`` and
the options by decode_records' keywords, never as plain words)."""


def _flag_names(message: str, flags: dict[str, str] = _FLAGS) -> str:
    """A library message about a keyword, with the keyword as its command-line flag."""
    import re

    return re.sub(r"(?<![-\w'])(" + "|".join(sorted(flags, key=len, reverse=True)) + r")\b(?=[ =:,;]|$)",
                  lambda m: flags[m.group(1)], message)


def _max_steps(text: str | None) -> Any:
    """``--max-steps``: None, an int, or a :class:`beamsearch.corpus.LengthRule` (``A*len+B``)."""
    from beamsearch.corpus import LengthRule

    if text is None:
        return None
    try:
        return LengthRule.parse(text)
    except ValueError:
        raise _CliError(f"beamsearch: error: --max-steps must be an integer or A*len+B (e.g. 2*len+10); "
                        f"got {text!r}", 2) from None


def _decode_on_ray(args: argparse.Namespace, search: dict[str, Any]) -> int:
    """``--ray [ADDRESS]``: the input decoded by :func:`beamsearch.distributed.decode_ray` (which
    checks the model and ``search`` before Ray starts); the output written once, at the end,
    its lock held for the run."""
    from beamsearch import corpus

    _positive(args, "--ray-workers", "--ray-batch")
    for flag, given in (("--resume", args.resume), ("--trace", args.trace is not None)):
        if given:
            raise _CliError(f"beamsearch: error: {flag} does not apply with --ray", 2)
    try:
        source = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    except OSError as e:
        raise _CliError(f"beamsearch: error: cannot read --input {args.input}: {e.strerror}", 2) from None
    with source, _output_locked(args.output):
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
        raise _CliError(f"beamsearch: error: {_flag_names(str(e))}", 2) from None
    total, failed = distributed.write_records(records, args.output)
    if failed:
        print(f"beamsearch: {failed} of {total} lines failed (see their error field)", file=sys.stderr)
    return 1 if failed else 0


def _decode_trace(model: Any, args: argparse.Namespace, max_steps: Any) -> str:
    """``--trace HTML``: the page of the search tree of the line of index ``--trace-input`` (read
    from the file here, before decoding; a line that is missing or cannot be decoded exits 2)."""
    from beamsearch import corpus
    from beamsearch.viz import to_html

    index = args.trace_input
    with open(args.input, "rb") as source:
        line = next((x for x in corpus.read_lines(source, jsonl=args.jsonl, field=args.field) if x.index == index),
                    None)
    if line is None:
        lines = _count_lines(args.input)
        which = f" (indices 0 to {lines - 1})" if lines else ""
        raise _CliError(f"beamsearch: error: --trace-input {index}: the input has {lines} lines{which}", 2)
    try:
        if line.error is not None:
            raise ValueError(line.error)
        steps = corpus.line_max_steps(model, line, max_steps)
        if isinstance(steps, str):
            raise ValueError(steps)
        tree, greedy = corpus.trace_line(model, line.text, beam=args.beam, n_best=args.n_best, alpha=args.alpha,
                                         length_penalty=args.length_penalty or "gnmt", max_steps=steps,
                                         no_repeat_ngram=args.no_repeat_ngram, min_new_tokens=args.min_new_tokens,
                                         temperature=args.temperature, top_k=args.top_k,
                                         stop_sequences=args.stop_sequence)
    except ValueError as e:
        raise _CliError(f"beamsearch: error: --trace-input {index}: line {index + 1}: {e}", 2) from None
    name = corpus.line_name(index)
    return to_html(tree, vocab=corpus.TokenLabels(model), greedy=greedy, labels=[name],
                   title=f"{name}: {line.text[:60]!r}, beam {args.beam}")


def _count_lines(path: str) -> int:
    """Lines of a file (a last line without a newline counts), read in blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _parser() -> _Parser:
    fmt = _Help
    parser = _Parser(prog="beamsearch", formatter_class=fmt,
                     description="Beam search decoding of step-function models, and a dates-to-ISO-8601 "
                                 "translator built on it.",
                     epilog="Exit status: 0 done; 1 some input got no date, or a checkpoint cannot be loaded; "
                            "2 usage error.")
    parser.add_argument("--version", action="version", version=f"beamsearch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    p = sub.add_parser("demo", help="greedy against beam search on toy models and the shipped dates model",
                       formatter_class=fmt)
    p.add_argument("--beam", type=int, default=4, help="beam size for the random models")
    p.add_argument("--max-len", type=int, default=5, help="most tokens generated per random model")
    p.add_argument("--models", type=int, default=8, help="how many random models")

    def model_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", choices=MODELS, default="seq2seq", help="which model")
        p.add_argument("--checkpoint", metavar="DIR", default=None,
                       help="folder holding MODEL.safetensors and MODEL.json, as `train --out DIR` writes it "
                            "(default: the shipped checkpoints)")
        p.add_argument("--alpha", type=float, default=0.6, help="GNMT length-penalty strength")
        p.add_argument("--no-calendar", dest="calendar", action="store_false",
                       help="do not constrain the search to real calendar dates (it is on by default; an "
                            "impossible date is still never printed: it becomes an error line)")
        p.add_argument("--threads", type=int, default=FASTEST_THREADS, help="torch threads")

    p = sub.add_parser("translate", help="dates to ISO 8601 (YYYY-MM-DD) with a zoo model", formatter_class=fmt,
                       description="One output line per input: the date, or 'error: ...' in its place "
                                   "(exit status 1 if any). The models read years 1800-2099: a text whose "
                                   "year is outside them gets an error line saying so, and a date is printed "
                                   "only when its year is the one the text writes (a two-digit year: its last "
                                   "two digits), never another year.")
    model_options(p)
    p.add_argument("--beam", type=int, default=5, help="beam size (1: greedy)")
    p.add_argument("--n-best", type=int, default=1, help="outputs per input, with logprob and score")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per input: input, date (null on error), error, candidates")
    p.add_argument("--trace", metavar="HTML", default=None,
                   help="also write the search tree of the one TEXT as an interactive page (greedy's path "
                        "overlaid; opens offline in a browser)")
    p.add_argument("text", nargs="*", help="dates to translate (default: the lines of stdin; on a terminal it "
                                           "says so and reads until Ctrl-D)")
    p = sub.add_parser("evaluate", help="greedy against beam search on the fixed test set", formatter_class=fmt)
    model_options(p)
    p.add_argument("--beams", default="1,5,10", help="comma-separated beam sizes; 1 is greedy")
    p.add_argument("--limit", type=int, default=2000, help="the first LIMIT test examples")
    p.add_argument("--forms", action="store_true", help="also exact match per form of writing, per beam size")
    p = sub.add_parser("train", help="train a dates model (CPU)", formatter_class=fmt,
                       description="Writes OUT/MODEL.safetensors and OUT/MODEL.json; deterministic given --seed "
                                   "and --threads unless --minutes is given.")
    p.add_argument("--model", choices=MODELS, default="seq2seq", help="which model")
    p.add_argument("--out", metavar="DIR", default="checkpoints", help="folder to write the checkpoint to")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the batch order")
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs to train (default without --minutes: seq2seq 10, transformer 7)")
    p.add_argument("--minutes", type=float, default=None,
                   help="stop after this much training time; the learning-rate schedule is sized to it")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the weights depend on it)")
    p.add_argument("--train-size", type=int, default=40_000, help="training examples")
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
                        "max_new_tokens or --max-steps N)")
    p.add_argument("--input", required=True, metavar="FILE", help="input lines (UTF-8, LF or CRLF); - for stdin")
    p.add_argument("--output", required=True, metavar="FILE", help="JSON Lines output; - for stdout")
    p.add_argument("--jsonl", action="store_true",
                   help="the input is JSON Lines: the text in --field, optional per-line max_steps, prefix and constraints")
    p.add_argument("--field", default="text", help="the JSON field holding the text (with --jsonl)")
    hf_default = "hf: its generation config's"
    p.add_argument("--beam", type=int, default=None,
                   help=f"beam size (default 5; {hf_default} num_beams, transformers' default 1)")
    p.add_argument("--n-best", type=int, default=None,
                   help=f"outputs per input (default 1; {hf_default} num_return_sequences)")
    p.add_argument("--alpha", type=float, default=None,
                   help=f"length-penalty strength (default 0.6; {hf_default} length_penalty, transformers' "
                        "default 1.0; 0 with num_beams 1)")
    p.add_argument("--length-penalty", choices=("gnmt", "power"), default=None,
                   help="gnmt: ((5 + len) / 6) ** alpha (default); power: len ** alpha (hf: default, as generate)")
    p.add_argument("--max-steps", default=None, metavar="N|A*len+B",
                   help="most tokens per output: N, or per line from its source length (characters; tokens for "
                        "hf:), e.g. 2*len+10, capped at the model's limit (default: the model's limit; hf: its "
                        f"generation config's max_new_tokens, else {HF_MAX_STEPS})")
    p.add_argument("--max-rows", type=int, default=320, help="most rows (hypotheses) per model call")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="most decoder tokens the rows of one model call may hold, padding included: lines join "
                        "when (rows in flight + theirs) x (the widest prompt + max steps among them) fits; a line "
                        "whose own rows need more gets an error record")
    p.add_argument("--mode", choices=("beam", "greedy", "constrained", "diverse", "stochastic", "exact"),
                   default="beam",
                   help="beam search (an hf: model with --beam 1, or num_beams 1 in its generation config, decodes "
                        "greedily, as generate does); greedy decoding (one row per line); constrained beam search "
                        "(--constraint, or each JSON line's constraints); "
                        "diverse beam search (--groups, --diversity-penalty); stochastic beam search (--k samples "
                        "per line without replacement, --seed); exact search (the --n-best highest-scoring outputs "
                        "by branch and bound, seeded by a beam of --beam, --node-budget; records add proven and "
                        "expanded)")
    p.add_argument("--node-budget", type=int, default=None, metavar="N",
                   help="exact: the most rows of one line passed to the model, the seed beam's and the branch "
                        "and bound's together (default 100000): the record's expanded is never more; beyond it "
                        "the best found, proven false")
    p.add_argument("--constraint", action="append", default=[], metavar="TEXT",
                   help="constrained: every output contains TEXT (as target tokens); repeatable; a JSON line's "
                        "own constraints (a list of texts, or of lists of texts for alternatives) replace these")
    p.add_argument("--ordered-constraints", action="store_true",
                   help="constrained: the constraints appear in the given order")
    p.add_argument("--groups", type=int, default=None, help="diverse: groups (divides --beam)")
    p.add_argument("--diversity-penalty", type=float, default=None, help="diverse: Hamming diversity penalty")
    p.add_argument("--k", type=int, default=None, help="stochastic: samples per line")
    p.add_argument("--seed", type=int, default=None, help="stochastic: the seed (line i gets the noise of "
                                                          "input i of one search over all lines)")
    p.add_argument("--no-repeat-ngram", type=int, default=None, metavar="N",
                   help=f"no n-gram of N tokens twice in an output (0: off; the default, {hf_default} "
                        "no_repeat_ngram_size)")
    p.add_argument("--min-new-tokens", type=int, default=None, metavar="M",
                   help=f"no end token before M tokens (default 0; {hf_default} min_new_tokens)")
    p.add_argument("--temperature", type=float, default=1.0, metavar="T", help="logits divided by T before scoring")
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="only each row's K best tokens extend it")
    p.add_argument("--stop-sequence", action="append", default=[], metavar="TEXT",
                   help="an output ending with TEXT (as target tokens) is finished, as with the end token; "
                        "repeatable")
    p.add_argument("--token-logprobs", action="store_true", help="each output also has token_logprobs")
    p.add_argument("--no-calendar", dest="calendar", action="store_false",
                   help="do not constrain zoo dates models to real calendar dates")
    p.add_argument("--threads", type=int, default=FASTEST_THREADS, help="torch threads")
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run: skip the inputs already in OUTPUT.partial (refused, before "
                        "anything is written, when it was written with other options or for another input)")
    p.add_argument("--progress", action="store_true",
                   help="progress on stderr (inputs/s, tokens/s, ETA); on by default when stderr is a terminal")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help()
        return 2
    commands = {"demo": demo_command, "translate": translate, "evaluate": evaluate, "train": train_command,
                "decode": decode_command}
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise _CliError("beamsearch: error: a command is required (one of demo, translate, evaluate, "
                            "train, decode; see beamsearch --help)", 2)
        return commands[args.command](args)
    except SystemExit as e:  # --help and --version
        return int(e.code or 0)
    except ImportError as e:
        print(f"beamsearch: error: {e.name or e} is not installed: pip install 'beamsearch[zoo]'", file=sys.stderr)
        return 2
    except _CliError as e:
        print(str(e), file=sys.stderr)
        return e.code
    except (ValueError, TypeError, OSError) as e:
        print(f"beamsearch: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, (ValueError, TypeError)) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
