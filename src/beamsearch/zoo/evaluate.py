"""Greedy against beam search on the fixed dates test set."""

from __future__ import annotations

import time

import torch

from beamsearch.zoo.dates import make_splits
from beamsearch.zoo.train import DATA_SEED
from beamsearch.zoo.translator import Translator


def evaluate_model(name: str, beams: list[int], *, alpha: float = 0.6, limit: int = 2000) -> str:
    """A table: per beam size (1 = greedy), exact match (all, and two-digit-year sources), mean
    logprob of the output, time; then, per beam size, how often it and greedy disagree and who
    was right."""
    translator = Translator.load(name)
    test = make_splits(seed=DATA_SEED)["test"][:limit]
    texts = [e.source for e in test]
    two = [e.two_digit_year for e in test]
    lines = [f"model {name}, {len(test)} test examples ({sum(two)} with two-digit years), alpha {alpha}",
             f"{'search':<8} {'exact':>7} {'2-digit':>8} {'logprob':>9} {'seconds':>8}"]
    outputs = {}
    with torch.inference_mode():
        for beam in beams:
            start = time.perf_counter()
            best = [o[0] for o in translator.decode(texts, beam, 1, alpha)]
            seconds = time.perf_counter() - start
            outputs[beam] = best
            right = [o.text == e.target for o, e in zip(best, test)]
            exact = sum(right) / len(test)
            exact_two = sum(r for r, t in zip(right, two) if t) / max(1, sum(two))
            logprob = sum(o.hypothesis.logprob for o in best) / len(best)
            label = "greedy" if beam == 1 else f"beam {beam}"
            lines.append(f"{label:<8} {exact:>7.4f} {exact_two:>8.4f} {logprob:>9.4f} {seconds:>8.2f}")
    if 1 in outputs:
        lines.append(f"{'vs greedy':<10} {'disagree':>8} {'beam right':>10} {'greedy right':>12} {'neither':>8}")
        for beam, best in outputs.items():
            if beam == 1:
                continue
            pairs = [(b.text, g.text, e.target) for b, g, e in zip(best, outputs[1], test) if b.text != g.text]
            lines.append(f"{'beam ' + str(beam):<10} {len(pairs):>8} {sum(b == t for b, _, t in pairs):>10} "
                         f"{sum(g == t for _, g, t in pairs):>12} {sum(t not in (b, g) for b, g, t in pairs):>8}")
    return "\n".join(lines)
