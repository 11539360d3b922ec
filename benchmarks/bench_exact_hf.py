"""Exact search through a Hugging Face model: time and memory against the node budget.

The model is README's "every search mode from one call" example (a GPT-2 config with random
weights, V=100, 2 layers of width 32) and its search, ``hf.generate(model, [[5, 17, 33], [9]],
mode="exact", max_new_tokens=4, node_budget=B)``, run as ``exact_search`` over ``hf.causal_lm``
(the same search; its ``expanded`` is reported): a random model's outputs are so close in score
that the budget runs out, so each input passes about B rows to the model (``rows``: both inputs'). Each budget
runs in a fresh process (1 torch thread), after one small warm-up search, so that its peak memory
is its own: ``search MB`` is the peak resident memory over what the process held before the
search (the interpreter, torch, the model). ``ms/node`` is the search's time per expanded row,
and ``ratio`` each budget's ms/node over the smallest budget's: flat (about 1) when time is
linear in the budget.

    python benchmarks/bench_exact_hf.py                      # B = 1,000 to 32,000
    python benchmarks/bench_exact_hf.py --budgets 1000 4000  # some budgets
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import torch, transformers
from beamsearch import exact_search, hf

torch.set_num_threads(1)
torch.manual_seed(0)
model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
    vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)).eval()
prompts = [[5, 17, 33], [9]]


def search(budget):
    dec = hf.causal_lm(model, prompts, max_new_tokens=4)
    return exact_search(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=4,
                        length_penalty="power", alpha=1.0, node_budget=budget)  # generate's, as hf.generate maps them


search(200)  # warm-up
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
out = search(int(sys.argv[1]))
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "expanded": int(out.expanded.sum()), "search_mb": (peak - before) / 1024}))
"""


def measure(budget: int) -> dict:
    """One budget's run in a fresh process."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(budget)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000, 32000])
    args = parser.parse_args()
    print("exact search, hf.generate(mode='exact'), README's GPT-2 config (V=100), 2 inputs, max_new_tokens=4, "
          "1 torch thread")
    print(f"{'budget':>7} {'rows':>7} {'seconds':>8} {'ms/node':>8} {'ratio':>6} {'search MB':>10} {'KB/node':>8}")
    first = None
    for budget in args.budgets:
        m = measure(budget)
        rows = m["expanded"]  # every input spends its whole budget
        per = m["seconds"] / rows * 1e3
        first = per if first is None else first
        print(f"{budget:>7} {rows:>7} {m['seconds']:>8.2f} {per:>8.3f} {per / first:>6.2f} {m['search_mb']:>10.1f} "
              f"{m['search_mb'] * 1024 / rows:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
