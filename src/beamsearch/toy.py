"""Toy models for demos and docs: next-token tables as step functions (numpy only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["HAND_EXAMPLE", "TableModel", "RandomPrefixModel"]

# Seed 000 section 3: tokens eos=0, a=1, b=2; next-token probabilities after each prefix.
HAND_EXAMPLE: dict[tuple[int, ...], list[float]] = {
    (): [0.1, 0.5, 0.4],
    (1,): [0.2, 0.1, 0.7],
    (2,): [0.9, 0.05, 0.05],
}


def _prefix_rows(prefixes: Sequence[tuple[int, ...]]) -> np.ndarray:
    out = np.empty(len(prefixes), dtype=object)  # --> [k], one tuple per row
    for i, p in enumerate(prefixes):
        out[i] = p
    return out


class TableModel:
    """A model given as a table ``prefix -> next-token probabilities`` (uniform when missing).

    The state is a numpy object array ``[k]`` of prefixes (the generated tokens so far), so
    ``select_state`` gathers it like any array.
    """

    def __init__(self, table: Mapping[tuple[int, ...], Sequence[float]], vocab: int) -> None:
        self.table = dict(table)
        self.vocab = vocab

    def init_state(self) -> np.ndarray:
        return _prefix_rows([None])  # type: ignore[list-item]

    def step(self, state: np.ndarray, y_prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``state [k]`` of prefixes, ``y_prev [k]`` -> ``(logits [k, V], new_state [k])``."""
        prefixes = [() if p is None else p + (int(y),) for p, y in zip(state, y_prev, strict=True)]
        uniform = [1.0 / self.vocab] * self.vocab
        with np.errstate(divide="ignore"):
            logits = np.log(np.array([self.table.get(p, uniform) for p in prefixes], dtype=np.float64))
        return logits, _prefix_rows(prefixes)


class RandomPrefixModel(TableModel):
    """Seeded random logits for every prefix: a small model on which greedy is often beaten."""

    def __init__(self, vocab: int = 6, seed: int = 0, scale: float = 2.0) -> None:
        super().__init__({}, vocab)
        self.seed = seed
        self.scale = scale

    def step(self, state: np.ndarray, y_prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        prefixes = [() if p is None else p + (int(y),) for p, y in zip(state, y_prev, strict=True)]
        logits = np.stack([np.random.default_rng([self.seed, len(p), *p]).normal(size=self.vocab) * self.scale
                           for p in prefixes])
        return logits, _prefix_rows(prefixes)
