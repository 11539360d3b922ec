"""The one search engine: a loop of three named steps around one frozen beam record.

Every search of the package (``greedy_decode``, ``beam_search``, ``beam_search_batch``,
``score_sequences``) is :func:`run` with a strategy (:mod:`beamsearch._strategies`) and controls
(:mod:`beamsearch._controls`). Per step:

1. :func:`score_step`: one model call for all live rows of all inputs, then on the logits' own
   backend the processors, log_softmax, and the masks after it -> ``[k, V]`` log-probabilities;
2. ``strategy.select``: which extensions live on, which end, which inputs stop;
3. :func:`advance`: extend the kept rows, record what ended, retire inputs that stopped or reached
   their ``max_steps``; then the model state is reordered by the kept rows' parents.

Bookkeeping (:class:`~beamsearch._beam.Beam`, the back-pointer :class:`~beamsearch._beam.Trail`)
is numpy on the host and O(k) per step; paths are rebuilt once, for the result. No Python loop
runs over rows or tokens in the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from beamsearch._backends import NEG_INF, Backend, backend_of, first_foreign_leaf
from beamsearch._beam import Beam, Candidates, Ended, Trail
from beamsearch._controls import Controls
from beamsearch._select import StepScores, Terminals
from beamsearch._state import select_state
from beamsearch._strategies import Selection, Strategy
from beamsearch.processors import StepContext

StepFn = Callable[[Any, Any], tuple[Any, Any]]

_NO_PAIRS = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Outcome:
    """What a search leaves for its result builder: every hypothesis that ended, in production
    order, and the trail their paths are rebuilt from."""

    ended: Ended
    trail: Trail


def run(step_fn: StepFn, init_state: Any, first_tokens: np.ndarray, strategy: Strategy,
        controls: Controls) -> Outcome:
    """Run a search.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per input (axis 0 of every array leaf).
        first_tokens: int64 ``[N]``, ``y_prev`` of the first call (one row per input).
        strategy: the selection rule.
        controls: eos ids, per-input ``max_steps``, processors, masks, stop sequences.

    Returns:
        An :class:`Outcome`.
    """
    n = first_tokens.shape[0]
    check_state_rows(init_state, n)
    beam = start_beam(n, controls)
    trail, sstate = Trail(), strategy.start(n)
    ended: list[tuple[Beam, Candidates, int, bool | np.ndarray]] = []
    like = first_foreign_leaf(init_state)
    index = _indexer(like)
    state, y_prev, vocab, scratch = init_state, index(first_tokens), None, None
    for step in range(1, int(controls.max_steps.max()) + 1):
        out = step_fn(state, y_prev)
        scores, new_state = score_step(out, beam, step, controls, trail, vocab, scratch)
        vocab = scores.vocab
        selection, sstate = strategy.select(sstate, scores)
        scratch = scores.logp  # the strategy is done with it: next step's buffer (no new allocation)
        beam, parent, done = advance(beam, selection, step, controls, trail)
        ended.extend(done)
        if beam.size == 0:
            break
        if not (parent.shape[0] == scores.beam.size and (parent == np.arange(parent.shape[0])).all()):
            new_state = select_state(new_state, index(parent))
        state, y_prev = new_state, index(beam.token)
    return Outcome(Ended.concat(ended), trail)


def start_beam(n: int, controls: Controls) -> Beam:
    """The N rows before step 1: one per input, logprob 0."""
    recent = None if controls.stops is None else np.full((n, controls.stops.window), -1, np.int64)
    history = None
    if controls.keep_history:
        prompts = controls.prompts or [[] for _ in range(n)]
        p = max((len(x) for x in prompts), default=0)
        history = np.full((n, p + int(controls.max_steps.max())), -1, np.int64)
        for i, x in enumerate(prompts):
            if len(x):
                history[i, p - len(x) : p] = x
    return Beam(np.arange(n), np.zeros(n), np.zeros(n, np.int64), history, recent)


def score_step(out: Any, beam: Beam, step: int, controls: Controls, trail: Trail,
               vocab: int | None, scratch: Any = None) -> tuple[StepScores, Any]:
    """Check the model's output and turn it into the step's processed log-probabilities.

    Order (SPEC section 10): the processors (min_new_tokens' eos mask, temperature, top-k,
    n-gram, the user's), log_softmax, the masks (the forced prefix). ``scratch`` is the previous
    step's buffer, reused when its shape and dtype fit (the model's own array is never written).
    """
    logits, new_state = _unpack(out)
    backend = backend_of(logits)
    x = backend.compute(logits)
    _check_shape(x, beam.size, vocab)
    if vocab is None:
        _check_token_ids(controls, int(x.shape[1]))
    processors, masks = _active(controls.processors, step), _active(controls.masks, step)
    ctx = None
    if processors or masks:
        ctx = StepContext(step, _history(beam, step, controls, trail), beam.input, backend)
    buffer = scratch if scratch is not None and backend.reusable(scratch, x) else None
    if processors:
        if x is logits:  # processors may write: never into the model's array
            x = backend.copy(x, out=buffer)
        for processor in processors:
            x = processor(x, ctx)
    # log_softmax into a buffer the search owns: the processed array itself, or the scratch buffer
    logp = backend.log_softmax(x, out=x if x is not logits else buffer)  # --> [k, V]
    bad = np.isnan(backend.column(logp, 0))  # a NaN/+inf/no-finite row comes out all NaN
    if bad.any():
        logp = _bad_rows(backend, logp, logits, np.flatnonzero(bad), processors, ctx)
    for mask in masks:
        logp = mask(logp, ctx)
    if controls.stops is not None and beam.recent is not None:
        rows, tokens = controls.stops.pairs(beam.recent, step)
    else:
        rows = tokens = _NO_PAIRS
    return StepScores(backend, logp, beam, Terminals(controls.eos, rows, tokens), step), new_state


def _active(pieces: tuple[Any, ...], step: int) -> tuple[Any, ...] | list[Any]:
    """The processors (or masks) that act at this step: a piece with an int ``last_step``
    attribute is a no-op after that step and is skipped (no copy of the logits for it)."""
    if not pieces:
        return pieces
    return [p for p in pieces if getattr(p, "last_step", None) is None or step <= p.last_step]


def advance(beam: Beam, selection: Selection, step: int, controls: Controls,
            trail: Trail) -> tuple[Beam, np.ndarray, list[tuple[Beam, Candidates, int, bool | np.ndarray]]]:
    """Extend the kept rows and record what ended.

    Returns:
        The next beam (the rows passed to the next call), their parents (rows of this call), and
        the hypotheses that ended at this step: the strategy's, then the live rows of inputs that
        stop now or reached their ``max_steps`` (unfinished).
    """
    live = selection.live
    inputs = beam.input[live.parent]
    retire = controls.max_steps[inputs] <= step
    if selection.stop is not None:
        retire |= selection.stop[inputs]
    done: list[tuple[Beam, Candidates, int, bool | np.ndarray]] = []
    if selection.ended.size:
        done.append((beam, selection.ended, step, selection.ended_finished))
    if retire.any():
        done.append((beam, live.take(retire), step, False))
        live, inputs = live.take(~retire), inputs[~retire]
    parent = live.parent
    with np.errstate(invalid="ignore"):  # -inf - -inf: a teacher-forced path already at -inf
        trail.add(live.token, parent, live.logprob - beam.logprob[parent])
    return Beam(inputs, live.logprob, live.token, _extend_history(beam, live, step, controls),
                _extend_recent(beam.recent, live)), parent, done


def _extend_history(beam: Beam, live: Candidates, step: int, controls: Controls) -> np.ndarray | None:
    """The kept rows' histories with the new token in column ``P + step - 1`` (preallocated
    width; only the filled columns are copied)."""
    if beam.history is None:
        return None
    filled = beam.history.shape[1] - int(controls.max_steps.max()) + step - 1  # P + step - 1
    history = np.empty((live.size, beam.history.shape[1]), np.int64)
    history[:, :filled] = beam.history[live.parent, :filled]
    history[:, filled] = live.token  # the columns after it are never read before they are written
    return history


def _extend_recent(recent: np.ndarray | None, live: Candidates) -> np.ndarray | None:
    """The kept rows' last w generated tokens, the new one last (None without stop sequences)."""
    if recent is None:
        return None
    if recent.shape[1] == 0:  # one-token stop sequences only: nothing to remember
        return recent[live.parent]
    out = np.empty_like(recent, shape=(live.size, recent.shape[1]))
    out[:, :-1] = recent[live.parent, 1:]
    out[:, -1] = live.token
    return out


def _history(beam: Beam, step: int, controls: Controls, trail: Trail) -> Any:
    """``ctx.history``: prompt + generated (a view) when kept, else generated only, rebuilt lazily."""
    if beam.history is not None:
        filled = beam.history.shape[1] - int(controls.max_steps.max()) + step - 1
        return beam.history[:, :filled]
    return lambda: trail.generated(np.arange(beam.size), step)


def _indexer(like: Any) -> Callable[[np.ndarray], Any]:
    """int64 host arrays -> ``y_prev`` / reorder indices in the state's library (and device)."""
    if like is None:
        return lambda a: np.ascontiguousarray(a, dtype=np.int64)
    backend = backend_of(like)
    return lambda a: backend.index(a, like)


def _unpack(out: Any) -> tuple[Any, Any]:
    """``(logits, new_state)`` from what the step function returned, or a clear TypeError."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError("step_fn must return a pair (logits, new_state); got "
                        f"{_describe(out)}" + (" (only logits?)" if hasattr(out, "shape") else ""))
    logits, new_state = out
    if hasattr(logits, "shape") or isinstance(logits, (list, tuple)):
        if backend_of(logits).numeric(logits):
            return logits, new_state
    if hasattr(new_state, "shape") and backend_of(new_state).numeric(new_state):
        raise TypeError("step_fn must return (logits, new_state) in that order; got "
                        f"({_describe(logits)}, {_describe(new_state)}): swapped?")
    raise TypeError(f"step_fn returned logits {_describe(logits)}; expected a real-valued array [k, V]")


def _describe(obj: Any) -> str:
    shape = getattr(obj, "shape", None)
    text = type(obj).__name__ + (f" of shape {tuple(shape)}" if shape is not None else "")
    return text if shape is not None or obj is None else f"{text} {obj!r:.60}"


def _check_shape(x: Any, k: int, vocab: int | None) -> None:
    shape = tuple(x.shape)
    if len(shape) != 2:
        raise ValueError(f"logits must be 2-D [k, V]; got shape {shape}")
    if shape[0] != k:
        raise ValueError(f"logits must be [k, V] with k={k} rows passed; got shape {shape}")
    if vocab is not None and shape[1] != vocab:
        raise ValueError(f"logits V changed between calls: was {vocab}, got shape {shape} "
                         "(does step_fn return (logits, new_state) in that order?)")
    if shape[1] == 0:
        raise ValueError(f"logits must have V >= 1 columns; got shape {shape}")


def _check_token_ids(controls: Controls, vocab: int) -> None:
    """Every token id the caller gave must be in ``[0, V)``; checked once V is known."""
    for name, ids in controls.vocab_checks:
        for j, value in _flat(ids):
            if not 0 <= value < vocab:
                where = name if j is None else f"{name}{j}"
                raise ValueError(f"{where} must be in [0, V) with V={vocab}; got {value}")


def _flat(ids: Any, path: str = "") -> list[tuple[str | None, int]]:
    if isinstance(ids, (int, np.integer)):
        return [(path or None, int(ids))]
    out: list[tuple[str | None, int]] = []
    for j, item in enumerate(ids):
        out.extend(_flat(item, f"{path}[{j}]"))
    return out


def _bad_rows(backend: Backend, logp: Any, raw: Any, rows: np.ndarray, processors: Sequence[Any],
              ctx: StepContext | None) -> Any:
    """Handle rows whose log-softmax came out NaN.

    A row the model returned with NaN, +inf or no finite entry raises; so does a row that a
    processor made NaN or +inf. A row that processing left with no finite entry has no extension
    (all -inf). Processors are row-wise, so a flagged row is re-processed alone to tell which.
    """
    shape = tuple(raw.shape)
    for row in rows.tolist():
        raw_row = backend.compute(raw[row : row + 1])  # --> [1, V], as the model returned it
        values = backend.to_numpy(raw_row)
        where = ""
        if np.isfinite(values).any() and not np.isnan(values).any() and not (values == np.inf).any():
            assert ctx is not None and processors, "a valid row cannot give NaN without processing"
            x, one = backend.copy(raw_row), ctx.rows(np.array([row]))
            for processor in processors:
                x = processor(x, one)
            values, where = backend.to_numpy(x), " after logits_processors"
        if np.isnan(values).any():
            raise ValueError(f"logits row {row} contains NaN{where} (logits shape {shape})")
        if (values == np.inf).any():
            raise ValueError(f"logits row {row} contains +inf{where} (logits shape {shape})")
        if not where:
            raise ValueError(f"logits row {row} has no finite entry (logits shape {shape})")
    return backend.fill_rows(logp, rows, NEG_INF)


def check_state_rows(state: Any, n: int, name: str = "init_state") -> None:
    """Every array leaf of ``state`` found in tuples, lists and dicts must have ``n`` rows on axis
    0 (registered types such as caches are not opened)."""
    for path, leaf in _leaves(state, name):
        shape = tuple(leaf.shape)
        if len(shape) >= 1 and shape[0] != n:
            raise ValueError(f"init_state must have {n} row{'s' if n != 1 else ''} (one per input) on "
                             f"axis 0 of every array leaf; {path} has shape {shape}")


def _leaves(state: Any, path: str) -> list[tuple[str, Any]]:
    if isinstance(state, dict):
        return [x for key, v in state.items() for x in _leaves(v, f"{path}[{key!r}]")]
    if isinstance(state, (tuple, list)):
        return [x for j, v in enumerate(state) for x in _leaves(v, f"{path}[{j}]")]
    shape = getattr(state, "shape", None)
    if shape is None or isinstance(state, type):
        return []
    try:
        len(shape)
    except TypeError:
        return []
    return [(path, state)]
