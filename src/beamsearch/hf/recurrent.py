"""The cache layers of recurrent and hybrid models (Mamba, Mamba2, Jamba, Bamba, Zamba, Falcon-H1,
Granite 4, Nemotron-H, Qwen3-Next, Qwen3.5, LFM2, Kimi Linear, MiniMax, Qwen4-Exp, ...) as rows
the search moves: for each kind of layer a :class:`LayerRule` (keep rows in place, copy rows out,
join the layers of several caches), registered by exact type with :func:`register_layer`, and the
row tensors some caches hold beside their layers (MiniMax's ``linear_cache``; the state of models that
keep it outside a ``Cache``: :class:`CarriedCache`), registered with :func:`register_extras`.

A linear-attention or state-space layer holds, per row, a convolution state ``[k, channels,
kernel]`` and a recurrent state (``[k, heads, dk, dv]`` or ``[k, channels, state]``): a fixed
size, whatever the length, so joining rows of searches at different steps is a concatenation,
and a row's state is its own (no prompt part that rows of one input could share).

The rule is looked up by the layer's exact type (not its base classes): a subclass may hold more
state than its base (``LinearAttentionAndFullAttentionLayer`` is a ``DynamicLayer`` with
convolution and recurrent states; the quantized layers keep their keys elsewhere), and reordering
it as its base would silently keep the wrong rows. An unregistered kind is a TypeError naming it
and how to register it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import (
    DummyLayer,
    DynamicCache,
    DynamicIndexedLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionAndFullAttentionLayer,
    LinearAttentionAndSlidingWindowAttentionLayer,
    LinearAttentionCacheLayerMixin,
    LinearAttentionLayer,
)

from beamsearch.core.state import concat_state, pad_axis, select_state


@dataclass(frozen=True)
class LayerRule:
    """How the adapter moves the rows of one kind of cache layer (rows on axis 0 of its tensors).

    Attributes:
        reorder: ``reorder(layer, idx [k'])``: the layer keeps rows ``idx`` (in place: the model
            writes into the layer's tensors next).
        take: ``take(layer, idx [k']) -> layer``: a new layer holding rows ``idx``, ``layer`` left
            as it was (sharing no tensor the model writes into).
        join: ``join(layers, columns) -> layer``: the rows of several caches' layers (same kind,
            same index), one after the other; ``columns`` is the joined cache's length (keys and
            values left-padded with zeros to it; the layer's own token count set to it).
    """

    reorder: Callable[[Any, torch.Tensor], None]
    take: Callable[[Any, torch.Tensor], Any]
    join: Callable[[list[Any], int], Any]


LAYER_RULES: dict[type, LayerRule] = {}
"""The registered kinds of layer, by exact type (:func:`register_layer`)."""

KEY_VALUE_TYPES = (DynamicLayer, DynamicSlidingWindowLayer)
"""Layers holding keys and values ``[k, heads, t, dh]`` alone: the adapter's own code moves them
(:mod:`beamsearch.hf.caches`), with its in-place layouts."""


def register_layer(cls: type, rule: LayerRule) -> None:
    """Teach the adapter a kind of cache layer: ``rule`` moves the rows of layers of type ``cls``
    exactly (not of its subclasses: register each)."""
    LAYER_RULES[cls] = rule


def layer_rule(layer: Any) -> LayerRule | None:
    """The rule of ``layer``'s type; None for the key/value layers the adapter moves itself
    (:data:`KEY_VALUE_TYPES`, and its own subclasses of them).

    Raises:
        TypeError: a kind of layer no rule is registered for, named, with how to register one.
    """
    kind = type(layer)
    rule = LAYER_RULES.get(kind)
    if rule is not None:
        return rule
    if kind in KEY_VALUE_TYPES or kind.__module__.startswith("beamsearch."):
        return None
    raise TypeError(f"select_state: cache layers of type {kind.__name__} ({kind.__module__}) are not supported: "
                    "the search cannot tell which of their tensors hold rows. Register how to move their rows "
                    f"with beamsearch.hf.recurrent.register_layer({kind.__name__}, LayerRule(reorder, take, join))")


def _states(layer: Any) -> list[tuple[dict, int]]:
    """The dicts of a linear-attention layer's row tensors (convolution and recurrent states, one
    entry per state index, None where unused) and their keys."""
    return [(d, i) for d in (layer.conv_states, layer.recurrent_states) for i in range(layer.number_of_states)
            if d[i] is not None]


def reorder_linear(layer: Any, idx: torch.Tensor) -> None:
    for states, i in _states(layer):
        states[i] = states[i].index_select(0, idx.to(states[i].device))


def take_linear(layer: Any, idx: torch.Tensor) -> Any:
    new = copy.copy(layer)
    new.conv_states, new.recurrent_states = dict(layer.conv_states), dict(layer.recurrent_states)
    new.has_previous_state = dict(layer.has_previous_state)
    new.cumulative_length_linear = layer.cumulative_length_linear.clone()
    reorder_linear(new, idx)
    return new


def join_linear(layers: list[Any], columns: int) -> Any:
    new = take_linear(layers[0], torch.arange(0))  # the first layer's settings, its tensors replaced below
    for states, i in _states(layers[0]):
        name = "conv_states" if states is layers[0].conv_states else "recurrent_states"
        getattr(new, name)[i] = torch.cat([getattr(layer, name)[i] for layer in layers])
    new.cumulative_length_linear = torch.tensor(columns, dtype=torch.long,
                                                device=layers[0].cumulative_length_linear.device)
    return new


def _reorder_keys(layer: Any, idx: torch.Tensor) -> None:
    if layer.keys is not None and layer.keys.dim() > 1:
        layer.keys, layer.values = (x.index_select(0, idx.to(x.device)) for x in (layer.keys, layer.values))


def _join_keys(new: Any, layers: list[Any], columns: int) -> None:
    """``new``'s keys and values: those of ``layers``, left-padded with zeros to the longest."""
    with_keys = [layer for layer in layers if layer.keys is not None and layer.keys.dim() > 1]
    if not with_keys:
        new.keys = new.values = None
        return
    like = with_keys[0].keys
    empty = like.new_zeros((0, like.shape[1], 0, like.shape[3]))
    parts = [(layer.keys, layer.values) if layer in with_keys else
             (empty.expand(_rows(layer), -1, -1, -1),) * 2 for layer in layers]
    new.keys = torch.cat(pad_axis([k for k, _ in parts], 2, 0.0, side="left"))
    new.values = torch.cat(pad_axis([v for _, v in parts], 2, 0.0, side="left"))
    if hasattr(new, "cumulative_length"):  # a sliding window counts the tokens it has seen
        new.cumulative_length = columns


def _rows(layer: Any) -> int:
    for states, i in _states(layer):
        return int(states[i].shape[0])
    raise ValueError(f"a {type(layer).__name__} holding no tensor has no rows to join")


def _reorder_hybrid(layer: Any, idx: torch.Tensor) -> None:
    reorder_linear(layer, idx)
    _reorder_keys(layer, idx)


def _take_hybrid(layer: Any, idx: torch.Tensor) -> Any:
    new = take_linear(layer, idx)
    _reorder_keys(new, idx)
    return new


def _join_hybrid(layers: list[Any], columns: int) -> Any:
    new = join_linear(layers, columns)
    _join_keys(new, layers, columns)
    return new


def indexer_tensors(layer: Any) -> list[tuple[str, int, int]]:
    """The indexer tensors a ``DynamicIndexedLayer`` holds, by name, with their rows' axis and their
    columns' axis: its indexer keys ``[k, t, d]`` and (on a model's first indexed layer) the
    positions of its columns ``[dims, k, t]``."""
    return [(name, rows, columns) for name, rows, columns in (("indexer_keys", 0, 1), ("indexer_position_ids", 1, 2))
            if isinstance(getattr(layer, name), torch.Tensor) and getattr(layer, name).dim() > 1]


def _reorder_indexed(layer: Any, idx: torch.Tensor) -> None:
    _reorder_keys(layer, idx)
    for name, axis, _ in indexer_tensors(layer):
        x = getattr(layer, name)
        setattr(layer, name, x.index_select(axis, idx.to(x.device)))


def _take_indexed(layer: Any, idx: torch.Tensor) -> Any:
    new = copy.copy(layer)  # index_select makes new tensors: none shared with ``layer``
    _reorder_indexed(new, idx)
    return new


def _join_indexed(layers: list[Any], columns: int) -> Any:
    """Keys, values, indexer keys and column positions of ``layers``, left-padded with zeros to the
    longest (a padding column is masked: the indexer picks among the columns the mask shows)."""
    new = copy.copy(layers[0])
    _join_keys(new, layers, columns)
    for name, axis, columns_axis in indexer_tensors(layers[0]):
        parts = pad_axis([getattr(layer, name) for layer in layers], columns_axis, 0, side="left")
        setattr(new, name, torch.cat(parts, dim=axis))
    return new


def joined_layer(layers: list[Any], orders: list[torch.Tensor | None], columns: int) -> Any | None:
    """The layers of several caches at one index (same kind) joined by their rule, each cache's
    rows in its ``order`` (None: as they are); a fresh layer of the kind for layers holding
    nothing (the model keeps their state beside the layers); None for the key/value layers the
    adapter joins itself."""
    rule = layer_rule(layers[0])
    if rule is not None:
        taken = [layer if order is None else rule.take(layer, order)
                 for layer, order in zip(layers, orders, strict=True)]
        return rule.join(taken, columns)
    return type(layers[0])() if getattr(layers[0], "keys", None) is None else None


def dropped(cache: Any, lead: int) -> None:
    """The linear-attention layers of ``cache`` count ``lead`` tokens fewer (the leading padding
    columns the key/value layers dropped)."""
    for layer in cache.layers:
        if isinstance(getattr(layer, "cumulative_length_linear", None), torch.Tensor):
            layer.cumulative_length_linear = layer.cumulative_length_linear - lead
        if type(layer) is DynamicIndexedLayer:  # its indexer's columns too
            for name, _, axis in indexer_tensors(layer):
                x = getattr(layer, name)
                setattr(layer, name, x.narrow(axis, lead, x.shape[axis] - lead))


def _take_dummy(layer: Any, idx: torch.Tensor) -> Any:
    return layer


register_layer(LinearAttentionLayer, LayerRule(reorder_linear, take_linear, join_linear))
register_layer(LinearAttentionAndFullAttentionLayer, LayerRule(_reorder_hybrid, _take_hybrid, _join_hybrid))
register_layer(LinearAttentionAndSlidingWindowAttentionLayer, LayerRule(_reorder_hybrid, _take_hybrid, _join_hybrid))
register_layer(DynamicIndexedLayer, LayerRule(_reorder_indexed, _take_indexed, _join_indexed))
register_layer(DummyLayer, LayerRule(lambda layer, idx: None, _take_dummy, lambda layers, columns: layers[0]))


@dataclass(frozen=True)
class Extras:
    """The row tensors a kind of cache holds beside its layers.

    Attributes:
        get: ``get(cache) -> list[Tensor | None]``: the tensors, rows on axis 0 (None: a slot unused).
        put: ``put(cache, tensors)``: set them (the same slots).
    """

    get: Callable[[Any], list[torch.Tensor | None]]
    put: Callable[[Any, list[torch.Tensor | None]], None]


CACHE_EXTRAS: dict[type, Extras] = {}
"""Caches with row tensors beside their layers, by exact type (:func:`register_extras`)."""

_PLAIN_ATTRIBUTES = frozenset(vars(DynamicCache()))


def register_extras(cls: type, extras: Extras) -> None:
    """Teach the adapter the row tensors a cache of type ``cls`` holds beside its layers."""
    CACHE_EXTRAS[cls] = extras


def extras_of(cache: Any) -> Extras | None:
    """The :class:`Extras` of ``cache``'s type, None for a cache whose rows are all in its layers.

    Raises:
        TypeError: a cache holding tensors or lists of them beside its layers, of a type not registered.
    """
    extras = CACHE_EXTRAS.get(type(cache))
    if extras is not None or type(cache) is DynamicCache:
        return extras
    own = sorted(name for name, value in vars(cache).items()
                 if name not in _PLAIN_ATTRIBUTES and isinstance(value, (torch.Tensor, list, tuple, dict)))
    if own:
        name = type(cache).__name__
        raise TypeError(f"select_state: a {name} holds {own} beside its layers, which the search does not know how "
                        f"to reorder; register them with beamsearch.hf.recurrent.register_extras({name}, "
                        "Extras(get, put))")
    return None


def reorder_extras(cache: Any, idx: torch.Tensor) -> None:
    """The cache's extra row tensors (:func:`extras_of`) keep rows ``idx`` (new tensors)."""
    extras = extras_of(cache)
    if extras is not None:
        extras.put(cache, [None if t is None else t.index_select(0, idx.to(t.device)) for t in extras.get(cache)])


def joined_extras(new: Any, caches: list[Any], columns: int) -> None:
    """``new``'s extra row tensors: those of ``caches``, concatenated (fixed-size states); a cache
    counting its tokens itself (``tokens``) counts ``columns``, the joined cache's length."""
    if isinstance(getattr(new, "tokens", None), int):
        new.tokens = columns
    extras = extras_of(caches[0])
    if extras is not None:
        tensors = list(zip(*[extras.get(cache) for cache in caches], strict=True))  # per tensor: its rows per cache
        extras.put(new, [None if parts[0] is None else torch.cat(list(parts)) for parts in tensors])


def _minimax_get(cache: Any) -> list[torch.Tensor | None]:
    return [t if isinstance(t, torch.Tensor) else None for t in cache.linear_cache]


def _minimax_put(cache: Any, tensors: list[torch.Tensor | None]) -> None:
    cache.linear_cache = [[] if t is None else t for t in tensors]  # [] marks an attention layer's slot


try:  # MiniMax's lightning-attention state: per layer [k, heads, dh, dh], in the cache's linear_cache
    from transformers.models.minimax.modeling_minimax import MiniMaxCache
except ImportError:  # pragma: no cover - a transformers without MiniMax
    pass
else:
    register_extras(MiniMaxCache, Extras(_minimax_get, _minimax_put))


OWN_CACHE_TYPES = frozenset({"minimax"})
"""Model types whose forward refuses a ``DynamicCache`` it did not make (MiniMax makes its
``MiniMaxCache``): their prefill is given no cache."""


FOUR_D_TYPES = frozenset({"minimax"})
"""Model types whose steps must be given the 4-D mask ready: MiniMax's cache counts its length from
its first layer, a lightning-attention layer holding no keys (0), so the mask it builds from a 2-D
one covers one column and every padding column is attended."""

UNPADDED_TYPES = frozenset({"minimax", "recurrent_gemma", "rwkv", "xlstm"})
"""Model types whose recurrence sees the padding of a batch of prompts (RWKV and xLSTM read no
attention mask; RecurrentGemma's convolution and MiniMax's lightning attention run over the
padding: measured against each prompt alone): the prompts of each length run together, unpadded."""


STATE_OUTSIDE_TYPES = frozenset({"rwkv", "xlstm", "recurrent_gemma"})
"""Model types that keep their recurrent state outside a ``Cache`` (:mod:`beamsearch.hf.carried`)."""


def recurrent(model: Any) -> bool:
    """Whether ``model`` holds a recurrent state per row (a linear-attention, state-space or
    convolution layer of its cache, or a state outside a ``Cache``)."""
    if model.config.model_type in STATE_OUTSIDE_TYPES:
        return True
    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in DynamicCache(config=model.config).layers)


def cache_length(cache: Any) -> int:
    """The columns ``cache`` holds: those of its first layer holding keys and values (a hybrid's
    first layer may be a recurrent one, counting its tokens apart, or none), else its own count
    (an encoder-decoder cache's)."""
    for layer in getattr(cache, "layers", ()):
        if getattr(layer, "keys", None) is not None:
            return int(layer.get_seq_length())
    return int(cache.get_seq_length())


def attends(cache: Any) -> bool:
    """Whether any layer of ``cache`` attends over cached keys (else the model reads no attention
    mask at a decoding step: Mamba's would take a 2-D mask for its input tokens' mask)."""
    return any(type(layer) not in (LinearAttentionLayer, DummyLayer) for layer in cache.layers)


def _row_tensors(cache: Any) -> list[torch.Tensor]:
    """The tensors holding ``cache``'s recurrent rows: its linear-attention layers' states and its
    extra row tensors (not keys and values: a masked token adds a column no row reads)."""
    out = [states[i] for layer in cache.layers if type(layer) in LAYER_RULES and hasattr(layer, "conv_states")
           for states, i in _states(layer)]
    extras = extras_of(cache)
    return out + ([t for t in extras.get(cache) if t is not None] if extras is not None else [])


def held(cache: Any, rows: torch.Tensor) -> list[torch.Tensor]:
    """Copies of rows ``rows`` ``[j]`` of ``cache``'s recurrent states, for :func:`restore`."""
    return [t.index_select(0, rows) for t in _row_tensors(cache)]


def restore(cache: Any, rows: torch.Tensor, kept: list[torch.Tensor]) -> None:
    """Rows ``rows`` of ``cache``'s recurrent states set back to ``kept`` (:func:`held` before a
    forward that fed those rows a dummy token: a recurrence has no mask to skip it)."""
    tensors = _row_tensors(cache)
    if len(tensors) != len(kept):
        raise RuntimeError(f"the model changed its recurrent states' layout during a step ({len(kept)} tensors "
                           f"before, {len(tensors)} after)")
    for t, old in zip(tensors, kept, strict=True):
        t[rows] = old


def by_length(rows: list[list[int]], prefill: Callable[[list[list[int]]], Any]) -> Any:
    """The prefill of a model that must not see padding (:data:`UNPADDED_TYPES`): the prompts
    ``rows`` of each length run together, unpadded (``prefill(part)``, the adapter's state of those
    prompts), and their states are joined (as a refill joins searches), in the inputs' order."""
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(len(r), []).append(i)
    joined = concat_state([prefill([rows[i] for i in g]) for g in groups.values()])
    at = torch.empty(len(rows), dtype=torch.long)
    at[torch.tensor([i for g in groups.values() for i in g])] = torch.arange(len(rows))  # --> each input's joined row
    state = select_state(joined._replace(pending=None), at.to(joined.mask.device))
    return state._replace(source=torch.arange(len(rows), device=joined.mask.device), pending=None)
