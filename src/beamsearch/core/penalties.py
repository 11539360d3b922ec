"""Length penalties: ``score = logprob / lp(len(tokens))``, len counting eos.

Both are non-decreasing in the length for ``alpha >= 0``, which makes the early-stop bound
``s / lp(max_steps)`` of :func:`beamsearch.beam_search_batch` exact.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

LengthPenalty = Callable[[np.ndarray, float], np.ndarray]

__all__ = ["length_power", "length_wu", "LENGTH_PENALTIES", "score"]


def length_power(length: np.ndarray, alpha: float) -> np.ndarray:
    """``len ** alpha`` (seed 000; alpha 0 is the raw logprob, 1 the mean per token)."""
    return np.asarray(length, dtype=np.float64) ** alpha


def length_wu(length: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT, Wu et al. (2016) section 7: ``((5 + len) / 6) ** alpha``."""
    return ((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha


LENGTH_PENALTIES: dict[str, LengthPenalty] = {"gnmt": length_wu, "power": length_power}


def score(logprob: np.ndarray, length: np.ndarray, penalty: LengthPenalty, alpha: float) -> np.ndarray:
    """The one scoring formula: ``logprob / penalty(length, alpha)``, float64 ``[j]``.

    Results are ranked by it, and the early-stop bound is it at ``length = max_steps``.
    """
    return np.asarray(logprob, dtype=np.float64) / penalty(length, alpha)
