"""Plain references for transducer decoding tests: tiny prefix-dependent transducers, every
alignment enumerated, and the forward algorithm, one prefix and one frame at a time.

Written from the definitions. RNN-T (Graves 2012): at frame t after labels y_1..y_u, the joint
gives P(k | t, u) over the labels and the blank; a blank moves to frame t + 1, a label stays at t.
TDT (Xu et al. 2023): the joint also gives P(d | t, u) over the durations; a token k with
duration d moves to frame t + d (a blank never has duration 0: that probability is lost).
The conventions these references share with the decoders (docs/transducer.md):
- at most ``m`` labels at one frame: RNN-T: the m-th label moves to the next frame with no blank;
  TDT: a label of duration 0 may not be the m-th at its frame;
- a path ends as soon as its frame reaches or passes the utterance's length T (a TDT step may
  overshoot T); an RNN-T path thus ends with the blank (or forced move) at frame T - 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    top = x.max(-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))


@dataclass
class TinyTransducer:
    """A random transducer: ``enc`` ``[N, T, D]``; an RNN predictor ``h' = tanh(h W + E[y])``
    (pred_out = h', so it depends on the whole prefix); a joint ``enc A + pred B`` (+ durations)."""

    enc: np.ndarray
    W: np.ndarray
    E: np.ndarray
    A: np.ndarray
    B: np.ndarray
    blank: int
    durations: list[int] | None = None

    @staticmethod
    def make(seed: int, n: int = 2, frames: int = 3, vocab: int = 3, blank: int = 0, durations=None,
             dim: int = 4, scale: float = 1.0) -> TinyTransducer:
        rng = np.random.default_rng(seed)
        out = vocab + (0 if durations is None else len(durations))
        return TinyTransducer(rng.normal(size=(n, frames, dim)), rng.normal(size=(dim, dim)) * 0.8,
                              rng.normal(size=(vocab, dim)), rng.normal(size=(dim, out)) * scale,
                              rng.normal(size=(dim, out)) * scale, blank, durations)

    def state0(self) -> np.ndarray:
        return np.zeros((self.enc.shape[0], self.W.shape[0]))

    def predictor(self, state, y):
        y = np.asarray(y)
        h = np.tanh(state @ self.W + self.E[y])
        return h, h

    def joint(self, enc, pred):
        return enc @ self.A + pred @ self.B

    def emission(self, u: int, t: int, prefix) -> tuple[np.ndarray, np.ndarray | None]:
        """Token (and duration) log-probs at frame t after ``prefix``, one row at a time."""
        h = np.zeros((1, self.W.shape[0]))
        for y in (self.blank, *prefix):
            _, h = self.predictor(h, np.array([y]))
        logits = self.joint(self.enc[u, t][None], h)[0]
        v = self.E.shape[0]
        if self.durations is None:
            return log_softmax(logits), None
        return log_softmax(logits[:v]), log_softmax(logits[v:])


def moves(model: TinyTransducer, t: int, j: int, k: int, m: int):
    """Every (duration index, next frame, next count) of emitting token k at (t, j), allowed by
    the conventions above (duration index None for RNN-T)."""
    if model.durations is None:
        if k == model.blank or j + 1 >= m:
            return [(None, t + 1, 0)]
        return [(None, t, j + 1)]
    out = []
    for i, d in enumerate(model.durations):
        if d == 0 and (k == model.blank or j + 1 >= m):
            continue
        out.append((i, t + d, j + 1 if d == 0 else 0))
    return out


def brute_force(model: TinyTransducer, u: int, frames: int, m: int) -> dict[tuple[int, ...], float]:
    """Every label sequence's log-probability, summed over every path enumerated one by one."""
    total: dict[tuple[int, ...], float] = {}

    def walk(t, j, prefix, logp):
        if t >= frames:
            total[prefix] = np.logaddexp(total.get(prefix, -math.inf), logp)
            return
        tok, dur = model.emission(u, t, prefix)
        for k in range(tok.size):
            for i, t2, j2 in moves(model, t, j, k, m):
                step = tok[k] + (0.0 if i is None else dur[i])
                walk(t2, j2, prefix if k == model.blank else prefix + (k,), logp + step)

    if frames == 0:
        return {(): 0.0}
    walk(0, 0, (), 0.0)
    return total


def forward(model: TinyTransducer, u: int, frames: int, labels, m: int) -> float:
    """log P(labels): the forward algorithm over (frame, labels emitted, labels at the frame)."""
    labels = tuple(labels)
    n = len(labels)
    alpha = np.full((frames + 1, n + 1, m), -math.inf)
    end = -math.inf
    if frames == 0:
        return 0.0 if n == 0 else -math.inf
    alpha[0, 0, 0] = 0.0
    for t in range(frames):
        for i in range(n + 1):
            tok, dur = model.emission(u, t, labels[:i])
            for j in range(m):
                a = alpha[t, i, j]
                if a == -math.inf:
                    continue
                nexts = [(model.blank, i)] + ([(labels[i], i + 1)] if i < n else [])
                for k, i2 in nexts:
                    for di, t2, j2 in moves(model, t, j, k, m):
                        v = a + tok[k] + (0.0 if di is None else dur[di])
                        if t2 >= frames:
                            if i2 == n:
                                end = np.logaddexp(end, v)
                        else:
                            alpha[t2, i2, j2] = np.logaddexp(alpha[t2, i2, j2], v)
    return float(end)


def greedy(model: TinyTransducer, u: int, frames: int, m: int) -> tuple[list[int], list[int]]:
    """The greedy rule of the decoders, one step at a time: labels and their frames."""
    t, j, prefix, at = 0, 0, [], []
    while t < frames:
        tok, dur = model.emission(u, t, prefix)
        k = int(np.argmax(tok))
        if dur is None:
            step = 1 if (k == model.blank or j + 1 >= m) else 0
        else:
            d = model.durations[int(np.argmax(dur))]
            if d == 0 and (k == model.blank or j + 1 >= m):
                d = min(x for x in model.durations if x > 0)
            step = d
        if k != model.blank:
            prefix.append(k)
            at.append(t)
        j = j + 1 if step == 0 else 0
        t += step
    return prefix, at
