"""Greedy against beam search on the fixed dates test set, and how well "no date" is told apart."""

from __future__ import annotations

import time

import torch

from beamsearch.zoo.dates import Example, make_splits
from beamsearch.zoo.train import DATA_SEED
from beamsearch.zoo.translator import Output, Translator


def held_out(limit: int = 2000) -> list[Example]:
    """The first ``limit`` examples of the fixed test set (dates and non-dates, never seen in training)."""
    return make_splits(seed=DATA_SEED)["test"][:limit]


def printed(translator: Translator, outputs: list[Output], examples: list[Example]) -> list[bool]:
    """Whether ``beamsearch translate`` prints ``outputs[i]`` as the date of ``examples[i]`` (its
    :meth:`~Translator.verdicts` is None, the century check included)."""
    verdicts = translator.verdicts([e.source for e in examples], [[o] for o in outputs])
    return [v is None for v in verdicts]


def right(translator: Translator, outputs: list[Output], examples: list[Example]) -> list[bool]:
    """Per output: a date is right when it is printed and equals the target; a non-date when no
    date is printed."""
    return _judged(printed(translator, outputs, examples), outputs, examples)


def _judged(shown: list[bool], outputs: list[Output], examples: list[Example]) -> list[bool]:
    """:func:`right` given which outputs are printed."""
    return [s and o.text == e.target if e.target else not s for s, o, e in zip(shown, outputs, examples, strict=True)]


def evaluate_model(translator: Translator, name: str, beams: list[int], *, alpha: float = 0.6, limit: int = 2000,
                   calendar: bool = True, forms: bool = False) -> str:
    """A table, per beam size (1 = greedy: one live row): exact match on the dates (all, two-digit
    years, four-digit years: an output counts when it is printed and right), the share of non-dates
    answered "no date" (caught) and of dates refused (false alarms), the mean logprob of the best
    output on the dates, the time; then, per beam size, how often it and greedy disagree on a date
    and who was right; with ``forms``, exact match per form of writing."""
    test = held_out(limit)
    texts = [e.source for e in test]
    dates = [i for i, e in enumerate(test) if e.target]
    non = [i for i, e in enumerate(test) if not e.target]
    two = [i for i in dates if test[i].two_digit_year]
    four = [i for i in dates if not test[i].two_digit_year]
    lines = [f"model {name}, {len(test)} test examples: {len(dates)} dates ({len(two)} with two-digit years), "
             f"{len(non)} non-dates; alpha {alpha}, calendar {'on' if calendar else 'off'}, "
             f"{torch.get_num_threads()} thread(s)",
             f"{'search':<8} {'exact':>7} {'2-digit':>8} {'4-digit':>8} {'caught':>7} {'false':>7} "
             f"{'logprob':>9} {'seconds':>8}"]
    outputs: dict[int, list[Output]] = {}
    correct: dict[int, list[bool]] = {}  # beam -> right, per example

    def share(ok: list[bool], idx: list[int]) -> float:
        return sum(ok[i] for i in idx) / max(1, len(idx))

    with torch.inference_mode():
        for beam in beams:
            start = time.perf_counter()
            best = [o[0] for o in translator.decode(texts, beam, 1, alpha, calendar)]
            seconds = time.perf_counter() - start
            outputs[beam] = best
            shown = printed(translator, best, test)
            ok = _judged(shown, best, test)
            refused = [not s for s in shown]
            correct[beam] = ok
            logprob = sum(best[i].hypothesis.logprob for i in dates) / max(1, len(dates))
            label = "greedy" if beam == 1 else f"beam {beam}"
            lines.append(f"{label:<8} {share(ok, dates):>7.4f} {share(ok, two):>8.4f} {share(ok, four):>8.4f} "
                         f"{share(ok, non):>7.4f} {share(refused, dates):>7.4f} {logprob:>9.4f} {seconds:>8.2f}")
    if 1 in outputs:
        lines.append(f"{'vs greedy':<10} {'disagree':>8} {'beam right':>10} {'greedy right':>12} {'neither':>8}")
        for beam, best in outputs.items():
            if beam == 1:
                continue
            pairs = [(correct[beam][i], correct[1][i]) for i in dates if best[i].text != outputs[1][i].text]
            lines.append(f"{'beam ' + str(beam):<10} {len(pairs):>8} {sum(b for b, _ in pairs):>10} "
                         f"{sum(g for _, g in pairs):>12} {sum(not (b or g) for b, g in pairs):>8}")
    if forms:
        names = sorted({e.form for e in test}, key=lambda f: (f.startswith("no date"), f))
        lines.append(f"{'form':<28} {'n':>5} " + " ".join(f"{'greedy' if b == 1 else f'beam {b}':>8}" for b in beams))
        for form in names:
            idx = [i for i, e in enumerate(test) if e.form == form]
            cells = " ".join(f"{share(correct[b], idx):>8.4f}" for b in beams)
            lines.append(f"{form:<28} {len(idx):>5} {cells}")
    return "\n".join(lines)
