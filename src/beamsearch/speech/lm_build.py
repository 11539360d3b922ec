"""Word n-gram language models built from sentences: interpolated modified Kneser-Ney, written as ARPA.

The smoothing is interpolated modified Kneser-Ney (S. F. Chen and J. Goodman, "An Empirical Study
of Smoothing Techniques for Language Modeling", Harvard TR-10-98, 1998, section 3.5 and 4.1.7), as
KenLM's ``lmplz`` estimates it (K. Heafield et al., "Scalable Modified Kneser-Ney Language Model
Estimation", ACL 2013), without pruning:

* every sentence is ``<s> w_1 ... w_m </s>``; ``<s>`` is a context, never predicted;
* the highest order uses raw counts ``c(h w)``; a lower order uses the continuation count
  ``N1+(. h w)`` (how many distinct words precede ``h w``), except an n-gram starting with ``<s>``,
  which no word can precede: it keeps its raw count. Call these ``a(h w)``;
* each order ``n`` has three discounts from the count-of-counts ``t_k`` of its ``a`` (how many
  n-grams have ``a = k``): ``Y = t_1 / (t_1 + 2 t_2)``, ``D_k = k - (k + 1) Y t_{k+1} / t_k`` for
  ``k = 1, 2, 3`` (``D_3`` serves every count >= 3). Where a ``t_k`` is 0 or a ``D_k`` falls outside
  ``(0, k)`` (tiny corpora), the order takes KenLM's ``--discount_fallback`` values
  :data:`FALLBACK_DISCOUNTS` instead, and :class:`KneserNey` lists it in ``fallback_orders``;
* ``p(w | h) = (a(h w) - D(a(h w))) / sum_x a(h x) + b(h) p(w | h')`` with ``h'`` the context
  without its first word and ``b(h) = (D_1 N_1(h .) + D_2 N_2(h .) + D_3 N_3+(h .)) / sum_x a(h x)``
  (``N_k(h .)``: how many words follow ``h`` with ``a = k``); the 1-gram level interpolates with
  the uniform distribution over the predicted words: the corpus's words, ``</s>`` and ``<unk>``
  (whose count is 0, so ``p(<unk>) = b() / |predicted|``).

So every context's distribution sums to 1 over the corpus's words, ``</s>`` and ``<unk>``
(``tests/speech/test_lm_build.py`` checks it by enumeration). The ARPA file holds ``log10 p(w | h)``
of every n-gram seen and ``log10 b(h)`` beside each context (0 for an n-gram that is no context);
``<s>`` is written with the customary log10 probability -99. Any reader that backs off as ARPA says
(:class:`beamsearch.speech.NgramLM`, KenLM) then gives the interpolated probabilities above.

The command::

    python -m beamsearch.speech.lm_build --out LM.arpa [--order 3] [SENTENCES.txt]

reads one sentence a line (whitespace-separated words; blank lines skipped) from the file or stdin.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
"""``(D_1, D_2, D_3+)`` of an order whose count-of-counts cannot give them (KenLM's fallback)."""
BOS_LOG10 = -99.0
"""The log10 probability written for ``<s>``, which is never predicted (the ARPA custom)."""

Gram = tuple[str, ...]


@dataclass(frozen=True)
class KneserNey:
    """An estimated model: per order ``n`` (index ``n - 1``), each n-gram's probability ``p(w | h)``
    and back-off ``b(h w)`` (1.0 where the n-gram is no context), as plain floats; ``discounts[n - 1]``
    the ``(D_1, D_2, D_3+)`` used, and the orders that took :data:`FALLBACK_DISCOUNTS`."""

    prob: tuple[dict[Gram, float], ...]
    backoff: tuple[dict[Gram, float], ...]
    discounts: tuple[tuple[float, float, float], ...]
    fallback_orders: tuple[int, ...]

    @property
    def order(self) -> int:
        return len(self.prob)

    def grams(self) -> list[list[Gram]]:
        """Per order, the n-grams the ARPA file lists, in its order: ``<unk> <s> </s>`` then the
        words sorted, and each higher order sorted."""
        grams = [sorted(p) for p in self.prob]
        grams[0] = [(UNK,), (BOS,), (EOS,)] + [g for g in grams[0] if g[0] not in (UNK, BOS, EOS)]
        return grams


def tokenize(sentences: Iterable[str]) -> list[list[str]]:
    """Each sentence's words (split on whitespace). The markers ``<s>``, ``</s>``, ``<unk>`` are
    refused as words: a ValueError naming the sentence's index and the word."""
    out = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"sentences[{i}] must be a str; got {type(sentence).__name__}")
        words = sentence.split()
        for w in words:
            if w in (BOS, EOS, UNK):
                raise ValueError(f"sentences[{i}] contains the reserved word {w!r}")
        out.append(words)
    return out


def raw_counts(sentences: Sequence[Sequence[str]], order: int) -> list[Counter[Gram]]:
    """``counts[n - 1][gram]``: how often each n-gram (n = 1..order) occurs in the padded sentences."""
    counts: list[Counter[Gram]] = [Counter() for _ in range(order)]
    for words in sentences:
        padded = (BOS, *words, EOS)
        for n in range(1, order + 1):
            for i in range(len(padded) - n + 1):
                counts[n - 1][padded[i : i + n]] += 1
    del counts[0][(BOS,)]  # never predicted
    return counts


def adjusted_counts(raw: list[Counter[Gram]]) -> list[dict[Gram, int]]:
    """``a(gram)`` per order: the raw count at the highest order and for n-grams starting with
    ``<s>``; otherwise the number of distinct words seen before the n-gram."""
    order = len(raw)
    adjusted: list[dict[Gram, int]] = [dict() for _ in range(order)]
    adjusted[-1] = dict(raw[-1])
    for n in range(1, order):
        left: Counter[Gram] = Counter(gram[1:] for gram in raw[n])  # each (n+1)-gram once: one left word
        adjusted[n - 1] = {g: (c if g[0] == BOS else left[g]) for g, c in raw[n - 1].items()}
    return adjusted


def discounts(count_of_counts: Counter[int]) -> tuple[float, float, float] | None:
    """``(D_1, D_2, D_3+)`` from ``t_k`` = ``count_of_counts[k]`` (Chen & Goodman's estimate), or
    None where a ``t_k`` (k = 1..4) is 0 or a ``D_k`` falls outside ``(0, k)``."""
    t = [count_of_counts.get(k, 0) for k in range(1, 5)]
    if min(t) == 0:
        return None
    y = t[0] / (t[0] + 2 * t[1])
    d = tuple(k - (k + 1) * y * t[k] / t[k - 1] for k in (1, 2, 3))
    if not all(0 < dk < k for k, dk in enumerate(d, 1)):
        return None
    return d  # type: ignore[return-value]


def level(adjusted: dict[Gram, int], d: tuple[float, float, float]) -> tuple[dict[Gram, float],
                                                                           dict[Gram, float]]:
    """One order's discounted part ``u(w | h)`` per n-gram and the back-off mass ``b(h)`` per context."""
    total: defaultdict[Gram, int] = defaultdict(int)
    mass: defaultdict[Gram, float] = defaultdict(float)
    for gram, a in adjusted.items():
        total[gram[:-1]] += a
        mass[gram[:-1]] += d[min(a, 3) - 1]
    u = {g: (a - d[min(a, 3) - 1]) / total[g[:-1]] for g, a in adjusted.items()}
    return u, {h: m / total[h] for h, m in mass.items()}


def estimate(sentences: Iterable[str], order: int = 3) -> KneserNey:
    """Interpolated modified Kneser-Ney estimates of an ``order``-gram model of ``sentences``
    (each a str of whitespace-separated words; see the module docstring)."""
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order must be an int >= 1; got {order!r}")
    words = tokenize(sentences)
    if not words:
        raise ValueError("sentences is empty: no text to estimate an LM from")
    adjusted = adjusted_counts(raw_counts(words, order))
    levels, used, fallback = [], [], []
    for n in range(1, order + 1):
        d = discounts(Counter(adjusted[n - 1].values()))
        if d is None:
            d = FALLBACK_DISCOUNTS
            fallback.append(n)
        used.append(d)
        levels.append(level(adjusted[n - 1], d))  # (u(w | h) per n-gram, b(h) per context)
    predicted = [*adjusted[0], (UNK,)]
    uniform = levels[0][1][()] / len(predicted)
    prob = [{g: levels[0][0].get(g, 0.0) + uniform for g in predicted}]
    for n in range(2, order + 1):
        u, b = levels[n - 1]
        prob.append({g: u[g] + b[g[:-1]] * prob[-1][g[1:]] for g in u})
    backoff = [{g: levels[n][1].get(g, 1.0) for g in prob[n - 1]} for n in range(1, order)]
    backoff.append({})
    if order > 1:
        backoff[0][(BOS,)] = levels[1][1].get((BOS,), 1.0)
    return KneserNey(tuple(prob), tuple(backoff), tuple(used), tuple(fallback))


def write_arpa(model: KneserNey, out: TextIO) -> None:
    """The ARPA text of ``model``: log10 probabilities and back-offs, 6 decimals; ``<s>`` at -99."""
    grams = model.grams()
    out.write("\n\\data\\\n")
    for n, gs in enumerate(grams, 1):
        out.write(f"ngram {n}={len(gs)}\n")
    for n, gs in enumerate(grams, 1):
        out.write(f"\n\\{n}-grams:\n")
        prob, back = model.prob[n - 1], model.backoff[n - 1]
        for g in gs:
            p = BOS_LOG10 if g == (BOS,) else math.log10(prob[g])
            tail = f"\t{math.log10(back[g]):.6f}" if n < model.order else ""
            out.write(f"{p:.6f}\t{' '.join(g)}{tail}\n")
    out.write("\n\\end\\\n")


def build_arpa(sentences: Iterable[str], path: str, order: int = 3) -> KneserNey:
    """Estimate an ``order``-gram model of ``sentences`` and write it to ``path`` as ARPA."""
    model = estimate(sentences, order)
    with open(path, "w", encoding="utf-8") as f:
        write_arpa(model, f)
    return model


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m beamsearch.speech.lm_build``: sentences (a file or stdin) to an ARPA file."""
    parser = argparse.ArgumentParser(prog="python -m beamsearch.speech.lm_build",
                                     description="Build a word n-gram ARPA LM (interpolated modified Kneser-Ney) "
                                                 "from sentences, one a line (blank lines skipped).")
    parser.add_argument("sentences", nargs="?", help="a UTF-8 text file (default: stdin)")
    parser.add_argument("--out", required=True, help="the ARPA file to write")
    parser.add_argument("--order", type=int, default=3, help="the n-gram order (default: 3)")
    args = parser.parse_args(argv)
    try:
        if args.sentences:
            with open(args.sentences, encoding="utf-8") as f:
                lines = [line for line in f if line.strip()]
        else:
            lines = [line for line in sys.stdin if line.strip()]
        model = build_arpa(lines, args.out, args.order)
    except (OSError, ValueError, TypeError) as e:
        print(f"lm_build: error: {e}", file=sys.stderr)
        return 1 if isinstance(e, OSError) else 2
    sizes = ", ".join(f"{len(g)} {n}-grams" for n, g in enumerate(model.grams(), 1))
    note = f"; fallback discounts {FALLBACK_DISCOUNTS} at orders {list(model.fallback_orders)}" \
        if model.fallback_orders else ""
    print(f"wrote {args.out}: {len(lines)} sentences, {sizes}{note}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
