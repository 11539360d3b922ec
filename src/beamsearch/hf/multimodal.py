"""The model inputs beside the token ids: images, audio and what the processor sends with them
(``pixel_values``, ``pixel_attention_mask``, ``image_sizes``, ``image_grid_thw``,
``video_grid_thw``, ``mm_token_type_ids``, ``token_type_ids``, ``input_features``,
``flattened_patches``, an encoder's ``attention_mask``, ...), passed to the model as
``model.generate`` passes them:

- a causal vision-language model (LLaVA, Qwen2-VL, PaliGemma, Idefics3, SmolVLM, Gemma 3,
  BLIP-2; BLIP and GIT by :mod:`beamsearch.hf.image_decoders`) gets them in its prefill, one
  row per input, so its vision tower runs once per input whatever the beam; the steps feed the
  text model one token per row (:func:`step_model`), the image's keys and values held in the
  cache's rows, which follow their inputs like any prompt's;
- an encoder-decoder (Whisper, Speech2Text, Pix2Struct, Florence-2, ``VisionEncoderDecoderModel``)
  gets them in its encoder, once per input (:func:`encoded`), as ``generate`` runs it.

Which names a model takes is read from its forward's signature (:func:`take_model_inputs`); any
other keyword is left to :func:`beamsearch.hf.generate`'s refusal of settings that are not
generation settings, which names it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from beamsearch.core import validate as check
from beamsearch.hf.calls import call_inputs
from beamsearch.hf.image_decoders import blip_prompts, decoding_model, is_blip

__all__ = ["NOT_SUPPORTED", "ModelInputs", "call_model_inputs", "check_model_inputs", "decoder_rows", "encoded",
           "inputs_count", "is_multimodal", "media_rows", "prefill_positions", "step_model", "take_model_inputs"]

# the forward's arguments the adapters fill themselves (or that are not inputs)
_OWN = frozenset({"self", "input_ids", "attention_mask", "position_ids", "cache", "past_key_values", "use_cache",
                  "return_dict", "labels", "inputs_embeds", "decoder_inputs_embeds", "logits_to_keep",
                  "output_attentions", "output_hidden_states", "cache_position", "encoder_outputs",
                  "decoder_attention_mask", "decoder_input_ids", "kwargs", "mm_encoder_outputs"})

# model classes whose steps need what neither adapter's state holds: refused with the reason
NOT_SUPPORTED = {
    "BlipForQuestionAnswering": "its answer decoder cross-attends the question's encoding at every step",
}

# position offsets of models whose text positions do not start at 0 (PaliGemma's are 1-indexed)
_POSITION_OFFSET = {"paligemma": 1}


def is_multimodal(model: Any) -> bool:
    """Whether ``model`` takes inputs beside text: its main input is not ``input_ids`` (Whisper's
    ``input_features``, a vision encoder-decoder's ``pixel_values``), or its config has a vision
    or audio part (LLaVA, Qwen2-VL, Florence-2, ...)."""
    cfg = model.config
    return getattr(model, "main_input_name", "input_ids") != "input_ids" or any(
        getattr(cfg, name, None) is not None for name in ("vision_config", "audio_config"))


def _forward_inputs(model: Any) -> set[str]:
    names = set(inspect.signature(model.forward).parameters) - _OWN
    if model.config.is_encoder_decoder and getattr(model, "main_input_name", "input_ids") != "input_ids":
        names |= {model.main_input_name, "attention_mask"}  # a feature encoder's mask is its input's
    if is_multimodal(model) and not model.config.is_encoder_decoder:
        names |= {"token_type_ids"}  # Gemma 3 / PaliGemma: the image's bidirectional block, read at prefill
    return names


@dataclass
class ModelInputs:
    """A call's model inputs beside the token ids.

    Attributes:
        tensors: name -> value as the model's forward takes it (each input's rows along axis 0,
            except Qwen2-VL's ``pixel_values`` / ``image_grid_thw``, one row per patch / image).
        decoder_prompts: an encoder-decoder's ``decoder_input_ids`` as given (None: the
            decoder start token alone; :func:`decoder_rows` reads them).
    """

    tensors: dict[str, Any] = field(default_factory=dict)
    decoder_prompts: Any = None

    def count(self) -> int | None:
        """The number of inputs the features give (their main tensor's first axis), or None."""
        for name in ("input_features", "input_values", "flattened_patches", "pixel_values"):
            value = self.tensors.get(name)
            if isinstance(value, torch.Tensor) and "image_grid_thw" not in self.tensors:
                return int(value.shape[0])
        return None

    def keywords(self) -> dict[str, Any]:
        """The adapters' keywords: the tensors, and ``decoder_input_ids`` when given."""
        extra = {} if self.decoder_prompts is None else {"decoder_input_ids": self.decoder_prompts}
        return {**self.tensors, **extra}

    def check(self, n: int) -> None:
        """Each per-input tensor has ``n`` rows: a clear error before the model runs."""
        for name, value in self.tensors.items():
            if name in ("pixel_values", "image_grid_thw", "video_grid_thw", "pixel_values_videos") and \
                    "image_grid_thw" in self.tensors:
                continue  # Qwen2-VL: patches of every image in one table
            if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] != n:
                raise ValueError(f"{name} has {value.shape[0]} rows for {n} inputs: give one per input "
                                 f"(shape {tuple(value.shape)})")


def take_model_inputs(model: Any, inputs: Any, overrides: dict[str, Any]) -> tuple[ModelInputs, Any, Any]:
    """The model inputs of a :func:`~beamsearch.hf.generate` call, taken out of ``overrides``
    and out of ``inputs`` when it is a mapping (a processor's ``BatchFeature``): the names
    the forward of a multimodal model (:func:`is_multimodal`) takes. A text model takes none.

    Returns:
        ``(model inputs, inputs, attention_mask)``: ``inputs`` without them (None when only
        features were given), and the text's mask when it came in the mapping (else None).
    """
    media = ModelInputs()
    if not is_multimodal(model):
        return media, inputs, None
    names = _forward_inputs(model)
    mask = None
    if isinstance(inputs, Mapping):
        rest = {k: v for k, v in inputs.items() if k not in names or k == "attention_mask"}
        media.tensors.update({k: v for k, v in inputs.items() if k in names and k != "attention_mask"})
        if "input_ids" in rest:
            inputs, mask = rest["input_ids"], rest.get("attention_mask")
        else:
            inputs = None
            if rest.get("attention_mask") is not None:
                media.tensors["attention_mask"] = rest["attention_mask"]
        if "decoder_input_ids" in rest:
            overrides["decoder_input_ids"] = rest["decoder_input_ids"]
    for name in list(overrides):
        if name in names and name != "attention_mask" and overrides[name] is not None:
            media.tensors[name] = overrides.pop(name)
    if model.config.is_encoder_decoder and overrides.get("decoder_input_ids") is not None:
        media.decoder_prompts = overrides.pop("decoder_input_ids")
    return media, inputs, mask


def decoder_rows(prompts: Any, n: int) -> list[list[int]]:
    """``decoder_input_ids`` (a tensor ``[N, D]`` or N token lists, every one of the same length
    D >= 1, unpadded) as token lists; refused unless there are ``n``."""
    rows = prompts.tolist() if isinstance(prompts, torch.Tensor) else [list(p) for p in prompts]
    if len(rows) != n or any(len(r) != len(rows[0]) or not r for r in rows):
        raise ValueError(f"decoder_input_ids must be {n} prompts (one per input) of one length >= 1, unpadded; "
                         f"got lengths {[len(r) for r in rows]}")
    return [[check.token(f"decoder_input_ids[{i}]", t) for t in r] for i, r in enumerate(rows)]


def check_model_inputs(model: Any, model_inputs: dict[str, Any], n: int, share_prompt: bool) -> None:
    """Model inputs beside the ids go to a multimodal model (:func:`is_multimodal`), one row per
    input, without a shared prompt cache (its attention reads text prompts only)."""
    if not model_inputs:
        return
    if type(model).__name__ in NOT_SUPPORTED:
        raise TypeError(f"{type(model).__name__} with {sorted(model_inputs)} is not supported: "
                        f"{NOT_SUPPORTED[type(model).__name__]}")
    if not is_multimodal(model):
        raise TypeError(f"{type(model).__name__} is a text model: it takes no {sorted(model_inputs)}")
    if share_prompt:
        raise ValueError("share_prompt=True is for text prompts: a multimodal model's inputs "
                         f"{sorted(model_inputs)} are not supported with it")
    ModelInputs(dict(model_inputs)).check(n)


def inputs_count(model: Any, rows: list[list[int]] | None, model_inputs: dict[str, Any]) -> int:
    """The number of inputs of an encoder-decoder: the sources', else the features' (their main
    tensor's first axis); the model inputs checked against it."""
    n = len(rows) if rows is not None else ModelInputs(dict(model_inputs)).count()
    if n is None:
        raise ValueError(f"sources is None: give the sources, or the features {type(model).__name__} reads "
                         f"({model.main_input_name}=)")
    check_model_inputs(model, model_inputs, n, False)
    return n


def step_model(model: Any) -> Any:
    """The module the decoding steps call: the model itself, or its language model where the
    model's own forward always reruns the vision part (BLIP-2, whose ``generate`` does likewise), or
    BLIP's decoding (:class:`~beamsearch.hf.image_decoders.BlipDecoding`, its image embeddings
    held by the cache)."""
    if type(model).__name__.startswith("Blip2") and not model.config.is_encoder_decoder:
        return model.language_model
    return decoding_model(model) or model


def prefill_positions(model: Any, ids: torch.Tensor, mask: torch.Tensor, inputs: dict[str, Any]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefill's ``position_ids`` and each input's next position, as ``generate`` makes them.

    Args:
        ids, mask: the left-padded prompts, int64 ``[N, P]`` each.
        inputs: the model inputs beside the ids (Qwen2-VL's ``image_grid_thw``, ...).

    Returns:
        (position_ids int64 ``[N, P]``, or ``[3, N, P]`` for a multimodal rotary model (Qwen2-VL,
        Qwen2.5-VL: ``get_rope_index``); the next position of each input, int64 ``[N]``: its
        length, plus the model's offset (the rope delta of its images, PaliGemma's 1)).
    """
    offset = _POSITION_OFFSET.get(model.config.model_type, 0)
    positions = (mask.cumsum(-1) - 1 + offset).masked_fill(mask == 0, 1)  # --> [N, P]
    following = mask.sum(dim=1) + offset  # --> [N]
    rope = getattr(getattr(model, "model", None), "get_rope_index", None)
    grids = {k: inputs[k] for k in ("image_grid_thw", "video_grid_thw") if inputs.get(k) is not None}
    if rope is None or not grids:
        return positions, following
    if inputs.get("mm_token_type_ids") is None:
        raise ValueError(f"{type(model).__name__} with {sorted(grids)} needs mm_token_type_ids (the processor's "
                         "output gives it): pass it")
    position_ids, deltas = rope(ids, mm_token_type_ids=inputs["mm_token_type_ids"], attention_mask=mask, **grids)
    return position_ids, following + deltas.reshape(-1).to(following.device)


def encoded(model: Any, ids: torch.Tensor | None, mask: torch.Tensor | None, inputs: dict[str, Any]
            ) -> tuple[torch.Tensor, torch.Tensor, bool, type | None]:
    """An encoder-decoder's encoder output for a batch, as ``generate`` computes it (the model's
    own preparation: Florence-2 merges its image features into the text, Whisper reads
    ``input_features``), once per input.

    Args:
        ids, mask: the right-padded sources ``[N, S]`` and their mask, or None (features alone).
        inputs: the model inputs beside the ids (their ``attention_mask`` when ``ids`` is None).

    Returns:
        (hidden float ``[N, S', d]``, the encoder mask the decoder steps pass as
        ``attention_mask`` ``[N, M]``, whether to pass it: False where none was given for
        features, as ``generate`` passes none; the encoder output's class when it carries its own
        ``attention_mask`` ``[N, S']`` for the decoder (Moonshine's, then the mask returned), else None).
    """
    kwargs = dict(inputs)
    name = model.main_input_name
    if ids is not None:
        kwargs["attention_mask"] = mask
        if name != "input_ids":
            kwargs["input_ids"] = ids
            main = kwargs.pop(name)
        else:
            name, main = "input_ids", ids
    else:
        main = kwargs.pop(name)
    given = kwargs.get("attention_mask")
    # generate's own encoding step (a transformers method, the one entry point of every encoder-decoder)
    out = model._maybe_prepare_encoder_kwargs_for_generation(main, dict(kwargs), name, model.generation_config)
    hidden = out["encoder_outputs"].last_hidden_state
    kind = type(out["encoder_outputs"])
    carrier = kind if "attention_mask" in getattr(kind, "__dataclass_fields__", {}) else None
    if given is None:
        return hidden, torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device), False, carrier
    if carrier is not None:  # the encoder's own mask of its outputs (audio frames downsampled)
        given = out["encoder_outputs"].attention_mask
    return hidden, torch.as_tensor(given, device=hidden.device).long(), True, carrier


def call_model_inputs(model: Any, inputs: Any, input_ids: Any, attention_mask: Any,
                      overrides: dict[str, Any]) -> tuple[ModelInputs, Any, Any]:
    """A :func:`~beamsearch.hf.generate` call's inputs: its model inputs beside the ids
    (:func:`take_model_inputs`), then the text inputs and mask as
    :func:`beamsearch.hf.calls.call_inputs` reads them; ``(model inputs, None, None)`` for an
    encoder-decoder given its features alone (Whisper's ``input_features``, ...), their
    ``attention_mask`` then among the model inputs.

    Raises:
        TypeError: the mask given twice, or no inputs at all.
    """
    media, inputs, mask = take_model_inputs(model, inputs, overrides)
    if mask is not None:
        if attention_mask is not None:
            raise TypeError("attention_mask is given twice: in inputs and as attention_mask=")
        attention_mask = mask
    if inputs is None and input_ids is None and model.config.is_encoder_decoder and media.count() is not None:
        if attention_mask is not None:
            media.tensors["attention_mask"] = attention_mask
        call_inputs([[0]], None, None, overrides)  # its refusal of the model inputs not passed
        return media, None, None
    if is_blip(model):  # BLIP's generate makes its prompt from the processor's ids (or its bos alone)
        inputs, attention_mask = blip_prompts(model, inputs if input_ids is None else input_ids, attention_mask,
                                              media.count() or 0)
        input_ids = None
        text = model.config.text_config  # and stops on its [SEP], pads with its pad: the call's own kept
        overrides.setdefault("eos_token_id", text.sep_token_id)
        overrides.setdefault("pad_token_id", text.pad_token_id)
    inputs, attention_mask = call_inputs(inputs, input_ids, attention_mask, overrides)
    return media, inputs, attention_mask


def media_rows(model: Any, media: ModelInputs) -> list[list[int]]:
    """Stand-in token rows of an encoder-decoder given its features alone, one per input: what
    :func:`~beamsearch.hf.generate` counts inputs by (their decoder prompts are the start token)."""
    return [[0]] * (media.count() or 0)
