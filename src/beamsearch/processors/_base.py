"""What every logits processor gets: the ``[k, V]`` logits and a :class:`StepContext`.

The protocols live in :mod:`beamsearch.core.protocols` (the engine runs them); they are named
here too, where the processors have always found them."""

from __future__ import annotations

import numpy as np

from beamsearch.core.protocols import LogitsProcessor as LogitsProcessor
from beamsearch.core.protocols import RowCarrier as RowCarrier
from beamsearch.core.protocols import RowStates as RowStates
from beamsearch.core.protocols import StepContext as StepContext

__all__ = ["LogitsProcessor", "RowCarrier", "RowStates", "StepContext", "history_suffix_matches"]


def history_suffix_matches(history: np.ndarray, prefix: tuple[int, ...]) -> np.ndarray:
    """bool ``[k]``: rows whose history ends with ``prefix`` (always True for an empty prefix)."""
    n = len(prefix)
    if n == 0:
        return np.ones(history.shape[0], dtype=bool)
    if history.shape[1] < n:
        return np.zeros(history.shape[0], dtype=bool)
    return np.all(history[:, history.shape[1] - n :] == np.asarray(prefix), axis=1)
