"""What watching a search costs: no callback, a callback, a full trace, side by side.

A null model returns a slice of fixed random logits (no work), so the time is the search's own.
Each configuration runs ``beam_search_batch`` for a fixed number of steps (eos never wins: the
logits of the eos id are set very low) three ways, interleaved and repeated, keeping each one's
best time:

- **none**: no callback and no trace (the search as it was: no observer exists);
- **callback, trace_width=0**: a callback that reads each step's record (``record.best()``),
  without pruned candidates (nothing extra read on the backend);
- **callback**: the same with the default ``trace_width=3`` (each row's top ``beam + 1 + 3``
  read on the backend before selection: a second top-k over ``[k, V]``);
- **trace**: a full :class:`~beamsearch.viz.Trace` (and no callback).

    python benchmarks/bench_trace.py            # torch N=64 beam 4 V=32000, numpy N=4 beam 4 V=1000
"""

from __future__ import annotations

import platform
import time

import bench_search
import numpy as np

from beamsearch import beam_search_batch
from beamsearch.viz import Trace

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


class NullModel(bench_search.NullModel):
    """``bench_search``'s null model (a slice of fixed random logits) with eos (id 0) very
    unlikely, so every search runs all its steps."""

    def __init__(self, rows: int, vocab: int, backend: str, seed: int = 0) -> None:
        super().__init__(rows, vocab, backend, seed)
        self.logits[:, 0] = -30.0


def one(model: NullModel, n: int, beam: int, steps: int, mode: str) -> float:
    kw = {}
    if mode.startswith("callback"):
        kw["callback"] = lambda record: None if record.best().size else None
        kw["trace_width"] = 0 if mode == "callback0" else 3
    elif mode == "trace":
        kw["trace"] = Trace()
    t0 = time.perf_counter()
    beam_search_batch(model.step, np.zeros(n), [[1]] * n, eos_token_id=0, max_steps=steps, beam_size=beam,
                      early_stop=False, **kw)
    return time.perf_counter() - t0


def row(backend: str, n: int, beam: int, vocab: int, steps: int, reps: int) -> str:
    model = NullModel(n * beam, vocab, backend)
    best = {m: float("inf") for m in ("none", "callback0", "callback", "trace")}
    one(model, n, beam, 2, "trace")  # warm-up
    for _ in range(reps):
        for mode in best:
            best[mode] = min(best[mode], one(model, n, beam, steps, mode))
    ms = {m: 1e3 * t / steps for m, t in best.items()}
    cells = " | ".join(f"{ms[m]:.3f} ({ms[m] / ms['none']:.2f}x)" for m in ("callback0", "callback", "trace"))
    return f"| {backend} | {n} | {beam} | {vocab} | {steps} | {ms['none']:.3f} | {cells} |"


def main() -> None:
    threads = torch.get_num_threads() if torch is not None else "-"
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"numpy {np.__version__}, torch {torch.__version__ if torch else '-'} ({threads} threads)")
    print("ms per step, best of the repeats")
    print("| backend | N | beam | V | steps | none | callback, trace_width=0 | callback | full trace |")
    print("|---|---|---|---|---|---|---|---|---|")
    if torch is not None:
        print(row("torch", 64, 4, 32000, 20, 5))
    print(row("numpy", 4, 4, 1000, 50, 7))


if __name__ == "__main__":
    main()
