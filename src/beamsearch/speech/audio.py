"""Audio files for speech models: read (WAV, FLAC and whatever else libsndfile reads), mixed to mono,
resampled, and long recordings cut into chunks at their quietest points.

``read_audio(path, sample_rate)`` reads with soundfile, averages the channels, and resamples with
soxr (its default "HQ" quality) to ``sample_rate``; the result is float32 ``[S]`` in [-1, 1].
A file that cannot be read, holds no samples, holds NaN or infinite samples, or is silent (its
peak below :data:`SILENCE_DBFS` dB full scale after mixing) is an :class:`AudioError`, one line
naming the file. Its two steps are public for samples got otherwise (a synthesizer's output):
``to_mono(samples)`` averages the channels, ``resample(mono, rate, sample_rate)`` converts the
rate with soxr; ``resample(to_mono(x), rate, 16000)`` is what ``read_audio`` does to a file's samples.

``chunks(audio, sample_rate, max_seconds=20)`` cuts a long recording into pieces of at most
``max_seconds``: each cut lies at the quietest ``frame_seconds`` window (the lowest mean square,
the latest of equals) in the last ``search_seconds`` before the limit, so that a cut falls between
words where there is a pause. A recording no longer than ``max_seconds`` is one chunk. Each chunk
knows its start, by which word timestamps decoded from it are shifted back onto the recording.

soundfile and soxr are imported when a file is read: ``import beamsearch`` works without them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

SILENCE_DBFS = -60.0
"""A recording whose peak is below this many dB full scale (|x| < 0.001) is silent."""
MAX_SECONDS = 20.0
SEARCH_SECONDS = 4.0
FRAME_SECONDS = 0.025


class AudioError(ValueError):
    """An audio file that cannot be transcribed: unreadable, empty, not finite or silent (one line,
    naming the file)."""


@dataclass(frozen=True)
class Chunk:
    """A piece of a recording: ``audio`` float32 ``[s]`` starting at sample ``start``."""

    start: int
    audio: np.ndarray

    def start_seconds(self, sample_rate: int) -> float:
        """Where the chunk starts in the recording, in seconds."""
        return self.start / sample_rate


def read_audio(path: str | os.PathLike, sample_rate: int = 16000) -> np.ndarray:
    """float32 ``[S]``: the file's samples averaged over its channels, resampled to ``sample_rate`` Hz.

    Raises:
        AudioError: the file cannot be read, has no samples, has NaN or infinite samples, or is silent.
        ImportError: soundfile or soxr is not installed.
    """
    check_rate(sample_rate)
    import soundfile

    name = os.fspath(path)
    if not os.path.isfile(name):
        raise AudioError(f"{name}: no such file" if not os.path.exists(name) else f"{name}: not a file")
    try:
        samples, rate = soundfile.read(name, dtype="float32", always_2d=True)  # [S, channels]
    except (OSError, RuntimeError) as e:  # LibsndfileError is a RuntimeError
        reason = getattr(e, "error_string", None) or getattr(e, "strerror", None) or str(e)
        raise AudioError(f"{name}: cannot read audio: {reason}") from None
    if samples.shape[0] == 0:
        raise AudioError(f"{name}: the file has no audio samples")
    mono = to_mono(samples)  # [S]
    if not np.isfinite(mono).all():
        raise AudioError(f"{name}: the audio has NaN or infinite samples")
    peak = float(np.abs(mono).max())
    if peak < 10.0 ** (SILENCE_DBFS / 20.0):
        level = "all zero" if peak == 0.0 else f"peak {20.0 * np.log10(peak):.1f} dBFS"
        raise AudioError(f"{name}: the audio is silent ({level}; below {SILENCE_DBFS:g} dBFS)")
    return resample(mono, rate, sample_rate)


def to_mono(samples: np.ndarray) -> np.ndarray:
    """float32 ``[S]``: ``samples`` float ``[S]`` (one channel, returned as float32) or ``[S, C]``
    (C channels, averaged)."""
    samples = np.asarray(samples)
    if samples.ndim == 1:
        return samples.astype(np.float32, copy=False)
    if samples.ndim != 2:
        raise ValueError(f"samples must be [S] or [S, channels]; got shape {samples.shape}")
    return samples.mean(axis=1, dtype=np.float32)


def resample(mono: np.ndarray, rate: int, sample_rate: int) -> np.ndarray:
    """float32 ``[S']``: one channel ``mono`` float ``[S]`` at ``rate`` Hz resampled to
    ``sample_rate`` Hz with soxr (its default "HQ" quality); the samples as float32 when the rates
    are equal. soxr is imported here.

    Raises:
        ValueError: a rate is not an int >= 1, or ``mono`` is not one channel.
        ImportError: soxr is not installed.
    """
    check_rate(rate, "rate")
    check_rate(sample_rate)
    mono = np.asarray(mono)
    if mono.ndim != 1:
        raise ValueError(f"mono must be one channel, shape [S]; got shape {mono.shape}")
    if rate == sample_rate:
        return mono.astype(np.float32, copy=False)
    import soxr

    return np.asarray(soxr.resample(mono, rate, sample_rate), dtype=np.float32)


def chunks(audio: np.ndarray, sample_rate: int, *, max_seconds: float = MAX_SECONDS,
           search_seconds: float = SEARCH_SECONDS, frame_seconds: float = FRAME_SECONDS) -> list[Chunk]:
    """``audio`` float ``[S]`` cut into chunks of at most ``max_seconds`` (see the module docstring).

    Returns the chunks in order; their ``audio`` are views of ``audio`` that together cover it.
    """
    check_rate(sample_rate)
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise ValueError(f"audio must be one channel, shape [S]; got shape {audio.shape}")
    if not 0 < frame_seconds < search_seconds < max_seconds:
        raise ValueError("chunks needs 0 < frame_seconds < search_seconds < max_seconds; got "
                         f"{frame_seconds}, {search_seconds}, {max_seconds}")
    limit, search = int(max_seconds * sample_rate), int(search_seconds * sample_rate)
    frame = max(1, int(frame_seconds * sample_rate))
    cuts = [0]
    while audio.size - cuts[-1] > limit:
        lo = cuts[-1] + limit - search
        cuts.append(lo + quietest(audio[lo : cuts[-1] + limit], frame))
    cuts.append(audio.size)
    return [Chunk(a, audio[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]


def quietest(segment: np.ndarray, frame: int) -> int:
    """The centre of the ``frame``-sample window of ``segment`` with the lowest mean square (the
    latest of equals)."""
    squares = np.square(segment, dtype=np.float64)
    energy = np.lib.stride_tricks.sliding_window_view(squares, frame).sum(axis=1)  # [len(segment) - frame + 1]
    lowest = energy.size - 1 - int(np.argmin(energy[::-1]))
    return lowest + frame // 2


def check_rate(sample_rate: int, name: str = "sample_rate") -> None:
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate < 1:
        raise ValueError(f"{name} must be an int >= 1; got {sample_rate!r}")
