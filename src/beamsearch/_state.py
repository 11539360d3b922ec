"""Reordering a model state by row: :func:`select_state`.

A state is any nesting of tuples, NamedTuples, lists and dicts whose array leaves (numpy arrays,
torch tensors: anything with a ``shape`` of at least one dimension) hold the row (hypothesis) on
axis 0. ``select_state(state, idx)`` returns the same structure with every array leaf replaced by
``leaf[idx]``. It is a :func:`functools.singledispatch` function, so a user teaches it a new
container or cache type with ``@select_state.register(MyCache)``.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from beamsearch._backends import backend_of, index_like

__all__ = ["select_state"]


@functools.singledispatch
def select_state(state: Any, idx: Any) -> Any:
    """Gather rows of every array leaf of ``state``.

    Args:
        state: any nesting of tuple, NamedTuple, list and dict; array leaves have shape
            ``[k, ...]`` (row on axis 0). 0-d arrays, scalars, strings, None and other objects
            pass through unchanged.
        idx: array-like of row indices, shape ``[k']``; rows may repeat. A list, a numpy array or
            a torch tensor (moved to each torch leaf's device as needed).

    Returns:
        A state of the same structure whose array leaves have shape ``[k', ...]``
        (``leaf[idx]``). NamedTuples keep their class, dicts their class and keys.

    Raises:
        TypeError: a ``set`` or ``frozenset`` anywhere in ``state``.

    New types are taught with ``@select_state.register(cls)`` on a function ``(obj, idx) -> obj``.
    """
    shape = getattr(state, "shape", None)
    if shape is None or isinstance(state, type):
        return state
    try:
        ndim = len(shape)
    except TypeError:
        return state
    if ndim == 0:
        return state
    return backend_of(state).take_rows(state, index_like(idx, state))


@select_state.register(tuple)
def _select_tuple(state: tuple, idx: Any) -> tuple:
    items = [select_state(item, idx) for item in state]
    if hasattr(type(state), "_fields"):  # NamedTuple: keep the class
        return type(state)._make(items)  # type: ignore[attr-defined]
    if type(state) is tuple:
        return tuple(items)
    return type(state)(items)


@select_state.register(list)
def _select_list(state: list, idx: Any) -> list:
    items = [select_state(item, idx) for item in state]
    return items if type(state) is list else type(state)(items)


@select_state.register(dict)
def _select_dict(state: dict, idx: Any) -> dict:
    out = copy.copy(state)  # keeps the class (OrderedDict, defaultdict's factory, ...)
    for key, value in state.items():
        out[key] = select_state(value, idx)
    return out


@select_state.register(set)
@select_state.register(frozenset)
def _select_set(state: Any, idx: Any) -> Any:
    raise TypeError(
        f"state: a {type(state).__name__} has no order, so its rows cannot be selected; "
        f"use a tuple, list or dict (got {state!r:.80})"
    )
