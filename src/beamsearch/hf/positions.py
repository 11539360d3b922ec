"""What a model's positions and masks allow: whether encoder-decoder states can be joined
(:func:`joinable`), the decoder's position table (:func:`position_table`, :class:`RowPositions`),
and whether a step may hand the model a ready 4-D mask (:func:`mask_ready`, :func:`as_4d`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from beamsearch.hf.caches import DeferredLayer, PromptLayer

__all__ = ["RowPositions", "as_4d", "joinable", "mask_ready", "position_table"]


def joinable(model: Any) -> bool:
    """Whether states of ``seq2seq_lm`` for ``model`` at different steps can be joined (refill):
    the decoder's absolute positions come from a table whose row for position p is known (BART
    and mBART: row p + 2; Marian and Pegasus: row p), so each row's can be read, or it has
    relative positions only (T5), which padding on the left does not change. Any other decoder
    (FSMT, M2M100 / NLLB, ...) is not joinable: decode it in fixed batches. Decoder-only models
    always can (:func:`causal_lm`)."""
    if not model.config.is_encoder_decoder:
        return True
    return position_table(model) is not None or _relative_positions(model)


_TABLE_OFFSETS = {"BartLearnedPositionalEmbedding": 2, "MBartLearnedPositionalEmbedding": 2,
                  "MarianSinusoidalPositionalEmbedding": 0, "PegasusSinusoidalPositionalEmbedding": 0}
"""Position tables whose row for decoder position p is row ``p + offset`` (their forward reads
``position_ids + offset``; tested in tests/hf/test_states.py)."""


def position_table(model: Any) -> tuple[torch.nn.Embedding, int] | None:
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
Each type is tested against the same search with the model's own mask (tests/hf/test_generation_models.py,
tests/hf/test_states.py); GPT-2, Llama, Qwen2, Qwen3, BART and Marian also against ``generate``."""


def mask_ready(model: Any, cache: DynamicCache) -> bool:
    """Whether the steps may pass a ready 4-D boolean mask (:data:`_MASK_READY_TYPES`): the model
    is on the CPU and uses sdpa attention, and every layer of its (self-attention) cache is full
    attention (a sliding-window layer needs the model's own windowed mask). On an accelerator
    the model's own mask is kept: with no padding it passes sdpa none, which lets a GPU take its
    fastest (flash) kernel, where any mask, even all True, rules it out."""
    cfg = model.config
    return (cfg.model_type in _MASK_READY_TYPES and getattr(cfg, "_attn_implementation", None) == "sdpa"
            and next(model.parameters()).device.type == "cpu"
            and all(isinstance(layer, (DeferredLayer, PromptLayer)) for layer in cache.layers))


def as_4d(mask: torch.Tensor) -> torch.Tensor:
    """int64 ``[k, L]`` (1 on tokens) -> bool ``[k, 1, 1, L]``: for one query token, the mask
    ``sdpa_mask`` builds (True: attended)."""
    return mask[:, None, None, :].bool()


class RowPositions:
    """While in use, the decoder's position table gives each row its own position (``positions``
    ``[k]``): a forward hook replaces the table's output (one position for all rows, from the
    cache length) by the rows of the table at ``positions + offset`` (BART's table is offset by 2)."""

    def __init__(self, table: tuple[torch.nn.Embedding, int] | None, positions: torch.Tensor) -> None:
        self.table, self.positions = table, positions  # the table and offset of position_table, or None
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
