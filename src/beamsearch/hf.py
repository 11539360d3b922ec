"""Decode Hugging Face ``transformers`` models with beamsearch (``pip install 'beamsearch[hf]'``).

Importing this module registers ``select_state`` for the library's cache classes
(``DynamicCache``, ``EncoderDecoderCache``), so the search reorders a model's KV cache row by
row like any other state, and rows of inputs that have stopped simply leave the cache.

Two layers:

- :func:`generate` takes a model and its generation config (or the model's own) and decodes with
  the same settings: token ids or text in, :class:`Generation` (hypotheses, and text) out.
- :func:`causal_lm` and :func:`seq2seq_lm` return a :class:`Prepared`: the ``init_state``,
  ``step`` and ``prompts`` that :func:`beamsearch.beam_search_batch` takes, and the
  ``eos_token_id`` to search with::

    dec = causal_lm(model, [[5, 6, 7], [8]])
    results = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                max_steps=32, beam_size=4)

The prompt (all of it) is run through the model once, in ``causal_lm``, one row per input (not
one per beam, as ``generate`` does), keeping only the last position's logits: the first ``step``
returns them, and every later step feeds one token per row with the attention mask and the
positions of a buffer allocated once.
"""

from __future__ import annotations

import copy
import functools
import inspect
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from beamsearch.core import validate as check
from beamsearch.core.config import DecodingConfig, controls_of
from beamsearch.core.hypothesis import BatchResults
from beamsearch.core.plan import run_plan
from beamsearch.modes.beam import beam_search_batch, greedy_plan
from beamsearch.core.state import concat_state, pad_axis, select_state
from beamsearch.processors import BadWords, RepetitionPenalty, SequenceBias, StepContext, SuppressTokens

__all__ = ["SEARCH_SETTINGS", "Generation", "Prepared", "causal_lm", "generate", "joinable", "other_settings",
           "position_limit", "saved_generation_config", "search_settings", "seq2seq_lm"]


def _inference(fn: Callable[..., Any]) -> Callable[..., Any]:
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


class _PromptLayer(DynamicLayer):
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

    def drop_leading(self, columns: int) -> None:
        """Forget the first ``columns`` columns (padding for every row)."""
        assert self._k is not None and self._v is not None
        self._k, self._v = self._k[:, :, columns:], self._v[:, :, columns:]
        self.length, self.prompt = self.length - columns, max(self.prompt - columns, 0)
        self._views()


class _DeferredLayer(DynamicLayer):
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
        self.keys, self.values = _gathered(self.keys, idx, key_states), _gathered(self.values, idx, value_states)
        return self.keys, self.values

    def take(self, idx: torch.Tensor) -> None:
        """Keep rows ``idx`` (applied at the next write, or by :meth:`settle`)."""
        self.pending = idx if self.pending is None else self.pending.index_select(0, idx)

    def settle(self) -> None:
        if self.pending is not None:
            if self.keys is not None and self.keys.dim() == 4:
                self.keys, self.values = self.keys.index_select(0, self.pending), self.values.index_select(0, self.pending)
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


def _settled(cache: Any) -> Any:
    """``cache`` with every waiting reorder of its layers applied (before its rows are read)."""
    for layer in getattr(cache, "layers", ()):
        if isinstance(layer, _DeferredLayer):
            layer.settle()
    return cache


def _plain_layer(keys: torch.Tensor, values: torch.Tensor, kind: type[DynamicLayer] = DynamicLayer) -> DynamicLayer:
    """A ``kind`` layer (``DynamicLayer``, or :class:`_DeferredLayer`) holding ``keys`` and
    ``values`` ``[k, heads, t, dh]``."""
    layer = kind()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def _with_keys(layer: Any) -> Any:
    """``layer``, a cache layer holding ``keys`` and ``values``; a TypeError naming its type
    otherwise (a layer kind a reorder here does not know)."""
    if not hasattr(layer, "keys"):
        raise TypeError(f"select_state: cache layers of type {type(layer).__name__} (no keys/values) are "
                        "not supported; register a function for them with select_state.register")
    return layer


@select_state.register(DynamicCache)
def _select_dynamic_cache(cache: DynamicCache, idx: Any) -> DynamicCache:
    """A new cache whose every layer holds rows ``idx`` of the old one's keys and values."""
    _settled(cache)
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        layer_: Any = _with_keys(layer)
        if isinstance(layer_, (_PromptLayer, _DeferredLayer)):
            out.layers.append(_plain_layer(select_state(layer_.keys, idx), select_state(layer_.values, idx)))
            continue
        new = copy.copy(layer_)
        if layer_.keys is not None and layer_.keys.dim() > 0:
            new.keys = select_state(layer_.keys, idx)
            new.values = select_state(layer_.values, idx)
        out.layers.append(new)
    return out


@select_state.register(EncoderDecoderCache)
def _select_encoder_decoder_cache(cache: EncoderDecoderCache, idx: Any) -> EncoderDecoderCache:
    out = copy.copy(cache)
    out.self_attention_cache = select_state(cache.self_attention_cache, idx)
    out.cross_attention_cache = select_state(cache.cross_attention_cache, idx)
    out.is_updated = dict(cache.is_updated)
    return out


@dataclass
class Prepared:
    """What ``beam_search_batch`` takes to decode a batch with a ``transformers`` model.

    Attributes:
        init_state: one row per input.
        step: ``step(state, y_prev [k]) -> (logits [k, V'], new state)``, V' = V, or V + 1 when
            the search is given an eos the model never produces (``eos_token_id=None``).
        prompts: the ``prompts`` argument: each input's prompt tokens (causal LM), or
            ``[decoder_start_token_id]`` (encoder-decoder).
        eos_token_id: the eos id, or the list of eos ids (the model's generation config may hold
            several, as Llama 3, Qwen2.5 and Gemma do), to search with: pass it on as
            ``eos_token_id`` to ``beam_search_batch`` (or as ``eos`` to ``beam_search_each``).
        forward_seconds: time spent inside the model's forward so far (prefill included).
        forward_calls: model forward calls so far.

    A ``Prepared`` is for one search: the model extends its KV cache in place, and the search
    reorders it in place (``select_state`` on the adapter's state), as ``generate`` does; a
    second search from the same ``init_state`` is a ValueError saying so at its first step (call
    :func:`causal_lm` / :func:`seq2seq_lm` again).
    The model runs under ``torch.inference_mode``: the logits and states are inference tensors
    (read them anywhere; clone one before writing into it outside inference mode).
    """

    init_state: Any
    step: Any
    prompts: list[list[int]]
    eos_token_id: int | list[int]
    forward_seconds: float = 0.0
    forward_calls: int = 0


class CausalState(NamedTuple):
    """A decoder-only model's state; every tensor has one row per live hypothesis.

    Rows may come from searches joined at different steps (refill, :func:`concat_state`): their
    caches are then aligned by left padding, masked out in ``mask``, and each row keeps its own
    positions, so the model computes for each row what it computes for it alone."""

    cache: DynamicCache  # per layer, keys and values [k, heads, t, dh]; t = columns
    mask: torch.Tensor  # int64 [k, M], M > t: column j is 0 where cache column j is padding, 1 elsewhere
    positions: torch.Tensor  # int64 [k]: the position of the next token each row feeds
    columns: int  # t, the cache's length (every row's): the step's token goes to column t
    furthest: int  # at least positions.max() (a bound kept on the host: no device sync per step)
    first: torch.Tensor | None  # float [k, V]: logits of the prompt's last position, until used
    pending: torch.Tensor | None  # bool [k]: rows whose next logits are ``first`` (None: every row, when first is set)
    source: torch.Tensor  # int64 [k]: the input each row decodes (mask, positions, first, pending depend on it alone)


class Seq2SeqState(NamedTuple):
    """An encoder-decoder model's state; every tensor has one row per live hypothesis.

    Rows may come from searches joined at different steps (refill, :func:`concat_state`): the
    encoder side is then right-padded to the longest source (masked in ``encoder_mask``), the
    decoder's self-attention cache left-padded to the longest (masked in ``mask``), each row keeps
    its own decoder positions, and the cross-attention cache is recomputed for every row at the
    next call."""

    cache: EncoderDecoderCache
    encoder_hidden: torch.Tensor  # float [k, S, d]
    encoder_mask: torch.Tensor  # int64 [k, S]
    fed: int  # decoder cache columns (every row's): the step's token goes to column fed
    source: torch.Tensor  # int64 [k]: the source each row decodes (what the encoder-side rows depend on)
    mask: torch.Tensor | None = None  # int64 [k, M], M >= fed: 0 on decoder cache columns that are padding (None: none are)
    positions: torch.Tensor | None = None  # int64 [k]: the decoder position of each row's next token (None: fed)


@select_state.register(CausalState)
@_inference
def _select_causal_state(state: CausalState, idx: Any) -> CausalState:
    """Rows ``idx`` of the adapter's state. Its cache belongs to the one search that runs it, so
    it is reordered in place, as ``generate``'s ``reorder_cache`` does: each old key/value
    tensor is released as soon as its gathered copy exists (a whole second cache alive at once
    costs 3 to 5 times the time in fresh memory).

    When every new row decodes the input the row now at its position decodes (a beam that keeps
    its width: every step after the first until an input stops), only the cache moves: the mask,
    positions and prefill logits are the input's, and a cache that keeps the prompt in place
    gathers only its generated columns."""
    idx = torch.as_tensor(idx, device=state.mask.device)
    source = state.source.index_select(0, idx)
    same = source.shape == state.source.shape and torch.equal(source, state.source)
    _reorder_in_place(state.cache, idx, same)
    if same:
        return state
    mask, columns = _drop_leading(state.cache, state.mask.index_select(0, idx), state.columns)
    return CausalState(state.cache, mask, state.positions.index_select(0, idx), columns, state.furthest,
                       None if state.first is None else state.first.index_select(0, idx),
                       None if state.pending is None else state.pending.index_select(0, idx), source)


def _drop_leading(cache: DynamicCache, mask: torch.Tensor, columns: int) -> tuple[torch.Tensor, int]:
    """Drop the leading cache columns that are padding for every row left (rows that joined a
    refill search later were left-padded to the oldest row's length), so the cache does not keep
    growing with the length of the whole run (full-attention caches only: a sliding-window layer
    keeps its own window; a reorder waiting in a layer is not applied: it indexes rows, this
    drops columns). Returns the mask ``[k, M]`` and the columns left."""
    full = all(getattr(layer, "keys", None) is not None and layer.keys.dim() == 4 and layer.keys.shape[2] == columns
               for layer in cache.layers)
    lead = int((~mask[:, :columns].bool().any(0)).cumprod(0).sum()) if columns and full else 0
    if lead:
        for layer in cache.layers:
            layer_: Any = layer
            if isinstance(layer_, _PromptLayer):
                layer_.drop_leading(lead)
            else:
                layer_.keys, layer_.values = layer_.keys[:, :, lead:], layer_.values[:, :, lead:]
    return mask[:, lead:], columns - lead


@concat_state.register(CausalState)
@_inference
def _concat_causal_states(states: list[CausalState]) -> CausalState:
    """The rows of several states (searches at different steps) in one state: every layer's keys
    and values left-padded with zeros to the longest cache, the mask with 0 on those columns
    (and right-padded with 1, the columns of tokens to come, to the widest), positions per row as
    they were. Rows of a state whose prompt logits are unused yet keep them (``pending``)."""
    t = max(s.columns for s in states)
    for s in states:
        _settled(s.cache)
    cache = copy.copy(states[0].cache)
    cache.layers = []
    for i, layer in enumerate(states[0].cache.layers):
        keys = torch.cat(pad_axis([s.cache.layers[i].keys for s in states], 2, 0.0, side="left"))
        values = torch.cat(pad_axis([s.cache.layers[i].values for s in states], 2, 0.0, side="left"))
        if isinstance(layer, _PromptLayer):  # the rows of several searches share no prompt columns
            cache.layers.append(_plain_layer(keys, values))
            continue
        if isinstance(layer, _DeferredLayer):
            cache.layers.append(_plain_layer(keys, values, _DeferredLayer))
            continue
        new = copy.copy(layer)
        new.keys, new.values = keys, values
        cache.layers.append(new)
    mask = _joined_mask([s.mask for s in states], [s.columns for s in states])
    first = pending = None
    if any(s.first is not None for s in states):
        like = next(s.first for s in states if s.first is not None)
        first = torch.cat([like.new_zeros(s.mask.shape[0], like.shape[1]) if s.first is None else s.first
                           for s in states])
        pending = torch.cat([s.mask.new_full((s.mask.shape[0],), s.first is not None, dtype=torch.bool)
                             if s.pending is None or s.first is None else s.pending for s in states])
    return CausalState(cache, mask, torch.cat([s.positions for s in states]), t, max(s.furthest for s in states),
                       first, pending, _joined_sources([s.source for s in states]))


def _joined_mask(masks: list[torch.Tensor], columns: list[int]) -> torch.Tensor:
    """Masks ``[n_i, M_i]`` of states with ``columns[i]`` cache columns, as one ``[sum n_i, M]``:
    each left-padded with 0 to the most columns (their caches are left-padded so), then
    right-padded with 1 (the columns of tokens to come) to the widest."""
    t = max(columns)
    masks = [torch.cat([m.new_zeros(m.shape[0], t - c), m], dim=1) for m, c in zip(masks, columns)]
    return torch.cat(pad_axis(masks, 1, 1, side="right"))


def _joined_sources(sources: list[torch.Tensor]) -> torch.Tensor:
    """Each state numbers its own inputs from 0: the states' ``source`` rows renumbered apart."""
    out, offset = [], 0
    for source in sources:
        out.append(source + offset)
        offset += int(source.max()) + 1 if source.numel() else 0
    return torch.cat(out)


@select_state.register(Seq2SeqState)
@_inference
def _select_seq2seq_state(state: Seq2SeqState, idx: Any) -> Seq2SeqState:
    """Rows ``idx`` of the adapter's state; its cache reordered in place (see the causal one).

    The encoder-side rows (cross-attention keys and values, encoder output and mask) depend only
    on the source: when every new row decodes the same source as the row now at its position (a
    beam that keeps its width, so every step after the first), they are left as they are, where
    ``generate`` gathers them every step."""
    idx = torch.as_tensor(idx, device=state.encoder_mask.device)
    _reorder_in_place(state.cache.self_attention_cache, idx)
    source = state.source.index_select(0, idx)
    if source.shape == state.source.shape and torch.equal(source, state.source):
        return state
    _reorder_in_place(state.cache.cross_attention_cache, idx)
    mask, positions, fed = state.mask, state.positions, state.fed
    if mask is not None and positions is not None:
        mask, fed = _drop_leading(state.cache.self_attention_cache, mask.index_select(0, idx), fed)
        positions = positions.index_select(0, idx)
    return Seq2SeqState(state.cache, state.encoder_hidden.index_select(0, idx),
                        state.encoder_mask.index_select(0, idx), fed, source, mask, positions)


@concat_state.register(Seq2SeqState)
@_inference
def _concat_seq2seq_states(states: list[Seq2SeqState]) -> Seq2SeqState:
    """The rows of several states (searches at different steps) in one state: the encoder output
    and mask right-padded to the longest source, the decoder's self-attention keys and values
    left-padded with zeros to the longest (masked in ``mask``), positions per row as they were;
    the cross-attention cache is left empty, so the next call computes it for every row from the
    encoder output (it is a function of that alone)."""
    t = max(s.fed for s in states)
    for s in states:
        _settled(s.cache.self_attention_cache)
    like = next((s for s in states if s.fed), None)
    self_cache = copy.copy(states[0].cache.self_attention_cache)
    self_cache.layers = []
    for i in range(len(states[0].cache.self_attention_cache.layers)):
        if like is None:  # no state has fed a token: nothing cached yet
            self_cache.layers.append(DynamicLayer())
            continue
        ref = like.cache.self_attention_cache.layers[i].keys
        parts = []
        for s in states:
            layer: Any = s.cache.self_attention_cache.layers[i]
            if s.fed:
                parts.append((layer.keys, layer.values))
            else:
                empty = ref.new_zeros((s.source.shape[0], ref.shape[1], 0, ref.shape[3]))
                parts.append((empty, empty))
        keys = torch.cat(pad_axis([k for k, _ in parts], 2, 0.0, side="left"))
        values = torch.cat(pad_axis([v for _, v in parts], 2, 0.0, side="left"))
        self_cache.layers.append(_plain_layer(keys, values))
    cross = copy.copy(states[0].cache.cross_attention_cache)
    cross.layers = [DynamicLayer() for _ in states[0].cache.cross_attention_cache.layers]
    hidden = torch.cat(pad_axis([s.encoder_hidden for s in states], 1, 0.0, side="right"))
    encoder_mask = torch.cat(pad_axis([s.encoder_mask for s in states], 1, 0, side="right"))
    sources = _joined_sources([s.source for s in states])
    if all(s.fed == t and s.mask is None for s in states):  # one step, no padding: the plain state
        return Seq2SeqState(EncoderDecoderCache(self_cache, cross), hidden, encoder_mask, t, sources)
    ones = [s.mask if s.mask is not None else s.encoder_mask.new_ones(s.source.shape[0], s.fed) for s in states]
    positions = [s.positions if s.positions is not None else s.source.new_full(s.source.shape, s.fed) for s in states]
    return Seq2SeqState(EncoderDecoderCache(self_cache, cross), hidden, encoder_mask, t, sources,
                        _joined_mask(ones, [s.fed for s in states]), torch.cat(positions))


def joinable(model: Any) -> bool:
    """Whether states of ``seq2seq_lm`` for ``model`` at different steps can be joined (refill):
    the decoder's absolute positions come from a table whose row for position p is known (BART
    and mBART: row p + 2; Marian and Pegasus: row p), so each row's can be read, or it has
    relative positions only (T5), which padding on the left does not change. Any other decoder
    (FSMT, M2M100 / NLLB, ...) is not joinable: decode it in fixed batches. Decoder-only models
    always can (:func:`causal_lm`)."""
    if not model.config.is_encoder_decoder:
        return True
    return _position_table(model) is not None or _relative_positions(model)


_TABLE_OFFSETS = {"BartLearnedPositionalEmbedding": 2, "MBartLearnedPositionalEmbedding": 2,
                  "MarianSinusoidalPositionalEmbedding": 0, "PegasusSinusoidalPositionalEmbedding": 0}
"""Position tables whose row for decoder position p is row ``p + offset`` (their forward reads
``position_ids + offset``; tested in tests/test_hf_refill.py)."""


def _position_table(model: Any) -> tuple[torch.nn.Embedding, int] | None:
    """The decoder's position table and its offset, when it is one of :data:`_TABLE_OFFSETS`."""
    table = getattr(model.get_decoder(), "embed_positions", None)
    offset = _TABLE_OFFSETS.get(type(table).__name__)
    if not isinstance(table, torch.nn.Embedding) or offset is None:
        return None
    return table, offset


def _relative_positions(model: Any) -> bool:
    return getattr(model.get_decoder(), "embed_positions", None) is None and \
        getattr(model.config, "relative_attention_num_buckets", None) is not None


_MASK_READY_TYPES = frozenset({"gpt2", "llama", "qwen2", "qwen3", "bart", "mbart", "marian", "pegasus"})
"""Model types whose forward takes a 4-D attention mask as it is (``masking_utils`` returns a 4-D
mask untouched) and applies it in every attention layer alike: the step passes them the boolean
``[k, 1, 1, t+1]`` mask that ``sdpa_mask`` would build for one query token, which skips the
model's own mask construction at every step (about 6% of a step of a small model on the CPU).
Each type is tested against the same search with the model's own mask (tests/test_hf_models.py,
tests/test_hf_refill.py); GPT-2, Llama, Qwen2, Qwen3, BART and Marian also against ``generate``."""


def _mask_ready(model: Any, cache: DynamicCache) -> bool:
    """Whether the steps may pass a ready 4-D boolean mask (:data:`_MASK_READY_TYPES`): the model
    is on the CPU and uses sdpa attention, and every layer of its (self-attention) cache is full
    attention (a sliding-window layer needs the model's own windowed mask). On an accelerator
    the model's own mask is kept: with no padding it passes sdpa none, which lets a GPU take its
    fastest (flash) kernel, where any mask, even all True, rules it out."""
    cfg = model.config
    return (cfg.model_type in _MASK_READY_TYPES and getattr(cfg, "_attn_implementation", None) == "sdpa"
            and next(model.parameters()).device.type == "cpu"
            and all(isinstance(layer, (_DeferredLayer, _PromptLayer)) for layer in cache.layers))


def _as_4d(mask: torch.Tensor) -> torch.Tensor:
    """int64 ``[k, L]`` (1 on tokens) -> bool ``[k, 1, 1, L]``: for one query token, the mask
    ``sdpa_mask`` builds (True: attended)."""
    return mask[:, None, None, :].bool()


class _RowPositions:
    """While in use, the decoder's position table gives each row its own position (``positions``
    ``[k]``): a forward hook replaces the table's output (one position for all rows, from the
    cache length) by the rows of the table at ``positions + offset`` (BART's table is offset by 2)."""

    def __init__(self, table: tuple[torch.nn.Embedding, int] | None, positions: torch.Tensor) -> None:
        self.table, self.positions = table, positions  # the table and offset of _position_table, or None
        self.handle: Any = None

    def __enter__(self) -> None:
        if self.table is not None:
            table, offset = self.table
            rows = self.positions[:, None] + offset  # --> [k, 1]
            self.handle = table.register_forward_hook(
                lambda module, args, out: torch.nn.functional.embedding(rows, module.weight).to(out.dtype))

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            self.handle.remove()


def _reorder_in_place(cache: DynamicCache, idx: torch.Tensor, same_inputs: bool = False) -> None:
    """Every layer's keys and values replaced by their rows ``idx`` (``index_select``); a layer
    that keeps the prompt in place gathers only its generated columns when ``same_inputs``.
    (Writing only the rows whose parent is another row, with ``index_copy_``, measured slower
    here: most rows move, and it is three operations where this is one.)"""
    for layer in cache.layers:
        layer_: Any = _with_keys(layer)
        if isinstance(layer_, _PromptLayer):
            layer_.take(idx, same_inputs)
            continue
        if isinstance(layer_, _DeferredLayer):
            layer_.take(idx)
            continue
        if layer_.keys is not None and layer_.keys.dim() > 0:
            layer_.keys = layer_.keys.index_select(0, idx)
            layer_.values = layer_.values.index_select(0, idx)


# ---- inputs ------------------------------------------------------------------------------------


def _rows(inputs: Any, attention_mask: Any, tokenizer: Any, name: str) -> list[list[int]]:
    """Each input's token ids (padding removed); refuses an empty batch and an empty input,
    naming ``name``. ``inputs``: token-id lists, strings (with ``tokenizer``), or a 2-D tensor
    ``[N, P]`` with its ``attention_mask`` ``[N, P]`` (left or right padding)."""
    if isinstance(inputs, torch.Tensor):
        return _unpadded(inputs, attention_mask, name)
    if attention_mask is not None:
        raise ValueError(f"attention_mask is only taken with a 2-D tensor of {name}; got {name} of type "
                         f"{type(inputs).__name__}")
    if isinstance(inputs, str) or len(inputs) == 0:
        raise ValueError(f"{name} must hold at least one input (a list of token-id lists or strings, or a "
                         f"2-D tensor); got {inputs!r:.80}")
    if isinstance(inputs[0], str):
        if tokenizer is None:
            raise ValueError(f"{name} are strings: pass the model's tokenizer")
        rows = [list(tokenizer(text)["input_ids"]) for text in inputs]
    else:
        rows = [check.token_list(f"{name}[{i}]", p, allow_empty=True) for i, p in enumerate(inputs)]
    empty = [i for i, r in enumerate(rows) if not r]
    if empty:
        raise ValueError(f"{name}[{empty[0]}] is empty: every input needs at least one token")
    return rows


def _in_vocab(model: Any, rows: list[list[int]], name: str) -> None:
    """Refuse an id outside the model's embedding table ``[0, V)`` before the model runs (torch
    would raise an IndexError from inside the forward), naming ``name[i][j]``, the value and V."""
    vocab = model.get_input_embeddings().num_embeddings
    flat = np.fromiter((t for r in rows for t in r), np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= vocab))
    if bad.size:
        at = int(bad[0])
        ends = np.cumsum([len(r) for r in rows])
        i = int(np.searchsorted(ends, at, side="right"))
        j = at - (int(ends[i - 1]) if i else 0)
        raise ValueError(f"{name}[{i}][{j}] must be in [0, V) with V={vocab} (the model's embeddings); "
                         f"got {int(flat[at])}")


def _unpadded(ids: torch.Tensor, attention_mask: Any, name: str) -> list[list[int]]:
    """The token lists of a padded ``[N, P]`` tensor: where ``attention_mask`` is 1 (all of it
    without a mask). Each mask row must be one block of ones at the left or at the right end."""
    if ids.dim() != 2 or ids.shape[0] == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} as a tensor must be 2-D [N, P] integer token ids with N >= 1; got dtype "
                         f"{ids.dtype} and shape {tuple(ids.shape)}")
    if attention_mask is None:
        mask = torch.ones_like(ids, dtype=torch.bool)
    else:
        mask = torch.as_tensor(attention_mask)
        if tuple(mask.shape) != tuple(ids.shape) or not ((mask == 0) | (mask == 1)).all():
            raise ValueError(f"attention_mask must be 0/1 of the shape of {name} {tuple(ids.shape)}; got shape "
                             f"{tuple(mask.shape)}")
        mask = mask.to(device=ids.device, dtype=torch.bool)
        step = mask.long().diff(dim=1)  # --> [N, P-1]: +1 where a left padding ends, -1 where a right one starts
        padded_once = (step >= 0).all(dim=1) | (step <= 0).all(dim=1)
        if not padded_once.all():
            row = int((~padded_once).nonzero()[0, 0])
            raise ValueError(f"attention_mask[{row}] must be left or right padding (one block of ones); got "
                             f"{mask[row].long().tolist()}")
    if (ids[mask] < 0).any():
        raise ValueError(f"{name} holds a negative token id where attention_mask is 1")
    rows = [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]  # once per input, at entry
    empty = [i for i, r in enumerate(rows) if not r]
    if empty:
        raise ValueError(f"{name}[{empty[0]}] is empty (its attention_mask is all 0): every input needs at "
                         "least one token")
    return rows


def _in_eval_mode(model: Any) -> None:
    """A model left in training mode (dropout on) decodes differently on every call: say so."""
    if getattr(model, "training", False):
        warnings.warn("the model is in training mode (dropout is on), so decoding is not deterministic: "
                      "call model.eval() first", stacklevel=3)


def position_limit(model: Any) -> int | None:
    """The most positions the model takes: ``n_positions`` or ``max_position_embeddings`` of its
    (text) config, None when it has neither (T5's relative positions). A sliding window is not a
    limit: a sliding-window model (Mistral) is limited by its ``max_position_embeddings`` alone."""
    cfg = model.config.get_text_config()
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(cfg, name, None)
        if isinstance(value, int):
            return value
    return None


def _check_positions(model: Any, longest: int, name: str, new_tokens: int | None, *, decoder_start: bool) -> None:
    """A clear error, before the model runs, when an input or the positions the search will feed
    exceed the model's limit. A causal LM is fed the prompt and then every generated token but
    the last: ``len + max_new_tokens - 1`` positions; an encoder-decoder's encoder takes the
    source and its decoder the start token and ``max_new_tokens - 1`` tokens."""
    limit = position_limit(model)
    if limit is None:
        return
    if longest > limit:
        raise ValueError(f"{name}: an input of {longest} tokens is longer than the model's {limit} positions "
                         "(config n_positions / max_position_embeddings)")
    if new_tokens is None:
        return
    fed = new_tokens if decoder_start else longest + new_tokens - 1
    if fed > limit:
        raise ValueError(f"max_new_tokens={new_tokens} needs {fed} positions "
                         f"({'the decoder start and ' if decoder_start else f'a prompt of {longest} and '}"
                         f"{new_tokens - 1} generated tokens fed back), more than the model's {limit}")


def _left_padded(rows: list[list[int]], pad: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ids int64 ``[N, P]`` padded on the left, mask int64 ``[N, P]`` (1 on real tokens)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask


def _right_padded(rows: list[list[int]], pad: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ids int64 ``[N, S]`` padded on the right, mask int64 ``[N, S]`` (1 on real tokens)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    return ids, mask


def _eos(model: Any, eos_token_id: Any) -> tuple[int | list[int], bool]:
    """(the eos id or ids to search with, whether the adapter adds a never-produced eos column).

    ``"model"`` reads the generation config, whose ``eos_token_id`` may be one id or a list of
    them: every id in the list is kept (any of them finishes a hypothesis, as in ``generate``)."""
    if isinstance(eos_token_id, str) and eos_token_id == "model":
        eos_token_id = model.generation_config.eos_token_id
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.tolist()
    if eos_token_id is None or (isinstance(eos_token_id, (list, tuple)) and len(eos_token_id) == 0):
        return int(model.config.get_text_config().vocab_size), True
    check.eos_ids("eos_token_id", eos_token_id)  # the search's own check: ints >= 0, named
    return check.ids_as_given(eos_token_id), False


def _pad_id(model: Any, pad_token_id: int | None) -> int:
    if pad_token_id is not None:
        return check.token("pad_token_id", pad_token_id)
    pad = model.generation_config.pad_token_id
    return int(pad) if isinstance(pad, int) else 0


def _unconsumed(cache: Any, columns: int) -> None:
    """Refuse a search from a :class:`Prepared` state that an earlier search has used: the model
    extended its cache in place (it holds more than the ``columns`` the state starts from)."""
    if cache.get_seq_length() != columns:
        raise ValueError("this Prepared was used by a search already: the model extended its KV cache in place, "
                         "so it cannot start another; prepare the inputs again (hf.causal_lm / hf.seq2seq_lm)")


def _timed(prepared: Prepared, model: Any, **inputs: Any) -> Any:
    start = time.perf_counter()
    out = model(**inputs, use_cache=True, return_dict=True)
    prepared.forward_seconds += time.perf_counter() - start
    prepared.forward_calls += 1
    return out


def _cache_keyword(model: Any) -> str:
    """The forward's name for the KV cache argument: ``cache`` (transformers >= 5.24; the old
    ``past_key_values`` is deprecated there), else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out: Any) -> Any:
    """The model output's KV cache (``cache`` in newer releases, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return out.past_key_values if cache is None else cache


def _logits(out: Any, extra_column: bool) -> torch.Tensor:
    logits = out.logits[:, -1, :].to(dtype=torch.float32)  # --> [k, V], as generate scores them
    if extra_column:  # an eos the model never produces: one -inf column at index V
        logits = torch.cat([logits, logits.new_full((logits.shape[0], 1), float("-inf"))], dim=1)
    return logits


# ---- the two adapters ----------------------------------------------------------------------------


_CAPACITY = 64  # generated-token columns allocated at once when max_new_tokens is not given


def _keeps_prompt(width: int, room: int) -> bool:
    """Whether a prefill of ``width`` prompt columns, with ``room`` generated columns to come,
    keeps the prompt in place (:func:`_adapter_cache`): when the prompt is at least the generated
    part (either way the results are the same)."""
    return width >= room


def _adapter_cache(model: Any, layer: Callable[[], DynamicLayer]) -> DynamicCache:
    """A ``DynamicCache`` for ``model`` whose full-attention layers (exactly ``DynamicLayer``)
    are ``layer()`` (sliding-window and other layers stay the model's own):

    - :class:`_PromptLayer` when the prompt columns are at least the generated ones
      (:func:`_keeps_prompt`): gathering only the generated columns at each reorder, and writing
      each step's column in place, saves more than the strided reads cost (with short prompts it
      measured slower);
    - :class:`_DeferredLayer` otherwise: each reorder is gathered into the next step's write."""
    cache = DynamicCache(config=model.config)
    cache.layers = [layer() if type(existing) is DynamicLayer else existing for existing in cache.layers]
    return cache


@_inference
def causal_lm(model: Any, prompts: Any, *, attention_mask: Any = None, tokenizer: Any = None,
              pad_token_id: int | None = None, eos_token_id: Any = "model",
              max_new_tokens: int | None = None) -> Prepared:
    """Prepare a decoder-only ``transformers`` model (GPT-2, Llama, Qwen, Mistral, ...) for the search.

    Args:
        model: a causal LM, in eval mode.
        prompts: N token-id lists (or strings, with ``tokenizer``) of different lengths, each
            >= 1 token; or a 2-D tensor ``[N, P]`` of token ids padded on the left or the right,
            with its ``attention_mask`` ``[N, P]`` (1 on tokens, 0 on padding).
        attention_mask: only with a tensor of prompts; None means every position is a token.
        pad_token_id: fills the left padding (default: the model's, or 0); masked out.
        eos_token_id: ``"model"`` (the model's generation config: one id or all of its list), an
            id, a list of ids, or None for a search that never finishes a hypothesis (eos becomes
            an extra, always masked, column V).
        max_new_tokens: the search's ``max_steps``, when known: the mask and positions are
            allocated for exactly that many tokens, and a prompt plus that many tokens beyond the
            model's positions is refused before the model runs (without it they grow by 64
            columns at a time, and a step past the limit is refused when it comes).

    Returns:
        A :class:`Prepared`; pass ``prepared.prompts`` as ``prompts``.

    Raises:
        ValueError: an empty batch or prompt, a malformed tensor or mask, a prompt longer than the
            model's ``n_positions`` / ``max_position_embeddings``. TypeError: a non-integer id.
    """
    rows = _rows(prompts, attention_mask, tokenizer, "prompts")
    _in_vocab(model, rows, "prompts")
    _in_eval_mode(model)
    pad = _pad_id(model, pad_token_id)
    eos, extra = _eos(model, eos_token_id)
    capacity = _CAPACITY if max_new_tokens is None else check.at_least("max_new_tokens", max_new_tokens, 1)
    longest, limit = max(len(r) for r in rows), position_limit(model)
    _check_positions(model, longest, "prompts", max_new_tokens, decoder_start=False)
    device = next(model.parameters()).device
    ids, mask = _left_padded(rows, pad, device)
    prepared = Prepared(None, None, rows, eos)
    lengths = mask.sum(dim=1, keepdim=True)  # --> [N, 1]
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # --> [N, P]
    cache_kw = _cache_keyword(model)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    width = ids.shape[1]
    layer: Callable[[], DynamicLayer] = (lambda: _PromptLayer(capacity)) if _keeps_prompt(width, capacity) \
        else _DeferredLayer
    cache = _adapter_cache(model, layer)
    # only the last position's logits are needed: [N, 1, V], not [N, P, V] (as generate does)
    out = _timed(prepared, model, input_ids=ids, attention_mask=mask, position_ids=positions, **keep,
                 **{cache_kw: cache})
    full = torch.cat([mask, mask.new_ones(len(rows), capacity)], dim=1)  # --> [N, P + C]
    prepared.init_state = CausalState(_cache_of(out), full, lengths[:, 0], width, longest, _logits(out, extra), None,
                                      torch.arange(len(rows), device=device))
    ready = _mask_ready(model, cache)  # the steps pass the 4-D mask itself

    @_inference
    def step(state: CausalState, y_prev: torch.Tensor) -> tuple[torch.Tensor, CausalState]:
        if state.first is not None and state.pending is None:  # every row's prompt was scored by the prefill
            _unconsumed(state.cache, state.columns)
            return state.first, state._replace(first=None)
        if limit is not None and state.furthest >= limit and int(state.positions.max()) >= limit:
            raise ValueError(f"the search asks for a token at position {int(state.positions.max())}, beyond the "
                             f"model's {limit} positions: lower max_steps")
        t = state.columns
        if t == state.mask.shape[1]:  # out of allocated columns (no max_new_tokens): grow once per C
            state = state._replace(mask=torch.cat([state.mask, state.mask.new_ones(len(y_prev), _CAPACITY)], dim=1))
        mask, fed = state.mask, torch.ones_like(state.positions)
        if state.pending is not None:
            # rows that joined at this call take their prefill logits; their token here is a dummy,
            # masked out (column t is 0 for them from now on) and at no position
            mask = mask.clone()
            mask[:, t] = (~state.pending).to(mask.dtype)
            fed = fed.masked_fill(state.pending, 0)
        attend = _as_4d(mask[:, : t + 1]) if ready else mask[:, : t + 1]
        out = _timed(prepared, model, input_ids=y_prev[:, None], attention_mask=attend,
                     position_ids=state.positions[:, None], **{cache_kw: state.cache})
        logits = _logits(out, extra)
        if state.pending is not None:
            logits = torch.where(state.pending[:, None], state.first, logits)
        return logits, CausalState(_cache_of(out), mask, state.positions + fed, t + 1, state.furthest + 1, None,
                                   None, state.source)

    prepared.step = step
    return prepared


@_inference
def seq2seq_lm(model: Any, sources: Any, *, attention_mask: Any = None, tokenizer: Any = None,
               pad_token_id: int | None = None, eos_token_id: Any = "model",
               decoder_start_token_id: int | None = None, max_new_tokens: int | None = None) -> Prepared:
    """Prepare an encoder-decoder ``transformers`` model (BART, T5, Marian, ...) for the search.

    The encoder runs once here, one row per source; each step feeds one decoder token per row.
    ``sources`` and the other arguments as for :func:`causal_lm` (a source tensor ``[N, S]`` may
    be padded on either side); ``decoder_start_token_id`` defaults to the model's.
    """
    rows = _rows(sources, attention_mask, tokenizer, "sources")
    _in_vocab(model, rows, "sources")
    _in_eval_mode(model)
    pad = _pad_id(model, pad_token_id)
    eos, extra = _eos(model, eos_token_id)
    start = decoder_start_token_id
    if start is None:
        start = model.generation_config.decoder_start_token_id
    if start is None:
        raise ValueError("decoder_start_token_id is None: pass it, or set it in the model's generation config")
    start = check.token("decoder_start_token_id", start)
    if max_new_tokens is not None:
        check.at_least("max_new_tokens", max_new_tokens, 1)
    limit = position_limit(model)
    _check_positions(model, max(len(r) for r in rows), "sources", max_new_tokens, decoder_start=True)
    device = next(model.parameters()).device
    ids, mask = _right_padded(rows, pad, device)
    prepared = Prepared(None, None, [[start] for _ in rows], eos)
    t0 = time.perf_counter()
    hidden = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
    prepared.forward_seconds += time.perf_counter() - t0
    prepared.forward_calls += 1
    cache = EncoderDecoderCache(_adapter_cache(model, _DeferredLayer), DynamicCache(config=model.config))
    cache_kw = _cache_keyword(model)
    prepared.init_state = Seq2SeqState(cache, hidden, mask, 0, torch.arange(len(rows), device=device))
    can_join, table = joinable(model), _position_table(model)  # what a joined state needs, once
    ready = _mask_ready(model, cache.self_attention_cache)  # the steps pass 4-D masks themselves
    every = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)  # no padding: every column attended
    wrapped: list[BaseModelOutput] = []

    def encoded(hidden: torch.Tensor) -> BaseModelOutput:
        """The encoder output as the model's forward takes it, made once per tensor (the model
        would wrap a bare tensor at every step)."""
        if not wrapped or wrapped[0].last_hidden_state is not hidden:
            wrapped[:] = [BaseModelOutput(last_hidden_state=hidden)]
        return wrapped[0]

    @_inference
    def step(state: Seq2SeqState, y_prev: torch.Tensor) -> tuple[torch.Tensor, Seq2SeqState]:
        if limit is not None and state.fed >= limit and (state.positions is None or int(state.positions.max()) >= limit):
            at = state.fed if state.positions is None else int(state.positions.max())
            raise ValueError(f"the search asks for a decoder token at position {at}, beyond the model's "
                             f"{limit} positions: lower max_steps")
        encoder_mask = _as_4d(state.encoder_mask) if ready else state.encoder_mask
        if state.fed == 0:
            _unconsumed(state.cache, 0)
        if state.mask is None or state.positions is None:  # every row has fed the same tokens
            own = {"decoder_attention_mask": every.expand(len(y_prev), 1, 1, state.fed + 1)} if ready else {}
            out = _timed(prepared, model, encoder_outputs=encoded(state.encoder_hidden), attention_mask=encoder_mask,
                         decoder_input_ids=y_prev[:, None], **own, **{cache_kw: state.cache})
            return _logits(out, extra), state._replace(cache=_cache_of(out), fed=state.fed + 1)
        if not can_join:
            raise TypeError(f"rows of {type(model).__name__} at different steps cannot share a call: its decoder "
                            "positions cannot be given per row (decode it in fixed batches)")
        t, mask = state.fed, state.mask
        if t == mask.shape[1]:  # out of allocated columns: grow once per C
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], _CAPACITY)], dim=1)
        with _RowPositions(table, state.positions):
            attend = _as_4d(mask[:, : t + 1]) if ready else mask[:, : t + 1]
            out = _timed(prepared, model, encoder_outputs=encoded(state.encoder_hidden), attention_mask=encoder_mask,
                         decoder_input_ids=y_prev[:, None], decoder_attention_mask=attend,
                         **{cache_kw: state.cache})
        return _logits(out, extra), state._replace(cache=_cache_of(out), fed=t + 1, mask=mask,
                                                   positions=state.positions + 1)

    prepared.step = step
    return prepared


# ---- generate(): a model and its generation config ------------------------------------------------


@dataclass(frozen=True)
class _ForcedTokens:
    """``generate``'s ForcedBOS / ForcedEOS processors: at step ``at[i]`` of input i, every token
    but ``token_ids`` becomes -inf (after log_softmax a single forced id has logprob 0, the 0
    ``generate`` gives it).

    Attributes:
        token_ids: int64 ``[E]``, the forced id (or every eos id).
        at: int64 ``[N]``, the step at which each input's rows are forced.
    """

    token_ids: np.ndarray
    at: np.ndarray
    needs_history = False

    @property
    def last_step(self) -> int:
        return int(self.at.max())

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        rows = np.flatnonzero(self.at[ctx.row_input] == ctx.step)
        if rows.size == 0:
            return logits
        return ctx.backend.keep_only(logits, np.repeat(rows, self.token_ids.size), np.tile(self.token_ids, rows.size))


@dataclass
class Generation:
    """What :func:`generate` returns.

    Attributes:
        hypotheses: per input, up to ``num_return_sequences`` :class:`beamsearch.Hypothesis`
            (new tokens only, eos included iff finished), best first.
        texts: per input, each hypothesis's tokens decoded by the tokenizer (special tokens
            skipped), or None when no tokenizer was given.
        settings: the search the generation config was mapped to: ``beam_search_batch``'s
            keywords (``beam_size``, ``n_best``, ``max_steps`` (one per input), ``alpha``,
            ``length_penalty``, ``eos_token_id``, ``min_new_tokens``, ``no_repeat_ngram_size``,
            ``logits_processors``, ``stop_sequences``); ``beam_size == 1`` is greedy decoding.
    """

    hypotheses: BatchResults
    texts: list[list[str]] | None
    settings: dict[str, Any]


# settings of a GenerationConfig that this adapter cannot honour: set away from their default,
# they are a ValueError naming them
_UNSUPPORTED = ("num_beam_groups", "diversity_penalty", "constraints", "force_words_ids", "penalty_alpha",
                "guidance_scale", "encoder_no_repeat_ngram_size", "encoder_repetition_penalty",
                "exponential_decay_length_penalty", "max_time", "remove_invalid_values", "watermarking_config",
                "prompt_lookup_num_tokens", "assistant_early_exit", "dola_layers", "token_healing")
# sampling settings: generate uses them only with do_sample=True, and so (never) do we
_SAMPLING = ("temperature", "top_k", "top_p", "typical_p", "min_p", "epsilon_cutoff", "eta_cutoff")


def _config(model: Any, generation_config: Any, overrides: dict[str, Any]) -> GenerationConfig:
    """The settings ``model.generate`` would use, resolved in its order: ``generation_config``
    (default: an empty one), its unset fields from the model's generation config, then the
    library's defaults, then ``overrides``; an override that is not a generation setting is a
    TypeError naming it."""
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        raise TypeError(f"generation_config must be a transformers.GenerationConfig; got "
                        f"{type(generation_config).__name__}")
    cfg = copy.deepcopy(generation_config if generation_config is not None else GenerationConfig())
    cfg.update(**model.generation_config.to_dict(), defaults_only=True, allow_custom_entries=True)
    cfg.update(**_defaults(), defaults_only=True)
    unknown = cfg.update(**overrides)
    if unknown:
        raise TypeError(f"generate() got settings that are not GenerationConfig fields: {sorted(unknown)}")
    return cfg


def _default_length(model: Any, generation_config: Any, overrides: dict[str, Any]) -> bool:
    """Whether no ``max_length`` is set by the call, its config or the model's: then ``generate``
    (transformers 5) makes the library's ``max_length=20`` count new tokens only (capped at the
    model's ``max_position_embeddings``), not the prompt."""
    return (overrides.get("max_length") is None
            and (generation_config is None or generation_config.max_length is None)
            and model.generation_config.max_length is None)


def _defaults() -> dict[str, Any]:
    """The library's default generation settings (what ``generate`` fills unset fields with)."""
    return GenerationConfig()._get_default_generation_params()


def _refuse_unsupported(cfg: GenerationConfig) -> None:
    default = _defaults()
    unsupported = {name: getattr(cfg, name, None) for name in _UNSUPPORTED
                   if getattr(cfg, name, None) != default.get(name)}
    if unsupported:
        raise ValueError(f"these generation settings are not supported by beamsearch.hf.generate: {unsupported}")
    if cfg.do_sample:
        sampled = {name: getattr(cfg, name) for name in _SAMPLING if getattr(cfg, name, None) is not None}
        warnings.warn(f"do_sample=True: beamsearch decodes deterministically (greedy or beam search), so "
                      f"do_sample and the sampling settings {sampled} are not used; pass do_sample=False to "
                      "silence this", stacklevel=3)


def _lengths(cfg: GenerationConfig, rows: list[list[int]], encoder_decoder: bool,
             default_new: int | None = None) -> tuple[list[int], int]:
    """(max_steps per input, min_new_tokens). ``max_new_tokens`` wins over ``max_length``, which
    counts the prompt (a causal LM's, per input; an encoder-decoder's decoder start token).
    ``default_new``: the new tokens of every input when no ``max_length`` was set (see
    :func:`_default_length`)."""
    base = [1] * len(rows) if encoder_decoder else [len(r) for r in rows]
    if cfg.max_new_tokens is not None:
        steps = [check.at_least("max_new_tokens", cfg.max_new_tokens, 1)] * len(rows)
    elif default_new is not None:
        if default_new < 1:
            raise ValueError("the prompts fill the model's max_position_embeddings: no new token fits; "
                             "set max_new_tokens")
        steps = [default_new] * len(rows)
    else:
        steps = [check.integer("max_length", cfg.max_length) - b for b in base]
        short = [i for i, s in enumerate(steps) if s < 1]
        if short:
            raise ValueError(f"max_length={cfg.max_length} leaves no new token for inputs[{short[0]}] "
                             f"({base[short[0]]} tokens already): set max_new_tokens")
    m = check.at_least("min_new_tokens", cfg.min_new_tokens or 0, 0)
    if cfg.min_length:
        if len(set(base)) > 1:
            raise ValueError(f"min_length={cfg.min_length} counts the prompt, and the prompts differ in length "
                             "(generate would count the padding): set min_new_tokens instead")
        m = max(m, check.integer("min_length", cfg.min_length) - base[0])
    return steps, m


def _processors(cfg: GenerationConfig, eos: np.ndarray | None, steps: list[int],
                encoder_decoder: bool) -> list[Any]:
    """The generation config's logits processors, in ``generate``'s order (the n-gram block and
    the min-new-tokens mask are the search's own keywords)."""
    out: list[Any] = []
    if cfg.sequence_bias is not None:
        bias = cfg.sequence_bias
        if isinstance(bias, list):  # generate's list form [[ids, bias], ...]
            bias = {tuple(ids): b for ids, b in bias}
        out.append(SequenceBias(bias))
    if cfg.repetition_penalty is not None and cfg.repetition_penalty != 1.0:
        out.append(RepetitionPenalty(cfg.repetition_penalty))
    if cfg.bad_words_ids is not None:
        # as generate does: a bad word that is a single eos id is dropped
        words = [w for w in cfg.bad_words_ids if eos is None or not (len(w) == 1 and w[0] in eos)]
        if words:
            out.append(BadWords(words))
    n = len(steps)
    if cfg.forced_bos_token_id is not None:
        if not encoder_decoder:
            raise ValueError("forced_bos_token_id is set: generate forces it only where the decoder input is one "
                             "token (encoder-decoders); unset it for a decoder-only model")
        ids = np.array([check.token("forced_bos_token_id", cfg.forced_bos_token_id)])
        out.append(_ForcedTokens(ids, np.ones(n, np.int64)))
    if cfg.forced_eos_token_id is not None:
        forced = cfg.forced_eos_token_id
        out.append(_ForcedTokens(check.eos_ids("forced_eos_token_id", forced), np.asarray(steps, np.int64)))
    if cfg.suppress_tokens:
        out.append(SuppressTokens(list(cfg.suppress_tokens)))
    if cfg.begin_suppress_tokens:
        if cfg.forced_bos_token_id is not None:
            raise ValueError("begin_suppress_tokens with forced_bos_token_id (suppression at the second token) is "
                             "not supported")
        out.append(SuppressTokens(list(cfg.begin_suppress_tokens), first_steps=1))
    return out


def _stop_sequences(cfg: GenerationConfig, tokenizer: Any) -> list[list[int]]:
    """``stop_strings`` as token sequences: each string as the tokenizer encodes it alone."""
    strings = cfg.stop_strings
    if not strings:
        return []
    if tokenizer is None:
        raise ValueError(f"stop_strings={strings!r} needs the tokenizer: pass tokenizer=")
    if isinstance(strings, str):
        strings = [strings]
    return [list(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in strings]


def _settings(model: Any, cfg: GenerationConfig, rows: list[list[int]], tokenizer: Any,
              default_length: bool = False) -> dict[str, Any]:
    """The search a generation config asks for (see :attr:`Generation.settings`), checked before
    the model runs. ``default_length``: no ``max_length`` was set (:func:`_default_length`), so
    ``max_length`` counts new tokens only, as ``generate`` counts them: every input gets
    ``min(max_length + P, max_position_embeddings) - P`` with ``P`` the padded prompt width (1,
    the decoder start token, for an encoder-decoder)."""
    _refuse_unsupported(cfg)
    encoder_decoder = bool(model.config.is_encoder_decoder)
    eos, extra = _eos(model, cfg.eos_token_id)
    eos_ids = None if extra else check.eos_ids("eos_token_id", eos)
    common = search_settings(cfg)
    beams, n_best = common["beam_size"], common["n_best"]
    if n_best > beams:
        raise ValueError(f"num_return_sequences={n_best} must be at most num_beams={beams}")
    if beams == 1:
        common["alpha"] = 0.0
    new = None
    if default_length and cfg.max_new_tokens is None:
        width = 1 if encoder_decoder else max((len(r) for r in rows), default=0)
        limit = getattr(model.config, "max_position_embeddings", None)  # as generate reads it
        total = cfg.max_length + width
        new = (total if limit is None else min(total, limit)) - width
    steps, m = _lengths(cfg, rows, encoder_decoder, new)
    del common["max_new_tokens"]
    return {**common, "max_steps": steps, "eos_token_id": eos, "min_new_tokens": m,
            "logits_processors": _processors(cfg, eos_ids, steps, encoder_decoder),
            "stop_sequences": _stop_sequences(cfg, tokenizer)}


def search_settings(generation_config: GenerationConfig) -> dict[str, Any]:
    """The search a ``GenerationConfig`` asks for (its unset fields at ``generate``'s defaults),
    in the settings that are the same for every input: the one mapping from ``generate``'s
    settings to the search's keywords, which :func:`generate` builds on and ``beamsearch decode
    --model hf:DIR`` takes its defaults from.

    Returns:
        ``{"beam_size": num_beams, "n_best": num_return_sequences (1 when unset),
        "length_penalty": "power", "alpha": length_penalty, "no_repeat_ngram_size": (0 when
        unset), "min_new_tokens": (0 when unset), "max_new_tokens": int or None (unset)}``.
        With ``beam_size`` 1, ``generate`` decodes greedily, without a length penalty: decode
        with :func:`beamsearch.modes.beam.greedy_plan` and ``alpha=0.0`` then (a beam of one is
        not greedy decoding: it may return a finished candidate that is not its row's best).

    Raises:
        ValueError / TypeError: a setting out of range, named with its value (a negative
            ``length_penalty``, ``num_beams=0``, ...).
    """
    cfg = copy.deepcopy(generation_config)
    cfg.update(**_defaults(), defaults_only=True)  # its unset fields: generate's defaults
    beams = check.at_least("num_beams", cfg.num_beams, 1)
    alpha = check.real("length_penalty", cfg.length_penalty, finite=True)
    if alpha < 0:
        raise ValueError(f"length_penalty={alpha}: a negative length penalty (favouring short outputs) is not "
                         "supported")
    new = None if cfg.max_new_tokens is None else check.at_least("max_new_tokens", cfg.max_new_tokens, 1)
    return {"beam_size": beams, "n_best": check.at_least("num_return_sequences", cfg.num_return_sequences or 1, 1),
            "length_penalty": "power", "alpha": alpha,
            "no_repeat_ngram_size": check.at_least("no_repeat_ngram_size", cfg.no_repeat_ngram_size or 0, 0),
            "min_new_tokens": check.at_least("min_new_tokens", cfg.min_new_tokens or 0, 0), "max_new_tokens": new}


# the settings search_settings maps (each shared control's hf name), and those of a generation config that
# change no search
SEARCH_SETTINGS = tuple(c.hf for _, c in controls_of(DecodingConfig).values() if c.hf)
_NOT_SEARCH = ("bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id", "transformers_version",
               "_from_model_config", "use_cache", "cache_implementation", "return_dict_in_generate",
               "output_attentions", "output_hidden_states", "output_scores", "output_logits", "early_stopping")


def other_settings(generation_config: GenerationConfig) -> dict[str, Any]:
    """The settings ``generation_config`` sets away from ``transformers``' defaults that
    :func:`search_settings` does not map and that change a search (``max_length``,
    ``repetition_penalty``, ``forced_eos_token_id``, ``do_sample``, ...): what ``beamsearch decode
    --model hf:DIR`` names on stderr as not applied. Token ids and output flags are not listed;
    nor is ``early_stopping`` (the search's early stop is exact)."""
    return {k: v for k, v in sorted(generation_config.to_diff_dict().items())
            if k not in SEARCH_SETTINGS and k not in _NOT_SEARCH}


def saved_generation_config(directory: Any) -> GenerationConfig:
    """The generation config ``from_pretrained`` gives the model saved in ``directory``: its
    ``generation_config.json``, else the one made from its ``config.json`` (nothing is
    downloaded; the weights are not read).

    Raises:
        OSError: ``directory`` holds neither file.
    """
    from transformers import AutoConfig

    try:
        return GenerationConfig.from_pretrained(directory, local_files_only=True)
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(directory, local_files_only=True))


def _result_pad(pad_token_id: Any, eos: Any) -> int | None:
    """The pad id of :func:`generate`'s ``hypotheses.arrays()``: the generation config's (the
    call's, else the model's), else the first eos id, as ``generate`` pads; None without either."""
    if isinstance(pad_token_id, torch.Tensor):
        pad_token_id = pad_token_id.reshape(-1)[0].item()
    if pad_token_id is not None:
        return check.int64("pad_token_id", pad_token_id)
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return ids[0] if ids else None


@_inference
def generate(model: Any, inputs: Any, *, tokenizer: Any = None, generation_config: Any = None,
             attention_mask: Any = None, **overrides: Any) -> Generation:
    """Decode a batch with a ``transformers`` model under its generation config, as
    ``model.generate`` would, with beamsearch's rules (README: "Where our rules and generate's
    differ").

    The settings honoured: ``num_beams`` (1: greedy; more: :func:`beamsearch.beam_search_batch`),
    ``num_return_sequences`` (n_best), ``length_penalty`` (the power penalty
    ``logprob / len ** length_penalty``), ``max_new_tokens`` / ``max_length``,
    ``min_new_tokens`` / ``min_length``, ``eos_token_id`` (one id or several),
    ``no_repeat_ngram_size``, ``bad_words_ids``, ``repetition_penalty``, ``sequence_bias``,
    ``suppress_tokens``, ``begin_suppress_tokens``, ``forced_bos_token_id``,
    ``forced_eos_token_id``, ``stop_strings`` (with ``tokenizer``). ``early_stopping`` is
    accepted with any value: our early stop is exact (it never loses a better hypothesis), so
    every value gives what ``"never"`` aims at. Sampling settings are not used (a warning when
    ``do_sample=True``); output flags (``output_scores``, ...), ``use_cache`` and
    ``cache_implementation`` change nothing (hypotheses always carry their scores). Any other
    setting away from its default is a ValueError naming it.

    Args:
        model: a causal LM or an encoder-decoder, in eval mode.
        inputs: N strings (with ``tokenizer``), N token-id lists, or a 2-D tensor ``[N, P]`` of
            ids with its ``attention_mask`` ``[N, P]`` (padding left or right).
        tokenizer: turns strings into ids and the results back into strings; needed for
            ``stop_strings``.
        generation_config: a ``GenerationConfig``; default ``model.generation_config``.
        attention_mask: with a tensor of ``inputs`` only.
        **overrides: generation settings that replace the config's (``num_beams=4``, ...).

    Without ``max_new_tokens`` or any ``max_length`` (the call's, the config's, the model's),
    ``max_length`` is the library's 20 counted as new tokens, as transformers 5 counts it: 20 new
    tokens per input, fewer where the padded prompt plus 20 passes ``max_position_embeddings``.

    Returns:
        A :class:`Generation`: ``hypotheses[i]`` best first, and ``texts[i]`` with a tokenizer;
        ``hypotheses.arrays()`` pads with ``pad_token_id`` (the call's or the model's), else
        with the first eos id, as ``generate`` pads.

    Raises:
        ValueError / TypeError: before the model runs, naming the setting or argument at fault.
    """
    cfg = _config(model, generation_config, overrides)
    rows = _rows(inputs, attention_mask, tokenizer, "inputs")
    _in_vocab(model, rows, "inputs")
    settings = _settings(model, cfg, rows, tokenizer, _default_length(model, generation_config, overrides))
    prepare = seq2seq_lm if model.config.is_encoder_decoder else causal_lm
    eos = cfg.eos_token_id if not isinstance(cfg.eos_token_id, torch.Tensor) else cfg.eos_token_id.tolist()
    dec = prepare(model, rows, pad_token_id=cfg.pad_token_id if isinstance(cfg.pad_token_id, int) else None,
                  eos_token_id=eos, max_new_tokens=max(settings["max_steps"]))
    search = dict(settings, eos_token_id=dec.eos_token_id)
    beams = search.pop("beam_size")
    pad = _result_pad(cfg.pad_token_id, dec.eos_token_id)
    if beams == 1:  # greedy: the argmax of each step until an eos (SPEC section 4 with one row)
        search.pop("n_best")
        hypotheses = run_plan(dec.step, dec.init_state, greedy_plan(dec.prompts, pad_token_id=pad, **search))
    else:
        hypotheses = beam_search_batch(dec.step, dec.init_state, dec.prompts, beam_size=beams, early_stop=True,
                                       pad_token_id=pad, **search)
    texts = None
    if tokenizer is not None:
        texts = [[tokenizer.decode(h.tokens, skip_special_tokens=True) for h in hyps] for hyps in hypotheses]
    return Generation(hypotheses, texts, settings)
