"""Argument checks at the public entry: clear errors naming the parameter and the value."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def integer(name: str, value: Any) -> int:
    """``value`` as an int; TypeError unless a Python int or numpy integer (bool refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer; got {value!r} of type {type(value).__name__}")
    return int(value)


def at_least(name: str, value: Any, low: int) -> int:
    """An integer ``>= low``."""
    v = integer(name, value)
    if v < low:
        raise ValueError(f"{name} must be >= {low}; got {v}")
    return v


def real(name: str, value: Any, *, positive: bool = False, finite: bool = False) -> float:
    """A float that is not NaN and is ``>= 0`` (``> 0`` when ``positive``; not inf when ``finite``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number; got {value!r} of type {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or v < 0 or (positive and v == 0) or (finite and math.isinf(v)):
        bound = ("> 0" if positive else ">= 0") + (" and finite" if finite else "")
        raise ValueError(f"{name} must be {bound}; got {value!r}")
    return v


def penalty_strength(name: str, value: Any, penalty: Any, longest: int) -> float:
    """A length-penalty strength: finite, >= 0, and small enough that ``lp(longest)`` is a finite
    positive float (else every score would round to -0.0 and rank the worse hypothesis first)."""
    v = real(name, value, finite=True)
    with np.errstate(over="ignore"):
        lp = float(penalty(np.asarray(longest), v))
    if not (math.isfinite(lp) and lp > 0):
        raise ValueError(f"{name}={value!r} is too large: the length penalty of {longest} tokens overflows ({lp})")
    return v


def token_list(name: str, value: Any, *, allow_empty: bool = False) -> list[int]:
    """A sequence of token ids (ints >= 0) as a list; a str, a scalar or (unless allowed) an empty
    sequence is refused."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of token ids; got {value!r:.80}")
    ids = [token(f"{name}[{j}]", t) for j, t in enumerate(value)]
    if not ids and not allow_empty:
        raise ValueError(f"{name} must be a non-empty sequence of token ids; got {value!r}")
    return ids


def token(name: str, value: Any) -> int:
    """A token id: an integer ``>= 0`` (the upper bound V is checked after the first call)."""
    v = integer(name, value)
    if v < 0:
        raise ValueError(f"{name} must be in [0, V); got {v}")
    return v


def prompts(value: Any, bos: int | None) -> list[list[int]]:
    """Each prompt as a list of non-negative ints; an empty prompt becomes ``[bos]``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"prompts must be a list of token-id lists; got {value!r:.80}")
    out = []
    for i, prompt in enumerate(value):
        if isinstance(prompt, (str, bytes)) or not hasattr(prompt, "__len__"):
            raise TypeError(f"prompts[{i}] must be a list of token ids; got {prompt!r:.80}")
        ids = [token(f"prompts[{i}][{j}]", t) for j, t in enumerate(prompt)]
        if not ids:
            if bos is None:
                raise ValueError(f"prompts[{i}] is empty and bos_token_id is None")
            ids = [bos]
        out.append(ids)
    return out
