"""Packed token masks (a grammar engine's bitmask) and how a backend applies one cheaply.

A mask is uint8 ``[k, B]`` on the host, ``8 B >= V``: bit j of byte b (least significant first)
keeps column ``8 b + j``. :meth:`Backend.keep_bits` adds 0 where the bit is set and -inf where it
is not, so ``keep_bits(x, bits) == x + bias`` entry by entry (a kept entry unchanged, a masked
finite or -inf entry -inf, a masked NaN or +inf NaN, as any addition of -inf).

Grammar masks are rarely random: a row is nearly all kept (inside a JSON string every token
without a quote is allowed) or nearly all masked (after ``{`` only a key's first tokens are). For
such masks :func:`exceptions` finds the few entries that differ from the row's majority from the
bytes alone (a byte of 0xFF or 0 stands for 8 columns at once), and the backend touches only
those entries, plus one addition of -inf over each mostly masked row, instead of adding a
``[k, V]`` bias: the same values, a fraction of the memory traffic. A mask with too many
exceptions (``None``) is applied the dense way, by a 256-entry table of 8 biases per byte.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from beamsearch.backends.base import NEG_INF

__all__ = ["Exceptions", "byte_bias", "exceptions", "row_bias"]

_BIASES: dict[str, np.ndarray] = {}
_NONE = np.zeros(0, dtype=np.int64)

BUDGET = 0.15
ROW_SHARE = 16
"""The cost model of :func:`exceptions`, measured (torch, one thread, ``[128, 32000]`` float32):
the byte table costs about as much as expanding 15% of the bytes one entry at a time, or as one
addition over the array plus expanding 10% of the bytes."""


def row_bias(rows: np.ndarray, k: int) -> np.ndarray:
    """float64 ``[k, 1]``: -inf on ``rows``, 0 elsewhere (added to ``[k, V]``: those rows masked
    whole, the others unchanged)."""
    bias = np.zeros((k, 1))
    bias[rows] = NEG_INF
    return bias


def byte_bias(dtype: npt.DTypeLike) -> np.ndarray:
    """``[256, 8]`` of ``dtype``: row ``b`` holds 0 where bit j of byte ``b`` is set, else -inf
    (what :meth:`Backend.keep_bits` adds per byte of its mask)."""
    key = np.dtype(dtype).str
    if key not in _BIASES:
        bit = (np.arange(256)[:, None] >> np.arange(8)) & 1  # --> [256, 8]
        _BIASES[key] = np.where(bit == 1, 0.0, NEG_INF).astype(dtype)
    return _BIASES[key]


class Exceptions(NamedTuple):
    """A packed mask as the entries to touch (int64 host arrays).

    Attributes:
        masked_rows, masked_cols: ``[n]``: the masked entries of the mostly kept rows (-inf is
            added to each).
        rows: ``[s]``: the mostly masked rows, each once (-inf is added to the whole row).
        kept_rows, kept_cols: ``[m]``: the kept entries of those rows (restored after the
            addition, so they come out unchanged).
    """

    masked_rows: np.ndarray
    masked_cols: np.ndarray
    rows: np.ndarray
    kept_rows: np.ndarray
    kept_cols: np.ndarray


def exceptions(bits: np.ndarray, width: int, budget: float = BUDGET) -> Exceptions | None:
    """``bits`` (uint8 ``[k, B]``, ``8 B >= width``) as :class:`Exceptions` over ``width``
    columns, or None when that would cost more than ``budget * k * width``: every byte to expand
    counts 8 (its entries, touched one by one), and mostly masked rows, if any, ``k * width /
    ROW_SHARE`` (one vectorized addition of :func:`row_bias`). Columns at or past ``width`` are
    never named."""
    used = np.ascontiguousarray(bits[:, : -(-width // 8)])  # --> [k, B']: the bytes of columns below width
    k, b = used.shape
    not_full = used != 0xFF
    n_not_full = np.count_nonzero(not_full, axis=1)
    mostly_kept = 2 * n_not_full <= b  # at least half the bytes 0xFF
    cost = 8 * int(n_not_full[mostly_kept].sum())  # the bytes to expand, 8 entries each
    not_empty = np.zeros_like(not_full)
    if not mostly_kept.all():  # the others: a whole row, and the bytes that keep something
        not_empty[~mostly_kept] = used[~mostly_kept] != 0
        cost += k * width / ROW_SHARE + 8 * int(np.count_nonzero(not_empty))  # one pass, and the bytes
    if cost > budget * k * width:
        return None
    masked_rows, masked_cols = _columns(used, not_full, mostly_kept, 0, width)
    kept_rows, kept_cols = _columns(used, not_empty, ~mostly_kept, 1, width)
    return Exceptions(masked_rows, masked_cols, np.flatnonzero(~mostly_kept), kept_rows, kept_cols)


def _columns(bits: np.ndarray, candidates: np.ndarray, rows: np.ndarray, bit: int,
             width: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(row, column)`` pairs whose bit equals ``bit``, in the rows where ``rows`` (bool
    ``[k]``) holds, found among the bytes where ``candidates`` (bool ``[k, B]``) holds (every
    bit of any other byte differs from ``bit``); columns below ``width`` only."""
    if not rows.any():
        return _NONE, _NONE
    if not rows.all():
        candidates = candidates & rows[:, None]
    flat = np.flatnonzero(candidates)  # --> [n]: the bytes to expand
    unpacked = np.unpackbits(bits.ravel()[flat], bitorder="little")  # --> [8 n]: byte i's bits at 8 i..8 i + 7
    hit = np.flatnonzero(unpacked == bit)
    byte = flat[hit >> 3]
    r, cols = byte // bits.shape[1], 8 * (byte % bits.shape[1]) + (hit & 7)
    inside = cols < width
    return (r, cols) if inside.all() else (r[inside], cols[inside])
