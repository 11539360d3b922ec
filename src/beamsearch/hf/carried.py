"""Models whose state is not (all) in a ``transformers`` ``Cache``: RWKV (its forward takes and
returns ``state``, five tensors ``[k, hidden, layers]``), xLSTM (its own ``xLSTMCache``, per layer
three tensors ``[k, heads, ...]``) and RecurrentGemma (its recurrent blocks keep their convolution
and recurrence states on the modules; its attention layers use an ordinary cache). Each is
carried in a :class:`CarriedCache`, a ``DynamicCache`` (the attention layers, when the model has
any) whose ``carried`` tensors, rows on axis 0, are registered as its extra row tensors
(:func:`beamsearch.hf.recurrent.register_extras`): the search reorders, copies and joins them
with the cache. A :class:`Carrier` hands them to the model before each forward and reads them
back after it.

None of these models reads an attention mask in its recurrence (RWKV and xLSTM take none;
RecurrentGemma's convolution runs over padding), so their prompts are never padded: the adapter
runs each length's prompts together and joins the states
(:data:`beamsearch.hf.recurrent.UNPADDED_TYPES`).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from beamsearch.hf.recurrent import Extras, register_extras


class CarriedCache(DynamicCache):
    """A cache holding, beside its (attention) layers, the row tensors ``carried`` of a model that
    keeps its state elsewhere, and ``tokens``, the tokens fed (its length when it has no layers)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config=config)
        self.carried: list[torch.Tensor] = []  # each [k, ...]
        self.tokens = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return super().get_seq_length(layer_idx) if self.layers else self.tokens


def _carried_put(cache: CarriedCache, tensors: list[torch.Tensor | None]) -> None:
    cache.carried = [t for t in tensors if t is not None]


register_extras(CarriedCache, Extras(lambda cache: list(cache.carried), _carried_put))


class Carrier:
    """How one model family's state goes in and out of its forward (a subclass per family).

    Attributes:
        keyword: the forward's argument for the state.
    """

    keyword = "cache"

    def empty(self, model: Any) -> CarriedCache:
        """The cache a prefill starts from."""
        return CarriedCache()

    def give(self, model: Any, cache: CarriedCache) -> Any:
        """What the forward takes as ``keyword`` for the state held in ``cache``."""
        raise NotImplementedError

    def read(self, model: Any, cache: CarriedCache, out: Any, fed: int) -> CarriedCache:
        """``cache`` holding the state after the forward whose output is ``out`` (``fed``: its tokens per row)."""
        raise NotImplementedError

    def forward(self, call: Callable[..., Any], model: Any, cache: CarriedCache,
                inputs: dict[str, Any]) -> tuple[Any, CarriedCache]:
        """``call(**inputs, keyword=state)`` (the model's forward) on the state in ``cache``: its
        output and ``cache`` holding the state after it."""
        out = call(**inputs, **{self.keyword: self.give(model, cache)})
        return out, self.read(model, cache, out, inputs["input_ids"].shape[1])


class RwkvCarrier(Carrier):
    """RWKV: five tensors ``[k, hidden, layers]`` (the model writes into them in place).

    Its one-token step broadcasts each row's previous hidden state ``[k, hidden]`` against the
    tokens' ``[k, 1, hidden]`` (transformers 5.25): with more than one row every row reads every
    other's. A step of several rows therefore runs each row alone (prefills of several tokens
    are right batched)."""

    keyword = "state"

    def forward(self, call: Callable[..., Any], model: Any, cache: CarriedCache,
                inputs: dict[str, Any]) -> tuple[Any, CarriedCache]:
        k = inputs["input_ids"].shape[0]
        if inputs["input_ids"].shape[1] > 1 or k == 1 or not cache.carried:
            return super().forward(call, model, cache, inputs)
        outs = [call(**{name: value[r: r + 1] if isinstance(value, torch.Tensor) else value
                        for name, value in inputs.items()}, state=[t[r: r + 1] for t in cache.carried])
                for r in range(k)]
        cache.carried = [torch.cat([o.state[j] for o in outs]) for j in range(len(cache.carried))]
        cache.tokens += 1
        return SimpleNamespace(logits=torch.cat([o.logits for o in outs])), cache

    def give(self, model: Any, cache: CarriedCache) -> Any:
        return list(cache.carried) if cache.carried else None

    def read(self, model: Any, cache: CarriedCache, out: Any, fed: int) -> CarriedCache:
        cache.carried, cache.tokens = list(out.state), cache.tokens + fed
        return cache


class XlstmCarrier(Carrier):
    """xLSTM: its ``xLSTMCache``'s ``rnn_state``, per layer three tensors ``[k, heads, ...]``,
    flattened layer-major."""

    def give(self, model: Any, cache: CarriedCache) -> Any:
        if not cache.carried:
            return None
        from transformers.models.xlstm.modeling_xlstm import xLSTMCache

        inner = xLSTMCache.__new__(xLSTMCache)  # the tensors are ours: no zeros allocated to be replaced
        inner.config, inner.dtype = model.config, cache.carried[0].dtype
        inner.seqlen_offset = torch.tensor([cache.tokens], dtype=torch.long, device=cache.carried[0].device)
        c = cache.carried
        inner.rnn_state = {layer: (c[3 * layer], c[3 * layer + 1], c[3 * layer + 2]) for layer in range(len(c) // 3)}
        return inner

    def read(self, model: Any, cache: CarriedCache, out: Any, fed: int) -> CarriedCache:
        state = out.cache.rnn_state
        cache.carried = [t for layer in sorted(state) for t in state[layer]]
        cache.tokens += fed
        return cache


class RecurrentGemmaCarrier(Carrier):
    """RecurrentGemma: each recurrent block's ``conv1d_state`` ``[k, hidden, width - 1]`` and its
    RG-LRU's ``recurrent_states`` ``[k, lru_width]``, set on the modules before each forward and
    read back after it; its attention layers in the cache itself."""

    def empty(self, model: Any) -> CarriedCache:
        return CarriedCache(config=model.config)

    @staticmethod
    def _blocks(model: Any) -> list[Any]:
        return [layer.temporal_block for layer in model.model.layers if hasattr(layer.temporal_block, "rg_lru")]

    def give(self, model: Any, cache: CarriedCache) -> Any:
        blocks = self._blocks(model)
        if cache.carried:
            for block, conv, rec in zip(blocks, cache.carried[0::2], cache.carried[1::2], strict=True):
                block.conv1d_state, block.rg_lru.recurrent_states = conv, rec
        else:  # a prefill: the blocks start from zeros (their forward allocates them)
            for block in blocks:
                block.conv1d_state = block.rg_lru.recurrent_states = None
        return cache

    def read(self, model: Any, cache: CarriedCache, out: Any, fed: int) -> CarriedCache:
        cache.carried = [t for block in self._blocks(model)
                         for t in (block.conv1d_state, block.rg_lru.recurrent_states)]
        for block in self._blocks(model):  # the model keeps no reference to the search's tensors
            block.conv1d_state = block.rg_lru.recurrent_states = None
        cache.tokens += fed
        return cache


CARRIERS: dict[str, Carrier] = {"rwkv": RwkvCarrier(), "xlstm": XlstmCarrier(),
                                "recurrent_gemma": RecurrentGemmaCarrier()}
"""The carriers, by model type."""


def carrier_for(model: Any) -> Carrier | None:
    """The :class:`Carrier` of ``model``'s type, or None (its state is a ``Cache`` it returns)."""
    return CARRIERS.get(model.config.model_type)

