"""The encoder-decoder adapter: :func:`seq2seq_lm` runs the source through the encoder once and
returns a :class:`~beamsearch.hf.states.Prepared` whose ``step`` is a :class:`Seq2SeqStep` (one
decoder token per row per call); the decoder-only adapter is :mod:`beamsearch.hf.adapters`.
"""
from __future__ import annotations

import time
from typing import Any, cast

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from beamsearch.core import validate as check
from beamsearch.core.state import select_state, take_state
from beamsearch.hf.adapter_step import CAPACITY, AdapterStep, adapter_cache, last_logits, timed, unconsumed
from beamsearch.hf.caches import DeferredLayer, cache_of, inference
from beamsearch.hf.inputs import check_positions, in_eval_mode, in_vocab, input_rows, pad_id, right_padded, search_eos
from beamsearch.hf.multimodal import decoder_rows, encoded, inputs_count
from beamsearch.hf.positions import RowPositions, as_4d, joinable, mask_ready, position_table
from beamsearch.hf.states import Prepared, Seq2SeqState


@inference
def seq2seq_lm(model: Any, sources: Any, *, attention_mask: Any = None, tokenizer: Any = None,
               pad_token_id: int | None = None, eos_token_id: Any = "model",
               decoder_start_token_id: int | None = None, max_new_tokens: int | None = None,
               decoder_input_ids: Any = None, **model_inputs: Any) -> Prepared:
    """Prepare an encoder-decoder ``transformers`` model (BART, T5, Marian, Whisper, ...) for the search.

    The encoder runs once here, one row per source; each step feeds one decoder token per row.
    ``sources`` and the other arguments as for :func:`causal_lm` (a source tensor ``[N, S]`` may
    be padded on either side); ``decoder_start_token_id`` defaults to the model's.

    Args:
        sources: as for :func:`causal_lm`'s prompts, or None for a model that reads features
            alone (Whisper, Speech2Text, Pix2Struct, ``VisionEncoderDecoderModel``): N is then the
            first axis of its main input in ``model_inputs``, and ``attention_mask`` is theirs.
        decoder_input_ids: each input's decoder prompt, N token lists of one length D >= 1 (or a
            tensor ``[N, D]``), fed before the search's first token (default: the decoder start
            token alone); ``prepared.prompts`` holds them.
        **model_inputs: the encoder's other inputs, as the processor gives them
            (``input_features``, ``pixel_values``, ``flattened_patches``, the features'
            ``attention_mask`` when ``sources`` is None, ...; :mod:`beamsearch.hf.multimodal`),
            encoded once per input as ``generate`` encodes them.
    """
    if sources is None and attention_mask is not None:  # the features' mask
        model_inputs["attention_mask"] = attention_mask
    rows = None if sources is None else input_rows(sources, attention_mask, tokenizer, "sources")
    n = inputs_count(model, rows, model_inputs)
    if rows is not None:
        in_vocab(model, rows, "sources")
    in_eval_mode(model)
    pad = pad_id(model, pad_token_id)
    eos, extra = search_eos(model, eos_token_id)
    start = decoder_start_token_id
    if start is None:
        start = model.generation_config.decoder_start_token_id
    if start is None and decoder_input_ids is None:
        raise ValueError("decoder_start_token_id is None: pass it, or set it in the model's generation config")
    prompts = [[check.token("decoder_start_token_id", start)]] * n if decoder_input_ids is None else \
        decoder_rows(decoder_input_ids, n)
    if max_new_tokens is not None:
        check.at_least("max_new_tokens", max_new_tokens, 1)
    if rows is not None:
        check_positions(model, max(len(r) for r in rows), "sources", max_new_tokens, decoder_start=True)
    device = next(model.parameters()).device
    ids, mask = right_padded(rows, pad, device) if rows is not None else (None, None)
    prepared = Prepared(None, None, prompts, eos)
    t0 = time.perf_counter()
    # no sources (ids None), or the model's own encoding (Florence-2 merges its image into the text)
    if model_inputs or ids is None or mask is None:
        hidden, encoder_mask, passed, output_class = encoded(model, ids, mask, model_inputs)
    else:
        # (transformers types every output field Optional; an encoder's last_hidden_state is always set)
        hidden = cast(torch.Tensor, model.get_encoder()(input_ids=ids, attention_mask=mask,
                                                        return_dict=True).last_hidden_state)
        encoder_mask, passed, output_class = mask, True, None
    prepared.forward_seconds += time.perf_counter() - t0
    prepared.forward_calls += 1
    cache = EncoderDecoderCache(adapter_cache(model, DeferredLayer), DynamicCache(config=model.config))
    prepared.init_state = Seq2SeqState(cache, hidden, encoder_mask, 0, torch.arange(n, device=device))
    prepared.step = Seq2SeqStep(prepared, model, extra, mask_ready(model, cache.self_attention_cache))
    prepared.step.pass_mask, prepared.step.output_class = passed, output_class
    if len(prompts[0]) > 1:  # the decoder prompt but its last token, fed at once (the first step feeds that)
        prepared.init_state = prepared.step.prefill(prepared.init_state, torch.tensor(prompts, device=device)[:, :-1])
    return prepared


class Seq2SeqStep(AdapterStep):
    """The ``step`` of :func:`seq2seq_lm`'s :class:`~beamsearch.hf.states.Prepared`, on a
    :class:`~beamsearch.hf.states.Seq2SeqState` (see :class:`AdapterStep`).

    Attributes:
        can_join, table: what a joined state needs, read once: whether the decoder's positions can
            be given per row (:func:`~beamsearch.hf.positions.joinable`), and its position table
            (:func:`~beamsearch.hf.states.position_table`).
        every: bool ``[1, 1, 1, 1]``, True: the decoder mask where no column is padding.
    """

    def __init__(self, prepared: Prepared, model: Any, extra_column: bool, ready: bool) -> None:
        super().__init__(prepared, model, extra_column, ready)
        self.can_join, self.table = joinable(model), position_table(model)
        self.every = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=next(model.parameters()).device)
        self._wrapped: BaseModelOutput | None = None
        self.pass_mask = True  # False: the encoder's features came without a mask, and generate passes none
        self.output_class: type | None = None  # an encoder output class holding the decoder's mask (Moonshine's)

    @inference
    def prefill(self, state: Seq2SeqState, prefix: torch.Tensor) -> Seq2SeqState:
        """``state`` with the decoder prompts' tokens ``prefix`` (int64 ``[k, D-1]``, the same
        length in every row) fed in one call."""
        encoded = self.encoded(state.encoder_hidden, state.encoder_mask)
        out = timed(self.prepared, self.model, encoder_outputs=encoded,
                     attention_mask=state.encoder_mask if self.pass_mask else None, decoder_input_ids=prefix,
                     **{self.cache_kw: state.cache})
        return state._replace(cache=cache_of(out), fed=state.fed + prefix.shape[1])

    def encoded(self, hidden: torch.Tensor, mask: torch.Tensor) -> BaseModelOutput:
        """The encoder output ``hidden`` ``[k, S, d]`` as the model's forward takes it, made once per
        tensor (the model would wrap a bare tensor at every step); a model whose decoder reads the
        mask ``[k, S]`` from that output (Moonshine) finds it there (None where none was given)."""
        if self.output_class is None:
            if self._wrapped is None or self._wrapped.last_hidden_state is not hidden:
                self._wrapped = BaseModelOutput(last_hidden_state=hidden)
            return self._wrapped
        own = mask if self.pass_mask else None
        if self._wrapped is None or self._wrapped.last_hidden_state is not hidden or \
                getattr(self._wrapped, "attention_mask", None) is not own:
            self._wrapped = self.output_class(last_hidden_state=hidden, attention_mask=own)
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
        if limit is not None and state.fed >= limit and (state.positions is None
                                                         or int(state.positions.max()) >= limit):
            at = state.fed if state.positions is None else int(state.positions.max())
            raise ValueError(f"the search asks for a decoder token at position {at}, beyond the model's "
                             f"{limit} positions: lower max_steps")
        encoder_mask = (as_4d(state.encoder_mask) if ready else state.encoder_mask) if self.pass_mask else None
        encoded = self.encoded(state.encoder_hidden, state.encoder_mask)
        if state.fed == 0:
            unconsumed(state.cache, 0)
        if state.mask is None or state.positions is None:  # every row has fed the same tokens
            own = {"decoder_attention_mask": self.every.expand(len(y_prev), 1, 1, state.fed + 1)} if ready else {}
            out = timed(self.prepared, self.model, encoder_outputs=encoded,
                         attention_mask=encoder_mask, decoder_input_ids=y_prev[:, None], **own,
                         **{self.cache_kw: state.cache})
            return last_logits(out, self.extra_column), state._replace(cache=cache_of(out), fed=state.fed + 1)
        if not self.can_join:
            raise TypeError(f"rows of {type(self.model).__name__} at different steps cannot share a call: its "
                            "decoder positions cannot be given per row (decode it in fixed batches)")
        t, mask = state.fed, state.mask
        if t == mask.shape[1]:  # out of allocated columns: grow once per C
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], CAPACITY)], dim=1)
        with RowPositions(self.table, state.positions):
            attend = as_4d(mask[:, : t + 1]) if ready else mask[:, : t + 1]
            out = timed(self.prepared, self.model, encoder_outputs=encoded,
                         attention_mask=encoder_mask, decoder_input_ids=y_prev[:, None],
                         decoder_attention_mask=attend, **{self.cache_kw: state.cache})
        return last_logits(out, self.extra_column), state._replace(cache=cache_of(out), fed=t + 1, mask=mask,
                                                               positions=state.positions + 1)


@take_state.register(Seq2SeqState)
@inference
def _take_seq2seq_state(state: Seq2SeqState, idx: Any) -> Seq2SeqState:
    """Rows ``idx`` of :func:`seq2seq_lm`'s state in a new state, ``state`` left as it was: both
    caches' rows gathered into new tensors (a cache's selection builds a new cache), the encoder
    side and the decoder mask and positions taken likewise (so a call of exact search's step
    copies its own rows, not the step's)."""
    idx = torch.as_tensor(idx, device=state.encoder_mask.device)
    taken = [None if x is None else x.index_select(0, idx) for x in (state.mask, state.positions)]
    return Seq2SeqState(select_state(state.cache, idx), state.encoder_hidden.index_select(0, idx),
                        state.encoder_mask.index_select(0, idx), state.fed, state.source.index_select(0, idx), *taken)
