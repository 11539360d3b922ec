"""A plain reference of ``beam_search_batch`` with the decoding controls of SPEC section 10.

Written from the SPEC text alone (no import of the library): one input at a time, one hypothesis
at a time, plain Python loops over plain lists. It is the oracle of ``tests/controls/test_controls.py``.

A model is given as a ``table``: a function of the whole token sequence seen so far (prompt +
generated tokens, as a tuple) returning that row's raw logits (length V). ``SequenceModel`` in
``tests/models.py`` turns the same table into a step function for the library.

Every result is a tuple ``(tokens, logprob, score, finished)`` with ``tokens`` a tuple of ints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Table = Callable[[tuple], Sequence[float]]
Result = tuple[tuple, float, float, bool]
NEG_INF = -math.inf


# ---- length penalties (sections 6 and 10) ----------------------------------------------------

def gnmt(length: int, alpha: float) -> float:
    return ((5 + length) / 6) ** alpha


def power(length: int, alpha: float) -> float:
    return length ** alpha


PENALTIES = {"gnmt": gnmt, "power": power}


# ---- argument shapes -----------------------------------------------------------------------

def eos_ids(eos_token_id: int | Sequence[int]) -> tuple[int, ...]:
    """``eos_token_id`` as a tuple of ids (an int is one eos)."""
    if isinstance(eos_token_id, (int, np.integer)):
        return (int(eos_token_id),)
    return tuple(int(e) for e in eos_token_id)


def per_input(max_steps: int | Sequence[int], n: int) -> list[int]:
    """``max_steps`` as one limit per input."""
    if isinstance(max_steps, (int, np.integer)):
        return [int(max_steps)] * n
    return [int(m) for m in max_steps]


def ends_with_stop(generated: tuple, stop_sequences: Sequence[Sequence[int]]) -> bool:
    """True iff the generated tokens end with one of the stop sequences."""
    for stop in stop_sequences:
        stop = tuple(stop)
        if len(generated) >= len(stop) and generated[len(generated) - len(stop):] == stop:
            return True
    return False


# ---- processing of one row -----------------------------------------------------------------

def log_softmax(x: Sequence[float]) -> list[float]:
    """Plain float64 log-softmax; a row with no finite entry stays all -inf."""
    finite = [v for v in x if math.isfinite(v)]
    if not finite:
        return [NEG_INF] * len(x)
    top = max(finite)
    log_total = math.log(sum(math.exp(v - top) for v in finite))
    return [v - top - log_total if math.isfinite(v) else NEG_INF for v in x]


def banned_by_ngram(history: tuple, n: int) -> set[int]:
    """Tokens that would complete an n-gram already present in ``history``."""
    banned: set[int] = set()
    if n <= 0 or len(history) < n - 1:
        return banned
    tail = history[len(history) - (n - 1):]
    for i in range(len(history) - n + 1):
        if history[i:i + n - 1] == tail:
            banned.add(history[i + n - 1])
    return banned


def process_row(logits: Sequence[float], history: tuple, step: int, *, eos: tuple[int, ...],
                min_new_tokens: int = 0, temperature: float = 1.0, top_k: int | None = None,
                ngram: int = 0, processors: Sequence[Callable] = (), forced: int | None = None,
                ) -> list[float]:
    """The processed log-probabilities of one row at generation step ``step`` (1-based).

    SPEC 10's order: min_new_tokens' eos mask, temperature, top-k, no-repeat n-gram (over
    ``history`` = prompt + generated), user processors, log_softmax, prefix mask (``forced``).
    """
    x = [float(v) for v in logits]
    # 1. min_new_tokens: at steps t <= m every eos id is -inf, before anything else
    if step <= min_new_tokens:
        for e in eos:
            x[e] = NEG_INF
    # 2. temperature
    x = [v / temperature for v in x]
    # 3. top-k: strictly below the k-th largest value (repeats counted) becomes -inf
    if top_k is not None and top_k < len(x):
        threshold = sorted(x, reverse=True)[top_k - 1]
        x = [v if v >= threshold else NEG_INF for v in x]
    # 4. no-repeat n-gram over prompt + generated tokens
    for v in banned_by_ngram(history, ngram):
        x[v] = NEG_INF
    # 5. the user's processors, each on a [1, V] float64 array
    for processor in processors:
        out = processor(np.array([x], dtype=np.float64), None)
        x = [float(v) for v in np.asarray(out, dtype=np.float64)[0]]
    # 6. log_softmax
    logp = log_softmax(x)
    # 7. prefix: only the forced token survives, with its log-probability (not renormalized)
    if forced is not None:
        logp = [lp if v == forced else NEG_INF for v, lp in enumerate(logp)]
    return logp


# ---- the search ----------------------------------------------------------------------------

def reference_search(table: Table, prompts: Sequence[Sequence[int]], *, eos: int | Sequence[int],
                     max_steps: int | Sequence[int], beam: int, n_best: int = 1, alpha: float = 0.6,
                     penalty: str = "gnmt", ngram: int = 0, temperature: float = 1.0,
                     top_k: int | None = None, processors: Sequence[Callable] = (),
                     min_new_tokens: int = 0, stop_sequences: Sequence[Sequence[int]] = (),
                     prefix: Sequence[Sequence[int]] | None = None, early_stop: bool = True,
                     stats: dict | None = None) -> list[list[Result]]:
    """SPEC sections 6 and 10, one input at a time.

    ``stats``, when given, receives ``steps`` (the model calls each input needed) and ``margin``
    (per input, the smallest gap between two values the search compared: the beam cut, the early
    stop test and the final sorting; 0 for an exact tie). A float32 search may only be expected
    to agree token for token where the margin is clear of float32 rounding.
    """
    n = len(prompts)
    limits = per_input(max_steps, n)
    forced_all = [()] * n if prefix is None else [tuple(p) for p in prefix]
    results = []
    for i, prompt in enumerate(prompts):
        result, steps, margin = _search_one(
            table, tuple(prompt), eos=eos_ids(eos), max_steps=limits[i], beam=beam, n_best=n_best,
            alpha=alpha, lp=PENALTIES[penalty], ngram=ngram, temperature=temperature, top_k=top_k,
            processors=processors, min_new_tokens=min_new_tokens,
            stop_sequences=[tuple(s) for s in stop_sequences], forced=forced_all[i],
            early_stop=early_stop)
        results.append(result)
        if stats is not None:
            stats.setdefault("steps", []).append(steps)
            stats.setdefault("margin", []).append(margin)
    return results


def _search_one(table: Table, prompt: tuple, *, eos: tuple[int, ...], max_steps: int, beam: int,
                n_best: int, alpha: float, lp: Callable[[int, float], float], ngram: int,
                temperature: float, top_k: int | None, processors: Sequence[Callable],
                min_new_tokens: int, stop_sequences: list[tuple], forced: tuple, early_stop: bool,
                ) -> tuple[list[Result], int, float]:
    live: list[tuple[tuple, float]] = [((), 0.0)]  # (generated tokens, logprob), in rank order
    finished: list[tuple[tuple, float]] = []  # in production order
    steps = 0
    margin = math.inf
    for t in range(1, max_steps + 1):
        steps += 1
        candidates = []  # (logprob, row position, token)
        for r, (tokens, logprob) in enumerate(live):
            history = prompt + tokens
            row = process_row(table(history), history, t, eos=eos, min_new_tokens=min_new_tokens,
                              temperature=temperature, top_k=top_k, ngram=ngram, processors=processors,
                              forced=forced[t - 1] if t <= len(forced) else None)
            for v, logp in enumerate(row):  # finished: by row position, then token id
                if not math.isfinite(logp):
                    continue
                new = tokens + (v,)
                if v in eos or t > min_new_tokens and ends_with_stop(new, stop_sequences):
                    finished.append((new, logprob + logp))
                else:
                    candidates.append((logprob + logp, r, v))
        candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
        if len(candidates) > beam:
            margin = min(margin, candidates[beam - 1][0] - candidates[beam][0])
        live = [(live[r][0] + (v,), s) for s, r, v in candidates[:beam]]
        if not live:
            break
        if early_stop and len(finished) >= n_best:
            nth = sorted((s / lp(len(tk), alpha) for tk, s in finished), reverse=True)[n_best - 1]
            bound = max(s for _, s in live) / lp(max_steps, alpha)
            margin = min(margin, abs(bound - nth))
            if bound <= nth:
                live = []
                break
    done = [(tk, s, s / lp(len(tk), alpha), True) for tk, s in finished]
    done.sort(key=lambda h: -h[2])  # stable: ties keep production order
    rest = [(tk, s, s / lp(len(tk), alpha), False) for tk, s in live]
    rest.sort(key=lambda h: -h[2])
    if len(done) >= n_best:
        margin = min([margin] + _gaps(done[:n_best + 1]))
        return done[:n_best], steps, margin
    need = n_best - len(done)
    margin = min([margin] + _gaps(done) + _gaps(rest[:need + 1]))
    return done + rest[:need], steps, margin


def _gaps(ranked: list[Result]) -> list[float]:
    return [a[2] - b[2] for a, b in zip(ranked, ranked[1:], strict=False)]


# ---- exhaustive enumeration ------------------------------------------------------------------

def brute_force(table: Table, prompt: Sequence[int], vocab: int, *, eos: int | Sequence[int],
                max_steps: int, alpha: float = 0.6, penalty: str = "gnmt", ngram: int = 0,
                temperature: float = 1.0, top_k: int | None = None, processors: Sequence[Callable] = (),
                min_new_tokens: int = 0, stop_sequences: Sequence[Sequence[int]] = (),
                prefix: Sequence[int] = ()) -> list[tuple[tuple, float, float]]:
    """Every finished output of at most ``max_steps`` tokens: ``(tokens, logprob, score)``.

    An output is finished by an eos id, or by a stop sequence completed at a step after
    ``min_new_tokens``; it starts with ``prefix`` (or with part of it, when a stop sequence ends
    inside it). Only outputs with a finite processed logprob; best score first.
    """
    eos_t, lp, stops, forced = eos_ids(eos), PENALTIES[penalty], [tuple(s) for s in stop_sequences], tuple(prefix)
    out: list[tuple[tuple, float, float]] = []

    def walk(tokens: tuple, logprob: float) -> None:
        t = len(tokens) + 1
        history = tuple(prompt) + tokens
        row = process_row(table(history), history, t, eos=eos_t, min_new_tokens=min_new_tokens,
                          temperature=temperature, top_k=top_k, ngram=ngram, processors=processors,
                          forced=forced[t - 1] if t <= len(forced) else None)
        for v in range(vocab):
            if not math.isfinite(row[v]):
                continue
            new, s = tokens + (v,), logprob + row[v]
            if v in eos_t or (t > min_new_tokens and ends_with_stop(new, stops)):
                out.append((new, s, s / lp(len(new), alpha)))
            elif t < max_steps:
                walk(new, s)

    walk((), 0.0)
    out.sort(key=lambda h: -h[2])
    return out


# ---- teacher-forced scoring ------------------------------------------------------------------

def reference_score(table: Table, prompts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], *,
                    eos: int | Sequence[int], alpha: float = 0.6, penalty: str = "gnmt", ngram: int = 0,
                    temperature: float = 1.0, top_k: int | None = None, processors: Sequence[Callable] = (),
                    min_new_tokens: int = 0, stop_sequences: Sequence[Sequence[int]] = ()) -> list[Result]:
    """SPEC 10's ``score_sequences``: each target's processed logprob, score and finished flag."""
    eos_t, lp, stops = eos_ids(eos), PENALTIES[penalty], [tuple(s) for s in stop_sequences]
    out = []
    for prompt, target in zip(prompts, targets, strict=True):
        target = tuple(int(v) for v in target)
        logprob = 0.0
        for t in range(1, len(target) + 1):
            history = tuple(prompt) + target[:t - 1]
            row = process_row(table(history), history, t, eos=eos_t, min_new_tokens=min_new_tokens,
                              temperature=temperature, top_k=top_k, ngram=ngram, processors=processors)
            logprob += row[target[t - 1]]
        finished = target[-1] in eos_t or (len(target) > min_new_tokens and ends_with_stop(target, stops))
        out.append((target, logprob, logprob / lp(len(target), alpha), finished))
    return out


def rounded_to_float32(table: Table) -> Table:
    """The same table with its logits rounded to float32 (what a float32 model returns)."""

    def rounded(seq: tuple) -> list[float]:
        return [float(v) for v in np.asarray(table(seq), dtype=np.float32)]

    return rounded


def as_numpy(logits: Any) -> np.ndarray:
    """A float64 numpy copy of numpy or torch logits."""
    if hasattr(logits, "detach"):
        logits = logits.detach().cpu().numpy()
    return np.array(logits, dtype=np.float64)
