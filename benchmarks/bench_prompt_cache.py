"""The shared prompt cache (``causal_lm(..., share_prompt=True)``) against the copying caches:
``model.generate``'s beam search and beamsearch's default (``share_prompt=False``), side by side
in one run, on a random-weight GPT-2-like model (2 layers, d=64, 4 heads, a 1,024-token
codebook), prompts of 128 tokens, items of 4 tokens, beams 64, 256 and 1,024.

Bytes: the KV cache each way holds, in bytes of allocated keys and values: ``generate``'s
``past_key_values`` at its end; beamsearch's caches at their largest over the search's steps
(allocated buffers, room for tokens to come included; the shared cache: its prompts once per
input plus the rows' own columns). Every search makes its 4 tokens (``min_new_tokens``, as
``generate`` is asked). Time: the best of ``--repeats`` searches, prefill included.
The two beamsearch ways give the same hypotheses (checked: tokens equal, scores within 1e-5).

    python benchmarks/bench_prompt_cache.py                  # 2 inputs, beams 64 256 1024
    python benchmarks/bench_prompt_cache.py --inputs 1 --beams 64 --repeats 1
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
import transformers

from beamsearch import beam_search_batch
from beamsearch.hf import causal_lm
from beamsearch.hf.shared import SharedPromptCache

VOCAB, PROMPT, NEW, EOS = 1024, 128, 4, 0


def model_of(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                                  bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS)
    return transformers.GPT2LMHeadModel(cfg).eval()


def cache_bytes(cache: Any) -> int:
    """The bytes of keys and values a cache holds (a layer's allocated buffers where it has them)."""
    if isinstance(cache, SharedPromptCache):
        return cache.bytes()
    total = 0
    for layer in cache.layers:
        pair = (getattr(layer, "_k", None), getattr(layer, "_v", None))
        if pair[0] is None:
            pair = (layer.keys, layer.values)
        total += sum(t.numel() * t.element_size() for t in pair if t is not None)
    return total


def ours(model: Any, prompts: list[list[int]], beam: int, share: bool) -> tuple[Any, int, float]:
    """(results, largest cache bytes over the steps, seconds) of one beamsearch search."""
    largest = 0
    start = time.perf_counter()
    dec = causal_lm(model, prompts, eos_token_id=EOS, max_new_tokens=NEW, share_prompt=share)

    def step(state: Any, y_prev: Any) -> Any:
        nonlocal largest
        logits, new = dec.step(state, y_prev)
        largest = max(largest, cache_bytes(new.cache))
        return logits, new

    results = beam_search_batch(step, dec.init_state, dec.prompts, eos_token_id=EOS, max_steps=NEW,
                                min_new_tokens=NEW, beam_size=beam, n_best=1)
    return results, largest, time.perf_counter() - start


def theirs(model: Any, prompts: list[list[int]], beam: int) -> tuple[int, float]:
    """(cache bytes at the end, seconds) of ``model.generate``'s beam search."""
    ids = torch.tensor(prompts)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beam, max_new_tokens=NEW,
                             min_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, pad_token_id=EOS,
                             eos_token_id=EOS)
    seconds = time.perf_counter() - start
    cache = getattr(out, "cache", None) or out.past_key_values
    return cache_bytes(cache), seconds


def same(a: Any, b: Any) -> bool:
    return all([h.tokens for h in x] == [h.tokens for h in y] and
               all(abs(p.score - q.score) < 1e-5 for p, q in zip(x, y, strict=True)) for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=2)
    parser.add_argument("--beams", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model = model_of()
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(1, VOCAB, (args.inputs, PROMPT), generator=gen).tolist()
    print(f"GPT-2-like, 2 layers, d=64, vocab {VOCAB}; {args.inputs} prompts of {PROMPT} tokens, {NEW} new tokens; "
          f"best of {args.repeats}; MB = 2**20 bytes")
    print("| beam | generate cache MB | copying cache MB | shared cache MB | shared / generate | shared / copying "
          "| generate s | copying s | shared s | same results |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for beam in args.beams:
        runs: dict[str, list[Any]] = {"generate": [], "copying": [], "shared": []}
        for _ in range(args.repeats):
            runs["generate"].append(theirs(model, prompts, beam))
            runs["copying"].append(ours(model, prompts, beam, False))
            runs["shared"].append(ours(model, prompts, beam, True))
        gen_bytes, gen_s = runs["generate"][0][0], min(r[1] for r in runs["generate"])
        copy_res, copy_bytes = runs["copying"][0][0], runs["copying"][0][1]
        shared_res, shared_bytes = runs["shared"][0][0], runs["shared"][0][1]
        copy_s, shared_s = min(r[2] for r in runs["copying"]), min(r[2] for r in runs["shared"])
        mb = 2 ** 20
        print(f"| {beam} | {gen_bytes / mb:.2f} | {copy_bytes / mb:.2f} | {shared_bytes / mb:.2f} "
              f"| {shared_bytes / gen_bytes:.3f} | {shared_bytes / copy_bytes:.3f} | {gen_s:.3f} | {copy_s:.3f} "
              f"| {shared_s:.3f} | {'yes' if same(copy_res, shared_res) else 'NO'} |")


if __name__ == "__main__":
    main()
