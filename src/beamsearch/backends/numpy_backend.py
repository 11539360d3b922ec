"""The numpy backend. Writes in place into the buffers the search owns (the fast path)."""

from __future__ import annotations

from typing import Any

import numpy as np

from beamsearch.backends.base import NEG_INF
from beamsearch.backends.bits import Exceptions, byte_bias, row_bias
from beamsearch.backends.ties import order_top, take_with_lowest_ties


class NumpyBackend:
    """Array operations on numpy arrays (see :class:`beamsearch.backends.Backend`)."""

    name = "numpy"

    def numeric(self, x: Any) -> bool:
        try:
            return np.asarray(x).dtype.kind in "fiu"
        except (ValueError, TypeError):  # ragged or unconvertible
            return False

    def compute(self, logits: Any) -> np.ndarray:
        x = np.asarray(logits)
        if x.dtype == np.float64 or x.dtype == np.float32:
            return x
        if np.issubdtype(x.dtype, np.floating):
            return x.astype(np.float32)
        return x.astype(np.float64)

    def copy(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            return x.copy()
        np.copyto(out, x)
        return out

    def log_softmax(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(all="ignore"):
            m = np.max(x, axis=1, keepdims=True)  # NaN propagates
            res = np.subtract(x, m, out=out)
            res -= np.log(np.sum(np.exp(res), axis=1, keepdims=True))
        return res

    def reusable(self, buffer: Any, x: np.ndarray) -> bool:
        return isinstance(buffer, np.ndarray) and buffer.shape == x.shape and buffer.dtype == x.dtype

    def add_rows(self, x: np.ndarray, offset: np.ndarray) -> np.ndarray:
        x += offset.astype(x.dtype)[:, None]
        return x

    def pad_rows(self, x: np.ndarray, slot: np.ndarray, total: int) -> np.ndarray:
        out = np.full_like(x, NEG_INF, shape=(total, x.shape[1]))
        out[slot] = x
        return out

    def take_rows(self, x: Any, idx: Any) -> Any:
        return x[idx]

    def column(self, x: np.ndarray, j: int) -> np.ndarray:
        return x[:, j].astype(np.float64)

    def columns(self, x: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return x[:, cols]

    def gather(self, x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return x[rows, cols]

    take = gather

    def put(self, x: np.ndarray, rows: np.ndarray, cols: np.ndarray, values: Any) -> np.ndarray:
        x[rows, cols] = values
        return x

    def fill_rows(self, x: np.ndarray, rows: np.ndarray, value: float) -> np.ndarray:
        x[rows] = value
        return x

    def fill_columns(self, x: np.ndarray, cols: np.ndarray, value: float) -> np.ndarray:
        x[:, cols] = value
        return x

    def keep_bits(self, x: np.ndarray, bits: np.ndarray, few: Exceptions | None) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # a masked NaN or +inf comes out NaN (Backend.keep_bits)
            if few is None:
                bias = np.take(byte_bias(x.dtype), bits, axis=0)  # --> [k, B, 8]: 0 or -inf per column
                np.add(x, bias.reshape(bits.shape[0], 8 * bits.shape[1])[:, : x.shape[1]], out=x)
                return x
            x[few.masked_rows, few.masked_cols] += NEG_INF
            if few.rows.size:
                kept = x[few.kept_rows, few.kept_cols]
                x += row_bias(few.rows, x.shape[0])  # one pass (cast in place): -inf on those rows, 0 elsewhere
                x[few.kept_rows, few.kept_cols] = kept
        return x

    def keep_only(self, x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        kept = x[rows, cols]
        x[rows] = NEG_INF
        x[rows, cols] = kept
        return x

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b)

    def mask_below(self, x: np.ndarray, threshold: np.ndarray) -> np.ndarray:
        x[x < threshold] = NEG_INF
        return x

    def kth_largest(self, x: np.ndarray, k: int) -> np.ndarray:
        v = x.shape[1]
        return np.partition(x, v - k)[:, v - k : v - k + 1]

    def sort_desc(self, x: np.ndarray) -> np.ndarray:
        return -np.sort(-x)

    def softmax_cumsum(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            q = np.exp(x - np.max(x, axis=1, keepdims=True))
            return np.cumsum(q / q.sum(axis=1, keepdims=True), axis=1)

    def count_below(self, x: np.ndarray, value: float) -> np.ndarray:
        return (x < value).sum(axis=1, keepdims=True)

    def take_along(self, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return np.take_along_axis(x, idx, 1)

    def topk_stable(self, x: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        g, width = x.shape
        if m >= width:
            idx = np.argsort(-x, 1, kind="stable")
            return idx, np.take_along_axis(x, idx, 1)
        part = np.argpartition(x, (width - m - 1, width - m), 1)  # ascending
        idx = part[:, width - m :]  # the m largest, unordered
        edge = np.take_along_axis(x, part[:, width - m - 1 : width - m + 1], 1)  # --> [G, 2]
        tied = (edge[:, 0] == edge[:, 1]) & (edge[:, 1] > NEG_INF)  # equal m-th and (m+1)-th; -inf ties never kept
        if tied.any():
            idx = idx.copy()
            idx[tied] = take_with_lowest_ties(x[tied], edge[tied, 1], m)
        return order_top(idx, np.take_along_axis(x, idx, 1))

    def to_numpy(self, x: Any) -> np.ndarray:
        return np.asarray(x)

    def from_host(self, values: np.ndarray, like: np.ndarray) -> np.ndarray:
        return values.astype(like.dtype, copy=False)

    def index(self, a: Any, like: Any) -> np.ndarray:
        return np.asarray(a, dtype=np.int64)
