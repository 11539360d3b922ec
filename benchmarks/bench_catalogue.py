"""Generative retrieval: beam search constrained to a catalogue, ours against ``transformers``'
``model.generate(num_beams=B, prefix_allowed_tokens_fn=...)`` with a Python trie, side by side.

A random-weight GPT-2-like model (2 layers, d=64: the search, not the model, is what is measured)
decodes items of 4 tokens from a 1,024-token codebook (eos = 1024) after prompts of 128 tokens,
for catalogues of 100,000 and 1,000,000 random items and beams of 64, 256 and 1024. ``generate``
gets the way users write it: a dict from each generated prefix (a tuple) to its allowed next
tokens, read by ``prefix_allowed_tokens_fn`` for every row at every step. Ours is
``hf.generate(model, ..., catalogue=Catalogue(items))``, twice: under ``generate``'s own rule
(``mode="transformers"``: the mask acts after log_softmax, so its top outputs must equal
``generate``'s, checked here) and under the library's rule (``mode="beam"``: the mask acts before
log_softmax, the model renormalized over the allowed tokens, so its top outputs may differ; every
output is checked to be a catalogue entry). Times are the best of the repetitions, measured in one
run, interleaved (generate, ours, ours, generate, ...).

Also: the trie's build time from the ``[M, 4]`` array, its bytes, its safetensors file size and
load time, against building the Python dict.

    python benchmarks/bench_catalogue.py                       # the table of BENCHMARKS.md
    python benchmarks/bench_catalogue.py --items 100000 --beams 64 --quick
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import tempfile
import time
from typing import Any

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from beamsearch import hf
from beamsearch.processors import Catalogue

CODEBOOK, EOS, PROMPT, ITEM = 1024, 1024, 128, 4


def tiny_gpt2(seed: int = 0) -> Any:
    """A random-weight GPT-2: 2 layers, d=64, 2 heads, V = 1025 (the codebook, then eos)."""
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=CODEBOOK + 1, n_positions=PROMPT + ITEM + 8, n_embd=64, n_layer=2, n_head=2,
                     bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS)
    return GPT2LMHeadModel(cfg).eval()


def python_trie(items: np.ndarray) -> dict[tuple[int, ...], list[int]]:
    """The users' trie: generated prefix -> allowed next tokens (eos after a whole item)."""
    trie: dict[tuple[int, ...], set[int]] = {}
    for item in map(tuple, items.tolist()):
        for j in range(ITEM):
            trie.setdefault(item[:j], set()).add(item[j])
        trie[item] = {EOS}
    return {prefix: sorted(nxt) for prefix, nxt in trie.items()}


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def trie_costs(items: np.ndarray) -> dict[str, Any]:
    """Build, save and load the trie; build the Python dict (its memory left to the caller)."""
    build, cat = timed(lambda: Catalogue(items, EOS))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "catalogue.safetensors")
        save, _ = timed(lambda: cat.save(path))
        size = os.path.getsize(path)
        load, back = timed(lambda: Catalogue.load(path))
    assert np.array_equal(back.trie.token, cat.trie.token) and np.array_equal(back.trie.ends, cat.trie.ends)
    dict_build, trie = timed(lambda: python_trie(items))
    return {"cat": cat, "trie": trie, "build": build, "save": save, "load": load, "file": size,
            "bytes": cat.trie.nbytes, "nodes": cat.trie.n_nodes, "dict_build": dict_build}


def run_cell(model: Any, prompts: torch.Tensor, costs: dict[str, Any], beam: int, reps: int,
             with_generate: bool) -> dict[str, Any]:
    """One (catalogue, beam) cell: generate (optional), ours under generate's rule, ours."""
    trie, cat = costs["trie"], costs["cat"]
    mask = torch.ones_like(prompts)

    def allowed(batch_id: int, ids: torch.Tensor) -> list[int]:
        return trie.get(tuple(ids[PROMPT:].tolist()), [EOS])

    def theirs() -> Any:
        return model.generate(prompts, attention_mask=mask, num_beams=beam, max_new_tokens=ITEM + 1,
                              prefix_allowed_tokens_fn=allowed, do_sample=False, early_stopping=True)

    def ours(mode: str) -> Any:
        return hf.generate(model, prompts, attention_mask=mask, num_beams=beam, max_new_tokens=ITEM + 1,
                           catalogue=cat, mode=mode, early_stopping=True)

    if with_generate:  # warm-up: the first call of each pays one-time costs
        theirs()
    ours("beam")
    times: dict[str, list[float]] = {"generate": [], "transformers": [], "beam": []}
    outs: dict[str, Any] = {}
    for _ in range(reps):
        if with_generate:
            t, outs["generate"] = timed(theirs)
            times["generate"].append(t)
        for mode in ("transformers", "beam"):
            gc.collect()
            t, outs[mode] = timed(lambda mode=mode: ours(mode))
            times[mode].append(t)
    cell = {name: min(ts) if ts else None for name, ts in times.items()}
    tops = {mode: [tuple(h[0].tokens[:ITEM]) for h in outs[mode].hypotheses] for mode in ("transformers", "beam")}
    if with_generate:
        ref = [tuple(row) for row in outs["generate"][:, PROMPT:PROMPT + ITEM].tolist()]
        cell["same_top"] = tops["transformers"] == ref
        cell["beam_agrees"] = sum(a == b for a, b in zip(tops["beam"], ref, strict=True))
    cell["in_catalogue"] = all(tuple(h.tokens[:-1]) in trie and h.tokens[-1] == EOS and len(h.tokens) == ITEM + 1
                               for mode in ("transformers", "beam") for hyps in outs[mode].hypotheses for h in hyps)
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", default="100000,1000000", help="catalogue sizes, comma-separated")
    parser.add_argument("--beams", default="64,256,1024", help="beam sizes, comma-separated")
    parser.add_argument("--inputs", type=int, default=2, help="prompts per call (N)")
    parser.add_argument("--reps", type=int, default=2, help="repetitions per cell (best kept)")
    parser.add_argument("--no-generate", default="", help="cells without generate, as ITEMSxBEAM, comma-separated")
    parser.add_argument("--quick", action="store_true", help="one repetition")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a shared machine: a second thread waits on busy cores (0.3 s a call, not 3 ms)
    sizes = [int(x) for x in args.items.split(",")]
    beams = [int(x) for x in args.beams.split(",")]
    skip = {tuple(int(v) for v in c.split("x")) for c in args.no_generate.split(",") if c}
    reps = 1 if args.quick else args.reps
    model = tiny_gpt2()
    rng = np.random.default_rng(0)
    prompts = torch.from_numpy(rng.integers(0, CODEBOOK, size=(args.inputs, PROMPT)))
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} "
          f"threads; GPT-2 2 layers d=64, N={args.inputs} prompts of {PROMPT}, items of {ITEM} from {CODEBOOK}")
    print("\n| items | trie build | trie bytes | file | load | Python dict build |")
    print("|---|---|---|---|---|---|")
    rows = []
    for m in sizes:
        items = np.random.default_rng(m).integers(0, CODEBOOK, size=(m, ITEM))
        costs = trie_costs(items)
        print(f"| {m:,} | {costs['build']:.2f} s | {costs['bytes'] / 2**20:.1f} MiB ({costs['nodes']:,} nodes) | "
              f"{costs['file'] / 2**20:.1f} MiB | {costs['load'] * 1e3:.0f} ms | {costs['dict_build']:.1f} s |",
              flush=True)
        for beam in beams:
            cell = run_cell(model, prompts, costs, beam, reps, (m, beam) not in skip)
            rows.append((m, beam, cell))
        del costs
        gc.collect()
    print("\n| items | beam | generate + Python trie | ours, generate's rule | ratio | same top | ours | ratio "
          "| ours = generate's top | all in catalogue |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m, beam, c in rows:
        g = c["generate"]
        gen = f"{g:.2f} s" if g is not None else "not run"
        r1 = f"{g / c['transformers']:.1f}x" if g is not None else "-"
        r2 = f"{g / c['beam']:.1f}x" if g is not None else "-"
        same = ("yes" if c["same_top"] else "NO") if g is not None else "-"
        agree = f"{c['beam_agrees']}/{args.inputs}" if g is not None else "-"
        print(f"| {m:,} | {beam} | {gen} | {c['transformers']:.3f} s | {r1} | {same} | {c['beam']:.3f} s | {r2} "
              f"| {agree} | {'yes' if c['in_catalogue'] else 'NO'} |")


if __name__ == "__main__":
    main()
