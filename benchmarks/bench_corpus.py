"""Corpus decoding: refill against fixed batches of the same size (same outputs), and against
`generate()` in fixed batches, side by side in one run.

Rows:
- the 2,000 dates test sources with each shipped zoo model (beam 5);
- 1,000 prompts to a random-weight GPT-2 (2 layers, 128 wide, V=1000, saved with a word tokenizer
  and read back through ``hf:DIR``) with widely varied output lengths: each line asks for its own
  ``max_steps``, 2 to 60, and eos is masked throughout (``min_new_tokens`` = 60 on both sides), so
  every input runs exactly to its own limit (ours) or its batch's longest (``generate``), beam 4;
- 1,000 sources to a random-weight BART (2+2 layers, 128 wide) the same way (refill and fixed
  batches only).

"fixed" is the same decoding path with joining allowed only when the whole batch has finished
(``refill = False``), so the two give the same records; `generate()` decodes the GPT-2 prompts in
batches of the same size with ``max_new_tokens`` = the batch's longest request (it has no per-input
limit), so it does more work and its outputs are not compared. Inputs per second and rows per
model call (utilisation = rows per call / max_rows) are reported.

    python benchmarks/bench_corpus.py            # everything (a few minutes)
    python benchmarks/bench_corpus.py --quick    # 300 dates, 200 prompts
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import torch

from beamsearch.corpus import Line, decode_records, hf_model
from beamsearch.zoo.corpus_model import zoo_model

BEAM_DATES, BEAM_GPT2, ROWS, LONGEST = 5, 4, 320, 60


def timed(model, lines, beam, *, refill: bool, **search) -> tuple[float, list[dict], float]:
    """(seconds, records by index, rows per call) of one decode."""
    model.refill = refill
    calls = rows = 0
    step = model.step

    def counting(state, y_prev):
        nonlocal calls, rows
        calls, rows = calls + 1, rows + len(y_prev)
        return step(state, y_prev)

    model.step = counting
    start = time.perf_counter()
    with torch.no_grad():
        records = sorted(decode_records(model, lines, beam_size=beam, max_rows=ROWS, **search),
                         key=lambda r: r["index"])
    seconds = time.perf_counter() - start
    model.step = step
    return seconds, records, rows / max(calls, 1)


def row(name: str, n: int, fixed: tuple, refill: tuple, generate: float | None = None) -> None:
    same = [r.get("nbest", [{}])[0].get("tokens") for r in fixed[1]] == \
           [r.get("nbest", [{}])[0].get("tokens") for r in refill[1]]
    gen = "-" if generate is None else f"{n / generate:.0f}"
    ratio = "-" if generate is None else f"{generate / refill[0]:.2f}x"
    print(f"| {name} | {n} | {n / fixed[0]:.0f} | {fixed[2] / ROWS:.2f} | {n / refill[0]:.0f} | {refill[2] / ROWS:.2f} "
          f"| {fixed[0] / refill[0]:.2f}x | {gen} | {ratio} | {'yes' if same else 'NO'} |", flush=True)


def dates(limit: int | None) -> None:
    from beamsearch.zoo.dates import make_splits
    from beamsearch.zoo.train import DATA_SEED

    test = make_splits(seed=DATA_SEED)["test"][:limit]
    lines = [Line(i, ex.source) for i, ex in enumerate(test)]
    for name in ("seq2seq", "transformer"):
        model = zoo_model(name)
        row(f"dates, zoo {name}", len(lines), timed(model, lines, BEAM_DATES, refill=False),
            timed(model, lines, BEAM_DATES, refill=True))


WORDS = [f"w{i}" for i in range(996)]
VOCAB = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[BOS]", "[EOS]"] + WORDS)}


def word_lines(seed: int, count: int) -> list[Line]:
    """``count`` lines of 4 to 12 random words, each with its own max_steps (2 to LONGEST)."""
    rng = random.Random(seed)
    return [Line(i, " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))), max_steps=rng.randint(2, LONGEST))
            for i in range(count)]


def fixed_and_refill(folder: str, lines: list[Line]) -> tuple[tuple, tuple]:
    """The lines through ``hf:folder`` in fixed batches, then with refill (eos masked throughout)."""
    model = hf_model(folder)
    return (timed(model, lines, BEAM_GPT2, refill=False, min_new_tokens=LONGEST),
            timed(model, lines, BEAM_GPT2, refill=True, min_new_tokens=LONGEST))


def hf_folder(model, vocab: dict[str, int]) -> str:
    """``model`` and a word-level tokenizer over ``vocab`` saved to a fresh folder (what hf: reads)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tempfile.mkdtemp(prefix="bench_corpus_hf_")
    model.save_pretrained(folder)
    inner = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                            eos_token="[EOS]").save_pretrained(folder)
    return folder


def bart(count: int) -> None:
    """An encoder-decoder through hf: (refill joins its decoder caches and encoder outputs):
    random-weight BART, 2+2 layers, 128 wide, sources of 4-12 words, each line its own max_steps."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BartConfig(vocab_size=len(VOCAB), d_model=128, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                                  decoder_ffn_dim=256, max_position_embeddings=128, bos_token_id=2, eos_token_id=3,
                                  pad_token_id=0, decoder_start_token_id=2, forced_bos_token_id=None,
                                  forced_eos_token_id=None)
    folder = hf_folder(transformers.BartForConditionalGeneration(cfg).eval(), VOCAB)
    fixed, refill = fixed_and_refill(folder, word_lines(1, count))
    row("BART 2+2x128 V=1000 via hf:, max_steps 2-60", count, fixed, refill)


def gpt2(count: int) -> None:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(VOCAB), n_positions=128, n_embd=128, n_layer=2, n_head=4,
                                  bos_token_id=2, eos_token_id=3, pad_token_id=0)
    gpt = transformers.GPT2LMHeadModel(cfg).eval()
    lines = word_lines(0, count)
    fixed, refill = fixed_and_refill(hf_folder(gpt, VOCAB), lines)
    per_batch = ROWS // BEAM_GPT2
    start = time.perf_counter()
    with torch.no_grad():
        for at in range(0, count, per_batch):
            part = lines[at : at + per_batch]
            ids = [[VOCAB[w] for w in line.text.split()] for line in part]
            width = max(map(len, ids))
            padded = torch.tensor([[0] * (width - len(x)) + x for x in ids])
            gpt.generate(input_ids=padded, attention_mask=(padded != 0).long(), num_beams=BEAM_GPT2,
                         max_new_tokens=(longest := max(line.max_steps for line in part)), min_new_tokens=longest,
                         eos_token_id=3, pad_token_id=0,
                         do_sample=False, early_stopping=True, length_penalty=1.0)
    row("GPT-2 2x128 V=1000 via hf:, max_steps 2-60", count, fixed, refill, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; max_rows {ROWS}; inputs per second")
    print()
    print("| corpus | inputs | fixed | rows/call | refill | rows/call | refill vs fixed | generate | refill vs "
          "generate | same outputs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    dates(300 if args.quick else None)
    gpt2(200 if args.quick else 1000)
    bart(200 if args.quick else 1000)


if __name__ == "__main__":
    main()
