"""Reordering a model state by row (:func:`select_state`) and joining the rows of several
states (:func:`concat_state`).

A state is any nesting of tuples, NamedTuples, lists and dicts whose array leaves (numpy arrays,
torch tensors: anything with a ``shape`` of at least one dimension) hold the row (hypothesis) on
axis 0. ``select_state(state, idx)`` returns the same structure with every array leaf replaced by
``leaf[idx]``; ``concat_state([s1, s2, ...])`` the same structure with every array leaf replaced
by the leaves' rows one after the other. Both are :func:`functools.singledispatch` functions, so a
user teaches them a new container or cache type with ``@select_state.register(MyCache)`` and
``@concat_state.register(MyCache)``. A leaf whose other axes differ between states (a KV cache of
another length, an encoder memory of another source length) needs a registered concatenation
that pads; :func:`pad_axis` is the helper.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from beamsearch.backends import backend_of, index_like

__all__ = ["concat_state", "pad_axis", "select_state", "take_state"]


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


_PLAIN = {select_state.dispatch(object), select_state.dispatch(tuple), select_state.dispatch(list),
          select_state.dispatch(dict)}
"""The functions of :func:`select_state` for arrays and containers."""


def registered(cls: type) -> bool:
    """Whether ``cls`` was taught to :func:`select_state` (a function of its own, not the array
    default nor a container's): an object that holds rows, such as a KV cache, which its
    function may reorder in place."""
    return select_state.dispatch(cls) not in _PLAIN


def has_registered_leaf(state: Any) -> bool:
    """Whether ``state`` (containers searched) holds an object of a :func:`registered` type."""
    if isinstance(state, (tuple, list)) and not registered(type(state)):
        return any(has_registered_leaf(x) for x in state)
    if isinstance(state, dict):
        return any(has_registered_leaf(x) for x in state.values())
    return registered(type(state))


def _is_array(leaf: Any) -> bool:
    """An array leaf: a ``shape`` of at least one dimension (the rule of :func:`select_state`)."""
    shape = getattr(leaf, "shape", None)
    if shape is None or isinstance(leaf, type):
        return False
    try:
        return len(shape) >= 1
    except TypeError:
        return False


@functools.singledispatch
def _concat_as(states: Any) -> Any:
    """The default: ``states`` are leaves. Array leaves are concatenated on axis 0 (their other
    axes must agree); a leaf of a type registered with :func:`select_state` only (a cache object)
    is a TypeError; any other leaf (a scalar, a string, None, a 0-d array) must be equal in every
    state and is kept once."""
    first = states[0]
    if _is_array(first):
        return _concat_arrays(states)
    if registered(type(first)):
        name = type(first).__name__  # it holds rows (select_state knows it), but not how to join them
        raise TypeError(f"concat_state: a state leaf of type {name} is registered with select_state, so it "
                        f"holds rows, but its rows cannot be joined: teach it with @concat_state.register({name})")
    for j, other in enumerate(states[1:], 1):
        if _is_array(other) or not _same_leaf(first, other):
            raise ValueError(f"concat_state: states[{j}] has the leaf {other!r:.60} where states[0] has "
                             f"{first!r:.60}; a leaf that is not an array must be equal in every state")
    return first


class Registering(Protocol):
    """A function of states whose cases are chosen by the type of its first state, taught new types
    with ``@f.register(cls)`` (the interface of :func:`functools.singledispatch`)."""

    registry: Mapping[Any, Callable[..., Any]]

    def __call__(self, states: Sequence[Any], /) -> Any: ...

    def register(self, cls: Any, func: Callable[..., Any] | None = None) -> Any: ...

    def dispatch(self, cls: Any) -> Callable[..., Any]: ...


def _dispatched_by(dispatcher: Any) -> Callable[[Callable[[Sequence[Any]], Any]], Registering]:
    """A decorator giving a function ``dispatcher``'s ``register``, ``dispatch`` and ``registry``."""
    def attach(function: Any) -> Registering:
        function.register, function.dispatch = dispatcher.register, dispatcher.dispatch
        function.registry = dispatcher.registry
        return function
    return attach


@_dispatched_by(_concat_as)
def concat_state(states: Sequence[Any]) -> Any:
    """The rows of several states, one state after the other (axis 0 of every array leaf).

    Args:
        states: a non-empty sequence of states of the same structure (as for
            :func:`select_state`: tuples, NamedTuples, lists and dicts, the same classes, lengths
            and keys); state j's array leaves have shape ``[k_j, ...]``.

    Returns:
        A state of that structure whose array leaves have shape ``[sum k_j, ...]``: state 0's
        rows, then state 1's, ... (``np.concatenate`` / ``torch.cat`` through the leaves'
        backend). A leaf that is not an array (0-d arrays, scalars, strings, None) must be equal
        in every state and is kept once.

    Raises:
        ValueError: no state; structures that differ (class, length, keys); array leaves whose
            axes after the first differ (pad them: register a concatenation for the type, see
            :func:`pad_axis`); unequal non-array leaves; array leaves of different libraries.
        TypeError: a ``set`` or ``frozenset`` anywhere.

    New types are taught with ``@concat_state.register(cls)`` on a function
    ``(states: list[cls]) -> cls``; it is chosen by the type of ``states[0]``.
    """
    states = list(states)
    if not states:
        raise ValueError("concat_state needs at least one state; got none")
    return _concat_as.dispatch(type(states[0]))(states)


def copy_if_shared(state: Any) -> Any:
    """``state``, or a copy of it (``concat_state`` of the one state) when it holds a leaf of a
    type registered with ``select_state`` (:func:`has_registered_leaf`): such a leaf (a KV cache
    object) may be reordered and extended in place by the search and the model, so a state read
    more than once is copied first. Plain arrays are never changed in place: no copy."""
    return concat_state([state]) if has_registered_leaf(state) else state


@functools.singledispatch
def take_state(state: Any, idx: Any) -> Any:
    """Rows ``idx`` of ``state`` (as :func:`select_state`), leaving ``state`` as it was.

    ``select_state`` may reorder a cache object in place (the search owns its state, and the
    Hugging Face adapter's cache is reordered where it lies); ``take_state`` is for a copy of some
    rows beside the state that goes on (step search keeps the rows of the segments that end while
    the others continue). A state without a leaf of a registered type is gathered by
    ``select_state`` (a gather copies); one with such a leaf is copied first
    (:func:`copy_if_shared`), unless its type registers a cheaper way:
    ``@take_state.register(cls)`` on a function ``(obj, idx) -> obj``.

    Args:
        state: a state (rows on axis 0 of every array leaf).
        idx: array-like of row indices ``[k']``, rows may repeat.

    Returns:
        A state of the same structure with ``[k', ...]`` array leaves, sharing nothing that a
        later ``select_state`` or model call on ``state`` changes in place.
    """
    return select_state(copy_if_shared(state), idx)


def _same_structure(states: list, what: str) -> None:
    """Every state has the class and length of ``states[0]``."""
    first = states[0]
    for j, other in enumerate(states[1:], 1):
        if type(other) is not type(first) or len(other) != len(first):
            raise ValueError(f"concat_state: states[{j}] is a {type(other).__name__} of length {len(other)} where "
                             f"states[0] is a {type(first).__name__} of length {len(first)}; every state must "
                             f"have the same structure ({what})")


@_concat_as.register(tuple)
def _concat_tuple(states: list) -> tuple:
    _same_structure(states, "tuple")
    first = states[0]
    items = [concat_state([s[i] for s in states]) for i in range(len(first))]
    if hasattr(type(first), "_fields"):  # NamedTuple: keep the class
        return type(first)._make(items)
    return tuple(items) if type(first) is tuple else type(first)(items)


@_concat_as.register(list)
def _concat_list(states: list) -> list:
    _same_structure(states, "list")
    items = [concat_state([s[i] for s in states]) for i in range(len(states[0]))]
    return items if type(states[0]) is list else type(states[0])(items)


@_concat_as.register(dict)
def _concat_dict(states: list) -> dict:
    _same_structure(states, "dict")
    first = states[0]
    for j, other in enumerate(states[1:], 1):
        if list(other) != list(first):
            raise ValueError(f"concat_state: states[{j}] has the keys {list(other)!r:.80} where states[0] has "
                             f"{list(first)!r:.80}; every state must have the same keys")
    out = copy.copy(first)  # keeps the class (OrderedDict, defaultdict's factory, ...)
    for key in first:
        out[key] = concat_state([s[key] for s in states])
    return out


@_concat_as.register(set)
@_concat_as.register(frozenset)
def _concat_set(states: list) -> Any:
    raise TypeError(f"state: a {type(states[0]).__name__} has no order, so its rows cannot be joined; "
                    f"use a tuple, list or dict (got {states[0]!r:.80})")


def _same_leaf(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)  # 0-d arrays too (numpy, torch, or one of each): == gives one bool
    except Exception:  # an object without a usable == (an array-like that refuses bool())
        return False


def _concat_arrays(leaves: list) -> Any:
    """Array leaves ``[k_j, ...]`` -> ``[sum k_j, ...]``, through the leaves' backend."""
    first = leaves[0]
    name = backend_of(first).name
    for j, leaf in enumerate(leaves[1:], 1):
        if not _is_array(leaf) or backend_of(leaf).name != name:
            raise ValueError(f"concat_state: states[{j}] has the leaf {type(leaf).__name__} where states[0] has "
                             f"a {name} array of shape {tuple(first.shape)}")
        if tuple(leaf.shape[1:]) != tuple(first.shape[1:]):
            raise ValueError(f"concat_state: array leaves must agree beyond axis 0; states[0] has shape "
                             f"{tuple(first.shape)}, states[{j}] has {tuple(leaf.shape)}. A leaf whose length "
                             "differs between inputs (a KV cache, an encoder memory) needs a registered "
                             "concatenation that pads it: see pad_axis")
    return _JOIN[name](leaves)


def _torch_cat(leaves: list) -> Any:
    import torch

    return torch.cat(leaves)


_JOIN: dict[str, Callable[[list], Any]] = {"numpy": np.concatenate, "torch": _torch_cat}
"""Axis-0 concatenation per backend name (numpy's is the default backend for unknown arrays)."""

_FULL: dict[str, Callable[[Any, tuple, Any], Any]] = {
    "numpy": lambda like, shape, value: np.full(shape, value, dtype=np.asarray(like).dtype),
    "torch": lambda like, shape, value: like.new_full(shape, value),
}
"""A new array of ``shape`` filled with ``value``, in ``like``'s library, dtype and device."""


def pad_axis(leaves: Sequence[Any], axis: int, value: Any, *, side: str = "right") -> list[Any]:
    """Pad arrays to a common length along ``axis``: the helper of a registered concatenation.

    Args:
        leaves: numpy arrays or torch tensors of the same rank, equal on every axis but ``axis``
            (and axis 0, the rows).
        axis: the axis to pad (>= 1; negative counts from the end).
        value: the fill (0 for a memory, False for its mask, -inf for a score).
        side: ``"right"`` appends the padding; ``"left"`` puts it first (a KV cache aligned on
            its last position, with the attention mask and positions to match).

    Returns:
        The arrays, each ``[k_j, ..., L, ...]`` with ``L`` the longest along ``axis``; an array
        already that long is returned as it is. Same library, dtype and device as each input.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right'; got {side!r}")
    leaves = list(leaves)
    if not leaves:
        return leaves
    ndim = len(leaves[0].shape)
    ax = axis + ndim if axis < 0 else axis
    if not 1 <= ax < ndim:
        raise ValueError(f"axis must be in [1, {ndim}) (axis 0 holds the rows); got {axis}")
    longest = max(int(x.shape[ax]) for x in leaves)
    out = []
    for x in leaves:
        have = int(x.shape[ax])
        if have == longest:
            out.append(x)
            continue
        shape = list(x.shape)
        shape[ax] = longest
        padded = _FULL[backend_of(x).name](x, tuple(shape), value)
        where = [slice(None)] * ndim
        where[ax] = slice(longest - have, None) if side == "left" else slice(have)
        padded[tuple(where)] = x
        out.append(padded)
    return out
