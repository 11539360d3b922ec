"""Sampling by whisper's rule: draws follow softmax(logp / T) (counted over many seeds), a sample
is scored by the untempered log-probabilities, and an input's samples depend on its seed alone."""

from __future__ import annotations

import numpy as np

from beamsearch.controls.shared import mode_options
from beamsearch.core.plan import Plan, run_plan
from beamsearch.whisper import WhisperSample
from beamsearch.whisper.sample import gumbel_noise

V, EOT, STEPS = 5, 4, 6


def _table(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, STEPS, V, V)).astype(np.float32)


def _sample(table: np.ndarray, seeds: list[int], best_of: int, temperature: float) -> list[list]:
    n = table.shape[0]

    def step(state: tuple, y_prev: np.ndarray) -> tuple:
        item, t = state
        return table[item, t, y_prev], (item, t + 1)

    opts = mode_options("test", [[0]] * n, {"eos_token_id": EOT, "max_steps": STEPS})
    plan = Plan(opts, WhisperSample(best_of, temperature, np.asarray(seeds)), best_of, n_best=None)
    return run_plan(step, (np.arange(n), np.zeros(n, np.int64)), plan)


def test_an_input_samples_the_same_alone_and_in_any_batch() -> None:
    table = _table(0, 4)
    batch = _sample(table, [7, 8, 9, 10], 3, 0.9)
    for i in range(4):
        alone = _sample(table[i:i + 1], [7 + i], 3, 0.9)[0]
        assert sorted((h.tokens, h.finished) for h in alone) == sorted((h.tokens, h.finished) for h in batch[i])
    assert len({tuple(h.tokens) for hyps in batch for h in hyps}) > 4  # the trajectories differ


def test_a_sample_is_scored_by_the_untempered_log_probabilities() -> None:
    """Every sample's logprob is the teacher-forced sum of log_softmax(logits) (T = 1), not of
    log_softmax(logits / T)."""
    table = _table(1, 2)
    for i, hyps in enumerate(_sample(table, [3, 4], 4, 0.5)):
        for h in hyps:
            prev, total = 0, 0.0
            for t, tok in enumerate(h.tokens):
                row = table[i, t, prev].astype(np.float64)
                total += row[tok] - np.log(np.exp(row - row.max()).sum()) - row.max()
                prev = tok
            assert abs(h.logprob - total) < 1e-5


def test_draws_follow_the_tempered_distribution() -> None:
    """4000 draws of one row: each token's frequency within 4 standard deviations of
    softmax(logp / T)."""
    logp = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    t = 0.7
    p = np.exp(logp / t) / np.exp(logp / t).sum()
    draws = np.array([np.argmax(logp / t + gumbel_noise(s, 0, 0, 1, 4)) for s in range(4000)])
    freq = np.bincount(draws, minlength=4) / 4000
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / 4000))
