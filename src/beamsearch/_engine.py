"""The one search engine: a vectorized step and a swappable selection rule.

Every search of the package (``greedy_decode``, ``beam_search``, ``beam_search_batch``) runs
:func:`run`. Per step it makes one model call for all live rows of all inputs, processes and
normalizes the ``[k, V]`` logits on their own backend, adds each row's logprob, and ranks each
input's candidates in one stable top-m (:meth:`Backend.topk_stable`) over a ``[G, r*V]`` view.
A :class:`Rule` decides what a kept candidate becomes (live row or finished hypothesis) and when
an input stops. Bookkeeping of the ``k`` rows (tokens, logprobs, which input) is numpy on the host;
no Python loop runs over rows or tokens until the result is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from beamsearch._backend import NEG_INF, Backend, backend_of
from beamsearch._state import find_torch_device, select_state
from beamsearch.processors import LogitsProcessor, StepContext

StepFn = Callable[[Any, Any], tuple[Any, Any]]


@dataclass
class Rows:
    """A set of rows (live beams, or hypotheses finished at one step), all numpy.

    Attributes:
        input: int64 ``[k]``, the input each row belongs to; live rows are input-major.
        logprob: float64 ``[k]``, the sum of processed log-probabilities along the row's path.
        hist: int64 ``[k, P + t]``: ``P`` columns of left-padded prompt (kept only when a
            processor needs history), then the ``t`` generated tokens.
        token_logprobs: float64 ``[k, t]`` per-token log-probabilities, or None when not asked.
    """

    input: np.ndarray
    logprob: np.ndarray
    hist: np.ndarray
    token_logprobs: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> Rows:
        """The rows ``idx`` (int ``[j]`` or bool ``[k]``)."""
        tlp = None if self.token_logprobs is None else self.token_logprobs[idx]
        return Rows(self.input[idx], self.logprob[idx], self.hist[idx], tlp)


@dataclass
class Candidates:
    """Kept candidates of one step, input-major and in rank order within each input.

    Attributes:
        parent: int64 ``[j]``, the live row (position in this call) each extends.
        token: int64 ``[j]``.
        logprob: float64 ``[j]``, parent logprob + processed log-probability of the token.
    """

    parent: np.ndarray
    token: np.ndarray
    logprob: np.ndarray


class Rule:
    """A selection rule: how many candidates each input keeps and what they become.

    Subclasses set ``eos_competes``: True when an eos candidate takes a beam slot (SPEC section
    4), False when every finite eos extension is finished outside the beam (SPEC section 6).
    """

    eos_competes: bool = True

    def __init__(self, beam_size: int, eos: int, n_inputs: int) -> None:
        self.beam_size = beam_size
        self.eos = eos
        self.n_finished = np.zeros(n_inputs, dtype=np.int64)

    def width(self) -> np.ndarray:
        """int64 ``[N]``: how many candidates each input keeps this step."""
        raise NotImplementedError

    def stopped(self, live: Rows, step: int, finished: Rows | None) -> np.ndarray:
        """bool ``[k]``: live rows whose input stops now (beyond running out of rows)."""
        return np.zeros(live.input.shape[0], dtype=bool)


@dataclass
class Outcome:
    """What a search leaves for its result builder.

    Attributes:
        finished: every finished hypothesis, in production order (tokens include eos).
        live: the rows still live when the search ended (unfinished), input-major, rank order.
        prompt_width: ``P``, the number of prompt columns at the start of each ``hist``.
    """

    finished: Rows
    live: Rows
    prompt_width: int


def _check_logits(logits: Any, k: int, vocab: int | None) -> tuple[Backend, Any]:
    """Validate the model's logits for ``k`` rows; returns the backend and float logits."""
    backend = backend_of(logits)
    x = backend.compute(logits)
    shape = tuple(x.shape)
    if len(shape) != 2:
        raise ValueError(f"logits must be 2-D [k, V]; got shape {shape}")
    if shape[0] != k:
        raise ValueError(f"logits must be [k, V] with k={k} rows passed; got shape {shape}")
    if vocab is not None and shape[1] != vocab:
        raise ValueError(f"logits V changed between calls: was {vocab}, got shape {shape}")
    if shape[1] == 0:
        raise ValueError(f"logits must have V >= 1 columns; got shape {shape}")
    return backend, x


def _bad_rows(backend: Backend, logp: Any, raw: Any, processors: Sequence[LogitsProcessor],
              ctx: StepContext | None) -> None:
    """Handle rows whose log-softmax came out NaN (column 0 tells).

    A row the model returned with NaN, +inf or no finite entry raises; so does a row that a
    processor made NaN or +inf. A row that processing left with no finite entry has no extension
    (all -inf). Processors are row-wise, so a flagged row is re-processed alone to tell which.
    """
    rows = np.flatnonzero(np.isnan(backend.column(logp, 0)))
    if rows.size == 0:
        return
    shape = tuple(raw.shape)
    for row in rows.tolist():
        raw_row = backend.compute(raw[row : row + 1])  # --> [1, V], as the model returned it
        values = backend.to_numpy(raw_row)
        where = ""
        if np.isfinite(values).any() and not np.isnan(values).any() and not (values == np.inf).any():
            x = backend.copy(raw_row)
            assert ctx is not None and processors, "a valid row cannot give NaN without processing"
            one = StepContext(ctx.step, ctx.history[row : row + 1], ctx.row_input[row : row + 1], backend)
            for processor in processors:
                x = processor(x, one)
            values, where = backend.to_numpy(x), " after logits_processors"
        if np.isnan(values).any():
            raise ValueError(f"logits row {row} contains NaN{where} (logits shape {shape})")
        if (values == np.inf).any():
            raise ValueError(f"logits row {row} contains +inf{where} (logits shape {shape})")
        if not where:
            raise ValueError(f"logits row {row} has no finite entry (logits shape {shape})")
    logp[backend.from_numpy(rows, like=logp)] = NEG_INF


def _group(backend: Backend, cand: Any, row_input: np.ndarray) -> tuple[Any, np.ndarray]:
    """``cand [k, V] -> ([G, r*V], start [G])``: each input's candidates on one row.

    Row ``g`` lists input g's live rows one after another (padded with -inf to the widest
    input), so a flat position ``b*V + v`` is the spec's tie order. ``start[g]`` is the first
    live row of group g.
    """
    k, vocab = cand.shape
    start, counts = runs(row_input)
    width = int(counts.max())
    if (counts == width).all():
        return cand.reshape(start.shape[0], width * vocab), start  # --> [G, r*V]
    group = np.repeat(np.arange(start.shape[0]), counts)
    slot = group * width + (np.arange(k) - start[group])
    padded = backend.full((start.shape[0] * width, vocab), NEG_INF, like=cand)
    padded[backend.from_numpy(slot, like=cand)] = cand
    return padded.reshape(start.shape[0], width * vocab), start  # --> [G, r*V]


def _rank(backend: Backend, cand: Any, row_input: np.ndarray, width: np.ndarray) -> Candidates:
    """Keep input i's ``width[i]`` best finite candidates, ties to the lower flat index."""
    vocab = cand.shape[1]
    grouped, start = _group(backend, cand, row_input)
    keep = width[row_input[start]]  # --> [G], per live input
    m = min(int(keep.max()), grouped.shape[1])
    idx, val = backend.topk_stable(grouped, m)  # --> [G, m] each
    idx = backend.to_numpy(idx)
    val = backend.to_numpy(val).astype(np.float64)
    g, rank = np.nonzero(np.isfinite(val) & (np.arange(m) < keep[:, None]))
    flat = idx[g, rank]
    return Candidates(start[g] + flat // vocab, flat % vocab, val[g, rank])


def _extend(rows: Rows, chosen: Candidates, step_logprob: np.ndarray | None) -> Rows:
    """New rows: each parent's row with its chosen token appended."""
    parent = rows.take(chosen.parent)
    hist = np.concatenate([parent.hist, chosen.token[:, None]], axis=1)
    tlp = None
    if parent.token_logprobs is not None and step_logprob is not None:
        tlp = np.concatenate([parent.token_logprobs, step_logprob[:, None]], axis=1)
    return Rows(parent.input, chosen.logprob, hist, tlp)


def run(
    step_fn: StepFn,
    init_state: Any,
    first_tokens: np.ndarray,
    rule: Rule,
    max_steps: int,
    *,
    prompts: Sequence[Sequence[int]] | None = None,
    processors: Sequence[LogitsProcessor] = (),
    token_ids: dict[str, int] | None = None,
    token_logprobs: bool = False,
) -> Outcome:
    """Run the search.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per input.
        first_tokens: int64 ``[N]``, y_prev of the first call (one row per input).
        rule: the selection rule.
        max_steps: the most tokens generated.
        prompts: per input, the tokens before generation (kept in the history when a processor
            needs it).
        processors: applied in order to the ``[k, V]`` logits before log_softmax.
        token_ids: named token ids to check against ``[0, V)`` once V is known.
        token_logprobs: also record each row's per-token log-probabilities.

    Returns:
        An :class:`Outcome` with every finished hypothesis and the rows still live.
    """
    n = first_tokens.shape[0]
    keep_prompt = any(getattr(p, "needs_history", False) for p in processors)
    hist = _prompt_matrix(prompts) if keep_prompt and prompts is not None else np.zeros((n, 0), np.int64)
    prompt_width = hist.shape[1]
    live = Rows(np.arange(n), np.zeros(n), hist, np.zeros((n, 0)) if token_logprobs else None)
    finished: list[Rows] = []
    device = find_torch_device(init_state)
    y_prev: Any = _as_index(first_tokens, device)
    state, vocab, backend = init_state, None, None
    for step in range(1, max_steps + 1):
        k = live.input.shape[0]
        logits, new_state = step_fn(state, y_prev)
        backend, x = _check_logits(logits, k, vocab)
        if vocab is None:
            vocab = int(x.shape[1])
            _check_token_ids(token_ids or {}, prompts, vocab)
        ctx = None
        if processors:
            x = backend.copy(x) if x is logits else x  # processors may write in place
            ctx = StepContext(step, live.hist, live.input, backend)
            for processor in processors:
                x = processor(x, ctx)
        # log_softmax into a buffer the search owns (the processed copy, or a new one)
        cand = backend.log_softmax(x, inplace=x is not logits)  # --> [k, V]
        _bad_rows(backend, cand, logits, processors, ctx)
        if live.logprob.any():
            backend.add_rows_(cand, live.logprob)  # --> [k, V]: logprob + log-probability
        eos_logprob = None
        if not rule.eos_competes:
            eos_logprob = backend.column(cand, rule.eos)  # --> [k]
            cand[:, rule.eos] = NEG_INF
        chosen = _rank(backend, cand, live.input, rule.width())
        # per-token log-probabilities (when asked): the step's increase of each row's logprob
        step_lp = chosen.logprob - live.logprob[chosen.parent] if token_logprobs else None
        new = _extend(live, chosen, step_lp)
        done = _finished_rows(rule, live, new, chosen, eos_logprob, token_logprobs)
        if done is not None:
            finished.append(done)
            rule.n_finished += np.bincount(done.input, minlength=rule.n_finished.shape[0])
        if rule.eos_competes:
            keep = chosen.token != rule.eos
            new, parent = new.take(keep), chosen.parent[keep]
        else:
            parent = chosen.parent
        stop = rule.stopped(new, step, done)
        if stop.any():
            new, parent = new.take(~stop), parent[~stop]
        live = new
        if live.input.shape[0] == 0 or step == max_steps:
            break
        if not (parent.shape[0] == k and (parent == np.arange(k)).all()):
            new_state = select_state(new_state, _as_index(parent, device))
        state = new_state
        y_prev = _as_index(new.hist[:, -1], device)
    return Outcome(_concat_rows(finished, prompt_width, token_logprobs), live, prompt_width)


def _finished_rows(rule: Rule, live: Rows, new: Rows, chosen: Candidates,
                   eos_logprob: np.ndarray | None, token_logprobs: bool) -> Rows | None:
    """The hypotheses that end with eos at this step, in production order."""
    if rule.eos_competes:
        is_eos = chosen.token == rule.eos
        return new.take(is_eos) if is_eos.any() else None
    assert eos_logprob is not None
    rows = np.flatnonzero(np.isfinite(eos_logprob))
    if rows.size == 0:
        return None
    tokens = np.full(rows.shape[0], rule.eos, dtype=np.int64)
    step_lp = eos_logprob[rows] - live.logprob[rows] if token_logprobs else None
    return _extend(live, Candidates(rows, tokens, eos_logprob[rows]), step_lp)


def _concat_rows(parts: list[Rows], prompt_width: int, token_logprobs: bool) -> Rows:
    """One :class:`Rows` of hypotheses of different lengths, right-padded with -1 (and NaN)."""
    if not parts:
        empty = np.zeros((0, prompt_width), np.int64)
        return Rows(np.zeros(0, np.int64), np.zeros(0), empty, np.zeros((0, 0)) if token_logprobs else None)
    width = max(p.hist.shape[1] for p in parts)
    hist = np.concatenate([_pad_right(p.hist, width, -1) for p in parts])
    tlp = None
    if token_logprobs:
        tw = width - prompt_width
        tlp = np.concatenate([_pad_right(p.token_logprobs, tw, np.nan) for p in parts])  # type: ignore[arg-type]
    return Rows(np.concatenate([p.input for p in parts]), np.concatenate([p.logprob for p in parts]),
                hist, tlp)


def _pad_right(a: np.ndarray, width: int, value: float) -> np.ndarray:
    out = np.full((a.shape[0], width), value, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out


def runs(sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal values in a sorted int array ``[k]`` (k >= 1): ``(start [G], length [G])``."""
    change = np.empty(sorted_ids.shape[0], dtype=bool)
    change[0] = True
    np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=change[1:])
    start = np.flatnonzero(change)
    return start, np.diff(start, append=sorted_ids.shape[0])


def _prompt_matrix(prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """int64 ``[N, P]``: the prompts right-aligned, left-padded with -1."""
    width = max((len(p) for p in prompts), default=0)
    out = np.full((len(prompts), width), -1, dtype=np.int64)
    for i, p in enumerate(prompts):
        if len(p):
            out[i, width - len(p):] = p
    return out


def _as_index(a: np.ndarray, device: Any) -> Any:
    """int64 row/token ids as numpy, or as a torch tensor on ``device`` when the state is torch."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    if device is None:
        return a
    import torch

    return torch.as_tensor(a, device=device)


def _check_token_ids(token_ids: dict[str, int], prompts: Sequence[Sequence[int]] | None, vocab: int) -> None:
    for name, value in token_ids.items():
        if not 0 <= value < vocab:
            raise ValueError(f"{name} must be in [0, V) with V={vocab}; got {value}")
    for i, prompt in enumerate(prompts or ()):
        for j, token in enumerate(prompt):
            if not 0 <= token < vocab:
                raise ValueError(f"prompts[{i}][{j}] must be in [0, V) with V={vocab}; got {token}")
