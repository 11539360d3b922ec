"""Loading a zoo checkpoint and decoding dates with it, through the public search API only."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from beamsearch import Hypothesis, beam_search_batch, beam_search_each
from beamsearch.zoo.dates import SOURCE_VOCAB, TARGET_VOCAB
from beamsearch.zoo.models import ModelConfig, Seq2Seq, Transformer, build_model

CHECKPOINTS = pathlib.Path(__file__).resolve().parent / "checkpoints"
MODELS = ("seq2seq", "transformer")


@dataclass
class Output:
    """One decoded output: the text and the hypothesis it came from."""

    text: str
    hypothesis: Hypothesis


class Translator:
    """A trained dates model and the searches over it.

    ``greedy`` is :func:`beamsearch.beam_search_each` with one row per input; ``beam`` is
    :func:`beamsearch.beam_search_batch` (GNMT length penalty, n-best); both decode many sources
    in one batch, ``chunk`` at a time.
    """

    def __init__(self, model: Seq2Seq | Transformer, chunk: int = 512) -> None:
        self.model: Any = model.eval()  # Seq2Seq or Transformer: the same step protocol
        self.cfg: ModelConfig = model.cfg
        self.chunk = chunk
        self.max_steps = self.cfg.max_target - 1  # positions: bos + up to max_target - 1 tokens

    @classmethod
    def load(cls, name: str = "seq2seq", directory: str | pathlib.Path | None = None) -> Translator:
        """Load ``<directory>/<name>.safetensors`` and ``<name>.json`` (default: the shipped ones)."""
        from safetensors.torch import load_file

        if name not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}; got {name!r}")
        folder = pathlib.Path(directory) if directory is not None else CHECKPOINTS
        weights, config = folder / f"{name}.safetensors", folder / f"{name}.json"
        if not weights.exists() or not config.exists():
            raise FileNotFoundError(f"no checkpoint for model {name!r} in {folder}")
        meta = json.loads(config.read_text())
        model = build_model(ModelConfig(**meta["config"]))
        model.load_state_dict(load_file(str(weights)))
        return cls(model)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """int64 ``[N, S]`` source ids, padded; ValueError for text the model cannot read."""
        rows = []
        for i, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"text {i + 1} is empty")
            unknown = SOURCE_VOCAB.unknown(text)
            if unknown:
                raise ValueError(f"text {text!r} has characters outside the vocabulary: {''.join(unknown)!r}")
            if len(text) > self.cfg.max_source:
                raise ValueError(f"text {text[:20]!r}... is {len(text)} characters; the model reads at most "
                                 f"{self.cfg.max_source}")
            rows.append(SOURCE_VOCAB.encode(text))
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.cfg.pad] * (width - len(r)) for r in rows], dtype=torch.int64)

    @torch.no_grad()
    def greedy(self, texts: Sequence[str]) -> list[Output]:
        """Greedy decoding of every text (the argmax at each step)."""
        out: list[Output] = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start : start + self.chunk]
            state = self.model.init_state(self.encode(part))
            results = beam_search_each(self.model.step, state, len(part), self.cfg.bos, self.cfg.eos,
                                       beam_size=1, max_len=self.max_steps, length_penalty=0.0)
            out += [self._output(hyps[0]) for hyps in results]
        return out

    @torch.no_grad()
    def beam(self, texts: Sequence[str], beam: int = 5, n_best: int = 1, alpha: float = 0.6) -> list[list[Output]]:
        """Batched beam search; per text, its ``n_best`` outputs, best first."""
        out: list[list[Output]] = []
        for start in range(0, len(texts), self.chunk):
            part = texts[start : start + self.chunk]
            state = self.model.init_state(self.encode(part))
            results = beam_search_batch(self.model.step, state, [[self.cfg.bos]] * len(part),
                                        eos_token_id=self.cfg.eos, max_steps=self.max_steps, beam_size=beam,
                                        n_best=n_best, alpha=alpha)
            out += [[self._output(h) for h in hyps] for hyps in results]
        return out

    def decode(self, texts: Sequence[str], beam: int, n_best: int = 1, alpha: float = 0.6) -> list[list[Output]]:
        """Greedy for ``beam == 1`` (n_best 1), beam search otherwise."""
        if beam == 1 and n_best == 1:
            return [[o] for o in self.greedy(texts)]
        return self.beam(texts, beam, n_best, alpha)

    @torch.no_grad()
    def rescore(self, text: str, tokens: Sequence[int]) -> float:
        """Teacher-forced log-probability of ``tokens`` (eos included if present) given ``text``."""
        state = self.model.init_state(self.encode([text]))
        total, prev = 0.0, self.cfg.bos
        for t in tokens:
            logits, state = self.model.step(state, torch.tensor([prev]))
            total += torch.log_softmax(logits[0].double(), dim=0)[t].item()
            prev = t
        return total

    def _output(self, h: Hypothesis) -> Output:
        return Output(TARGET_VOCAB.decode(h.tokens), h)
