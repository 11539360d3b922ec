"""The hypotheses of the transducer search and how a step's candidates become the next ones:
merged by log-add, cut to the beam, the finished ones pooled (docs/transducer.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.core.state import select_state
from beamsearch.speech.fusion import LMState, WordFusion, lm_rows
from beamsearch.speech.hotwords import HotState, Hotwords, hot_rows
from beamsearch.speech.lexicon import Lexicon
from beamsearch.speech.tokenlm import TokenFusion
from beamsearch.speech.transducer_model import Network, carry


@dataclass(frozen=True)
class Plan:
    """How to search: ``width`` hypotheses kept per utterance, ``pool`` finished ones, at most
    ``max_symbols`` labels per frame, the ``schedule``, hotwords or None, the word LM or None,
    the token LM or None (then ``lm[3]`` of the LM state sums its log-probs of the labels), the
    lexicon or None."""

    width: int
    pool: int
    max_symbols: int
    schedule: str
    hotwords: Hotwords | None
    fusion: WordFusion | None = None
    token: TokenFusion | None = None
    lexicon: Lexicon | None = None

    def lm_start(self, shape: tuple[int, ...]) -> LMState:
        """The word-LM state of empty label sequences (zeros without an LM): ``(ctx, key, size,
        lm, words)`` (:mod:`beamsearch.speech.fusion`)."""
        if self.fusion is not None:
            return self.fusion.start(shape)
        zero = np.zeros(shape, np.int64)
        return zero, zero.copy(), zero.copy(), np.zeros(shape), zero.copy()

    def terms(self, hot: HotState, lm: LMState) -> np.ndarray | float:
        """The hotword bonus plus the fused word-LM term (``alpha * lm + beta * words``, completed
        words only) of label sequences with these states, while decoding."""
        out: np.ndarray | float = 0.0
        if self.hotwords is not None:
            out = out + self.hotwords.weight * self.hotwords.count(*hot)
        return out + self.fused(lm[3], lm[4])

    def fused(self, lm: np.ndarray, words: np.ndarray) -> np.ndarray | float:
        """The LM terms of LM log-probs ``lm`` and word counts ``words``: ``alpha * lm + beta *
        words`` (word LM), ``alpha * lm`` (token LM), 0.0 (none)."""
        if self.fusion is not None:
            return self.fusion.fused(lm, words)
        return 0.0 if self.token is None else self.token.alpha * lm


@dataclass
class Beams:
    """Hypotheses ``[N, B]`` (score -inf: an empty slot) and their carried rows (``N * B``)."""

    score: np.ndarray
    node: np.ndarray
    align: np.ndarray
    t: np.ndarray
    j: np.ndarray
    hot: HotState
    lm: LMState
    carried: Any
    lex: np.ndarray  # int64 [N, B]: the lexicon node (0 without a lexicon)

    @staticmethod
    def empty(n: int, b: int, plan: Plan) -> Beams:
        """``[N, B]`` empty slots (no carried rows)."""
        return Beams(np.full((n, b), NEG_INF), zeros(n, b), zeros(n, b), zeros(n, b), zeros(n, b),
                     (zeros(n, b), zeros(n, b), zeros(n, b)), plan.lm_start((n, b)), None, zeros(n, b))


@dataclass
class Cands:
    """Flat candidates: utterance, source slot row (``u * B + s``), emitted label (-1: none),
    acoustic score, label-sequence id, alignment node, frame, labels at the frame, hotword state,
    word-LM state, lexicon node."""

    u: np.ndarray
    src: np.ndarray
    label: np.ndarray
    score: np.ndarray
    node: np.ndarray
    align: np.ndarray
    t: np.ndarray
    j: np.ndarray
    hot: HotState
    lm: LMState
    lex: np.ndarray

    def take(self, idx: np.ndarray) -> Cands:
        return Cands(self.u[idx], self.src[idx], self.label[idx], self.score[idx], self.node[idx], self.align[idx],
                     self.t[idx], self.j[idx], hot_rows(self.hot, idx), lm_rows(self.lm, idx), self.lex[idx])


@dataclass
class Pool:
    """Finished hypotheses ``[N, P]``: acoustic score (-inf: empty), label-sequence id, alignment
    node, hotword positions in completed occurrences, the natural-log LM probability of the words
    and ``</s>`` (the last word scored) and the number of words (0 without an LM)."""

    score: np.ndarray
    node: np.ndarray
    align: np.ndarray
    done: np.ndarray
    lm: np.ndarray
    words: np.ndarray

    @staticmethod
    def empty(n: int, p: int) -> Pool:
        return Pool(np.full((n, p), NEG_INF), zeros(n, p), zeros(n, p), zeros(n, p), np.zeros((n, p)), zeros(n, p))

    def rank(self, plan: Plan) -> np.ndarray:
        """float64 ``[N, P]``: the score results are ranked by: acoustic + bonus + LM terms."""
        weight = 0.0 if plan.hotwords is None else plan.hotwords.weight
        return self.score + weight * self.done + plan.fused(self.lm, self.words)


def zeros(n: int, k: int) -> np.ndarray:
    """int64 ``[n, k]`` zeros: an empty field of beams or of the finished pool."""
    return np.zeros((n, k), np.int64)


def admit(net: Network, beams: Beams, pool: Pool, cands: Cands, lengths: np.ndarray, plan: Plan,
          prefixes: Any) -> tuple[Beams, Pool]:
    """The next hypotheses and pool: candidates at or past their utterance's last frame are
    finished (a TDT step may overshoot it), the others kept as the new ``[N, B]`` beams; with a
    lexicon, a finished one whose last word is unfinished is dropped."""
    done = cands.t >= lengths[cands.u]
    whole = True if plan.lexicon is None else plan.lexicon.finished(cands.lex)
    live, fin = cands.take(np.flatnonzero(~done)), cands.take(np.flatnonzero(done & whole))
    if plan.token is not None and plan.token.lm.eos is not None:
        fin.lm = fin.lm[:3] + (fin.lm[3] + eos_logp(plan.token, beams.carried[2], fin),) + fin.lm[4:]
    return keep_live(net, beams, live, plan, prefixes), keep_finished(pool, fin, plan)


def eos_logp(token: TokenFusion, lm: Any, fin: Cands) -> np.ndarray:
    """float64 ``[K]``: the token LM's log-prob of its ``eos`` after each finished candidate's
    labels: read from its source row, or, where its last move emitted a label, from one LM step
    on that label."""
    lp, state = lm
    out = lp[fin.src, token.lm.eos]
    lab = np.flatnonzero(fin.label >= 0)
    if lab.size:
        after, _ = token.call(select_state(state, token.index(fin.src[lab])), fin.label[lab])
        out[lab] = after[:, token.lm.eos]
    return out


def merge(keys: list[np.ndarray], score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates with equal keys as one: ``(rep, total)``, per group the index of its best
    member (the first on ties) and the log-add of its members' scores."""
    if score.size == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    inv = group_ids(keys)
    order = np.lexsort((np.arange(score.size), -score, inv))
    head = np.r_[True, inv[order][1:] != inv[order][:-1]]
    rep = order[head]  # --> [G], group by group
    top = score[rep]
    acc = np.zeros(rep.size)
    np.add.at(acc, inv, np.exp(score - top[inv]))
    return rep, top + np.log(acc)


def group_ids(keys: list[np.ndarray]) -> np.ndarray:
    """int64 ``[K]``: each row's rank among the distinct rows of the columns ``keys`` (int
    ``[K]`` each, >= 0), in the lexicographic order of the rows: the inverse of ``np.unique(...,
    axis=0)``. The columns are packed into one int64 code (mixed radix, the first column most
    significant, so the codes sort as the rows do) when it fits, else compared as rows."""
    code, bound = np.zeros(keys[0].size, np.int64), 1
    if code.size == 0:
        return code
    for k in keys:
        span = int(k.max()) + 1
        bound *= span
        if bound >= 1 << 62 or int(k.min()) < 0:
            return np.unique(np.stack(keys, 1), axis=0, return_inverse=True)[1].reshape(-1)
        code = code * span + k
    return np.unique(code, return_inverse=True)[1].reshape(-1)


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
    keep, slot = top_per_utterance(c.u, total + plan.terms(c.hot, c.lm), b)
    c = c.take(keep)
    flat = c.u * b + slot
    out = Beams.empty(n, b, plan)
    for name in ("score", "node", "align", "t", "j", "lex"):
        getattr(out, name).ravel()[flat] = getattr(c, name)
    for h, v in zip(out.hot + out.lm, c.hot + c.lm, strict=True):
        h.ravel()[flat] = v
    src, label, key = np.zeros(n * b, np.int64), np.full(n * b, -1), np.zeros(n * b, np.int64)
    src[flat], label[flat], key[flat] = c.src, c.label, c.u * prefixes.size + c.node
    out.carried = carry(net, beams.carried, src, label, key)
    return out


def keep_finished(pool: Pool, fin: Cands, plan: Plan) -> Pool:
    """The pool and the newly finished candidates merged by labels (log-add over every way and
    step they finished at) and cut to the pool's size by score plus final hotword bonus and LM
    terms (the last word and ``</s>`` scored as they finish). Without new ones the pool is
    returned as it is (it is already merged and in this order: best first per utterance, equal
    ranks by label-sequence id)."""
    if fin.u.size == 0:
        return pool
    n, p = pool.score.shape
    pu, ps = np.nonzero(np.isfinite(pool.score))
    lm, words = fin.lm[3], fin.lm[4]  # a token LM's eos is in (admit)
    if plan.fusion is not None:
        lm, words = plan.fusion.finish(*fin.lm)
    u = np.concatenate([pu, fin.u])
    cols = {"node": fin.node, "score": fin.score, "align": fin.align, "done": fin.hot[2], "lm": lm, "words": words}
    cat = {k: np.concatenate([getattr(pool, k)[pu, ps], v]) for k, v in cols.items()}
    rep, total = merge([u, cat["node"]], cat["score"])
    cat["score"] = np.zeros_like(cat["score"])
    cat["score"][rep] = total
    merged = Pool(*(cat[k][rep][None, :] for k in ("score", "node", "align", "done", "lm", "words")))
    keep, slot = top_per_utterance(u[rep], merged.rank(plan)[0], p)
    idx, uk = rep[keep], u[rep[keep]]
    out = Pool.empty(n, p)
    for k in ("score", "node", "align", "done", "lm", "words"):
        getattr(out, k)[uk, slot] = cat[k][idx]
    return out
