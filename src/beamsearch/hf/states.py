"""What the adapters hand the search, and the states they step: :class:`Prepared` (the
``init_state``, ``step``, ``prompts`` and eos of one search), :class:`CausalState` and
:class:`Seq2SeqState` with their ``select_state`` (rows reordered, the cache in place) and
``concat_state`` (rows of searches at different steps joined: refill), registered when this
module is imported; and what a joined state needs to be fed: whether a model's rows can keep their
own decoder positions (:func:`joinable`, :func:`position_table`, :class:`RowPositions`) and
whether its steps may pass a ready 4-D mask (:func:`mask_ready`, :func:`as_4d`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache

from beamsearch.core.state import concat_state, pad_axis, select_state, take_state
from beamsearch.hf.caches import (
    DeferredLayer,
    PromptLayer,
    drop_leading,
    inference,
    plain_layer,
    reorder_in_place,
    settled,
)
from beamsearch.hf.recurrent import extras_of, joined_extras, joined_layer
from beamsearch.hf.shared import SharedPromptCache, joined_shared
from beamsearch.hf.static_layers import whole_static


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
    positions, so the model computes for each row what it computes for it alone. When rows only
    leave (no row is copied), a cache that holds its rows in place moves only the rows that fill
    the places of those that left, and ``order`` says where each row's cache row is: the step
    feeds the cache's rows in their order and hands the logits back in the state's."""

    cache: DynamicCache  # per layer, keys and values [k, heads, t, dh]; t = columns
    mask: torch.Tensor  # int64 [k, M], M > t: column j is 0 where cache column j is padding, 1 elsewhere
    positions: torch.Tensor  # int64 [k]: the position of the next token each row feeds
    columns: int  # t, the cache's length (every row's): the step's token goes to column t
    furthest: int  # at least positions.max() (a bound kept on the host: no device sync per step)
    first: torch.Tensor | None  # float [k, V]: logits of the prompt's last position, until used
    pending: torch.Tensor | None  # bool [k]: rows whose next logits are ``first`` (None: every row, when first is set)
    source: torch.Tensor  # int64 [k]: the input each row decodes (mask, positions, first, pending depend on it alone)
    order: torch.Tensor | None = None  # int64 [k]: the cache row of each row (None: row i is cache row i)


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
    # int64 [k, M], M >= fed: 0 on decoder cache columns that are padding (None: none are)
    mask: torch.Tensor | None = None
    positions: torch.Tensor | None = None  # int64 [k]: the decoder position of each row's next token (None: fed)


@select_state.register(CausalState)
@inference
def _select_causal_state(state: CausalState, idx: Any) -> CausalState:
    """Rows ``idx`` of the adapter's state. Its cache belongs to the one search that runs it, so
    it is reordered in place, as ``generate``'s ``reorder_cache`` does: each old key/value
    tensor is released as soon as its gathered copy exists (a whole second cache alive at once
    costs 3 to 5 times the time in fresh memory).

    When every new row decodes the input the row now at its position decodes (a beam that keeps
    its width: every step after the first until an input stops), only the cache moves: the mask,
    positions and prefill logits are the input's, and a cache that keeps the prompt in place
    gathers only its generated columns. A shared prompt cache (``share_prompt=True``) gathers
    only the rows' own columns, and its rows' inputs (``source``) are renumbered when an input's
    last row leaves (its prompt is dropped)."""
    idx = torch.as_tensor(idx, device=state.mask.device)
    source = state.source.index_select(0, idx)
    same = source.shape == state.source.shape and torch.equal(source, state.source)
    rows = idx if state.order is None else state.order.index_select(0, idx)  # --> the cache rows kept
    order = _compacted(state.cache, rows) if state.order is not None or not same else None
    if order is None:
        reorder_in_place(state.cache, rows, same and state.order is None)
    if same:
        return state._replace(order=order)
    if isinstance(state.cache, SharedPromptCache):
        source = state.cache.shared.regroup(source)
    mask, columns = drop_leading(state.cache, state.mask.index_select(0, idx), state.columns)
    return CausalState(state.cache, mask, state.positions.index_select(0, idx), columns, state.furthest,
                       None if state.first is None else state.first.index_select(0, idx),
                       None if state.pending is None else state.pending.index_select(0, idx), source, order)


def _compacted(cache: DynamicCache, rows: torch.Tensor) -> torch.Tensor | None:
    """Keep cache rows ``rows`` (int64 ``[k']``) by moving only those at ``k'`` or beyond into the
    places of the rows that leave, when every layer holds its rows in place
    (:class:`~beamsearch.hf.caches.PromptLayer`) and no row is kept twice. Returns int64 ``[k']``,
    the cache row of each kept row, or None (nothing done: the caller gathers)."""
    if isinstance(cache, SharedPromptCache) or not cache.layers or extras_of(cache) is not None or \
            not all(isinstance(layer, PromptLayer) for layer in cache.layers):
        return None
    k = rows.shape[0]
    present = torch.zeros(max(k, int(rows.max()) + 1 if k else 0), dtype=torch.bool, device=rows.device)
    present[rows] = True
    if int(present.sum()) != k:  # a row kept twice: copies are needed
        return None
    far = rows >= k
    holes = torch.nonzero(~present[:k]).flatten()  # places < k' of rows that leave, as many as rows beyond k'
    movers = rows[far]
    layers: list[Any] = cache.layers  # each a layer of ours with move_rows (reorder_in_place's callers check it)
    for layer in layers:
        layer.move_rows(holes, movers, k)
    order = rows.clone()
    order[far] = holes
    return order


@take_state.register(CausalState)
@inference
def _take_causal_state(state: CausalState, idx: Any) -> CausalState:
    """Rows ``idx`` of the adapter's state in a new state, ``state`` left as it was: the cache's
    rows gathered into new tensors (only the filled columns), the rows' masks, positions, prefill
    logits and inputs taken likewise (step search keeps the rows of segments that end)."""
    idx = torch.as_tensor(idx, device=state.mask.device)
    rows = idx if state.order is None else state.order.index_select(0, idx)
    cache = select_state(state.cache, rows)  # a DynamicCache's selection builds a new cache
    mask, columns = drop_leading(cache, state.mask.index_select(0, idx), state.columns)
    return CausalState(cache, mask, state.positions.index_select(0, idx), columns, state.furthest,
                       None if state.first is None else state.first.index_select(0, idx),
                       None if state.pending is None else state.pending.index_select(0, idx),
                       state.source.index_select(0, idx))


@concat_state.register(CausalState)
@inference
def _concat_causal_states(states: list[CausalState]) -> CausalState:
    """The rows of several states (searches at different steps) in one state: every layer's keys
    and values left-padded with zeros to the longest cache, the mask with 0 on those columns
    (and right-padded with 1, the columns of tokens to come, to the widest), positions per row as
    they were. Rows of a state whose prompt logits are unused yet keep them (``pending``)."""
    t = max(s.columns for s in states)
    shared = [isinstance(s.cache, SharedPromptCache) for s in states]
    if any(shared) and not all(shared):
        raise TypeError("concat_state: states with a shared prompt cache (share_prompt=True) and states without "
                        "one cannot be joined; prepare every cohort alike")
    static = [whole_static(s.cache) for s in states]
    if any(static) and not all(static):
        raise TypeError("concat_state: states with a static cache (cache_implementation=\"static\") and states with "
                        "a dynamic one cannot be joined; prepare every cohort alike")
    if all(shared):
        caches = [cast(SharedPromptCache, s.cache) for s in states]  # all shared: checked above
        cache: Any = joined_shared(caches, [s.mask.shape[0] for s in states], [s.columns for s in states])
        source = cache.shared.rows
    else:
        cache, source = _joined_cache(states), _joined_sources([s.source for s in states])
    mask = _joined_mask([s.mask for s in states], [s.columns for s in states])
    first = pending = None
    if any(s.first is not None for s in states):
        like = next(s.first for s in states if s.first is not None)
        first = torch.cat([like.new_zeros(s.mask.shape[0], like.shape[1]) if s.first is None else s.first
                           for s in states])
        pending = torch.cat([s.mask.new_full((s.mask.shape[0],), s.first is not None, dtype=torch.bool)
                             if s.pending is None or s.first is None else s.pending for s in states])
    return CausalState(cache, mask, torch.cat([s.positions for s in states]), t, max(s.furthest for s in states),
                       first, pending, source)


JOIN_ROOM = 16  # columns allocated for the tokens to come in a joined layer whose rows had no room of their own


def _joined_cache(states: list[CausalState]) -> DynamicCache:
    """The states' caches in one: every layer's keys and values (each state's rows in its own
    order) left-padded with zeros to the longest and stacked; a full-attention layer into a
    :class:`~beamsearch.hf.caches.PromptLayer` with room for the tokens to come; other kinds
    of layer, and the row tensors a cache holds beside them, joined by their rules
    (:mod:`beamsearch.hf.recurrent`)."""
    for s in states:
        settled(s.cache)
    cache = copy.copy(states[0].cache)
    cache.layers = []
    t = max(s.columns for s in states)
    for i, layer in enumerate(states[0].cache.layers):
        other = joined_layer([_layer(s, i) for s in states], [s.order for s in states], t)
        if other is not None:  # a layer holding more than (or no) keys and values
            cache.layers.append(other)
            continue
        parts = [(_layer(s, i).keys, _layer(s, i).values) if s.order is None else
                 (_layer(s, i).keys.index_select(0, s.order), _layer(s, i).values.index_select(0, s.order))
                 for s in states]
        if isinstance(layer, (PromptLayer, DeferredLayer)) or type(layer) is DynamicLayer:
            cache.layers.append(PromptLayer.joined(parts, layer.room if isinstance(layer, PromptLayer) else JOIN_ROOM))
            continue
        new: Any = copy.copy(layer)  # a layer of keys and values (the others were joined above)
        new.keys = torch.cat(pad_axis([k for k, _ in parts], 2, 0.0, side="left"))
        new.values = torch.cat(pad_axis([v for _, v in parts], 2, 0.0, side="left"))
        if hasattr(new, "cumulative_length"):  # a sliding window's count of the tokens seen: the joined columns
            new.cumulative_length = t
        cache.layers.append(new)
    joined_extras(cache, [s.cache for s in states], t)  # no order: a cache with extras keeps none (_compacted)
    return cache


def _joined_mask(masks: list[torch.Tensor], columns: list[int]) -> torch.Tensor:
    """Masks ``[n_i, M_i]`` of states with ``columns[i]`` cache columns, as one ``[sum n_i, M]``:
    each left-padded with 0 to the most columns (their caches are left-padded so), then
    right-padded with 1 (the columns of tokens to come) to the widest."""
    t = max(columns)
    masks = [torch.cat([m.new_zeros(m.shape[0], t - c), m], dim=1) for m, c in zip(masks, columns, strict=True)]
    return torch.cat(pad_axis(masks, 1, 1, side="right"))


def _joined_sources(sources: list[torch.Tensor]) -> torch.Tensor:
    """Each state numbers its own inputs from 0: the states' ``source`` rows renumbered apart."""
    out, offset = [], 0
    for source in sources:
        out.append(source + offset)
        offset += int(source.max()) + 1 if source.numel() else 0
    return torch.cat(out)


@select_state.register(Seq2SeqState)
@inference
def _select_seq2seq_state(state: Seq2SeqState, idx: Any) -> Seq2SeqState:
    """Rows ``idx`` of the adapter's state; its cache reordered in place (see the causal one).

    The encoder-side rows (cross-attention keys and values, encoder output and mask) depend only
    on the source: when every new row decodes the same source as the row now at its position (a
    beam that keeps its width, so every step after the first), they are left as they are, where
    ``generate`` gathers them every step."""
    idx = torch.as_tensor(idx, device=state.encoder_mask.device)
    reorder_in_place(state.cache.self_attention_cache, idx)
    source = state.source.index_select(0, idx)
    if source.shape == state.source.shape and torch.equal(source, state.source):
        return state
    reorder_in_place(state.cache.cross_attention_cache, idx)
    mask, positions, fed = state.mask, state.positions, state.fed
    if mask is not None and positions is not None:
        mask, fed = drop_leading(state.cache.self_attention_cache, mask.index_select(0, idx), fed)
        positions = positions.index_select(0, idx)
    return Seq2SeqState(state.cache, state.encoder_hidden.index_select(0, idx),
                        state.encoder_mask.index_select(0, idx), fed, source, mask, positions)


@concat_state.register(Seq2SeqState)
@inference
def _concat_seq2seq_states(states: list[Seq2SeqState]) -> Seq2SeqState:
    """The rows of several states (searches at different steps) in one state: the encoder output
    and mask right-padded to the longest source, the decoder's self-attention keys and values
    left-padded with zeros to the longest (masked in ``mask``), positions per row as they were;
    the cross-attention cache is left empty, so the next call computes it for every row from the
    encoder output (it is a function of that alone)."""
    t = max(s.fed for s in states)
    for s in states:
        settled(s.cache.self_attention_cache)
    like = next((s for s in states if s.fed), None)
    self_cache = copy.copy(states[0].cache.self_attention_cache)
    self_cache.layers = []
    for i in range(len(states[0].cache.self_attention_cache.layers)):
        if like is None:  # no state has fed a token: nothing cached yet
            self_cache.layers.append(DynamicLayer())
            continue
        first: Any = like.cache.self_attention_cache.layers[i]  # a layer of keys: a state has fed a token
        ref = first.keys
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
        self_cache.layers.append(plain_layer(keys, values))
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


def _layer(state: CausalState, i: int) -> Any:
    """Layer ``i`` of ``state``'s cache, whichever kind it is (the callers dispatch on it)."""
    return state.cache.layers[i]
