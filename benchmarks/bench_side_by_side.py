"""Two revisions of the speech decoders timed side by side in one process, their calls interleaved.

On a shared machine two runs of a benchmark minutes apart differ by more than a change of a tenth
does (benchmarks/bench_versions.py runs the revisions one after the other). Here the older
revision is checked out into a temporary git worktree, both packages are imported in this one
process (the first one's modules renamed out of the way), and each case calls the two in
alternating order (before, after, after, before, ...), so both see the same load. Each time is
the best of ``--repeats`` calls, with the median beside it. The two must return the same label
sequences (checked). A module imported inside a function (the backends) resolves to the later
import, so the two revisions must have the same ``src/beamsearch/backends`` (checked).

Cases (the emissions and the ARPA file of ``bench_ctc.py --table lm``, smaller): CTC beam search
with the word 3-gram LM and pyctcdecode's pruning (``token_min_logp=-5``, ``beam_threshold=10``),
beam 64, V = 1,024 and V = 32, 32 utterances of ``--frames`` frames; one thread.

    python benchmarks/bench_side_by_side.py --base 057cc85
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))  # bench_ctc imports this checkout's package (its helpers use none)

import bench_ctc  # noqa: E402

sys.path.remove(str(ROOT / "src"))


def speech_of(src: pathlib.Path):
    """``beamsearch.speech`` imported from ``src``, apart from any other copy already imported."""
    for name in [k for k in sys.modules if k == "beamsearch" or k.startswith("beamsearch.")]:
        del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        return importlib.import_module("beamsearch.speech")
    finally:
        sys.path.remove(str(src))


def lm_case(speech, vocab: int, n: int, frames: int, path: str):
    """A call of the pruned CTC search with the LM on the bench's spoken emissions."""
    rng = np.random.default_rng(3)
    toks = bench_ctc.labels(vocab)
    words = bench_ctc.lm_words(vocab, 5000, rng)
    texts = ["".join(toks[t] for t in w).replace("\u2581", "") for w in words]
    if not os.path.exists(path):
        bench_ctc.write_arpa(path, texts, rng)
    else:
        bench_ctc.write_arpa(os.devnull, texts, rng)  # the same draws, so the same emissions
    x = bench_ctc.spoken(n, frames, vocab, words, rng)
    lm, voc = speech.NgramLM.from_arpa(path), speech.Vocabulary(toks)
    return lambda: speech.ctc_beam_search(x, blank=0, beam_size=64, vocabulary=voc, lm=lm, alpha=0.5, beta=1.0,
                                          token_min_logp=-5.0, beam_threshold=10.0)


def side_by_side(fns: dict, repeats: int) -> dict:
    """Each function's times over ``repeats`` calls, alternating which goes first."""
    first = {k: f() for k, f in fns.items()}
    labels = [[[h.tokens for h in hs] for hs in out] for out in first.values()]
    if any(seq != labels[0] for seq in labels):
        raise SystemExit("the two revisions return different hypotheses")
    times: dict = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        for k in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - start)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the older revision")
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = pathlib.Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.base], check=True)
        try:
            backends = "src/beamsearch/backends"
            if subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", args.base, "--", backends]).returncode:
                raise SystemExit(f"{backends} differs from {args.base}: time the two in separate processes")
            versions = {"before": speech_of(tree / "src"), "after": speech_of(ROOT / "src")}
            print(f"{args.base} (before) against this checkout (after), one thread, 32 utterances x "
                  f"{args.frames} frames, best of {args.repeats} interleaved calls (median)\n")
            print("| case | before: s | after: s | after / before | medians: after / before |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for vocab in (1024, 32):
                path = os.path.join(tmp, f"lm{vocab}.arpa")
                fns = {k: lm_case(m, vocab, 32, args.frames, path) for k, m in versions.items()}
                t = side_by_side(fns, args.repeats)
                b, a = min(t["before"]), min(t["after"])
                med = float(np.median(t["after"]) / np.median(t["before"]))
                print(f"| CTC + 3-gram LM, pruned, V = {vocab}, beam 64 | {b:.3f} | {a:.3f} | {a / b:.2f}x | "
                      f"{med:.2f}x |", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


if __name__ == "__main__":
    main()
