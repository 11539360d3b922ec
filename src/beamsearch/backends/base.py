"""What a backend is: the :class:`Backend` protocol of the few array operations the search
needs, and ``NEG_INF``. Every backend module implements it; :mod:`beamsearch.backends` finds
them."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

NEG_INF = float("-inf")

__all__ = ["NEG_INF", "Backend"]


class Backend(Protocol):
    """What a backend provides. ``x`` is a float ``[rows, cols]`` array of the backend; ``rows``,
    ``cols`` are int64 numpy index arrays on the host; "host" results are numpy arrays."""

    name: str

    def numeric(self, x: Any) -> bool:
        """Whether ``x`` can be read as real-valued logits (float or integer; not bool/complex)."""

    def compute(self, logits: Any) -> Any:
        """``logits`` as a float array: float64/float32 stay, other floats float32, ints float64."""

    def copy(self, x: Any, out: Any = None) -> Any:
        """A copy of ``x``, written into ``out`` (same shape and dtype) when given."""

    def log_softmax(self, x: Any, out: Any = None) -> Any:
        """``[k, V] -> [k, V]``, written into ``out`` (``x`` itself, or a buffer of the same shape and
        dtype) when given; a row with NaN, +inf or no finite entry comes out all NaN."""

    def reusable(self, buffer: Any, x: Any) -> bool:
        """Whether ``buffer`` can receive a result shaped like ``x`` (shape, dtype, device)."""

    def add_rows(self, x: Any, offset: np.ndarray) -> Any:
        """``x[i, :] + offset[i]`` (offset float64 ``[k]`` on the host, cast to x's dtype first)."""

    def pad_rows(self, x: Any, slot: np.ndarray, total: int) -> Any:
        """A new ``[total, V]`` array of -inf with row ``i`` of x placed at ``slot[i]``."""

    def take_rows(self, x: Any, idx: Any) -> Any:
        """Rows ``idx`` (an index array made by :meth:`index`) of any array ``[k, ...]``."""

    def column(self, x: Any, j: int) -> np.ndarray:
        """float64 ``[k]`` on the host: ``x[:, j]``."""

    def columns(self, x: Any, cols: np.ndarray) -> np.ndarray:
        """host ``[k, len(cols)]`` in x's dtype: ``x[:, cols]``."""

    def gather(self, x: Any, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """host ``[p]`` in x's dtype: ``x[rows[i], cols[i]]``."""

    def take(self, x: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
        """device ``[p]``: ``x[rows[i], cols[i]]``."""

    def put(self, x: Any, rows: np.ndarray, cols: np.ndarray, values: Any) -> Any:
        """``x`` with ``x[rows[i], cols[i]] = values[i]`` (values a device array or a scalar)."""

    def fill_rows(self, x: Any, rows: np.ndarray, value: float) -> Any:
        """``x`` with the whole rows ``rows`` set to ``value``."""

    def fill_columns(self, x: Any, cols: np.ndarray, value: float) -> Any:
        """``x`` with every row's ``cols`` set to ``value``."""

    def keep_bits(self, x: Any, bits: np.ndarray, few: Any) -> Any:
        """``x`` with -inf added to every entry whose bit is 0: ``bits`` is a packed mask on the host,
        uint8 ``[k, B]`` with ``8 B >= V``, bit j of byte b (least significant first) column
        ``8 b + j`` (a grammar engine's int32 bitmask viewed as bytes), and ``few`` its
        :func:`beamsearch.backends.bits.exceptions` (``exceptions(bits, V)``). Applied on ``x``'s
        device: ``x + bias`` entry by entry, ``bias`` 0 or -inf. With ``few`` only those entries
        are touched (and one addition of a per-row bias masks the mostly masked rows whole); with
        None the bytes are sent (8 times less than a bool mask), expanded by a 256-entry table and
        added in one vectorized pass."""

    def keep_only(self, x: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
        """``x`` with row ``rows[i]`` set to -inf everywhere but column ``cols[i]``."""

    def where(self, cond: Any, a: Any, b: Any) -> Any: ...

    def mask_below(self, x: Any, threshold: Any) -> Any:
        """``x`` with every entry strictly below ``threshold`` (``[k, 1]``) set to -inf."""

    def kth_largest(self, x: Any, k: int) -> Any:
        """``[rows, V] -> [rows, 1]``: the k-th value of each row sorted descending."""

    def sort_desc(self, x: Any) -> Any:
        """Each row's values sorted descending, ``[rows, V]``."""

    def softmax_cumsum(self, x: Any) -> Any:
        """``[rows, V]``: running sums of each row's softmax (of ``x`` as given)."""

    def count_below(self, x: Any, value: float) -> Any:
        """int ``[rows, 1]``: how many entries of each row are strictly below ``value``."""

    def take_along(self, x: Any, idx: Any) -> Any:
        """``[rows, j]``: ``x[r, idx[r, c]]``."""

    def topk_stable(self, x: Any, m: int) -> tuple[np.ndarray, np.ndarray]:
        """Host ``(idx, val)``, both ``[G, m]``: each row's m largest (no NaN), highest first,
        ties to the lower column index. ``1 <= m <= x.shape[1]``. Entries at -inf come last in
        no set order (every caller drops them): a row with fewer than m finite entries takes
        no tie-breaking pass."""

    def to_numpy(self, x: Any) -> np.ndarray: ...

    def from_host(self, values: np.ndarray, like: Any) -> Any:
        """Host float ``values`` as an array beside ``like`` (its library, device and dtype)."""

    def index(self, a: np.ndarray, like: Any) -> Any:
        """int64 host indices ``a`` as an index array for ``like`` (its library, its device)."""
