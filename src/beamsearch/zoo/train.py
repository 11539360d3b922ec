"""Training a zoo model on the generated dates data: deterministic given a seed, on the CPU."""

from __future__ import annotations

import json
import math
import pathlib
import random
import time
from typing import Callable

import torch
from torch import nn

from beamsearch.zoo.dates import SOURCE_VOCAB, TARGET_VOCAB, Example, make_splits
from beamsearch.zoo.models import ModelConfig, build_model
from beamsearch.zoo.translator import Translator

DATA_SEED = 0  # the data set is the same for every model and every training seed


def _batch(examples: list[Example], pad: int, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> sources ``[B, S]``, decoder inputs ``[B, T]`` (bos first), decoder targets ``[B, T]``."""
    src = [SOURCE_VOCAB.encode(e.source) for e in examples]
    tgt = [TARGET_VOCAB.encode(e.target) for e in examples]
    s = max(map(len, src))
    t = max(map(len, tgt)) + 1
    sources = torch.tensor([r + [pad] * (s - len(r)) for r in src])
    inputs = torch.tensor([[bos] + r + [pad] * (t - 1 - len(r)) for r in tgt])
    targets = torch.tensor([r + [eos] + [pad] * (t - 1 - len(r)) for r in tgt])
    return sources, inputs, targets


def exact_match(translator: Translator, examples: list[Example]) -> float:
    outputs = translator.greedy([e.source for e in examples])
    return sum(o.text == e.target for o, e in zip(outputs, examples)) / len(examples)


EPOCHS = {"seq2seq": 10, "transformer": 7}  # each about 13 minutes on one CPU core


@torch.no_grad()
def validation_loss(model: torch.nn.Module, examples: list[Example], cfg: ModelConfig, batch_size: int = 250) -> float:
    """Mean teacher-forced cross-entropy per target token."""
    total, count = 0.0, 0
    for i in range(0, len(examples), batch_size):
        sources, inputs, targets = _batch(examples[i : i + batch_size], cfg.pad, cfg.bos, cfg.eos)
        logits = model(sources, inputs)
        total += nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=cfg.pad, reduction="sum").item()
        count += int((targets != cfg.pad).sum())
    return total / count


def train(kind: str, out_dir: str | pathlib.Path, *, seed: int = 0, epochs: int | None = None, minutes: float = 14.0,
          threads: int = 1, batch_size: int = 128, lr: float = 2e-3, train_size: int = 40_000,
          progress: bool = True, log: Callable[[str], None] = print) -> dict:
    """Train ``kind`` ("seq2seq" or "transformer"); write ``<kind>.safetensors`` and ``<kind>.json``.

    Deterministic given ``seed`` and ``threads``. Stops after ``epochs`` epochs (default: about
    13 minutes' worth on one core) or ``minutes`` of training, and keeps the weights with the
    lowest validation loss (teacher-forced cross-entropy: the calibrated choice; greedy exact
    match would reward a model that is wrong about its own uncertainty). Returns the metadata.
    """
    from safetensors.torch import save_file
    from tqdm import tqdm

    epochs = EPOCHS[kind] if epochs is None else epochs
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    splits = make_splits(train=train_size, seed=DATA_SEED)
    cfg = ModelConfig(kind, len(SOURCE_VOCAB), len(TARGET_VOCAB), bos=TARGET_VOCAB.bos, eos=TARGET_VOCAB.eos,
                      pad=SOURCE_VOCAB.pad)
    model = build_model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(splits["train"]) / batch_size)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * steps_per_epoch,
                                                   pct_start=0.05)
    loss_fn = nn.CrossEntropyLoss(ignore_index=cfg.pad)
    translator = Translator(model)
    best_loss, best_accuracy, best_epoch, best_state = float("inf"), 0.0, 0, {}
    last_accuracy = 0.0  # the previous epoch's validation exact match, shown on the progress bar
    start = time.monotonic()
    train_set = list(splits["train"])
    for epoch in range(1, epochs + 1):
        model.train()
        rng.shuffle(train_set)
        bar = tqdm(range(steps_per_epoch), desc=f"{kind} epoch {epoch}", disable=not progress, leave=False)
        total = 0.0
        for i in bar:
            sources, inputs, targets = _batch(train_set[i * batch_size : (i + 1) * batch_size], cfg.pad, cfg.bos,
                                              cfg.eos)
            logits = model(sources, inputs)
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            total += loss.item()
            bar.set_postfix(loss=f"{loss.item():.4f}", valid_exact=f"{last_accuracy:.4f}" if epoch > 1 else "-")
        model.eval()
        accuracy = exact_match(translator, splits["valid"])
        loss_valid = validation_loss(model, splits["valid"], cfg)
        elapsed = time.monotonic() - start
        log(f"{kind} epoch {epoch}: train loss {total / steps_per_epoch:.4f}, valid loss {loss_valid:.4f}, "
            f"valid exact match (greedy) {accuracy:.4f}, {elapsed / 60:.1f} min")
        if loss_valid < best_loss:
            best_loss, best_accuracy, best_epoch = loss_valid, accuracy, epoch
            best_state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        last_accuracy = accuracy
        if elapsed > minutes * 60:
            log(f"{kind}: time budget of {minutes} min reached after epoch {epoch}")
            break
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(best_state, str(out / f"{kind}.safetensors"))
    meta = {"config": cfg.to_dict(), "seed": seed, "data_seed": DATA_SEED, "train_size": train_size,
            "epochs_run": epoch, "minutes": round((time.monotonic() - start) / 60, 2),
            "threads": threads, "valid_loss": best_loss, "valid_exact_match": best_accuracy, "epoch": best_epoch}
    (out / f"{kind}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta
