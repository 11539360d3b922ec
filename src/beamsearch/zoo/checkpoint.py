"""Reading a zoo checkpoint, ``<name>.json`` and ``<name>.safetensors`` as ``beamsearch train``
writes them, validated as a whole before any weight reaches a model: the config (every field of
:class:`~beamsearch.zoo.models.ModelConfig`: its type and range, the vocabularies' sizes and special
ids, a ``max_target`` that holds a date) and the tensors (the names and shapes the config's model
has, a floating dtype, every value finite). Anything else is a :class:`CheckpointError` whose
one-line message names the file and what is wrong.
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import fields
from typing import Any

import torch

from beamsearch.zoo.calendar import DATE_LENGTH
from beamsearch.zoo.dates import SOURCE_VOCAB, TARGET_VOCAB
from beamsearch.zoo.models import ModelConfig, Seq2Seq, Transformer, build_model

__all__ = ["MIN_MAX_TARGET", "CheckpointError", "load_checkpoint", "weights_problem"]

MIN_MAX_TARGET = DATE_LENGTH + 2  # decoder positions: bos, the 10 characters of YYYY-MM-DD, eos
# fields that must equal what the zoo's vocabularies fix, and why
_FIXED = {"source_vocab": (len(SOURCE_VOCAB), "the size of the source vocabulary"),
          "target_vocab": (len(TARGET_VOCAB), "the size of the target vocabulary"),
          "bos": (TARGET_VOCAB.bos, "the target vocabulary's <bos>"),
          "eos": (TARGET_VOCAB.eos, "the target vocabulary's <eos>"),
          "pad": (SOURCE_VOCAB.pad, "the vocabularies' <pad>")}
_SIZES = {"hidden": (1, ""), "layers": (1, ""), "heads": (1, ""), "ff": (1, ""), "max_source": (1, ""),
          "max_target": (MIN_MAX_TARGET, " (decoder positions for bos, a YYYY-MM-DD date and eos)")}


class CheckpointError(Exception):
    """A checkpoint that is missing, cannot be read or is not valid; the one-line message names the
    file."""


def load_checkpoint(name: str, folder: pathlib.Path) -> Seq2Seq | Transformer:
    """The model of ``<folder>/<name>.json`` and ``<name>.safetensors``, each file validated first.

    Raises:
        CheckpointError: a file is missing, unreadable, or fails a check (the message names it).
    """
    from safetensors.torch import load_file

    config, weights = folder / f"{name}.json", folder / f"{name}.safetensors"
    for path in (config, weights):
        if not path.is_file():
            raise CheckpointError(f"checkpoint file {path} does not exist")
    cfg = _read_config(config, name)
    try:
        tensors = load_file(str(weights))
    except Exception as e:  # not a safetensors file: safetensors' own errors
        raise CheckpointError(f"checkpoint file {weights} cannot be loaded: {_one_line(e)}") from e
    problem = weights_problem(tensors, _expected_shapes(cfg))
    if problem is not None:
        raise CheckpointError(f"checkpoint file {weights} cannot be loaded: {problem}")
    model = build_model(cfg)
    model.load_state_dict(tensors)
    return model


def _read_config(path: pathlib.Path, name: str) -> ModelConfig:
    """The ``config`` object of the JSON file at ``path``, checked field by field."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"checkpoint file {path} is not a model config: {_one_line(e)}") from e
    config = raw.get("config") if isinstance(raw, dict) else None
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint file {path} is not a model config: it has no \"config\" object")
    problem = _config_problem(config, name)
    if problem is not None:
        raise CheckpointError(f"checkpoint file {path} is not a model config: {problem}")
    return ModelConfig(**config)


def _config_problem(config: dict[str, Any], name: str) -> str | None:
    """Why ``config`` is not the config of a zoo model called ``name``, or None."""
    names = [f.name for f in fields(ModelConfig)]
    missing = [n for n in names if n not in config]
    unknown = [k for k in config if k not in names]
    if missing or unknown:
        return f"it lacks {', '.join(missing)}" if missing else f"unknown fields {', '.join(map(repr, unknown))}"
    if config["kind"] != name:
        return f"kind must be {name!r} (the file's name); got {config['kind']!r}"
    for field, (value, what) in _FIXED.items():
        if not _is_int(config[field]) or config[field] != value:
            return f"{field} must be {value} ({what}); got {config[field]!r}"
    for field, (least, why) in _SIZES.items():
        if not _is_int(config[field]) or config[field] < least:
            return f"{field} must be an integer >= {least}{why}; got {config[field]!r}"
    dropout = config["dropout"]
    if not (_is_number(dropout) and math.isfinite(dropout) and 0 <= dropout < 1):
        return f"dropout must be a number in [0, 1); got {dropout!r}"
    if name == "transformer" and config["hidden"] % config["heads"]:
        return f"hidden must be a multiple of heads={config['heads']}; got {config['hidden']}"
    return None


def _expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The state dict's tensor shapes of ``cfg``'s model (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = build_model(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def weights_problem(tensors: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]]) -> str | None:
    """Why ``tensors`` are not weights of the model with these ``shapes``, or None: names, shapes,
    a floating dtype, finite values."""
    missing = [k for k in shapes if k not in tensors]
    unknown = [k for k in tensors if k not in shapes]
    if missing or unknown:
        listed = missing or unknown
        names = ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")
        return f"tensors missing for its config: {names}" if missing else f"tensors its config has no use for: {names}"
    for key, tensor in tensors.items():
        if tuple(tensor.shape) != shapes[key]:
            return f"tensor {key} has shape {tuple(tensor.shape)}; its config needs {shapes[key]}"
        if not tensor.is_floating_point():
            return f"tensor {key} is {str(tensor.dtype).removeprefix('torch.')}, not a floating-point dtype"
        bad = int((~torch.isfinite(tensor)).sum())
        if bad:
            return f"tensor {key} holds {bad} NaN or infinite values (of {tensor.numel()})"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
