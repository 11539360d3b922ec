"""Several eos ids (SPEC section 10): every finite extension by any of them finishes."""

from __future__ import annotations

from typing import Any

import numpy as np

from beamsearch import _validate as check


def eos_ids(name: str, value: Any) -> np.ndarray:
    """An int or a non-empty sequence of ints >= 0 as int64 ``[E]`` (sorted, unique)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return np.array([check.token(name, value)], dtype=np.int64)
    ids = check.token_list(name, value)
    return np.unique(np.asarray(ids, dtype=np.int64))
