"""``model.generate(num_beams=B)`` against ``beamsearch.hf.generate`` on vision-language models:
time, peak memory and the image encoder's rows, at beam 3 and 8.

Two configs (random weights from configs, seeded, nothing downloaded), each a batch of N=2
images 224x224 with their prompts:

- captioning: a ``VisionEncoderDecoderModel`` (ViT encoder, 4 layers, width 256, 16x16 patches:
  196 image tokens; GPT-2 decoder, 4 layers, width 256, vocabulary 8000), no text;
- chat VLM: LLaVA (CLIP vision tower as above; Llama, 4 layers, width 256, vocabulary 8000), a
  prompt of 196 image tokens and 12 text tokens.

Both searches decode the same inputs with the same settings (16 new tokens, eos never produced:
``min_new_tokens=16``, so every run takes all steps; length penalty 1; one sequence per input).

Columns: the seconds of ``generate`` and ours (median of ``--reps`` repetitions, interleaved:
``generate`` then ours, the order alternating between repetitions) and their ratio (> 1: ours is
faster); the peak memory the call adds (MiB: the process's peak resident set during the call,
Linux's VmHWM reset just before it, less its resident set then; each (config, beam, search) in a
fresh process, after a warm-up call at beam 1 with one new token and ``malloc_trim``); the batch
sizes the image encoder is called with (one call of N rows is once per input).

    python benchmarks/bench_hf_multimodal.py             # 3 repetitions, 1 thread
    python benchmarks/bench_hf_multimodal.py --reps 5 --threads 2
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import multiprocessing
import statistics
import time

import torch
import transformers as T

from beamsearch import hf

N, NEW, EOS, PAD, VOCAB, IMAGE = 2, 16, 3, 0, 8000, 7999
VISION = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4, image_size=224,
              patch_size=16)


def captioner():
    """The captioning config, its batch and its image encoder."""
    torch.manual_seed(0)
    encoder = T.ViTConfig(**VISION)
    decoder = T.GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=256, n_layer=4, n_head=4, bos_token_id=1,
                           eos_token_id=EOS, add_cross_attention=True, is_decoder=True)
    model = T.VisionEncoderDecoderModel(T.VisionEncoderDecoderConfig(
        encoder=encoder.to_dict(), decoder=decoder.to_dict(), decoder_start_token_id=1, pad_token_id=PAD,
        eos_token_id=EOS)).eval()
    model.generation_config.decoder_start_token_id = 1
    return model, {"pixel_values": torch.randn(N, 3, 224, 224)}, model.encoder


def chat_vlm():
    """The chat VLM config, its batch and its vision tower."""
    torch.manual_seed(0)
    model = T.LlavaForConditionalGeneration(T.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", **VISION),
        text_config=dict(model_type="llama", vocab_size=VOCAB, hidden_size=256, intermediate_size=1024,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD),
        image_token_index=IMAGE, vision_feature_layer=-1, vision_feature_select_strategy="default")).eval()
    text = torch.randint(10, 1000, (N, 12))
    ids = torch.cat([torch.ones(N, 1, dtype=torch.long), torch.full((N, 196), IMAGE), text], dim=1)
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                   "pixel_values": torch.randn(N, 3, 224, 224)}, model.model.vision_tower


CONFIGS = {"captioning (ViT+GPT-2)": captioner, "chat VLM (LLaVA)": chat_vlm}


def run(search: str, model, batch: dict, beams: int, new: int = NEW):
    settings = dict(max_new_tokens=new, min_new_tokens=new, num_beams=beams, length_penalty=1.0, eos_token_id=EOS,
                    pad_token_id=PAD)
    if search == "generate":
        return model.generate(**batch, do_sample=False, **settings)
    return hf.generate(model, **batch, **settings)


def encoder_rows(search: str, config: str, beams: int) -> list[int]:
    """The batch sizes the image encoder is called with."""
    model, batch, encoder = CONFIGS[config]()
    rows: list[int] = []
    hook = encoder.register_forward_hook(lambda m, args, kwargs, out: rows.append(
        next(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)).shape[0]), with_kwargs=True)
    with torch.no_grad():
        run(search, model, batch, beams, new=1)
    hook.remove()
    return rows


def _status(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: its peak), MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def _peak(search: str, config: str, beams: int, threads: int, out: multiprocessing.Queue) -> None:
    torch.set_num_threads(threads)
    model, batch, _ = CONFIGS[config]()
    with torch.no_grad():
        run(search, model, batch, 1, new=1)  # warm-up (lazy imports, the allocator's first pools), a smaller shape
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)  # freed memory back to the system
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident set (VmHWM) reset to the resident set now
        before = _status("VmRSS")
        run(search, model, batch, beams)
    out.put(_status("VmHWM") - before)


def peak_mib(search: str, config: str, beams: int, threads: int) -> float:
    """The peak memory one call adds, measured in a fresh process (MiB)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_peak, args=(search, config, beams, threads, queue))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"the memory run of {search} on {config} at beam {beams} failed (exit {process.exitcode})")
    return queue.get(timeout=10)


def seconds(config: str, beams: int, reps: int) -> dict[str, float]:
    model, batch, _ = CONFIGS[config]()
    times: dict[str, list[float]] = {"generate": [], "ours": []}
    with torch.no_grad():
        run("generate", model, batch, beams, new=2)
        run("ours", model, batch, beams, new=2)
        for rep in range(reps):
            for search in (("generate", "ours") if rep % 2 == 0 else ("ours", "generate")):
                t0 = time.perf_counter()
                run(search, model, batch, beams)
                times[search].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"transformers {T.__version__}, torch {torch.__version__}, {args.threads} threads, N={N} images 224x224, "
          f"{NEW} new tokens, median of {args.reps}")
    print(f"{'config':<24} {'beam':>4} | {'generate s':>10} {'ours s':>7} {'speed-up':>8} | {'generate MiB':>12} "
          f"{'ours MiB':>8} {'ratio':>6} | {'encoder rows: generate':>22} {'ours':>6}")
    for config in CONFIGS:
        for beams in (3, 8):
            t = seconds(config, beams, args.reps)
            mem = {s: peak_mib(s, config, beams, args.threads) for s in ("generate", "ours")}
            rows = {s: encoder_rows(s, config, beams) for s in ("generate", "ours")}
            print(f"{config:<24} {beams:>4} | {t['generate']:>10.3f} {t['ours']:>7.3f} "
                  f"{t['generate'] / t['ours']:>7.2f}x | {mem['generate']:>12.1f} {mem['ours']:>8.1f} "
                  f"{mem['generate'] / max(mem['ours'], 1e-9):>5.2f}x | {str(rows['generate']):>22} "
                  f"{str(rows['ours']):>6}", flush=True)


if __name__ == "__main__":
    main()
