"""What the adapters' step objects share (:class:`AdapterStep`) and the helpers of their model
calls: the forward timed and counted (:func:`timed`), the last position's logits
(:func:`last_logits`), the adapter's cache (:func:`adapter_cache`) and a used state refused
(:func:`unconsumed`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from beamsearch.hf.caches import cache_keyword
from beamsearch.hf.carried import carrier_for
from beamsearch.hf.image_decoders import ADDITIVE_TYPES, additive_mask
from beamsearch.hf.inputs import position_limit
from beamsearch.hf.positions import as_4d
from beamsearch.hf.recurrent import cache_length
from beamsearch.hf.states import Prepared

__all__ = ["CAPACITY", "AdapterStep", "adapter_cache", "keeps_prompt", "last_logits", "timed", "unconsumed"]


def unconsumed(cache: Any, columns: int) -> None:
    """Refuse a search from a :class:`Prepared` state that an earlier search has used: the model
    extended its cache in place (it holds more than the ``columns`` the state starts from)."""
    if cache_length(cache) != columns:
        raise ValueError("this Prepared was used by a search already: the model extended its KV cache in place, "
                         "so it cannot start another; prepare the inputs again (hf.causal_lm / hf.seq2seq_lm)")


def timed(prepared: Prepared, model: Any, **inputs: Any) -> Any:
    """``model(**inputs)`` with the cache on, its time and call counted on ``prepared``."""
    start = time.perf_counter()
    out = model(**inputs, use_cache=True, return_dict=True)
    prepared.forward_seconds += time.perf_counter() - start
    prepared.forward_calls += 1
    return out


def last_logits(out: Any, extra_column: bool) -> torch.Tensor:
    """The last position's logits of a forward's output, float32 ``[k, V]`` (``[k, V + 1]`` with
    ``extra_column``: a -inf column for an eos the model never produces)."""
    logits = out.logits[:, -1, :].to(dtype=torch.float32)  # --> [k, V], as generate scores them
    if extra_column:  # an eos the model never produces: one -inf column at index V
        logits = torch.cat([logits, logits.new_full((logits.shape[0], 1), float("-inf"))], dim=1)
    return logits


CAPACITY = 64  # generated-token columns allocated at once when max_new_tokens is not given


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
    state)`` is a subclass's ``__call__`` (:class:`~beamsearch.hf.adapters.CausalStep`,
    :class:`~beamsearch.hf.seq2seq.Seq2SeqStep`).

    Attributes:
        prepared: the :class:`~beamsearch.hf.states.Prepared` whose forward time and calls it counts.
        model: the causal LM or the encoder-decoder.
        extra_column: the search's eos is one the model never produces: the logits get one more
            column, V, always -inf.
        ready: the steps pass the model 4-D masks themselves (:func:`~beamsearch.hf.positions.mask_ready`).
        limit: the model's positions (:func:`~beamsearch.hf.inputs.position_limit`), or None.
        cache_kw: the forward's name for the KV cache argument.
        carrier: how a model whose state is not a ``Cache`` it returns takes and gives it back
            (:func:`~beamsearch.hf.carried.carrier_for`), or None.
        additive: the steps pass a 4-D additive mask (GIT, whose forward would widen a 2-D one
            over its image columns: :mod:`beamsearch.hf.image_decoders`).
    """

    def __init__(self, prepared: Prepared, model: Any, extra_column: bool, ready: bool) -> None:
        self.prepared, self.model, self.extra_column, self.ready = prepared, model, extra_column, ready
        self.limit = position_limit(model)
        self.cache_kw = cache_keyword(model)
        self.carrier = carrier_for(model)
        self.additive = model.config.model_type in ADDITIVE_TYPES

    def attend(self, mask: torch.Tensor) -> torch.Tensor:
        """A step's attention mask from the rows' int64 ``[k, L]`` (1 on attended columns): the
        mask itself, a ready 4-D boolean one (``ready``) or a 4-D additive one (``additive``)."""
        if self.additive:
            return additive_mask(mask, next(self.model.parameters()).dtype)
        return as_4d(mask) if self.ready else mask
