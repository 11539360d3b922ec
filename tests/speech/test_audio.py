"""Reading audio files (beamsearch.speech.audio) against signals computed here: a sine written at
44.1 kHz reads back as the same sine at 16 kHz, two channels as their mean, and long recordings are
cut where this test put the pauses; every error is one line naming the file."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from beamsearch.speech.audio import AudioError, chunks, quietest, read_audio, resample, to_mono

sf = pytest.importorskip("soundfile")
pytest.importorskip("soxr")


def sine(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * freq * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


def test_a_stereo_44k_file_reads_as_the_mono_sine_at_16k(tmp_path):
    left, right = sine(440, 1.0, 44100), sine(440, 1.0, 44100, amplitude=0.3)
    path = tmp_path / "a.wav"
    sf.write(path, np.stack([left, right], axis=1), 44100, subtype="FLOAT")
    got = read_audio(path)
    assert got.dtype == np.float32 and got.shape == (16000,)
    want = sine(440, 1.0, 16000, amplitude=0.4)  # the mean of the two channels
    inner = slice(400, -400)  # away from the resampler's edges
    assert np.abs(got[inner] - want[inner]).max() < 2e-3


def test_channels_are_averaged_and_flac_and_16bit_pcm_read(tmp_path):
    a, b = sine(300, 0.5, 16000, 0.6), sine(1000, 0.5, 16000, 0.2)
    wav, flac = tmp_path / "x.wav", tmp_path / "x.flac"
    sf.write(wav, np.stack([a, b], axis=1), 16000, subtype="FLOAT")
    assert np.allclose(read_audio(wav), (a + b) / 2, atol=1e-7)  # 16 kHz already: no resampling
    sf.write(flac, np.stack([a, b], axis=1), 16000, subtype="PCM_16")
    assert np.abs(read_audio(flac) - (a + b) / 2).max() < 2 / 32768  # 16-bit quantization, per channel
    assert read_audio(wav, sample_rate=8000).shape == (4000,)


def test_to_mono_and_resample_are_the_mean_of_the_channels_and_the_sine_at_the_new_rate():
    left, right = sine(440, 1.0, 22050), sine(440, 1.0, 22050, amplitude=0.3)
    stereo = np.stack([left, right], axis=1).astype(np.float64)
    mono = to_mono(stereo)
    assert mono.dtype == np.float32 and np.allclose(mono, (left + right) / 2, atol=1e-7)
    assert to_mono(left.astype(np.float64)).dtype == np.float32 and np.array_equal(to_mono(left), left)
    got = resample(mono, 22050, 16000)  # espeak-ng's rate to the model's
    want = sine(440, 1.0, 16000, amplitude=0.4)
    assert got.dtype == np.float32 and got.shape == (16000,)
    assert np.abs(got[400:-400] - want[400:-400]).max() < 2e-3  # away from the resampler's edges
    assert np.array_equal(resample(left, 16000, 16000), left)  # equal rates: the samples as they are


def test_to_mono_and_resample_name_the_bad_argument():
    with pytest.raises(ValueError, match=r"samples must be \[S\] or \[S, channels\]; got shape \(2, 3, 4\)"):
        to_mono(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"mono must be one channel, shape \[S\]; got shape \(4, 2\)"):
        resample(np.zeros((4, 2)), 16000, 8000)
    with pytest.raises(ValueError, match="^rate must be an int >= 1; got 0$"):
        resample(np.zeros(4), 0, 8000)
    with pytest.raises(ValueError, match="^sample_rate must be an int >= 1; got 8000.0$"):
        resample(np.zeros(4), 16000, 8000.0)


def test_unreadable_empty_non_finite_and_silent_files_are_one_line_errors(tmp_path):
    missing = tmp_path / "missing.wav"
    with pytest.raises(AudioError, match=rf"^{missing}: no such file$"):
        read_audio(missing)
    with pytest.raises(AudioError, match=rf"^{tmp_path}: not a file$"):
        read_audio(tmp_path)
    text = tmp_path / "notes.wav"
    text.write_text("not audio")
    with pytest.raises(AudioError, match=rf"^{text}: cannot read audio: Format not recognised\.$"):
        read_audio(text)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros((0, 1), np.float32), 16000)
    with pytest.raises(AudioError, match=rf"^{empty}: the file has no audio samples$"):
        read_audio(empty)
    zeros = tmp_path / "zeros.wav"
    sf.write(zeros, np.zeros(1600, np.float32), 16000)
    with pytest.raises(AudioError, match=rf"^{zeros}: the audio is silent \(all zero; below -60 dBFS\)$"):
        read_audio(zeros)
    quiet = tmp_path / "quiet.wav"
    sf.write(quiet, sine(440, 0.1, 16000, amplitude=1e-4), 16000, subtype="FLOAT")  # 20 log10(1e-4) = -80 dBFS
    with pytest.raises(AudioError, match=rf"^{quiet}: the audio is silent \(peak -80\.0 dBFS; below -60 dBFS\)$"):
        read_audio(quiet)
    nan = tmp_path / "nan.wav"
    sf.write(nan, np.array([0.5, np.nan, 0.1], np.float32), 16000, subtype="FLOAT")
    with pytest.raises(AudioError, match=rf"^{nan}: the audio has NaN or infinite samples$"):
        read_audio(nan)
    assert issubclass(AudioError, ValueError)
    with pytest.raises(ValueError, match=r"^sample_rate must be an int >= 1; got 0$"):
        read_audio(zeros, sample_rate=0)


def test_a_quiet_file_just_above_the_threshold_reads(tmp_path):
    path = tmp_path / "quiet.wav"
    sf.write(path, sine(250, 0.1, 16000, amplitude=10 ** (-59 / 20)), 16000, subtype="FLOAT")  # 0.00112 > 0.001
    assert np.abs(read_audio(path)).max() == pytest.approx(10 ** (-59 / 20), rel=1e-3)


def test_long_recordings_are_cut_at_the_pauses_put_there():
    rate = 1000  # a low rate keeps the arrays small; the rule is in seconds
    rng = np.random.default_rng(0)
    audio = rng.uniform(-0.5, 0.5, 50 * rate).astype(np.float32)
    audio[17_500:17_600] = 0.0  # a pause 2.5 s before the first 20 s limit
    audio[17_500 + 19_000: 17_500 + 19_100] = 0.0  # one 0.9 s before the second limit (17.5 + 20 s)
    got = chunks(audio, rate)
    # the quietest 25-sample window is any one inside the pause: the latest starts at 17,575, centre +12
    assert [c.start for c in got] == [0, 17_587, 17_587 + 19_000]
    assert all(c.audio.size <= 20 * rate for c in got)
    assert np.array_equal(np.concatenate([c.audio for c in got]), audio)
    assert got[1].start_seconds(rate) == pytest.approx(17.587)
    # no pause at all: the quietest window of the last 4 s is still the cut, and within the limit
    noisy = rng.uniform(-0.5, 0.5, 45 * rate)
    cut = chunks(noisy, rate)
    assert len(cut) == 3 and all(16 * rate <= c.audio.size <= 20 * rate for c in cut[:-1])
    assert [c.start for c in chunks(audio[: 20 * rate], rate)] == [0]  # exactly the limit: one chunk


@pytest.mark.parametrize("seed", range(20))
def test_quietest_is_the_centre_of_the_lowest_window_of_a_plain_loop(seed):
    rng = np.random.default_rng(seed)
    segment = rng.normal(size=int(rng.integers(5, 60))) * rng.uniform(0, 1, 1)
    frame = int(rng.integers(1, 5))
    energies = [float(np.sum(segment[i:i + frame] ** 2)) for i in range(segment.size - frame + 1)]
    best = max(i for i, e in enumerate(energies) if e == min(energies))
    assert quietest(segment, frame) == best + frame // 2
    assert quietest(np.zeros(10), 4) == 6 + 2  # all equal: the latest window (start 6), its centre


def test_chunk_arguments_are_checked():
    with pytest.raises(ValueError, match=r"^audio must be one channel, shape \[S\]; got shape \(2, 3\)$"):
        chunks(np.zeros((2, 3)), 16000)
    with pytest.raises(ValueError, match=r"^chunks needs 0 < frame_seconds < search_seconds < max_seconds; "
                                         r"got 0.025, 4.0, 3.0$"):
        chunks(np.zeros(10), 16000, max_seconds=3.0)


def test_import_beamsearch_and_this_module_need_neither_soundfile_nor_soxr():
    code = ("import sys; sys.modules['soundfile'] = None; sys.modules['soxr'] = None\n"
            "import beamsearch, beamsearch.speech.audio as a\n"
            "try:\n    a.read_audio('x.wav')\nexcept ImportError as e:\n    print('ImportError', e.name)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "ImportError soundfile\n"
