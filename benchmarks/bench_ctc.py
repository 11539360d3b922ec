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

    python benchmarks/bench_ctc.py
    python benchmarks/bench_ctc.py --quick      # 8 utterances of 200 frames
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--peer-utterances", type=int, default=4)
    args = ap.parse_args()
    n, frames = (8, 200) if args.quick else (32, 500)
    audio = n * frames * FRAME
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}, one thread; "
          f"{n} utterances x {frames} frames ({audio:.0f} s of audio at {FRAME * 1000:.0f} ms/frame)")
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
