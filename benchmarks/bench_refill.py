"""Refill (``decode_stream``) against fixed batches of the same size (``beam_search_batch`` over
consecutive chunks), on a toy model whose inputs have widely varied output lengths.

The model: a random-weight one-layer step (``[k, d] @ [d, V]`` plus a recurrent update), whose
input i ends after ``L_i`` tokens (eos is masked before ``L_i`` and likely at it), ``L_i`` drawn
uniformly from 2 to 60; no length penalty, so each input stops right after its eos. Both runners
give the same outputs (checked); the table shows total time, model calls, rows per call and the
utilisation of the row budget, for refill joining each input as soon as it fits (``min_join=1``)
and joining four at a time (fewer cohorts, each with its own per-step search overhead).

    python benchmarks/bench_refill.py                 # 256 inputs, beam 4, 16 inputs per batch
    python benchmarks/bench_refill.py --inputs 64 --batch 8 --repeats 1
    python benchmarks/bench_refill.py --device cuda   # the model and the search in torch on a GPU
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from beamsearch import beam_search_batch
from beamsearch.refill import decode_stream


class ToyModel:
    """State: (h [k, d], count [k], target [k]); logits [k, V]; counts calls and rows. numpy, or
    torch tensors on ``device`` (float64 either way, so both give the same outputs)."""

    def __init__(self, vocab: int, dim: int, eos: int, seed: int = 0, device: str | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.xp = np
        self.w = rng.normal(size=(dim, vocab)) / np.sqrt(dim)
        self.embed = rng.normal(size=(vocab, dim))
        if device is not None:
            import torch

            self.xp = torch
            self.w, self.embed = torch.tensor(self.w, device=device), torch.tensor(self.embed, device=device)
        self.eos = eos
        self.calls = self.rows = 0

    def make_state(self, items: list[dict]) -> tuple:
        n, like = len(items), self.w
        target = [float(it["source"]) for it in items]
        if self.xp is np:
            return np.zeros((n, like.shape[0])), np.zeros(n), np.array(target)
        return like.new_zeros((n, like.shape[0])), like.new_zeros(n), like.new_tensor(target)

    def step(self, state, y_prev):
        h, count, target = state
        self.calls += 1
        self.rows += len(y_prev)
        h = self.xp.tanh(0.5 * h + self.embed[y_prev])  # --> [k, d]
        logits = h @ self.w  # --> [k, V]
        logits[:, self.eos] = self.xp.where(count + 1 >= target, 8.0, -np.inf)  # no eos before the target length
        return logits, (h, count + 1, target)


def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    lengths = rng.integers(2, 61, size=args.inputs)
    items = [{"prompt": [int(rng.integers(1, args.vocab))], "source": int(n)} for n in lengths]
    prompts = [it["prompt"] for it in items]
    # alpha 0: no length penalty, so the (lossless) early stop ends an input right after its eos
    search = dict(beam_size=args.beam, eos_token_id=0, max_steps=64, n_best=1, alpha=0.0)
    max_rows = args.batch * args.beam

    def fixed(model: ToyModel) -> list:
        out = []
        for start in range(0, len(items), args.batch):
            chunk = items[start : start + args.batch]
            out += beam_search_batch(model.step, model.make_state(chunk), prompts[start : start + args.batch], **search)
        return out

    def refill(min_join: int):
        def runner(model: ToyModel) -> list:
            stream = decode_stream(model.step, model.make_state, items, max_rows=max_rows, min_join=min_join, **search)
            got = {r.index: r.hypotheses for r in stream}
            return [got[i] for i in range(len(items))]

        return runner

    rows = {}
    outputs = {}
    runners = [("fixed batches", fixed)] + [(f"refill join>={j}", refill(j)) for j in args.min_join]
    for name, runner in runners:
        times = []
        for _ in range(args.repeats):
            model = ToyModel(args.vocab, args.dim, eos=0, device=args.device)
            t0 = time.perf_counter()
            outputs[name] = runner(model)
            times.append(time.perf_counter() - t0)
        rows[name] = (min(times), model.calls, model.rows)
    checks = [agree(outputs["fixed batches"], outputs[name]) for name, _ in runners[1:]]
    same, gap = all(c[0] for c in checks), max(c[1] for c in checks)
    print(f"{args.inputs} inputs, output lengths {lengths.min()}-{lengths.max()} (mean {lengths.mean():.1f}), "
          f"beam {args.beam}, {args.batch} inputs per batch = max_rows {max_rows}, V={args.vocab}, d={args.dim}, "
          f"{'numpy' if args.device is None else 'torch ' + args.device}; "
          f"best of {args.repeats}")
    base = rows["fixed batches"]
    print(f"{'runner':<16} {'seconds':>8} {'calls':>6} {'rows/call':>9} {'utilisation':>11} {'inputs/s':>9} "
          f"{'x fixed':>8}")
    for name, (sec, calls, total) in rows.items():
        print(f"{name:<16} {sec:8.3f} {calls:6d} {total / calls:9.1f} {total / calls / max_rows:11.2f} "
              f"{args.inputs / sec:9.1f} {base[0] / sec:8.2f}")
    print(f"same outputs: {same} (tokens equal, logprobs and scores within {gap:.1e})")
    if not same:
        raise SystemExit("refill and fixed batches disagree")


def agree(a: list, b: list) -> tuple[bool, float]:
    """Whether two runs found the same hypotheses (tokens, finished) with logprobs and scores
    within 1e-9, and the largest difference. (A model's float matmul may round differently for
    another number of rows; the search adds nothing to that.)"""
    gap, same = 0.0, len(a) == len(b)
    for x, y in zip(a, b, strict=False):  # (lengths may differ: ``same`` records it; the gap is over the common part)
        same &= [(h.tokens, h.finished) for h in x] == [(h.tokens, h.finished) for h in y]
        for h, g in zip(x, y, strict=False):
            gap = max(gap, abs(h.logprob - g.logprob), abs(h.score - g.score))
    return same and gap <= 1e-9, gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16, help="inputs per fixed batch; max_rows = batch * beam")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-join", type=lambda v: [int(x) for x in v.split(",")], default=[1, 4],
                        help="refill runs, one per min_join value (comma-separated)")
    parser.add_argument("--device", default=None,
                        help="run the model in torch on this device (cpu, cuda); numpy if not given")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
