"""The array backends against plain references, on tie-heavy random inputs, numpy and torch."""

from __future__ import annotations

import importlib
import math
import warnings

import numpy as np
import pytest

import beamsearch.backends as backends
from beamsearch.backends import backend_of, index_like, register_backend
from beamsearch.backends.bits import exceptions
from beamsearch.backends.numpy_backend import NumpyBackend
from beamsearch.processors import NoRepeatNGram, StepContext, Temperature, TopK

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy"] + (["torch"] if torch is not None else [])


def as_backend(a: np.ndarray, name: str):
    return torch.from_numpy(a.copy()) if name == "torch" else a.copy()


def to_np(x) -> np.ndarray:
    return x.numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)


def cases(seed: int, count: int = 60, *, plus_inf: bool = False):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        g, width = rng.integers(1, 5), rng.integers(1, 13)
        x = rng.integers(-3, 3, size=(g, width)).astype(np.float64)  # many ties
        x[rng.random(x.shape) < 0.2] = -np.inf
        if plus_inf:
            x[rng.random(x.shape) < 0.1] = np.inf  # +inf ties are ordered like any others
        yield x, int(rng.integers(1, width + 1))


@pytest.mark.parametrize("name", BACKENDS)
def test_topk_stable_equals_a_plain_sort(name):
    for x, m in cases(0, plus_inf=True):
        xb = as_backend(x, name)
        be = backend_of(xb)
        idx, val = be.topk_stable(xb, m)
        for r in range(x.shape[0]):
            order = sorted(range(x.shape[1]), key=lambda j: (-x[r, j], j))[:m]  # ties: lowest index
            assert to_np(val)[r].tolist() == x[r, order].tolist()
            # the entries above -inf in that order; the -inf ones last, in no set order (callers drop them)
            finite = [j for j in order if x[r, j] > -np.inf]
            assert to_np(idx)[r].tolist()[: len(finite)] == finite
            assert set(to_np(idx)[r].tolist()) <= set(range(x.shape[1])) and len(set(to_np(idx)[r].tolist())) == m


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_wide_rows_two_stage_top_m_equals_a_plain_sort():
    """Wide rows may take the two-stage route on CPU (bucket maxima, then the chosen buckets;
    ``topk_stable`` picks it by size, so it is also called directly): against a plain sort (value
    descending, ties to the lowest column) on continuous values, with the winners in the tail
    columns or not, integer and quarter-step ties, and rows of mostly -inf (tied bucket maxima
    fall back to the one-pass rule)."""
    tb = importlib.import_module("beamsearch.backends.torch_backend")  # (the package has a function of that name)

    rng = np.random.default_rng(5)
    two_stage = 0
    for trial in range(160):
        g, width, m = int(rng.integers(1, 6)), int(rng.integers(tb.TWO_STAGE_WIDTH, 5 * tb.TWO_STAGE_WIDTH)), \
            int(rng.integers(1, 9))
        kind = trial % 4
        if kind == 0:
            x = rng.standard_normal((g, width)).astype(np.float32)
        elif kind == 1:  # ties everywhere: integers, or quarter steps
            x = rng.integers(-3, 3, (g, width)).astype(np.float32) if trial % 8 == 1 else \
                (np.round(rng.standard_normal((g, width)) * 4) / 4).astype(np.float32)
        elif kind == 2:  # rows of mostly -inf (they take the one-pass rule), beside continuous ones or not
            x = rng.standard_normal((g, width)).astype(np.float32)
            for r in range(g):
                if r % 2 == 0 or trial % 8 == 2:
                    x[r] = -np.inf
                    x[r, rng.choice(width, size=int(rng.integers(0, 12)), replace=False)] = rng.standard_normal()
        else:
            x = rng.standard_normal((g, width)).astype(np.float32)
            x[:, -int(rng.integers(1, 16)):] += 3.0  # the best are in the tail (past the last whole block)
        t = torch.from_numpy(x)
        be = backend_of(t)
        order = np.lexsort((np.arange(width)[None, :].repeat(g, 0), -x))[:, :m]  # value desc, then column
        want = np.take_along_axis(x, order, axis=1)
        s = width // tb.BUCKET  # the rows whose bucket maxima leave a margin at m (taken in two stages)
        maxima = -np.sort(-x[:, : s * tb.BUCKET].reshape(g, tb.BUCKET, s).max(axis=1), axis=1)
        two_stage += int((maxima[:, m - 1] > maxima[:, m]).sum())
        for idx, val in (be.topk_stable(t, m), be._two_stage(t, m)):  # the route its size picks, and the
            assert np.array_equal(val, want)  # two-stage one (its rows without a margin: the one-pass rule)
            for r in range(g):
                finite = [j for j in order[r].tolist() if np.isfinite(x[r, j])]
                assert idx[r].tolist()[: len(finite)] == finite
    assert two_stage >= 200  # rows ranked in two stages (of about 480: ties and -inf rows have no margin)
    # a tie at the m-th value between two chosen buckets, the one of higher maximum holding the
    # higher column: the lower column must win (candidates are laid out in column order)
    s = 2000
    x = (rng.random((2, 16 * s)) * 0.01 - 10).astype(np.float32)
    x[:, 3 * s + 1500], x[:, 1500], x[:, 100] = 9.0, 5.0, 5.0  # buckets 1500 (max 9) and 100 (max 5)
    staged = backend_of(torch.from_numpy(x))._two_stage(torch.from_numpy(x), 2)
    assert staged[0].tolist() == [[3 * s + 1500, 100]] * 2


@pytest.mark.parametrize("name", BACKENDS)
def test_processors_equal_plain_loops(name):
    rng = np.random.default_rng(1)
    for x, k in cases(2, 40):
        x[:, 0] = 0.5  # at least one finite entry per row
        ctx = StepContext(1, rng.integers(0, x.shape[1], size=(x.shape[0], 6)), np.zeros(x.shape[0], np.int64),
                          backend_of(as_backend(x, name)))
        out = to_np(TopK(k)(as_backend(x, name), ctx))
        for r in range(x.shape[0]):
            threshold = sorted(x[r], reverse=True)[k - 1]
            assert out[r].tolist() == [v if v >= threshold else -np.inf for v in x[r]]
        halved = to_np(Temperature(2.0)(as_backend(x, name), ctx))
        assert halved.tolist() == (x / 2.0).tolist()
        blocked = to_np(NoRepeatNGram(2)(as_backend(x, name), ctx))
        for r, hist in enumerate(ctx.history.tolist()):
            banned = {hist[i + 1] for i in range(len(hist) - 1) if hist[i] == hist[-1]}
            assert blocked[r].tolist() == [-np.inf if v in banned else x[r, v] for v in range(x.shape[1])]


@pytest.mark.parametrize("name", BACKENDS)
def test_log_softmax(name):
    x = np.array([[0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf], [2.0, 2.0, 2.0]])
    be = backend_of(as_backend(x, name))
    xb = as_backend(x, name)
    out = to_np(be.log_softmax(xb))
    assert np.array_equal(to_np(xb), x)  # not in place unless asked
    np.testing.assert_allclose(out[0, :2], [-np.log1p(np.e), 1 - np.log1p(np.e)], atol=1e-12)
    assert out[0, 2] == -np.inf and np.isnan(out[1]).all()  # a row with no finite entry: NaN
    np.testing.assert_allclose(out[2], [-np.log(3)] * 3, atol=1e-12)
    for bad in ([np.nan, 0.0, 1.0], [0.0, np.inf, 1.0]):
        assert np.isnan(to_np(be.log_softmax(as_backend(np.array([bad]), name)))).all()
    y = as_backend(x, name)
    same = be.log_softmax(y, out=y)
    assert same is y and np.array_equal(to_np(y), out, equal_nan=True)
    buffer = as_backend(np.zeros_like(x), name)
    assert be.reusable(buffer, xb) and not be.reusable(as_backend(np.zeros((2, 3)), name), xb)
    into = be.log_softmax(xb, out=buffer)
    assert into is buffer and np.array_equal(to_np(buffer), out, equal_nan=True) and np.array_equal(to_np(xb), x)
    copied = be.copy(xb, out=as_backend(np.zeros_like(x), name))
    assert np.array_equal(to_np(copied), x) and to_np(be.copy(xb)).tolist() == to_np(xb).tolist()


@pytest.mark.parametrize("name", BACKENDS)
def test_every_operation_equals_plain_numpy(name):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 6))
    x[1, 2] = -np.inf
    rows, cols = np.array([0, 2, 3]), np.array([5, 0, 2])
    be = backend_of(as_backend(x, name))

    def fresh():
        return as_backend(x, name)

    assert to_np(be.add_rows(fresh(), np.array([1.5, -2.0, 0.0, 3.0]))).tolist() == \
        (x + np.array([1.5, -2.0, 0.0, 3.0])[:, None]).tolist()
    padded = to_np(be.pad_rows(fresh(), np.array([0, 2, 3, 5]), 6))
    assert padded[[0, 2, 3, 5]].tolist() == x.tolist() and (padded[[1, 4]] == -np.inf).all()
    assert be.column(fresh(), 1).tolist() == x[:, 1].tolist()
    cols_out = be.columns(fresh(), np.array([4]))
    assert cols_out.tolist() == x[:, [4]].tolist()
    assert be.columns(fresh(), np.array([1, 3])).tolist() == x[:, [1, 3]].tolist()
    assert be.gather(fresh(), rows, cols).tolist() == x[rows, cols].tolist()
    assert to_np(be.take(fresh(), rows, cols)).tolist() == x[rows, cols].tolist()
    want = x.copy()
    want[rows, cols] = [7.0, 8.0, 9.0]
    vals = be.from_host(np.array([7.0, 8.0, 9.0]), like=fresh())
    assert to_np(be.put(fresh(), rows, cols, vals)).tolist() == want.tolist()
    want = x.copy()
    want[:, [1, 4]] = -np.inf
    assert to_np(be.fill_columns(fresh(), np.array([1, 4]), -np.inf)).tolist() == want.tolist()
    want = x.copy()
    want[[0, 3]] = -np.inf
    assert to_np(be.fill_rows(fresh(), np.array([0, 3]), -np.inf)).tolist() == want.tolist()
    want = np.full_like(x, -np.inf)
    want[rows, cols] = x[rows, cols]
    want[1] = x[1]
    assert to_np(be.keep_only(fresh(), rows, cols)).tolist() == want.tolist()
    assert to_np(be.sort_desc(fresh())).tolist() == (-np.sort(-x, axis=1)).tolist()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(to_np(be.softmax_cumsum(fresh())), np.cumsum(e / e.sum(1, keepdims=True), 1),
                               atol=1e-12)
    assert to_np(be.count_below(fresh(), 0.0)).tolist() == (x < 0).sum(1, keepdims=True).tolist()
    idx = np.array([[0], [2], [5], [1]])
    assert to_np(be.take_along(fresh(), index_like(idx, fresh()))).tolist() == np.take_along_axis(x, idx, 1).tolist()
    thr = np.array([[0.0], [-1.0], [0.5], [9.0]])
    assert to_np(be.mask_below(fresh(), be.from_host(thr, like=fresh()))).tolist() == \
        np.where(x < thr, -np.inf, x).tolist()
    assert to_np(be.kth_largest(fresh(), 2)).tolist() == (-np.sort(-x, axis=1))[:, 1:2].tolist()
    assert to_np(be.where(fresh() > 0, fresh(), fresh() * 2)).tolist() == np.where(x > 0, x, 2 * x).tolist()
    assert be.numeric(fresh())
    assert to_np(be.index(np.array([2, 0]), fresh())).tolist() == [2, 0]


def test_a_new_backend_is_found_by_its_library_name(monkeypatch):
    """A library registered for the first time (never loaded before) is found by its name, its
    factory called once on first use; registering it again replaces the backend. The registry is
    restored afterwards, so "fakearrays" is new to every run of this test."""
    monkeypatch.setattr(backends, "_FACTORIES", dict(backends._FACTORIES))
    monkeypatch.setattr(backends, "_LOADED", dict(backends._LOADED))

    class Fake:  # an array type from a package named "fakearrays"
        shape = (1, 2)

    Fake.__module__ = "fakearrays.core"
    marker, made = NumpyBackend(), []
    register_backend("fakearrays", lambda: made.append(1) or marker)
    assert backend_of(Fake()) is marker and backend_of(Fake()) is marker and made == [1]
    assert isinstance(backend_of(np.zeros(2)), NumpyBackend) and backend_of(np.zeros(2)) is not marker
    other = NumpyBackend()
    register_backend("fakearrays", lambda: other)
    assert backend_of(Fake()) is other


@pytest.mark.parametrize("name", BACKENDS)
def test_compute_dtypes(name):
    be = backend_of(as_backend(np.zeros((1, 2)), name))
    for dtype, expected in ((np.float64, np.float64), (np.float32, np.float32), (np.float16, np.float32),
                            (np.int64, np.float64)):
        x = np.array([[1, 2]], dtype=dtype)
        assert to_np(be.compute(as_backend(x, name))).dtype == expected
    assert isinstance(backend_of([1.0]), NumpyBackend)


def _bit_masks(rng, rows, width, spare):
    """Packed masks of every kind: random bytes (applied by the table), and rows mostly kept or
    mostly masked with a few exceptions, an all-kept and an all-masked row (applied by their
    exceptions)."""
    n_bytes = -(-width // 8) + spare
    random = rng.integers(0, 256, size=(rows, n_bytes), dtype=np.uint8)
    mostly_masked = np.arange(rows) % 4 == 1  # a quarter of the rows: applying them costs a whole row each
    structured = np.where(mostly_masked[:, None], 0, 0xFF).astype(np.uint8).repeat(n_bytes, axis=1)
    flips = rng.random(structured.shape) < 0.03
    structured[flips] ^= rng.integers(1, 256, size=int(flips.sum()), dtype=np.uint8)
    structured[0], structured[1] = 0xFF, 0  # all kept, all masked
    return {"random": random, "structured": structured}


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("width, spare", [(37, 0), (37, 3), (64, 0), (203, 1)])  # 8 B = 40, 64, 208; bytes past V
@pytest.mark.parametrize("kind", ["random", "structured"])
def test_keep_bits_adds_minus_inf_where_a_bit_is_zero(lib, dtype, width, spare, kind):
    """keep_bits(x, bits) == x + (0 where the bit is set, else -inf), entry by entry, whichever
    way the mask is applied (random bytes: the table; structured rows: their exceptions only),
    with -inf, +inf and NaN among the kept and the masked entries (a masked +inf or NaN comes
    out NaN, as any addition of -inf). Reference: each bit read one by one."""
    if kind == "structured":  # rows wide enough for a few exceptions to be cheaper than the table
        width = 8 * width + width % 8
    rng = np.random.default_rng(width + spare)
    bits = _bit_masks(rng, 6, width, spare)[kind]
    assert (exceptions(bits, width) is None) == (kind == "random")  # both ways are exercised
    x = rng.normal(size=(6, width)).astype(dtype)
    x[0, 3], x[2, 5], x[3, 7], x[4, 1], x[5, 0] = -np.inf, np.inf, np.nan, -np.inf, np.inf
    keep = np.array([[bits[i, j // 8] >> (j % 8) & 1 for j in range(width)] for i in range(6)], dtype=bool)
    with np.errstate(invalid="ignore"):
        want = np.where(keep, x, x + -np.inf)
    arr = torch.tensor(x) if lib == "torch" else x.copy()
    got = backend_of(arr).keep_bits(arr, bits, exceptions(bits, width))
    assert got.dtype == arr.dtype
    np.testing.assert_array_equal(backend_of(got).to_numpy(got), want)  # NaN where want is NaN


def test_bit_exceptions_name_the_minority_of_each_row():
    """exceptions(): a mostly kept row names its masked columns, a mostly masked row is listed
    with its kept columns, never a column at or past the width; a budget too small gives None.
    Reference: the unpacked bits compared with each row's majority."""
    rng = np.random.default_rng(3)
    width = 61
    bits = _bit_masks(rng, 12, width, 2)["structured"]
    keep = np.unpackbits(bits, axis=1, bitorder="little")[:, :width].astype(bool)
    few = exceptions(bits, width)
    mostly_kept = set(range(12)) - set(few.rows.tolist())
    assert set(zip(few.masked_rows.tolist(), few.masked_cols.tolist(), strict=True)) == {
        (r, c) for r in mostly_kept for c in range(width) if not keep[r, c]}
    assert set(zip(few.kept_rows.tolist(), few.kept_cols.tolist(), strict=True)) == {
        (r, c) for r in few.rows.tolist() for c in range(width) if keep[r, c]}
    assert exceptions(bits, width, budget=0.0) is None


@pytest.mark.parametrize("name", BACKENDS)
def test_count_below_is_strict(name):
    """Base.count_below counts entries strictly below the value: 0.25 only, not 0.5 itself."""
    x = as_backend(np.array([[0.25, 0.5, 0.75], [0.5, 0.5, 0.5]]), name)
    assert to_np(backend_of(x).count_below(x, 0.5)).tolist() == [[1], [0]]


@pytest.mark.parametrize("name", BACKENDS)
def test_softmax_cumsum_is_per_row_at_any_scale(name):
    """Each row's own softmax: two equal logits give (1/2, 1) whether they are 0 or 1000, and a
    row of 0 beside a row of 1000 (the max is each row's, not the array's) stays finite."""
    x = as_backend(np.array([[0.0, 0.0], [1000.0, 1000.0], [-1000.0, -1000.0]]), name)
    np.testing.assert_allclose(to_np(backend_of(x).softmax_cumsum(x)), [[0.5, 1.0]] * 3, atol=1e-12)


def test_numpy_softmaxes_emit_no_warnings():
    """A row with no finite entry gives NaN quietly (log_softmax's documented result): no
    RuntimeWarning from numpy (a user running with -W error would get an exception)."""
    import warnings

    be = NumpyBackend()
    x = np.array([[0.0, -np.inf], [-np.inf, -np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = be.log_softmax(x.copy())
        reach = be.softmax_cumsum(x.copy())
    assert out[0].tolist() == [0.0, -np.inf] and np.isnan(out[1]).all()
    assert reach[0].tolist() == [1.0, 1.0]


def test_numeric_refuses_ragged_bool_and_complex():
    """Backend.numeric: float or integer only; a ragged list is not an array of logits."""
    be = NumpyBackend()
    assert be.numeric([[1.0, 2.0]]) and be.numeric(np.array([[1, 2]]))
    assert not be.numeric([[1.0], [1.0, 2.0]])  # ragged: numpy refuses it
    assert not be.numeric(np.array([[True, False]]))
    if torch is not None:
        tb = backend_of(torch.zeros(1))
        assert tb.numeric(torch.zeros((1, 2))) and tb.numeric(torch.zeros((1, 2), dtype=torch.int64))
        assert not tb.numeric(torch.zeros((1, 2), dtype=torch.bool))
        assert not tb.numeric(torch.zeros((1, 2), dtype=torch.complex64))


@pytest.mark.parametrize("name", BACKENDS)
def test_from_host_and_index_dtypes(name):
    """from_host gives like's dtype (float32 here, from float64 values); index gives int64 (from
    int32 indices), as Backend documents."""
    like = as_backend(np.zeros((2, 3), np.float32), name)
    be = backend_of(like)
    got = be.from_host(np.array([1.5, -2.0]), like=like)
    assert str(got.dtype).endswith("float32") and to_np(got).tolist() == [1.5, -2.0]
    idx = be.index(np.array([2, 0], dtype=np.int32), like)
    assert str(idx.dtype).endswith("int64") and to_np(idx).tolist() == [2, 0]


@pytest.mark.parametrize("name", BACKENDS)
def test_copy_writes_into_out(name):
    """Backend.copy(x, out=buffer) writes x into the buffer (the fast path reuses it)."""
    x = as_backend(np.array([[1.0, -np.inf], [2.5, 3.0]]), name)
    buffer = as_backend(np.zeros((2, 2)), name)
    got = backend_of(x).copy(x, out=buffer)
    assert to_np(buffer).tolist() == [[1.0, -np.inf], [2.5, 3.0]] and to_np(got).tolist() == to_np(buffer).tolist()


@pytest.mark.parametrize("name", BACKENDS)
def test_add_rows_casts_the_offset_to_x_dtype_first(name):
    """add_rows rounds the float64 offset to x's dtype, then adds (Backend.add_rows). Hand
    computed for float32: o = 2**-24 + 2**-50 rounds to 2**-24 (2**-50 is below half an ulp of
    2**-24, 2**-48); 1 + 2**-24 is the tie between 1 and 1 + 2**-23 and rounds to even, 1.0.
    Adding in float64 first would give 1 + 2**-24 + 2**-50, above the tie: 1 + 2**-23."""
    x = as_backend(np.ones((1, 2), np.float32), name)
    got = to_np(backend_of(x).add_rows(x, np.array([2.0 ** -24 + 2.0 ** -50])))
    assert got.dtype == np.float32 and got.tolist() == [[1.0, 1.0]]


def test_byte_bias_is_zero_where_the_bit_is_set(monkeypatch):
    """byte_bias(dtype)[b, j] is 0 where bit j of byte b is set, else -inf, in that dtype; built
    afresh here (the table is cached per dtype). Reference: each bit read with Python ints."""
    from beamsearch.backends import bits as packed

    monkeypatch.setattr(packed, "_BIASES", {})
    for dtype in (np.float32, np.float64):
        table = packed.byte_bias(dtype)
        assert table.shape == (256, 8) and table.dtype == dtype
        want = [[0.0 if (b >> j) & 1 else -np.inf for j in range(8)] for b in range(256)]
        np.testing.assert_array_equal(table, np.array(want, dtype=dtype))
        assert packed.byte_bias(dtype) is table  # made once per dtype


def test_bit_exceptions_cost_what_the_docstring_says():
    """exceptions() gives None exactly when its cost exceeds budget * k * width. By hand, k=2
    rows of width 64 (8 bytes): row 0 mostly kept with one byte not 0xFF (8 entries to expand),
    row 1 mostly masked with one byte not 0 (8), and one addition over the array for the mostly
    masked row (k * width / ROW_SHARE = 128 / 16 = 8): cost 24 = (24 / 128) * 128."""
    from beamsearch.backends.bits import ROW_SHARE

    assert ROW_SHARE == 16
    bits = np.array([[0xFF] * 7 + [0x7F], [0] * 7 + [0x01]], dtype=np.uint8)
    assert exceptions(bits, 64, budget=24 / 128) is not None  # at the budget: still applied by exceptions
    assert exceptions(bits, 64, budget=23 / 128) is None
    assert exceptions(bits[:1], 64, budget=8 / 64) is not None and exceptions(bits[:1], 64, budget=7 / 64) is None
    few = exceptions(bits, 64, budget=1.0)
    assert few.masked_rows.tolist() == [0] and few.masked_cols.tolist() == [63]
    assert few.rows.tolist() == [1] and few.kept_rows.tolist() == [1] and few.kept_cols.tolist() == [56]


# Backends at their edges: packed masks over NaN and infinities, stable ranking of wide tied rows,
# the two-stage top-m's dtypes and tails, the bias table's cache.  Oracles: each entry or row worked
# out with plain Python (a bit read with shifts, a sort by ``(-value, index)``); hand-written
# values.


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
