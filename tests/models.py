"""Toy models and independent oracles for the tests (no import of the search internals).

Every model here keeps its state as a numpy object array of prefix tuples (one per row, the row on
axis 0), so ``select_state`` gathers it like any array leaf, and a test can read which prefix
each row of each call had.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None


def log_softmax(row: Sequence[float]) -> np.ndarray:
    """Plain float64 log-softmax of one row, written out (the oracle's own)."""
    x = np.asarray(row, dtype=np.float64)
    finite = x[np.isfinite(x)]
    top = finite.max()
    total = math.log(sum(math.exp(v - top) for v in finite))
    return np.array([v - top - total if math.isfinite(v) else -math.inf for v in x])


def object_rows(items: Sequence[Any]) -> np.ndarray:
    """A 1-D object array holding ``items`` (tuples stay tuples)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


class PrefixState(NamedTuple):
    """``prefix``: object [k] of token tuples (bos first); ``check``: float64 [k] = f(prefix)."""

    prefix: np.ndarray
    check: np.ndarray


def prefix_check(prefix: tuple) -> float:
    return float(hash(prefix) % 1_000_003)


class PrefixModel:
    """Logits as a function of the generated prefix (anything callable ``prefix -> [V]``).

    Its state is a :class:`PrefixState`; each step appends ``y_prev`` to each row's prefix and
    asserts that the second leaf was gathered along with the first. ``calls`` records the
    prefixes (after bos) of every call's rows.
    """

    def __init__(self, table: Callable[[tuple], Sequence[float]], *, backend: str = "numpy",
                 dtype: Any = np.float64, offsets: Callable[[tuple], float] | None = None) -> None:
        self.table = table
        self.backend = backend
        self.dtype = dtype
        self.offsets = offsets
        self.calls: list[list[tuple]] = []

    def init_state(self, n: int = 1) -> PrefixState:
        return PrefixState(object_rows([()] * n), np.full(n, prefix_check(())))

    def step(self, state: PrefixState, y_prev: Any) -> tuple[Any, PrefixState]:
        for p, c in zip(state.prefix, state.check):
            assert prefix_check(p) == c, "state leaves were gathered with different rows"
        prefixes = [p + (int(t),) for p, t in zip(state.prefix, y_prev)]
        generated = [p[1:] for p in prefixes]
        self.calls.append(generated)
        rows = []
        for g in generated:
            row = np.asarray(self.table(g), dtype=np.float64)
            if self.offsets is not None:
                row = row + self.offsets(g)
            rows.append(row)
        logits = np.stack(rows).astype(self.dtype)
        if self.backend == "torch":
            logits = torch.from_numpy(logits)
        new = PrefixState(object_rows(prefixes), np.array([prefix_check(p) for p in prefixes]))
        return logits, new


def random_table(vocab: int, seed: int, *, levels: int | None = None, eos: int | None = None,
                 eos_shift: float = 0.0) -> Callable[[tuple], np.ndarray]:
    """A prefix-dependent table of random logits; ``levels`` rounds them so that ties occur."""

    def table(prefix: tuple) -> np.ndarray:
        rng = np.random.default_rng([seed, len(prefix), *prefix])
        row = rng.normal(size=vocab) * 2.0
        if levels is not None:
            row = np.round(row * levels / 4.0)
        if eos is not None:
            row[eos] += eos_shift
        return row

    return table


def dict_table(probs: dict[tuple, Sequence[float]], vocab: int) -> Callable[[tuple], np.ndarray]:
    """Log-probabilities from a table of prefixes; unlisted prefixes are uniform."""

    def table(prefix: tuple) -> np.ndarray:
        p = probs.get(prefix, [1.0 / vocab] * vocab)
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(p, dtype=np.float64))

    return table


def path_logprob(table: Callable[[tuple], Sequence[float]], tokens: Sequence[int]) -> float:
    """Teacher-forced rescoring: the sum of the oracle's log-softmax along ``tokens``."""
    total = 0.0
    for i, t in enumerate(tokens):
        total += log_softmax(table(tuple(tokens[:i])))[t]
    return total


def brute_force(table: Callable[[tuple], Sequence[float]], vocab: int, eos: int, max_len: int,
                alpha: float) -> list[tuple[tuple, float, float, bool]]:
    """Every output of length <= max_len (ending at its first eos, or unfinished at max_len).

    Returns ``(tokens, logprob, score, finished)`` with ``score = logprob / len ** alpha``,
    ranked by score, highest first; outputs with -inf logprob are left out.
    """
    non_eos = [v for v in range(vocab) if v != eos]
    outputs = []
    for length in range(1, max_len + 1):
        for body in itertools.product(non_eos, repeat=length - 1):
            outputs.append((tuple(body) + (eos,), True))
    outputs += [(body, False) for body in itertools.product(non_eos, repeat=max_len)]
    ranked = []
    for tokens, finished in outputs:
        lp = path_logprob(table, tokens)
        if math.isfinite(lp):
            ranked.append((tokens, lp, lp / len(tokens) ** alpha, finished))
    ranked.sort(key=lambda r: -r[2])
    return ranked


def greedy_oracle(table: Callable[[tuple], Sequence[float]], eos: int, max_len: int) -> tuple[list[int], float]:
    """A plain greedy loop: argmax (lowest id on ties) until eos or max_len tokens."""
    tokens: list[int] = []
    total = 0.0
    while len(tokens) < max_len:
        logp = log_softmax(table(tuple(tokens)))
        best = max(range(len(logp)), key=lambda v: (logp[v], -v))
        tokens.append(best)
        total += logp[best]
        if best == eos:
            break
    return tokens, total
