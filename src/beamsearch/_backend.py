"""The few array operations the search needs, on numpy and on torch.

The backend is detected once, from the first logits a step function returns; every per-step
operation on ``[k, V]`` arrays then runs on that backend (torch on the logits' own device). Only
small per-row arrays (selected indices and values) come back to numpy for bookkeeping.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NEG_INF = float("-inf")


class NumpyBackend:
    """Array operations on numpy arrays."""

    name = "numpy"

    def compute(self, logits: Any) -> np.ndarray:
        """``logits`` as a float array: float64 stays, other floats and ints become float32/64."""
        x = np.asarray(logits)
        if x.dtype == np.float64 or x.dtype == np.float32:
            return x
        if np.issubdtype(x.dtype, np.floating):
            return x.astype(np.float32)
        return x.astype(np.float64)

    def copy(self, x: np.ndarray) -> np.ndarray:
        return x.copy()

    def log_softmax(self, x: np.ndarray, inplace: bool = False) -> np.ndarray:
        """``[k, V] -> [k, V]`` (into ``x`` itself when ``inplace``).

        A row with NaN, +inf, or no finite entry comes out all NaN: the caller checks column 0.
        """
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            m = np.max(x, axis=1, keepdims=True)  # NaN propagates
            out = np.subtract(x, m, out=x if inplace else None)
            out -= np.log(np.sum(np.exp(out), axis=1, keepdims=True))
        return out

    def add_rows_(self, x: np.ndarray, offset: np.ndarray) -> None:
        """In place: ``x[i, :] += offset[i]`` (``offset`` float64 ``[k]`` on the host)."""
        x += offset.astype(x.dtype, copy=False)[:, None]

    def column(self, x: np.ndarray, j: int) -> np.ndarray:
        """float64 ``[k]`` on the host: ``x[:, j]``."""
        return x[:, j].astype(np.float64)

    def kth_largest(self, x: np.ndarray, k: int) -> np.ndarray:
        """``[k_rows, V] -> [k_rows, 1]``: the k-th value of each row sorted descending."""
        v = x.shape[1]
        return np.partition(x, v - k, axis=1)[:, v - k : v - k + 1]

    def mask_below(self, x: np.ndarray, threshold: np.ndarray) -> np.ndarray:
        """A copy of ``x`` with every entry strictly below ``threshold`` ([k, 1]) set to -inf."""
        return np.where(x < threshold, NEG_INF, x)

    def set_neg_inf(self, x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
        """In place: ``x[rows[i], cols[i]] = -inf``."""
        x[rows, cols] = NEG_INF

    def full(self, shape: tuple[int, ...], value: float, like: np.ndarray) -> np.ndarray:
        return np.full(shape, value, dtype=like.dtype)

    def topk_stable(self, x: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``m`` largest entries of each row, highest first, ties to the lower index.

        Args:
            x: ``[G, M]`` scores, no NaN.
            m: how many to take, ``1 <= m <= M``.

        Returns:
            ``(idx, val)``, both ``[G, m]``: column indices and their values.
        """
        g, width = x.shape
        if m >= width:
            idx = np.argsort(-x, axis=1, kind="stable")
            return idx, np.take_along_axis(x, idx, axis=1)
        part = np.argpartition(x, (width - m - 1, width - m), axis=1)  # ascending
        idx = part[:, width - m :]  # the m largest, unordered
        edge = np.take_along_axis(x, part[:, width - m - 1 : width - m + 1], axis=1)  # --> [G, 2]
        tied = edge[:, 0] == edge[:, 1]  # the m-th and (m+1)-th largest are equal
        if tied.any():
            idx = idx.copy()
            idx[tied] = _take_with_lowest_ties(x[tied], edge[tied, 1], m)
        return _order_by_value_then_index(x, idx)

    def to_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x)

    def from_numpy(self, a: np.ndarray, like: np.ndarray) -> np.ndarray:
        return a.astype(like.dtype, copy=False) if a.dtype.kind == "f" else a


def _take_with_lowest_ties(x: np.ndarray, thr: np.ndarray, m: int) -> np.ndarray:
    """``[g, M] -> [g, m]``: indices of entries above ``thr``, then the lowest-index ties."""
    greater = x > thr[:, None]
    equal = x == thr[:, None]
    need = m - greater.sum(axis=1, keepdims=True)
    take = greater | (equal & (np.cumsum(equal, axis=1) <= need))
    return np.nonzero(take)[1].reshape(x.shape[0], m)


def _order_by_value_then_index(x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    idx = np.sort(idx, axis=1)
    val = np.take_along_axis(x, idx, axis=1)
    order = np.argsort(-val, axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(val, order, axis=1)


class TorchBackend:
    """Array operations on torch tensors, each on the tensor's own device."""

    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch

    def compute(self, logits: Any) -> Any:
        torch = self.torch
        if logits.dtype in (torch.float64, torch.float32):
            return logits
        if logits.is_floating_point():
            return logits.float()
        return logits.double()

    def copy(self, x: Any) -> Any:
        return x.clone()

    def log_softmax(self, x: Any, inplace: bool = False) -> Any:
        return self.torch.log_softmax(x, dim=1, out=x) if inplace else self.torch.log_softmax(x, dim=1)

    def add_rows_(self, x: Any, offset: np.ndarray) -> None:
        x += self.torch.as_tensor(offset, device=x.device).to(x.dtype)[:, None]

    def column(self, x: Any, j: int) -> np.ndarray:
        return x[:, j].cpu().numpy().astype(np.float64)

    def kth_largest(self, x: Any, k: int) -> Any:
        return self.torch.topk(x, k, dim=1).values[:, k - 1 : k]

    def mask_below(self, x: Any, threshold: Any) -> Any:
        return x.masked_fill(x < threshold, NEG_INF)

    def set_neg_inf(self, x: Any, rows: np.ndarray, cols: np.ndarray) -> None:
        torch = self.torch
        r = torch.as_tensor(rows, device=x.device)
        c = torch.as_tensor(cols, device=x.device)
        x[r, c] = NEG_INF

    def full(self, shape: tuple[int, ...], value: float, like: Any) -> Any:
        return self.torch.full(shape, value, dtype=like.dtype, device=like.device)

    def topk_stable(self, x: Any, m: int) -> tuple[Any, Any]:
        """Same contract as :meth:`NumpyBackend.topk_stable`, on ``x``'s device."""
        torch = self.torch
        width = x.shape[1]
        if m >= width:
            val, idx = torch.sort(x, dim=1, descending=True, stable=True)
            return idx, val
        val, idx = torch.topk(x, m + 1, dim=1, sorted=True)  # topk alone does not order ties
        tied = val[:, m - 1] == val[:, m]
        idx = idx[:, :m]
        if bool(tied.any()):
            idx = idx.clone()
            rows = torch.nonzero(tied).flatten()
            idx[rows] = self._take_with_lowest_ties(x[rows], val[rows, m - 1], m)
        idx, _ = torch.sort(idx, dim=1)
        val = torch.gather(x, 1, idx)
        val, order = torch.sort(val, dim=1, descending=True, stable=True)
        return torch.gather(idx, 1, order), val

    def _take_with_lowest_ties(self, x: Any, thr: Any, m: int) -> Any:
        greater = x > thr[:, None]
        equal = x == thr[:, None]
        need = m - greater.sum(dim=1, keepdim=True)
        take = greater | (equal & (self.torch.cumsum(equal, dim=1) <= need))
        return self.torch.nonzero(take)[:, 1].reshape(x.shape[0], m)

    def to_numpy(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()

    def from_numpy(self, a: np.ndarray, like: Any) -> Any:
        t = self.torch.as_tensor(a, device=like.device)
        return t.to(like.dtype) if t.is_floating_point() else t


Backend = NumpyBackend | TorchBackend

_NUMPY = NumpyBackend()
_TORCH: TorchBackend | None = None


def backend_of(x: Any) -> Backend:
    """The backend for an array: torch for a torch tensor, numpy for anything else."""
    global _TORCH
    if type(x).__module__.split(".", 1)[0] == "torch":
        if _TORCH is None:
            _TORCH = TorchBackend()
        return _TORCH
    return _NUMPY
