"""Toy models and independent oracles for the tests (no import of the search internals).

Every model here keeps its state as a numpy object array of prefix tuples (one per row, the row on
axis 0), so ``select_state`` gathers it like any array leaf, and a test can read which prefix
each row of each call had.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

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
        for p, c in zip(state.prefix, state.check, strict=True):
            assert prefix_check(p) == c, "state leaves were gathered with different rows"
        prefixes = [p + (int(t),) for p, t in zip(state.prefix, y_prev, strict=True)]
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


def row_cache_type() -> type:
    """A new cache type ``Cache(rows)`` (``rows`` an array with one row per hypothesis) taught to
    ``select_state`` and nothing else: a fresh class per call, so what one test registers for it
    (a ``concat_state``) reaches no other test."""
    from beamsearch import select_state

    class Cache:
        def __init__(self, rows: np.ndarray) -> None:
            self.rows = rows

    @select_state.register(Cache)
    def _(cache: Cache, idx: Any) -> Cache:
        return Cache(cache.rows[np.asarray(idx)])

    return Cache


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


class SequenceModel(PrefixModel):
    """A :class:`PrefixModel` for batched search: ``table`` sees prompt + generated tokens.

    ``init_state(prompts)`` holds each prompt without its last token (the first ``y_prev``).
    """

    def init_state(self, prompts: Sequence[Sequence[int]]) -> PrefixState:  # type: ignore[override]
        prefixes = [tuple(p[:-1]) for p in prompts]
        return PrefixState(object_rows(prefixes), np.array([prefix_check(p) for p in prefixes]))

    def step(self, state: PrefixState, y_prev: Any) -> tuple[Any, PrefixState]:
        for p, c in zip(state.prefix, state.check, strict=True):
            assert prefix_check(p) == c, "state leaves were gathered with different rows"
        prefixes = [p + (int(t),) for p, t in zip(state.prefix, y_prev, strict=True)]
        self.calls.append(prefixes)
        logits = np.stack([np.asarray(self.table(p), dtype=np.float64) for p in prefixes]).astype(self.dtype)
        if self.backend == "torch":
            logits = torch.from_numpy(logits)
        return logits, PrefixState(object_rows(prefixes), np.array([prefix_check(p) for p in prefixes]))


def gnmt(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


def processed_logprobs(logits: Sequence[float], sequence: Sequence[int], *, temperature: float = 1.0,
                       top_k: int | None = None, ngram: int = 0) -> list[float]:
    """SPEC section 6 processing of one row, as a plain loop: the reference's own."""
    x = [v / temperature for v in logits]
    if top_k is not None and top_k < len(x):
        threshold = sorted(x, reverse=True)[top_k - 1]
        x = [v if v >= threshold else -math.inf for v in x]
    if ngram > 0 and len(sequence) >= ngram - 1:
        tail = tuple(sequence[len(sequence) - (ngram - 1):])
        for i in range(len(sequence) - ngram + 1):
            if tuple(sequence[i:i + ngram - 1]) == tail:
                x[sequence[i + ngram - 1]] = -math.inf
    if not any(math.isfinite(v) for v in x):
        return [-math.inf] * len(x)
    return list(log_softmax(x))


def reference_batch(table: Callable[[tuple], Sequence[float]], prompts: Sequence[Sequence[int]], *,
                    eos: int, max_steps: int, beam: int, n_best: int = 1, alpha: float = 0.6,
                    ngram: int = 0, temperature: float = 1.0, top_k: int | None = None,
                    early_stop: bool = True, penalty: Callable[[int, float], float] = gnmt,
                    steps: list[int] | None = None) -> list[list[tuple[tuple, float, float, bool]]]:
    """SPEC section 6, one input at a time, one hypothesis at a time: the test oracle.

    Returns per input ``(tokens, logprob, score, finished)`` best first; appends to ``steps`` the
    number of model calls each input needed.
    """
    results = []
    for prompt in prompts:
        live: list[tuple[tuple, float]] = [((), 0.0)]
        finished: list[tuple[tuple, float]] = []
        calls = 0
        for _ in range(max_steps):
            calls += 1
            grow = []
            for r, (tokens, lp) in enumerate(live):
                row = processed_logprobs(table(tuple(prompt) + tokens), tuple(prompt) + tokens,
                                         temperature=temperature, top_k=top_k, ngram=ngram)
                for v, logp in enumerate(row):
                    if not math.isfinite(logp):
                        continue
                    if v == eos:
                        finished.append((tokens + (v,), lp + logp))
                    else:
                        grow.append((lp + logp, r, v))
            grow.sort(key=lambda c: (-c[0], c[1], c[2]))
            live = [(live[r][0] + (v,), s) for s, r, v in grow[:beam]]
            if not live:
                break
            if early_stop and len(finished) >= n_best:
                nth = sorted((lp / penalty(len(t), alpha) for t, lp in finished), reverse=True)[n_best - 1]
                if max(lp for _, lp in live) / penalty(max_steps, alpha) <= nth:
                    live = []
                    break
        if steps is not None:
            steps.append(calls)
        done = [(t, lp, lp / penalty(len(t), alpha), True) for t, lp in finished]
        done.sort(key=lambda h: -h[2])
        rest = [(t, lp, lp / penalty(len(t), alpha), False) for t, lp in live]
        rest.sort(key=lambda h: -h[2])
        results.append((done + rest)[:n_best] if len(done) < n_best else done[:n_best])
    return results


def brute_force_batch(table: Callable[[tuple], Sequence[float]], prompt: Sequence[int], vocab: int, *,
                      eos: int, max_steps: int, alpha: float, ngram: int = 0, temperature: float = 1.0,
                      top_k: int | None = None, penalty: Callable[[int, float], float] = gnmt,
                      ) -> list[tuple[tuple, float, float]]:
    """Every finished output of at most ``max_steps`` tokens under the processed distribution.

    Returns ``(tokens, logprob, score)`` best first (finite logprob only).
    """
    out = []

    def walk(tokens: tuple, lp: float) -> None:
        seq = tuple(prompt) + tokens
        row = processed_logprobs(table(seq), seq, temperature=temperature, top_k=top_k, ngram=ngram)
        for v in range(vocab):
            if not math.isfinite(row[v]):
                continue
            if v == eos:
                t = tokens + (v,)
                out.append((t, lp + row[v], (lp + row[v]) / penalty(len(t), alpha)))
            elif len(tokens) + 1 < max_steps:
                walk(tokens + (v,), lp + row[v])

    walk((), 0.0)
    out.sort(key=lambda h: -h[2])
    return out
