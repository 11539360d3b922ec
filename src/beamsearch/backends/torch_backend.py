"""The torch backend: every ``[k, V]`` operation on the tensor's own device. Writes in place
into the buffers the search owns (the fast path)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from beamsearch.backends.base import NEG_INF
from beamsearch.backends.bits import Exceptions, byte_bias, row_bias
from beamsearch.backends.ties import order_top

BUCKET = 16
"""Entries per bucket of the two-stage top-m (:meth:`TorchBackend._two_stage`)."""
SPARE = 4
"""The two-stage route needs at least ``SPARE * (m + 1)`` buckets per row."""
TWO_STAGE_WIDTH = 1 << 14
TWO_STAGE_ENTRIES = 200_000
"""A CPU top-m takes the two-stage route for rows of at least ``TWO_STAGE_WIDTH`` columns when
the array has at least ``TWO_STAGE_ENTRIES`` entries or a row has ``4 * TWO_STAGE_WIDTH``
columns: its fixed cost (about 90 us, a dozen small operations) is then below what it saves.
Measured against one ``torch.topk``, 2 threads, m = 2: [8, 32000] 143 against 192 us,
[1, 128000] 111 against 253 us, [8, 128000] 239 against 683 us; [4, 32000] and [8, 16384] even,
[1, 32000] 106 against 68 us (one pass wins there)."""


class TorchBackend:
    """Array operations on torch tensors (see :class:`beamsearch.backends.Backend`)."""

    name = "torch"
    _biases: dict[tuple[Any, Any], torch.Tensor] = {}  # byte_bias per (dtype, device), shared

    def numeric(self, x: Any) -> bool:
        return not (x.dtype.is_complex or x.dtype == torch.bool)

    def compute(self, logits: Any) -> torch.Tensor:
        if logits.dtype == torch.float64 or logits.dtype == torch.float32:
            return logits
        if logits.is_floating_point():
            return logits.float()
        return logits.double()

    def copy(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return x.clone() if out is None else out.copy_(x)

    def log_softmax(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.log_softmax(x, -1) if out is None else torch.log_softmax(x, -1, out=out)

    def reusable(self, buffer: Any, x: torch.Tensor) -> bool:
        return (isinstance(buffer, torch.Tensor) and buffer.shape == x.shape and buffer.dtype == x.dtype
                and buffer.device == x.device)

    def add_rows(self, x: torch.Tensor, offset: np.ndarray) -> torch.Tensor:
        x += x.new_tensor(offset)[:, None]  # cast to x's dtype on x's device, then added
        return x

    def pad_rows(self, x: torch.Tensor, slot: np.ndarray, total: int) -> torch.Tensor:
        out = x.new_full((total, x.shape[1]), NEG_INF)
        out[self.index(slot, x)] = x
        return out

    def take_rows(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x.index_select(0, idx)  # a plain gather: about half the time of x[idx]

    def column(self, x: torch.Tensor, j: int) -> np.ndarray:
        return x.select(1, j).cpu().numpy().astype(np.float64)

    def columns(self, x: torch.Tensor, cols: np.ndarray) -> np.ndarray:
        if cols.shape[0] == 1:
            return x[:, int(cols[0]) : int(cols[0]) + 1].cpu().numpy().copy()  # not a view of x
        return x[:, self.index(cols, x)].cpu().numpy()

    def gather(self, x: torch.Tensor, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return self.take(x, rows, cols).cpu().numpy()

    def take(self, x: torch.Tensor, rows: np.ndarray, cols: np.ndarray) -> torch.Tensor:
        return x[self.index(rows, x), self.index(cols, x)]

    def put(self, x: torch.Tensor, rows: np.ndarray, cols: np.ndarray, values: Any) -> torch.Tensor:
        x[self.index(rows, x), self.index(cols, x)] = values
        return x

    def fill_rows(self, x: torch.Tensor, rows: np.ndarray, value: float) -> torch.Tensor:
        x[self.index(rows, x)] = value
        return x

    def fill_columns(self, x: torch.Tensor, cols: np.ndarray, value: float) -> torch.Tensor:
        if cols.shape[0] == 1:
            x.select(1, int(cols[0])).fill_(value)
        else:
            x[:, self.index(cols, x)] = value
        return x

    def keep_bits(self, x: torch.Tensor, bits: np.ndarray, few: Exceptions | None) -> torch.Tensor:
        if few is None:
            # an add, not masked_fill_: branch-free (masked_fill_ on the CPU slows down 4x on masks
            # without long runs); the bytes go to x's device and are expanded there
            table = self._bias(x)
            index = torch.from_numpy(np.ascontiguousarray(bits)).to(x.device, non_blocking=True).reshape(-1).int()
            bias = torch.index_select(table, 0, index).view(bits.shape[0], -1)  # --> [k, 8 B]: 0 or -inf
            return x.add_(bias[:, : x.shape[1]])
        if few.masked_rows.size:
            r, c = self.index(few.masked_rows, x), self.index(few.masked_cols, x)
            x.index_put_((r, c), x.new_full((1,), NEG_INF).expand(len(r)), accumulate=True)  # x[r, c] + -inf
        if few.rows.size:
            r, c = self.index(few.kept_rows, x), self.index(few.kept_cols, x)
            kept = x[r, c]
            x.add_(self.from_host(row_bias(few.rows, x.shape[0]), x))  # one pass: -inf on those rows, 0 elsewhere
            x[r, c] = kept
        return x

    def _bias(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`byte_bias` of ``x``'s dtype on its device (made once per dtype and device)."""
        key = (x.dtype, x.device)
        table = self._biases.get(key)
        if table is None:
            table = self._biases[key] = torch.from_numpy(byte_bias(np.float64)).to(x.device, x.dtype)
        return table

    def keep_only(self, x: torch.Tensor, rows: np.ndarray, cols: np.ndarray) -> torch.Tensor:
        r, c = self.index(rows, x), self.index(cols, x)
        kept = x[r, c]
        x[r] = NEG_INF
        x[r, c] = kept
        return x

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return torch.where(cond, a, b)

    def mask_below(self, x: torch.Tensor, threshold: Any) -> torch.Tensor:
        return x.masked_fill_(x < threshold, NEG_INF)

    def kth_largest(self, x: torch.Tensor, k: int) -> torch.Tensor:
        return torch.topk(x, k).values[:, k - 1 : k]

    def sort_desc(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, descending=True).values

    def softmax_cumsum(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(torch.softmax(x, dim=1), dim=1)

    def count_below(self, x: torch.Tensor, value: float) -> torch.Tensor:
        return (x < value).sum(dim=1, keepdim=True)

    def take_along(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.gather(x, 1, idx)

    def topk_stable(self, x: torch.Tensor, m: int) -> tuple[np.ndarray, np.ndarray]:
        width = x.shape[1]
        if width >= TWO_STAGE_WIDTH and SPARE * (m + 1) <= width // BUCKET and x.device.type == "cpu" and \
                (x.shape[0] * width >= TWO_STAGE_ENTRIES or width >= 4 * TWO_STAGE_WIDTH):
            return self._two_stage(x, m)
        return self._one_pass(x, m)

    def _one_pass(self, x: torch.Tensor, m: int) -> tuple[np.ndarray, np.ndarray]:
        """One ``torch.topk(m + 1)`` (or a stable sort), ties at the m-th value resolved to the
        lowest index."""
        width = x.shape[1]
        if m >= width:
            val_s, idx_s = torch.sort(x, descending=True, stable=True)
            return idx_s.cpu().numpy(), val_s.cpu().numpy()
        val_t, idx_t = torch.topk(x, m + 1)  # sorted; topk alone does not order ties
        val, idx = val_t.cpu().numpy(), idx_t.cpu().numpy()
        tied = (val[:, m - 1] == val[:, m]) & (val[:, m - 1] > NEG_INF)  # -inf ties: never kept
        idx, val = idx[:, :m], val[:, :m]
        if tied.any():  # the m-th and (m+1)-th largest are equal: take the lowest-index ties
            rows = self.index(np.flatnonzero(tied), x)
            idx = idx.copy()
            idx[tied] = self._take_with_lowest_ties(x[rows], val_t[rows, m - 1], m).cpu().numpy()
            val = self._values(x, idx)
        return order_top(idx, val)

    def _two_stage(self, x: torch.Tensor, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The top m of each row of a wide ``[g, W]`` CPU tensor in two passes cheaper than one
        ``torch.topk`` over it (a vectorized maximum, where CPU top-k is not): the first
        ``s * BUCKET`` columns are seen as ``BUCKET`` blocks of ``s`` and bucket ``j`` is column
        ``j`` of every block (stride ``s``); each bucket's maximum, the m buckets with the largest
        maxima, then the exact rule over their ``BUCKET * m`` entries and the ``< BUCKET`` tail.

        Exact for a row whose m-th largest bucket maximum is strictly above its (m+1)-th (every
        entry outside the chosen buckets is then below m entries inside them); the other rows
        (tied maxima, fewer than m + 1 finite buckets) are ranked by :meth:`_one_pass`.
        Candidates are laid out in column order, so the lowest-index tie rule holds among them."""
        g, width = x.shape
        s = width // BUCKET
        body = x[:, : s * BUCKET].unflatten(1, (BUCKET, s))  # --> [g, BUCKET, s], a view
        best, buckets = torch.topk(body.amax(1), m + 1)  # --> [g, m+1] each: bucket maxima, highest first
        exact = (best[:, m - 1] > best[:, m]).numpy()  # --> [g] on the host
        if not exact.any():
            return self._one_pass(x, m)
        buckets = buckets[:, :m].sort(dim=1).values  # --> [g, m], ascending: candidates in column order
        cand = torch.gather(body, 2, buckets[:, None, :].expand(g, BUCKET, m)).reshape(g, BUCKET * m)
        cand = torch.cat([cand, x[:, s * BUCKET :]], dim=1)  # the tail columns (fewer than BUCKET) too
        rows = np.flatnonzero(exact)
        every = rows.shape[0] == g
        pos, val = self._one_pass(cand if every else cand[self.index(rows, x)], m)  # positions among candidates
        block, slot = np.divmod(pos, m)  # candidate b*m + i is column b*s + buckets[i]; the tail follows
        col = buckets.numpy()[rows[:, None], slot] + block * s
        idx = np.where(pos >= BUCKET * m, pos - BUCKET * m + s * BUCKET, col)
        if every:
            return idx, val
        other = np.flatnonzero(~exact)
        other_idx, other_val = self._one_pass(x[self.index(other, x)], m)
        out_idx, out_val = np.empty((g, m), np.int64), np.empty((g, m), val.dtype)
        out_idx[rows], out_val[rows], out_idx[other], out_val[other] = idx, val, other_idx, other_val
        return out_idx, out_val

    @staticmethod
    def _take_with_lowest_ties(x: torch.Tensor, thr: torch.Tensor, m: int) -> torch.Tensor:
        """On the device: ``[g, M] -> [g, m]``, entries above ``thr [g]``, then the lowest-index ties."""
        greater = x > thr[:, None]
        equal = x == thr[:, None]
        need = m - greater.sum(dim=1, keepdim=True)
        take = greater | (equal & (torch.cumsum(equal, dim=1) <= need))
        return torch.nonzero(take)[:, 1].reshape(x.shape[0], m)

    def _values(self, x: torch.Tensor, idx: np.ndarray) -> np.ndarray:
        return torch.gather(x, 1, self.index(idx, x)).cpu().numpy()

    def to_numpy(self, x: Any) -> np.ndarray:
        return x.detach().cpu().numpy()

    def from_host(self, values: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        return like.new_tensor(values)

    def index(self, a: Any, like: Any) -> torch.Tensor:
        if isinstance(a, torch.Tensor):
            return a.to(like.device)  # no copy when it is there already
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(like.device)
