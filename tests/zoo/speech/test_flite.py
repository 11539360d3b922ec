"""Voices of flite, a synthesizer training never heard (beamsearch.zoo.speech.flite): its audio comes
at 16 kHz whatever the voice's own rate, and the shipped model transcribes it (skipped where flite
is not installed)."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from beamsearch.speech import wer
from beamsearch.zoo.speech import flite
from beamsearch.zoo.speech.evaluate import DOMAIN_LM

needs_flite = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")


@needs_flite
@pytest.mark.parametrize("voice", ["kal", "kal16"])
def test_audio_is_16_khz_whatever_the_voices_rate(voice, tmp_path):
    import soundfile as sf

    path = os.path.join(tmp_path, "raw.wav")
    subprocess.run(["flite", "-voice", voice, "-t", "half past five", "-o", path], check=True)
    raw, rate = sf.read(path, dtype="float32")
    assert rate == (8000 if voice == "kal" else 16000)  # kal speaks at 8 kHz: resampled by 2
    out = flite.speak_flite("half past five", voice)
    assert out.dtype == np.float32 and out.ndim == 1
    assert len(out) == pytest.approx(len(raw) * 16000 / rate, abs=2)
    assert np.sqrt(np.mean(out**2)) > 0.01  # speech, not silence


def test_voice_is_checked():
    with pytest.raises(ValueError, match="voice must be one of kal, kal16, awb, rms, slt; got 'awb_time'"):
        flite.speak_flite("five", "awb_time")


@needs_flite
def test_the_shipped_model_transcribes_a_flite_voice():
    import torch

    from beamsearch.zoo.speech.recognizer import load

    torch.set_num_threads(1)
    texts = ["march third nineteen eighty seven", "half past five", "seven hundred and five", "quarter to nine",
             "the fourth of july"]
    audio = [flite.speak_flite(t, "kal16") for t in texts]
    got = [h[0].text for h in load().transcribe(audio, head="tdt", beam_size=8, lm=str(DOMAIN_LM))]
    # 19 words; measured 4 errors (21%); the bound leaves room for other CPUs' rounding
    assert wer(texts, got) <= 0.4


@needs_flite
def test_a_set_is_the_same_for_the_same_seed():
    a, texts = flite.flite_set(3, 0)
    b, same = flite.flite_set(3, 0)
    assert texts == same and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(0.29 < np.abs(x).max() < 0.96 for x in a)
