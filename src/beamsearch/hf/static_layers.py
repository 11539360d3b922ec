"""Static cache layers as rows the search moves (a :class:`~beamsearch.hf.recurrent.LayerRule`
each), and a whole ``StaticCache`` as a search state (``select_state``, ``concat_state``).

The kinds: ``StaticLayer`` (full attention), ``StaticSlidingWindowLayer``, ``StaticIndexedLayer``
(indexer keys beside its keys), and the hybrids of a linear-attention state with static keys and
values (``LinearAttentionAndStaticFullAttentionLayer``,
``LinearAttentionAndStaticSlidingWindowAttentionLayer``): every kind ``transformers``' static
cache is built of (``STATIC_LAYER_TYPE_MAPPING``; its linear-attention and dummy layers are the
dynamic cache's own).

A static layer preallocates keys and values ``[k, heads, max_cache_len, dh]`` and writes the next
token of every row at one shared position, its token count (``cumulative_length``, a tensor the
model adds to in place; a sliding window also counts in ``cumulative_length_int`` and keeps the
last ``max_cache_len`` of them, in column order). Its rows are on axis 0: reordering and copying
rows is indexing them, the fixed length kept, and a copy gets its own counts (sharing them, the
model would count each step twice).

Joining rows of searches at different steps (refill) aligns them at their last token: the joined
layer counts ``columns`` tokens (the joined state's length), and the keys of a layer that has seen
``c`` of them move ``columns - c`` places right, the places before them zeros (the adapter's mask
left-pads those rows alike, so they are masked). A static layer has no room to add: layers of
different ``max_cache_len`` are a ValueError naming both, and a joined row has ``columns - c`` fewer
places left for the tokens to come (a step past ``max_cache_len`` is a ValueError, see
:func:`room`). When rows leave, leading columns that are padding for every row left are dropped
(:func:`drop_columns`): the keys move left in their buffer and the counts go down by as many.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers.cache_utils import (
    LinearAttentionAndStaticFullAttentionLayer,
    LinearAttentionAndStaticSlidingWindowAttentionLayer,
    LinearAttentionLayer,
    StaticCache,
    StaticIndexedLayer,
    StaticLayer,
    StaticSlidingWindowLayer,
)

from beamsearch.core.state import concat_state, select_state, take_state
from beamsearch.hf.recurrent import (
    LayerRule,
    indexer_tensors,
    join_linear,
    layer_rule,
    register_layer,
    reorder_extras,
    reorder_linear,
    take_linear,
)

STATIC_KINDS = (StaticLayer, StaticSlidingWindowLayer, StaticIndexedLayer, LinearAttentionAndStaticFullAttentionLayer,
                LinearAttentionAndStaticSlidingWindowAttentionLayer)
"""The static layer kinds a rule is registered for (exact types)."""


def whole_static(cache: Any) -> bool:
    """Whether ``cache`` is a ``StaticCache`` itself (its rows share one write position); a
    subclass of it is not, and meets the rules of its layers' kinds."""
    return type(cache) is StaticCache


def is_static(layer: Any) -> bool:
    """Whether ``layer`` is one of :data:`STATIC_KINDS`."""
    return type(layer) in STATIC_KINDS


def _window(layer: Any) -> bool:
    return isinstance(layer, StaticSlidingWindowLayer)


def _filled(layer: Any) -> bool:
    return getattr(layer, "keys", None) is not None and layer.keys.dim() == 4


def count(layer: Any) -> int:
    """The tokens a static layer has seen (its write position, for a full-attention one)."""
    return int(layer.cumulative_length_int) if _window(layer) else int(layer.cumulative_length)


def slots(layer: Any, tokens: int) -> int:
    """The places of a static layer filled after ``tokens`` tokens: a window keeps the last
    ``max_cache_len`` (its own length) of them."""
    return min(tokens, layer.max_cache_len) if _window(layer) else tokens


def room(cache: Any) -> int | None:
    """The tokens a cache's full-attention static layers can hold (their ``max_cache_len``), None
    when it has none (a window keeps its last tokens, whatever their number)."""
    lengths = [layer.max_cache_len for layer in getattr(cache, "layers", ()) if is_static(layer) and not _window(layer)]
    return min(lengths) if lengths else None


def _indexer(layer: Any) -> list[tuple[str, int]]:
    """The indexer row tensors of a ``StaticIndexedLayer`` (:func:`~beamsearch.hf.recurrent.indexer_tensors`)
    and their rows' axis: its indexer keys ``[k, max_cache_len, d]`` and (on a model's first indexed
    layer) the positions of its columns ``[dims, k, t]``."""
    if type(layer) is not StaticIndexedLayer:
        return []
    return [(name, rows) for name, rows, _ in indexer_tensors(layer)]


def _reorder_static(layer: Any, idx: torch.Tensor) -> None:
    """Rows ``idx`` of the layer's keys, values and indexer tensors (not its linear-attention states)."""
    if _filled(layer):
        layer.keys, layer.values = (x.index_select(0, idx.to(x.device)) for x in (layer.keys, layer.values))
        layer.batch_size = int(idx.numel())
    for name, axis in _indexer(layer):
        x = getattr(layer, name)
        setattr(layer, name, x.index_select(axis, idx.to(x.device)))


def _reorder(layer: Any, idx: torch.Tensor) -> None:
    if isinstance(layer, LinearAttentionLayer):
        reorder_linear(layer, idx)
    _reorder_static(layer, idx)


def _own_counts(new: Any) -> None:
    """``new`` (a shallow copy) with counts of its own: the model adds to them in place."""
    new.cumulative_length = new.cumulative_length.clone()
    if isinstance(getattr(new, "indexer_cumulative_length", None), torch.Tensor):
        new.indexer_cumulative_length = new.indexer_cumulative_length.clone()


def _take(layer: Any, idx: torch.Tensor) -> Any:
    new = take_linear(layer, idx) if isinstance(layer, LinearAttentionLayer) else copy.copy(layer)
    _own_counts(new)
    _reorder_static(new, idx)
    return new


def _shifted(parts: list[tuple[torch.Tensor, int]], axis: int, width: int, end: int) -> torch.Tensor:
    """The rows of ``parts`` (a tensor and its filled places on ``axis``, the first ones) one after
    the other in a new tensor of ``width`` places on ``axis``, each part's filled places ending at
    place ``end``, every other place zero."""
    like = parts[0][0]
    shape = list(like.shape)
    shape[0], shape[axis] = sum(x.shape[0] for x, _ in parts), width
    out = like.new_zeros(shape)
    row = 0
    for x, filled in parts:
        out[row: row + x.shape[0]].narrow(axis, end - filled, filled).copy_(x.narrow(axis, 0, filled))
        row += x.shape[0]
    return out


def _join(layers: list[Any], columns: int) -> Any:
    """The rows of ``layers`` one after the other, aligned at their last token: the joined layer
    has seen ``columns`` tokens (the joined state's length), a layer that has seen fewer has its
    keys (and indexer keys, and column positions) moved right by the difference, zeros before them.

    Raises:
        ValueError: layers of different ``max_cache_len`` (named), or more tokens than ``columns``
            or than ``max_cache_len``, or filled layers joined with layers not filled yet.
    """
    kind = type(layers[0]).__name__
    lengths = sorted({layer.max_cache_len for layer in layers})
    if len(lengths) > 1:
        raise ValueError(f"concat_state: {kind} layers can be joined only at one max_cache_len (each writes every "
                         f"row at one shared position in its preallocated columns); got max_cache_len {lengths[0]} "
                         f"and {lengths[-1]}: prepare every cohort with one max_cache_len")
    counts = [count(layer) for layer in layers]
    length = lengths[0]
    if max(counts) > columns or (not _window(layers[0]) and columns > length):
        raise ValueError(f"concat_state: {kind} layers that have seen {max(counts)} tokens cannot be joined at "
                         f"{columns} tokens into max_cache_len {length}")
    filled = [_filled(layer) for layer in layers]
    if any(filled) and not all(filled):
        raise ValueError("concat_state: static layers holding keys cannot be joined with static layers not filled yet")
    new = join_linear(layers, columns) if isinstance(layers[0], LinearAttentionLayer) else copy.copy(layers[0])
    device = layers[0].cumulative_length.device
    new.cumulative_length = torch.tensor(slots(layers[0], columns), dtype=torch.long, device=device)
    if _window(new):
        new.cumulative_length_int = columns
    end = slots(layers[0], columns)
    if all(filled):
        for name in ("keys", "values"):
            parts = [(getattr(layer, name), slots(layer, c)) for layer, c in zip(layers, counts, strict=True)]
            setattr(new, name, _shifted(parts, 2, length, end))
        new.batch_size = int(new.keys.shape[0])
    for name, axis in _indexer(layers[0]):
        if name == "indexer_keys":
            parts = [(layer.indexer_keys, c) for layer, c in zip(layers, counts, strict=True)]
            new.indexer_keys = _shifted(parts, 1, length, end)
            new.indexer_cumulative_length = torch.tensor(columns, dtype=torch.long, device=new.indexer_keys.device)
        else:  # the positions of the columns seen: [dims, k, c], left-padded with 0 to the joined count
            seen = [layer.indexer_position_ids for layer in layers]
            new.indexer_position_ids = torch.cat([torch.cat([p.new_zeros((*p.shape[:2], columns - p.shape[2])), p], 2)
                                                  for p in seen], dim=axis)
    return new


def drop_columns(layer: Any, columns: int) -> None:
    """A full-attention static layer forgets its first ``columns`` columns (padding for every row):
    its keys (and indexer keys, and column positions) move left in their buffers, zeros after
    them, and its counts go down by as many."""
    if _filled(layer):
        for name in ("keys", "values"):
            x = getattr(layer, name)
            setattr(layer, name, torch.cat([x[:, :, columns:], x.new_zeros((*x.shape[:2], columns, x.shape[3]))], 2))
    layer.cumulative_length = layer.cumulative_length - columns
    for name, _ in _indexer(layer):
        x = getattr(layer, name)
        if name == "indexer_keys":
            layer.indexer_keys = torch.cat([x[:, columns:], x.new_zeros((x.shape[0], columns, x.shape[2]))], 1)
            layer.indexer_cumulative_length = layer.indexer_cumulative_length - columns
        else:
            layer.indexer_position_ids = x[:, :, columns:]


def full_columns(layer: Any) -> int | None:
    """The columns a full-attention static layer holds (its token count), None for a window."""
    return None if _window(layer) else count(layer)


def roll_rows(layer: Any, rows: torch.Tensor, columns: int) -> None:
    """Rows ``rows`` of a full-attention layer (dynamic or static) with their first ``columns``
    columns rolled right by one, the last of them to column 0 (keys, values, and a layer's indexer
    keys and column positions alike)."""
    for name in ("keys", "values"):
        x = getattr(layer, name)
        x[rows, :, :columns] = x.index_select(0, rows)[:, :, :columns].roll(1, dims=2)
    keys = getattr(layer, "indexer_keys", None)
    if isinstance(keys, torch.Tensor) and keys.dim() == 3 and keys.shape[1] >= columns:
        keys[rows, :columns] = keys.index_select(0, rows)[:, :columns].roll(1, dims=1)
    positions = getattr(layer, "indexer_position_ids", None)
    if isinstance(positions, torch.Tensor) and positions.dim() == 3 and positions.shape[2] >= columns:
        positions = positions.clone()  # the model may have stored an expanded view
        positions[:, rows, :columns] = positions.index_select(1, rows)[:, :, :columns].roll(1, dims=2)
        layer.indexer_position_ids = positions


for _kind in STATIC_KINDS:
    register_layer(_kind, LayerRule(_reorder, _take, _join))


@select_state.register(StaticCache)
@take_state.register(StaticCache)
def _select_static_cache(cache: StaticCache, idx: Any) -> StaticCache:
    """A new static cache whose every layer holds rows ``idx`` of the old one's (by the layers'
    rules: the fixed lengths kept, each layer counting its own tokens), ``cache`` left as it was."""
    idx = torch.as_tensor(idx)
    out = copy.copy(cache)
    out.layers = [_rule(layer).take(layer, idx) for layer in cache.layers]
    reorder_extras(out, idx)
    return out


@concat_state.register(StaticCache)
def _concat_static_caches(caches: list[StaticCache]) -> StaticCache:
    """The rows of several static caches one after the other, each layer by its rule.

    Raises:
        ValueError: caches whose layers have seen different numbers of tokens (their rows would be
            aligned by left padding, which only the search's own masks can follow: the adapter's
            state, ``hf.causal_lm``, joins them), or of different ``max_cache_len``.
    """
    counts = sorted({count(layer) for cache in caches for layer in cache.layers if is_static(layer)})
    if len(counts) > 1:
        raise ValueError(f"concat_state: static caches at different token counts ({counts[0]} and {counts[-1]}) "
                         "cannot be joined alone: every row is written at one shared position, and aligning them "
                         "needs the attention masks left-padded alike (hf.causal_lm's state does it)")
    columns = counts[0] if counts else max(int(cache.get_seq_length()) for cache in caches)
    out = copy.copy(caches[0])
    out.layers = [_rule(layer).join([cache.layers[i] for cache in caches], columns)
                  for i, layer in enumerate(caches[0].layers)]
    return out


def _rule(layer: Any) -> LayerRule:
    rule = layer_rule(layer)
    if rule is None:  # a key/value layer the adapter moves itself has no place in a static cache
        raise TypeError(f"select_state: a StaticCache holding a {type(layer).__name__} layer is not supported")
    return rule
