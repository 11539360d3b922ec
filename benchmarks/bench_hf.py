"""``generate(num_beams=B)`` against ``beamsearch.hf`` + ``beam_search_batch``, side by side.

Same models (random weights from configs, seeded), same prompts, same machine, one run. For each
search: total seconds, seconds inside the model's forward (measured with forward hooks on the
model and its encoder, the same way for both), and the search's share of the total (everything
outside the forward). 32 new tokens; the models almost never produce eos, so both run all 32.

    python benchmarks/bench_hf.py            # the full grid
    python benchmarks/bench_hf.py --quick    # one model, fewer settings
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch
import transformers

from beamsearch import beam_search_batch, beam_search_each
from beamsearch.hf import causal_lm, seq2seq_lm

EOS, PAD = 2, 0


def gpt2(layers: int, width: int, vocab: int):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=128, n_embd=width, n_layer=layers, n_head=4,
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


class ForwardClock:
    """Seconds spent inside ``modules``' forward calls (outermost calls only)."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        self.seconds, self._depth, self._start = 0.0, 0, 0.0
        for m in modules:
            m.register_forward_pre_hook(self._pre)
            m.register_forward_hook(self._post)

    def _pre(self, *_: object) -> None:
        if self._depth == 0:
            self._start = time.perf_counter()
        self._depth += 1

    def _post(self, *_: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._start


def prompts_for(n: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(n)
    lengths = [8 + (5 * i) % 9 for i in range(n)]
    return [torch.randint(3, vocab, (length,), generator=g).tolist() for length in lengths]


def run_generate(model, prompts, beams: int, ngram: int, new: int) -> None:
    width = max(map(len, prompts))
    left = not model.config.is_encoder_decoder
    ids = torch.tensor([([PAD] * (width - len(p)) + p) if left else (p + [PAD] * (width - len(p))) for p in prompts])
    mask = (ids != PAD).long()
    model.generate(input_ids=ids, attention_mask=mask, num_beams=beams, do_sample=False, max_new_tokens=new,
                   no_repeat_ngram_size=ngram, eos_token_id=EOS, pad_token_id=PAD,
                   **({"length_penalty": 1.0, "early_stopping": True} if beams > 1 else {}))


def run_ours(model, prompts, beams: int, ngram: int, new: int) -> None:
    dec = (seq2seq_lm if model.config.is_encoder_decoder else causal_lm)(model, prompts)
    if beams == 1 and ngram == 0:  # greedy, stopping at eos as generate(num_beams=1) does
        beam_search_each(dec.step, dec.init_state, len(prompts), dec.prompts[0][-1], dec.eos_token_id, 1, new, 0.0)
        return
    # beam 1 with n-gram blocking: the batched rule, which goes on past an eos extension
    beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=new,
                      beam_size=beams, no_repeat_ngram_size=ngram, alpha=1.0, length_penalty="power")


def measure(fn, model, clock: ForwardClock, *args: object, reps: int = 2) -> tuple[float, float]:
    best = (float("inf"), 0.0)
    for _ in range(reps):
        clock.seconds = 0.0
        start = time.perf_counter()
        with torch.no_grad():
            fn(model, *args)
        total = time.perf_counter() - start
        if total < best[0]:
            best = (total, clock.seconds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--new", type=int, default=32)
    args = parser.parse_args()
    models = {"gpt2 2x128 V=1000": lambda: gpt2(2, 128, 1000), "gpt2 4x256 V=8000": lambda: gpt2(4, 256, 8000),
              "bart 2x128 V=1000": lambda: bart(2, 128, 1000)}
    if args.quick:
        models = dict(list(models.items())[:1])
    print(f"transformers {transformers.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"{args.new} new tokens; seconds, best of 2")
    print(f"{'model':<18} {'N':>2} {'B':>2} {'ngram':>5} | {'generate':>8} {'fwd':>7} {'share':>6} | "
          f"{'ours':>8} {'fwd':>7} {'share':>6} | {'speed-up':>8}")
    for name, build in models.items():
        model = build()
        clock = ForwardClock(model, *([model.get_encoder()] if model.config.is_encoder_decoder else []))
        vocab = model.config.vocab_size
        for n, beams, ngram in itertools.product([1, 8], [1, 4, 8], [0, 3]):
            if args.quick and (n, ngram) != (8, 0):
                continue
            prompts = prompts_for(n, vocab)
            g_total, g_fwd = measure(run_generate, model, clock, prompts, beams, ngram, args.new)
            o_total, o_fwd = measure(run_ours, model, clock, prompts, beams, ngram, args.new)
            print(f"{name:<18} {n:>2} {beams:>2} {ngram:>5} | {g_total:>8.3f} {g_fwd:>7.3f} {1 - g_fwd / g_total:>6.1%} | "
                  f"{o_total:>8.3f} {o_fwd:>7.3f} {1 - o_fwd / o_total:>6.1%} | {g_total / o_total:>7.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
