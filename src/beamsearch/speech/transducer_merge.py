"""The hypotheses of the transducer search and how a step's candidates become the next ones:
merged by log-add, cut to the beam, the finished ones pooled (docs/transducer.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.speech.hotwords import Hotwords
from beamsearch.speech.transducer_model import Network, carry


@dataclass(frozen=True)
class Plan:
    """How to search: ``width`` hypotheses kept per utterance, ``pool`` finished ones, at most
    ``max_symbols`` labels per frame, the ``schedule``, hotwords or None."""

    width: int
    pool: int
    max_symbols: int
    schedule: str
    hotwords: Hotwords | None


@dataclass
class Beams:
    """Hypotheses ``[N, B]`` (score -inf: an empty slot) and their carried rows (``N * B``)."""

    score: np.ndarray
    node: np.ndarray
    align: np.ndarray
    t: np.ndarray
    j: np.ndarray
    hot: tuple[np.ndarray, np.ndarray, np.ndarray]
    carried: Any


@dataclass
class Cands:
    """Flat candidates: utterance, source slot row (``u * B + s``), emitted label (-1: none),
    acoustic score, label-sequence id, alignment node, frame, labels at the frame, hotword state."""

    u: np.ndarray
    src: np.ndarray
    label: np.ndarray
    score: np.ndarray
    node: np.ndarray
    align: np.ndarray
    t: np.ndarray
    j: np.ndarray
    hot: tuple[np.ndarray, np.ndarray, np.ndarray]

    def take(self, idx: np.ndarray) -> "Cands":
        return Cands(*(getattr(self, f)[idx] for f in ("u", "src", "label", "score", "node", "align", "t", "j")),
                     tuple(h[idx] for h in self.hot))  # type: ignore[arg-type]


@dataclass
class Pool:
    """Finished hypotheses ``[N, P]``: acoustic score (-inf: empty), label-sequence id, alignment
    node, hotword positions in completed occurrences."""

    score: np.ndarray
    node: np.ndarray
    align: np.ndarray
    done: np.ndarray


def admit(net: Network, beams: Beams, pool: Pool, cands: Cands, lengths: np.ndarray, plan: Plan,
          prefixes: Any) -> tuple[Beams, Pool]:
    """The next hypotheses and pool: candidates at or past their utterance's last frame are
    finished (a TDT step may overshoot it), the others kept as the new ``[N, B]`` beams."""
    done = cands.t >= lengths[cands.u]
    live, fin = cands.take(np.flatnonzero(~done)), cands.take(np.flatnonzero(done))
    return keep_live(net, beams, live, plan, prefixes), keep_finished(pool, fin, plan)


def merge(keys: list[np.ndarray], score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates with equal keys as one: ``(rep, total)``, per group the index of its best
    member (the first on ties) and the log-add of its members' scores."""
    if score.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    _, inv = np.unique(np.stack(keys, 1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.lexsort((np.arange(score.size), -score, inv))
    head = np.r_[True, inv[order][1:] != inv[order][:-1]]
    rep = order[head]  # --> [G], group by group
    top = score[rep]
    acc = np.zeros(rep.size)
    np.add.at(acc, inv, np.exp(score - top[inv]))
    return rep, top + np.log(acc)


def top_per_utterance(u: np.ndarray, rank: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best entries of each utterance by ``rank`` (the earlier on ties): their indices
    and their slots ``0 .. k - 1``."""
    order = np.lexsort((np.arange(rank.size), -rank, u))
    su = u[order]
    pos = np.arange(su.size) - np.searchsorted(su, su, side="left")
    return order[pos < k], pos[pos < k]


def keep_live(net: Network, beams: Beams, live: Cands, plan: Plan, prefixes: Any) -> Beams:
    """The unfinished candidates merged by (labels, frame, labels at the frame) and cut to the
    beam, with their carried rows (the predictor run on the new prefixes)."""
    n, b = beams.score.shape
    rep, total = merge([live.u, live.node, live.t, live.j], live.score)
    c = live.take(rep)
    c.score = total
    hw = plan.hotwords
    rank = total if hw is None else total + hw.weight * hw.count(*c.hot)
    keep, slot = top_per_utterance(c.u, rank, b)
    c = c.take(keep)
    flat = c.u * b + slot
    out = Beams(np.full((n, b), NEG_INF), *(np.zeros((n, b), np.int64) for _ in range(4)),
                tuple(np.zeros((n, b), np.int64) for _ in range(3)), None)  # type: ignore[arg-type]
    for name in ("score", "node", "align", "t", "j"):
        getattr(out, name).ravel()[flat] = getattr(c, name)
    for h, v in zip(out.hot, c.hot):
        h.ravel()[flat] = v
    src, label, key = np.zeros(n * b, np.int64), np.full(n * b, -1), np.zeros(n * b, np.int64)
    src[flat], label[flat], key[flat] = c.src, c.label, c.u * prefixes.size + c.node
    out.carried = carry(net, beams.carried, src, label, key)
    return out


def keep_finished(pool: Pool, fin: Cands, plan: Plan) -> Pool:
    """The pool and the newly finished candidates merged by labels (log-add over every way and
    step they finished at) and cut to the pool's size by score plus final hotword bonus."""
    n, p = pool.score.shape
    pu, ps = np.nonzero(np.isfinite(pool.score))
    u = np.concatenate([pu, fin.u])
    node = np.concatenate([pool.node[pu, ps], fin.node])
    score = np.concatenate([pool.score[pu, ps], fin.score])
    align = np.concatenate([pool.align[pu, ps], fin.align])
    done = np.concatenate([pool.done[pu, ps], fin.hot[2]])
    rep, total = merge([u, node], score)
    weight = 0.0 if plan.hotwords is None else plan.hotwords.weight
    keep, slot = top_per_utterance(u[rep], total + weight * done[rep], p)
    idx, uk = rep[keep], u[rep[keep]]
    out = Pool(np.full((n, p), NEG_INF), np.zeros((n, p), np.int64), np.zeros((n, p), np.int64),
               np.zeros((n, p), np.int64))
    out.score[uk, slot], out.node[uk, slot] = total[keep], node[idx]
    out.align[uk, slot], out.done[uk, slot] = align[idx], done[idx]
    return out
