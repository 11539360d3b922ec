"""The adapters' KV caches: the two full-attention cache layers (:class:`PromptLayer`, the prompt
kept in place in buffers allocated once; :class:`DeferredLayer`, a reorder gathered into the next
write), how a cache's rows are reordered (``select_state`` for ``DynamicCache`` and
``EncoderDecoderCache``, registered when this module is imported; :func:`reorder_in_place`) and
:func:`inference`, which runs the adapters' model calls, reorders and joins under
``torch.inference_mode``.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache

from beamsearch.core.state import concat_state, select_state, take_state
from beamsearch.hf.recurrent import dropped, layer_rule, reorder_extras
from beamsearch.hf.static_layers import count, drop_columns, full_columns, is_static, roll_rows, slots


def inference(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run under ``torch.inference_mode`` (entered only when not already on): the adapter's
    model calls, state reorders and joins. Cheaper than ``no_grad`` for a model's many small
    operations (no version counters, no view tracking); the tensors it makes (logits, states)
    are inference tensors: read them anywhere, write into them only inside inference mode."""

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        if torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode():
            return fn(*args, **kwargs)

    return inner


def cache_keyword(model: Any) -> str:
    """The forward's name for the KV cache argument: ``cache`` (transformers >= 5.24; the old
    ``past_key_values`` is deprecated there), else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(out: Any) -> Any:
    """The model output's KV cache (``cache`` in newer releases, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return out.past_key_values if cache is None else cache


class PromptLayer(DynamicLayer):
    """A full-attention layer's keys and values in buffers allocated once, ``[k, heads, C, dh]``,
    each step's column written in place (``DynamicLayer`` concatenates: a copy of the whole cache
    per step). The first ``prompt`` columns hold the prompt, the same in every row of an input,
    so a reorder among an input's own rows gathers only the generated columns (``generate``
    gathers every column of every layer at every step). ``keys``/``values`` are views of the
    filled columns, ``[k, heads, t, dh]``."""

    is_croppable = False

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room  # columns allocated beyond those written (at the prefill, and when full)
        self.prompt = 0  # columns shared by the rows of an input
        self.length = 0  # columns written
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self._k is None or self._v is None:  # the prefill: the prompt, and room for the tokens to come
            self.prompt = end
            self._k, self._v = (x.new_empty((*x.shape[:2], end + self.room, x.shape[3]))
                                for x in (key_states, value_states))
        elif end > self._k.shape[2]:  # out of room (no max_new_tokens): grow once per ``room`` columns
            k, v = (x.new_empty((*x.shape[:2], end + self.room, x.shape[3])) for x in (self._k, self._v))
            k[:, :, : self.length], v[:, :, : self.length] = self._k[:, :, : self.length], self._v[:, :, : self.length]
            self._k, self._v = k, v
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values  # type: ignore[return-value]

    def _views(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def reset(self) -> None:
        self.keys = self.values = self._k = self._v = None
        self.length = self.prompt = 0

    def take(self, idx: torch.Tensor, same_inputs: bool) -> None:
        """Keep rows ``idx`` (in place). ``same_inputs``: row i of the result belongs to the
        input row i belongs to now, so only the generated columns move."""
        if self._k is None or self._v is None:
            return
        if not same_inputs:  # only the written columns are copied (the room is written later)
            self._k, self._v = (_rows_of(buffer, idx, self.length) for buffer in (self._k, self._v))
        elif self.length > self.prompt:
            for buffer in (self._k, self._v):
                generated = buffer[:, :, self.prompt : self.length]
                generated.copy_(generated.index_select(0, idx))
        self._views()

    @staticmethod
    def joined(parts: list[tuple[torch.Tensor, torch.Tensor]], room: int) -> PromptLayer:
        """The rows of several caches' layers in one layer: ``parts`` (keys, values) ``[n_i, heads,
        t_i, dh]`` each, left-padded with zeros to the longest ``t`` and stacked, written once into
        buffers with ``room`` more columns (no prompt columns: rows of several searches share none)."""
        keys, values = parts[0]
        t, n = max(k.shape[2] for k, _ in parts), sum(k.shape[0] for k, _ in parts)
        layer = PromptLayer(room)
        layer.lazy_initialization(keys, values)
        layer._k, layer._v = (x.new_empty((n, x.shape[1], t + room, x.shape[3])) for x in (keys, values))
        row = 0
        for k, v in parts:
            lead = t - k.shape[2]
            for buffer, x in ((layer._k, k), (layer._v, v)):
                buffer[row : row + x.shape[0], :, :lead] = 0
                buffer[row : row + x.shape[0], :, lead:t] = x
            row += k.shape[0]
        layer.length = t
        layer._views()
        return layer

    def move_rows(self, holes: torch.Tensor, movers: torch.Tensor, rows: int) -> None:
        """Rows ``movers`` (int64 ``[j]``) copied over rows ``holes`` (``[j]``), then only the first
        ``rows`` rows kept: a selection of distinct rows that copies only the rows that move (the
        caller keeps which row is where)."""
        if self._k is None or self._v is None:
            return
        if holes.numel():
            for buffer in (self._k, self._v):
                buffer[holes, :, : self.length] = buffer[movers, :, : self.length]
        self._k, self._v = self._k[:rows], self._v[:rows]
        self._views()

    def drop_leading(self, columns: int) -> None:
        """Forget the first ``columns`` columns (padding for every row)."""
        assert self._k is not None and self._v is not None
        self._k, self._v = self._k[:, :, columns:], self._v[:, :, columns:]
        self.length, self.prompt = self.length - columns, max(self.prompt - columns, 0)
        self._views()


class DeferredLayer(DynamicLayer):
    """A full-attention layer whose reorder waits for the next write: ``take(idx)`` only records
    the rows, and the next ``update`` gathers them straight into the grown cache, one copy where
    ``index_select`` then ``DynamicLayer``'s concatenation are two (``generate`` makes both).
    :meth:`settle` applies a waiting reorder for any reader of ``keys``/``values`` rows."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: torch.Tensor | None = None  # int64 [k']: the rows the cache holds next

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        idx, self.pending = self.pending, None
        if idx is None or self.keys is None or self.keys.dim() < 4:  # nothing waits, or nothing cached yet
            return super().update(key_states, value_states, *args, **kwargs)
        assert self.values is not None, "a layer holding keys holds values"
        self.keys, self.values = _gathered(self.keys, idx, key_states), _gathered(self.values, idx, value_states)
        return self.keys, self.values

    def take(self, idx: torch.Tensor) -> None:
        """Keep rows ``idx`` (applied at the next write, or by :meth:`settle`)."""
        self.pending = idx if self.pending is None else self.pending.index_select(0, idx)

    def settle(self) -> None:
        if self.pending is not None:
            if self.keys is not None and self.values is not None and self.keys.dim() == 4:
                self.keys = self.keys.index_select(0, self.pending)
                self.values = self.values.index_select(0, self.pending)
            self.pending = None


def _rows_of(buffer: torch.Tensor, idx: torch.Tensor, columns: int, width: int | None = None) -> torch.Tensor:
    """A new ``[k', h, width, d]`` tensor (``width``: ``buffer``'s own ``C`` by default) whose
    first ``columns`` columns are those of ``buffer`` ``[k, h, C, d]``'s rows ``idx``, gathered
    straight into it; the rest allocated and not written."""
    out = buffer.new_empty((idx.shape[0], buffer.shape[1], buffer.shape[2] if width is None else width,
                            buffer.shape[3]))
    torch.index_select(buffer[:, :, :columns], 0, idx, out=out[:, :, :columns])
    return out


def _gathered(cache: torch.Tensor, idx: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """``cat([cache[idx], new], dim=2)`` in one pass: ``[k, h, t, d]`` rows ``idx`` and ``new``
    ``[k', h, q, d]`` written into one new ``[k', h, t + q, d]`` tensor."""
    t = cache.shape[2]
    out = _rows_of(cache, idx, t, t + new.shape[2])
    out[:, :, t:] = new
    return out


def settled(cache: Any) -> Any:
    """``cache`` with every waiting reorder of its layers applied (before its rows are read)."""
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, DeferredLayer):
            layer.settle()
    return cache


def plain_layer(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    """A ``DynamicLayer`` holding ``keys`` and ``values`` ``[k, heads, t, dh]``."""
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


@select_state.register(DynamicCache)
def _select_dynamic_cache(cache: DynamicCache, idx: Any) -> DynamicCache:
    """A new cache whose every layer holds rows ``idx`` of the old one's keys and values (a
    reorder waiting in a :class:`DeferredLayer` is composed with ``idx``, not applied to the
    old cache: only the rows taken are copied); other kinds of layer, and row tensors the cache
    holds beside them, by their rules (:mod:`beamsearch.hf.recurrent`)."""
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        layer_: Any = layer
        rule = layer_rule(layer)
        if rule is not None:
            out.layers.append(rule.take(layer, torch.as_tensor(idx)))
            continue
        if isinstance(layer_, (PromptLayer, DeferredLayer)):
            rows = idx
            if isinstance(layer_, DeferredLayer) and layer_.pending is not None and layer_.keys is not None:
                rows = layer_.pending.index_select(0, torch.as_tensor(idx, device=layer_.pending.device))
            out.layers.append(plain_layer(select_state(layer_.keys, rows), select_state(layer_.values, rows)))
            continue
        new = copy.copy(layer_)
        if layer_.keys is not None and layer_.keys.dim() > 0:
            new.keys = select_state(layer_.keys, idx)
            new.values = select_state(layer_.values, idx)
        out.layers.append(new)
    reorder_extras(out, torch.as_tensor(idx))
    return out


@select_state.register(EncoderDecoderCache)
def _select_encoder_decoder_cache(cache: EncoderDecoderCache, idx: Any) -> EncoderDecoderCache:
    out = copy.copy(cache)
    out.self_attention_cache = select_state(cache.self_attention_cache, idx)
    out.cross_attention_cache = select_state(cache.cross_attention_cache, idx)
    out.is_updated = dict(cache.is_updated)
    return out


@take_state.register(DynamicCache)
@take_state.register(EncoderDecoderCache)
def _take_cache(cache: Any, idx: Any) -> Any:
    """Rows ``idx`` in a new cache: the selection builds one (new layers, new tensors), ``cache``
    left as it was."""
    return select_state(cache, idx)


def _refused(cache: Cache) -> TypeError:
    kind = type(cache).__name__
    return TypeError(f"a {kind} cannot be a search state: the search moves the rows of a DynamicCache, a StaticCache "
                     f"or an EncoderDecoderCache (and of the layer kinds registered for them); register how to move a "
                     f"{kind}'s rows with @select_state.register({kind}) and @concat_state.register({kind})")


@select_state.register(Cache)
def _select_other_cache(cache: Cache, idx: Any) -> Cache:
    """Any other ``Cache`` (quantized, offloaded, ...): refused, never passed through as
    if it held no rows (its rows would silently stay where they were)."""
    raise _refused(cache)


@concat_state.register(Cache)
def _concat_other_cache(caches: list[Cache]) -> Cache:
    raise _refused(caches[0])


def _windows(cache: Any) -> list[Any]:
    return [layer for layer in getattr(cache, "layers", ()) if getattr(layer, "is_sliding", False)
            and getattr(layer, "keys", None) is not None and layer.keys.dim() == 4]


def windows_held(cache: Any, rows: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Before a forward that feeds cache rows ``rows`` ``[j]`` a masked dummy token (rows that
    join a search): copies of those rows' keys and values ``[j, heads, w, dh]`` in each
    sliding-window layer, for :func:`skip_dummy_column`; None when no layer has a sliding window
    (a masked column is never read by full attention)."""
    return [(layer.keys.index_select(0, rows), layer.values.index_select(0, rows)) for layer in _windows(cache)] or None


def skip_dummy_column(cache: Any, rows: torch.Tensor, kept: list[tuple[torch.Tensor, torch.Tensor]],
                      columns: int) -> None:
    """After that forward: the dummy column of rows ``rows`` moved before their first column, out
    of their sliding windows (it would take a place in a window, so a joined row would see a token
    fewer than alone until it slid out). Each full-attention layer (``columns`` columns; a static
    one's first ``columns`` places) has those rows' columns rolled right by one (the dummy's to
    column 0); each sliding-window layer those rows' windows set to the ``kept`` ones shifted by
    one column (the dummy's key filling the first place when the window grew; a static window's
    filled places alone). The caller rolls the rows' mask columns alike."""
    settled(cache)
    windows = _windows(cache)
    if len(windows) != len(kept):
        raise RuntimeError(f"the model changed its sliding-window layers during a step ({len(kept)} before, "
                           f"{len(windows)} after)")
    for layer, old in zip(windows, kept, strict=True):
        if is_static(layer):  # places [0, width) filled now, [0, before) before the dummy
            tokens = count(layer)
            width, before = slots(layer, tokens), slots(layer, tokens - 1)
        else:
            width, before = layer.keys.shape[2], old[0].shape[2]
        for name, then in zip(("keys", "values"), old, strict=True):
            now = getattr(layer, name)
            now[rows, :, :width] = torch.cat([now.index_select(0, rows)[:, :, width - 1: width],
                                              then[:, :, :before]], dim=2)[:, :, -width:]
    for layer in getattr(cache, "layers", ()):
        keys = getattr(layer, "keys", None)
        if keys is None or keys.dim() != 4 or any(layer is w for w in windows):
            continue
        if (full_columns(layer) if is_static(layer) else keys.shape[2]) == columns:
            roll_rows(layer, rows, columns)


def reorder_in_place(cache: DynamicCache, idx: torch.Tensor, same_inputs: bool = False) -> None:
    """Every layer's keys and values replaced by their rows ``idx`` (``index_select``); a layer
    that keeps the prompt in place gathers only its generated columns when ``same_inputs``.
    (Writing only the rows whose parent is another row, with ``index_copy_``, measured slower
    here: most rows move, and it is three operations where this is one.) Other kinds of layer,
    and row tensors the cache holds beside them, by their rules (:mod:`beamsearch.hf.recurrent`)."""
    for layer in cache.layers:
        layer_: Any = layer
        rule = layer_rule(layer)
        if rule is not None:
            rule.reorder(layer, idx)
            continue
        if isinstance(layer_, PromptLayer):
            layer_.take(idx, same_inputs)
            continue
        if isinstance(layer_, DeferredLayer):
            layer_.take(idx)
            continue
        if layer_.keys is not None and layer_.keys.dim() > 0:
            layer_.keys = layer_.keys.index_select(0, idx)
            layer_.values = layer_.values.index_select(0, idx)
    reorder_extras(cache, idx)


def drop_leading(cache: DynamicCache, mask: torch.Tensor, columns: int) -> tuple[torch.Tensor, int]:
    """Drop the leading cache columns that are padding for every row left (rows that joined a
    refill search later were left-padded to the oldest row's length), so the cache does not keep
    growing with the length of the whole run (full-attention caches only: a sliding-window layer
    keeps its own window; a reorder waiting in a layer is not applied: it indexes rows, this
    drops columns; recurrent layers hold no columns, and count the columns dropped off their
    tokens; a static layer moves its columns left in its buffer, freeing as many places). Returns
    the mask ``[k, M]`` and the columns left."""
    held: list[Any] = [layer for layer in cache.layers if getattr(layer, "keys", None) is not None]  # keys: not
    # a recurrent state alone
    full = bool(held) and all(layer.keys.dim() == 4 and not getattr(layer, "is_sliding", False)
                              and (full_columns(layer) if is_static(layer) else layer.keys.shape[2]) == columns
                              for layer in held)
    lead = int((~mask[:, :columns].bool().any(0)).cumprod(0).sum()) if columns and full else 0
    if lead:
        for layer in held:
            layer_: Any = layer
            if isinstance(layer_, PromptLayer):
                layer_.drop_leading(lead)
            elif is_static(layer_):
                drop_columns(layer_, lead)
            else:
                layer_.keys, layer_.values = layer_.keys[:, :, lead:], layer_.values[:, :, lead:]
        dropped(cache, lead)
    return mask[:, lead:], columns - lead
