"""Whisper-style decoding: openai/whisper's rules, beam rule and sampling on the one engine, for
whole batches (docs/whisper.md).

- :mod:`~beamsearch.whisper.tokens`: the special ids and a window's prompt;
- :mod:`~beamsearch.whisper.rules`: ``suppress_blank``, ``suppress_tokens`` and the timestamp
  rules as logits processors;
- :mod:`~beamsearch.whisper.beam`: whisper's beam rule (patience) and its ranking (length penalty);
- :mod:`~beamsearch.whisper.sample`: sampling at a temperature, ``best_of``, seeded per input;
- :mod:`~beamsearch.whisper.decode`: :func:`decode_windows`, one window per input;
- :mod:`~beamsearch.whisper.fallback`: :func:`transcribe_windows`, temperature fallback per window
  in one refilled batch;
- :mod:`~beamsearch.whisper.longform`: :func:`transcribe_long`, recordings of any length in
  30-second windows, seeking by the last timestamp;
- :mod:`~beamsearch.whisper.hotwords`: :class:`HotwordBias`, hotword biasing over the decoder's
  tokens (``WhisperOptions(logits_processors=...)``);
- :mod:`~beamsearch.whisper.word_lm`: :class:`WordLM`, a word n-gram LM fused at word boundaries
  (``WhisperOptions(lm=...)``);
- :mod:`~beamsearch.whisper.openai_model`: an ``openai-whisper`` model as a step function.
"""

from beamsearch.whisper.beam import WhisperBeam, finalize, rank, whisper_score
from beamsearch.whisper.decode import WhisperOptions, WhisperResult, compression_ratio, decode_windows
from beamsearch.whisper.fallback import (
    FallbackOptions,
    FallbackResult,
    at_temperature,
    needs_fallback,
    transcribe_windows,
)
from beamsearch.whisper.hotwords import HotwordBias, HotwordRows
from beamsearch.whisper.longform import Segment, transcribe_long
from beamsearch.whisper.openai_model import CrossCache, OpenAIWhisperState, OpenAIWhisperStep, no_speech_probs
from beamsearch.whisper.rules import TimestampRules, whisper_processors
from beamsearch.whisper.sample import WhisperSample
from beamsearch.whisper.tokens import WhisperTokens, initial_tokens, suppressed_ids
from beamsearch.whisper.word_lm import WordLM, WordLMFusion

__all__ = [
    "CrossCache",
    "FallbackOptions",
    "FallbackResult",
    "HotwordBias",
    "HotwordRows",
    "OpenAIWhisperState",
    "OpenAIWhisperStep",
    "Segment",
    "TimestampRules",
    "WhisperBeam",
    "WhisperOptions",
    "WhisperResult",
    "WhisperSample",
    "WhisperTokens",
    "WordLM",
    "WordLMFusion",
    "at_temperature",
    "compression_ratio",
    "decode_windows",
    "finalize",
    "initial_tokens",
    "needs_fallback",
    "no_speech_probs",
    "rank",
    "suppressed_ids",
    "transcribe_long",
    "transcribe_windows",
    "whisper_processors",
    "whisper_score",
]
