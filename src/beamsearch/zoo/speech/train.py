"""Training the speech model on CPU: CTC and TDT losses on the shared encoder, summed, over audio
synthesized by :mod:`beamsearch.zoo.speech.synth` with SpecAugment; deterministic given the seed,
the data and the thread count. The shipped weights come from::

    python -m beamsearch.zoo.speech.train --seed 0 --data /tmp/speech-train --count 12000 --steps 1200 \
        --threads 1 --out src/beamsearch/zoo/speech

(``--data`` is made first with ``synth --split train --seed 0`` when it holds no ``manifest.jsonl``.)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import time
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import torch
from torch import nn

from beamsearch.zoo.speech.features import log_mel, spec_augment
from beamsearch.zoo.speech.loss import transducer_loss
from beamsearch.zoo.speech.model import BLANK, SpeechConfig, SpeechNet, encode_text
from beamsearch.zoo.train import lr_factor

__all__ = ["NAME", "batches_by_length", "collate", "features_of", "joint_loss", "load_set", "train", "write_checkpoint"]

NAME = "speech"  # speech.json and speech.safetensors


def load_set(folder: pathlib.Path) -> list[tuple[np.ndarray, str]]:
    """The ``(audio float32 [S], text)`` of a set written by ``synth`` (its ``manifest.jsonl``)."""
    import soundfile as sf

    rows = [json.loads(line) for line in (folder / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    return [(sf.read(str(folder / r["audio"]), dtype="float32")[0], r["text"]) for r in rows]


def features_of(audio: list[np.ndarray]) -> list[torch.Tensor]:
    """Log-mel features ``[F, 80]`` (float16 to halve memory) of each waveform, 64 at a time."""
    order = sorted(range(len(audio)), key=lambda i: len(audio[i]))
    out: list[torch.Tensor] = [torch.empty(0)] * len(audio)
    for k in range(0, len(order), 64):
        group = order[k : k + 64]
        lengths = torch.tensor([len(audio[i]) for i in group])
        padded = torch.zeros(len(group), int(lengths.max()))
        for j, i in enumerate(group):
            padded[j, : len(audio[i])] = torch.from_numpy(audio[i])
        feats, frames = log_mel(padded, lengths)
        for j, i in enumerate(group):
            out[i] = feats[j, : frames[j]].half()
    return out


def batches_by_length(lengths: list[int], max_frames: int, rng: random.Random) -> list[list[int]]:
    """Indices grouped by length (little padding) into batches of at most ``max_frames`` padded
    frames, in a seeded random order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > max_frames:
            batches.append(current)
            current = []
        current.append(i)
    batches.append(current)
    rng.shuffle(batches)
    return batches


def joint_loss(model: SpeechNet, feats: torch.Tensor, frames: torch.Tensor, targets: torch.Tensor,
               target_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ctc, tdt)``: each head's summed negative log-likelihood over the batch divided by its labels
    (utterances the head cannot align, too many labels for the frames, count 0)."""
    enc, lengths = model.encode(feats, frames)
    labels = target_lengths.sum().clamp(min=1)
    ctc = nn.functional.ctc_loss(model.ctc_log_probs(enc).transpose(0, 1), targets, lengths, target_lengths,
                                 blank=BLANK, reduction="sum", zero_infinity=True) / labels
    pred, _ = model.predict(torch.cat([torch.full_like(targets[:, :1], BLANK), targets], dim=1))
    logits = model.joint(enc[:, :, None, :], pred[:, None, :, :])
    v = len(model.cfg.tokens)
    nll = transducer_loss(torch.log_softmax(logits[..., :v], -1), targets, lengths, target_lengths, blank=BLANK,
                          durations=model.cfg.durations, duration_logp=torch.log_softmax(logits[..., v:], -1))
    return ctc, torch.where(nll < 1e29, nll, 0.0).sum() / labels


def collate(feats: list[torch.Tensor], texts: list[str], batch: list[int], gen: torch.Generator | None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The utterances ``batch`` of ``feats``/``texts`` padded: ``(features [B, F, 80], frames [B],
    targets [B, U], target_lengths [B])``, SpecAugment drawn from ``gen`` unless it is None."""
    frames = torch.tensor([len(feats[i]) for i in batch])
    x = nn.utils.rnn.pad_sequence([feats[i].float() for i in batch], batch_first=True)
    if gen is not None:
        x = spec_augment(x, frames, gen)
    ids = [encode_text(texts[i]) for i in batch]
    targets = nn.utils.rnn.pad_sequence([torch.tensor(r) for r in ids], batch_first=True)
    return x, frames, targets, torch.tensor([len(r) for r in ids])


def train(data: list[tuple[np.ndarray, str]], *, seed: int = 0, steps: int = 1200, lr: float = 2e-3,
          max_frames: int = 8000, threads: int = 1, cfg: SpeechConfig | None = None,
          log: Callable[[str], None] = print) -> tuple[SpeechNet, dict]:
    """Train a :class:`SpeechNet` for ``steps`` steps on ``data`` (``(audio, text)`` pairs):
    AdamW, warm-up then cosine (:func:`beamsearch.zoo.train.lr_factor`), SpecAugment, gradient
    norm clipped at 5. Returns the model and the metadata (losses, time)."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    cfg = cfg or SpeechConfig()
    model = SpeechNet(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    feats, texts = features_of([a for a, _ in data]), [t for _, t in data]
    batches: list[list[int]] = []
    start, step, recent = time.monotonic(), 0, []
    model.train()
    while step < steps:
        batches = batches or batches_by_length([len(f) for f in feats], max_frames, rng)
        x, frames, targets, target_lengths = collate(feats, texts, batches.pop(), gen)
        for group in optimizer.param_groups:
            group["lr"] = lr * lr_factor(step / steps)
        ctc, tdt = joint_loss(model, x, frames, targets, target_lengths)
        optimizer.zero_grad()
        (ctc + tdt).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        step += 1
        recent.append((ctc.item(), tdt.item()))
        if step % 50 == 0 or step == steps:
            c, t = np.mean(recent, axis=0)
            log(f"step {step}/{steps}: ctc {c:.3f} tdt {t:.3f} per label, {(time.monotonic() - start) / 60:.1f} min")
            recent = []
    model.eval()
    meta = {"seed": seed, "steps": steps, "lr": lr, "max_frames": max_frames, "threads": threads,
            "utterances": len(data), "minutes": round((time.monotonic() - start) / 60, 2)}
    return model, meta


def write_checkpoint(model: SpeechNet, meta: dict, out: pathlib.Path) -> None:
    """``out/speech.json`` (``{"config": ..., "training": meta}``) and ``out/speech.safetensors``
    (:meth:`SpeechNet.weights` in float16: shipped at half size, read back as float32)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.half().contiguous() for k, v in model.weights().items()}, str(out / f"{NAME}.safetensors"))
    config = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(model.cfg).items()}
    (out / f"{NAME}.json").write_text(json.dumps({"config": config, "training": meta}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    from beamsearch.zoo.speech.synth import make_set, write_set

    parser = argparse.ArgumentParser(prog="python -m beamsearch.zoo.speech.train", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=pathlib.Path, required=True, help="a train set made by synth (made if absent)")
    parser.add_argument("--count", type=int, default=12000, help="utterances to make when --data holds none")
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--threads", type=int, default=1, help="1: fastest on a shared CPU")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    if not (args.data / "manifest.jsonl").is_file():
        write_set(make_set(args.count, args.seed, "train"), args.data)
    model, meta = train(load_set(args.data), seed=args.seed, steps=args.steps, threads=args.threads)
    write_checkpoint(model, {**meta, "data_seed": args.seed}, args.out)


if __name__ == "__main__":
    main()
