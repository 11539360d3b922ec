"""Static key/value layers (``StaticLayer``, ``StaticSlidingWindowLayer``) inside a cache the search
carries, as rows it moves (a :class:`~beamsearch.hf.recurrent.LayerRule` each).

A static layer preallocates keys and values ``[k, heads, max_cache_len, dh]`` and writes the next
token of every row at one shared position, its token count (``cumulative_length``, a tensor the
model adds to in place; a sliding window also counts in ``cumulative_length_int``). Its rows are on
axis 0: reordering and copying rows is indexing them, the fixed length kept, and a copy gets its
own count (sharing it, the model would count each step twice). Joining is concatenating the rows
of layers of one ``max_cache_len`` that have seen the same number of tokens; layers at different
counts (searches at different steps) are refused: one shared write position cannot serve both.
Other static kinds (``StaticIndexedLayer``, the linear-attention + static hybrids) have no rule.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

from beamsearch.hf.recurrent import LayerRule, register_layer


def _filled(layer: Any) -> bool:
    return getattr(layer, "keys", None) is not None and layer.keys.dim() == 4


def _reorder(layer: Any, idx: torch.Tensor) -> None:
    if _filled(layer):
        layer.keys, layer.values = (x.index_select(0, idx.to(x.device)) for x in (layer.keys, layer.values))
        layer.batch_size = int(idx.numel())


def _take(layer: Any, idx: torch.Tensor) -> Any:
    new = copy.copy(layer)
    new.cumulative_length = layer.cumulative_length.clone()  # the model adds to it in place
    _reorder(new, idx)
    return new


def _count(layer: Any) -> tuple[int, int]:
    return int(layer.cumulative_length), int(getattr(layer, "cumulative_length_int", 0))


def _join(layers: list[Any], columns: int) -> Any:
    """The rows of ``layers`` one after the other (``columns``, the joined cache's length, is
    their common token count: a static layer holds no padding columns to add).

    Raises:
        ValueError: layers of different ``max_cache_len`` or token counts, named.
    """
    lengths = sorted({layer.max_cache_len for layer in layers})
    counts = sorted({_count(layer) for layer in layers})
    if len(lengths) > 1 or len(counts) > 1:
        raise ValueError(f"concat_state: {type(layers[0]).__name__} layers can be joined only at one max_cache_len "
                         f"and one token count (every row is written at one shared position); got max_cache_len "
                         f"{lengths} and token counts {[c for c, _ in counts]}")
    filled = [_filled(layer) for layer in layers]
    if any(filled) and not all(filled):
        raise ValueError("concat_state: static layers holding keys cannot be joined with static layers not filled yet")
    new = _take(layers[0], torch.arange(0))
    if all(filled):
        new.keys = torch.cat([layer.keys for layer in layers])
        new.values = torch.cat([layer.values for layer in layers])
        new.batch_size = int(new.keys.shape[0])
    return new


for _kind in (StaticLayer, StaticSlidingWindowLayer):
    register_layer(_kind, LayerRule(_reorder, _take, _join))
