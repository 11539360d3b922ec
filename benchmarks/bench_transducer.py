"""Transducer decoding time: greedy, modified beam search and ALSD at beam 4 and 8, batched
against a per-utterance loop of the same search (docs/transducer.md).

Models: transformers' ``ParakeetForRNNT`` and ``ParakeetForTDT`` built from small configs with
seeded random weights (decoder: 1 LSTM layer of 320, vocabulary 257 with the blank, TDT durations
0 to 4; the joint's head scaled by 4 so that it is peaky), wrapped by ``beamsearch.hf.transducer``.
With ``--zoo``, also the speech model trained here (``beamsearch.zoo.speech``: its TDT head, an
LSTM predictor of 96, 29 labels, durations 0 to 4, up to 4 labels a frame) on ``--n`` held-out
recordings spoken by espeak-ng (``synth.make_set(n, 0, "heldout")``). The encoder runs once,
outside the timings: the table times decoding from the encoder frames
(32 utterances of ``--frames`` frames). One thread; each time is the best of ``--repeats`` runs.
The per-utterance loop decodes the first ``--loop`` utterances one at a time (once) and its time
is scaled to the batch's size (x 32 / 8 by default: it is slow). The ratios are measured in the
same run: each search's time over greedy's (batched), and the per-utterance loop's time over the
batched one's.

    python benchmarks/bench_transducer.py
    python benchmarks/bench_transducer.py --quick     # 8 utterances of 20 frames, one repeat
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

from beamsearch.hf.transducer import transducer_functions  # noqa: E402
from beamsearch.speech import transducer_beam_search, transducer_greedy  # noqa: E402

VOCAB = 257
ENCODER = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
               subsampling_conv_channels=8, num_mel_bins=16, subsampling_factor=4, dropout=0.0, layerdrop=0.0,
               activation_dropout=0.0, attention_dropout=0.0)


def model_of(kind: str):
    torch.manual_seed(0)
    cls, cfg = ((transformers.ParakeetForRNNT, transformers.ParakeetRNNTConfig) if kind == "RNN-T"
                else (transformers.ParakeetForTDT, transformers.ParakeetTDTConfig))
    model = cls(cfg(encoder_config=ENCODER, vocab_size=VOCAB, blank_token_id=VOCAB - 1, pad_token_id=VOCAB - 1,
                    decoder_hidden_size=320, num_decoder_layers=1, max_symbols_per_step=5)).eval()
    with torch.no_grad():
        model.joint.head.weight.mul_(4)
    return model


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run(options, search: dict, rows=None):
    """One decode of the utterances ``rows`` (all: None) with the search's options; ``options()``
    gives the search's keywords for all utterances (``max_symbols_per_frame`` among them)."""
    opts = options()
    if rows is not None:
        opts.update(encoder_out=opts["encoder_out"][rows], lengths=opts["lengths"][rows],
                    state=tuple(s[rows] for s in opts["state"]))
    if search["beam"] == 1:
        return transducer_greedy(**opts)
    return transducer_beam_search(**opts, beam_size=search["beam"], method=search["method"])


def parakeet(kind: str, args):
    """The keywords of a random-weight Parakeet model over random features."""
    model = model_of(kind)
    x = torch.randn(args.n, args.frames * 4, 16, generator=torch.Generator().manual_seed(1))
    fns = transducer_functions(model, x)
    return lambda: dict(fns.options(), max_symbols_per_frame=5)


def zoo(args):
    """The keywords of the speech model trained here over held-out espeak-ng recordings."""
    from beamsearch.zoo.speech import load
    from beamsearch.zoo.speech.model import BLANK
    from beamsearch.zoo.speech.recognizer import MAX_SYMBOLS
    from beamsearch.zoo.speech.synth import make_set

    model = load()
    enc, lengths = model.encode([u.audio for u in make_set(args.n, 0, "heldout")])
    predictor, joint = model.net.transducer_functions()
    durations = list(model.net.cfg.durations)
    return lambda: dict(encoder_out=enc, lengths=lengths, predictor=predictor, joint=joint, blank=BLANK,
                        state=model.net.initial_state(len(enc)), durations=durations,
                        max_symbols_per_frame=MAX_SYMBOLS)


def table(args) -> None:
    print(f"| model | search | batch {args.n}: s | x greedy | per-utterance loop: s | loop / batch |")
    print("|---|---|---|---|---|---|")
    models = [("RNN-T", lambda: parakeet("RNN-T", args)), ("TDT", lambda: parakeet("TDT", args))]
    if args.zoo:
        models.append(("speech model (TDT, trained here)", lambda: zoo(args)))
    for kind, make in models:
        fns = make()
        greedy = None
        for name, search in [("greedy", dict(beam=1)), ("modified, beam 4", dict(beam=4, method="modified")),
                             ("modified, beam 8", dict(beam=8, method="modified")),
                             ("alsd, beam 4", dict(beam=4, method="alsd")),
                             ("alsd, beam 8", dict(beam=8, method="alsd"))]:
            batch = best_of(args.repeats, lambda fns=fns, search=search: run(fns, search))
            greedy = batch if greedy is None else greedy
            few = min(args.loop, args.n)
            loop = best_of(1, lambda fns=fns, search=search, few=few: [run(fns, search, slice(i, i + 1))
                                                                     for i in range(few)]) * args.n / few
            print(f"| {kind} | {name} | {batch:.3f} | {batch / greedy:.2f} | {loop:.3f} | {loop / batch:.1f} |",
                  flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--frames", type=int, default=50)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--loop", type=int, default=8, help="utterances the per-utterance loop decodes")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--zoo", action="store_true", help="also the speech model trained here (needs espeak-ng)")
    args = p.parse_args()
    if args.quick:
        args.n, args.frames, args.repeats = 8, 20, 1
    torch.set_num_threads(1)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, one thread, {args.n} utterances x {args.frames} frames")
    with torch.no_grad():
        table(args)


if __name__ == "__main__":
    main()
