"""Audio in, text out, with ``transformers``' speech encoder-decoders built or saved locally:
:func:`transcribe`.

- ``WhisperForConditionalGeneration``: openai/whisper's ``transcribe`` (:mod:`beamsearch.whisper`):
  the audio padded with 30 s of silence and made into log-mel features by the processor's feature
  extractor over the whole recording (as whisper's ``log_mel_spectrogram(audio, padding=N_SAMPLES)``),
  30-second windows seeking by the last timestamp
  (:func:`~beamsearch.whisper.transcribe_long`), each window decoded by whisper's rules with its
  temperature fallback (:func:`~beamsearch.whisper.transcribe_windows`) through
  :func:`beamsearch.hf.seq2seq_lm`'s steps, the no-speech probability read at
  ``<|startoftranscript|>``. Its special tokens are read from the tokenizer by name
  (:meth:`~beamsearch.whisper.WhisperTokens.from_transformers`).
- Any other speech encoder-decoder (``MoonshineForConditionalGeneration``,
  ``Speech2TextForConditionalGeneration``): no timestamp, language or task tokens, so none of
  whisper's rules that need them (the timestamp rules, the prompt, ``suppress_blank``'s and
  ``suppress_tokens``' ids, the no-speech check) and no fallback or long-form windows: one search
  per recording by the engine's beam or greedy search as :func:`beamsearch.hf.generate` runs it
  under the model's generation config (its rule: ``num_beams`` = ``beam_size``,
  ``num_return_sequences`` = ``n_best``, ``max_new_tokens`` = ``sample_len``, the config's
  ``length_penalty``), the recording whole (it must fit the encoder's positions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from beamsearch.core import validate as check
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.hf.caches import inference
from beamsearch.hf.generation import generate
from beamsearch.hf.seq2seq import seq2seq_lm
from beamsearch.whisper import (
    FallbackOptions,
    Segment,
    WhisperOptions,
    WhisperResult,
    WhisperTokens,
    transcribe_long,
)

__all__ = ["SAMPLE_RATE", "Transcription", "TranscriptSegment", "TranscriptWindow", "is_whisper", "transcribe"]

SAMPLE_RATE = 16000
"""The rate (Hz) every speech model here reads (the recordings are resampled to it first)."""
_WINDOW_SAMPLES = 30 * SAMPLE_RATE  # whisper's N_SAMPLES: one window, and the padding after the audio
_WINDOW_FRAMES = 3000


@dataclass(frozen=True)
class TranscriptWindow:
    """One decoded window (a Whisper window of up to 30 s, or a whole recording).

    Attributes:
        start, end: seconds from the recording's start.
        candidates: the n-best, best first: each text token ids (timestamps included, eot not)
            with ``logprob`` (the model's) and ``score`` (the rank's: whisper's length penalty, or
            generate's).
        texts: the candidates' texts.
        temperature: the temperature of the result kept (0.0 for a model without fallback).
        avg_logprob: the best's ``logprob / (tokens + 1)`` (whisper's).
    """

    start: float
    end: float
    candidates: list[Hypothesis]
    texts: list[str]
    temperature: float = 0.0
    avg_logprob: float = float("nan")


@dataclass(frozen=True)
class TranscriptSegment:
    """One segment: its text between ``start`` and ``end`` (seconds), its tokens (timestamps
    included), and the index of its window in :attr:`Transcription.windows`."""

    start: float
    end: float
    text: str
    tokens: list[int]
    window: int


@dataclass(frozen=True)
class Transcription:
    """One recording's transcript: ``text`` (the segments' texts), ``segments`` in order, and the
    ``windows`` they were cut from (each with its n-best)."""

    text: str
    segments: list[TranscriptSegment]
    windows: list[TranscriptWindow]


def is_whisper(model: Any) -> bool:
    """Whether ``model`` is decoded by whisper's rules (its config's ``model_type`` is ``"whisper"``)."""
    return getattr(model.config, "model_type", None) == "whisper"


@inference
def transcribe(model: Any, processor: Any, audio: Sequence[np.ndarray], options: WhisperOptions | None = None,
               fallback: FallbackOptions | None = None, *, language: str | None = None, task: str = "transcribe",
               condition_on_previous_text: bool = True, initial_prompt: str = "",
               max_rows: int = 64, seeds: Sequence[int] | None = None) -> list[Transcription]:
    """Transcribe recordings with a speech encoder-decoder (see the module docstring).

    Args:
        model: a ``transformers`` speech encoder-decoder in eval mode.
        processor: its processor (feature extractor and tokenizer, ``AutoProcessor``).
        audio: per recording float32 ``[S_i]`` mono samples at 16 kHz (:data:`SAMPLE_RATE`).
        options: whisper's decoding options (None: the defaults). A model other than Whisper reads
            ``beam_size``, ``n_best`` and ``sample_len`` only; an option it cannot follow given
            away from its default (``patience``, ``length_penalty``, ``temperature``, ``best_of``,
            ``logits_processors``, ``lm``) is a ValueError.
        fallback: the temperatures and checks (None: whisper's defaults; Whisper only).
        language, task: the start sequence (Whisper only; see
            :meth:`~beamsearch.whisper.WhisperTokens.from_transformers`).
        condition_on_previous_text: each window's prompt is the text before it (Whisper only).
        initial_prompt: text before the first window's (Whisper only).
        max_rows: the most decoder rows per model call (>= a window's rows: its beam or ``best_of``).
        seeds: per recording (>= 0) the seed of its samples (Whisper's fallback; default: its
            position): a recording decoded with the same seed gets the same result in any batch.

    Returns:
        Per recording its :class:`Transcription`.
    """
    options = WhisperOptions() if options is None else options
    max_rows = check.at_least("max_rows", max_rows, 1)
    clips = [_samples(a, i) for i, a in enumerate(audio)]
    if is_whisper(model):
        return _whisper(model, processor, clips, options, fallback, (language, task),
                        condition_on_previous_text, initial_prompt, max_rows, seeds)
    given: dict[str, Any] = {"fallback": fallback, "language": language, "initial_prompt": initial_prompt or None,
                             "seeds": seeds}
    given.update({"task": None if task == "transcribe" else task,
                  "condition_on_previous_text": None if condition_on_previous_text else False})
    for name, value in given.items():
        if value is not None:
            raise ValueError(f"{name} applies to Whisper only (it needs Whisper's special tokens); got {name}="
                             f"{value!r} for {type(model).__name__}")
    return _generated(model, processor, clips, options, max_rows)


def _samples(audio: Any, i: int) -> np.ndarray:
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim != 1 or not x.size or not np.isfinite(x).all():
        raise ValueError(f"audio[{i}] must be finite mono samples float32 [S], S >= 1; got shape {x.shape}")
    return x


def whisper_features(processor: Any, audio: np.ndarray) -> torch.Tensor:
    """The log-mel features ``[n_mels, S // 160 + 3000]`` of one recording as whisper's
    ``transcribe`` computes them: the audio followed by 30 s of zeros, one spectrogram over the
    whole (its normalisation by the whole's peak), ``S // 160`` frames of content."""
    extractor = getattr(processor, "feature_extractor", processor)
    padded = np.concatenate([audio, np.zeros(_WINDOW_SAMPLES, np.float32)])
    out = extractor(padded, sampling_rate=SAMPLE_RATE, truncation=False, padding="longest", return_tensors="pt")
    return out["input_features"][0]


def _whisper(model: Any, processor: Any, clips: list[np.ndarray], options: WhisperOptions,
             fallback: FallbackOptions | None, start: tuple[str | None, str], condition: bool, initial_prompt: str,
             max_rows: int, seeds: Sequence[int] | None) -> list[Transcription]:
    """:func:`transcribe` for Whisper: openai/whisper's ``transcribe`` loop on the model's steps."""
    cfg, tokenizer = model.config, processor.tokenizer
    if 2 * cfg.max_source_positions != _WINDOW_FRAMES:
        raise ValueError(f"transcribe reads 30-second windows of {_WINDOW_FRAMES} mel frames: the model's "
                         f"max_source_positions must be {_WINDOW_FRAMES // 2}; got {cfg.max_source_positions}")
    tokens = WhisperTokens.from_transformers(tokenizer, *start)
    steps = _WhisperSteps(model, tokens)
    text_of = _text_of(tokenizer, tokens)
    device = next(model.parameters()).device
    mels = [whisper_features(processor, clip).to(device) for clip in clips]
    prompt = list(tokenizer.encode(" " + initial_prompt.strip(), add_special_tokens=False)) if initial_prompt else []
    found = transcribe_long(steps, steps.make_state, mels, tokens, options, fallback, max_rows=max_rows,
                            detokenize=text_of, no_speech_probs=steps.no_speech_probs,
                            condition_on_previous_text=condition, initial_prompt=prompt,
                            n_audio_ctx=cfg.max_source_positions, n_text_ctx=cfg.max_target_positions, seeds=seeds)
    return [_transcription(segments, text_of) for segments in found]


def _text_of(tokenizer: Any, tokens: WhisperTokens) -> Callable[[list[int]], str]:
    """ids -> text, the timestamps and special tokens left out (whisper's ``Tokenizer.decode``)."""
    return lambda ids: tokenizer.decode([t for t in ids if t < tokens.eot])


class _WhisperSteps:
    """Whisper's decoder steps through :func:`seq2seq_lm`: ``make_state`` encodes a batch of
    windows and feeds their prompts but the last token; the step is that of the first batch's
    :class:`~beamsearch.hf.seq2seq.Seq2SeqStep` (the same model: its steps take any batch's state)."""

    def __init__(self, model: Any, tokens: WhisperTokens) -> None:
        self.model, self.tokens = model, tokens
        self.step: Any = None

    def make_state(self, segments: list[torch.Tensor], prompts: list[list[int]]) -> Any:
        prepared = seq2seq_lm(self.model, None, input_features=torch.stack(segments), decoder_input_ids=prompts)
        if self.step is None:
            self.step = prepared.step
        return prepared.init_state

    def __call__(self, state: Any, y_prev: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return self.step(state, y_prev)

    def no_speech_probs(self, segments: list[torch.Tensor], prompts: list[list[int]]) -> list[float]:
        """Each window's softmax at ``<|nospeech|>`` of the logits at ``<|startoftranscript|>``
        (nan for a tokenizer without that token), prompts of one length decoded together."""
        if self.tokens.no_speech is None:
            return [float("nan")] * len(segments)
        out = [0.0] * len(segments)
        by_length: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_length.setdefault(len(p), []).append(i)
        for rows in by_length.values():
            at = prompts[rows[0]].index(self.tokens.sot)
            logits = self.model(input_features=torch.stack([segments[i] for i in rows]),
                                decoder_input_ids=torch.tensor([prompts[i] for i in rows])).logits[:, at]
            for i, p in zip(rows, logits.float().softmax(-1)[:, self.tokens.no_speech].tolist(), strict=True):
                out[i] = p
        return out


def _transcription(segments: list[Segment], text_of: Callable[[list[int]], str]) -> Transcription:
    """A recording's segments (each holding its window's result) as a :class:`Transcription`."""
    windows: list[TranscriptWindow] = []
    out: list[TranscriptSegment] = []
    seen: dict[int, int] = {}  # id(window result) -> its index in windows
    for s in segments:
        key = id(s.result)
        if key not in seen:
            seen[key] = len(windows)
            windows.append(_window(s.result, s.seek * 0.01, text_of))
        out.append(TranscriptSegment(s.start, s.end, text_of(s.tokens).strip(), list(s.tokens), seen[key]))
    for i, w in enumerate(windows):  # a window ends where the next starts, the last at its last segment's end
        end = windows[i + 1].start if i + 1 < len(windows) else max(s.end for s in out if s.window == i)
        windows[i] = dataclasses.replace(w, end=end)
    text = text_of([t for s in out for t in s.tokens]).strip()
    return Transcription(text, out, windows)


def _window(result: WhisperResult, start: float, text_of: Callable[[list[int]], str]) -> TranscriptWindow:
    return TranscriptWindow(start, start, list(result.n_best), [text_of(h.tokens).strip() for h in result.n_best],
                            result.temperature, result.avg_logprob)


_WHISPER_ONLY = {"patience": None, "length_penalty": None, "temperature": 0.0, "best_of": None,
                 "logits_processors": (), "lm": None}


def _generated(model: Any, processor: Any, clips: list[np.ndarray], options: WhisperOptions,
               max_rows: int) -> list[Transcription]:
    """:func:`transcribe` for a model without Whisper's tokens: :func:`generate` per batch of
    recordings (``max_rows // beam_size`` at a time)."""
    for name, default in _WHISPER_ONLY.items():
        if getattr(options, name) != default:
            raise ValueError(f"{name} is whisper's rule: {type(model).__name__} decodes by generate's rule "
                             f"(beam_size, n_best and sample_len apply); got {name}={getattr(options, name)!r}")
    beams = options.beam_size or 1
    per_call = max(1, max_rows // beams)
    settings: dict[str, Any] = {"num_beams": beams, "num_return_sequences": options.n_best}
    if options.sample_len is not None:
        settings["max_new_tokens"] = options.sample_len
    tokenizer = processor.tokenizer
    out: list[Transcription] = []
    for at in range(0, len(clips), per_call):
        batch = clips[at : at + per_call]
        inputs = processor(batch if len(batch) > 1 else batch[0], sampling_rate=SAMPLE_RATE, return_tensors="pt",
                           padding=True)
        found = generate(model, **{k: v for k, v in inputs.items()}, **settings)
        for clip, found_hyps in zip(batch, found.hypotheses, strict=True):
            hyps = [Hypothesis(h.tokens[: len(h.tokens) - int(h.finished)], h.logprob, h.score, h.finished)
                    for h in found_hyps]  # eos left out, as whisper's
            texts = [tokenizer.decode(h.tokens, skip_special_tokens=True).strip() for h in hyps]
            end = len(clip) / SAMPLE_RATE
            window = TranscriptWindow(0.0, end, list(hyps), texts, 0.0,
                                      hyps[0].logprob / (len(hyps[0].tokens) + 1) if hyps else float("nan"))
            tokens = list(hyps[0].tokens) if hyps else []
            out.append(Transcription(texts[0] if texts else "", [TranscriptSegment(0.0, end, texts[0] if texts else "",
                                                                                   tokens, 0)], [window]))
    return out
