"""Search errors against model errors on the shipped dates models (Stahlberg & Byrne 2019).

For each shipped model (``seq2seq``, ``transformer``) on the fixed dates test set, exact search
(:func:`beamsearch.modes.exact.exact_search`) finds each input's highest-scoring output under the same
scoring rule the beam uses (GNMT length penalty, ``--alpha``). Then, per beam size:

- a **search error**: the beam's best output scores below the exact best (its tokens differ and
  its score is lower by more than ``TOLERANCE``; scores are float32 model sums);
- a **model error**: the exact best output is not the reference date (no search can fix it);

and the cost of exact search per input (model calls, expanded prefixes: mean and max) and its
wall time. Prints markdown tables.

    python tools/search_error_study.py                 # the whole test set (2,000 inputs)
    python tools/search_error_study.py --limit 200     # the first 200
"""

from __future__ import annotations

import argparse
import functools
import time
from typing import Any

import numpy as np
import torch

from beamsearch import beam_search_batch
from beamsearch.modes.exact import exact_search
from beamsearch.zoo.dates import TARGET_VOCAB, make_splits
from beamsearch.zoo.train import DATA_SEED
from beamsearch.zoo.translator import MODELS, Translator

TOLERANCE = 1e-5
"""Scores closer than this are a tie (float32 logits: a path's logprob carries rounding of about
1e-7 per token, and the beam and exact search batch rows differently)."""


def run_chunks(translator: Translator, texts: list[str], chunk: int, search: Any) -> list[Any]:
    """``search(step, state, prompts, **rules)`` over ``texts``, ``chunk`` sources at a time, with
    the rules both searches share: the results of every chunk, in order."""
    cfg = translator.cfg
    out = []
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        state = translator.model.init_state(translator.encode(part))
        out.append(search(translator.model.step, state, [[cfg.bos]] * len(part), eos_token_id=cfg.eos,
                          max_steps=translator.max_steps))
    return out


def study(name: str, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Rows of the search-error table and of the exact-search table for one model."""
    translator = Translator.load(name)
    test = make_splits(seed=DATA_SEED)["test"][: args.limit]
    texts = [e.source for e in test]
    two = np.array([e.two_digit_year for e in test])
    rules: dict[str, Any] = dict(alpha=args.alpha, logits_processors=processors(args.calendar))
    with torch.inference_mode():
        start = time.perf_counter()
        parts = run_chunks(translator, texts, args.chunk, functools.partial(
            exact_search, node_budget=args.node_budget, batch_rows=args.batch_rows, **rules))
        seconds = time.perf_counter() - start
        exact = [hyps[0] for part in parts for hyps in part]
        proven, calls, expanded = (np.concatenate([getattr(p, f) for p in parts])
                                   for f in ("proven", "model_calls", "expanded"))
        wrong = np.array([TARGET_VOCAB.decode(h.tokens) != e.target for h, e in zip(exact, test, strict=True)])
        errors = []
        for beam in args.beams:
            start = time.perf_counter()
            search = functools.partial(beam_search_batch, beam_size=beam, **rules)
            parts = run_chunks(translator, texts, args.chunk, search)
            beam_seconds = time.perf_counter() - start
            found = [hyps[0] for part in parts for hyps in part]
            missed = np.array([b.tokens != e.tokens and (e.finished, e.score - TOLERANCE) > (b.finished, b.score)
                               for b, e in zip(found, exact, strict=True)])
            above = sum(b.tokens != e.tokens and (b.finished, b.score - TOLERANCE) > (e.finished, e.score)
                        for b, e in zip(found, exact, strict=True))
            right = np.mean([TARGET_VOCAB.decode(b.tokens) == e.target for b, e in zip(found, test, strict=True)])
            errors.append(f"| {name} | beam {beam} | {missed.mean():.4f} ({missed.sum()}) | {missed[two].mean():.4f} "
                          f"| {right:.4f} | {above} | {beam_seconds:.1f} |")
    cost = (f"| {name} | {len(test)} | {proven.mean():.4f} | {wrong.mean():.4f} ({wrong.sum()}) | "
            f"{wrong[two].mean():.4f} | {1 - wrong.mean():.4f} | {calls.mean():.1f} | {calls.max()} | "
            f"{expanded.mean():.1f} | {expanded.max()} | {seconds:.1f} |")
    return errors, [cost]


def processors(calendar: bool) -> list[Any]:
    """The translator's calendar mask when asked for (both searches then use it), else none."""
    if not calendar:
        return []
    from beamsearch.zoo.calendar import CalendarDates

    return [CalendarDates()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=2000, help="the first N test examples (default: all 2,000)")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated (default: both)")
    parser.add_argument("--beams", default="1,2,5,10", help="beam sizes (default: 1,2,5,10)")
    parser.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty (default: 0.6)")
    parser.add_argument("--node-budget", type=int, default=100_000, help="per input (default: 100000)")
    parser.add_argument("--batch-rows", type=int, default=64, help="rows per model call (default: 64)")
    parser.add_argument("--chunk", type=int, default=500, help="sources per exact search (default: 500)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--calendar", action="store_true", help="both searches with the calendar mask")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.beams = [int(b) for b in args.beams.split(",")]
    errors, costs = [], []
    for name in args.models.split(","):
        e, c = study(name, args)
        errors += e
        costs += c
    mask = ", calendar mask" if args.calendar else ""
    print(f"Search errors (alpha {args.alpha}{mask}): the share of inputs whose beam output scores below the "
          f"exact best (count), the same on two-digit-year sources, the beam's exact match, inputs where the beam "
          f"scored above exact search (0 when every input is proven), beam time")
    print()
    print("| model | search | search errors | 2-digit | exact match | beam above exact | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(errors))
    print()
    print("Exact search: inputs, share proven within the node budget, model errors (the exact best output is "
          "wrong; count), on two-digit-year sources, its exact match, model calls and expanded prefixes per "
          "input (mean, max; the seed beam's included), wall time")
    print()
    print("| model | inputs | proven | model errors | 2-digit | exact match | calls mean | calls max "
          "| expanded mean | expanded max | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(costs))


if __name__ == "__main__":
    main()
