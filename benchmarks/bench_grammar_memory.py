"""Memory held by the grammar engine's caches as grammars are built with many eos ids.

One run, one process per column (each starts from an empty cache): a vocabulary of 32,000 token
strings (random lowercase words, nothing downloaded), ``Grammar.regex("[a-z]+", vocab,
eos_token_id=e)`` built for e = 1, 2, ... (each eos id makes a new llguidance tokenizer: a trie of
the vocabulary). Columns, resident memory grown since the first grammar, MB:

- ``bounded``: the caches as they are (``TOKENIZER_CACHE_SIZE`` tokenizers, ``CACHE_SIZE``
  compiled grammars; a compiled grammar keeps its tokenizer alive, and is dropped with it);
- ``unbounded``: both caches without a bound (what the code kept before they were bounded:
  every tokenizer of a vocabulary of strings, forever);
- ``tokenizers only``: bounded, with the compiled grammars dropped after each build (what the
  tokenizer cache alone holds).

Ratio: unbounded / bounded at the last count.

    python benchmarks/bench_grammar_memory.py
    python benchmarks/bench_grammar_memory.py --counts 20 40 --vocab 8000   # a quick check
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def vocabulary(size: int) -> list[str]:
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < size - 1:
        words.add("".join(rng.choice(letters, size=int(rng.integers(1, 8)))))
    return ["<eos>", *sorted(words)]


def child(column: str, counts: list[int], size: int) -> None:
    """Build grammars for eos ids 1..max(counts) and print the memory grown at each count (JSON)."""
    from beamsearch.processors import Grammar
    from beamsearch.processors import grammar_engine as ge

    if column == "unbounded":
        ge.CACHE_SIZE = ge.TOKENIZER_CACHE_SIZE = 10**9
    vocab = vocabulary(size)
    Grammar.regex("[a-z]+", vocab, eos_token_id=0)
    gc.collect()
    base, grown = rss_mb(), {}
    for e in range(1, max(counts) + 1):
        Grammar.regex("[a-z]+", vocab, eos_token_id=e)
        if column == "tokenizers only":
            ge._COMPILED.clear()
        if e in counts:
            gc.collect()
            grown[e] = rss_mb() - base
    print(json.dumps(grown))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[50, 100, 200], help="distinct eos ids")
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary size")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.counts, args.vocab)
        return
    columns = ("bounded", "unbounded", "tokenizers only")
    results = {}
    for column in columns:
        out = subprocess.run([sys.executable, __file__, "--child", column, "--vocab", str(args.vocab), "--counts",
                              *map(str, args.counts)], check=True, capture_output=True, text=True).stdout
        results[column] = {int(k): v for k, v in json.loads(out.splitlines()[-1]).items()}
    print(f"vocabulary {args.vocab} strings; resident memory grown since the first grammar, MB\n")
    print("| eos ids | " + " | ".join(columns) + " | unbounded / bounded |")
    print("| --- | " + " | ".join("---" for _ in columns) + " | --- |")
    for n in args.counts:
        row = [results[c][n] for c in columns]
        print(f"| {n} | " + " | ".join(f"{v:.0f}" for v in row) + f" | {row[1] / max(row[0], 1):.1f}x |")


if __name__ == "__main__":
    main()
