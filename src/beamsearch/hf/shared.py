"""A prompt cache shared by every beam (``causal_lm(..., share_prompt=True)``): each prompt's keys
and values are held once per input (:class:`SharedPrompt`), each row's own generated columns in
the ordinary per-row cache (:class:`SuffixLayer`), and every decoding step's attention reads both
through :func:`shared_prompt_attention`, registered with ``transformers``' attention registry as
:data:`ATTENTION`: attention over the row's input's prompt and over its own columns computed
apart and combined exactly by their log-sum-exp (as flash-decoding combines its splits). The
cache then grows with rows x generated tokens; a beam search's copying cache holds the prompt
once per row.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any, cast

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from beamsearch.core.state import pad_axis, select_state
from beamsearch.hf.caches import PromptLayer
from beamsearch.hf.recurrent import recurrent

ATTENTION = "beamsearch_shared_prompt"
"""The name :func:`shared_prompt_attention` is registered under (``transformers.AttentionInterface``)."""

SHARED_TYPES = frozenset({"gpt2", "llama", "qwen2", "qwen3"})
"""Model types whose attention layers hand the registered attention function the layer's query,
its cached keys and values, the mask, the scaling and the forward's keyword arguments, with
nothing applied after the scores but the mask and softmax (no soft-capping, no attention sinks):
the shared prompt reads the same attention for them (tests/hf/test_shared.py)."""


class SharedPrompt:
    """The prompts' keys and values, once per input, and which input each row reads.

    Attributes:
        keys, values: per layer, ``[N, heads_kv, P, dh]``: the prefill's keys and values of the
            N inputs' prompts, left-padded to the longest (P columns).
        mask: bool ``[N, P]``, True on prompt tokens, False on padding.
        bias: float32 ``[N, 1, P]``: 0 on prompt tokens, -inf on padding.
        rows: int64 ``[k]``: the input (0..N-1) each row reads, the state's ``source``.
        slot: int64 ``[k]``: each row's rank among the rows of its input.
        group: G, the most rows of any input: the attention reads the prompts as ``[N, G]`` rows.
        dense: the rows are ``[N, G]`` in order (input-major, every input G rows), so the
            grouped layout is a view of the rows, not a scatter.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], mask: torch.Tensor,
                 rows: torch.Tensor) -> None:
        self.keys, self.values, self.mask = keys, values, mask
        self.bias = self._bias()
        self.rows = rows
        self.slot = rows
        self.group, self.dense = 1, True
        self.regroup(rows)

    def regroup(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows ``[k]`` read inputs ``rows``: prompts that no row reads any more are dropped (the
        inputs renumbered in order), and the rows' grouping recomputed. Returns the rows'
        inputs as renumbered ``[k]``."""
        n = self.mask.shape[0]
        counts = torch.bincount(rows, minlength=n)
        if rows.numel() and bool((counts == 0).any()):
            kept = torch.nonzero(counts).flatten()
            self.keys = [k.index_select(0, kept) for k in self.keys]
            self.values = [v.index_select(0, kept) for v in self.values]
            self.mask = self.mask.index_select(0, kept)
            self.bias = self._bias()
            rows = torch.searchsorted(kept, rows)
            counts = counts.index_select(0, kept)
        order = torch.argsort(rows, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.empty_like(rows)
        slot[order] = torch.arange(rows.shape[0], device=rows.device) - starts.index_select(0, rows[order])
        self.rows, self.slot = rows, slot
        self.group = int(counts.max()) if rows.numel() else 1
        place = rows * self.group + slot
        self.dense = place.shape[0] == self.mask.shape[0] * self.group and \
            bool(torch.equal(place, torch.arange(place.shape[0], device=place.device)))
        return rows

    def _bias(self) -> torch.Tensor:
        """float32 ``[N, 1, P]``: 0 on prompt tokens, -inf on padding (added to the scores)."""
        return torch.zeros(self.mask.shape, device=self.mask.device).masked_fill(~self.mask, float("-inf"))[:, None]

    def bytes(self) -> int:
        """The bytes of the prompts' keys and values."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class SuffixLayer(PromptLayer):
    """A layer's generated columns, one row per hypothesis, in buffers allocated once (as
    :class:`~beamsearch.hf.caches.PromptLayer`, with no prompt columns: a reorder gathers every
    written column)."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        out = super().update(key_states, value_states, *args, **kwargs)
        self.prompt = 0
        return out

    @classmethod
    def holding(cls, keys: torch.Tensor, values: torch.Tensor, room: int) -> SuffixLayer:
        """A layer holding ``keys``, ``values`` ``[k, heads_kv, t, dh]`` (``room`` columns more allocated)."""
        layer = cls(room)
        if keys.shape[2]:
            layer.update(keys, values)
        return layer


class SharedPromptCache(DynamicCache):
    """A ``DynamicCache`` of :class:`SuffixLayer` layers (the rows' own columns; its length is
    theirs) with the prompts they read, ``shared`` (:class:`SharedPrompt`)."""

    shared: SharedPrompt

    def bytes(self) -> int:
        """The bytes the cache holds: the prompts once, and the rows' allocated columns."""
        own = sum(t.numel() * t.element_size() for layer in self.layers
                  for t in (getattr(layer, "_k", None), getattr(layer, "_v", None)) if t is not None)
        return own + self.shared.bytes()


def check_shared(model: Any, parameter: str) -> None:
    """Refuse a model the shared prompt does not read exactly: a ValueError naming ``parameter``."""
    cfg = model.config
    if not cfg.is_encoder_decoder and recurrent(model):
        raise ValueError(f"{parameter}=True shares the prompt's keys and values between beams; a {cfg.model_type} "
                         "model holds a recurrent state per row, which every beam changes from its first token, so "
                         "there is no prompt part to share (its prompt already runs once per input, the state "
                         "copied to the beams)")
    if cfg.model_type not in SHARED_TYPES or cfg.is_encoder_decoder:
        raise ValueError(f"{parameter}=True is implemented for decoder-only models of types "
                         f"{sorted(SHARED_TYPES)}; got model type {cfg.model_type!r}")
    layers = DynamicCache(config=cfg).layers
    if any(type(layer) is not DynamicLayer for layer in layers) or getattr(cfg, "add_cross_attention", False):
        raise ValueError(f"{parameter}=True needs full-attention layers only; this {cfg.model_type} config has "
                         "sliding-window or cross-attention layers")


def shared_cache(model: Any, prefill: DynamicCache, mask: torch.Tensor, room: int) -> SharedPromptCache:
    """The prefill's cache (one row per input) as a :class:`SharedPromptCache`: its keys and
    values the prompts (``mask`` int ``[N, P]``, 1 on tokens), no generated column yet (``room``:
    the search's steps, ``max_new_tokens``)."""
    cache = SharedPromptCache(config=model.config)
    # a search of T steps feeds T - 1 tokens (the first step's logits are the prefill's): the
    # first write allocates its column and room for T - 2 more
    cache.layers = [SuffixLayer(max(room - 2, 0)) for _ in prefill.layers]
    n = mask.shape[0]
    filled: list[Any] = list(prefill.layers)  # the prefill's attention layers, each holding its keys and values
    cache.shared = SharedPrompt([layer.keys for layer in filled], [layer.values for layer in filled],
                                mask.bool(), torch.arange(n, device=mask.device))
    return cache


@contextlib.contextmanager
def shared_attention(model: Any) -> Iterator[None]:
    """While in use, ``model``'s attention layers call :func:`shared_prompt_attention`."""
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = ATTENTION
    try:
        yield
    finally:
        cfg._attn_implementation = before


def _grouped(x: torch.Tensor, shared: SharedPrompt) -> torch.Tensor:
    """Rows ``[k, ...]`` as ``[N * G, ...]``: row r at ``rows[r] * G + slot[r]`` (zeros elsewhere)."""
    if shared.dense:
        return x
    out = x.new_zeros((shared.mask.shape[0] * shared.group, *x.shape[1:]))
    out[shared.rows * shared.group + shared.slot] = x
    return out


def _ungrouped(x: torch.Tensor, shared: SharedPrompt) -> torch.Tensor:
    return x if shared.dense else x[shared.rows * shared.group + shared.slot]


def _prompt_part(query: torch.Tensor, shared: SharedPrompt, layer: int,
                 scaling: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's attention over its input's prompt, unnormalised: (max score ``[k, H, q, 1]``,
    sum of ``exp(score - max)`` ``[k, H, q, 1]``, the weighted sum of values ``[k, H, q, dh]``).
    Rows are grouped by input, so the prompt is read once per input (one batched matmul)."""
    keys, values = shared.keys[layer], shared.values[layer]  # --> [N, Hkv, P, dh]
    k, heads, q, dh = query.shape
    n, hkv, g = keys.shape[0], keys.shape[1], shared.group
    rep = heads // hkv
    grouped = _grouped(query * scaling, shared).reshape(n, g, hkv, rep, q, dh).transpose(1, 2)
    grouped = grouped.reshape(n * hkv, g * rep * q, dh)
    bias = shared.bias.to(query.dtype).expand(n, hkv, keys.shape[2]).reshape(n * hkv, 1, keys.shape[2])
    # scores + padding bias (-inf) in one call --> [N * Hkv, G*rep*q, P]
    scores = torch.baddbmm(bias, grouped, keys.to(query.dtype).reshape(n * hkv, -1, dh).transpose(1, 2))
    top = scores.amax(-1, keepdim=True)  # finite: every prompt has a token
    weights = scores.sub_(top).exp_()
    total = weights.sum(-1, keepdim=True)
    out = torch.bmm(weights, values.to(query.dtype).reshape(n * hkv, -1, dh))  # --> [N * Hkv, G*rep*q, dh]

    def rows_of(x: torch.Tensor) -> torch.Tensor:
        x = x.view(n, hkv, g, rep, q, x.shape[-1]).transpose(1, 2).reshape(n * g, heads, q, x.shape[-1])
        return _ungrouped(x, shared)

    return rows_of(top), rows_of(total), rows_of(out)


def shared_prompt_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                            shared_prompt: SharedPrompt | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention over each row's input's shared prompt and its own cached columns.

    Args:
        module: the attention layer (its ``layer_idx`` picks the prompt's layer).
        query: ``[k, H, q, dh]``; key, value: the row's own columns, ``[k, Hkv, s, dh]``.
        attention_mask: bool ``[k, 1, q, s]`` (True: attended) over the own columns, or None.
        scaling: the score scale (default ``dh ** -0.5``).
        shared_prompt: the prompts (:class:`SharedPrompt`); without it, plain sdpa attention.

    Returns:
        (``[k, q, H, dh]``, None), as ``transformers``' attention functions return.
    """
    if shared_prompt is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    for name in ("sliding_window", "softcap", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"the shared prompt cache does not support attention with {name}")
    dtype = query.dtype
    work = torch.promote_types(dtype, torch.float32)
    query = query.to(work)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    layer_idx = cast(int, module.layer_idx)  # (an attention module's int attribute, typed Tensor | Module by torch)
    top1, total1, out1 = _prompt_part(query, shared_prompt, layer_idx, scale)
    k, heads, q, dh = query.shape
    hkv = key.shape[1]
    rep = heads // hkv
    scores = torch.matmul(query.reshape(k, hkv, rep * q, dh), key.to(work).transpose(-1, -2)) * scale
    scores = scores.view(k, hkv, rep, q, -1)
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask.bool()[:, :, None], float("-inf"))
    scores = scores.view(k, heads, q, -1)
    top = torch.maximum(top1, scores.amax(-1, keepdim=True))  # finite: top1 is
    weights = torch.exp(scores - top)
    own = torch.matmul(weights.view(k, hkv, rep * q, -1), value.to(work)).view(k, heads, q, dh)
    carry = torch.exp(top1 - top)
    out = (carry * out1 + own) / (carry * total1 + weights.sum(-1, keepdim=True))
    return out.to(dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prompt_attention)


@select_state.register(SharedPromptCache)
def _select_shared_cache(cache: SharedPromptCache, idx: Any) -> SharedPromptCache:
    """A new cache of rows ``idx``: their own columns gathered, the prompts kept."""
    idx = torch.as_tensor(idx, device=cache.shared.rows.device)
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        own: Any = layer
        if own.keys is None:
            out.layers.append(SuffixLayer(own.room))
        else:
            out.layers.append(SuffixLayer.holding(own.keys.index_select(0, idx), own.values.index_select(0, idx),
                                                  own.room))
    out.shared = copy.copy(cache.shared)
    out.shared.regroup(cache.shared.rows.index_select(0, idx))
    return out


def joined_shared(caches: list[SharedPromptCache], rows: list[int], columns: list[int]) -> SharedPromptCache:
    """Shared caches of states at different steps (``rows[i]`` rows, ``columns[i]`` own columns)
    in one: the own columns left-padded with zeros to the most (the joined mask covers them), the
    prompts of every input still read, left-padded to the longest (masked) and numbered apart
    in the states' order. The joined rows' inputs are the result's ``shared.rows``."""
    first = caches[0]
    prompts = [copy.copy(cache.shared) for cache in caches]  # the states joined keep theirs
    for p in prompts:
        p.regroup(p.rows)  # prompts no row reads dropped, the rest numbered 0..n_i-1
    out = copy.copy(first)
    out.layers = []
    for i, layer in enumerate(first.layers):
        like = first.shared.keys[i]
        parts = []
        for cache, n, c in zip(caches, rows, columns, strict=True):
            own: Any = cache.layers[i]
            if c:
                parts.append((own.keys, own.values))
            else:
                empty = like.new_zeros((n, like.shape[1], 0, like.shape[3]))
                parts.append((empty, empty))
        own_keys = torch.cat(pad_axis([kv[0] for kv in parts], 2, 0.0, side="left"))
        own_values = torch.cat(pad_axis([kv[1] for kv in parts], 2, 0.0, side="left"))
        room = cast(SuffixLayer, layer).room  # (a shared cache's layers are SuffixLayers: shared_cache makes them)
        out.layers.append(SuffixLayer.holding(own_keys, own_values, room))
    keys = [torch.cat(pad_axis([p.keys[i] for p in prompts], 2, 0.0, side="left")) for i in range(len(first.layers))]
    values = [torch.cat(pad_axis([p.values[i] for p in prompts], 2, 0.0, side="left"))
              for i in range(len(first.layers))]
    mask = torch.cat(pad_axis([p.mask for p in prompts], 1, False, side="left"))
    offsets, joined = 0, []
    for p in prompts:
        joined.append(p.rows + offsets)
        offsets += p.mask.shape[0]
    out.shared = SharedPrompt(keys, values, mask, torch.cat(joined))
    return out

