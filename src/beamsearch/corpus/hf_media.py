"""The files a line names beside its text (``"image"``, ``"audio"``) for an ``hf:DIR`` model with
a processor: read with Pillow / soundfile, made into the model's inputs by the folder's processor
one line at a time (:func:`line_inputs`), and joined into one batch padded as the processor pads
(:func:`batched`)."""

from __future__ import annotations

from typing import Any

from beamsearch.extras import install_hint

__all__ = ["TOKEN_KEYS", "batched", "line_inputs", "media_kinds", "read_file"]

TOKEN_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
"""The processor's outputs with one value per token of the text (padded as the ids are)."""


def media_kinds(processor: Any) -> tuple[str, ...]:
    """The kinds of files ``processor`` reads, by the model inputs it gives: ``"image"``
    (``pixel_values``, ``flattened_patches``), ``"audio"`` (``input_features``, ``input_values``)."""
    parts = [processor, getattr(processor, "image_processor", None), getattr(processor, "feature_extractor", None)]
    names = {name for part in parts if part is not None for name in getattr(part, "model_input_names", ()) or ()}
    return tuple(kind for kind, given in (("image", ("pixel_values", "flattened_patches")),
                                          ("audio", ("input_features", "input_values")))
                 if names & set(given))


def read_file(kind: str, path: str, sampling_rate: int | None) -> Any:
    """The file ``path`` of ``kind``: an RGB ``PIL.Image`` (``"image"``), or the samples of a mono
    audio file, float32 ``[T]`` (``"audio"``, channels averaged), which must be at ``sampling_rate``.

    Raises:
        ValueError: the file cannot be read (missing, not an image / audio file), or its rate
            is not the processor's; ImportError: Pillow / soundfile is not installed.
    """
    if kind == "image":
        try:
            from PIL import Image
        except ImportError:
            raise ImportError(f"reading images needs Pillow: {install_hint('media')}") from None
        try:
            with Image.open(path) as image:
                return image.convert("RGB")
        except OSError as e:  # PIL's UnidentifiedImageError too (not an image file)
            raise ValueError(f"cannot read image {path!r}: {e.strerror or e}") from None
    try:
        import soundfile
    except ImportError:
        raise ImportError(f"reading audio needs soundfile: {install_hint('media')}") from None
    try:
        samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
    except (OSError, RuntimeError, soundfile.LibsndfileError) as e:
        raise ValueError(f"cannot read audio {path!r}: {getattr(e, 'strerror', None) or e}") from None
    if sampling_rate is not None and rate != sampling_rate:
        raise ValueError(f"audio {path!r} is sampled at {rate} Hz; the model's processor reads {sampling_rate} Hz: "
                         "resample it")
    return samples.mean(axis=1)


def line_inputs(processor: Any, text: str, files: dict[str, str], *, reads_text: bool) -> dict[str, Any]:
    """One line's model inputs, as ``processor`` gives them for the line alone: its text (when
    the model reads text beside its files) and its files (:func:`read_file`), each tensor with a
    leading row (Qwen2-VL's ``pixel_values``: its patches).

    Raises:
        ValueError: a file cannot be read, or text for a model that reads none.
    """
    if text and not reads_text:
        raise ValueError(f"the model reads no text beside its {' and '.join(files)}: leave the text out; got {text!r}")
    rate = getattr(getattr(processor, "feature_extractor", processor), "sampling_rate", None)
    kwargs: dict[str, Any] = {"text": text} if text else {}
    values = {kind: read_file(kind, path, rate) for kind, path in files.items()}
    if not hasattr(processor, "tokenizer"):  # a bare image processor or feature extractor: the file by position
        out = processor(*values.values(), **({"sampling_rate": rate} if "audio" in values else {}), return_tensors="pt")
        return {k: v for k, v in out.items() if v is not None}
    if "image" in values:
        kwargs["images"] = values["image"]
    if "audio" in values:
        kwargs.update(audio=values["audio"], sampling_rate=rate)
    out = processor(**kwargs, return_tensors="pt")
    return {k: v for k, v in out.items() if v is not None}


def batched(rows: list[dict[str, Any]], pad_id: int, *, left: bool) -> dict[str, Any]:
    """The inputs of several lines (:func:`line_inputs`) as one batch, padded as a processor pads:
    the per-token values (:data:`TOKEN_KEYS`; ``input_ids`` with ``pad_id``, the others with 0)
    on the left (``left``: a causal model's) or the right, every other tensor with zeros at the
    end of each axis but the first (images of other sizes, audio of other lengths), then joined
    along the first axis.

    Args:
        rows: one dict per line, name -> tensor ``[1 or n_i, ...]``, the same names in each.

    Raises:
        ValueError: the lines' inputs have other names (a line with an image beside one without).
    """
    import torch

    names = set(rows[0])
    if any(set(r) != names for r in rows):
        raise ValueError(f"lines with other inputs in one batch: {sorted(names)} and "
                         f"{sorted(next(set(r) for r in rows if set(r) != names))}")
    out = {}
    for name in rows[0]:
        values = [torch.as_tensor(r[name]) for r in rows]
        shape = [max(v.shape[d] for v in values) for d in range(values[0].dim())]
        fill = pad_id if name == "input_ids" else 0
        padded = []
        for v in values:
            grow = []  # F.pad's order: the last axis first, (before, after) each
            for d in reversed(range(1, v.dim())):
                gap = shape[d] - v.shape[d]
                grow += [gap, 0] if left and name in TOKEN_KEYS else [0, gap]
            padded.append(torch.nn.functional.pad(v, grow, value=fill) if any(grow) else v)
        out[name] = torch.cat(padded)
    return out
