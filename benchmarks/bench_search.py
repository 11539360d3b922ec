"""The search's own time per step against the floor of one log_softmax and one top-k.

A null model returns precomputed random logits (a slice, no work), so the time spent outside the
step function is the search's own: processing, log_softmax, ranking, bookkeeping, state reorder.
Beside each row, the floor measured in the same run on the same machine: a plain log_softmax of
the [N*beam, V] logits followed by one top-k over [N, beam*V] in the same library.

    python benchmarks/bench_search.py                 # the full grid (a few minutes)
    python benchmarks/bench_search.py --quick         # a small grid

A second table shows that a step's cost does not grow with the search's length (the token history
is a back-pointer trail, not a matrix copied every step): the same search over 64 and 1024 steps.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time

import numpy as np

from beamsearch import beam_search_batch

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


class NullModel:
    """``step`` returns the first k rows of a fixed random [rows, V] array; times itself."""

    def __init__(self, rows: int, vocab: int, backend: str, seed: int = 0) -> None:
        logits = np.random.default_rng(seed).normal(size=(rows, vocab)).astype(np.float32) * 3
        self.logits = torch.from_numpy(logits) if backend == "torch" else logits
        self.inside = 0.0

    def step(self, state, y_prev):
        t0 = time.perf_counter()
        out = self.logits[: len(y_prev)]
        self.inside += time.perf_counter() - t0
        return out, state


def floor_per_step(x, n: int, beam: int, backend: str, reps: int) -> float:
    """Seconds for log_softmax([N*beam, V]) then one top-k over [N, beam*V]."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        if backend == "torch":
            lp = torch.log_softmax(x, dim=1)
            torch.topk(lp.reshape(n, -1), beam, dim=1)
        else:
            m = x.max(axis=1, keepdims=True)
            lp = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))
            np.argpartition(-lp.reshape(n, -1), beam - 1, axis=1)[:, :beam]
        best = min(best, time.perf_counter() - t0)
    return best


CONTROLS = {"min_new_tokens": 3, "stop_sequences": [[5, 6], [7, 8, 9]]}


def search_per_step(n: int, beam: int, vocab: int, backend: str, ngram: int, steps: int, reps: int,
                    controls: bool = False) -> float:
    """Seconds per step of the search alone (the null model's own time subtracted), best of reps.

    ``controls``: with min_new_tokens=3, two stop sequences and a forced 2-token prefix per input.
    """
    best = float("inf")
    prompts = [[1, 2, 3, 4]] * n
    extra = dict(CONTROLS, prefix=[[11, 12]] * n) if controls else {}
    for _ in range(reps):
        model = NullModel(n * beam, vocab, backend)
        t0 = time.perf_counter()
        beam_search_batch(model.step, None, prompts, eos_token_id=0, max_steps=steps, beam_size=beam,
                          no_repeat_ngram_size=ngram, early_stop=False, **extra)
        total = time.perf_counter() - t0 - model.inside
        best = min(best, total / steps)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small grid, for a smoke run")
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    backends = ["numpy"] + (["torch"] if torch is not None else [])
    ns, beams, vocabs = ([1, 8], [1, 4], [1000]) if args.quick else ([1, 8, 64], [1, 4, 8], [1000, 32000])
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}, "
          f"numpy {np.__version__}" + (f", torch {torch.__version__} ({torch.get_num_threads()} threads)"
                                        if torch is not None else ""))
    print(f"T = {args.steps} steps, times per step in ms (best of repeats); ns/elem = search time per "
          "step / (N * beam * V), flat when time grows linearly in N * beam * V")
    print(f"{'backend':<7} {'N':>3} {'beam':>4} {'V':>6} {'search':>9} {'floor':>9} {'ratio':>6} "
          f"{'+3gram':>9} {'3gram cost':>10} {'controls':>9} {'ctl cost':>8} {'ns/elem':>8}")
    for backend, vocab, n, beam in itertools.product(backends, vocabs, ns, beams):
        rows = n * beam
        x = NullModel(rows, vocab, backend).logits
        reps = 10 if rows * vocab <= 100_000 else 3 if rows * vocab <= 4_000_000 else 2  # small: noisier
        floor = floor_per_step(x, n, beam, backend, reps=10)
        plain = search_per_step(n, beam, vocab, backend, 0, args.steps, reps)
        blocked = search_per_step(n, beam, vocab, backend, 3, args.steps, reps)
        controlled = search_per_step(n, beam, vocab, backend, 0, args.steps, reps, controls=True)
        # the machine is shared: the floor is the best of measurements before and after the searches
        floor = min(floor, floor_per_step(x, n, beam, backend, reps=10))
        print(f"{backend:<7} {n:>3} {beam:>4} {vocab:>6} {plain * 1e3:>9.3f} {floor * 1e3:>9.3f} "
              f"{plain / floor:>6.2f} {blocked * 1e3:>9.3f} {blocked / plain - 1:>+10.0%} "
              f"{controlled * 1e3:>9.3f} {controlled / plain - 1:>+8.0%} "
              f"{plain / (rows * vocab) * 1e9:>8.3f}", flush=True)
    growth_table(args.quick)


def growth_table(quick: bool) -> None:
    """Per-step cost of one search over T = 64 and T = 1024 steps (numpy, N=64, beam 4, V=1000)."""
    print()
    print("per-step cost against the search's length (null model, no n-gram blocking), ms per step")
    print(f"{'backend':<7} {'N':>3} {'beam':>4} {'V':>6} {'T=64':>9} {'T=1024':>9} {'ratio':>6}")
    for backend in ["numpy"] + (["torch"] if torch is not None else []):
        n, beam, vocab = (8, 4, 1000) if quick else (64, 4, 1000)
        short = search_per_step(n, beam, vocab, backend, 0, 64, 3)
        long = search_per_step(n, beam, vocab, backend, 0, 1024, 2)
        print(f"{backend:<7} {n:>3} {beam:>4} {vocab:>6} {short * 1e3:>9.3f} {long * 1e3:>9.3f} "
              f"{long / short:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
