"""The tie rule of every top-k, on the host: highest value first, ties to the lower index."""

from __future__ import annotations

import numpy as np


def take_with_lowest_ties(x: np.ndarray, thr: np.ndarray, m: int) -> np.ndarray:
    """``[g, M] -> [g, m]``: indices of entries above ``thr [g]``, then the lowest-index ties."""
    greater = x > thr[:, None]
    equal = x == thr[:, None]
    need = m - greater.sum(axis=1, keepdims=True)
    take = greater | (equal & (np.cumsum(equal, axis=1) <= need))
    return np.nonzero(take)[1].reshape(x.shape[0], m)


def order_top(idx: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row of ``(idx, val) [G, m]`` by value descending, then index ascending."""
    if idx.shape[1] == 1:
        return idx, val
    if (val[:, 1:] < val[:, :-1]).all():  # already strictly by value (a sorted top-k without ties)
        return idx, val
    order = np.lexsort((idx, -val))  # --> [G, m]: along the last axis, by -val then idx
    rows = np.arange(idx.shape[0])[:, None]
    return idx[rows, order], val[rows, order]
