"""Checks of what the search is given while it runs: each step function's output (logits shape,
the state's rows), token ids against the vocabulary once V is known, rows of NaN or +inf and
which processor made them, and a caller's processors (:class:`CheckedProcessor`). Errors name
the parameter or the processor at fault; argument checks at the entry are in
:mod:`beamsearch.core.validate`."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from beamsearch.backends import backend_of

_KEYWORDS = {"MinNewTokens": ("min_new_tokens", "m"), "Temperature": ("temperature", "temperature"),
             "TopK": ("top_k", "k"), "NoRepeatNGram": ("no_repeat_ngram_size", "n")}
"""The processors a search builds from its own keywords: class name -> (keyword, attribute)."""


def step_output(out: Any) -> tuple[Any, Any]:
    """``(logits, new_state)`` from what the step function returned, or a clear TypeError."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError("step_fn must return a pair (logits, new_state); got "
                        f"{describe(out)}" + (" (only logits?)" if hasattr(out, "shape") else ""))
    logits, new_state = out
    if hasattr(logits, "shape") or isinstance(logits, (list, tuple)):
        if backend_of(logits).numeric(logits):
            return logits, new_state
        if any(kind in str(getattr(logits, "dtype", "")) for kind in ("bool", "complex")):  # an array, not numbers
            swapped = hasattr(new_state, "shape") and backend_of(new_state).numeric(new_state)
            raise TypeError(f"step_fn returned logits {describe(logits)} of dtype {logits.dtype}; expected a "
                            "real-valued array [k, V] (floats or integers)" +
                            (f"; or is the pair swapped? the second is {describe(new_state)}" if swapped else ""))
    if hasattr(new_state, "shape") and backend_of(new_state).numeric(new_state):
        raise TypeError("step_fn must return (logits, new_state) in that order; got "
                        f"({describe(logits)}, {describe(new_state)}): swapped?")
    raise TypeError(f"step_fn returned logits {describe(logits)}; expected a real-valued array [k, V]")


def describe(obj: Any) -> str:
    shape = getattr(obj, "shape", None)
    text = type(obj).__name__ + (f" of shape {tuple(shape)}" if shape is not None else "")
    return text if shape is not None or obj is None else f"{text} {obj!r:.60}"


def logits_shape(x: Any, k: int, vocab: int | None) -> None:
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


def token_ids_below(checks: Sequence[tuple[str, Any]], vocab: int) -> None:
    """Every token id the caller gave must be in ``[0, V)``; checked once V is known."""
    for name, ids in checks:
        if _all_below(ids, vocab):
            continue
        for j, value in flat_ids(ids):
            if not 0 <= value < vocab:
                where = name if j is None else f"{name}{j}"
                raise ValueError(f"{where} must be in [0, V) with V={vocab}; got {value}")


def _all_below(ids: Any, vocab: int) -> bool:
    """Whether every id of a (nested) list of Python ints is in ``[0, V)``, without a call per id
    (False for anything else: :func:`token_ids_below` then looks at each id)."""
    if type(ids) is int:
        return 0 <= ids < vocab
    if not isinstance(ids, (list, tuple)):
        return False
    if all(type(t) is int for t in ids):
        return not ids or (min(ids) >= 0 and max(ids) < vocab)
    return all(_all_below(item, vocab) for item in ids)


def flat_ids(ids: Any, path: str = "") -> list[tuple[str | None, int]]:
    if isinstance(ids, (int, np.integer)):
        return [(path or None, int(ids))]
    out: list[tuple[str | None, int]] = []
    for j, item in enumerate(ids):
        out.extend(flat_ids(item, f"{path}[{j}]"))
    return out


def bad_rows(backend: Any, raw: Any, rows: np.ndarray, processors: Sequence[Any], ctx: Any) -> None:
    """Rows ``rows`` (int64 ``[r]``) whose log-softmax came out NaN: raise for a row the model
    returned with NaN, +inf or no finite entry, or that a processor made NaN or +inf (naming the
    last that did), the first such row in order; return when processing left every one with no
    finite entry (the engine masks those). Processors are row-wise, so the flagged rows the model
    returned valid are re-processed together, alone, to tell which."""
    shape = tuple(raw.shape)
    flagged = backend.compute(backend.take_rows(raw, backend.index(rows, raw)))  # --> [r, V], as the engine ran them
    values = backend.to_numpy(flagged)
    where = np.full(len(rows), "", dtype=object)
    valid = np.flatnonzero(np.isfinite(values).any(1) & ~_nan_or_inf(values))
    if valid.size:
        assert ctx is not None and processors, "a valid row cannot give NaN without processing"
        x = backend.copy(backend.take_rows(flagged, backend.index(valid, flagged)))
        one = ctx.rows(rows[valid])
        where[valid], bad = " after logits_processors", np.zeros(valid.size, bool)
        for processor in processors:  # the last to turn a row NaN or +inf is named
            x = processor(x, one)
            processed = backend.to_numpy(x)
            now = _nan_or_inf(processed)
            where[valid[now & ~bad]] = f" after {processor_label(processor)}"
            bad = now
        values[valid] = processed
    for j, row in enumerate(rows.tolist()):
        if np.isnan(values[j]).any():
            raise ValueError(f"logits row {row} contains NaN{where[j]} (logits shape {shape})")
        if (values[j] == np.inf).any():
            raise ValueError(f"logits row {row} contains +inf{where[j]} (logits shape {shape})")
        if not where[j]:
            raise ValueError(f"logits row {row} has no finite entry (logits shape {shape})")


def _nan_or_inf(values: np.ndarray) -> np.ndarray:
    """bool ``[r]``: the rows of ``values`` ``[r, V]`` with a NaN or a +inf."""
    return np.isnan(values).any(1) | (values == np.inf).any(1)


def processor_label(processor: Any) -> str:
    """What a processor of the search is called in messages: the caller's by
    ``logits_processors[i]`` and its repr, one built from a keyword by that keyword and value."""
    if isinstance(processor, CheckedProcessor):
        return processor.name
    named = _KEYWORDS.get(type(processor).__name__)
    if named is None:
        return repr(processor)
    keyword, attribute = named
    return f"{keyword}={getattr(processor, attribute)!r}"


def state_rows(state: Any, n: int, name: str = "init_state") -> None:
    """Every array leaf of ``state`` found in tuples, lists and dicts must have ``n`` rows on axis
    0 (registered types such as caches are not opened)."""
    for path, leaf in array_leaves(state, name):
        shape = tuple(leaf.shape)
        if len(shape) >= 1 and shape[0] != n:
            raise ValueError(f"init_state must have {n} row{'s' if n != 1 else ''} (one per input) on "
                             f"axis 0 of every array leaf; {path} has shape {shape}")


def array_leaves(state: Any, path: str) -> list[tuple[str, Any]]:
    if isinstance(state, dict):
        return [x for key, v in state.items() for x in array_leaves(v, f"{path}[{key!r}]")]
    if isinstance(state, (tuple, list)):
        return [x for j, v in enumerate(state) for x in array_leaves(v, f"{path}[{j}]")]
    shape = getattr(state, "shape", None)
    if shape is None or isinstance(state, type):
        return []
    try:
        len(shape)
    except TypeError:
        return []
    return [(path, state)]


class CheckedProcessor:
    """A caller's processor ``logits_processors[i]`` as the search runs it: what it returns is
    checked (:func:`processed`), and its errors and token ids are named after it.

    Attributes:
        processor: the caller's callable.
        name: ``"logits_processors[i] (...)"`` with its repr (a function's qualified name), for
            messages.
        needs_history, last_step, masks_only: the processor's own (see
            :mod:`beamsearch.processors`), read once here: the engine reads them from every piece
            it runs, the built-in ones declaring their own.
    """

    __slots__ = ("processor", "name", "needs_history", "last_step", "masks_only")

    def __init__(self, index: int, processor: Any) -> None:
        self.processor = processor
        self.name = f"logits_processors[{index}] ({_shown(processor)})"
        self.needs_history = bool(getattr(processor, "needs_history", False))
        self.last_step = getattr(processor, "last_step", None)
        self.masks_only = bool(getattr(processor, "masks_only", False))

    def __call__(self, logits: Any, ctx: Any) -> Any:
        return processed(self.name, self.processor(logits, ctx), logits)

    @property
    def vocab_checks(self) -> tuple[tuple[str, Any], ...]:
        """``(name, ids)`` pairs of the token ids the processor declares (its ``vocab_checks``
        attribute: ``(argument, ids)`` pairs), for the ``[0, V)`` check at the first call."""
        return tuple((f"{self.name} {argument}", ids) for argument, ids in getattr(self.processor, "vocab_checks", ()))


def _shown(processor: Any) -> str:
    """A function by its qualified name, anything else by its repr (cut to 100 characters)."""
    if inspect.isfunction(processor) or inspect.ismethod(processor):
        return f"function {processor.__qualname__}"
    text = repr(processor)
    return text if len(text) <= 100 else text[:97] + "..."


def processed(name: str, out: Any, given: Any) -> Any:
    """``out``, what processor ``name`` returned for the logits ``given [k, V]``, when it is an
    array of the same library, shape, dtype and device; else a TypeError (ValueError for a shape
    or device) saying what it returned and what was expected."""
    if out is given:
        return out
    expected = f"{_kind(given)} like the logits it was given"
    if type(out) is not type(given):
        hint = " (did it write into the logits and not return them?)" if out is None else ""
        raise TypeError(f"{name} returned {'None' if out is None else describe(out)}; expected {expected}{hint}")
    if tuple(out.shape) != tuple(given.shape):
        raise ValueError(f"{name} returned shape {tuple(out.shape)}; expected {expected}")
    if out.dtype != given.dtype:
        raise TypeError(f"{name} returned dtype {out.dtype}; expected {expected}")
    if getattr(out, "device", None) != getattr(given, "device", None):
        raise ValueError(f"{name} returned an array on device {out.device}; expected {expected}")
    return out


def _kind(x: Any) -> str:
    """``"a <library> <dtype> <type> of shape (k, V)"`` (``on <device>`` for torch)."""
    device = getattr(x, "device", None)
    where = f" on {device}" if device is not None and not isinstance(x, np.ndarray) else ""
    dtype = str(x.dtype).removeprefix("torch.")
    return f"a {type(x).__module__.split('.')[0]} {dtype} {type(x).__name__} of shape {tuple(x.shape)}{where}"


def first_call_note(first_tokens: np.ndarray, vocab_checks: Sequence[tuple[str, Any]], shown: int = 6) -> str:
    """What a model's first call was given (its ``y_prev``, int64 ``[N]``) and where each id came
    from (``prompts[i][j]``, the last id of a prompt, or ``bos_token_id`` for an empty one; as the
    search's ``vocab_checks`` name them, ``(name, ids)`` pairs): the note added to an exception
    that call raises. V is known only from that call's logits, so an id
    outside ``[0, V)`` reaches a step function that indexes by it (``TABLE[y_prev]``) first."""
    checks = dict(vocab_checks)
    given, bos = checks.get("prompts"), next((name for name in ("bos_token_id", "bos") if name in checks), "bos")
    parts = []
    for i, token in enumerate(first_tokens[:shown].tolist()):
        where = f"prompts[{i}][{len(given[i]) - 1}]" if given is not None and given[i] else f"{bos} (input {i})"
        parts.append(f"{where} = {token}")
    more = f", ... ({first_tokens.shape[0]} ids)" if first_tokens.shape[0] > shown else ""
    return (f"beamsearch: raised by the model's first call, whose y_prev was {', '.join(parts)}{more}; each id "
            "must be in [0, V), which is checked only once the call returns its logits")
