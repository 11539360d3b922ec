"""Which model a spec names (``beamsearch decode --model``, and each Ray worker): a zoo name, a
checkpoint folder, ``hf:DIR`` or the test model ``_toy``, loaded as a
:class:`~beamsearch.corpus.CorpusModel`. Importable with numpy alone: torch is imported when a zoo
or hf model is loaded."""

from __future__ import annotations

import pathlib
from typing import cast

from beamsearch.core import validate as check
from beamsearch.corpus.hf_folder import hf_model
from beamsearch.corpus.hf_speech import is_whisper_folder
from beamsearch.corpus.models import CorpusModel, toy_model

__all__ = ["HF_MAX_STEPS", "SPEECH", "ZOO_MODELS", "ModelSpecError", "load_model"]

ZOO_MODELS = ("seq2seq", "transformer")  # beamsearch.zoo.translator.MODELS, without importing torch here
SPEECH = "speech"  # the speech model (beamsearch.zoo.speech), decoding JSON lines {"audio": PATH}
HF_MAX_STEPS = 64  # the limit of an hf: model without an integer max_steps (as beamsearch decode)


class ModelSpecError(ValueError):
    """A model spec that names no model: its message starts with ``model`` (``beamsearch decode``
    shows it as ``--model ...``)."""


def load_model(spec: str, *, calendar: bool = True, threads: int = 1,
               hf_max_steps: int = HF_MAX_STEPS) -> CorpusModel:
    """The :class:`~beamsearch.corpus.CorpusModel` named by ``spec`` (what ``--model`` takes).

    Args:
        spec: a zoo model name (``"seq2seq"``, ``"transformer"``), a checkpoint folder holding
            exactly one ``seq2seq.json`` / ``transformer.json`` (``beamsearch train --out DIR``),
            ``"hf:DIR"``, a local ``transformers`` folder (:func:`beamsearch.corpus.hf_model`; a
            Whisper folder with its Whisper tokenizer decodes JSON lines ``{"audio": PATH}`` by
            whisper's rules: :class:`beamsearch.corpus.hf_speech.HFSpeech`),
            ``"speech"`` or a folder holding ``speech.json`` (the speech model, which decodes whole
            lines: :class:`beamsearch.corpus.speech_lines.SpeechLines`), or the numpy test model
            ``"_toy"`` / ``"_toy:DELAY"``.
        calendar: constrain a zoo model to real calendar dates.
        threads: torch threads of a zoo or hf model (``torch.set_num_threads``), >= 1.
        hf_max_steps: the most tokens per output of an ``hf:`` model (its limit), >= 1.

    Raises:
        ModelSpecError (a ValueError): ``spec`` is not one of these. TypeError, ValueError: a bad
            ``threads`` / ``hf_max_steps``. OSError, ``CheckpointError``: the files cannot be read.
    """
    threads = check.at_least("threads", threads, 1)
    if not isinstance(spec, str):
        raise TypeError(f"model must be a string (a zoo name, checkpoint folder or _toy); got {spec!r}")
    if spec == "_toy" or spec.startswith("_toy:"):
        try:
            delay = float(spec[5:] or 0)
        except ValueError:
            raise ModelSpecError(f"model _toy:DELAY needs a number of seconds; got {spec!r}") from None
        return toy_model(delay)
    if spec.startswith("hf:"):
        hf_max_steps = check.at_least("hf_max_steps", hf_max_steps, 1)
        if not pathlib.Path(spec[3:]).is_dir():
            raise ModelSpecError(f"model {spec}: {spec[3:]!r} is not a folder")
        import torch

        torch.set_num_threads(threads)
        if is_whisper_folder(spec[3:]):  # whisper's rules, over JSON lines {"audio": PATH}
            from beamsearch.corpus.hf_speech import HFSpeech

            return cast(CorpusModel, HFSpeech(spec[3:]))
        return hf_model(spec[3:], max_steps=hf_max_steps)
    if spec == SPEECH or (pathlib.Path(spec) / f"{SPEECH}.json").is_file():
        import torch

        torch.set_num_threads(threads)
        from beamsearch.corpus.speech_lines import speech_lines

        return cast(CorpusModel, speech_lines(None if spec == SPEECH else spec))
    if spec in ZOO_MODELS:
        name, folder = spec, None
    elif pathlib.Path(spec).is_dir():
        found = [m for m in ZOO_MODELS if (pathlib.Path(spec) / f"{m}.json").is_file()]
        if len(found) != 1:
            raise ModelSpecError(f"model {spec}: the folder holds {'no' if not found else 'more than one'} checkpoint "
                                 f"({', '.join(f'{m}.json' for m in ZOO_MODELS)}); it must hold exactly one")
        name, folder = found[0], spec
    else:
        raise ModelSpecError(f"model must be one of {', '.join((*ZOO_MODELS, SPEECH))}, a checkpoint folder or "
                             f"hf:DIR; got {spec!r}")
    import torch

    torch.set_num_threads(threads)
    from beamsearch.zoo.corpus_model import zoo_model

    return zoo_model(name, folder, calendar=calendar)
