"""Each search mode's time per step against plain ``beam_search_batch``, measured side by side.

A null model returns a slice of fixed random logits (no work), so each time is the search's own:
processing, log_softmax, selection, bookkeeping. Every mode runs the same N inputs for the same
number of steps (the random logits almost never choose eos, so every search runs all steps);
repetitions are interleaved (plain, mode A, mode B, ..., plain, ...) and the best of each is kept,
so a busy machine slows every column alike.

    python benchmarks/bench_modes.py            # torch, N=64, beam 8, V=32000
    python benchmarks/bench_modes.py --quick    # N=16, V=8000
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from beamsearch import beam_search_batch, constrained_beam_search, diverse_beam_search, stochastic_beam_search
from beamsearch.processors import Catalogue, TokenDFA

EOS = 0


class NullModel:
    """``step`` returns the first k rows of a fixed random ``[rows, V]`` float32 tensor."""

    def __init__(self, rows: int, vocab: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.logits = torch.from_numpy(rng.normal(size=(rows, vocab)).astype(np.float32) * 3)

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        return self.logits[: len(y_prev)], state


def modes(n: int, beam: int, vocab: int, seed: int = 0) -> dict[str, Callable[..., Any]]:
    """name -> ``f(step, prompts, steps)`` running that mode with the same controls."""
    rng = np.random.default_rng(seed)
    phrases = [[rng.integers(1, vocab, size=int(rng.integers(2, 4))).tolist() for _ in range(2)] for _ in range(n)]
    catalogue = Catalogue([rng.integers(1, vocab, size=int(rng.integers(3, 9))).tolist() for _ in range(1000)], EOS)
    states = 10
    table = np.where(rng.random((states, vocab)) < 0.2, rng.integers(0, states, size=(states, vocab)), -1)
    table[:, EOS] = -1
    dfa = TokenDFA(table, 0, list(range(states)), EOS)
    common = dict(eos_token_id=EOS, alpha=0.6)
    return {
        "plain beam_search_batch": lambda s, p, t: beam_search_batch(s, None, p, max_steps=t, beam_size=beam, **common),
        "constrained, 2 phrases": lambda s, p, t: constrained_beam_search(
            s, None, p, constraints=phrases, max_steps=t, beam_size=beam, **common),
        "diverse, 2 groups": lambda s, p, t: diverse_beam_search(
            s, None, p, num_groups=2, diversity_penalty=0.5, max_steps=t, beam_size=beam, **common),
        "diverse, 4 groups": lambda s, p, t: diverse_beam_search(
            s, None, p, num_groups=4, diversity_penalty=0.5, max_steps=t, beam_size=beam, **common),
        f"stochastic, k={beam}": lambda s, p, t: stochastic_beam_search(
            s, None, p, k=beam, seed=0, max_steps=t, eos_token_id=EOS),
        "Catalogue(1000 entries)": lambda s, p, t: beam_search_batch(
            s, None, p, max_steps=t, beam_size=beam, logits_processors=[catalogue], **common),
        "TokenDFA(10 states)": lambda s, p, t: beam_search_batch(
            s, None, p, max_steps=t, beam_size=beam, logits_processors=[dfa], **common),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    n, beam, vocab = (16, 8, 8000) if args.quick else (64, 8, 32000)
    torch.set_num_threads(1)
    model = NullModel(n * beam, vocab)
    prompts = [[1 + i % (vocab - 1)] for i in range(n)]
    runs = modes(n, beam, vocab)
    for f in runs.values():  # warm up
        f(model.step, prompts, args.steps)
    best = {name: float("inf") for name in runs}
    for _ in range(args.reps):
        for name, f in runs.items():
            t0 = time.perf_counter()
            f(model.step, prompts, args.steps)
            best[name] = min(best[name], (time.perf_counter() - t0) / args.steps)
    plain = best["plain beam_search_batch"]
    print(f"torch {torch.__version__}, 1 thread, {platform.processor() or platform.machine()}; "
          f"N={n}, beam {beam}, V={vocab}, {args.steps} steps, best of {args.reps} interleaved")
    print()
    print("| search | ms per step | vs plain |")
    print("| --- | ---: | ---: |")
    for name, sec in best.items():
        print(f"| {name} | {sec * 1e3:.1f} | {sec / plain:.2f}x |")


if __name__ == "__main__":
    main()
