"""beamsearch's searches behind ``model.generate(custom_generate=...)`` (transformers 5): the public
callable :func:`custom_generate`, and the directory :data:`CUSTOM_GENERATE_DIR` in the layout
``transformers`` loads (``custom_generate/generate.py``, with ``trust_remote_code=True``), whose
``generate`` is :func:`generate_from_arguments`. Both return what ``model.generate`` returns: the
``sequences`` tensor, or with ``return_dict_in_generate=True`` its output dataclass.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList
from transformers.generation.utils import (
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamEncoderDecoderOutput,
    GenerateDecoderOnlyOutput,
    GenerateEncoderDecoderOutput,
)

from beamsearch.hf.generation import Generation, generate

__all__ = ["CUSTOM_GENERATE_DIR", "as_generate_output", "custom_generate", "generate_from_arguments"]

CUSTOM_GENERATE_DIR = pathlib.Path(__file__).resolve().parent / "generate_repo"
"""A local repository in ``transformers``' ``custom_generate`` layout:
``model.generate(..., custom_generate=str(CUSTOM_GENERATE_DIR), trust_remote_code=True)``."""


def as_generate_output(gen: Generation, return_dict_in_generate: bool, encoder_decoder: bool) -> Any:
    """What ``model.generate`` returns for ``gen``: its ``sequences`` tensor, or (with
    ``return_dict_in_generate``) ``generate``'s output dataclass: beam search's with
    ``sequences_scores`` (when ``output_scores``, as ``generate`` gives them), ``scores``,
    ``logits`` and ``beam_indices``; greedy decoding's with ``scores`` and ``logits``."""
    if not return_dict_in_generate:
        return gen.sequences
    if gen.mode == "greedy":
        kind = GenerateEncoderDecoderOutput if encoder_decoder else GenerateDecoderOnlyOutput
        return kind(sequences=gen.sequences, scores=gen.scores, logits=gen.logits)
    beam_kind = GenerateBeamEncoderDecoderOutput if encoder_decoder else GenerateBeamDecoderOnlyOutput
    return beam_kind(sequences=gen.sequences, sequences_scores=gen.sequences_scores if gen.scores is not None else None,
                     scores=gen.scores, logits=gen.logits, beam_indices=gen.beam_indices)


def _setting(model: Any, generation_config: Any, overrides: dict[str, Any], name: str) -> Any:
    """A generation setting as ``generate`` resolves it: the call's keyword, its config's, the model's."""
    for source in (overrides, generation_config.to_diff_dict() if generation_config is not None else {},
                   model.generation_config.to_diff_dict()):
        if source.get(name) is not None:
            return source[name]
    return None


def generate_from_arguments(model: Any, inputs: Any = None, generation_config: Any = None, **arguments: Any) -> Any:
    """The ``generate`` of :data:`CUSTOM_GENERATE_DIR`: ``model.generate(..., custom_generate=DIR)``
    hands it every argument of its call, unprepared; they go to :func:`beamsearch.hf.generate`
    as they are (``mode=`` and a mode's options too), and its result comes back as ``generate``
    returns it (:func:`as_generate_output`).

    Args:
        model: the model ``generate`` was called on.
        inputs, generation_config, **arguments: ``generate``'s arguments (the hooks and arguments
            left at None are dropped).
    """
    arguments = {name: value for name, value in arguments.items() if value is not None}
    gen = generate(model, inputs, generation_config=generation_config, **arguments)
    flag = bool(_setting(model, generation_config, arguments, "return_dict_in_generate"))
    return as_generate_output(gen, flag, bool(model.config.is_encoder_decoder))


def custom_generate(model: Any, input_ids: torch.Tensor, logits_processor: Any = None, stopping_criteria: Any = None,
                    generation_config: GenerationConfig | None = None, inputs_tensor: torch.Tensor | None = None,
                    synced_gpus: bool = False, streamer: Any = None, mode: str | None = None,
                    mode_options: dict[str, Any] | None = None, **model_kwargs: Any) -> Any:
    """beamsearch's search as ``model.generate(inputs, custom_generate=custom_generate, ...)``.

    ``generate`` prepares the call (the settings resolved into ``generation_config``, the inputs
    expanded to ``num_beams`` rows, the encoder run) and hands it here; the search runs
    :func:`beamsearch.hf.generate` on the call's own inputs (``inputs_tensor`` ``[N, P]``, its
    mask taken back from the expanded one) with the resolved generation config (its lengths as
    ``generate`` counts them: new tokens after the padded input), and returns what ``generate``
    returns.

    Args:
        model: the model.
        input_ids: ``[N * E, P']``, the expanded decoder input (not read: ``inputs_tensor`` is).
        logits_processor, stopping_criteria: ``generate``'s prepared lists, built from the
            generation config, which :func:`beamsearch.hf.generate` maps itself; a processor or
            criterion the call added (``logits_processor=``, ``stopping_criteria=``,
            ``prefix_allowed_tokens_fn=``) is refused here: pass it to ``hf.generate``, or use
            :data:`CUSTOM_GENERATE_DIR`, which gets the call's arguments as they are.
        generation_config: the call's resolved settings.
        inputs_tensor: ``[N, P]``, the call's inputs (prompts or sources).
        synced_gpus: ignored (one process).
        streamer: refused (``generate`` already put the prompt into it); use ``hf.generate``.
        mode, mode_options: :func:`beamsearch.hf.generate`'s ``mode=`` and the mode's own options
            (a dict: ``{"k": 4, "seed": 0}``), passed to ``model.generate`` as keywords.
        **model_kwargs: ``attention_mask`` (expanded), the encoder's outputs, the cache: only the
            mask is read.

    Raises:
        ValueError: a hook the call added, or a streamer; no generation_config or inputs_tensor.
    """
    if generation_config is None or inputs_tensor is None:
        raise ValueError("custom_generate is called by model.generate(..., custom_generate=...), which passes "
                         f"generation_config and inputs_tensor; got generation_config={generation_config!r}, "
                         f"inputs_tensor of type {type(inputs_tensor).__name__}")
    if streamer is not None:
        raise ValueError("streamer= with custom_generate=hf.custom_generate: generate has already streamed the "
                         "prompt; call beamsearch.hf.generate(model, ..., streamer=...) instead")
    _refuse_added_hooks(model, generation_config, logits_processor, stopping_criteria, inputs_tensor, model_kwargs)
    n = inputs_tensor.shape[0]
    mask = model_kwargs.get("attention_mask")
    if mask is not None:
        mask = mask[:: mask.shape[0] // n]  # generate repeats each row E times, one after the other
    gen = generate(model, inputs_tensor, attention_mask=mask, generation_config=_lengths(generation_config, input_ids),
                   mode=mode, **(mode_options or {}))
    return as_generate_output(gen, bool(generation_config.return_dict_in_generate),
                              bool(model.config.is_encoder_decoder))


def _lengths(cfg: GenerationConfig, input_ids: torch.Tensor) -> GenerationConfig:
    """``cfg`` with the lengths ``generate`` resolved (``max_length`` / ``min_length`` counting its
    padded decoder input ``input_ids [N * E, P']``) given back as new tokens, as it counts them."""
    cfg = copy.deepcopy(cfg)
    if cfg.max_new_tokens is None and cfg.max_length is not None:
        cfg.max_new_tokens = max(cfg.max_length - input_ids.shape[1], 0)
    if cfg.min_new_tokens is None and cfg.min_length:
        cfg.min_new_tokens = max(cfg.min_length - input_ids.shape[1], 0)
    cfg.max_length = cfg.min_length = None
    return cfg


def _refuse_added_hooks(model: Any, cfg: Any, processors: Any, criteria: Any, inputs: torch.Tensor,
                        model_kwargs: dict[str, Any]) -> None:
    """Refuse processors or stopping criteria beyond those ``generate`` builds from ``cfg`` alone
    (compared by class, in order, against its own builders)."""
    own = model._get_logits_processor(generation_config=cfg, input_ids_seq_length=inputs.shape[-1],
                                      encoder_input_ids=inputs, prefix_allowed_tokens_fn=None,
                                      logits_processor=LogitsProcessorList(),
                                      device=inputs.device, model_kwargs=model_kwargs)
    if [type(p) for p in processors or []] != [type(p) for p in own]:
        raise ValueError("logits_processor= or prefix_allowed_tokens_fn= with custom_generate=hf.custom_generate: "
                         "generate merges them with the config's processors before they get here; pass them to "
                         "beamsearch.hf.generate, or use custom_generate=str(hf.CUSTOM_GENERATE_DIR)")
    own_criteria = model._get_stopping_criteria(generation_config=cfg, stopping_criteria=StoppingCriteriaList())
    if [type(c) for c in criteria or []] != [type(c) for c in own_criteria]:
        raise ValueError("stopping_criteria= with custom_generate=hf.custom_generate: pass it to "
                         "beamsearch.hf.generate, or use custom_generate=str(hf.CUSTOM_GENERATE_DIR)")
