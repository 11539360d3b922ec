"""The two-digit-year calibration study on the shipped dates models (issue 11, part 6).

For a source with a two-digit year ("march 3 '87") the data generator picks the century at
random: :data:`beamsearch.zoo.dates.CENTURY_WEIGHTS` (1800s, 1900s, 2000s with 0.3, 0.3, 0.4).
A calibrated model puts that much probability on outputs of each century. Per two-digit-year
input of the test set, this estimates the model's probability of each century two ways at the
same cost (rows passed to the model):

- **stochastic beam search** (Kool et al. 2019): k samples without replacement, and the
  normalized importance-weighted estimate of section 4.1,
  ``sum_s w_s 1[century(s) = c] / sum_s w_s`` with ``w_s = p(s) / q_kappa(s)``;
- **ancestral sampling with replacement**: m samples drawn token by token from the softmax, with
  m chosen so that it passes the model as many rows as the stochastic beam search did; the
  estimate is the share of samples of each century.

Outputs are those of the model as it is (no calendar mask), of at most ``max_target - 1``
tokens. An output that is not a date of one of the three centuries counts for none (its share is
the "other" column). Prints a markdown table: method, rows passed to the model per input, mean
estimate per century over the inputs, and the mean absolute error against the generator's
truth (per input, averaged over the three centuries, then over the inputs).

    python tools/calibration_study.py                       # seq2seq, k = 8
    python tools/calibration_study.py --model transformer --k 4 --limit 100
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from beamsearch import select_state, stochastic_beam_search
from beamsearch.zoo.dates import CENTURY_WEIGHTS, TARGET_VOCAB, make_splits
from beamsearch.zoo.train import DATA_SEED
from beamsearch.zoo.translator import MODELS, Translator

CENTURIES = sorted(CENTURY_WEIGHTS)
TRUTH = np.array([CENTURY_WEIGHTS[c] for c in CENTURIES])


def century(tokens: list[int]) -> int:
    """Column of the output's century in :data:`CENTURIES`, or ``len(CENTURIES)`` (other)."""
    text = TARGET_VOCAB.decode(tokens)
    if len(text) == 10 and text[:4].isdigit():
        c = int(text[:2]) * 100
        if c in CENTURY_WEIGHTS:
            return CENTURIES.index(c)
    return len(CENTURIES)


class Counted:
    """A step function that counts the rows it is passed."""

    def __init__(self, step):
        self.step, self.rows = step, 0

    def __call__(self, state, y_prev):
        self.rows += int(y_prev.shape[0])
        return self.step(state, y_prev)


@torch.no_grad()
def stochastic(translator: Translator, texts: list[str], k: int, seed: int) -> tuple[np.ndarray, int]:
    """``[N, 4]`` estimates (three centuries, other) and the rows passed to the model."""
    cfg = translator.cfg
    step = Counted(translator.model.step)
    state = translator.model.init_state(translator.encode(texts))
    results = stochastic_beam_search(step, state, [[cfg.bos]] * len(texts), k=k, seed=seed,
                                     eos_token_id=cfg.eos, max_steps=translator.max_steps)
    out = np.zeros((len(texts), len(CENTURIES) + 1))
    for i, (hyps, w) in enumerate(zip(results, results.importance_weights(), strict=True)):
        for h, wj in zip(hyps, w, strict=True):
            out[i, century(h.tokens)] += wj
        out[i] /= w.sum()
    return out, step.rows


@torch.no_grad()
def ancestral(translator: Translator, texts: list[str], m: int, seed: int) -> tuple[np.ndarray, int]:
    """m samples with replacement per input, token by token; ``[N, 4]`` shares and the rows passed."""
    cfg = translator.cfg
    gen = torch.Generator().manual_seed(seed)
    src = translator.encode(texts).repeat_interleave(m, dim=0)  # --> [N*m, S]: m copies of each
    state = translator.model.init_state(src)
    live = torch.arange(src.shape[0])  # the sample each row of the next call is
    y = torch.full((src.shape[0],), cfg.bos, dtype=torch.int64)
    tokens = torch.full((src.shape[0], translator.max_steps), cfg.pad, dtype=torch.int64)
    rows = 0
    for t in range(translator.max_steps):
        rows += int(live.shape[0])
        logits, state = translator.model.step(state, y)
        y = torch.multinomial(torch.softmax(logits.double(), dim=-1), 1, generator=gen)[:, 0]
        tokens[live, t] = y
        going = y != cfg.eos
        if not going.any():
            break
        keep = torch.nonzero(going)[:, 0]
        live, y, state = live[keep], y[keep], select_state(state, keep)
    out = np.zeros((len(texts), len(CENTURIES) + 1))
    for j, row in enumerate(tokens.tolist()):
        out[j // m, century(row)] += 1 / m
    return out, rows


def table_row(name: str, rows: str, est: np.ndarray) -> str:
    mean = est.mean(axis=0)
    mae = np.abs(est[:, : len(CENTURIES)] - TRUTH).mean()
    cells = " | ".join(f"{v:.3f}" for v in mean)
    return f"| {name} | {rows} | {cells} | {mae:.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=MODELS, default="seq2seq")
    parser.add_argument("--k", type=int, default=8, help="samples per input of the stochastic beam search")
    parser.add_argument("--limit", type=int, default=None, help="the first N two-digit-year inputs only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=100, help="inputs per search")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    translator = Translator.load(args.model)
    texts = [e.source for e in make_splits(seed=DATA_SEED)["test"] if e.two_digit_year][: args.limit]
    sbs, sbs_rows = [], 0
    anc, anc_rows = [], 0
    for at in range(0, len(texts), args.chunk):
        part = texts[at : at + args.chunk]
        est, rows = stochastic(translator, part, args.k, args.seed + at)
        sbs.append(est)
        sbs_rows += rows
        # the same rows: each ancestral sample of this model takes about the same number of steps
        m = max(1, round(rows / len(part) / _mean_len(translator, part)))
        est, rows = ancestral(translator, part, m, args.seed + at)
        anc.append(est)
        anc_rows += rows
    n = len(texts)
    heads = " | ".join(f"{c}s" for c in CENTURIES)
    print(f"{args.model}, {n} two-digit-year inputs of the test set, k = {args.k}, "
          f"{time.perf_counter() - start:.1f} s\n")
    print(f"| method | rows per input | {heads} | other | mean abs. error |")
    print("| --- | ---: | " + " | ".join("---:" for _ in CENTURIES) + " | ---: | ---: |")
    print(table_row("generator's truth", "-", np.append(TRUTH, 0.0)[None]))
    print(table_row(f"stochastic beam search, k = {args.k}", f"{sbs_rows / n:.1f}", np.concatenate(sbs)))
    print(table_row("ancestral sampling with replacement", f"{anc_rows / n:.1f}", np.concatenate(anc)))


def _mean_len(translator: Translator, texts: list[str]) -> float:
    """Mean number of model rows one ancestral sample of these inputs costs, from a first pass of
    one sample each (its rows are not counted in the table)."""
    _, rows = ancestral(translator, texts, 1, 12345)
    return rows / len(texts)


if __name__ == "__main__":
    main()
