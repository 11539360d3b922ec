"""The backend seam: the few array operations the search needs, one module per array library.

A backend wraps one array library (numpy, torch, ...). The search detects it once per step from
the logits the step function returns (:func:`backend_of`) and then runs every operation on the
``[k, V]`` arrays through it, on the logits' own device. Only small per-row arrays (selected
indices and values) come back to the host as numpy.

Every operation that changes an array *returns* the result. The numpy and torch backends write
in place when handed a buffer the search owns (a documented fast path: the search never passes
them the model's own logits); a backend of immutable arrays (jax) would return new arrays, and
callers always use the returned value.

All detection of array libraries lives here: :func:`backend_of` for arrays, :func:`index_like`
for index arrays that must live beside a state's leaves (a torch leaf's device).
New backends are added with :func:`register_backend`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from beamsearch.backends.base import NEG_INF, Backend

__all__ = ["NEG_INF", "Backend", "backend_of", "register_backend", "index_like", "first_foreign_leaf"]

_FACTORIES: dict[str, Callable[[], Backend]] = {}
_LOADED: dict[str, Backend] = {}


def register_backend(module: str, factory: Callable[[], Backend]) -> None:
    """Arrays whose type comes from the top-level package ``module`` use ``factory()``'s backend
    (created once, on first use). numpy is the default for everything else."""
    _FACTORIES[module] = factory
    _LOADED.pop(module, None)


def _library(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


def backend_of(x: Any) -> Backend:
    """The backend of an array: a registered library's for its arrays, numpy for anything else."""
    lib = _library(x)
    backend = _LOADED.get(lib)
    if backend is not None:
        return backend
    factory = _FACTORIES.get(lib)
    if factory is None:
        return _LOADED["numpy"]
    backend = _LOADED[lib] = factory()
    return backend


def is_foreign(obj: Any) -> bool:
    """True for an array of a registered non-numpy library (a torch tensor)."""
    return _library(obj) in _FACTORIES and hasattr(obj, "shape")


def index_like(idx: Any, leaf: Any) -> Any:
    """``idx`` (list, numpy or another library's index array) in the form that indexes ``leaf``."""
    if is_foreign(leaf):
        return backend_of(leaf).index(idx, leaf)
    if is_foreign(idx):
        return backend_of(idx).to_numpy(idx)
    return np.asarray(idx, dtype=np.int64)


def first_foreign_leaf(state: Any) -> Any:
    """The first array leaf of a registered non-numpy library in ``state`` (containers
    searched depth-first), or None: index arrays for the step function are made like it."""
    if is_foreign(state):
        return state
    if isinstance(state, dict):
        state = list(state.values())
    if isinstance(state, (list, tuple)):
        for item in state:
            leaf = first_foreign_leaf(item)
            if leaf is not None:
                return leaf
    return None


def _numpy() -> Backend:
    from beamsearch.backends.numpy_backend import NumpyBackend

    return NumpyBackend()


def _torch() -> Backend:
    from beamsearch.backends.torch_backend import TorchBackend

    return TorchBackend()


_LOADED["numpy"] = _numpy()
register_backend("torch", _torch)
