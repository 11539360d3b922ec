"""Wide beams over a recurrent and a hybrid model: ``generate(num_beams=B)`` against
``beamsearch.hf.generate``, time and cache bytes, at beam 16, 256 and 1,024.

Models (random weights from configs, seeded): a Mamba-like model (2 Mamba layers, 64 wide,
V=1000: a fixed-size convolution and state-space state per row, no keys or values) and a hybrid
(Qwen3.5-like: a gated-delta-net linear-attention layer and a full-attention layer, 64 wide,
V=1000). One prompt of 32 tokens, 16 new tokens, eos 2 (these random models almost never say it,
so both run every step), length penalty 1. Repetitions are interleaved (``generate`` then ours,
the order alternating), each cell the median.

Columns: seconds of ``generate`` and ours and their ratio (``speed-up`` > 1: ours is faster); the
peak bytes of the cache the model is handed (the largest, over the forward calls, of the storage
behind every tensor of its layers: keys, values, convolution and recurrent states; a buffer
allocated with room counts whole) for each and their ratio (``saved`` > 1: ours holds less);
"prefill rows": the rows of the prompt's forward (``generate`` expands the prompt to the beams
before it; ours runs it once per input and copies the state).

    python benchmarks/bench_recurrent.py               # both models, beams 16 256 1024, 3 repetitions
    python benchmarks/bench_recurrent.py --beams 16 --reps 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers

from beamsearch import hf
from beamsearch.hf.caches import cache_of

EOS, PAD, NEW, PROMPT, VOCAB = 2, 0, 16, 32, 1000


def mamba():
    torch.manual_seed(0)
    return transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=VOCAB, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2, conv_kernel=4,
        bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD)).eval()


def hybrid():
    torch.manual_seed(0)
    return transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention"], bos_token_id=1, eos_token_id=EOS,
        pad_token_id=PAD)).eval()


MODELS = {"mamba 2x64 V=1000": mamba, "qwen3.5 hybrid 2x64 V=1000": hybrid}


def _tensors(obj, out: list) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, out)


def cache_bytes(cache) -> int:
    """The bytes of the storage behind every tensor of the cache's layers (each storage once)."""
    found: list[torch.Tensor] = []
    for layer in getattr(cache, "layers", []):
        _tensors(vars(layer), found)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in found if t.dim() > 0}
    return sum(storages.values())


class Meter:
    """Forward hook: the peak cache bytes handed back by the model, and the prefill's rows."""

    def __init__(self, model) -> None:
        self.peak, self.prefill_rows = 0, 0
        model.register_forward_hook(self.after, with_kwargs=True)

    def after(self, module, args, kwargs, out) -> None:
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 1:
            self.prefill_rows = int(ids.shape[0])
        cache = cache_of(out)
        if cache is not None:
            self.peak = max(self.peak, cache_bytes(cache))


def run(which: str, model, prompt: list[int], beams: int, meter: Meter) -> tuple[float, int, int]:
    """(seconds, peak cache bytes, prefill rows) of one call."""
    settings = dict(num_beams=beams, num_return_sequences=1, max_new_tokens=NEW, eos_token_id=EOS, pad_token_id=PAD,
                    length_penalty=1.0, early_stopping=True, do_sample=False)
    meter.peak = meter.prefill_rows = 0
    start = time.perf_counter()
    with torch.no_grad():
        if which == "generate":
            model.generate(input_ids=torch.tensor([prompt]),
                           attention_mask=torch.ones(1, len(prompt), dtype=torch.long), **settings)
        else:
            hf.generate(model, [prompt], **settings)
    return time.perf_counter() - start, meter.peak, meter.prefill_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beams", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    prompt = torch.randint(3, VOCAB, (PROMPT,), generator=torch.Generator().manual_seed(0)).tolist()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; one prompt of {PROMPT} tokens, "
          f"{NEW} new tokens, 1 thread; median of {args.reps} interleaved repetitions")
    print(f"{'model':27} {'beam':>5} | {'generate s':>10} {'ours s':>8} {'speed-up':>8} | {'cache MB gen':>12} "
          f"{'ours':>7} {'saved':>6} | prefill rows gen ours")
    for name, build in MODELS.items():
        model = build()
        meter = Meter(model)
        for beams in args.beams:
            rows: dict[str, list[tuple[float, int, int]]] = {"generate": [], "ours": []}
            for rep in range(args.reps):
                for which in (("generate", "ours") if rep % 2 == 0 else ("ours", "generate")):
                    rows[which].append(run(which, model, prompt, beams, meter))
            gen_s, ours_s = (statistics.median(r[0] for r in rows[w]) for w in ("generate", "ours"))
            gen_b, ours_b = rows["generate"][0][1], rows["ours"][0][1]
            print(f"{name:27} {beams:>5} | {gen_s:>10.3f} {ours_s:>8.3f} {gen_s / ours_s:>7.2f}x | "
                  f"{gen_b / 2**20:>12.2f} {ours_b / 2**20:>7.2f} {gen_b / max(ours_b, 1):>5.2f}x | "
                  f"{rows['generate'][0][2]:>12} {rows['ours'][0][2]:>4}")


if __name__ == "__main__":
    main()
