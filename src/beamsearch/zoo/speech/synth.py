"""Speech made here: the sentences of :mod:`beamsearch.zoo.speech.text` spoken by espeak-ng with
many voices, variants, speeds and pitches, resampled to 16 kHz mono (soxr), with noise at a seeded
signal-to-noise ratio and reverberation (a seeded synthetic room response), all numpy.

The splits keep the test voices and noises out of training: ``train`` speaks with the base voices
and variants of :data:`TRAIN_VOICES` / :data:`TRAIN_VARIANTS` and adds white or pink noise;
``heldout`` (clean) and ``heldout-noisy`` (brown noise or babble made of other held-out
utterances, 10-20 dB SNR) speak with :data:`HELDOUT_VOICES` / :data:`HELDOUT_VARIANTS`, none of
which training uses. A set is regenerated from its seed::

    python -m beamsearch.zoo.speech.synth --out DIR --count N --seed S --split train|heldout|heldout-noisy

writes ``DIR/NNNNN.wav`` (16-bit PCM, 16 kHz) and ``DIR/manifest.jsonl`` (one
``{"audio", "text", "voice", "speed", "pitch", "noise", "snr_db", "reverb"}`` per line).
"""

from __future__ import annotations

import argparse
import io
import json
import pathlib
import shutil
import subprocess
from dataclasses import asdict, dataclass

import numpy as np

from beamsearch.speech import resample, to_mono
from beamsearch.zoo.speech.text import spoken_sentences

__all__ = ["HELDOUT_VARIANTS", "HELDOUT_VOICES", "SAMPLE_RATE", "SPLITS", "TRAIN_VARIANTS", "TRAIN_VOICES",
           "Utterance", "add_noise", "make_set", "noise", "reverberate", "speak", "write_set"]

SAMPLE_RATE = 16000
SPLITS = ("train", "heldout", "heldout-noisy")
TRAIN_VOICES = ("en-us", "en", "en-gb-x-rp", "en-gb-scotland", "en-029")
HELDOUT_VOICES = ("en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc")
TRAIN_VARIANTS = ("", "m1", "m2", "m3", "m4", "m5", "f1", "f2", "f3", "klatt", "klatt2", "klatt3", "adam", "Alex",
                  "Alicia", "Andrea", "antonio", "aunty", "belinda", "benjamin", "boris", "caleb", "david", "ed",
                  "edward", "Gene", "gustave", "Henrique", "Hugo", "iven", "iven2", "Jacky", "john", "kaukovalta",
                  "Lee", "linda", "marcelo", "Marco", "max", "Michael", "michel", "miguel", "Mike", "pablo", "paul",
                  "pedro", "quincy", "rob", "robert", "steph", "steph2", "zac", "anika", "norbert", "sandro",
                  "shelby", "travis", "victor", "grandpa")
HELDOUT_VARIANTS = ("m6", "m7", "m8", "f4", "f5", "klatt4", "klatt5", "Andy", "Annie", "edward2", "Gene2", "iven3",
                    "Mario", "Nguyen", "steph3", "grandma", "Denis", "Diogo")
TRAIN_NOISES = ("white", "pink")
HELDOUT_NOISES = ("brown", "babble")


@dataclass(frozen=True)
class Utterance:
    """One spoken sentence: ``audio`` float32 ``[S]`` at 16 kHz in [-1, 1] and how it was made."""

    audio: np.ndarray
    text: str
    voice: str
    speed: int
    pitch: int
    noise: str
    snr_db: float | None
    reverb: float | None


def speak(text: str, voice: str, speed: int = 175, pitch: int = 50, gap: int = 0) -> np.ndarray:
    """``text`` spoken by espeak-ng (``voice`` such as ``"en-us+m3"``, ``speed`` in words per
    minute, ``pitch`` 0..99, ``gap`` extra pause between words in 10 ms), float32 ``[S]`` at 16 kHz.

    Raises:
        RuntimeError: espeak-ng is not installed or fails (its message).
    """
    import soundfile as sf

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
    run = subprocess.run([exe, "-v", voice, "-s", str(speed), "-p", str(pitch), "-g", str(gap), "--stdout", text],
                         capture_output=True, check=False)
    if run.returncode != 0 or not run.stdout:
        raise RuntimeError(f"espeak-ng failed for voice {voice!r}: {run.stderr.decode(errors='replace').strip()}")
    wave, rate = sf.read(io.BytesIO(run.stdout), dtype="float32")
    return resample(to_mono(wave), rate, SAMPLE_RATE)


def noise(kind: str, length: int, rng: np.random.Generator) -> np.ndarray:
    """Coloured noise ``[length]`` of unit power: ``white``, ``pink`` (power ~ 1/f) or ``brown``
    (~ 1/f^2), shaped in the frequency domain."""
    spectrum = np.fft.rfft(rng.standard_normal(length))
    f = np.maximum(np.fft.rfftfreq(length), 1.0 / length)
    power = {"white": 0.0, "pink": 1.0, "brown": 2.0}
    if kind not in power:
        raise ValueError(f"kind must be one of {sorted(power)}; got {kind!r}")
    shaped = np.fft.irfft(spectrum / f ** (power[kind] / 2), n=length)
    return (shaped / np.sqrt(np.mean(shaped**2) + 1e-12)).astype(np.float32)


def add_noise(audio: np.ndarray, background: np.ndarray, snr_db: float) -> np.ndarray:
    """``audio`` plus ``background`` (tiled or cut to its length) scaled to ``snr_db`` dB below."""
    reps = -(-len(audio) // max(len(background), 1))
    bg = np.tile(background, reps)[: len(audio)]
    p_signal, p_noise = np.mean(audio**2), np.mean(bg**2) + 1e-12
    return (audio + bg * np.sqrt(p_signal / p_noise / 10 ** (snr_db / 10))).astype(np.float32)


def reverberate(audio: np.ndarray, rt60: float, rng: np.random.Generator) -> np.ndarray:
    """``audio`` convolved with a synthetic room response: a direct path then Gaussian noise decaying
    by 60 dB over ``rt60`` seconds (cut to the input's length, its energy kept)."""
    n = int(rt60 * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    response = rng.standard_normal(n) * np.exp(-6.9 * t / rt60) * 0.3
    response[0] = 1.0
    out = np.fft.irfft(np.fft.rfft(audio, len(audio) + n) * np.fft.rfft(response, len(audio) + n))[: len(audio)]
    return (out * np.sqrt(np.mean(audio**2) / (np.mean(out**2) + 1e-12))).astype(np.float32)


def _voice(split: str, rng: np.random.Generator) -> str:
    bases, variants = (TRAIN_VOICES, TRAIN_VARIANTS) if split == "train" else (HELDOUT_VOICES, HELDOUT_VARIANTS)
    base, variant = bases[rng.integers(len(bases))], variants[rng.integers(len(variants))]
    return f"{base}+{variant}" if variant else base


def _babble(texts: list[str], rng: np.random.Generator) -> np.ndarray:
    """Several other held-out utterances spoken at once (the babble of a room), unit power."""
    parts = [speak(t, _voice("heldout", rng), int(rng.integers(140, 200))) for t in texts]
    out = np.zeros(max(map(len, parts)), np.float32)
    for p in parts:
        out[: len(p)] += p / np.sqrt(np.mean(p**2) + 1e-12)
    return out / np.sqrt(np.mean(out**2) + 1e-12)


def _utterance(text: str, split: str, rng: np.random.Generator) -> Utterance:
    voice, speed, pitch = _voice(split, rng), int(rng.integers(120, 221)), int(rng.integers(20, 81))
    audio = speak(text, voice, speed, pitch, gap=int(rng.integers(0, 4)))
    audio = np.concatenate([np.zeros(int(rng.integers(800, 4800)), np.float32), audio,
                            np.zeros(int(rng.integers(800, 4800)), np.float32)])
    reverb = None
    if split != "heldout" and rng.random() < (0.4 if split == "train" else 0.3):
        reverb = float(rng.uniform(0.15, 0.6))
        audio = reverberate(audio, reverb, rng)
    kind, snr = "none", None
    if split == "train" and rng.random() < 0.6:
        kind, snr = TRAIN_NOISES[int(rng.integers(2))], float(rng.uniform(5, 30))
    elif split == "heldout-noisy":
        kind, snr = HELDOUT_NOISES[int(rng.integers(2))], float(rng.uniform(10, 20))
    if snr is not None:
        background = (_babble(spoken_sentences(4, int(rng.integers(2**31))), rng) if kind == "babble"
                      else noise(kind, len(audio), rng))
        audio = add_noise(audio, background, snr)
    audio = audio / (np.abs(audio).max() + 1e-9) * float(rng.uniform(0.3, 0.95))
    return Utterance(audio.astype(np.float32), text, voice, speed, pitch, kind, snr, reverb)


def make_set(count: int, seed: int, split: str) -> list[Utterance]:
    """``count`` utterances of ``split`` (one of :data:`SPLITS`), the same for the same arguments.
    The texts of a split are ``spoken_sentences`` of a seed of its own (train: ``seed``; held-out
    sets: ``seed + 10**6``), so train and test texts are drawn apart."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}; got {split!r}")
    texts = spoken_sentences(count, seed if split == "train" else seed + 10**6)
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    return [_utterance(t, split, rng) for t in texts]


def write_set(utterances: list[Utterance], out: pathlib.Path) -> None:
    """``out/NNNNN.wav`` (16-bit PCM, 16 kHz) and ``out/manifest.jsonl``."""
    import soundfile as sf

    out.mkdir(parents=True, exist_ok=True)
    with (out / "manifest.jsonl").open("w", encoding="utf-8") as manifest:
        for i, u in enumerate(utterances):
            name = f"{i:05d}.wav"
            sf.write(str(out / name), u.audio, SAMPLE_RATE, subtype="PCM_16")
            row = {k: v for k, v in asdict(u).items() if k != "audio"}
            manifest.write(json.dumps({"audio": name, **row}) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m beamsearch.zoo.speech.synth", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=SPLITS, default="train")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count must be >= 1; got {args.count}")
    write_set(make_set(args.count, args.seed, args.split), args.out)


if __name__ == "__main__":
    main()
