"""The ``beamsearch`` command line: a thin layer over the library."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from beamsearch import Hypothesis, beam_search, greedy_decode
from beamsearch.toy import HAND_EXAMPLE, RandomPrefixModel, TableModel


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(prog="beamsearch", description="Beam search decoding of step-function models.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="greedy against beam search on toy models")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-len", type=int, default=5)
    p.add_argument("--models", type=int, default=8)
    try:
        args = parser.parse_args(argv)
        if args.command == "demo":
            for flag, value in (("--beam", args.beam), ("--max-len", args.max_len), ("--models", args.models)):
                if value < 1:
                    raise _CliError(f"beamsearch: error: {flag} must be >= 1; got {value}", 2)
            demo(args.beam, args.max_len, args.models)
        return 0
    except _CliError as e:
        print(str(e), file=sys.stderr)
        return e.code
    except (ValueError, TypeError) as e:
        print(f"beamsearch: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
