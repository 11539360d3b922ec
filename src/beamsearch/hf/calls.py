"""``model.generate``'s calling conventions for :func:`beamsearch.hf.generate`: the inputs by
position or as ``input_ids=`` / ``attention_mask=`` keywords, a tokenizer's output
(``**tokenizer(texts, return_tensors="pt", padding=True)``, or the ``BatchEncoding`` itself), and a
padded batch without a mask read as ``generate`` reads it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["MODEL_INPUTS", "call_inputs", "inferred_mask"]

# the model inputs generate would pass to the model that hf.generate does not: refused by name
MODEL_INPUTS = ("token_type_ids", "position_ids", "inputs_embeds", "decoder_input_ids", "decoder_attention_mask",
                "encoder_outputs")


def call_inputs(inputs: Any, input_ids: Any, attention_mask: Any, overrides: dict[str, Any]) -> tuple[Any, Any]:
    """The inputs and attention mask of a :func:`~beamsearch.hf.generate` call, in the forms
    :func:`beamsearch.hf.inputs.input_rows` takes.

    Args:
        inputs: ``generate``'s first argument: token-id lists, strings, a tensor ``[N, P]``, a
            ``BatchEncoding`` or any mapping with ``input_ids`` (and ``attention_mask``), or None.
        input_ids, attention_mask: the keywords (a tensor ``[N, P]`` each, or None).
        overrides: the call's other keywords: a model input named in :data:`MODEL_INPUTS` there is
            refused (and taken out when None).

    Returns:
        ``(inputs, attention_mask)`` (a tensor without a mask: see :func:`inferred_mask`).

    Raises:
        TypeError: the inputs given twice (by position and as ``input_ids``), or none.
        ValueError: a model input that is not passed to the model (``token_type_ids``, ...).
    """
    given = [name for name in MODEL_INPUTS if overrides.get(name) is not None]
    if isinstance(inputs, Mapping):  # a BatchEncoding, or the dict a tokenizer returns
        given += [name for name in inputs if name not in ("input_ids", "attention_mask")]
        if "input_ids" not in inputs:
            raise ValueError(f"inputs as a mapping must hold input_ids; got the keys {sorted(inputs)}")
        if attention_mask is not None and inputs.get("attention_mask") is not None:
            raise TypeError("attention_mask is given twice: in inputs and as attention_mask=")
        inputs, attention_mask = inputs["input_ids"], (attention_mask if attention_mask is not None
                                                       else inputs.get("attention_mask"))
    if given:
        raise ValueError(f"{given[0]}= is a model input beamsearch.hf.generate does not pass to the model (it "
                         "feeds input_ids and attention_mask only); leave it out")
    for name in MODEL_INPUTS:
        overrides.pop(name, None)
    if input_ids is not None:
        if inputs is not None:
            raise TypeError("the inputs are given twice: by position and as input_ids=")
        inputs = input_ids
    if inputs is None:
        raise TypeError("generate() needs the inputs: by position, as input_ids=, or as **tokenizer(...)")
    return inputs, attention_mask


def inferred_mask(ids: torch.Tensor, pad_token_id: Any, eos_token_id: Any) -> torch.Tensor | None:
    """``generate``'s attention mask for ``ids`` given without one
    (``GenerationMixin._prepare_attention_mask_for_generation``): ``ids != pad_token_id`` when
    the pad id occurs in ``ids`` and is not an eos id; else None (no padding), with the warning
    ``generate`` gives a batch of several rows."""
    if ids.dim() != 2:
        return None  # input_rows refuses it, naming the shape
    eos = [] if eos_token_id is None else torch.as_tensor(eos_token_id).reshape(-1).tolist()
    pad = pad_token_id.reshape(-1)[0].item() if isinstance(pad_token_id, torch.Tensor) else pad_token_id
    batched = ids.shape[0] > 1
    if pad is None:
        if batched:
            warnings.warn("The attention mask and the pad token id were not set, with a batched input. As a "
                          "consequence, you may observe unexpected behavior. Please pass your input's "
                          "`attention_mask` to obtain reliable results.", stacklevel=4)
        return None
    if pad in eos:
        if batched:
            warnings.warn("The attention mask is not set with a batched input, and cannot be inferred from input "
                          "because pad token is same as eos token. As a consequence, you may observe unexpected "
                          "behavior. Please pass your input's `attention_mask` to obtain reliable results.",
                          stacklevel=4)
        return None
    if not (ids == pad).any():
        return None
    return (ids != pad).long()
