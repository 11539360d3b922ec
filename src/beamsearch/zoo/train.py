"""Training a zoo model on the generated dates data: deterministic given a seed, on the CPU."""

from __future__ import annotations

import json
import math
import pathlib
import random
import time
from collections.abc import Callable
from typing import Any

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
    return sum(o.text == e.target for o, e in zip(outputs, examples, strict=True)) / len(examples)


EPOCHS = {"seq2seq": 10, "transformer": 7}  # each about 13 minutes on one idle CPU core


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


def lr_factor(fraction: float, warmup: float = 0.05) -> float:
    """The learning-rate schedule, as a share of the peak, at ``fraction`` (0..1) of the training
    budget: a linear warm-up over the first ``warmup``, then a cosine down to 0 (one cycle)."""
    if fraction < warmup:
        return fraction / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (fraction - warmup) / (1 - warmup))))


def _budget(total_steps: int | None, minutes: float | None, start: float) -> Callable[[int], float]:
    """``used(steps_done)``: the share of the training budget used so far, 0..1 and on (the steps
    of ``total_steps`` or the wall-clock time of ``minutes`` since ``start``, whichever is further
    along; a budget that is None counts 0)."""

    def used(steps_done: int) -> float:
        by_steps = 0.0 if total_steps is None else steps_done / total_steps
        by_time = 0.0 if minutes is None else (time.monotonic() - start) / (minutes * 60)
        return max(by_steps, by_time)

    return used


def _run_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: nn.Module, bar: Any,
               batch_of: Callable[[int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]], lr: float,
               budget_used: Callable[[int], float], steps: int, used: float, last_lr: float
               ) -> tuple[int, int, float, float, float]:
    """One epoch of training steps over the batches ``batch_of(i)`` for ``i`` in ``bar`` (a tqdm
    bar, its postfix set to each batch's loss), each at the learning rate ``lr * lr_factor(used)``;
    stops at the batch where the budget ends (``budget_used(steps) >= 1``).

    Returns:
        ``(steps, batches, total, used, last_lr)``: the steps done in all (``steps`` before it plus
        this epoch's), this epoch's batches and their summed loss, the budget used, the last
        learning rate set (``last_lr`` when no batch ran).
    """
    total, batches = 0.0, 0
    for i in bar:
        last_lr = lr * lr_factor(used)
        for group in optimizer.param_groups:
            group["lr"] = last_lr
        sources, inputs, targets = batch_of(i)
        logits = model(sources, inputs)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        steps, batches, total = steps + 1, batches + 1, total + loss.item()
        bar.set_postfix(loss=f"{loss.item():.4f}")
        used = budget_used(steps)
        if used >= 1.0:
            break
    return steps, batches, total, used, last_lr


def train(kind: str, out_dir: str | pathlib.Path, *, seed: int = 0, epochs: int | None = None,
          minutes: float | None = None, threads: int = 1, batch_size: int = 128, lr: float = 2e-3,
          train_size: int = 40_000, progress: bool = True, log: Callable[[str], None] = print) -> dict:
    """Train ``kind`` ("seq2seq" or "transformer"); write ``<kind>.safetensors`` and ``<kind>.json``
    in ``out_dir`` (what ``Translator.load(kind, out_dir)`` and ``--checkpoint`` read).

    The budget is ``epochs`` epochs, ``minutes`` of training, or both (whichever ends first); with
    neither, :data:`EPOCHS` (about 13 minutes on one core). The learning-rate schedule
    (:func:`lr_factor`) runs over that budget: over the steps of ``epochs``, over the wall-clock
    time of ``minutes``, whichever is further along, and training stops at the batch where it
    ends. Deterministic given ``seed`` and ``threads`` when no ``minutes`` is given (a time budget
    depends on the machine). Keeps the weights with the lowest validation loss (teacher-forced
    cross-entropy, measured after every epoch and at the end: the calibrated choice; greedy exact
    match would reward a model that is wrong about its own uncertainty). Returns the metadata.
    """
    from safetensors.torch import save_file
    from tqdm import tqdm

    if epochs is None and minutes is None:
        epochs = EPOCHS[kind]
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    splits = make_splits(train=train_size, seed=DATA_SEED)
    cfg = ModelConfig(kind, len(SOURCE_VOCAB), len(TARGET_VOCAB), bos=TARGET_VOCAB.bos, eos=TARGET_VOCAB.eos,
                      pad=SOURCE_VOCAB.pad)
    model = build_model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(splits["train"]) / batch_size)
    total_steps = None if epochs is None else epochs * steps_per_epoch
    loss_fn = nn.CrossEntropyLoss(ignore_index=cfg.pad)
    translator = Translator(model)
    best = {"valid_loss": float("inf")}
    best_state: dict[str, torch.Tensor] = {}
    start = time.monotonic()
    budget_used = _budget(total_steps, minutes, start)
    train_set = list(splits["train"])  # shuffled in place each epoch

    def batch_of(i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _batch(train_set[i * batch_size : (i + 1) * batch_size], cfg.pad, cfg.bos, cfg.eos)

    steps, epoch, used, last_lr = 0, 0, 0.0, 0.0
    while used < 1.0:
        epoch += 1
        model.train()
        rng.shuffle(train_set)
        bar = tqdm(range(steps_per_epoch), desc=f"{kind} epoch {epoch}", disable=not progress, leave=False)
        steps, batches, total, used, last_lr = _run_epoch(model, optimizer, loss_fn, bar, batch_of, lr, budget_used,
                                                          steps, used, last_lr)
        model.eval()
        accuracy = exact_match(translator, splits["valid"])
        loss_valid = validation_loss(model, splits["valid"], cfg)
        elapsed = time.monotonic() - start
        log(f"{kind} epoch {epoch} ({batches} batches): train loss {total / batches:.4f}, valid loss "
            f"{loss_valid:.4f}, valid exact match (greedy) {accuracy:.4f}, {elapsed / 60:.1f} min")
        if loss_valid < best["valid_loss"]:
            best = {"valid_loss": loss_valid, "valid_exact_match": accuracy, "epoch": epoch}
            best_state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(best_state, str(out / f"{kind}.safetensors"))
    meta = {"config": cfg.to_dict(), "seed": seed, "data_seed": DATA_SEED, "train_size": train_size,
            "epochs": epochs, "budget_minutes": minutes, "epochs_run": epoch, "steps": steps, "last_lr": last_lr,
            "minutes": round((time.monotonic() - start) / 60, 2), "threads": threads, **best}
    (out / f"{kind}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta
