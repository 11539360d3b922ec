"""Long-form audio: openai/whisper's ``transcribe`` loop (30-second windows, each seeking to the
last timestamp of the one before, the previous text as its prompt) for many recordings at once.

Each round decodes the next window of every recording not finished yet, together
(:func:`~beamsearch.whisper.fallback.transcribe_windows`, with its temperature fallback), then
each recording moves on as whisper's loop does:

- a window whose no-speech probability is above ``no_speech_threshold`` (and whose
  ``avg_logprob`` is not above ``logprob_threshold``) is skipped whole;
- its tokens are cut into segments at each pair of consecutive timestamps; the next window starts
  at the last timestamp (``seek``), or after the whole window when the text ends with a single
  timestamp or has no pair (then one segment, to the last timestamp or the window's end);
- the next window's prompt is the text so far since the last reset (``condition_on_previous_text``
  False, or a result decoded above temperature 0.5, resets it).

Not here: word timestamps, ``clip_timestamps``, ``hallucination_silence_threshold`` and
``carry_initial_prompt`` (whisper's defaults leave them off).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.core.engine import StepFn
from beamsearch.whisper.decode import WhisperOptions, WhisperResult
from beamsearch.whisper.fallback import FallbackOptions, transcribe_windows
from beamsearch.whisper.tokens import WhisperTokens, initial_tokens

__all__ = ["N_FRAMES", "Segment", "transcribe_long"]

N_FRAMES = 3000  # mel frames of one 30-second window (hop 160 at 16 kHz)
HOP_SECONDS = 160 / 16000


@dataclass(frozen=True)
class Segment:
    """One segment of a recording (whisper's segment dict).

    Attributes:
        start, end: seconds from the recording's start.
        tokens: its tokens, timestamps included (empty for a segment without text).
        seek: the mel frame its window started at.
        result: the window's result it was cut from (temperature, avg_logprob, ...).
    """

    start: float
    end: float
    tokens: list[int]
    seek: int
    result: WhisperResult = field(repr=False)


@dataclass
class _Recording:
    """One recording's progress through the loop."""

    mel: Any
    content_frames: int
    seek: int = 0
    tokens: list[int] = field(default_factory=list)
    reset_since: int = 0
    segments: list[Segment] = field(default_factory=list)


def transcribe_long(step_fn: StepFn, make_state: Callable[[list[Any], list[list[int]]], Any], mels: Sequence[Any],
                    tokens: WhisperTokens, options: WhisperOptions | None = None,
                    fallback: FallbackOptions | None = None, *, max_rows: int,
                    detokenize: Callable[[list[int]], str],
                    no_speech_probs: Callable[[list[Any], list[list[int]]], list[float]] | None = None,
                    condition_on_previous_text: bool = True, initial_prompt: Sequence[int] = (),
                    n_audio_ctx: int = 1500, n_text_ctx: int = 448,
                    seeds: Sequence[int] | None = None) -> list[list[Segment]]:
    """Transcribe recordings of any length, their windows decoded together round by round.

    Args:
        step_fn: the decoder's step (see :func:`~beamsearch.whisper.decode.decode_windows`).
        make_state: ``make_state(segments, prompts) -> state``: one row per window, from its mel
            segment ``[n_mels, 3000]`` and its prompt (prompts of one call have one length).
        mels: per recording its log-mel spectrogram ``[n_mels, T]`` as whisper computes it for
            ``transcribe`` (the audio padded with 30 s of zeros: ``T - 3000`` frames of content).
        tokens: the special ids; options, fallback: as for ``transcribe_windows``.
        max_rows: the most rows per model call.
        detokenize: ids -> text (the compression ratio, and empty segments).
        no_speech_probs: ``no_speech_probs(segments, prompts) -> [p]`` or None (no skipping).
        condition_on_previous_text: each window's prompt is the text before it (since a reset).
        initial_prompt: ids that come before the first window's text.
        n_audio_ctx, n_text_ctx: the model's contexts.
        seeds: per recording (>= 0) the seed of its samples above temperature 0 (default: its
            position); a window's draws are keyed by it and the window's first frame, so that a
            recording given the same seed gets the same result whatever recordings share its calls.

    Returns:
        Per recording its segments, in order.
    """
    fallback = FallbackOptions() if fallback is None else fallback
    stride = N_FRAMES // n_audio_ctx  # mel frames per timestamp step
    recordings = [_Recording(m, int(m.shape[-1]) - N_FRAMES, tokens=list(initial_prompt)) for m in mels]
    own = list(range(len(mels))) if seeds is None else [int(s) for s in seeds]
    if len(own) != len(mels) or any(s < 0 for s in own):
        raise ValueError(f"seeds must hold one int >= 0 per recording ({len(mels)}); got {own!r:.80}")
    seed_of = {id(r): s for r, s in zip(recordings, own, strict=True)}
    while active := [r for r in recordings if r.seek < r.content_frames]:
        segments = [_window(r.mel, r.seek, min(N_FRAMES, r.content_frames - r.seek)) for r in active]
        prompts = [initial_tokens(tokens, timestamps=(options or WhisperOptions()).timestamps,
                                  prompt=r.tokens[r.reset_since:], n_ctx=n_text_ctx) for r in active]
        nsp = None if no_speech_probs is None else no_speech_probs(segments, prompts)
        done = transcribe_windows(step_fn, _rows_of(make_state, segments, prompts),
                                  prompts, tokens, options, fallback, max_rows=max_rows, no_speech_probs=nsp,
                                  detokenize=detokenize, n_audio_ctx=n_audio_ctx, n_text_ctx=n_text_ctx,
                                  refill=False, seeds=[seed_of[id(r)] * 1_000_003 + r.seek for r in active])
        for r, d in zip(active, done, strict=True):
            size = min(N_FRAMES, r.content_frames - r.seek)
            if _silent(d.result, d.no_speech_prob, fallback):
                r.seek += size
                continue
            new, r.seek = _segments(d.result, r.seek, size, tokens.timestamp_begin, stride)
            for s in new:
                empty = s.start == s.end or not detokenize([t for t in s.tokens if t < tokens.eot]).strip()
                r.segments.append(Segment(s.start, s.end, [] if empty else s.tokens, s.seek, d.result))
                r.tokens += r.segments[-1].tokens
            if not condition_on_previous_text or d.result.temperature > 0.5:
                r.reset_since = len(r.tokens)
    return [r.segments for r in recordings]


def _rows_of(make_state: Callable[[list[Any], list[list[int]]], Any], segments: list[Any],
             prompts: list[list[int]]) -> Callable[[list[int]], Any]:
    """``make_state`` of the round's windows ``w`` (indices into its segments and prompts)."""
    return lambda w: make_state([segments[i] for i in w], [prompts[i] for i in w])


def _window(mel: Any, seek: int, size: int) -> Any:
    """The mel frames ``[seek, seek + size)`` padded with zeros to 3000 (whisper's ``pad_or_trim``)."""
    segment = mel[:, seek : seek + size]
    if size == N_FRAMES:
        return segment
    if hasattr(segment, "new_zeros"):  # torch
        import torch

        return torch.cat([segment, segment.new_zeros((segment.shape[0], N_FRAMES - size))], dim=1)
    return np.concatenate([segment, np.zeros((segment.shape[0], N_FRAMES - size), segment.dtype)], axis=1)


def _silent(result: WhisperResult, no_speech_prob: float, o: FallbackOptions) -> bool:
    """whisper's skip: no-speech probability above its threshold, unless avg_logprob is above its."""
    if o.no_speech_threshold is None or not no_speech_prob > o.no_speech_threshold:
        return False
    return not (o.logprob_threshold is not None and result.avg_logprob > o.logprob_threshold)


def _segments(result: WhisperResult, seek: int, size: int, timestamp_begin: int,
              stride: int) -> tuple[list[Segment], int]:
    """The window's segments and the next seek (whisper's slicing at consecutive timestamps)."""
    toks = result.tokens
    offset, precision = seek * HOP_SECONDS, stride * HOP_SECONDS
    is_ts = [t >= timestamp_begin for t in toks]
    single_ending = is_ts[-2:] == [False, True]
    slices = [i + 1 for i in range(len(toks) - 1) if is_ts[i] and is_ts[i + 1]]
    if not slices:
        stamps = [t for t in toks if t >= timestamp_begin]
        duration = size * HOP_SECONDS
        if stamps and stamps[-1] != timestamp_begin:
            duration = (stamps[-1] - timestamp_begin) * precision
        return [Segment(offset, offset + duration, list(toks), seek, result)], seek + size
    if single_ending:
        slices.append(len(toks))
    out, last = [], 0
    for cut in slices:
        part = toks[last:cut]
        out.append(Segment(offset + (part[0] - timestamp_begin) * precision,
                           offset + (part[-1] - timestamp_begin) * precision, list(part), seek, result))
        last = cut
    if single_ending:
        return out, seek + size
    return out, seek + (toks[last - 1] - timestamp_begin) * stride
