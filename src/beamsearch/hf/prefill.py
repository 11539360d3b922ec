"""The prefill :func:`beamsearch.hf.generate` runs: the adapter a model takes (:func:`causal_lm` or
:func:`seq2seq_lm`) called with the generation config's ids and cache.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GenerationConfig

from beamsearch.hf.adapters import causal_lm, state_outside_a_static_cache
from beamsearch.hf.seq2seq import seq2seq_lm
from beamsearch.hf.states import Prepared

__all__ = ["STATIC_IMPLEMENTATIONS", "prefill", "static_keywords"]


STATIC_IMPLEMENTATIONS = ("static", "sliding_window", "hybrid", "hybrid_chunked")
"""The ``cache_implementation`` values ``generate`` makes a ``StaticCache`` for (its deprecated names
included; the offloaded ones keep the adapter's dynamic cache: the same results)."""


def static_keywords(model: Any, cfg: GenerationConfig, rows: list[list[int]], new_tokens: int) -> dict[str, Any]:
    """:func:`causal_lm`'s keywords for the generation config's cache: a ``StaticCache`` where
    ``generate`` makes one and the model keeps its state in a ``Cache`` (not RWKV, xLSTM,
    RecurrentGemma, MiniMax, GIT: their own, the same results; nor with ``share_prompt_cache``,
    whose prompt cache is its own), sized as ``generate`` sizes it (the padded prompt plus the new
    tokens but one, or the config's ``max_cache_len`` when longer)."""
    if cfg.cache_implementation not in STATIC_IMPLEMENTATIONS or state_outside_a_static_cache(model) is not None:
        return {}
    need = max(len(r) for r in rows) + new_tokens - 1
    return {"cache_implementation": "static", "max_cache_len": max(need, getattr(cfg, "max_cache_len", None) or 0)}


def prefill(model: Any, cfg: Any, given: Any, rows: list[list[int]], max_new_tokens: int, share_prompt: bool,
              media: dict[str, Any]) -> Prepared:
    """The adapter's prefill of ``given`` (the rows, or None for a model reading media only):
    :func:`seq2seq_lm` from the config's decoder start (else bos, as ``generate``), or
    :func:`causal_lm`, its prompt cache shared or static where the config asks."""
    eos = cfg.eos_token_id if not isinstance(cfg.eos_token_id, torch.Tensor) else cfg.eos_token_id.tolist()
    pad = cfg.pad_token_id if isinstance(cfg.pad_token_id, int) else None
    if model.config.is_encoder_decoder:
        first = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else cfg.bos_token_id
        return seq2seq_lm(model, given, pad_token_id=pad, eos_token_id=eos, max_new_tokens=max_new_tokens,
                          decoder_start_token_id=first, **media)
    static = {} if share_prompt else static_keywords(model, cfg, rows, max_new_tokens)
    return causal_lm(model, given, pad_token_id=pad, eos_token_id=eos, max_new_tokens=max_new_tokens,
                     share_prompt=share_prompt, **static, **media)
