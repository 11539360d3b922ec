"""The two adapters: :func:`causal_lm` (decoder-only models) and :func:`seq2seq_lm`
(encoder-decoders) run the prompt or the source through the model once and return a
:class:`~beamsearch.hf.states.Prepared` whose ``step`` is a step object (:class:`CausalStep`,
:class:`Seq2SeqStep`: one decoder token per row per call); with the model calls' helpers (the
forward timed and counted, the cache keyword, the last position's logits, the adapter's cache).
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from beamsearch.core import validate as check
from beamsearch.hf.caches import DeferredLayer, PromptLayer, cache_keyword, cache_of, inference
from beamsearch.hf.carried import carrier_for
from beamsearch.hf.recurrent import (FOUR_D_TYPES, OWN_CACHE_TYPES, UNPADDED_TYPES, attends, by_length, cache_length,
                                     held, restore)
from beamsearch.hf.inputs import (check_positions, in_eval_mode, in_vocab, input_rows, left_padded, pad_id,
                                  position_limit, right_padded, search_eos)
from beamsearch.hf.shared import check_shared, shared_attention, shared_cache
from beamsearch.hf.states import (CausalState, Prepared, RowPositions, Seq2SeqState, as_4d, joinable, mask_ready,
                                  position_table)


def _unconsumed(cache: Any, columns: int) -> None:
    """Refuse a search from a :class:`Prepared` state that an earlier search has used: the model
    extended its cache in place (it holds more than the ``columns`` the state starts from)."""
    if cache_length(cache) != columns:
        raise ValueError("this Prepared was used by a search already: the model extended its KV cache in place, "
                         "so it cannot start another; prepare the inputs again (hf.causal_lm / hf.seq2seq_lm)")


def _timed(prepared: Prepared, model: Any, **inputs: Any) -> Any:
    start = time.perf_counter()
    out = model(**inputs, use_cache=True, return_dict=True)
    prepared.forward_seconds += time.perf_counter() - start
    prepared.forward_calls += 1
    return out


def _logits(out: Any, extra_column: bool) -> torch.Tensor:
    logits = out.logits[:, -1, :].to(dtype=torch.float32)  # --> [k, V], as generate scores them
    if extra_column:  # an eos the model never produces: one -inf column at index V
        logits = torch.cat([logits, logits.new_full((logits.shape[0], 1), float("-inf"))], dim=1)
    return logits


_CAPACITY = 64  # generated-token columns allocated at once when max_new_tokens is not given


def keeps_prompt(width: int, room: int) -> bool:
    """Whether a prefill of ``width`` prompt columns, with ``room`` generated columns to come,
    keeps the prompt in place (:func:`adapter_cache`): when the prompt is at least the generated
    part (either way the results are the same)."""
    return width >= room


def adapter_cache(model: Any, layer: Callable[[], DynamicLayer]) -> DynamicCache:
    """A ``DynamicCache`` for ``model`` whose full-attention layers (exactly ``DynamicLayer``)
    are ``layer()`` (sliding-window and other layers stay the model's own):

    - :class:`~beamsearch.hf.caches.PromptLayer` when the prompt columns are at least the
      generated ones (:func:`keeps_prompt`): gathering only the generated columns at each
      reorder, and writing each step's column in place, saves more than the strided reads cost
      (with short prompts it measured slower);
    - :class:`~beamsearch.hf.caches.DeferredLayer` otherwise: each reorder is gathered into the
      next step's write."""
    cache = DynamicCache(config=model.config)
    cache.layers = [layer() if type(existing) is DynamicLayer else existing for existing in cache.layers]
    return cache


class AdapterStep:
    """What the adapters' step objects share: ``step(state, y_prev [k]) -> (logits [k, V'], new
    state)`` is a subclass's ``__call__`` (:class:`CausalStep`, :class:`Seq2SeqStep`).

    Attributes:
        prepared: the :class:`~beamsearch.hf.states.Prepared` whose forward time and calls it counts.
        model: the causal LM or the encoder-decoder.
        extra_column: the search's eos is one the model never produces: the logits get one more
            column, V, always -inf.
        ready: the steps pass the model 4-D masks themselves (:func:`~beamsearch.hf.states.mask_ready`).
        limit: the model's positions (:func:`~beamsearch.hf.inputs.position_limit`), or None.
        cache_kw: the forward's name for the KV cache argument.
        carrier: how a model whose state is not a ``Cache`` it returns takes and gives it back
            (:func:`~beamsearch.hf.carried.carrier_for`), or None.
    """

    def __init__(self, prepared: Prepared, model: Any, extra_column: bool, ready: bool) -> None:
        self.prepared, self.model, self.extra_column, self.ready = prepared, model, extra_column, ready
        self.limit = position_limit(model)
        self.cache_kw = cache_keyword(model)
        self.carrier = carrier_for(model)


@inference
def causal_lm(model: Any, prompts: Any, *, attention_mask: Any = None, tokenizer: Any = None,
              pad_token_id: int | None = None, eos_token_id: Any = "model",
              max_new_tokens: int | None = None, share_prompt: bool = False) -> Prepared:
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

    Returns:
        A :class:`Prepared`; pass ``prepared.prompts`` as ``prompts``.

    Raises:
        ValueError: an empty batch or prompt, a malformed tensor or mask, a prompt longer than the
            model's ``n_positions`` / ``max_position_embeddings``; ``share_prompt=True`` with a
            model it is not implemented for. TypeError: a non-integer id.
    """
    if not isinstance(share_prompt, bool):
        raise TypeError(f"share_prompt must be True or False; got {share_prompt!r}")
    if share_prompt:
        check_shared(model, "share_prompt")
    rows = input_rows(prompts, attention_mask, tokenizer, "prompts")
    in_vocab(model, rows, "prompts")
    in_eval_mode(model)
    pad = pad_id(model, pad_token_id)
    eos, extra = search_eos(model, eos_token_id)
    capacity = _CAPACITY if max_new_tokens is None else check.at_least("max_new_tokens", max_new_tokens, 1)
    longest = max(len(r) for r in rows)
    check_positions(model, longest, "prompts", max_new_tokens, decoder_start=False)
    prepared = Prepared(None, None, rows, eos)
    carrier = carrier_for(model)
    if share_prompt:
        prepared.init_state = _prefill(prepared, model, rows, pad, capacity, extra, True)
        prepared.step = SharedCausalStep(prepared, model, extra, True)
        return prepared
    if model.config.model_type in UNPADDED_TYPES and len({len(r) for r in rows}) > 1:
        prepared.init_state = by_length(rows, lambda part: _prefill(prepared, model, part, pad, capacity, extra, False))
    else:
        prepared.init_state = _prefill(prepared, model, rows, pad, capacity, extra, False)
    cache = prepared.init_state.cache
    ready = model.config.model_type in FOUR_D_TYPES or (carrier is None and mask_ready(model, cache))
    prepared.step = CausalStep(prepared, model, extra, ready)
    return prepared


def _prefill(prepared: Prepared, model: Any, rows: list[list[int]], pad: int, capacity: int, extra: bool,
             share_prompt: bool) -> CausalState:
    """Run the prompts ``rows`` (left-padded) through the model once, one row per input: the
    state after them, its first logits the last position's. ``capacity``: generated columns
    allocated; ``share_prompt``: the state of :class:`SharedCausalStep`."""
    device = next(model.parameters()).device
    ids, mask = left_padded(rows, pad, device)
    longest = max(len(r) for r in rows)
    lengths = mask.sum(dim=1, keepdim=True)  # --> [N, 1]
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)  # --> [N, P]
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    width = ids.shape[1]
    layer: Callable[[], DynamicLayer] = (lambda: PromptLayer(capacity)) if keeps_prompt(width, capacity) \
        else DeferredLayer
    carrier = carrier_for(model)
    source = torch.arange(len(rows), device=device)
    inputs = dict(input_ids=ids, attention_mask=mask, position_ids=positions, **keep)
    # only the last position's logits are needed: [N, 1, V], not [N, P, V] (as generate does)
    if carrier is not None:  # a state outside a Cache (RWKV, xLSTM, RecurrentGemma)
        carried = carrier.empty(model)
        out = _timed(prepared, model, **inputs, **{carrier.keyword: carrier.give(model, carried)})
        cache: Any = carrier.read(model, carried, out, width)
    else:
        fresh = None if model.config.model_type in OWN_CACHE_TYPES else \
            DynamicCache(config=model.config) if share_prompt else adapter_cache(model, layer)
        out = _timed(prepared, model, **inputs, **{cache_keyword(model): fresh})
        cache = cache_of(out)
    first = _logits(out, extra)
    if share_prompt:  # the prompts' columns held once per input; the rows' own start empty
        return CausalState(shared_cache(model, cache, mask, capacity), mask.new_ones(len(rows), capacity),
                           lengths[:, 0], 0, longest, first, None, source)
    full = torch.cat([mask, mask.new_ones(len(rows), capacity)], dim=1)  # --> [N, P + C]
    return CausalState(cache, full, lengths[:, 0], width, longest, first, None, source)


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
                call (``state.pending``) take their prefill logits, their token a masked dummy.

        Returns:
            (float32 logits ``[k, V']``, the new state): the model extended the cache in place.

        Raises:
            ValueError: a second search from a used state, or a token beyond the model's positions.
        """
        limit = self.limit
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
        fed_mask, positions, order = mask, state.positions, state.order
        if order is not None:  # the cache's rows are in another order: feed them in theirs
            at = torch.empty_like(order)
            at[order] = torch.arange(order.shape[0], device=order.device)  # the row in each cache row
            y_prev, fed_mask, positions = (x.index_select(0, at) for x in (y_prev, mask, positions))
        attend = as_4d(fed_mask[:, : t + 1]) if self.ready else fed_mask[:, : t + 1]
        if not attends(state.cache):  # a recurrence alone reads no mask at a step (a masked token is undone below)
            attend = None
        dummy = None if state.pending is None else torch.nonzero(state.pending).flatten()
        if dummy is not None and order is not None:
            dummy = order.index_select(0, dummy)  # --> their cache rows
        kept = held(state.cache, dummy) if dummy is not None else None
        out, cache = self.forward(state.cache, input_ids=y_prev[:, None], attention_mask=attend,
                                  position_ids=positions[:, None])
        if kept is not None and dummy is not None:  # a row's recurrent state does not see its dummy token
            restore(cache, dummy, kept)
        logits = _logits(out, self.extra_column)
        if order is not None:
            logits = logits.index_select(0, order)
        if state.pending is not None:
            logits = torch.where(state.pending[:, None], state.first, logits)
        return logits, CausalState(cache, mask, state.positions + fed, t + 1, state.furthest + 1, None,
                                   None, state.source, order)

    def forward(self, cache: Any, **inputs: Any) -> tuple[Any, Any]:
        """The model's forward on ``inputs`` with ``cache`` (timed and counted): its output and the
        cache after it (a state outside a ``Cache`` handed in and read back by its carrier)."""
        carrier = self.carrier
        if carrier is None:
            out = _timed(self.prepared, self.model, **inputs, **{self.cache_kw: cache})
            return out, cache_of(out)
        return carrier.forward(lambda **kw: _timed(self.prepared, self.model, **kw), self.model, cache, inputs)


class SharedCausalStep(CausalStep):
    """The step of ``causal_lm(..., share_prompt=True)``: the state's cache is a
    :class:`~beamsearch.hf.shared.SharedPromptCache` (its columns are the rows' own, the mask
    covers them alone) and the model's attention reads the prompts through
    :func:`~beamsearch.hf.shared.shared_prompt_attention` (always given a ready 4-D mask)."""

    def forward(self, cache: Any, **inputs: Any) -> tuple[Any, Any]:
        with shared_attention(self.model):
            out = _timed(self.prepared, self.model, **inputs, shared_prompt=cache.shared, **{self.cache_kw: cache})
        return out, cache_of(out)


@inference
def seq2seq_lm(model: Any, sources: Any, *, attention_mask: Any = None, tokenizer: Any = None,
               pad_token_id: int | None = None, eos_token_id: Any = "model",
               decoder_start_token_id: int | None = None, max_new_tokens: int | None = None) -> Prepared:
    """Prepare an encoder-decoder ``transformers`` model (BART, T5, Marian, ...) for the search.

    The encoder runs once here, one row per source; each step feeds one decoder token per row.
    ``sources`` and the other arguments as for :func:`causal_lm` (a source tensor ``[N, S]`` may
    be padded on either side); ``decoder_start_token_id`` defaults to the model's.
    """
    rows = input_rows(sources, attention_mask, tokenizer, "sources")
    in_vocab(model, rows, "sources")
    in_eval_mode(model)
    pad = pad_id(model, pad_token_id)
    eos, extra = search_eos(model, eos_token_id)
    start = decoder_start_token_id
    if start is None:
        start = model.generation_config.decoder_start_token_id
    if start is None:
        raise ValueError("decoder_start_token_id is None: pass it, or set it in the model's generation config")
    start = check.token("decoder_start_token_id", start)
    if max_new_tokens is not None:
        check.at_least("max_new_tokens", max_new_tokens, 1)
    check_positions(model, max(len(r) for r in rows), "sources", max_new_tokens, decoder_start=True)
    device = next(model.parameters()).device
    ids, mask = right_padded(rows, pad, device)
    prepared = Prepared(None, None, [[start] for _ in rows], eos)
    t0 = time.perf_counter()
    hidden = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
    prepared.forward_seconds += time.perf_counter() - t0
    prepared.forward_calls += 1
    cache = EncoderDecoderCache(adapter_cache(model, DeferredLayer), DynamicCache(config=model.config))
    prepared.init_state = Seq2SeqState(cache, hidden, mask, 0, torch.arange(len(rows), device=device))
    prepared.step = Seq2SeqStep(prepared, model, extra, mask_ready(model, cache.self_attention_cache))
    return prepared


class Seq2SeqStep(AdapterStep):
    """The ``step`` of :func:`seq2seq_lm`'s :class:`~beamsearch.hf.states.Prepared`, on a
    :class:`~beamsearch.hf.states.Seq2SeqState` (see :class:`AdapterStep`).

    Attributes:
        can_join, table: what a joined state needs, read once: whether the decoder's positions can
            be given per row (:func:`~beamsearch.hf.states.joinable`), and its position table
            (:func:`~beamsearch.hf.states.position_table`).
        every: bool ``[1, 1, 1, 1]``, True: the decoder mask where no column is padding.
    """

    def __init__(self, prepared: Prepared, model: Any, extra_column: bool, ready: bool) -> None:
        super().__init__(prepared, model, extra_column, ready)
        self.can_join, self.table = joinable(model), position_table(model)
        self.every = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=next(model.parameters()).device)
        self._wrapped: BaseModelOutput | None = None

    def encoded(self, hidden: torch.Tensor) -> BaseModelOutput:
        """The encoder output ``hidden`` ``[k, S, d]`` as the model's forward takes it, made once per
        tensor (the model would wrap a bare tensor at every step)."""
        if self._wrapped is None or self._wrapped.last_hidden_state is not hidden:
            self._wrapped = BaseModelOutput(last_hidden_state=hidden)
        return self._wrapped

    @inference
    def __call__(self, state: Seq2SeqState, y_prev: torch.Tensor) -> tuple[torch.Tensor, Seq2SeqState]:
        """The next decoder token's logits for every row, and the state with ``y_prev`` fed.

        Args:
            state: the rows' state, ``k`` rows.
            y_prev: int64 ``[k]``, each row's last token (the decoder start token at the first
                call), fed into decoder cache column ``state.fed``; at each row's own position
                when the rows come from searches joined at different steps.

        Returns:
            (float32 logits ``[k, V']``, the new state): the model extended the cache in place.

        Raises:
            ValueError: a second search from a used state, or a token beyond the model's positions.
            TypeError: rows at different steps of a model whose decoder positions cannot be given
                per row.
        """
        limit, ready = self.limit, self.ready
        if limit is not None and state.fed >= limit and (state.positions is None or int(state.positions.max()) >= limit):
            at = state.fed if state.positions is None else int(state.positions.max())
            raise ValueError(f"the search asks for a decoder token at position {at}, beyond the model's "
                             f"{limit} positions: lower max_steps")
        encoder_mask = as_4d(state.encoder_mask) if ready else state.encoder_mask
        if state.fed == 0:
            _unconsumed(state.cache, 0)
        if state.mask is None or state.positions is None:  # every row has fed the same tokens
            own = {"decoder_attention_mask": self.every.expand(len(y_prev), 1, 1, state.fed + 1)} if ready else {}
            out = _timed(self.prepared, self.model, encoder_outputs=self.encoded(state.encoder_hidden),
                         attention_mask=encoder_mask, decoder_input_ids=y_prev[:, None], **own,
                         **{self.cache_kw: state.cache})
            return _logits(out, self.extra_column), state._replace(cache=cache_of(out), fed=state.fed + 1)
        if not self.can_join:
            raise TypeError(f"rows of {type(self.model).__name__} at different steps cannot share a call: its "
                            "decoder positions cannot be given per row (decode it in fixed batches)")
        t, mask = state.fed, state.mask
        if t == mask.shape[1]:  # out of allocated columns: grow once per C
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], _CAPACITY)], dim=1)
        with RowPositions(self.table, state.positions):
            attend = as_4d(mask[:, : t + 1]) if ready else mask[:, : t + 1]
            out = _timed(self.prepared, self.model, encoder_outputs=self.encoded(state.encoder_hidden),
                         attention_mask=encoder_mask, decoder_input_ids=y_prev[:, None],
                         decoder_attention_mask=attend, **{self.cache_kw: state.cache})
        return _logits(out, self.extra_column), state._replace(cache=cache_of(out), fed=t + 1, mask=mask,
                                                               positions=state.positions + 1)
