"""``generate(num_beams=B)`` against ``beamsearch.hf.generate``, side by side, 1 and 2 threads.

Same models (random weights from configs, seeded), same prompts, same settings (beam 4, 32 new
tokens, length penalty 1, eos 2, which these random models almost never produce, so both run
all 32 steps), one run. Repetitions are interleaved: for each repetition, for 1 then 2 threads,
``generate`` then ours (the order alternates between repetitions), so load on a shared machine
hits both alike; each cell is the median over the repetitions.

Columns, per thread count: the total seconds of ``generate`` and ours and their ratio
(``speed-up`` > 1: ours is faster), with the range of the ratio within each repetition (the two
runs back to back: how much a cell moves on this machine); the cache reorder time (milliseconds, whole call): for
``generate`` its ``reorder_cache`` calls, for us every ``select_state`` call of the search
(cache, mask, positions, encoder states), timed the same way by wrapping the function; the
search + adapter share: everything outside the model's forward (forward hooks on the model and
its encoder, the same for both) as a share of the total; "rule": ours with ``mode="transformers"``
(generate's own beam search rule, ``beamsearch.transformers_beam_search``), its seconds and its
time over our own rule's (below 1.10: within 10%), timed in the same interleaved repetitions.

    python benchmarks/bench_hf.py            # every row, 9 repetitions
    python benchmarks/bench_hf.py --reps 3
    python benchmarks/bench_hf.py --rows 2x128   # only the rows whose name contains '2x128'
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
import transformers
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

import beamsearch.core.engine as engine
from beamsearch import hf

EOS, PAD, NEW, BEAMS = 2, 0, 32, 4


def gpt2(layers: int, width: int, vocab: int):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=512, n_embd=width, n_layer=layers, n_head=4,
                                  bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD)
    return transformers.GPT2LMHeadModel(cfg).eval()


def bart(layers: int, width: int, vocab: int):
    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=vocab, d_model=width, encoder_layers=layers, decoder_layers=layers,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=4 * width,
                                  decoder_ffn_dim=4 * width, max_position_embeddings=128, bos_token_id=1,
                                  eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=EOS,
                                  forced_bos_token_id=None, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(cfg).eval()


class Clock:
    """Seconds spent inside the wrapped callables (outermost calls only)."""

    def __init__(self) -> None:
        self.seconds, self._depth = 0.0, 0

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - start
        return timed

    def hook(self, *modules: torch.nn.Module) -> None:
        """Time the modules' forward calls with forward hooks."""
        starts: list[float] = []

        def pre(*_: object) -> None:
            if self._depth == 0:
                starts.append(time.perf_counter())
            self._depth += 1

        def post(*_: object) -> None:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - starts.pop()

        for m in modules:
            m.register_forward_pre_hook(pre)
            m.register_forward_hook(post)


REORDER = Clock()
# generate reorders its cache with Cache.reorder_cache; the search with select_state (the engine's
# one call per step, which the adapter's cache, mask and positions all go through)
DynamicCache.reorder_cache = REORDER.wrap(DynamicCache.reorder_cache)
EncoderDecoderCache.reorder_cache = REORDER.wrap(EncoderDecoderCache.reorder_cache)
engine.select_state = REORDER.wrap(engine.select_state)


def prompts_for(n: int, vocab: int, length: int | None = None) -> list[list[int]]:
    g = torch.Generator().manual_seed(n)
    lengths = [length or 8 + (5 * i) % 9 for i in range(n)]
    return [torch.randint(3, vocab, (k,), generator=g).tolist() for k in lengths]


def padded(model, prompts):
    width = max(map(len, prompts))
    left = not model.config.is_encoder_decoder
    ids = torch.tensor([([PAD] * (width - len(p)) + p) if left else (p + [PAD] * (width - len(p))) for p in prompts])
    return ids, (ids != PAD).long()


SETTINGS = dict(num_beams=BEAMS, max_new_tokens=NEW, eos_token_id=EOS, pad_token_id=PAD, length_penalty=1.0,
                early_stopping=True, do_sample=False)


def run_generate(model, prompts) -> None:
    ids, mask = padded(model, prompts)
    model.generate(input_ids=ids, attention_mask=mask, **SETTINGS)


def run_ours(model, prompts) -> None:
    hf.generate(model, prompts, **SETTINGS)


def run_rule(model, prompts) -> None:
    hf.generate(model, prompts, mode="transformers", **SETTINGS)


def once(fn, model, prompts, forward: Clock) -> tuple[float, float, float]:
    """(total seconds, reorder seconds, share outside the forward) of one call."""
    forward.seconds = REORDER.seconds = 0.0
    start = time.perf_counter()
    with torch.no_grad():
        fn(model, prompts)
    total = time.perf_counter() - start
    return total, REORDER.seconds, 1 - forward.seconds / total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--rows", default="", help="only the rows whose name contains this text")
    args = parser.parse_args()
    rows = [("gpt2 2x128 V=1000", lambda: gpt2(2, 128, 1000), prompts_for(8, 1000)),
            ("bart 2x128 V=1000", lambda: bart(2, 128, 1000), prompts_for(8, 1000)),
            ("gpt2 4x256 V=8000", lambda: gpt2(4, 256, 8000), prompts_for(8, 8000)),
            ("gpt2 4x256 long", lambda: gpt2(4, 256, 8000), prompts_for(8, 8000, length=256))]
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; N=8 prompts (8-16 tokens; 'long': "
          f"256 each), beam {BEAMS}, {NEW} new tokens; median of {args.reps} interleaved repetitions")
    print(f"{'model':<18} {'thr':>3} | {'generate':>8} {'ours':>7} {'speed-up':>8} {'range':>9} | "
          f"{'reorder ms gen':>14} {'ours':>6} | {'share gen':>9} {'ours':>6} | {'rule':>6} {'rule/ours':>9}")
    for name, build, prompts in rows:
        if args.rows not in name:
            continue
        model = build()
        forward = Clock()
        forward.hook(model, *([model.get_encoder()] if model.config.is_encoder_decoder else []))
        cells: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
        for rep in range(args.reps):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                order = [("generate", run_generate), ("ours", run_ours), ("rule", run_rule)]
                for who, fn in order if rep % 2 == 0 else order[::-1]:
                    cells.setdefault((threads, who), []).append(once(fn, model, prompts, forward))
        for threads in (1, 2):
            g = [statistics.median(col) for col in zip(*cells[threads, "generate"], strict=True)]
            o = [statistics.median(col) for col in zip(*cells[threads, "ours"], strict=True)]
            r = statistics.median(c[0] for c in cells[threads, "rule"])
            paired = [a[0] / b[0] for a, b in zip(cells[threads, "generate"], cells[threads, "ours"], strict=True)]
            print(f"{name:<18} {threads:>3} | {g[0]:>8.3f} {o[0]:>7.3f} {g[0] / o[0]:>7.2f}x "
                  f"{min(paired):>4.2f}-{max(paired):<4.2f} | {g[1] * 1e3:>14.1f} {o[1] * 1e3:>6.1f} | "
                  f"{g[2]:>9.1%} {o[2]:>6.1%} | {r:>6.3f} {r / o[0]:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
