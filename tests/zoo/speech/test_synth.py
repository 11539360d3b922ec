"""The synthesized speech sets: noise colours by their spectral slope, the SNR of the mix computed
apart, the reverberation's energy, held-out voices and noises kept out of training, and espeak-ng
audio (skipped where espeak-ng is not installed)."""

import json
import shutil

import numpy as np
import pytest

from beamsearch.zoo.speech import synth
from beamsearch.zoo.speech.synth import (
    HELDOUT_NOISES,
    HELDOUT_VARIANTS,
    HELDOUT_VOICES,
    TRAIN_NOISES,
    TRAIN_VARIANTS,
    TRAIN_VOICES,
    add_noise,
    noise,
    reverberate,
)

espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@pytest.mark.parametrize(("kind", "slope"), [("white", 0.0), ("pink", -1.0), ("brown", -2.0)])
def test_noise_colour_is_its_power_law(kind, slope):
    x = noise(kind, 1 << 16, np.random.default_rng(0))
    assert np.mean(x**2) == pytest.approx(1.0, rel=1e-3)
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x))
    band = (f > 0.002) & (f < 0.4)
    fitted = np.polyfit(np.log(f[band]), np.log(power[band]), 1)[0]  # log power against log frequency
    assert fitted == pytest.approx(slope, abs=0.1)


def test_noise_kind_is_checked():
    with pytest.raises(ValueError, match="kind must be one of"):
        noise("blue", 100, np.random.default_rng(0))


@pytest.mark.parametrize("snr_db", [0.0, 10.0, 17.5])
def test_mix_has_the_requested_snr(snr_db):
    rng = np.random.default_rng(1)
    clean = rng.standard_normal(4000).astype(np.float32) * 0.3
    background = rng.standard_normal(1500).astype(np.float32)  # shorter: tiled
    mixed = add_noise(clean, background, snr_db)
    added = mixed - clean
    assert 10 * np.log10(np.mean(clean**2) / np.mean(added**2)) == pytest.approx(snr_db, abs=1e-3)
    np.testing.assert_allclose(added[1500:3000], added[:1500], rtol=1e-3, atol=1e-6)  # the background tiled
    tiled = np.tile(background, 3)[:4000]  # the noise under the signal
    scale = np.sqrt(np.mean(clean**2) / np.mean(tiled**2) / 10 ** (snr_db / 10))  # the SNR's definition
    np.testing.assert_allclose(added[:1500], background * scale, atol=1e-5)  # and scaled


def test_reverberation_keeps_energy_and_smears_an_impulse():
    impulse = np.zeros(16000, np.float32)
    impulse[100] = 1.0
    out = reverberate(impulse, 0.3, np.random.default_rng(0))
    assert np.mean(out**2) == pytest.approx(np.mean(impulse**2), rel=1e-4)
    assert np.abs(out[:100]).max() < 1e-6  # nothing before the sound
    tail = np.abs(out[100 + 1600 : 100 + 3200]).mean()  # 100-200 ms after
    late = np.abs(out[100 + 4000 :]).mean()  # past 250 ms: decayed well below
    assert tail > 0 and late < tail


def test_held_out_voices_variants_and_noises_are_never_trained_on():
    assert not set(TRAIN_VOICES) & set(HELDOUT_VOICES)
    assert not set(TRAIN_VARIANTS) & set(HELDOUT_VARIANTS)
    assert not set(TRAIN_NOISES) & set(HELDOUT_NOISES)


def test_bad_split_is_named():
    with pytest.raises(ValueError, match="split must be one of"):
        synth.make_set(1, 0, "test")


@espeak
def test_sets_are_seeded_and_keep_their_voices_and_noises(tmp_path):
    train = synth.make_set(6, 3, "train")
    again = synth.make_set(6, 3, "train")
    assert [u.text for u in train] == [u.text for u in again]
    for a, b in zip(train, again, strict=True):
        np.testing.assert_array_equal(a.audio, b.audio)
    noisy = synth.make_set(4, 3, "heldout-noisy")
    clean = synth.make_set(4, 3, "heldout")
    assert [u.text for u in noisy] == [u.text for u in clean]  # the same test sentences
    for u in train:
        assert u.voice.split("+")[0] in TRAIN_VOICES and u.noise in (*TRAIN_NOISES, "none")
        assert u.audio.dtype == np.float32 and np.abs(u.audio).max() <= 1.0
    for u in noisy:
        assert u.voice.split("+")[0] in HELDOUT_VOICES and u.noise in HELDOUT_NOISES and 10 <= u.snr_db <= 20
    assert all(u.noise == "none" and u.reverb is None for u in clean)
    synth.main(["--out", str(tmp_path), "--count", "2", "--seed", "3", "--split", "heldout"])
    rows = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == [u.text for u in clean[:2]]
    assert (tmp_path / rows[0]["audio"]).is_file()


@espeak
def test_speech_is_16khz_and_as_long_as_its_words():
    short = synth.speak("five", "en-us", speed=175)
    long = synth.speak("three thousand six hundred and twelve", "en-us", speed=175)
    assert short.dtype == np.float32 and long.dtype == np.float32
    assert 0.2 < len(short) / 16000 < 1.5 and 1.2 < len(long) / 16000 < 4.0
    fast = synth.speak("three thousand six hundred and twelve", "en-us", speed=300)
    assert len(fast) < 0.8 * len(long)
