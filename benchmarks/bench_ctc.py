"""CTC beam search: utterances per second and real-time factor, against pyctcdecode (no LM).

Emissions are synthetic and peaky like a trained CTC model's: each frame's logits are standard
normal noise plus 8 on one label, the blank on 60% of the frames and a random label otherwise
(seeded). 32 utterances of 500 frames; V = 32 (characters) and V = 1024 (SentencePiece-like
pieces); one thread. The real-time factor is decoding time over audio time at 20 ms per frame
(32 x 10 s of audio); utterances per second count the whole batch.

Ours runs exact (no token pruning, no threshold) and with pyctcdecode's default pruning
(``token_min_logp=-5``, ``beam_threshold=10``, its ``beam_prune_logp``). pyctcdecode 0.5.0, if
installed, decodes one utterance at a time with ``decode`` (its defaults; no LM, no hotwords) on
the first ``--peer-utterances`` utterances (it is slow); its throughput is per utterance all the
same. Each time is the best of ``--repeats`` runs. The last column counts the utterances where
pyctcdecode's text equals ours with the same pruning (our text from the same token strings, with
the space or ``▁`` word conventions of docs/speech.md).

A second table times hotwords: 0, 100 and 1,000 random phrases (seeded; 3 to 8 characters at
V = 32, 1 to 4 pieces at V = 1024) for the whole batch, weight 10 (the default) and 2, ours exact; the ratio is each
time over the time without hotwords, measured in the same run (compiling the phrases included).

    python benchmarks/bench_ctc.py
    python benchmarks/bench_ctc.py --quick      # 8 utterances of 200 frames
    python benchmarks/bench_ctc.py --table hotwords
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from beamsearch.speech import Vocabulary, ctc_beam_search  # noqa: E402

FRAME = 0.02  # seconds per frame
BLANK = 0


def emissions(n: int, frames: int, vocab: int, seed: int = 0) -> np.ndarray:
    """float32 ``[n, frames, vocab]`` log-probabilities, peaky as described above."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, frames, vocab)).astype(np.float32)
    peak = np.where(rng.random((n, frames)) < 0.6, BLANK, rng.integers(1, vocab, size=(n, frames)))
    np.put_along_axis(x, peak[:, :, None], np.take_along_axis(x, peak[:, :, None], 2) + 8, 2)
    x -= np.log(np.exp(x).sum(-1, keepdims=True))
    return x


def labels(vocab: int) -> list[str]:
    """Token strings: "" (blank), then characters (V=32) or "▁"-marked pieces (V=1024)."""
    if vocab <= 32:
        chars = list(" abcdefghijklmnopqrstuvwxyz'.,?!-")
        return [""] + chars[: vocab - 1]
    return [""] + [("\u2581" if i % 4 == 0 else "") + f"p{i}" for i in range(1, vocab)]


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def peer(x: np.ndarray, vocab: int, beam: int) -> tuple[float, list[str]] | None:
    """pyctcdecode's seconds per utterance on ``x`` and its best texts (None if it is not installed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pyctcdecode import build_ctcdecoder
    except ImportError:
        return None
    import logging

    logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
    decoder = build_ctcdecoder(labels(vocab))
    start = time.perf_counter()
    texts = [decoder.decode(utt, beam_width=beam) for utt in x]
    return (time.perf_counter() - start) / x.shape[0], texts


def phrases(vocab: int, count: int, seed: int = 1) -> list[list[int]]:
    """``count`` random phrases: 3 to 8 characters (V <= 32) or 1 to 4 pieces (V = 1024)."""
    rng = np.random.default_rng(seed)
    low, high = (3, 8) if vocab <= 32 else (1, 4)
    return [rng.integers(1, vocab, size=int(rng.integers(low, high + 1))).tolist() for _ in range(count)]


def hotword_table(n: int, frames: int, repeats: int, weight: float) -> None:
    """Utterances per second with 0 / 100 / 1,000 hotwords, and each over none."""
    print(f"\nhotword_weight={weight}\n\n| V | beam | hotwords | utt/s | RTF | time / no hotwords |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    audio = n * frames * FRAME
    for vocab in (32, 1024):
        x = emissions(n, frames, vocab)
        for beam in (16, 64):
            base = None
            for count in (0, 100, 1000):
                words = phrases(vocab, count) or None
                secs = best_time(lambda: ctc_beam_search(x, blank=BLANK, beam_size=beam, hotwords=words,
                                                            hotword_weight=weight), repeats)
                base = secs if base is None else base
                print(f"| {vocab} | {beam} | {count:,} | {n / secs:,.1f} | {secs / audio:.5f} | {secs / base:.2f}x |",
                      flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--peer-utterances", type=int, default=4)
    ap.add_argument("--table", choices=("all", "peers", "hotwords"), default="all")
    ap.add_argument("--hotword-weight", type=float, nargs="+", default=[10.0, 2.0])
    args = ap.parse_args()
    n, frames = (8, 200) if args.quick else (32, 500)
    audio = n * frames * FRAME
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}, one thread; "
          f"{n} utterances x {frames} frames ({audio:.0f} s of audio at {FRAME * 1000:.0f} ms/frame)")
    if args.table != "hotwords":
        peer_table(args, n, frames, audio)
    if args.table != "peers":
        for weight in args.hotword_weight:
            hotword_table(n, frames, args.repeats, weight)


def peer_table(args: argparse.Namespace, n: int, frames: int, audio: float) -> None:
    """Ours exact and pruned against pyctcdecode, per V and beam."""
    print("| V | beam | ours exact: utt/s | RTF | ours, pyctcdecode's pruning: utt/s | RTF "
          "| pyctcdecode 0.5.0: utt/s | RTF | ours (pruned) / pyctcdecode | same best text |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for vocab in (32, 1024):
        x = emissions(n, frames, vocab)
        for beam in (16, 64, 128):
            exact = best_time(lambda: ctc_beam_search(x, blank=BLANK, beam_size=beam), args.repeats)
            pruned = best_time(lambda: ctc_beam_search(x, blank=BLANK, beam_size=beam, token_min_logp=-5.0,
                                                       beam_threshold=10.0), args.repeats)
            theirs = peer(x[: args.peer_utterances], vocab, beam)
            row = [f"{vocab}", f"{beam}", f"{n / exact:,.1f}", f"{exact / audio:.5f}",
                   f"{n / pruned:,.1f}", f"{pruned / audio:.5f}"]
            if theirs is None:
                row += ["not installed", "", "", ""]
            else:
                per_utt, texts = theirs
                ours = ctc_beam_search(x[: len(texts)], blank=BLANK, beam_size=beam, token_min_logp=-5.0,
                                       beam_threshold=10.0, vocabulary=Vocabulary(labels(vocab)))
                same = sum(hs[0].text == text for hs, text in zip(ours, texts))
                row += [f"{1 / per_utt:,.2f}", f"{per_utt / (frames * FRAME):.5f}", f"{per_utt * n / pruned:,.1f}x",
                        f"{same}/{len(texts)}"]
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
