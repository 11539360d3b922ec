"""Log-mel features in torch (80 mel bands, 25 ms windows every 10 ms, the mel filterbank computed
here) and SpecAugment's time and frequency masks (Park et al. 2019), seeded."""

from __future__ import annotations

import math

import torch

__all__ = ["HOP", "MELS", "N_FFT", "WINDOW", "frame_lengths", "log_mel", "mel_filterbank", "spec_augment"]

SAMPLE_RATE = 16000
MELS = 80
WINDOW = 400  # 25 ms
HOP = 160  # 10 ms
N_FFT = 512


def _hz_to_mel(hz: float) -> float:
    return 2595.0 * math.log10(1.0 + hz / 700.0)


def mel_filterbank(n_mels: int = MELS, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE,
                   f_min: float = 20.0, f_max: float = 7600.0) -> torch.Tensor:
    """Triangular filters ``[n_fft // 2 + 1, n_mels]`` on the HTK mel scale (mel = 2595 log10(1 + f/700)):
    filter ``m`` rises from the ``m``-th to the ``m+1``-th of ``n_mels + 2`` equally spaced mel
    points and falls to the ``m+2``-th, peak 1."""
    mels = torch.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2, dtype=torch.float64)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)[:, None]
    left, centre, right = hz[:-2], hz[1:-1], hz[2:]
    rising = (bins - left) / (centre - left)
    falling = (right - bins) / (right - centre)
    return torch.clamp(torch.minimum(rising, falling), min=0.0).float()


def frame_lengths(samples: torch.Tensor) -> torch.Tensor:
    """Feature frames of audio of ``samples`` samples (int ``[N]``): one per hop, centred windows."""
    return samples // HOP + 1


def log_mel(audio: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-mel features of ``audio`` ``[N, S]`` (float, 16 kHz, zero padded past ``lengths`` ``[N]``):
    ``(features [N, F, 80], frames [N])``, each utterance normalized to zero mean and unit variance
    per band over its own frames (padding frames are 0)."""
    n, s = audio.shape
    lengths = torch.full((n,), s) if lengths is None else lengths.to(torch.long)
    spec = torch.stft(audio, N_FFT, HOP, WINDOW, torch.hann_window(WINDOW, device=audio.device), center=True,
                      return_complex=True).abs() ** 2  # [N, N_FFT/2+1, F]
    feats = torch.log(spec.transpose(1, 2) @ mel_filterbank().to(audio.device) + 1e-6)  # [N, F, MELS]
    frames = torch.clamp(frame_lengths(lengths), max=feats.shape[1])
    mask = (torch.arange(feats.shape[1], device=audio.device)[None, :] < frames[:, None]).unsqueeze(-1)
    count = frames.clamp(min=1)[:, None, None].to(feats.dtype)
    mean = (feats * mask).sum(1, keepdim=True) / count
    var = (((feats - mean) * mask) ** 2).sum(1, keepdim=True) / count
    return ((feats - mean) / torch.sqrt(var + 1e-5)) * mask, frames


def spec_augment(features: torch.Tensor, frames: torch.Tensor, generator: torch.Generator, *,
                 freq_masks: int = 2, freq_width: int = 15, time_masks: int = 2, time_share: float = 0.05
                 ) -> torch.Tensor:
    """``features`` ``[N, F, M]`` with ``freq_masks`` bands of up to ``freq_width`` mels and
    ``time_masks`` spans of up to ``time_share`` of each utterance's ``frames`` set to 0, drawn
    from ``generator`` (a new tensor)."""
    n, f, m = features.shape
    out = features.clone()
    bands = torch.arange(m)[None, :]
    steps = torch.arange(f)[None, :]
    for _ in range(freq_masks):
        width = torch.randint(0, freq_width + 1, (n, 1), generator=generator)
        start = (torch.rand((n, 1), generator=generator) * (m - width)).long()
        out = out.masked_fill(((bands >= start) & (bands < start + width))[:, None, :], 0.0)
    for _ in range(time_masks):
        most = (frames.float() * time_share).long()[:, None]
        width = (torch.rand((n, 1), generator=generator) * (most + 1)).long()
        start = (torch.rand((n, 1), generator=generator) * (frames[:, None] - width).clamp(min=0)).long()
        out = out.masked_fill(((steps >= start) & (steps < start + width))[:, :, None], 0.0)
    return out
