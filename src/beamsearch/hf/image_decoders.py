"""Captioning models whose text steps read the image beyond a plain KV cache's rows, decoded by
:func:`~beamsearch.hf.causal_lm` as ``generate`` decodes them:

- BLIP (``BlipForConditionalGeneration``): its text decoder cross-attends the image embeddings
  at every step. The prefill runs the vision model once per input and the embeddings ride in the
  cache beside its layers (:class:`ImageCache`, ``[k, I, d]``), so they follow their rows
  through beams, batches and refill like its keys and values; the steps call the text decoder
  with them (:class:`BlipDecoding`). Its prompt follows BLIP's ``generate``
  (:func:`blip_prompts`), and so do its eos (the text config's ``sep_token_id``) and pad ids
  (:func:`~beamsearch.hf.multimodal.call_model_inputs`).
- GIT (``GitForCausalLM``): its forward prepends the image embeddings, with a mask of its own,
  to the text. The prefill's cache holds the image's columns before the prompt's
  (:func:`image_columns` counts them into the mask), and the steps pass a ready 4-D additive
  mask covering them (:func:`additive_mask`), which the model takes as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from beamsearch.hf.recurrent import Extras, cache_length, register_extras

__all__ = ["ADDITIVE_TYPES", "BlipDecoding", "ImageCache", "additive_mask", "blip_prompts", "decoding_model",
           "image_columns", "is_blip"]

# models whose steps take a ready 4-D additive mask (GIT widens a 2-D one over the image by itself)
ADDITIVE_TYPES = frozenset({"git"})


class ImageCache(DynamicCache):
    """A ``DynamicCache`` holding each row's image embeddings beside its layers (``image``, float
    ``[k, I, d]``): BLIP's text decoder cross-attends them at every step."""

    image: torch.Tensor | None = None

    @classmethod
    def holding(cls, cache: DynamicCache, image: torch.Tensor) -> ImageCache:
        """``cache``'s layers (the same objects) and ``image`` in an :class:`ImageCache`."""
        new = cls.__new__(cls)
        new.__dict__.update(vars(cache))
        new.image = image
        return new


def _image_of(cache: Any) -> list[torch.Tensor | None]:
    return [cache.image]


def _put_image(cache: Any, tensors: list[torch.Tensor | None]) -> None:
    cache.image = tensors[0]


register_extras(ImageCache, Extras(_image_of, _put_image))


def is_blip(model: Any) -> bool:
    """Whether ``model`` is a BLIP captioner (``BlipForConditionalGeneration``)."""
    return type(model).__name__ == "BlipForConditionalGeneration"


class BlipDecoding(torch.nn.Module):
    """BLIP as the adapter calls it: ``forward(input_ids, attention_mask, position_ids, cache,
    pixel_values=None, ...)``. Given ``pixel_values`` ``[N, 3, H, W]`` (the prefill), the vision
    model embeds them once and the cache comes back an :class:`ImageCache` holding them; every
    call runs the text decoder on the cache's image embeddings, as ``generate`` passes them to it
    (every image token attended: BLIP's image mask is all ones).

    Attributes:
        blip: the ``BlipForConditionalGeneration``; ``config``: its text decoder's config.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.blip = model
        self.config = model.text_decoder.config
        self.generation_config = model.generation_config

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.blip.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, position_ids: Any = None,
                cache: Any = None, pixel_values: torch.Tensor | None = None, interpolate_pos_encoding: bool = False,
                logits_to_keep: int = 0, use_cache: bool = True, return_dict: bool = True) -> Any:
        if pixel_values is not None:  # once per input: the rows of its beams copy the embeddings
            image = self.blip.vision_model(pixel_values=pixel_values,
                                           interpolate_pos_encoding=interpolate_pos_encoding).last_hidden_state
            cache = ImageCache.holding(cache, image)
        if getattr(cache, "image", None) is None:
            raise ValueError("BlipForConditionalGeneration decodes an image: pass pixel_values")
        out = self.blip.text_decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                     encoder_hidden_states=cache.image, cache=cache, use_cache=use_cache,
                                     logits_to_keep=logits_to_keep, is_decoder=True, return_dict=return_dict)
        out["cache"] = cache  # the text decoder wraps it with a cross-attention cache of its own per call
        return out


def decoding_model(model: Any) -> Any:
    """The module the adapter calls for ``model``: :class:`BlipDecoding` for BLIP, else None."""
    return BlipDecoding(model) if is_blip(model) else None


def blip_prompts(model: Any, ids: Any, mask: Any, n: int) -> tuple[Any, Any]:
    """BLIP's prompts as its ``generate`` makes them: given ``input_ids`` ``[N, P]`` (the
    processor's ``[CLS] text [SEP]``), the first column becomes its bos token and the last (the
    ``[SEP]``) is dropped, from the mask too; none given, each of the ``n`` images gets the bos
    token alone. Returns ``(ids, mask)`` (the mask None when none was given)."""
    bos = model.config.text_config.bos_token_id
    if ids is None:
        return torch.full((n, 1), bos, dtype=torch.long), None
    ids = torch.as_tensor(ids).clone()
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"input_ids of BlipForConditionalGeneration must be [N, P] with P >= 2 (the processor's "
                         f"[CLS] text [SEP]; its generate drops the last); got shape {tuple(ids.shape)}")
    ids[:, 0] = bos
    return ids[:, :-1], None if mask is None else torch.as_tensor(mask)[:, :-1]


def image_columns(model: Any, cache: Any, mask: torch.Tensor, width: int) -> tuple[torch.Tensor, int]:
    """After a GIT prefill of ``width`` prompt columns (mask int64 ``[N, width]``): the mask with
    a column of 1 for each image column its forward put in the cache before the prompt, and the
    cache's columns. Another model: ``(mask, width)`` unchanged."""
    if model.config.model_type not in ADDITIVE_TYPES:
        return mask, width
    image = cache_length(cache) - width
    return torch.cat([mask.new_ones(mask.shape[0], image), mask], dim=1), width + image


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int64 ``[k, L]`` (1 on attended columns) -> ``dtype`` ``[k, 1, 1, L]``: 0 where attended,
    the dtype's minimum elsewhere, the mask an eager attention adds to its scores."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        mask == 0, torch.finfo(dtype).min)[:, None, None, :]
