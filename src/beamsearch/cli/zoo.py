"""The zoo's commands: ``demo``, ``translate``, ``evaluate`` and ``train`` (the dates translator)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

from beamsearch import Hypothesis, beam_search, greedy_decode
from beamsearch.cli.common import FASTEST_THREADS, CliError, positive, write_page
from beamsearch.cli.options import add_control_flags
from beamsearch.corpus.load import ZOO_MODELS as MODELS  # numpy only: torch is not imported here
from beamsearch.toy import HAND_EXAMPLE, RandomPrefixModel, TableModel


def _row(name: str, h: Hypothesis) -> str:
    return f"{name:<10} {' '.join(map(str, h.tokens)):<18} {h.logprob:>9.4f} {h.score:>9.4f} {str(h.finished):>8}"


def demo(beam_size: int, max_len: int, seeds: int) -> int:
    """Greedy against beam search on seed 000's hand example and on small random models."""
    header = f"{'search':<10} {'tokens':<18} {'logprob':>9} {'score':>9} {'finished':>8}"
    model = TableModel(HAND_EXAMPLE, vocab=3)
    print("Seed 000 hand example (eos=0, a=1, b=2), max_len=2, length_penalty=0:")
    print(header)
    print(_row("greedy", greedy_decode(model.step, model.init_state(), 0, 0, 2)))
    print(_row("beam 2", beam_search(model.step, model.init_state(), 0, 0, 2, 2, 0.0)[0]))
    print(f"\nRandom prefix models (V=6, eos=0), max_len={max_len}, beam={beam_size}, length_penalty=0:")
    print(f"{'seed':<6} {'greedy logprob':>15} {'beam logprob':>13} {'beam wins':>10}")
    wins = 0
    for seed in range(seeds):
        m = RandomPrefixModel(seed=seed)
        g = greedy_decode(m.step, m.init_state(), 0, 0, max_len)
        b = beam_search(m.step, m.init_state(), 0, 0, beam_size, max_len, 0.0)
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
    greedy_outs, beam_outs = translator.beam(texts, beam_size=1), translator.beam(texts, beam_size=5)
    for text, greedy_out, beam_out in zip(texts, greedy_outs, beam_outs, strict=True):
        first, top = greedy_out[0], beam_out[0]
        print(f"{text:<20} {first.text:<12} {first.hypothesis.logprob:>8.4f}   {top.text:<12} "
              f"{top.hypothesis.logprob:>8.4f}")
    return 0


def demo_command(args: argparse.Namespace) -> int:
    positive(args, "--beam-size", "--max-len", "--models")
    return demo(args.beam_size, args.max_len, args.models)


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
        raise CliError("beamsearch: error: no text given (pass TEXT arguments or lines on stdin)", 2)
    return lines


def _load(args: argparse.Namespace) -> Any:
    """Set the torch threads, then load ``--model`` from ``--checkpoint`` (default: shipped)."""
    import torch

    from beamsearch.zoo.translator import CheckpointError, Translator

    positive(args, "--threads")
    torch.set_num_threads(args.threads)
    try:
        return Translator.load(args.model, args.checkpoint)
    except CheckpointError as e:
        raise CliError(f"beamsearch: error: {e}", 1) from None


def translate(args: argparse.Namespace) -> int:
    positive(args, "--beam-size", "--n-best")
    if args.n_best > args.beam_size:
        raise CliError(f"beamsearch: error: --n-best must be <= --beam-size={args.beam_size}; got {args.n_best}", 2)
    translator = _load(args)
    texts = _texts(args)
    if args.trace is not None:
        _write_trace(translator, texts, args)
    good = [t for t in texts if translator.problem(t) is None]
    decoded = iter(translator.decode(good, args.beam_size, args.n_best, args.alpha, calendar=args.calendar)
                   if good else [])
    found = [next(decoded) if translator.problem(text) is None else None for text in texts]
    failed = 0
    for text, outputs, error in zip(texts, found, translator.verdicts(texts, found), strict=True):
        failed += error is not None
        outputs = outputs or []  # None: the text was not decoded (its error says why)
        if args.json:
            candidates = [{"date": o.text or None, "logprob": o.hypothesis.logprob, "score": o.hypothesis.score,
                           "model_logprob": o.model_logprob} for o in outputs]
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


def _write_trace(translator: Any, texts: list[str], args: argparse.Namespace) -> None:
    """``--trace HTML``: the search tree of the one text as an interactive page (greedy's path
    overlaid)."""
    from beamsearch.viz import to_html
    from beamsearch.zoo.dates import TARGET_VOCAB

    if len(texts) != 1:
        raise CliError(f"beamsearch: error: --trace draws one search; got {len(texts)} texts", 2)
    if translator.problem(texts[0]) is not None:
        raise CliError(f"beamsearch: error: {translator.verdict(texts[0], None)}", 1)
    tree, greedy, found = translator.trace(texts[0], args.beam_size, args.n_best, args.alpha, calendar=args.calendar)
    page = to_html(tree, vocab=TARGET_VOCAB.itos, greedy=greedy,
                   title=f"{texts[0]!r}: beam {args.beam_size} ({found[0] or 'no date'})")
    write_page(args.trace, page)


def _beams(text: str) -> list[int]:
    try:
        beams = [int(b) for b in text.split(",")]
    except ValueError:
        raise CliError(f"beamsearch: error: --beams must be integers separated by commas; got {text!r}", 2) from None
    if any(b < 1 for b in beams):
        raise CliError(f"beamsearch: error: --beams must be >= 1; got {text!r}", 2)
    return beams


def evaluate(args: argparse.Namespace) -> int:
    from beamsearch.zoo.evaluate import evaluate_model

    beams = _beams(args.beams)
    positive(args, "--limit")
    translator = _load(args)
    print(evaluate_model(translator, args.model, beams, alpha=args.alpha, limit=args.limit,
                         calendar=args.calendar, forms=args.forms))
    return 0


def train_command(args: argparse.Namespace) -> int:
    from beamsearch.zoo.train import train

    positive(args, "--threads", "--train-size")
    if args.epochs is not None:
        positive(args, "--epochs")
    if args.minutes is not None and not args.minutes > 0:
        raise CliError(f"beamsearch: error: --minutes must be > 0; got {args.minutes}", 2)
    meta = train(args.model, args.out, seed=args.seed, epochs=args.epochs, minutes=args.minutes,
                 threads=args.threads, train_size=args.train_size, progress=sys.stderr.isatty())
    print(f"{args.model}: best valid loss {meta['valid_loss']:.4f} (greedy exact match "
          f"{meta['valid_exact_match']:.4f}) at epoch {meta['epoch']} of {meta['epochs_run']}, "
          f"{meta['minutes']} min; load it with --model {args.model} --checkpoint {args.out}")
    return 0


def add_commands(sub: Any, fmt: type) -> None:
    """The zoo's subcommands, on the subparsers ``sub``."""
    p = sub.add_parser("demo", help="greedy against beam search on toy models and the shipped dates model",
                       formatter_class=fmt)
    add_control_flags(p, ("beam_size",), beam_size=4)  # the random models' beam
    p.add_argument("--max-len", type=int, default=5, help="most tokens generated per random model")
    p.add_argument("--models", type=int, default=8, help="how many random models")

    def model_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", choices=MODELS, default="seq2seq", help="which model")
        p.add_argument("--checkpoint", metavar="DIR", default=None,
                       help="folder holding MODEL.safetensors and MODEL.json, as `train --out DIR` writes it "
                            "(default: the shipped checkpoints)")
        add_control_flags(p, ("alpha",))  # the models' length penalty is GNMT's
        p.add_argument("--no-calendar", dest="calendar", action="store_false",
                       help="do not constrain the search to real calendar dates (it is on by default; an "
                            "impossible date is still never printed: it becomes an error line)")
        p.add_argument("--threads", type=int, default=FASTEST_THREADS, help="torch threads")

    p = sub.add_parser("translate", help="dates to ISO 8601 (YYYY-MM-DD) with a zoo model", formatter_class=fmt,
                       description="One output line per input: the date, or 'error: ...' in its place "
                                   "(exit status 1 if any). The models read years 1800-2099: a text whose "
                                   "year is outside them gets an error line saying so, and a date is printed "
                                   "only when its year is the one the text writes (a two-digit year: its last "
                                   "two digits), never another year. A two-digit year whose century the model "
                                   "cannot tell (another century's reading within 0.05 in log-probability) gets "
                                   "an error line naming the readings.")
    model_options(p)
    add_control_flags(p, ("beam_size", "n_best"))  # beam 1: greedy
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
