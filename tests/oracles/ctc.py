"""Plain references for CTC decoding tests: every alignment enumerated, and a plain Viterbi.

Written from the definition of CTC (Graves et al. 2006): an alignment is one label or blank per
frame; it collapses to a label sequence by merging runs of equal labels and dropping blanks; a
sequence's probability is the sum over its alignments of the product of the frames' probabilities.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def collapse(alignment, blank: int) -> tuple[int, ...]:
    out, prev = [], None
    for a in alignment:
        if a != blank and a != prev:
            out.append(a)
        prev = a
    return tuple(out)


def starts(alignment, blank: int) -> list[tuple[int, int]]:
    """(frame, label) of every label start: a label after a blank, another label, or at frame 0."""
    return [(t, a) for t, a in enumerate(alignment) if a != blank and (t == 0 or alignment[t - 1] != a)]


@functools.cache
def alignments(frames: int, vocab: int, blank: int):
    """Every alignment ``[A, T]``, its collapsed sequence's group ``[A]``, the sequences, and the
    label starts as a bool ``[A, T]``."""
    every = np.array(list(itertools.product(range(vocab), repeat=frames)), dtype=np.int64).reshape(-1, frames)
    seqs: dict[tuple[int, ...], int] = {}
    group = np.array([seqs.setdefault(collapse(a, blank), len(seqs)) for a in every.tolist()], dtype=np.int64)
    start = np.zeros(every.shape, dtype=bool)
    for i, a in enumerate(every.tolist()):
        for t, _ in starts(a, blank):
            start[i, t] = True
    return every, group, list(seqs), start


def brute_force(lp: np.ndarray, blank: int, allowed: np.ndarray | None = None) -> list[tuple[tuple[int, ...], float]]:
    """Every label sequence with a finite probability and its log-probability, best first.

    ``lp`` float64 ``[T, V]`` normalized; ``allowed`` bool ``[T, V]``: only alignments whose every
    label start ``(t, a[t])`` is allowed count (None: all)."""
    frames, vocab = lp.shape
    every, group, seqs, start = alignments(frames, vocab, blank)
    total = lp[np.arange(frames)[None, :], every].sum(1)  # --> [A]
    if allowed is not None:
        ok = ~start | allowed[np.arange(frames)[None, :], every]
        total = np.where(ok.all(1), total, -np.inf)
    acc = np.full(len(seqs), -np.inf)
    np.logaddexp.at(acc, group, total)
    ranked = sorted(((seqs[g], float(acc[g])) for g in range(len(seqs)) if acc[g] > -np.inf),
                    key=lambda pair: -pair[1])
    return ranked


def best_alignment_brute(lp: np.ndarray, labels, blank: int):
    """The best alignment of ``labels`` by enumeration, and whether it is unique (by 1e-9)."""
    frames, vocab = lp.shape
    every, group, seqs, _ = alignments(frames, vocab, blank)
    g = seqs.index(tuple(labels))
    idx = np.flatnonzero(group == g)
    total = lp[np.arange(frames)[None, :], every[idx]].sum(1)
    order = np.argsort(-total)
    unique = len(order) == 1 or total[order[0]] - total[order[1]] > 1e-9
    return every[idx[order[0]]].tolist(), unique


def viterbi(lp: np.ndarray, labels, blank: int) -> list[int]:
    """A plain Viterbi over the extended sequence (blank, y1, blank, ..., yL, blank): the best
    alignment as one label (or blank) per frame."""
    ext = [blank]
    for y in labels:
        ext += [y, blank]
    frames, states = lp.shape[0], len(ext)
    score = [[-np.inf] * states for _ in range(frames)]
    came = [[0] * states for _ in range(frames)]
    score[0][0] = lp[0, ext[0]]
    if states > 1:
        score[0][1] = lp[0, ext[1]]
    for t in range(1, frames):
        for s in range(states):
            options = [(score[t - 1][s], s)]
            if s >= 1:
                options.append((score[t - 1][s - 1], s - 1))
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                options.append((score[t - 1][s - 2], s - 2))
            best, frm = max(options, key=lambda o: o[0])
            score[t][s], came[t][s] = best + lp[t, ext[s]], frm
    ends = [states - 1] + ([states - 2] if states > 1 else [])
    s = max(ends, key=lambda e: score[frames - 1][e])
    path = [s]
    for t in range(frames - 1, 0, -1):
        s = came[t][s]
        path.append(s)
    return [ext[s] for s in reversed(path)]


def runs(alignment, blank: int) -> list[tuple[int, int]]:
    """Each label's first and last frame on an alignment (its maximal run of equal frames)."""
    out: list[tuple[int, int]] = []
    for t, a in enumerate(alignment):
        if a == blank:
            continue
        if t > 0 and alignment[t - 1] == a:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def allowed_starts(lp: np.ndarray, blank: int, top_k=None, min_logp=None, skip=None) -> np.ndarray:
    """bool ``[T, V]``: the label starts each pruning option allows, from its documented rule."""
    frames, vocab = lp.shape
    ok = np.ones((frames, vocab), dtype=bool)
    ok[:, blank] = False
    for t in range(frames):
        if top_k is not None:
            labels = sorted((v for v in range(vocab) if v != blank), key=lambda v: (-lp[t, v], v))
            for v in labels[top_k:]:
                ok[t, v] = False
        if min_logp is not None:
            ok[t] &= lp[t] >= min_logp
        if skip is not None and np.exp(lp[t, blank]) > skip:
            ok[t] = False
    return ok


def prefix_beam_search(lp: np.ndarray, blank: int, beam: int, allowed: np.ndarray | None = None,
                       threshold: float | None = None,
                       frames: list | None = None) -> list[tuple[tuple[int, ...], float]]:
    """A plain CTC prefix beam search, one prefix and one label at a time (a dict of prefixes, so
    identical prefixes merge by log-add): ``beam`` best after each frame, and with ``threshold``
    none more than that below the best. Returns the final prefixes and scores, best first; a list
    given as ``frames`` gets each frame's beam, ``{prefix: (pb, pnb)}``."""
    beams = {(): (0.0, -np.inf)}
    for t in range(lp.shape[0]):
        nxt: dict[tuple[int, ...], list[float]] = {}
        for prefix, (pb, pnb) in beams.items():
            lse = np.logaddexp(pb, pnb)
            entry = nxt.setdefault(prefix, [-np.inf, -np.inf])
            entry[0] = np.logaddexp(entry[0], lse + lp[t, blank])
            if prefix:
                entry[1] = np.logaddexp(entry[1], pnb + lp[t, prefix[-1]])
            for c in range(lp.shape[1]):
                if c == blank or (allowed is not None and not allowed[t, c]):
                    continue
                child = nxt.setdefault(prefix + (c,), [-np.inf, -np.inf])
                child[1] = np.logaddexp(child[1], (pb if prefix and prefix[-1] == c else lse) + lp[t, c])
        ranked = sorted(nxt.items(), key=lambda kv: -np.logaddexp(*kv[1]))[:beam]
        top = np.logaddexp(*ranked[0][1])
        beams = {p: tuple(v) for p, v in ranked if np.logaddexp(*v) > -np.inf
                 and (threshold is None or np.logaddexp(*v) >= top - threshold)}
        if frames is not None:
            frames.append(dict(beams))
    return [(p, float(np.logaddexp(*v))) for p, v in sorted(beams.items(), key=lambda kv: -np.logaddexp(*kv[1]))]


def random_arpa(rng, order: int, words: list[str], per_order: int, unk: bool = True) -> str:
    """A well-formed random ARPA text: 1-grams ``words`` + ``<s>``, ``</s>`` (and ``<unk>``), then
    up to ``per_order`` n-grams per order whose context and suffix are n-grams; back-offs random
    (some positive) on every n-gram below the top order that does not end in ``</s>``."""
    vocab = list(words) + ["<s>", "</s>"] + (["<unk>"] if unk else [])
    grams = [[(w,) for w in vocab]]
    for k in range(2, order + 1):
        prev, found = set(grams[-1]), set()
        contexts = [g for g in grams[-1] if "</s>" not in g and "<s>" not in g[1:]]
        for _ in range(per_order * 4):
            if not contexts or len(found) >= per_order:
                break
            g = contexts[rng.integers(len(contexts))] + (vocab[rng.integers(len(vocab))],)
            if g[-1] != "<s>" and (k == 2 or g[1:] in prev):
                found.add(g)
        if not found:
            break
        grams.append(sorted(found))
    lines = ["\\data\\"] + [f"ngram {k}={len(g)}" for k, g in enumerate(grams, 1)]
    for k, gs in enumerate(grams, 1):
        lines += ["", f"\\{k}-grams:"]
        for g in gs:
            p = -99.0 if g == ("<s>",) else round(float(rng.uniform(-3, -0.05)), 4)
            tail = f"\t{round(float(rng.uniform(-1.5, 0.3)), 4)}" if k < len(grams) and g[-1] != "</s>" else ""
            lines.append(f"{p}\t{' '.join(g)}{tail}")
    return "\n".join(lines + ["", "\\end\\", ""])


class PlainLM:
    """An ARPA model as a dict, scored one word at a time from the textbook back-off rule (as
    KenLM does it: an unknown word is ``<unk>``, log10 -100 if the file has none)."""

    def __init__(self, text: str):
        self.grams: dict[tuple[str, ...], tuple[float, float]] = {}
        self.order, section = 0, 0
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("\\") and line.endswith("-grams:"):
                section = int(line[1:].split("-")[0])
                self.order = section
            elif line and section and not line.startswith("\\"):
                parts = line.split()
                bo = float(parts[section + 1]) if len(parts) == section + 2 else 0.0
                self.grams[tuple(parts[1 : section + 1])] = (float(parts[0]), bo)
        self.grams.setdefault(("<unk>",), (-100.0, 0.0))

    def log10(self, history: tuple[str, ...], word: str) -> float:
        """log10 p(word | history), history the whole sentence so far (from ``<s>``)."""
        word = word if (word,) in self.grams else "<unk>"
        history = tuple(w if (w,) in self.grams else "<unk>" for w in history)
        history = history[max(0, len(history) - self.order + 1):]
        if history + (word,) in self.grams:
            return self.grams[history + (word,)][0]
        bo = self.grams[history][1] if history in self.grams else 0.0
        return bo + self.log10(history[1:], word)

    def sentence(self, words, eos: bool = True) -> float:
        """Natural-log probability of ``words`` then ``</s>`` (if ``eos``), started at ``<s>``."""
        hist, total = ("<s>",), 0.0
        for w in list(words) + (["</s>"] if eos else []):
            total += self.log10(hist, w)
            hist = hist + (w,)
        return total * np.log(10.0)
