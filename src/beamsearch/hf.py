"""Decode Hugging Face ``transformers`` models with beamsearch (``pip install 'beamsearch[hf]'``).

Importing this module registers ``select_state`` for the library's cache classes
(``DynamicCache``, ``EncoderDecoderCache``), so the search reorders a model's KV cache row by
row like any other state, and rows of inputs that have stopped simply leave the cache.

``causal_lm(model, prompts)`` and ``seq2seq_lm(model, sources)`` return a :class:`Prepared`: the
``init_state``, ``step`` and ``prompts`` that :func:`beamsearch.beam_search_batch` takes, and the
``eos_token_id`` to search with::

    dec = causal_lm(model, [[5, 6, 7], [8]])
    results = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                max_steps=32, beam_size=4)

The prompt (all of it) is run through the model once, in ``causal_lm``, exactly as
``generate`` runs it: the first ``step`` returns the logits of the prompt's last position, and
every later step feeds one token per row with the growing attention mask and the positions
that left padding implies.
"""

from __future__ import annotations

import copy
import inspect
import time
import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from beamsearch import _validate as check
from beamsearch._state import select_state

__all__ = ["Prepared", "causal_lm", "seq2seq_lm"]


@select_state.register(DynamicCache)
def _select_dynamic_cache(cache: DynamicCache, idx: Any) -> DynamicCache:
    """A new cache whose every layer holds rows ``idx`` of the old one's keys and values."""
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        layer_: Any = layer
        if not hasattr(layer_, "keys"):
            raise TypeError(f"select_state: cache layers of type {type(layer_).__name__} (no keys/values) are "
                            "not supported; register a function for them with select_state.register")
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
    """

    init_state: Any
    step: Any
    prompts: list[list[int]]
    eos_token_id: int | list[int]
    forward_seconds: float = 0.0
    forward_calls: int = 0


class CausalState(NamedTuple):
    cache: DynamicCache  # per layer, keys and values [k, heads, t, dh]
    mask: torch.Tensor  # int64 [k, t]: 1 for real tokens (left padding is 0)
    first: torch.Tensor | None  # float [k, V]: logits of the prompt's last position, until used


class Seq2SeqState(NamedTuple):
    cache: EncoderDecoderCache
    encoder_hidden: torch.Tensor  # float [k, S, d]
    encoder_mask: torch.Tensor  # int64 [k, S]


def _ids(prompts: Sequence[Sequence[int]] | Sequence[str], tokenizer: Any, name: str) -> list[list[int]]:
    """Each input's token ids; refuses an empty batch and an empty input, naming ``name``."""
    if isinstance(prompts, str) or len(prompts) == 0:
        raise ValueError(f"{name} must hold at least one input (a list of token-id lists or strings); "
                         f"got {prompts!r:.80}")
    if isinstance(prompts[0], str):
        if tokenizer is None:
            raise ValueError(f"{name} are strings: pass the model's tokenizer")
        rows = [list(tokenizer(text)["input_ids"]) for text in prompts]
    else:
        rows = [[int(t) for t in p] for p in prompts]
    empty = [i for i, r in enumerate(rows) if not r]
    if empty:
        raise ValueError(f"{name}[{empty[0]}] is empty: every input needs at least one token")
    return rows


def _in_eval_mode(model: Any) -> None:
    """A model left in training mode (dropout on) decodes differently on every call: say so."""
    if getattr(model, "training", False):
        warnings.warn("the model is in training mode (dropout is on), so decoding is not deterministic: "
                      "call model.eval() first", stacklevel=3)


def _padded(rows: list[list[int]], pad: int, device: Any, *, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ids int64 ``[N, P]`` padded on the left (causal LM) or the right (encoder), mask ``[N, P]``."""
    width = max(len(r) for r in rows)
    fill = [width - len(r) for r in rows]
    ids = [[pad] * f + r if left else r + [pad] * f for r, f in zip(rows, fill)]
    mask = [[0] * f + [1] * len(r) if left else [1] * len(r) + [0] * f for r, f in zip(rows, fill)]
    return torch.tensor(ids, device=device), torch.tensor(mask, device=device)


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


def _timed(prepared: Prepared, model: Any, **inputs: Any) -> Any:
    start = time.perf_counter()
    out = model(**inputs, use_cache=True, return_dict=True)
    prepared.forward_seconds += time.perf_counter() - start
    prepared.forward_calls += 1
    return out


def _cache_of(out: Any) -> Any:
    """The model output's KV cache (``cache`` in newer releases, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return out.past_key_values if cache is None else cache


def _logits(out: Any, extra_column: bool) -> torch.Tensor:
    logits = out.logits[:, -1, :].to(dtype=torch.float32)  # --> [k, V], as generate scores them
    if extra_column:  # an eos the model never produces: one -inf column at index V
        logits = torch.cat([logits, logits.new_full((logits.shape[0], 1), float("-inf"))], dim=1)
    return logits


@torch.no_grad()
def causal_lm(model: Any, prompts: Sequence[Sequence[int]] | Sequence[str], *, tokenizer: Any = None,
              pad_token_id: int | None = None, eos_token_id: Any = "model") -> Prepared:
    """Prepare a decoder-only ``transformers`` model (GPT-2 and the like) for the search.

    Args:
        model: a causal LM, in eval mode.
        prompts: token-id lists (or strings, with ``tokenizer``), of different lengths, each >= 1
            token.
        pad_token_id: fills the left padding (default: the model's, or 0); masked out.
        eos_token_id: ``"model"`` (the model's generation config: one id or all of its list), an
            id, a list of ids, or None for a search that never finishes a hypothesis (eos becomes
            an extra, always masked, column V).

    Returns:
        A :class:`Prepared`; pass ``prepared.prompts`` as ``prompts``.
    """
    rows = _ids(prompts, tokenizer, "prompts")
    _in_eval_mode(model)
    pad = pad_token_id if pad_token_id is not None else (model.generation_config.pad_token_id or 0)
    eos, extra = _eos(model, eos_token_id)
    device = next(model.parameters()).device
    ids, mask = _padded(rows, pad, device, left=True)
    prepared = Prepared(None, None, rows, eos)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    # only the last position's logits are needed: [N, 1, V], not [N, P, V] (as generate does)
    out = _timed(prepared, model, input_ids=ids, attention_mask=mask, position_ids=positions, **keep)
    prepared.init_state = CausalState(_cache_of(out), mask, _logits(out, extra))

    @torch.no_grad()
    def step(state: CausalState, y_prev: torch.Tensor) -> tuple[torch.Tensor, CausalState]:
        if state.first is not None:  # the prompt's last position was scored by the prefill
            return state.first, state._replace(first=None)
        attention = torch.cat([state.mask, state.mask.new_ones(state.mask.shape[0], 1)], dim=1)
        position = attention.sum(dim=1, keepdim=True) - 1  # --> [k, 1]
        out = _timed(prepared, model, input_ids=y_prev[:, None], attention_mask=attention,
                     position_ids=position, past_key_values=state.cache)
        return _logits(out, extra), CausalState(_cache_of(out), attention, None)

    prepared.step = step
    return prepared


@torch.no_grad()
def seq2seq_lm(model: Any, sources: Sequence[Sequence[int]] | Sequence[str], *, tokenizer: Any = None,
               pad_token_id: int | None = None, eos_token_id: Any = "model",
               decoder_start_token_id: int | None = None) -> Prepared:
    """Prepare an encoder-decoder ``transformers`` model (BART, T5, ...) for the search.

    The encoder runs once here; each step feeds one decoder token per row. Arguments as for
    :func:`causal_lm`; ``decoder_start_token_id`` defaults to the model's.
    """
    rows = _ids(sources, tokenizer, "sources")
    _in_eval_mode(model)
    pad = pad_token_id if pad_token_id is not None else (model.generation_config.pad_token_id or 0)
    eos, extra = _eos(model, eos_token_id)
    start = decoder_start_token_id
    if start is None:
        start = model.generation_config.decoder_start_token_id
    if start is None:
        raise ValueError("decoder_start_token_id is None: pass it, or set it in the model's generation config")
    device = next(model.parameters()).device
    ids, mask = _padded(rows, pad, device, left=False)
    prepared = Prepared(None, None, [[int(start)] for _ in rows], eos)
    t0 = time.perf_counter()
    hidden = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
    prepared.forward_seconds += time.perf_counter() - t0
    prepared.forward_calls += 1
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    prepared.init_state = Seq2SeqState(cache, hidden, mask)

    @torch.no_grad()
    def step(state: Seq2SeqState, y_prev: torch.Tensor) -> tuple[torch.Tensor, Seq2SeqState]:
        out = _timed(prepared, model, encoder_outputs=(state.encoder_hidden,), attention_mask=state.encoder_mask,
                     decoder_input_ids=y_prev[:, None], past_key_values=state.cache)
        return _logits(out, extra), Seq2SeqState(_cache_of(out), state.encoder_hidden, state.encoder_mask)

    prepared.step = step
    return prepared

