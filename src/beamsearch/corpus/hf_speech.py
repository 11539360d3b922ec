"""A saved ``transformers`` speech encoder-decoder folder (Whisper, Moonshine, Speech2Text), audio
in, text out (:func:`beamsearch.hf.speech.transcribe`): ``beamsearch transcribe --model hf:DIR``
and, for a Whisper folder, ``beamsearch decode --model hf:DIR`` over JSON lines ``{"audio": PATH}``
(:class:`HFSpeech`'s ``line_search``, the corpus path of the speech model:
:class:`~beamsearch.corpus.speech_lines.SpeechSearch`).

Each recording is read as the speech model's (:func:`beamsearch.speech.audio.read_audio`: mono,
resampled to 16 kHz); a Whisper folder decodes it in 30-second windows (long-form, with whisper's
temperature fallback), beam search of 5 and ``best_of`` 5 by default (openai/whisper's command
line); a Moonshine or Speech2Text folder in one search per recording, by ``generate``'s rule.

A recording's records are those of the speech model (``text``, ``nbest`` with ``text``,
``score``, ``acoustic_score`` = the model's log-probability, ``lm_score``, ``word_score``,
``hotword_bonus`` = 0, ``labels`` = tokens, ``words`` = []), with ``segments`` beside them:
``[{"start", "end", "text"}]`` in seconds. A long recording's n-best list joins one candidate per
window (:func:`~beamsearch.corpus.speech_lines.join_chunks`: the ``n`` best sums of their scores),
the windows cut where the best candidates put them.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.corpus.speech_lines import SpeechSearch, join_chunks

__all__ = ["SPEECH_MODEL_TYPES", "HFSpeech", "is_whisper_folder", "speech_model_type"]

SPEECH_MODEL_TYPES = ("whisper", "moonshine", "speech_to_text")
"""The ``model_type`` of the folders :class:`HFSpeech` loads."""
WHISPER_BEAM = 5  # openai/whisper's command line: beam_size 5, best_of 5
_WINDOW_SAMPLES = 30 * 16000


def speech_model_type(directory: str | os.PathLike) -> str | None:
    """The ``model_type`` of the folder's ``config.json`` (None when it has none that can be read)."""
    try:
        config = json.loads((pathlib.Path(directory) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = config.get("model_type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else None


def is_whisper_folder(directory: str | os.PathLike) -> bool:
    """Whether the folder holds a Whisper model with a Whisper tokenizer (``<|startoftranscript|>``
    among its tokens): decoded by whisper's rules. A Whisper model saved with another tokenizer is
    a plain encoder-decoder to ``beamsearch decode``."""
    if speech_model_type(directory) != "whisper":
        return False
    for name in ("tokenizer.json", "tokenizer_config.json", "added_tokens.json"):
        path = pathlib.Path(directory) / name
        if path.is_file() and "<|startoftranscript|>" in path.read_text(encoding="utf-8", errors="replace"):
            return True
    return False


class HFSpeech:
    """A saved speech encoder-decoder with its processor (nothing downloaded).

    Attributes:
        model, processor: the ``transformers`` model (eval mode) and its processor.
        whisper: whether whisper's rules decode it.
        media: the kinds of files a line names (``"audio"``); sample_rate: 16000.
    """

    media = ("audio",)
    sample_rate = 16000

    def __init__(self, directory: str | os.PathLike) -> None:
        kind = speech_model_type(directory)
        if kind not in SPEECH_MODEL_TYPES:
            kinds = ", ".join(SPEECH_MODEL_TYPES)
            raise ValueError(f"{os.fspath(directory)!r} holds no speech encoder-decoder ({kinds}): its config.json's "
                             f"model_type is {kind!r}")
        import transformers
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        self.processor = transformers.AutoProcessor.from_pretrained(directory, local_files_only=True)
        if getattr(self.processor, "tokenizer", None) is None or getattr(self.processor, "feature_extractor",
                                                                          None) is None:
            raise ValueError(f"{os.fspath(directory)!r}: the folder's processor needs a feature extractor and a "
                             "tokenizer (save the model's processor with it)")
        self.model = transformers.AutoModelForSpeechSeq2Seq.from_pretrained(directory, local_files_only=True).eval()
        self.whisper = kind == "whisper"

    def transcribe(self, audio: list[np.ndarray], *, beam_size: int | None = WHISPER_BEAM, n_best: int = 1,
                   max_rows: int = 64) -> list[dict[str, Any]]:
        """Each recording's outputs ``{"text", "segments", "nbest"}`` (see the module docstring).

        Args:
            audio: per recording float32 ``[S_i]`` at 16 kHz.
            beam_size: None (greedy) or the beam; n_best: candidates per recording (<= the beam).
            max_rows: the most decoder rows per model call.
        """
        from beamsearch.hf.speech import transcribe
        from beamsearch.whisper import FallbackOptions, WhisperOptions

        options = WhisperOptions(beam_size=beam_size, n_best=n_best)
        fallback = FallbackOptions(best_of=max(WHISPER_BEAM, n_best)) if self.whisper else None
        seeds = [0] * len(audio) if self.whisper else None  # a file's samples: the same alone or in a batch
        found = transcribe(self.model, self.processor, audio, options, fallback, max_rows=max_rows, seeds=seeds)
        out = []
        for t in found:
            per_window = [[_candidate(h, text) for h, text in zip(w.candidates, w.texts, strict=True)]
                          for w in t.windows if w.candidates]  # (none: every token of its first step masked)
            nbest = join_chunks(per_window, n_best) if per_window else [_candidate(None, "")]
            segments = [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text} for s in t.segments]
            out.append({"text": t.text, "segments": segments, "nbest": nbest})
        return out

    def line_search(self, *, mode: str = "beam", max_rows: int = 320, max_tokens: int | None = None,
                    beam_size: int | None = None, n_best: int = 1) -> HFSpeechSearch:
        """The search of a corpus run (``beamsearch decode --model hf:DIR``), checked (a bad keyword
        is a ValueError naming it).

        Args:
            mode: ``"beam"`` (``beam_size``, default 5) or ``"greedy"`` (one candidate).
            max_rows: the most decoder rows per model call: lines join a batch while their
                windows times the beam fit (a line of more is decoded alone).
            max_tokens: not for speech (None).
            beam_size, n_best: as :meth:`transcribe` takes them.

        Records: ``{"index", "input", ...the line's other keys, "audio", "text", "segments",
        "nbest"}`` (as ``beamsearch transcribe --model hf:DIR --json`` prints a file), or
        ``{"index", "input", "error"}``.
        """
        if mode not in ("beam", "greedy"):
            raise ValueError(f"mode must be 'beam' or 'greedy' for a speech model; got {mode!r}")
        if max_tokens is not None:
            raise ValueError(f"max_tokens does not apply to a speech model; got max_tokens={max_tokens!r}")
        max_rows, n_best = check.at_least("max_rows", max_rows, 1), check.at_least("n_best", n_best, 1)
        if mode == "greedy":
            if beam_size is not None or n_best != 1:
                raise ValueError(f"mode 'greedy' keeps one candidate: it takes no "
                                 f"{'beam_size' if beam_size is not None else 'n_best > 1'}")
        else:
            beam_size = WHISPER_BEAM if beam_size is None else check.at_least("beam_size", beam_size, 1)
            if n_best > beam_size:
                raise ValueError(f"n_best must be <= beam_size={beam_size}; got {n_best}")
        group = max(beam_size or 1, WHISPER_BEAM if self.whisper else 1)  # a fallback's best_of rows
        if max_rows < group:
            raise ValueError(f"max_rows must be >= the rows of one window ({group}); got {max_rows}")
        header = {"mode": mode, "beam_size": beam_size, "n_best": n_best}
        return HFSpeechSearch(self, {"beam_size": beam_size, "n_best": n_best}, max_rows, 30.0, header)


class HFSpeechSearch(SpeechSearch):
    """A corpus run of an :class:`HFSpeech` (its ``line_search``): lines join a batch while their
    30-second windows times the rows per window fit ``max_rows``."""

    def rows_of(self, audio: np.ndarray) -> int:
        return math.ceil(len(audio) / _WINDOW_SAMPLES) * (self.keywords["beam_size"] or 1)

    def decode_batch(self, audio: list[np.ndarray]) -> list[dict[str, Any]]:
        return self.model.transcribe(audio, max_rows=self.max_rows, **self.keywords)


def _candidate(h: Any, text: str) -> dict[str, Any]:
    """A window's candidate as the speech model's n-best record."""
    score, logprob, labels = (0.0, 0.0, 0) if h is None else (float(h.score), float(h.logprob), len(h.tokens))
    return {"text": text, "score": score, "acoustic_score": logprob, "lm_score": 0.0, "word_score": 0.0,
            "hotword_bonus": 0.0, "labels": labels, "words": []}
