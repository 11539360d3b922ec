"""Backends at their edges: packed masks over NaN and infinities, stable ranking of wide tied rows,
the two-stage top-m's dtypes and tails, the bias table's cache.

Oracles: each entry or row worked out with plain Python (a bit read with shifts, a sort by
``(-value, index)``); hand-written values."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from beamsearch.backends import backend_of
from beamsearch.backends.bits import exceptions

try:
    import torch
except ImportError:
    torch = None

LIBS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]
WIDTH = 200  # 25 bytes per row: wide enough that a few exceptions cost less than the byte table


def _lib(x: np.ndarray, lib: str):
    return torch.from_numpy(x.copy()) if lib == "torch" else x.copy()


def _host(x) -> np.ndarray:
    return x.numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)


def _mask_and_logits(dtype):
    """Rows: 0 mostly kept (a few bits cleared over +inf, NaN, a finite value and -inf), 1 mostly
    masked (a few bits set over -inf, a finite value and NaN; +inf and NaN among the masked), 2 all
    kept, 3 all masked."""
    bits = np.zeros((4, WIDTH // 8), np.uint8)
    bits[0], bits[2] = 0xFF, 0xFF
    x = np.linspace(-3.0, 3.0, 4 * WIDTH).reshape(4, WIDTH)
    for col, value in ((3, np.inf), (10, np.nan), (17, 1.5), (25, -np.inf)):
        bits[0, col // 8] &= ~np.uint8(1 << (col % 8))  # masked in a mostly kept row
        x[0, col] = value
    for col, value in ((5, -np.inf), (12, 2.0), (40, np.nan)):
        bits[1, col // 8] |= np.uint8(1 << (col % 8))  # kept in a mostly masked row
        x[1, col] = value
    x[1, 60], x[1, 70], x[3, 0], x[2, 1] = np.inf, np.nan, np.inf, np.nan
    return bits, x.astype(dtype)


def _keep_bits_by_hand(bits: np.ndarray, x: np.ndarray) -> list[list[float]]:
    """Entry by entry: kept where bit j % 8 of byte j // 8 is set; a masked entry is x + (-inf):
    NaN for NaN and +inf, -inf otherwise."""
    out = []
    for i in range(x.shape[0]):
        row = []
        for j in range(x.shape[1]):
            v = float(x[i, j])
            if (int(bits[i, j // 8]) >> (j % 8)) & 1:
                row.append(v)
            else:
                row.append(math.nan if (math.isnan(v) or v == math.inf) else -math.inf)
        out.append(row)
    return out


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("way", ["exceptions", "table"])
def test_keep_bits_over_nan_and_infinities_both_ways_quietly(lib, dtype, way):
    """The same entries whether the mask is applied by its exceptions or by the byte table, in
    place, in x's dtype, and without a RuntimeWarning (a masked +inf is -inf + inf: NaN, quietly)."""
    bits, x = _mask_and_logits(dtype)
    few = exceptions(bits, WIDTH)
    assert few is not None and set(few.rows.tolist()) == {1, 3}  # rows 1 and 3 are mostly masked
    arr = _lib(x, lib)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = backend_of(arr).keep_bits(arr, bits, few if way == "exceptions" else None)
    assert got.dtype == arr.dtype
    want = _keep_bits_by_hand(bits, x)
    np.testing.assert_array_equal(_host(got), np.array(want, dtype=dtype))
    np.testing.assert_array_equal(_host(arr), np.array(want, dtype=dtype))  # written into x


def _ranked_by_hand(row: np.ndarray, m: int) -> list[int]:
    return sorted(range(row.shape[0]), key=lambda j: (-float(row[j]), j))[:m]


@pytest.mark.parametrize("lib", LIBS)
def test_topk_stable_keeps_the_lowest_index_among_ties_in_wide_rows(lib):
    """Rows of 40 columns with values in {0, 1, 2} (many ties), m = width (a whole sort) and
    m = width - 1, width - 2, 5: each row's order is the sort by (-value, index)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(3, 40)).astype(np.float64)
    for m in (40, 39, 38, 5):
        arr = _lib(x, lib)
        idx, val = backend_of(arr).topk_stable(arr, m)
        assert np.asarray(idx).shape == (3, m)
        for r in range(3):
            want = _ranked_by_hand(x[r], m)
            assert np.asarray(idx)[r].tolist() == want
            assert np.asarray(val)[r].tolist() == x[r, want].tolist()


@pytest.mark.skipif(torch is None, reason="no torch")
@pytest.mark.parametrize("tail", [0, 5])
def test_two_stage_top_m_of_rows_it_ranks_and_rows_it_hands_back(tail):
    """Row 0 has a clear maximum in each of three buckets (the two-stage rule is exact there), row
    1 is flat (tied bucket maxima: ranked in one pass); float32 comes back float32. With a tail
    of 5 columns past the buckets, its largest entries are among the top m. Indices are int64."""
    from beamsearch.backends.torch_backend import BUCKET, TorchBackend

    s = 64
    width = s * BUCKET + tail
    x = np.zeros((2, width), np.float32)
    x[0, 1], x[0, 3 * s + 2], x[0, 7 * s + 9] = 5.0, 4.0, 3.0  # buckets 1, 2 and 9
    if tail:
        x[0, width - 1] = 6.0  # the largest of row 0, in the tail
    x[1, :] = 1.0
    x[1, 10] = 2.0
    m = 3
    idx, val = TorchBackend()._two_stage(torch.from_numpy(x), m)
    assert val.dtype == np.float32 and idx.dtype == np.int64
    for r in range(2):
        want = _ranked_by_hand(x[r], m)
        assert idx[r].tolist() == want and val[r].tolist() == x[r, want].tolist()


@pytest.mark.skipif(torch is None, reason="no torch")
def test_the_byte_bias_table_is_made_once_per_dtype():
    """TorchBackend._bias: a table of x's dtype (0 where bit j of byte b is set, else -inf),
    the same object at the next call with that dtype."""
    from beamsearch.backends.torch_backend import TorchBackend

    be = TorchBackend()
    for dtype in (torch.float64, torch.float32, torch.float64):
        x = torch.zeros((1, 8), dtype=dtype)
        table = be._bias(x)
        assert table.dtype == dtype and table.device == x.device
        assert table[0b101].tolist() == [0.0, -math.inf, 0.0] + [-math.inf] * 5  # byte 5: bits 0 and 2
        assert be._bias(x) is table


@pytest.mark.parametrize("lib", LIBS)
def test_log_softmax_is_per_row_at_any_scale(lib):
    """Each row normalised by its own maximum: two equal logits give log(1/2) each whether they
    are 0 or -1000 (a shift by the whole array's maximum would underflow the second row)."""
    arr = _lib(np.array([[0.0, 0.0], [-1000.0, -1000.0]]), lib)
    got = _host(backend_of(arr).log_softmax(arr))
    np.testing.assert_allclose(got, [[-math.log(2.0)] * 2] * 2, atol=1e-12)
