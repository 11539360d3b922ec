"""The ``beamsearch`` command line: a thin layer over the library."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from beamsearch import Hypothesis, beam_search, greedy_decode
from beamsearch.toy import HAND_EXAMPLE, RandomPrefixModel, TableModel


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise _CliError(f"{self.prog}: error: {message}", 2)


class _CliError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _row(name: str, h: Hypothesis) -> str:
    return f"{name:<10} {' '.join(map(str, h.tokens)):<18} {h.logprob:>9.4f} {h.score:>9.4f} {str(h.finished):>8}"


def demo(beam: int, max_len: int, seeds: int) -> None:
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
        from beamsearch.zoo.translator import Translator

        translator = Translator.load("seq2seq")
    except (ImportError, FileNotFoundError):
        print("\n(install the zoo extra, pip install -e '.[zoo]', to see the shipped dates model)")
        return
    texts = ["march 3 '87", "03/03/87", "7 DEC '53", "june 14 '13", "3rd of March 1987"]
    print("\nThe shipped Seq2Seq dates model: a two-digit year is 18xx, 19xx or 20xx with probability "
          "0.3, 0.3, 0.4,\nso greedy commits to '1' (0.6) while the most likely date starts with '20':")
    print(f"{'source':<20} {'greedy':<12} {'logprob':>8}   {'beam 5':<12} {'logprob':>8}")
    for text, greedy_out, beam_out in zip(texts, translator.greedy(texts), translator.beam(texts, beam=5)):
        top = beam_out[0]
        print(f"{text:<20} {greedy_out.text:<12} {greedy_out.hypothesis.logprob:>8.4f}   "
              f"{top.text:<12} {top.hypothesis.logprob:>8.4f}")


def demo_command(args: argparse.Namespace) -> None:
    _positive(args, "--beam", "--max-len", "--models")
    demo(args.beam, args.max_len, args.models)


def _positive(args: argparse.Namespace, *flags: str) -> None:
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value < 1:
            raise _CliError(f"beamsearch: error: {flag} must be >= 1; got {value}", 2)


def _texts(args: argparse.Namespace) -> list[str]:
    if args.text:
        return list(args.text)
    lines = [line.rstrip("\n") for line in sys.stdin]
    if not lines:
        raise _CliError("beamsearch: error: no text given (pass TEXT arguments or lines on stdin)", 2)
    return lines


def translate(args: argparse.Namespace) -> None:
    from beamsearch.zoo.translator import Translator

    _positive(args, "--beam", "--n-best")
    if args.n_best > args.beam:
        raise _CliError(f"beamsearch: error: --n-best must be <= --beam={args.beam}; got {args.n_best}", 2)
    translator = Translator.load(args.model)
    texts = _texts(args)
    for text, outputs in zip(texts, translator.decode(texts, args.beam, args.n_best, args.alpha)):
        if args.n_best == 1:
            print(outputs[0].text if outputs else "")
            continue
        print(text)
        for rank, o in enumerate(outputs, 1):
            h = o.hypothesis
            print(f"  {rank}\t{o.text}\tlogprob {h.logprob:.4f}\tscore {h.score:.4f}")


def evaluate(args: argparse.Namespace) -> None:
    from beamsearch.zoo.evaluate import evaluate_model

    try:
        beams = [int(b) for b in args.beams.split(",")]
    except ValueError:
        raise _CliError(f"beamsearch: error: --beams must be integers separated by commas; got {args.beams!r}", 2)
    if any(b < 1 for b in beams):
        raise _CliError(f"beamsearch: error: --beams must be >= 1; got {args.beams!r}", 2)
    _positive(args, "--limit")
    print(evaluate_model(args.model, beams, alpha=args.alpha, limit=args.limit))


def train_command(args: argparse.Namespace) -> None:
    from beamsearch.zoo.train import train

    _positive(args, "--threads")
    if args.epochs is not None:
        _positive(args, "--epochs")
    meta = train(args.model, args.out, seed=args.seed, epochs=args.epochs, minutes=args.minutes, threads=args.threads)
    print(f"{args.model}: best valid loss {meta['valid_loss']:.4f} (greedy exact match "
          f"{meta['valid_exact_match']:.4f}) at epoch {meta['epoch']}, written to {args.out}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="beamsearch", description="Beam search decoding of step-function models.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="greedy against beam search on toy models")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-len", type=int, default=5)
    p.add_argument("--models", type=int, default=8)
    models = ("seq2seq", "transformer")
    p = sub.add_parser("translate", help="dates to ISO 8601 with a shipped model")
    p.add_argument("--model", choices=models, default="seq2seq")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--n-best", type=int, default=1)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("text", nargs="*", help="dates to translate (default: lines on stdin)")
    p = sub.add_parser("evaluate", help="greedy against beam search on the fixed test set")
    p.add_argument("--model", choices=models, default="seq2seq")
    p.add_argument("--beams", default="1,5,10", help="comma-separated beam sizes; 1 is greedy")
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--limit", type=int, default=2000, help="the first LIMIT test examples")
    p = sub.add_parser("train", help="train a dates model (CPU, deterministic given --seed)")
    p.add_argument("--model", choices=models, default="seq2seq")
    p.add_argument("--out", default="checkpoints")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None, help="default: about 13 minutes' worth on one core")
    p.add_argument("--minutes", type=float, default=14.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (results depend on it)")
    commands = {"demo": demo_command, "translate": translate, "evaluate": evaluate, "train": train_command}
    try:
        args = parser.parse_args(argv)
        commands[args.command](args)
        return 0
    except ImportError as e:
        print(f"beamsearch: error: {e.name or e} is not installed: pip install 'beamsearch[zoo]'", file=sys.stderr)
        return 2
    except _CliError as e:
        print(str(e), file=sys.stderr)
        return e.code
    except (ValueError, TypeError) as e:
        print(f"beamsearch: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
