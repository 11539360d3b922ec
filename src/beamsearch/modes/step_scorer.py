"""Step search's scorer: how it is named (:func:`scorer_of`), called (:func:`call_scorer`: on
copies of the candidates' prompts and tokens, so that a scorer that edits its arguments changes
nothing of the search) and what its answer must be (:func:`real_scores`: one real per candidate,
each refusal naming what the scorer returned and for which candidate)."""

from __future__ import annotations

import importlib
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["call_scorer", "real_scores", "scorer_of"]


def scorer_of(value: Any) -> Callable[..., Any]:
    """A scorer: a callable, or ``"module:function"`` imported."""
    if isinstance(value, str):
        module, sep, name = value.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"scorer must be a callable or 'module:function'; got {value!r}")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"scorer {value!r} cannot be imported: {e}") from None
        value = found
    if not callable(value):
        raise TypeError(f"scorer must be callable (prompts, partial_solutions) -> scores; got {type(value).__name__}")
    return value


def call_scorer(scorer: Callable[..., Any], prompts: list[list[int]], partials: list[list[int]], c: int,
                aggregation: str) -> np.ndarray:
    """The scorer's answer for the ``c`` candidates (``prompts[j]``, ``partials[j]``: candidate j's
    prompt and generated tokens), checked: float64 ``[c]``, no NaN (and for the ``prod``
    aggregation, each in ``[0, inf)``: a product of signed or infinite scores does not rank).
    The scorer gets new lists: what it does to them stays with it."""
    out = real_scores(scorer([list(p) for p in prompts], [list(t) for t in partials]), c)
    if np.isnan(out).any():
        raise ValueError(f"scorer returned NaN for candidate {int(np.flatnonzero(np.isnan(out))[0])}")
    outside = ~((out >= 0) & (out < np.inf))  # --> [c]
    if aggregation == "prod" and outside.any():
        j = int(np.flatnonzero(outside)[0])
        raise ValueError(f"aggregation 'prod' multiplies step scores, which must be in [0, inf) (a verifier's "
                         f"probabilities); scorer returned {out[j]} for candidate {j}")
    return out


def real_scores(got: Any, c: int) -> np.ndarray:
    """float64 ``[c]``: a scorer's answer as reals. Taken: a sequence of ``c`` reals (Python or
    numpy ints and floats, 0-d arrays or tensors holding one), a numpy array or torch tensor
    ``[c]`` of an integer or floating dtype (bfloat16 and float16 included, any device).
    Refused, naming the value and the candidate: bools, complex numbers, strings, None and other
    objects (TypeError), an integer too large for a float64 (ValueError)."""
    if hasattr(got, "detach") and hasattr(got, "dtype"):  # a torch tensor
        got = _tensor_reals(got, c)
    if isinstance(got, np.ndarray) and got.dtype.kind != "O":
        if got.dtype.kind not in "iuf":
            raise TypeError(f"scorer must return one real per candidate ({c}); got an array of dtype {got.dtype}")
        if got.shape != (c,):
            raise ValueError(f"scorer must return one real per candidate: shape ({c},); got shape {got.shape}")
        return got.astype(np.float64)
    if isinstance(got, (str, bytes, dict)) or not hasattr(got, "__len__") or not hasattr(got, "__iter__"):
        raise TypeError(f"scorer must return one real per candidate ({c}); got {got!r:.80} "
                        f"of type {type(got).__name__}")
    if len(got) != c:
        raise ValueError(f"scorer must return one real per candidate: shape ({c},); got shape ({len(got)},)")
    return np.array([_real(x, c, j) for j, x in enumerate(got)], np.float64).reshape(c)


def _tensor_reals(got: Any, c: int) -> np.ndarray:
    """A torch tensor's values as float64 on the host (any real dtype, any device)."""
    if got.dtype.is_complex or not (got.dtype.is_floating_point or "int" in str(got.dtype)):
        raise TypeError(f"scorer must return one real per candidate ({c}); got a tensor of dtype {got.dtype}")
    return got.detach().cpu().double().numpy()


def _real(x: Any, c: int, j: int) -> float:
    """Candidate j's score ``x`` as a float (see :func:`real_scores`)."""
    if getattr(x, "shape", None) == () and hasattr(x, "item"):  # a 0-d array or tensor: its Python value
        x = x.item()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"scorer must return one real per candidate ({c}); got {x!r:.80} of type "
                        f"{type(x).__name__} for candidate {j}")
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"scorer returned an integer too large for a float64 ({str(x)[:20]}..., "
                         f"{len(str(x))} digits) for candidate {j}") from None
