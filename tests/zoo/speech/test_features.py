"""Log-mel features against a plain numpy reference (frames cut by hand, a loop-built filterbank)
and SpecAugment's masks."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from beamsearch.zoo.speech.features import HOP, MELS, N_FFT, WINDOW, log_mel, mel_filterbank, spec_augment  # noqa: E402


def reference_filterbank():
    """HTK mel filters built one (bin, filter) at a time."""
    def mel(hz):
        return 2595 * math.log10(1 + hz / 700)

    lo, hi = mel(20.0), mel(7600.0)
    points = [700 * (10 ** ((lo + (hi - lo) * i / (MELS + 1)) / 2595) - 1) for i in range(MELS + 2)]
    out = np.zeros((N_FFT // 2 + 1, MELS))
    for k in range(N_FFT // 2 + 1):
        f = k * 16000 / N_FFT
        for m in range(MELS):
            left, centre, right = points[m], points[m + 1], points[m + 2]
            if left <= f <= centre:
                out[k, m] = (f - left) / (centre - left)
            elif centre < f <= right:
                out[k, m] = (right - f) / (right - centre)
    return out


def test_filterbank_equals_the_loop_built_one():
    np.testing.assert_allclose(mel_filterbank().numpy(), reference_filterbank(), atol=1e-6)


def reference_log_mel(x):
    """Centred frames (reflect padding), a periodic Hann window of 400 in the middle of 512 points,
    power spectrum, filterbank, log, then each band normalized over the frames."""
    padded = np.pad(x, N_FFT // 2, mode="reflect")
    window = np.zeros(N_FFT)
    n = np.arange(WINDOW)
    window[(N_FFT - WINDOW) // 2 : (N_FFT + WINDOW) // 2] = 0.5 - 0.5 * np.cos(2 * np.pi * n / WINDOW)
    frames = [padded[i * HOP : i * HOP + N_FFT] * window for i in range(len(x) // HOP + 1)]
    power = np.abs(np.fft.rfft(np.array(frames), axis=1)) ** 2
    feats = np.log(power @ reference_filterbank() + 1e-6)
    return (feats - feats.mean(0)) / np.sqrt(feats.var(0) + 1e-5)


def test_log_mel_equals_the_numpy_reference_and_zeroes_padding():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4000) * 0.1, rng.standard_normal(2500) * 0.3
    batch = torch.zeros(2, 4000, dtype=torch.float64)
    batch[0], batch[1, :2500] = torch.from_numpy(a), torch.from_numpy(b)
    feats, frames = log_mel(batch.float(), torch.tensor([4000, 2500]))
    assert frames.tolist() == [4000 // HOP + 1, 2500 // HOP + 1] and feats.shape == (2, 26, MELS)
    np.testing.assert_allclose(feats[0].numpy(), reference_log_mel(a), atol=2e-3)
    # the shorter one alone equals its reference; in the batch its frames past its length are zeros
    whole = reference_log_mel(b)
    alone, _ = log_mel(torch.from_numpy(b).float()[None])
    np.testing.assert_allclose(alone[0].numpy(), whole, atol=2e-3)
    assert (feats[1, 16:] == 0).all()


def test_spec_augment_masks_bands_and_spans_and_is_seeded():
    feats = torch.ones(3, 100, MELS)
    frames = torch.tensor([100, 60, 30])
    out = spec_augment(feats, frames, torch.Generator().manual_seed(0), freq_masks=1, freq_width=10, time_masks=1,
                       time_share=0.2)
    again = spec_augment(feats, frames, torch.Generator().manual_seed(0), freq_masks=1, freq_width=10, time_masks=1,
                         time_share=0.2)
    assert torch.equal(out, again) and torch.equal(feats, torch.ones(3, 100, MELS))  # input kept
    for i, n in enumerate(frames.tolist()):
        zero_bands = (out[i] == 0).all(0).nonzero().flatten()
        zero_steps = (out[i] == 0).all(1).nonzero().flatten()
        assert len(zero_bands) <= 10 and len(zero_steps) <= int(n * 0.2)
        for run in (zero_bands, zero_steps):  # one contiguous run each
            assert len(run) == 0 or run[-1] - run[0] + 1 == len(run)
        if len(zero_steps):
            assert zero_steps[-1] < n  # inside the utterance
        assert ((out[i] == 0).sum() == len(zero_bands) * 100 + len(zero_steps) * MELS
                - len(zero_bands) * len(zero_steps))  # nothing else masked
