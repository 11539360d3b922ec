"""A small speech recognizer trained here on audio synthesized with espeak-ng: spoken dates, clock
times and numbers (:mod:`beamsearch.zoo.speech.text`), a CTC head and a TDT head on one encoder.
`load` and `SpeechModel` need torch (imported when first used); `text` and `synth` need only numpy.

``load()`` reads the shipped model (``speech.json`` and ``speech.safetensors`` in this folder);
``SpeechModel.transcribe(audio, head="ctc" | "tdt", beam_size=8, lm=..., hotwords=...)`` decodes
with :func:`beamsearch.speech.ctc_beam_search` / :func:`beamsearch.speech.transducer_beam_search`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SpeechModel", "load"]


def __getattr__(name: str) -> Any:
    """``load`` and ``SpeechModel`` are imported on first use: they need torch, and the text and
    audio modules of this package do not."""
    if name in __all__:
        from beamsearch.zoo.speech import recognizer

        return getattr(recognizer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
