"""Per-input length limits (SPEC section 10): ``max_steps`` an int or one int >= 1 per input."""

from __future__ import annotations

from typing import Any

import numpy as np

from beamsearch import _validate as check


def max_steps_per_input(value: Any, n_inputs: int) -> np.ndarray:
    """int64 ``[N]``: input i generates at most ``max_steps[i]`` tokens."""
    if isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        return np.full(n_inputs, check.at_least("max_steps", value, 1), dtype=np.int64)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"max_steps must be an int or a sequence of ints; got {value!r:.80}")
    if len(value) != n_inputs:
        raise ValueError(f"max_steps must have one entry per prompt ({n_inputs}); got {len(value)} entries")
    return np.array([check.at_least(f"max_steps[{i}]", v, 1) for i, v in enumerate(value)], dtype=np.int64)
