"""The decoder-only adapter: :func:`causal_lm` runs the prompt through the model once and returns a
:class:`~beamsearch.hf.states.Prepared` whose ``step`` is a :class:`CausalStep` (one token per row
per call); the encoder-decoder adapter is :mod:`beamsearch.hf.seq2seq`, and what the step objects
share and the model calls' helpers are in :mod:`beamsearch.hf.adapter_step`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, StaticCache

from beamsearch.core import validate as check
from beamsearch.hf.adapter_step import (
    CAPACITY,
    AdapterStep,
    adapter_cache,
    keeps_prompt,
    last_logits,
    timed,
    unconsumed,
)
from beamsearch.hf.caches import (
    DeferredLayer,
    PromptLayer,
    cache_keyword,
    cache_of,
    inference,
    skip_dummy_column,
    windows_held,
)
from beamsearch.hf.carried import carrier_for
from beamsearch.hf.image_decoders import ADDITIVE_TYPES, image_columns, is_blip
from beamsearch.hf.inputs import check_positions, in_eval_mode, in_vocab, input_rows, left_padded, pad_id, search_eos
from beamsearch.hf.multimodal import check_model_inputs, prefill_positions, step_model
from beamsearch.hf.positions import mask_ready
from beamsearch.hf.recurrent import FOUR_D_TYPES, OWN_CACHE_TYPES, UNPADDED_TYPES, attends, by_length, held, restore
from beamsearch.hf.shared import check_shared, shared_attention, shared_cache
from beamsearch.hf.states import CausalState, Prepared
from beamsearch.hf.static_layers import room, whole_static


@inference
def causal_lm(model: Any, prompts: Any, *, attention_mask: Any = None, tokenizer: Any = None,
              pad_token_id: int | None = None, eos_token_id: Any = "model",
              max_new_tokens: int | None = None, share_prompt: bool = False, cache_implementation: str | None = None,
              max_cache_len: int | None = None, **model_inputs: Any) -> Prepared:
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
        share_prompt: hold each prompt's keys and values once per input, read by every row
            (beam) of the input, the rows' cache holding only their generated tokens
            (:mod:`beamsearch.hf.shared`; docs/hf_shared_prompt.md). The same results (to float
            rounding); the model types of :data:`beamsearch.hf.shared.SHARED_TYPES`, full
            attention only.
        cache_implementation: ``"static"``: the prompt runs into a ``transformers``
            ``StaticCache`` of ``max_cache_len`` columns (default: the longest prompt plus
            ``max_new_tokens - 1``, as ``generate`` sizes it), which the search carries: its rows
            reordered, copied and joined by :mod:`beamsearch.hf.static_layers` (every row writes
            at one shared position: rows that join a search mid-way are aligned at their last
            token, and have that many fewer places left; a step past ``max_cache_len`` is a
            ValueError). None or ``"dynamic"``: the adapter's own dynamic cache. The same
            results either way (to float rounding).
        max_cache_len: the static cache's length (only with ``cache_implementation="static"``):
            at least the longest prompt plus ``max_new_tokens - 1``; give every cohort of a
            refill one length (caches of different lengths are not joined).
        **model_inputs: a vision-language model's other inputs, as its processor gives them
            (``pixel_values`` ``[N, ...]``, ``image_grid_thw``, ``mm_token_type_ids``,
            ``pixel_attention_mask``, ``token_type_ids``, ...; :mod:`beamsearch.hf.multimodal`):
            passed to the prefill alone, which runs the vision tower once per input.

    Returns:
        A :class:`Prepared`; pass ``prepared.prompts`` as ``prompts``.

    Raises:
        ValueError: an empty batch or prompt, a malformed tensor or mask, a prompt longer than the
            model's ``n_positions`` / ``max_position_embeddings``; ``share_prompt=True`` with a
            model it is not implemented for; model inputs with a row count other than N; a
            static cache asked of a model that keeps its state elsewhere, with
            ``share_prompt``, without a length, or shorter than the prompts and new tokens.
            TypeError: a non-integer id, model inputs given to a text model.
    """
    if not isinstance(share_prompt, bool):
        raise TypeError(f"share_prompt must be True or False; got {share_prompt!r}")
    if share_prompt:
        check_shared(model, "share_prompt")
    rows = input_rows(prompts, attention_mask, tokenizer, "prompts")
    in_vocab(model, rows, "prompts")
    in_eval_mode(model)
    check_model_inputs(model, model_inputs, len(rows), share_prompt)
    pad = pad_id(model, pad_token_id)
    eos, extra = search_eos(model, eos_token_id)
    capacity = CAPACITY if max_new_tokens is None else check.at_least("max_new_tokens", max_new_tokens, 1)
    longest = max(len(r) for r in rows)
    check_positions(model, longest, "prompts", max_new_tokens, decoder_start=False)
    static = _static_length(model, cache_implementation, max_cache_len, longest, max_new_tokens, share_prompt)
    prepared = Prepared(None, None, rows, eos)
    stepped = step_model(model)
    if share_prompt:
        prepared.init_state = _prefill(prepared, model, rows, pad, capacity, extra, True, model_inputs)
        prepared.step = SharedCausalStep(prepared, model, extra, True)
        return prepared
    if model.config.model_type in UNPADDED_TYPES and len({len(r) for r in rows}) > 1:  # text models: no model_inputs
        prepared.init_state = by_length(rows, lambda part: _prefill(prepared, model, part, pad, capacity, extra, False))
    else:
        runner = stepped if is_blip(model) else model  # BLIP: its decoding embeds the image once, in the prefill
        prepared.init_state = _prefill(prepared, runner, rows, pad, capacity, extra, False, model_inputs, static)
    cache = prepared.init_state.cache
    ready = model.config.model_type in FOUR_D_TYPES or (carrier_for(model) is None and mask_ready(stepped, cache))
    prepared.step = CausalStep(prepared, stepped, extra, ready)
    return prepared


def state_outside_a_static_cache(model: Any) -> str | None:
    """Where ``model`` keeps the state a ``StaticCache`` cannot hold (None: in the cache): in its
    own cache (RWKV, xLSTM, ...), partly outside a ``Cache`` (a carried state), or with an image's
    columns before the prompt's (GIT)."""
    kind = model.config.model_type
    if kind in OWN_CACHE_TYPES:
        return "in its own cache"
    if kind in ADDITIVE_TYPES:
        return "with its image's columns before the prompt's"
    return "partly outside a Cache" if carrier_for(model) is not None else None


def _static_length(model: Any, implementation: Any, length: Any, longest: int, new_tokens: int | None,
                   share_prompt: bool) -> int | None:
    """The ``max_cache_len`` of the ``StaticCache`` :func:`causal_lm` is asked for, None for its
    own dynamic cache.

    Raises:
        ValueError: an implementation other than ``"static"`` / ``"dynamic"`` / None; a static
            cache with ``share_prompt``, for a model that keeps its state in a cache of its own
            or outside one, without ``max_new_tokens`` or ``max_cache_len``, or too short.
    """
    if implementation is None or implementation == "dynamic":
        if length is not None:
            raise ValueError("max_cache_len sizes a static cache: pass cache_implementation=\"static\" with it")
        return None
    if implementation != "static":
        raise ValueError(f"cache_implementation must be None, \"dynamic\" or \"static\"; got {implementation!r}")
    if share_prompt:
        raise ValueError("share_prompt=True holds the prompts in a dynamic cache of its own (read by every beam): "
                         "it cannot be a static cache; pass one or the other")
    where = state_outside_a_static_cache(model)
    if where is not None:
        raise ValueError(f"cache_implementation=\"static\": a {model.config.model_type} model keeps its state "
                         f"{where}, not in a StaticCache of the prompt's and new tokens' length; leave "
                         "cache_implementation unset (the same results)")
    need = None if new_tokens is None else longest + new_tokens - 1
    if length is None:
        if need is None:
            raise ValueError("cache_implementation=\"static\" needs max_new_tokens or max_cache_len: a static "
                             "cache's length is fixed when the prompt runs")
        return need
    length = check.at_least("max_cache_len", length, 1)
    if length < (longest if need is None else need):
        fed = f" and {new_tokens - 1} generated tokens fed back" if new_tokens is not None else ""
        raise ValueError(f"max_cache_len={length} is shorter than a prompt of {longest} tokens{fed}")
    return length


def _prefill(prepared: Prepared, model: Any, rows: list[list[int]], pad: int, capacity: int, extra: bool,
             share_prompt: bool, model_inputs: dict[str, Any] | None = None, static: int | None = None) -> CausalState:
    """Run the prompts ``rows`` (left-padded) and ``model_inputs`` through the model once, one row
    per input: the state after them, its first logits the last position's. ``capacity``: generated
    columns allocated; ``share_prompt``: the state of :class:`SharedCausalStep`; ``static``: the
    length of the ``StaticCache`` the prompts run into (None: the adapter's dynamic cache)."""
    model_inputs = model_inputs or {}
    device = next(model.parameters()).device
    ids, mask = left_padded(rows, pad, device)
    longest = max(len(r) for r in rows)
    positions, following = prefill_positions(model, ids, mask, model_inputs)  # --> [N, P] (or [3, N, P]), [N]
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    width = ids.shape[1]
    layer: Callable[[], DynamicLayer] = (lambda: PromptLayer(capacity)) if keeps_prompt(width, capacity) \
        else DeferredLayer
    carrier = carrier_for(model)
    source = torch.arange(len(rows), device=device)
    inputs = dict(input_ids=ids, attention_mask=mask, position_ids=positions, **keep, **model_inputs)
    # only the last position's logits are needed: [N, 1, V], not [N, P, V] (as generate does)
    if carrier is not None:  # a state outside a Cache (RWKV, xLSTM, RecurrentGemma)
        carried = carrier.empty(model)
        out = timed(prepared, model, **inputs, **{carrier.keyword: carrier.give(model, carried)})
        cache: Any = carrier.read(model, carried, out, width)
    else:
        fresh = None if model.config.model_type in OWN_CACHE_TYPES else \
            DynamicCache(config=model.config) if share_prompt else \
            StaticCache(config=model.config, max_cache_len=static) if static is not None else \
            adapter_cache(model, layer)
        out = timed(prepared, model, **inputs, **{cache_keyword(step_model(model)): fresh})
        if getattr(out, "language_model_outputs", None) is not None:  # BLIP-2: its language model's output holds it
            out = out.language_model_outputs
        cache = cache_of(out)
    first = last_logits(out, extra)
    if share_prompt:  # the prompts' columns held once per input; the rows' own start empty
        return CausalState(shared_cache(model, cache, mask, capacity), mask.new_ones(len(rows), capacity),
                           following, 0, longest, first, None, source)
    mask, width = image_columns(model, cache, mask, width)  # GIT: its image's columns before the prompt's
    full = torch.cat([mask, mask.new_ones(len(rows), capacity)], dim=1)  # --> [N, P + C]
    return CausalState(cache, full, following, width, longest, first, None, source)


class CausalStep(AdapterStep):
    """The ``step`` of :func:`causal_lm`'s :class:`~beamsearch.hf.states.Prepared`, on a
    :class:`~beamsearch.hf.states.CausalState` (see :class:`AdapterStep`)."""

    @inference
    def __call__(self, state: CausalState, y_prev: torch.Tensor) -> tuple[torch.Tensor, CausalState]:
        """The next token's logits for every row, and the state with ``y_prev`` fed.

        Args:
            state: the rows' state, ``k`` rows.
            y_prev: int64 ``[k]``, each row's last token, fed at the row's own position into cache
                column ``state.columns``. The first call, whose every row's prompt the prefill
                scored, feeds nothing and returns the prefill's logits; rows that joined at this
                call (``state.pending``) take their prefill logits, their token a masked dummy
                (kept out of their recurrent states and sliding windows).

        Returns:
            (float32 logits ``[k, V']``, the new state): the model extended the cache in place.

        Raises:
            ValueError: a second search from a used state, or a token beyond the model's positions.
        """
        limit = self.limit
        if state.first is not None and state.pending is None:  # every row's prompt was scored by the prefill
            unconsumed(state.cache, state.columns)
            return state.first, state._replace(first=None)
        if limit is not None and state.furthest >= limit and int(state.positions.max()) >= limit:
            raise ValueError(f"the search asks for a token at position {int(state.positions.max())}, beyond the "
                             f"model's {limit} positions: lower max_steps")
        t = state.columns
        if whole_static(state.cache):
            _check_room(cast(StaticCache, state.cache), t)
        if t == state.mask.shape[1]:  # out of allocated columns (no max_new_tokens): grow once per C
            state = state._replace(mask=torch.cat([state.mask, state.mask.new_ones(len(y_prev), CAPACITY)], dim=1))
        mask, fed = state.mask, torch.ones_like(state.positions)
        if state.pending is not None:
            # rows that joined at this call take their prefill logits; their token here is a dummy,
            # masked out (column t is 0 for them from now on) and at no position
            mask = mask.clone()
            mask[:, t] = (~state.pending).to(mask.dtype)
            fed = fed.masked_fill(state.pending, 0)
        fed_mask, positions, order = mask, state.positions, state.order
        if order is not None:  # the cache's rows are in another order: feed them in theirs
            at = torch.empty_like(order)
            at[order] = torch.arange(order.shape[0], device=order.device)  # the row in each cache row
            y_prev, fed_mask, positions = (x.index_select(0, at) for x in (y_prev, mask, positions))
        attend: torch.Tensor | None = self.attend(fed_mask[:, : t + 1])
        if not attends(state.cache):  # a recurrence alone reads no mask at a step (a masked token is undone below)
            attend = None
        dummy = None if state.pending is None else torch.nonzero(state.pending).flatten()
        if dummy is not None and order is not None:
            dummy = order.index_select(0, dummy)  # --> their cache rows
        kept, windows = (None, None) if dummy is None else (held(state.cache, dummy), windows_held(state.cache, dummy))
        out, cache = self.forward(state.cache, input_ids=y_prev[:, None], attention_mask=attend,
                                  position_ids=positions[:, None])
        if kept is not None and dummy is not None:  # a row's recurrent state does not see its dummy token
            restore(cache, dummy, kept)
        if windows is not None and dummy is not None and state.pending is not None:  # nor do its windows
            skip_dummy_column(cache, dummy, windows, t + 1)
            mask[state.pending, : t + 1] = mask[state.pending, : t + 1].roll(1, dims=1)
        logits = last_logits(out, self.extra_column)
        if order is not None:
            logits = logits.index_select(0, order)
        if state.pending is not None:
            assert state.first is not None, "rows that joined at this call carry their prefill logits"
            logits = torch.where(state.pending[:, None], state.first, logits)
        return logits, CausalState(cache, mask, state.positions + fed, t + 1, state.furthest + 1, None,
                                   None, state.source, order)

    def forward(self, cache: Any, **inputs: Any) -> tuple[Any, Any]:
        """The model's forward on ``inputs`` with ``cache`` (timed and counted): its output and the
        cache after it (a state outside a ``Cache`` handed in and read back by its carrier)."""
        carrier = self.carrier
        if carrier is None:
            out = timed(self.prepared, self.model, **inputs, **{self.cache_kw: cache})
            return out, cache_of(out)
        return carrier.forward(lambda **kw: timed(self.prepared, self.model, **kw), self.model, cache, inputs)


def _check_room(cache: StaticCache, columns: int) -> None:
    """Refuse a step that would write past a static cache's ``max_cache_len``."""
    length = room(cache)
    if length is not None and columns >= length:
        raise ValueError(f"the static cache is full: its max_cache_len={length} places hold the prompt, the tokens "
                         "fed and the left padding of rows that joined mid-way; prepare with a larger max_cache_len")


class SharedCausalStep(CausalStep):
    """The step of ``causal_lm(..., share_prompt=True)``: the state's cache is a
    :class:`~beamsearch.hf.shared.SharedPromptCache` (its columns are the rows' own, the mask
    covers them alone) and the model's attention reads the prompts through
    :func:`~beamsearch.hf.shared.shared_prompt_attention` (always given a ready 4-D mask)."""

    def forward(self, cache: Any, **inputs: Any) -> tuple[Any, Any]:
        with shared_attention(self.model):
            out = timed(self.prepared, self.model, **inputs, shared_prompt=cache.shared, **{self.cache_kw: cache})
        return out, cache_of(out)
