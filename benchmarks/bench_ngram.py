"""n-gram blocking's per-step cost against the output's length: the carried index against a full
scan of each row's history, in one run.

A null model returns precomputed random logits (row r of a fixed ``[k, V]`` array, no work), and
records the time of each call, so a step's time is the search's own (processing, log_softmax,
ranking, bookkeeping) plus a slice. The time is the process's CPU time (``time.process_time``:
the machine is shared, and time spent waiting for a core is not the search's; numpy and torch run
on one thread here). One beam search of T steps (beam 4, V=1000, 3-grams, no eos,
prompts of 4 tokens) per variant, for one input (T = 8192) and for 64 (T = 1024):

- ``off``: no n-gram blocking;
- ``scan``: the blocking as it was before the index, a processor that reads each row's whole
  history (prompt + generated tokens, kept as a matrix by the engine) and scans every n-gram of it
  at every step (:func:`beamsearch.processors.banned_ngram_tokens`);
- ``index``: ``no_repeat_ngram_size=3``, the carried index (:class:`~beamsearch.processors.NoRepeatNGram`).

Each cell is the median time of the 64 steps ending at that step, in ms, the best of 3 runs of
the search; the last column is the ratio of the last step's cell to step 64's. ``scan`` and
``index`` must give the same outputs (checked). The numpy and torch backends are measured in turn
(torch with one thread).

    python benchmarks/bench_ngram.py                  # a few minutes
    python benchmarks/bench_ngram.py --steps 1024 --batch-steps 256 --repeats 1   # a smoke run
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from beamsearch import beam_search_batch
from beamsearch.backends import NEG_INF
from beamsearch.processors import banned_ngram_tokens

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


class NullModel:
    """``step`` returns the first k rows of a fixed random ``[rows, V]`` array; each call's time
    is recorded (``stamps``)."""

    def __init__(self, rows: int, vocab: int, backend: str, seed: int = 0) -> None:
        logits = np.random.default_rng(seed).normal(size=(rows, vocab)).astype(np.float32) * 3
        self.logits = torch.from_numpy(logits) if backend == "torch" else logits
        self.stamps: list[float] = []

    def step(self, state, y_prev):
        self.stamps.append(time.process_time())
        return self.logits[: len(y_prev)], state


class FullScan:
    """The blocking before the carried index: every n-gram of each row's whole history, scanned
    at every step."""

    needs_history = True
    last_step = None

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, logits, ctx):
        rows, tokens = banned_ngram_tokens(ctx.history, self.n)
        return ctx.backend.put(logits, rows, tokens, NEG_INF) if rows.size else logits


def per_step(variant: str, backend: str, steps: int, n: int, inputs: int, beam: int = 4,
             vocab: int = 1000) -> tuple[np.ndarray, list]:
    """Seconds of each step but the last (``[steps - 1]``: step t+1's call minus step t's) and
    the outputs."""
    model = NullModel(inputs * beam, vocab, backend)
    extra: dict = {"scan": {"logits_processors": [FullScan(n)]}, "index": {"no_repeat_ngram_size": n}}.get(variant, {})
    out = beam_search_batch(model.step, None, [[1, 2, 3, 4]] * inputs, eos_token_id=0, max_steps=steps,
                            beam_size=beam, n_best=beam, early_stop=False, **extra)
    return np.diff(np.array(model.stamps)), [[tuple(h.tokens) for h in hyps] for hyps in out]


def table(inputs: int, steps: int, n: int, repeats: int, window: int = 64) -> None:
    """One table: each backend, each variant, the cells at steps 64, 256, 1024, ... up to ``steps``."""
    at = [t for t in (64, 256, 1024, 2048, 4096, 8192, 16384) if t <= steps]
    print(f"N={inputs}, beam 4, V=1000, {n}-grams, null model: CPU ms per step (median of the {window} "
          f"steps ending at step t, best of {repeats} runs)")
    print(f"{'backend':<7} {'variant':<7} " + " ".join(f"{'t=' + str(t):>8}" for t in at) + f" {'last/64':>8}")
    for backend in ["numpy"] + (["torch"] if torch is not None else []):
        outputs = {}
        for variant in ("off", "scan", "index"):
            cells = [float("inf")] * len(at)
            for _ in range(repeats):  # the machine may be shared: the best of the repeats
                times, outputs[variant] = per_step(variant, backend, steps, n, inputs)
                # times[j]: from step j+1's model call to the next, the search's work at step j+1
                cells = [min(c, float(np.median(times[max(t - window, 0) : t])))
                         for c, t in zip(cells, at, strict=True)]
            print(f"{backend:<7} {variant:<7} " + " ".join(f"{c * 1e3:>8.3f}" for c in cells)
                  + f" {cells[-1] / cells[0]:>8.2f}", flush=True)
        assert outputs["scan"] == outputs["index"], "the carried index must block what the full scan blocks"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192, help="of the one-input search")
    parser.add_argument("--batch-steps", type=int, default=1024, help="of the 64-input search")
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if torch is not None:
        torch.set_num_threads(1)
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}, numpy {np.__version__}"
          + (f", torch {torch.__version__} (1 thread)" if torch is not None else ""))
    table(1, args.steps, args.n, args.repeats)
    print()
    table(64, args.batch_steps, args.n, args.repeats)


if __name__ == "__main__":
    main()
