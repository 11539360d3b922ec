"""The logits processors written out one row at a time in plain Python (the oracles of
tests/processors/), and the random, tie-heavy inputs they are checked on (numpy and torch)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from beamsearch import processors as P
from beamsearch.backends import backend_of

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None

BACKENDS = ["numpy"] + (["torch"] if torch is not None else [])
DTYPES = [np.float64, np.float32]
NEG_INF = -math.inf



# ---- plain references, one row at a time ------------------------------------------------------

def softmax(row: Sequence[float]) -> list[float]:
    finite = [v for v in row if v != NEG_INF]
    top = max(finite)
    e = [math.exp(v - top) if v != NEG_INF else 0.0 for v in row]
    total = math.fsum(e)
    return [v / total for v in e]


def top_p_cumsums(row: Sequence[float]) -> list[float]:
    q = softmax(row)
    order = sorted(range(len(row)), key=lambda j: -row[j])
    sums, acc = [], []
    for j in order:
        acc.append(q[j])
        sums.append(math.fsum(acc))
    return sums


def top_p_row(row: Sequence[float], p: float) -> list[float]:
    """Keep the logits >= the logit at the first position where the sorted mass reaches p."""
    if p >= 1:
        return list(row)
    q = softmax(row)
    order = sorted(range(len(row)), key=lambda j: -row[j])
    acc: list[float] = []
    threshold = row[order[-1]]
    for j in order:
        acc.append(q[j])
        if math.fsum(acc) >= p:
            threshold = row[j]
            break
    return [v if v >= threshold else NEG_INF for v in row]


def tokens_of(history_row: Sequence[int]) -> list[int]:
    """A history row without its left padding (-1)."""
    return [int(t) for t in history_row if t >= 0]


def repetition_row(row: Sequence[float], history: Sequence[int], penalty: float) -> list[float]:
    out = list(row)
    for t in set(history):
        out[t] = out[t] / penalty if out[t] > 0 else out[t] * penalty
    return out


def ends_with(history: Sequence[int], prefix: Sequence[int]) -> bool:
    return len(history) >= len(prefix) and list(history[len(history) - len(prefix):]) == list(prefix)


def sequence_bias_row(row: Sequence[float], history: Sequence[int], bias: dict) -> list[float]:
    out = list(row)
    for seq, b in bias.items():
        if len(seq) == 1 or ends_with(history, seq[:-1]):
            out[seq[-1]] += b
    return out


def bad_words_row(row: Sequence[float], history: Sequence[int], sequences: Sequence[Sequence[int]]) -> list[float]:
    out = list(row)
    for seq in sequences:
        if len(seq) == 1 or ends_with(history, seq[:-1]):
            out[seq[-1]] = NEG_INF
    return out


def suppress_row(row: Sequence[float], step: int, token_ids: Sequence[int], first_steps: int | None) -> list[float]:
    out = list(row)
    if first_steps is None or step <= first_steps:
        for t in token_ids:
            out[t] = NEG_INF
    return out


# ---- random inputs -------------------------------------------------------------------------------

def as_backend(a: np.ndarray, name: str):
    return torch.from_numpy(a.copy()) if name == "torch" else a.copy()


def to_np(x) -> np.ndarray:
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def history_matrix(rows: Sequence[Sequence[int]], width: int | None = None) -> np.ndarray:
    width = max([len(r) for r in rows] + [0]) if width is None else width
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r):] = r
    return out


def random_logits(rng: np.random.Generator, dtype: Any, rows: int | None = None,
                  vocab: int | None = None) -> np.ndarray:
    k = int(rng.integers(1, 5)) if rows is None else rows
    v = int(rng.integers(1, 13)) if vocab is None else vocab
    if rng.random() < 0.5:
        x = rng.integers(-3, 4, size=(k, v)).astype(np.float64)  # ties and zeros
    else:
        x = np.round(rng.normal(size=(k, v)) * 2.0, 3)
    x[rng.random(x.shape) < 0.2] = -np.inf
    for r in range(k):
        if not np.isfinite(x[r]).any():
            x[r, int(rng.integers(v))] = float(rng.integers(-2, 3))
    return x.astype(dtype)


def random_histories(rng: np.random.Generator, k: int, vocab: int) -> np.ndarray:
    width = int(rng.integers(0, 8))
    rows = [[int(t) for t in rng.integers(0, vocab, size=int(rng.integers(0, width + 1)))] for _ in range(k)]
    return history_matrix(rows, width)


def apply(processor: Callable, x: np.ndarray, name: str, history: np.ndarray, step: int = 1) -> np.ndarray:
    """Run ``processor`` on a backend copy of ``x``; its return value, as float64 numpy."""
    xb = as_backend(x, name)
    out = processor(xb, P.StepContext(step, history, np.arange(x.shape[0], dtype=np.int64),
                                      backend_of(xb)))
    got = to_np(out)
    assert got.shape == x.shape
    return got.astype(np.float64)


def tolerance(dtype: Any) -> dict:
    return dict(rtol=1e-12, atol=0) if dtype == np.float64 else dict(rtol=2e-6, atol=1e-6)


def assert_rows_close(got: np.ndarray, expected: Sequence[Sequence[float]], dtype: Any) -> None:
    np.testing.assert_allclose(got, np.array(expected, dtype=np.float64), **tolerance(dtype))


CASES = 150
