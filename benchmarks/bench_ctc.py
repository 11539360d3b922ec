"""CTC beam search: utterances per second and real-time factor, against pyctcdecode and flashlight-text.

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
the space or ``▁`` word conventions of docs/speech.md). flashlight-text 0.0.7, if installed, runs
its C++ lexicon-free decoder one utterance at a time on the first ``--flashlight-utterances``
(no LM, log-add merging, every token, a beam threshold of 10: it has no per-frame
``token_min_logp``), its text read through our vocabulary.

A second table times hotwords: 0, 100 and 1,000 random phrases (seeded; 3 to 8 characters at
V = 32, 1 to 4 pieces at V = 1024) for the whole batch, weight 10 (the default) and 2, ours exact; the ratio is each
time over the time without hotwords, measured in the same run (compiling the phrases included).

    python benchmarks/bench_ctc.py
    python benchmarks/bench_ctc.py --quick      # 8 utterances of 200 frames
    python benchmarks/bench_ctc.py --table hotwords
    python benchmarks/bench_ctc.py --table lm

A third table times a word 3-gram LM: an ARPA file of about 100,000 n-grams written by the script
(counted from a random Zipf corpus over 5,000 words; log10 relative frequencies, back-off -0.3),
and emissions spelling random sentences of its words (each label 1 to 3 frames, blanks between;
standard normal logits plus 8 on the frame's label), and the same search without the LM in the same run.
``alpha=0.5, beta=1.0`` for both decoders;
pyctcdecode with ``unk_score_offset=0`` (its -10 default penalises unknown and partial words, which
ours does not) and the same pruning as ours pruned; its last column counts equal best texts. The
same table then times ours pruned with the LM and ``lexicon=`` the LM's 5,000 words, against
flashlight-text's lexicon decoder with the same ARPA file through its KenLM and the same lexicon
(``alpha`` and ``beta`` as its LM weight and word score, log-add merging, a beam threshold of 10,
partial words not smeared), on the first ``--flashlight-utterances``; its last column compares the
best texts but their last words: the emissions end inside a word, which flashlight drops and ours
completes into a lexicon word (or, when none fits, returns no hypothesis).
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

from beamsearch.speech import Lexicon, NgramLM, Vocabulary, ctc_beam_search  # noqa: E402

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


def peer(x: np.ndarray, vocab: int, beam: int, arpa: str | None = None) -> tuple[float, list[str]] | None:
    """pyctcdecode's seconds per utterance on ``x`` and its best texts (None if it is not installed;
    with ``arpa``, its kenlm LM with alpha 0.5, beta 1.0 and no unknown-word offset)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pyctcdecode import build_ctcdecoder
            if arpa is not None:
                __import__("kenlm")  # pyctcdecode's LM needs it
    except ImportError:
        return None
    import logging

    logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
    if arpa is None:
        decoder = build_ctcdecoder(labels(vocab))
    else:
        decoder = build_ctcdecoder(labels(vocab), arpa, alpha=0.5, beta=1.0, unk_score_offset=0.0)
    start = time.perf_counter()
    texts = [decoder.decode(utt, beam_width=beam) for utt in x]
    return (time.perf_counter() - start) / x.shape[0], texts


def flashlight_free(x: np.ndarray, vocab: int, beam: int) -> tuple[float, list[str]] | None:
    """flashlight-text's lexicon-free decoder without an LM (log-add merging, every token, a
    threshold of 10 as ours pruned): seconds per utterance on ``x`` and its best texts (through
    our Vocabulary, for the same word conventions); None if it is not installed."""
    try:
        from flashlight.lib.text import decoder as fl
    except ImportError:
        return None
    opts = fl.LexiconFreeDecoderOptions(beam_size=beam, beam_size_token=vocab, beam_threshold=10.0, lm_weight=0.0,
                                        sil_score=0.0, log_add=True, criterion_type=fl.CriterionType.CTC)
    decoder = fl.LexiconFreeDecoder(opts, fl.ZeroLM(), BLANK, BLANK, [])
    voc = Vocabulary(labels(vocab))
    start = time.perf_counter()
    paths = [list(decoder.decode(utt.ctypes.data, utt.shape[0], utt.shape[1])[0].tokens)
             for utt in np.ascontiguousarray(x, dtype=np.float32)]
    secs = (time.perf_counter() - start) / x.shape[0]
    return secs, [voc.text([a for i, a in enumerate(p) if a != BLANK and (i == 0 or p[i - 1] != a)]) for p in paths]


def flashlight_lexicon(x: np.ndarray, vocab: int, beam: int, arpa: str, words: list[list[int]],
                       texts: list[str]) -> tuple[float, list[str]] | None:
    """flashlight-text's lexicon decoder with its KenLM (``arpa``), the lexicon ``texts`` spelled
    by ``words`` (plus the word delimiter at V = 32, its silence token; at V = 1024, whose words
    start with ``▁``, the silence token is one more label of log-prob -1e4, never emitted: its
    blank may not be its silence, which it allows only between words), ``alpha=0.5`` (as ``lm_weight`` 0.5 x ln 10:
    its LM scores are log10), ``beta=1.0`` as its word score, no unknown words, log-add merging,
    every token, a threshold of 10; partial words' LM scores not smeared. Seconds per utterance
    and its best texts; None if it is not installed."""
    try:
        from flashlight.lib.text import decoder as fl
        from flashlight.lib.text.decoder.kenlm import KenLM
        from flashlight.lib.text.dictionary import Dictionary
    except ImportError:
        return None
    sil = 1 if vocab <= 32 else vocab  # the space between words (V = 32); an added label (V = 1024)
    if vocab > 32:
        x = np.concatenate([x, np.full(x.shape[:2] + (1,), -1e4, dtype=x.dtype)], 2)
    lm = KenLM(arpa, Dictionary(texts))
    trie = fl.Trie(x.shape[2], sil)
    for i, w in enumerate(words):
        trie.insert(list(w) + ([sil] if vocab <= 32 else []), i, 0.0)
    trie.smear(fl.SmearingMode.NONE)
    opts = fl.LexiconDecoderOptions(beam_size=beam, beam_size_token=x.shape[2], beam_threshold=10.0,
                                    lm_weight=0.5 * np.log(10.0), word_score=1.0, unk_score=-np.inf, sil_score=0.0,
                                    log_add=True, criterion_type=fl.CriterionType.CTC)
    decoder = fl.LexiconDecoder(opts, trie, lm, sil, BLANK, -1, [], False)
    start = time.perf_counter()
    found = [list(decoder.decode(utt.ctypes.data, utt.shape[0], utt.shape[1])[0].words)
             for utt in np.ascontiguousarray(x, dtype=np.float32)]
    secs = (time.perf_counter() - start) / x.shape[0]
    return secs, [" ".join(texts[i] for i in ids if i >= 0) for ids in found]


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
                secs = best_time(lambda x=x, beam=beam, words=words: ctc_beam_search(
                    x, blank=BLANK, beam_size=beam, hotwords=words, hotword_weight=weight), repeats)
                base = secs if base is None else base
                print(f"| {vocab} | {beam} | {count:,} | {n / secs:,.1f} | {secs / audio:.5f} | {secs / base:.2f}x |",
                      flush=True)


def lm_words(vocab: int, count: int, rng: np.random.Generator) -> list[list[int]]:
    """``count`` distinct words as label ids: 2 to 7 letters (V = 32) or a "▁" piece and 0 to 2
    more (V = 1024)."""
    marked = np.arange(4, vocab, 4)
    plain = np.setdiff1d(np.arange(1, vocab), marked)
    seen: dict[tuple[int, ...], None] = {}
    while len(seen) < count:
        if vocab <= 32:
            w = tuple(rng.integers(2, 28, size=int(rng.integers(2, 8))).tolist())  # a..z
        else:
            w = (int(rng.choice(marked)),) + tuple(rng.choice(plain, size=int(rng.integers(0, 3))).tolist())
        seen.setdefault(w)
    return list(seen)


def write_arpa(path: str, texts: list[str], rng: np.random.Generator, target: int = 100_000) -> int:
    """A 3-gram ARPA file counted from a random Zipf corpus over ``texts``; returns its n-grams."""
    from collections import Counter

    ranks = np.arange(1, len(texts) + 1)
    p = ranks ** -1.05 / (ranks ** -1.05).sum()
    counts: list[Counter] = [Counter(), Counter(), Counter()]
    while sum(len(c) for c in counts) < target:
        sent = ["<s>"] + [texts[i] for i in rng.choice(len(texts), size=int(rng.integers(5, 20)), p=p)] + ["</s>"]
        for k in range(3):
            counts[k].update(tuple(sent[i : i + k + 1]) for i in range(len(sent) - k))
    counts[0][("<unk>",)] = 1
    total = sum(counts[0].values())
    ctx = [Counter(), Counter()]
    for k in (1, 2):
        for g, c in counts[k].items():
            ctx[k - 1][g[:-1]] += c
    with open(path, "w") as f:
        f.write("\\data\\\n" + "".join(f"ngram {k + 1}={len(c)}\n" for k, c in enumerate(counts)))
        for k, c in enumerate(counts):
            f.write(f"\n\\{k + 1}-grams:\n")
            for g, n in c.items():
                logp = -99.0 if g == ("<s>",) else np.log10(n / (total if k == 0 else ctx[k - 1][g[:-1]])) - 0.1
                bo = "\t-0.3" if k < 2 and g[-1] != "</s>" else ""
                f.write(f"{logp:.4f}\t{' '.join(g)}{bo}\n")
        f.write("\n\\end\\\n")
    return sum(len(c) for c in counts)


def spoken(n: int, frames: int, vocab: int, words: list[list[int]], rng: np.random.Generator) -> np.ndarray:
    """float32 ``[n, frames, vocab]`` log-probs spelling random sentences of ``words``."""
    x = rng.normal(size=(n, frames, vocab)).astype(np.float32)
    for u in range(n):
        path: list[int] = []
        while len(path) < frames:
            labels = list(words[int(rng.integers(len(words)))]) + ([1] if vocab <= 32 else [])  # " " or next "▁"
            for lab in labels:
                path += [BLANK] * int(rng.integers(0, 3)) + [lab] * int(rng.integers(1, 4))
                path += [BLANK] if path[-1:] == [lab] else []
        x[u, np.arange(frames), path[:frames]] += 8
    x -= np.log(np.exp(x).sum(-1, keepdims=True))
    return x


def lm_table(args: argparse.Namespace, n: int, frames: int, audio: float) -> None:
    """Ours with a word 3-gram LM, exact and pruned, against pyctcdecode with the same LM."""
    import tempfile

    print("\n| V | beam | n-grams | ours exact: utt/s | RTF | exact / exact without LM | ours pruned: utt/s | RTF "
          "| pyctcdecode 0.5.0: utt/s | RTF | ours (pruned) / pyctcdecode | same best text "
          "| ours pruned, lexicon: utt/s | RTF | flashlight-text 0.0.7, lexicon: utt/s | RTF "
          "| ours (lexicon) / flashlight | same best text but the last word |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: | ---: | ---: |")
    for vocab in (32, 1024):
        rng = np.random.default_rng(3)
        toks = labels(vocab)
        words = lm_words(vocab, 5000, rng)
        texts = ["".join(toks[t] for t in w).replace("\u2581", "") for w in words]
        path = os.path.join(tempfile.mkdtemp(), "lm.arpa")
        grams = write_arpa(path, texts, rng)
        x = spoken(n, frames, vocab, words, rng)
        voc = Vocabulary(toks)
        lm = NgramLM.from_arpa(path)
        lexicon = Lexicon.of(texts, voc, BLANK)
        for beam in (16, 64):
            kw = dict(blank=BLANK, beam_size=beam, vocabulary=voc, lm=lm, alpha=0.5, beta=1.0)
            exact = best_time(lambda x=x, kw=kw: ctc_beam_search(x, **kw), args.repeats)
            bare = best_time(lambda x=x, beam=beam: ctc_beam_search(x, blank=BLANK, beam_size=beam), args.repeats)
            pruned = best_time(lambda x=x, kw=kw: ctc_beam_search(x, token_min_logp=-5.0, beam_threshold=10.0, **kw),
                               args.repeats)
            row = [f"{vocab}", f"{beam}", f"{grams:,}", f"{n / exact:,.1f}", f"{exact / audio:.5f}",
                   f"{exact / bare:.2f}x", f"{n / pruned:,.1f}", f"{pruned / audio:.5f}"]
            theirs = peer(x[: args.peer_utterances], vocab, beam, path)
            if theirs is None:
                row += ["not installed", "", "", ""]
            else:
                per_utt, their_texts = theirs
                ours = ctc_beam_search(x[: len(their_texts)], token_min_logp=-5.0, beam_threshold=10.0, **kw)
                same = sum(hs[0].text == text for hs, text in zip(ours, their_texts, strict=True))
                row += [f"{1 / per_utt:,.2f}", f"{per_utt / (frames * FRAME):.5f}", f"{per_utt * n / pruned:,.1f}x",
                        f"{same}/{len(their_texts)}"]
            lex_kw = dict(kw, token_min_logp=-5.0, beam_threshold=10.0, lexicon=lexicon)
            with_lex = best_time(lambda x=x, kw=lex_kw: ctc_beam_search(x, **kw), args.repeats)
            row += [f"{n / with_lex:,.1f}", f"{with_lex / audio:.5f}"]
            fl = flashlight_lexicon(x[: args.flashlight_utterances], vocab, beam, path, words, texts)
            row += flashlight_cells(fl, with_lex, n, frames, lambda count, x=x, kw=lex_kw: [
                hs[0].text if hs else "" for hs in ctc_beam_search(x[:count], **kw)], last_word=False)
            print("| " + " | ".join(row) + " |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--peer-utterances", type=int, default=4)
    ap.add_argument("--flashlight-utterances", type=int, default=8)
    ap.add_argument("--table", choices=("all", "peers", "hotwords", "lm"), default="all")
    ap.add_argument("--hotword-weight", type=float, nargs="+", default=[10.0, 2.0])
    args = ap.parse_args()
    n, frames = (8, 200) if args.quick else (32, 500)
    audio = n * frames * FRAME
    print(f"# {platform.processor() or platform.machine()}, numpy {np.__version__}, one thread; "
          f"{n} utterances x {frames} frames ({audio:.0f} s of audio at {FRAME * 1000:.0f} ms/frame)")
    if args.table in ("all", "peers"):
        peer_table(args, n, frames, audio)
    if args.table in ("all", "lm"):
        lm_table(args, n, frames, audio)
    if args.table in ("all", "hotwords"):
        for weight in args.hotword_weight:
            hotword_table(n, frames, args.repeats, weight)


def peer_table(args: argparse.Namespace, n: int, frames: int, audio: float) -> None:
    """Ours exact and pruned against pyctcdecode, per V and beam."""
    print("| V | beam | ours exact: utt/s | RTF | ours, pyctcdecode's pruning: utt/s | RTF "
          "| pyctcdecode 0.5.0: utt/s | RTF | ours (pruned) / pyctcdecode | same best text "
          "| flashlight-text 0.0.7: utt/s | RTF | ours (pruned) / flashlight | same best text |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for vocab in (32, 1024):
        x = emissions(n, frames, vocab)
        for beam in (16, 64, 128):
            exact = best_time(lambda x=x, beam=beam: ctc_beam_search(x, blank=BLANK, beam_size=beam), args.repeats)
            pruned = best_time(lambda x=x, beam=beam: ctc_beam_search(x, blank=BLANK, beam_size=beam,
                                                                      token_min_logp=-5.0, beam_threshold=10.0),
                               args.repeats)
            theirs = peer(x[: args.peer_utterances], vocab, beam)
            row = [f"{vocab}", f"{beam}", f"{n / exact:,.1f}", f"{exact / audio:.5f}",
                   f"{n / pruned:,.1f}", f"{pruned / audio:.5f}"]
            if theirs is None:
                row += ["not installed", "", "", ""]
            else:
                per_utt, texts = theirs
                ours = ctc_beam_search(x[: len(texts)], blank=BLANK, beam_size=beam, token_min_logp=-5.0,
                                       beam_threshold=10.0, vocabulary=Vocabulary(labels(vocab)))
                same = sum(hs[0].text == text for hs, text in zip(ours, texts, strict=True))
                row += [f"{1 / per_utt:,.2f}", f"{per_utt / (frames * FRAME):.5f}", f"{per_utt * n / pruned:,.1f}x",
                        f"{same}/{len(texts)}"]
            def our_texts(count: int, x: np.ndarray = x, beam: int = beam, vocab: int = vocab) -> list[str | None]:
                return [hs[0].text for hs in ctc_beam_search(x[:count], blank=BLANK, beam_size=beam,
                                                             token_min_logp=-5.0, beam_threshold=10.0,
                                                             vocabulary=Vocabulary(labels(vocab)))]
            fl = flashlight_free(x[: args.flashlight_utterances], vocab, beam)
            row += flashlight_cells(fl, pruned, n, frames, our_texts)
            print("| " + " | ".join(row) + " |", flush=True)


def same_but_last(a: list[str], b: list[str]) -> bool:
    """Whether two texts' words agree but for the last word of the shorter (and one more word)."""
    k = min(len(a), len(b))
    return abs(len(a) - len(b)) <= 1 and a[: k - 1] == b[: k - 1]


def flashlight_cells(theirs: tuple[float, list[str]] | None, ours_secs: float, n: int, frames: int,
                     our_texts, last_word: bool = True) -> list[str]:
    """The flashlight columns of a row: its utt/s and RTF, ours (``ours_secs`` for the batch of
    ``n``) over it, and how many of its best texts equal ours (``our_texts(count)``; without
    ``last_word``: the same words but the shorter text's last one, and at most one word more)."""
    if theirs is None:
        return ["not installed", "", "", ""]
    per_utt, texts = theirs
    same = sum(a == b if last_word else same_but_last(a.split(), b.split())
               for a, b in zip(our_texts(len(texts)), texts, strict=True))
    return [f"{1 / per_utt:,.2f}", f"{per_utt / (frames * FRAME):.5f}", f"{per_utt * n / ours_secs:,.1f}x",
            f"{same}/{len(texts)}"]


if __name__ == "__main__":
    main()
