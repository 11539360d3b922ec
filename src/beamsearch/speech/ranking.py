"""The best ``B`` candidates of each utterance at a frame, without scoring every extension.

The candidates of an utterance are its slots' own prefixes after the frame (*stays*, ``B``) and
every slot extended by every candidate label (``B x M``; labels most probable first). An
extension's score is ``lse[b] + tok_lp[m]`` (``pb[b] + tok_lp[m]`` when the label repeats the
slot's last one; -inf when that prefix is already a slot, since it was merged into it). So:

1. a lower bound ``L`` of the utterance's ``B``-th best score: the ``B``-th best of the stays and
   of each slot extended by the frame's most probable label (a subset of the candidates, so its
   ``B``-th best is no higher than the full set's); labels below ``L`` minus the best slot's
   log-prob are not candidates at all (:func:`beamsearch.speech.tokens.candidates`);
2. in slot ``b`` only the labels with ``tok_lp[m] >= L - lse[b]`` can reach ``L`` (every
   extension of ``b`` is at most ``lse[b] + tok_lp[m]``);
3. those are scored, and the best ``B`` of the stays and of the extensions at or above ``L`` are
   kept, by score, ties to the lower candidate index (stay ``b``, extension ``B + b M + m``).

The result is the same as ranking all ``B + B M`` candidates, ties included. With peaky
emissions a few dozen extensions per utterance are scored instead of ``2 B**2``.

Score terms beyond the acoustic one (an LM's word scores, a hotword bonus) enter in two places:
:meth:`Extensions.scores` adds each extension's term, and the stays carry their prefix's; step 2
then compares ``tok_lp[m]`` with ``L - lse[b] - D[b, m]`` for ``D[b, m]`` an upper bound of the
term slot ``b`` extended by label ``m`` can add (a term's ``cols``; else its bound ``up[b]`` for
every label), so it still leaves out only extensions that cannot be kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF


@dataclass(frozen=True)
class Extensions:
    """What extension scores are made of, at one frame, for ``n`` utterances of ``B`` slots."""

    lse: np.ndarray  # float64 [n, B]: logaddexp(pb, pnb) before the frame
    pb: np.ndarray  # float64 [n, B]
    last: np.ndarray  # int64 [n, B]: the slot's last label (-1: none)
    tok: np.ndarray  # int64 [n, M]: the labels that may start, most probable first
    tok_lp: np.ndarray  # float64 [n, M]: their log-probs (-inf: padding)
    children: np.ndarray  # int64 [c], sorted: codes (utt * B + slot) * V + label of prefixes already slots
    vocab: int
    extra: Any = None  # a further term: .term(utt, slot, label) -> float64 [K]; .up float64 [n, B] its bound

    def upper(self) -> np.ndarray | float:
        """``D``: an upper bound of the further term of each slot extended by each of ``tok``,
        float64 ``[n, B, M]`` (0: none; a term without ``cols``: its ``up`` for every label)."""
        if self.extra is None:
            return 0.0
        return cols_of(self.extra, self.tok, self.tok_lp)

    def scores(self, utt: np.ndarray, slot: np.ndarray, col: np.ndarray) -> np.ndarray:
        """float64 ``[K]``: slot ``slot[k]`` of utterance ``utt[k]`` extended by ``tok[utt, col]``."""
        return self.label_scores(utt, slot, self.tok[utt, col], self.tok_lp[utt, col])

    def label_scores(self, utt: np.ndarray, slot: np.ndarray, label: np.ndarray, label_lp: np.ndarray) -> np.ndarray:
        """float64 ``[K]``: slot ``slot[k]`` of utterance ``utt[k]`` extended by ``label[k]``, whose
        log-prob at this frame is ``label_lp[k]`` (-inf: it may not start)."""
        base = np.where(self.last[utt, slot] == label, self.pb[utt, slot], self.lse[utt, slot])
        val = base + label_lp
        if self.children.size:
            code = (utt * self.lse.shape[1] + slot) * self.vocab + label
            pos = np.minimum(np.searchsorted(self.children, code), self.children.size - 1)
            val = np.where(self.children[pos] == code, NEG_INF, val)
        if self.extra is not None:
            val = val + self.extra.term(utt, slot, label)
        return val


def cols_of(term: Any, tok: np.ndarray, tok_lp: np.ndarray) -> np.ndarray:
    """float64 ``[n, B, M]``: ``term.cols(tok, tok_lp)`` (a bound per slot and label), or its
    ``up`` ``[n, B]`` for every label; a sum of terms (``parts``) bound part by part."""
    parts = getattr(term, "parts", None)
    if parts is not None:
        total = cols_of(parts[0], tok, tok_lp)
        for part in parts[1:]:
            total = total + cols_of(part, tok, tok_lp)
        return total
    cols = getattr(term, "cols", None)
    return term.up[:, :, None] if cols is None else cols(tok, tok_lp)


def slack(need: np.ndarray) -> np.ndarray:
    """A threshold on a label's log-prob lowered by a rounding margin: ``lse + tok_lp >= bound``
    can hold in floats where ``tok_lp >= bound - lse`` does not, so a count or a cut by the latter
    takes ``1e-9`` relative (and absolute) more."""
    return need - 1e-9 * (1 + np.abs(need))


def child_codes(last: np.ndarray, parent: np.ndarray, found: np.ndarray, vocab: int) -> np.ndarray:
    """Sorted int64 codes ``(utt * B + parent slot) * V + label`` of every slot whose prefix less
    its last label is another slot (``parent``/``found`` from ``prefix.parent_slots``)."""
    utt, slot = np.nonzero(found)
    return np.sort((utt * last.shape[1] + parent[utt, slot]) * vocab + last[utt, slot])


def lower_bound(stay: np.ndarray, head: Extensions, more: tuple[np.ndarray, ...] | None = None,
                masked: np.ndarray | None = None) -> np.ndarray:
    """float64 ``[n]``: the ``B``-th best of the stays and of every slot extended by each of
    ``head``'s labels (the most probable one), and with ``more`` = ``(utt, slot, label)`` int64
    ``[K]`` (pairs of no label of ``head``; ``masked`` float64 ``[n, V]`` the labels' log-probs),
    of those extensions too: a subset of the candidates all the same."""
    n, width = stay.shape
    utt, slot, col = np.meshgrid(np.arange(n), np.arange(width), np.arange(head.tok.shape[1]), indexing="ij")
    pool = np.concatenate([stay, head.scores(utt.ravel(), slot.ravel(), col.ravel()).reshape(n, -1)], 1)
    if more is None or masked is None or not more[0].size:
        return np.partition(pool, pool.shape[1] - width, axis=1)[:, pool.shape[1] - width]
    m_utt, m_slot, label = more
    fresh = ~(head.tok[m_utt] == label[:, None]).any(1)  # a pair of a head label is in the pool already
    m_utt, m_slot, label = m_utt[fresh], m_slot[fresh], label[fresh]
    val = head.label_scores(m_utt, m_slot, label, masked[m_utt, label])
    return kth_best(np.concatenate([np.repeat(np.arange(n), pool.shape[1]), m_utt]),
                    np.concatenate([pool.ravel(), val]), n, width)


def best(stay: np.ndarray, ext: Extensions, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The best ``B`` candidates of each utterance: ``(idx, val)`` int64 and float64 ``[n, B]``,
    best first; ``idx`` a stay ``b < B`` or an extension ``B + b M + m``; -inf values pad.
    ``bound`` float64 ``[n]``: :func:`lower_bound`'s, no higher than each ``B``-th best."""
    n, width = stay.shape
    m = ext.tok.shape[1]
    flat = np.broadcast_to(np.arange(width), (n, width)).ravel()
    utt, score = np.repeat(np.arange(n), width), stay.ravel()
    if m:
        with np.errstate(invalid="ignore"):  # a dead slot: -inf - -inf; it gets no extension
            need = slack((bound[:, None] - ext.lse)[:, :, None] - ext.upper())  # --> [n, B, M]
            reach = ext.tok_lp[:, None, :] >= need
        rows, col = np.nonzero(reach.reshape(n * width, m))
        e_utt, e_slot = np.divmod(rows, width)
        val = ext.scores(e_utt, e_slot, col)
        keep = (val >= bound[e_utt]) & (val > NEG_INF)
        utt = np.concatenate([utt, e_utt[keep]])
        score = np.concatenate([score, val[keep]])
        flat = np.concatenate([flat, width + e_slot[keep] * m + col[keep]])
    return top_per_utterance(utt, score, flat, n, width)


def top_per_utterance(utt: np.ndarray, score: np.ndarray, flat: np.ndarray, n: int,
                      width: int) -> tuple[np.ndarray, np.ndarray]:
    """Each utterance's ``width`` best ``(flat, score)`` by score, ties to the lower ``flat``,
    as ``[n, width]`` arrays (padded with index 0 and -inf)."""
    if utt.size > 2 * n * width:  # many: first each utterance's width-th best score (one partition)
        keep = score >= kth_best(utt, score, n, width)[utt]  # ties with it kept: the sort breaks them
        utt, score, flat = utt[keep], score[keep], flat[keep]
    order = np.lexsort((flat, -score, utt))
    su = utt[order]
    rank = np.arange(su.size) - np.searchsorted(su, np.arange(n))[su]
    keep = rank < width
    idx = np.zeros((n, width), dtype=np.int64)
    val = np.full((n, width), NEG_INF)
    idx[su[keep], rank[keep]] = flat[order][keep]
    val[su[keep], rank[keep]] = score[order][keep]
    return idx, val


def kth_best(utt: np.ndarray, score: np.ndarray, n: int, k: int) -> np.ndarray:
    """float64 ``[n]``: each utterance's ``k``-th best of ``score`` (``utt`` its utterance,
    ``[K]`` each); -inf for one with fewer than ``k``."""
    order = np.argsort(utt, kind="stable")
    su = utt[order]
    count = np.bincount(su, minlength=n)
    width = int(count.max(initial=0))
    if width < k:
        return np.full(n, NEG_INF)
    pad = np.full((n, width), NEG_INF)
    pad[su, np.arange(su.size) - (np.cumsum(count) - count)[su]] = score[order]
    return -np.partition(-pad, k - 1, axis=1)[:, k - 1]
