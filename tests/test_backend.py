"""The array backends against plain references, on tie-heavy random inputs, numpy and torch."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch._backend import NumpyBackend, backend_of
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


def cases(seed: int, count: int = 60):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        g, width = rng.integers(1, 5), rng.integers(1, 13)
        x = rng.integers(-3, 3, size=(g, width)).astype(np.float64)  # many ties
        x[rng.random(x.shape) < 0.2] = -np.inf
        yield x, int(rng.integers(1, width + 1))


@pytest.mark.parametrize("name", BACKENDS)
def test_topk_stable_equals_a_plain_sort(name):
    for x, m in cases(0):
        xb = as_backend(x, name)
        be = backend_of(xb)
        idx, val = be.topk_stable(xb, m)
        for r in range(x.shape[0]):
            order = sorted(range(x.shape[1]), key=lambda j: (-x[r, j], j))[:m]  # ties: lowest index
            assert to_np(idx)[r].tolist() == order
            assert to_np(val)[r].tolist() == x[r, order].tolist()


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
def test_log_softmax_and_masks(name):
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
    same = be.log_softmax(y, inplace=True)
    assert same is y and np.array_equal(to_np(y), out, equal_nan=True)
    z = as_backend(np.zeros((2, 3)), name)
    be.add_rows_(z, np.array([1.5, -2.0]))
    assert to_np(z).tolist() == [[1.5] * 3, [-2.0] * 3]
    assert be.column(as_backend(x, name), 1).tolist() == [1.0, -np.inf, 2.0]
    y = as_backend(x, name)
    be.set_neg_inf(y, np.array([0, 2]), np.array([1, 0]))
    assert to_np(y)[0, 1] == -np.inf and to_np(y)[2, 0] == -np.inf and to_np(y)[2, 1] == 2.0
    full = to_np(be.full((2, 3), -np.inf, like=as_backend(x, name)))
    assert full.shape == (2, 3) and (full == -np.inf).all()
    back = be.from_numpy(np.array([1.5, 2.5]), like=as_backend(x.astype(np.float32), name))
    assert to_np(back).dtype == np.float32 and to_np(back).tolist() == [1.5, 2.5]
    ints = be.from_numpy(np.array([3, 4]), like=as_backend(x.astype(np.float32), name))
    assert to_np(ints).dtype == np.int64


@pytest.mark.parametrize("name", BACKENDS)
def test_compute_dtypes(name):
    be = backend_of(as_backend(np.zeros((1, 2)), name))
    for dtype, expected in ((np.float64, np.float64), (np.float32, np.float32), (np.float16, np.float32),
                            (np.int64, np.float64)):
        x = np.array([[1, 2]], dtype=dtype)
        assert to_np(be.compute(as_backend(x, name))).dtype == expected
    assert isinstance(backend_of([1.0]), NumpyBackend)
