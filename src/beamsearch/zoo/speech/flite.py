"""Voices of another synthesizer, never heard in training: the held-out sentences spoken by flite
(CMU's Flite, ``apt-get install flite``) with its built-in voices, resampled to 16 kHz with soxr as
:mod:`beamsearch.zoo.speech.synth` does, and the word error rate of greedy, beam and beam + the
shipped LM for both heads on them::

    python -m beamsearch.zoo.speech.flite --count N --seed S [--beam-size 8]

prints the table of :func:`beamsearch.zoo.speech.evaluate.evaluate`, one row per head.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np

from beamsearch.speech import resample, to_mono
from beamsearch.zoo.speech.synth import SAMPLE_RATE
from beamsearch.zoo.speech.text import spoken_sentences

__all__ = ["VOICES", "flite_set", "main", "speak_flite", "study_args", "study_parser"]

VOICES = ("kal", "kal16", "awb", "rms", "slt")
"""flite's general-purpose built-in voices (``awb_time``, a voice of clock times only, is left out)."""


def speak_flite(text: str, voice: str) -> np.ndarray:
    """``text`` spoken by flite's ``voice`` (one of :data:`VOICES`), float32 ``[S]`` at 16 kHz.

    Raises:
        ValueError: ``voice`` is not one of :data:`VOICES`.
        RuntimeError: flite is not installed or fails (its message).
    """
    import soundfile as sf

    if voice not in VOICES:
        raise ValueError(f"voice must be one of {', '.join(VOICES)}; got {voice!r}")
    exe = shutil.which("flite")
    if exe is None:
        raise RuntimeError("flite is not installed (apt-get install flite)")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "out.wav")
        run = subprocess.run([exe, "-voice", voice, "-t", text, "-o", path], capture_output=True, check=False)
        if run.returncode != 0 or not os.path.exists(path):
            raise RuntimeError(f"flite failed for voice {voice!r}: {run.stderr.decode(errors='replace').strip()}")
        wave, rate = sf.read(path, dtype="float32")
    return resample(to_mono(wave), rate, SAMPLE_RATE)


def flite_set(count: int, seed: int) -> tuple[list[np.ndarray], list[str]]:
    """``count`` held-out sentences (the texts of synth's held-out sets for ``seed``) spoken by flite,
    the voices in turn, with 50-300 ms of silence either side: ``(audio [S] each, texts)``."""
    if count < 1:
        raise ValueError(f"count must be >= 1; got {count}")
    texts = spoken_sentences(count, seed + 10**6)
    rng = np.random.default_rng([seed, 7])
    audio = []
    for i, text in enumerate(texts):
        wave = speak_flite(text, VOICES[i % len(VOICES)])
        pad = [np.zeros(int(rng.integers(800, 4800)), np.float32) for _ in range(2)]
        wave = np.concatenate([pad[0], wave, pad[1]])
        audio.append((wave / (np.abs(wave).max() + 1e-9) * float(rng.uniform(0.3, 0.95))).astype(np.float32))
    return audio, texts


def study_parser(prog: str, doc: str | None, count: int) -> argparse.ArgumentParser:
    """The options of the studies run on the shipped model: ``--count`` (default ``count``),
    ``--seed``, ``--beam-size`` and ``--threads`` (torch's, default 2)."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n")[0])
    parser.add_argument("--count", type=int, default=count)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beam-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    return parser


def study_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, ``--count``, ``--beam-size`` and ``--threads`` checked >= 1 (a usage
    error naming the flag otherwise); torch is set to ``--threads`` threads."""
    import torch

    args = parser.parse_args(argv)
    for flag in ("count", "beam_size", "threads"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1; got {getattr(args, flag)}")
    torch.set_num_threads(args.threads)
    return args


def main(argv: list[str] | None = None) -> None:
    from beamsearch.zoo.speech.evaluate import evaluate
    from beamsearch.zoo.speech.recognizer import load

    args = study_args(study_parser("python -m beamsearch.zoo.speech.flite", __doc__, 50), argv)
    audio, texts = flite_set(args.count, args.seed)
    table, _ = evaluate(load(), {"flite": (audio, texts)}, beam_size=args.beam_size)
    print(table, flush=True)


if __name__ == "__main__":
    main()
