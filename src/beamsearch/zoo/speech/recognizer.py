"""The shipped speech model, read and validated (``speech.json`` + ``speech.safetensors``), and
:class:`SpeechModel.transcribe`: audio to words with the library's CTC and transducer searches."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np
import torch

from beamsearch.speech import Vocabulary, ctc_beam_search, ctc_greedy, transducer_beam_search, transducer_greedy
from beamsearch.zoo.checkpoint import weights_problem
from beamsearch.zoo.speech.features import log_mel
from beamsearch.zoo.speech.model import BLANK, TOKENS, SpeechConfig, SpeechNet

__all__ = ["HEADS", "MAX_SYMBOLS", "SHIPPED", "SpeechModel", "load"]

SHIPPED = pathlib.Path(__file__).resolve().parent
HEADS = ("ctc", "tdt")
MAX_SYMBOLS = 4  # labels a TDT frame may emit, greedy and beam
_NAME = "speech"


class SpeechModel:
    """A trained :class:`~beamsearch.zoo.speech.model.SpeechNet` and how to decode it.

    Attributes:
        sample_rate: the audio's sampling rate (16000).
        frame_duration: seconds per encoder frame.
        vocabulary: the characters (blank, space as the word delimiter, a-z, ``'``).
    """

    def __init__(self, net: SpeechNet) -> None:
        self.net = net.eval()
        self.sample_rate = net.cfg.sample_rate
        self.frame_duration = net.cfg.frame_duration
        self.vocabulary = Vocabulary(list(net.cfg.tokens), word_delimiter=" ")

    def encode(self, audio: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(encoder_out [N, T, D], lengths [N])`` of ``audio`` (float32 mono arrays at ``sample_rate``)."""
        waves = _check_audio(audio)
        lengths = torch.tensor([len(w) for w in waves])
        padded = torch.zeros(len(waves), int(lengths.max()))
        for i, w in enumerate(waves):
            padded[i, : len(w)] = torch.from_numpy(w)
        with torch.no_grad():
            feats, frames = log_mel(padded, lengths)
            return self.net.encode(feats, frames)

    def transcribe(self, audio: Sequence[np.ndarray], *, head: str = "ctc", beam_size: int | None = 8, lm: Any = None,
                   alpha: float = 0.5, beta: float = 1.0, hotwords: Any = None, hotword_weight: float = 10.0,
                   n_best: int = 1, trace: Any = None) -> list[list[Any]]:
        """Per utterance of ``audio`` (float32 mono arrays ``[S]`` at ``sample_rate``), its hypotheses
        best first (``CTCHypothesis`` or ``TransducerHypothesis``: ``.text``, ``.words`` with start and
        end in seconds, the scores).

        ``head``: ``"ctc"`` (:func:`~beamsearch.speech.ctc_beam_search`) or ``"tdt"``
        (:func:`~beamsearch.speech.transducer_beam_search`, frame-synchronous, up to 4 labels a
        frame). ``beam_size`` None is greedy: :func:`~beamsearch.speech.ctc_greedy` (the best path:
        the most probable label per frame, repeats merged, blanks dropped) or
        :func:`~beamsearch.speech.transducer_greedy`; greedy takes no ``lm``, ``hotwords``,
        ``n_best > 1`` or ``trace``. ``lm``: an ``NgramLM``, an ARPA file's path, or None, fused with ``alpha``,
        ``beta``; ``hotwords``/``hotword_weight`` as the searches take them. ``trace``: a new
        :class:`~beamsearch.speech.trace.CTCTrace` (``head="ctc"``) or
        :class:`~beamsearch.speech.transducer_trace.TransducerTrace` (``head="tdt"``) that records
        the beam search (each utterance of ``audio`` one of its utterances).
        """
        if head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}; got {head!r}")
        if beam_size is None and (lm is not None or hotwords is not None or n_best != 1):
            raise ValueError("beam_size=None (greedy) takes no lm, hotwords or n_best > 1; give a beam_size")
        if trace is not None and beam_size is None:
            raise ValueError("trace records a beam search; beam_size=None (greedy) has none: give a beam_size")
        enc, lengths = self.encode(audio)
        with torch.no_grad():
            if head == "ctc":
                emissions = self.net.ctc_log_probs(enc)
                if beam_size is None:
                    best = ctc_greedy(emissions, lengths, blank=BLANK, vocabulary=self.vocabulary,
                                      frame_duration=self.frame_duration)
                    return [[h] for h in best]
                return ctc_beam_search(emissions, lengths, blank=BLANK, beam_size=beam_size, n_best=n_best,
                                       vocabulary=self.vocabulary, frame_duration=self.frame_duration,
                                       hotwords=hotwords, hotword_weight=hotword_weight, lm=lm, alpha=alpha, beta=beta,
                                       trace=trace)
            predictor, joint = self.net.transducer_functions()
            state, durations = self.net.initial_state(len(enc)), list(self.net.cfg.durations)
            if beam_size is None:
                found = transducer_greedy(enc, lengths, predictor=predictor, joint=joint, blank=BLANK, state=state,
                                          durations=durations, max_symbols_per_frame=MAX_SYMBOLS,
                                          vocabulary=self.vocabulary, frame_duration=self.frame_duration)
                return [[h] for h in found]
            return transducer_beam_search(enc, lengths, predictor=predictor, joint=joint, blank=BLANK, state=state,
                                          durations=durations, max_symbols_per_frame=MAX_SYMBOLS, beam_size=beam_size,
                                          n_best=n_best, vocabulary=self.vocabulary,
                                          frame_duration=self.frame_duration, hotwords=hotwords,
                                          hotword_weight=hotword_weight, lm=lm, alpha=alpha, beta=beta, trace=trace)


def _check_audio(audio: Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(audio, np.ndarray) or not isinstance(audio, Sequence) or len(audio) == 0:
        raise ValueError(f"audio must be a non-empty list of 1-D float arrays; got {type(audio).__name__}")
    waves = []
    for i, a in enumerate(audio):
        w = np.asarray(a, dtype=np.float32)
        if w.ndim != 1 or len(w) == 0:
            raise ValueError(f"audio[{i}] must be a non-empty 1-D array of samples; got shape {w.shape}")
        if not np.isfinite(w).all():
            raise ValueError(f"audio[{i}] holds NaN or infinite samples")
        waves.append(w)
    return waves


def load(path: str | os.PathLike | None = None) -> SpeechModel:
    """The speech model of the folder ``path`` (its ``speech.json`` and ``speech.safetensors``);
    None: the shipped model. Every file is validated before use.

    Raises:
        ValueError: a file is missing or unreadable, the config is not valid, or a tensor is missing,
            of the wrong shape or holds NaN/inf (one line naming the file).
    """
    from safetensors.torch import load_file

    folder = SHIPPED if path is None else pathlib.Path(path)
    config, weights = folder / f"{_NAME}.json", folder / f"{_NAME}.safetensors"
    for file in (config, weights):
        if not file.is_file():
            raise ValueError(f"speech model file {file} does not exist")
    cfg = _read_config(config)
    try:
        tensors = load_file(str(weights))
    except Exception as e:  # not a safetensors file: safetensors' own errors
        raise ValueError(f"speech model file {weights} cannot be loaded: {_one_line(e)}") from e
    net = SpeechNet(cfg)
    problem = weights_problem(tensors, {k: tuple(v.shape) for k, v in net.weights().items()})
    if problem is not None:
        raise ValueError(f"speech model file {weights} cannot be loaded: {problem}")
    net.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=False)  # all but the step counters
    return SpeechModel(net)


def _read_config(path: pathlib.Path) -> SpeechConfig:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"speech model file {path} is not a model config: {_one_line(e)}") from e
    config = raw.get("config") if isinstance(raw, dict) else None
    problem = "it has no \"config\" object" if not isinstance(config, dict) else _config_problem(config)
    if problem is not None:
        raise ValueError(f"speech model file {path} is not a model config: {problem}")
    assert isinstance(config, dict)
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    return SpeechConfig(**values)


def _config_problem(config: dict[str, Any]) -> str | None:
    names = [f.name for f in fields(SpeechConfig)]
    missing = [n for n in names if n not in config]
    unknown = [k for k in config if k not in names]
    if missing or unknown:
        return f"it lacks {', '.join(missing)}" if missing else f"unknown fields {', '.join(map(repr, unknown))}"
    if config["tokens"] != list(TOKENS):
        return f"tokens must be {list(TOKENS)}; got {config['tokens']!r:.80}"
    if config["sample_rate"] != 16000:
        return f"sample_rate must be 16000; got {config['sample_rate']!r}"
    durations = config["durations"]
    if not (isinstance(durations, list) and durations and all(_is_int(d) and d >= 0 for d in durations)
            and any(d >= 1 for d in durations)):
        return f"durations must be a list of integers >= 0, one of them >= 1; got {durations!r}"
    for name in ("mels", "subsample", "channels", "hidden", "lstm_hidden", "lstm_layers", "pred_embed",
                 "pred_hidden", "joint_hidden"):
        if not _is_int(config[name]) or config[name] < 1:
            return f"{name} must be an integer >= 1; got {config[name]!r}"
    if config["mels"] != 80:
        return f"mels must be 80 (the features' bands); got {config['mels']!r}"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


