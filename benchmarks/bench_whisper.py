"""Whisper-style decoding with temperature fallback: windows per second, ours against
openai/whisper's per-window loop and transformers' ``generate``, CPU, one thread.

One random-weight model (seeded; openai/whisper's ``Whisper(ModelDimensions(...))`` of the
"tiny" shape, or "small" with ``--shape small``, its decoder's positional embedding drawn), its
weights copied into a transformers ``WhisperForConditionalGeneration`` of the same shape, so that
the three decode the same model.
16 windows of 30 s (random log-mel features, 3000 frames), beam 5 at temperature 0, then the
temperatures (0.2, 0.4, ..., 1.0) with ``best_of`` 5 for the windows whose ``avg_logprob`` falls
below ``logprob_threshold``, set to the median of the windows' first decodes (so that about half
fall back; the compression-ratio and no-speech checks off: transformers computes its ratio on token
ids, not text). ``sample_len`` 32 tokens (random weights rarely end a text early).

- openai/whisper: its ``decode_with_fallback`` loop, one window at a time (each attempt runs
  ``whisper.decode``, which encodes the window again; its batched beam search fails);
- ours: :func:`beamsearch.whisper.transcribe_windows` on :class:`OpenAIWhisperStep` (the same
  openai model), every window's attempts batched, each window encoded once, in rounds of fixed
  batches (``refill=False``: whisper's decoder gives every row of a call one position);
- transformers: ``generate`` on the whole batch with its own fallback (``temperature`` a tuple,
  ``logprob_threshold``, ``num_beams`` 5; above 0 it samples one sequence, it has no ``best_of``).

Each time is the best of ``--repeats`` runs, in one process; the ratios are over ours.

    python benchmarks/bench_whisper.py
    python benchmarks/bench_whisper.py --windows 4 --repeats 1     # quick
    python benchmarks/bench_whisper.py --shape small --repeats 1   # openai/whisper's "small" shape
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
TINY = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=384, n_audio_head=6, n_audio_layer=4, n_vocab=51865,
            n_text_ctx=448, n_text_state=384, n_text_head=6, n_text_layer=4)
SMALL = dict(TINY, n_audio_state=768, n_audio_head=12, n_audio_layer=12, n_text_state=768, n_text_head=12,
             n_text_layer=12)  # openai/whisper's "small" (244M parameters)
SHAPES = {"tiny": TINY, "small": SMALL}


def openai_model(dims: dict) -> Any:
    import whisper

    torch.manual_seed(0)
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**dims)).eval()
    with torch.no_grad():
        model.decoder.positional_embedding.normal_(0, 0.5)  # torch.empty in whisper: uninitialized
        for name, p in model.decoder.named_parameters():
            if "blocks" in name and p.ndim == 2:
                p.mul_(4)  # texts that vary
    return model


def hf_copy(model: Any) -> Any:
    """transformers' Whisper of the same shape holding the openai model's weights."""
    import transformers as T

    d = model.dims
    config = T.WhisperConfig(vocab_size=d.n_vocab, num_mel_bins=d.n_mels, d_model=d.n_text_state,
                             encoder_layers=d.n_audio_layer, decoder_layers=d.n_text_layer,
                             encoder_attention_heads=d.n_audio_head, decoder_attention_heads=d.n_text_head,
                             encoder_ffn_dim=4 * d.n_audio_state, decoder_ffn_dim=4 * d.n_text_state,
                             max_source_positions=d.n_audio_ctx, max_target_positions=d.n_text_ctx)
    hf = T.WhisperForConditionalGeneration(config).eval()
    names = {"attn.query": "self_attn.q_proj", "attn.key": "self_attn.k_proj", "attn.value": "self_attn.v_proj",
             "attn.out": "self_attn.out_proj", "cross_attn.query": "encoder_attn.q_proj",
             "cross_attn.key": "encoder_attn.k_proj", "cross_attn.value": "encoder_attn.v_proj",
             "cross_attn.out": "encoder_attn.out_proj", "attn_ln": "self_attn_layer_norm",
             "cross_attn_ln": "encoder_attn_layer_norm", "mlp.0": "fc1", "mlp.2": "fc2", "mlp_ln": "final_layer_norm"}
    state = {}
    for key, value in model.state_dict().items():
        k = key.replace("blocks.", "layers.").replace("encoder.ln_post", "encoder.layer_norm")
        k = k.replace("decoder.ln.", "decoder.layer_norm.").replace("token_embedding", "embed_tokens")
        k = k.replace("decoder.positional_embedding", "decoder.embed_positions.weight")
        k = k.replace("encoder.positional_embedding", "encoder.embed_positions.weight")
        for a, b in sorted(names.items(), key=lambda kv: -len(kv[0])):
            k = k.replace(f".{a}.", f".{b}.")
        state["model." + k] = value
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and not [m for m in missing if "alignment" not in m], (missing, unexpected)
    from whisper.decoding import DecodingOptions, DecodingTask
    from whisper.tokenizer import get_tokenizer

    tok = get_tokenizer(True, num_languages=model.num_languages, language="en", task="transcribe")
    task = DecodingTask.__new__(DecodingTask)
    task.tokenizer, task.options = tok, DecodingOptions()
    gc = hf.generation_config  # what an official checkpoint's generation config holds, from the tokenizer
    gc.decoder_start_token_id, gc.eos_token_id, gc.pad_token_id = tok.sot, tok.eot, tok.eot
    gc.no_timestamps_token_id, gc.prev_sot_token_id = tok.no_timestamps, tok.sot_prev
    gc.lang_to_id, gc.task_to_id = {"<|en|>": tok.language_token}, {"transcribe": tok.transcribe,
                                                                     "translate": tok.translate}
    gc.is_multilingual, gc.max_initial_timestamp_index = True, 50
    gc.suppress_tokens = list(task._get_suppress_tokens())
    gc.begin_suppress_tokens = [*tok.encode(" "), tok.eot]
    return hf


def openai_loop(model: Any, mel: Any, threshold: float, sample_len: int) -> tuple[list[list[int]], int]:
    """whisper's decode_with_fallback, window by window; returns the tokens and the decodes run."""
    from whisper.decoding import DecodingOptions, decode

    out, runs = [], 0
    for m in mel:
        for t in TEMPERATURES:
            kw = dict(beam_size=5) if t == 0 else dict(best_of=5)
            r = decode(model, m, DecodingOptions(language="en", fp16=False, sample_len=sample_len, temperature=t, **kw))
            runs += 1
            if not r.avg_logprob < threshold:
                break
        out.append(r.tokens)
    return out, runs


def ours(model: Any, mel: Any, threshold: float, sample_len: int) -> tuple[list[list[int]], int]:
    from whisper.tokenizer import get_tokenizer

    from beamsearch.whisper import (
        FallbackOptions,
        OpenAIWhisperStep,
        WhisperOptions,
        WhisperTokens,
        initial_tokens,
        transcribe_windows,
    )

    tok = get_tokenizer(True, num_languages=model.num_languages, language="en", task="transcribe")
    wt = WhisperTokens.from_openai(tok)
    prompt = initial_tokens(wt)
    step = OpenAIWhisperStep(model)
    with torch.no_grad():
        features = model.encoder(mel)
    n = mel.shape[0]
    got = transcribe_windows(step, lambda w: step.start(features[w], torch.tensor([prompt] * len(w))), [prompt] * n,
                             wt, WhisperOptions(beam_size=5, sample_len=sample_len),
                             FallbackOptions(TEMPERATURES, None, threshold, None, best_of=5), max_rows=5 * n,
                             detokenize=tok.decode, refill=False)
    return [g.result.tokens for g in got], sum(len(g.temperatures) for g in got)


def transformers_generate(hf: Any, mel: Any, threshold: float, sample_len: int) -> tuple[list[list[int]], int]:
    out = hf.generate(input_features=mel, num_beams=5, max_new_tokens=sample_len, temperature=TEMPERATURES,
                      logprob_threshold=threshold, compression_ratio_threshold=None, no_speech_threshold=None,
                      do_sample=False, language="en", task="transcribe", return_timestamps=True)
    return out.tolist(), -1


def best_of(fn: Any, repeats: int, *args: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sample-len", type=int, default=32)
    parser.add_argument("--no-transformers", action="store_true")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="openai/whisper's model shape")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = openai_model(SHAPES[args.shape])
    mel = torch.randn(args.windows, 80, 3000, generator=torch.Generator().manual_seed(1))
    from whisper.decoding import DecodingOptions, decode

    first = decode(model, mel[0], DecodingOptions(language="en", fp16=False, sample_len=args.sample_len, beam_size=5))
    lp = [decode(model, m, DecodingOptions(language="en", fp16=False, sample_len=args.sample_len,
                                           beam_size=5)).avg_logprob for m in mel]
    threshold = statistics.median(lp)
    assert first.avg_logprob == lp[0]
    print(f"{args.shape} shape, {args.windows} windows, beam 5 then best_of 5, logprob_threshold {threshold:.4f} "
          f"(median of the first decodes: {sum(x < threshold for x in lp)} windows fall back)\n")
    rows = [("ours (transcribe_windows, batched)", *best_of(ours, args.repeats, model, mel, threshold,
                                                             args.sample_len))]
    rows.append(("openai/whisper decode_with_fallback, per window",
                 *best_of(openai_loop, args.repeats, model, mel, threshold, args.sample_len)))
    if not args.no_transformers:
        hf = hf_copy(model)
        rows.append(("transformers generate (its fallback)",
                     *best_of(transformers_generate, args.repeats, hf, mel, threshold, args.sample_len)))
    base = rows[0][1]
    print("| decoder | seconds | windows/s | decodes run | time / ours |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, seconds, (_, runs) in rows:
        print(f"| {name} | {seconds:.2f} | {args.windows / seconds:.2f} | {runs if runs >= 0 else 'n/a'} | "
              f"{seconds / base:.2f} |")
    same = sum(a == b for a, b in zip(rows[0][2][0], rows[1][2][0], strict=True))
    print(f"\nwindows where ours and openai/whisper keep the same tokens: {same} / {args.windows} "
          "(those that pass at temperature 0 must; the samples above 0 differ by construction)")


if __name__ == "__main__":
    main()
