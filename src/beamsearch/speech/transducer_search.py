"""The transducer search loop (docs/transducer.md): every utterance's hypotheses of a step as
arrays ``[N, B]``, one joint call per step for all of them, the predictor once per new prefix.

A hypothesis is a label sequence (a :class:`~beamsearch.speech.transducer_trie.Prefixes` id), the
frame it stands at, how many labels it emitted at that frame, and its acoustic log-probability
summed over the alignments merged into it. Each step a hypothesis emits one symbol (the blank or a
label; for TDT with a duration). Candidates reaching the same (labels, frame, labels at the frame)
are merged by log-add; those at or past the utterance's last frame go to the finished pool,
merged by labels. The schedules: ``"alignment"`` expands every hypothesis each step (alignment-
length synchronous), ``"frame"`` only those at their utterance's earliest frame (the others wait),
``"greedy"`` one hypothesis taking the most probable symbol (and, for TDT, duration).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.core.state import select_state
from beamsearch.speech.fusion import lm_rows
from beamsearch.speech.hotwords import hot_rows
from beamsearch.speech.transducer_merge import Beams, Cands, Plan, Pool, admit
from beamsearch.speech.transducer_model import Network, carry, grid_scores, start
from beamsearch.speech.transducer_trace import TransducerTrace
from beamsearch.speech.transducer_trie import Alignments, Prefixes


def search(net: Network, lengths: np.ndarray, state: Any, plan: Plan,
           recorder: TransducerTrace | None = None) -> tuple[Pool, Alignments]:
    """Run the steps until no hypothesis is left unfinished; the finished pool and the alignments.
    ``recorder``: a :class:`~beamsearch.speech.transducer_trace.TransducerTrace` told each step's
    candidates, beams and pool (None: none)."""
    n, b = lengths.size, plan.width
    prefixes, aligns = Prefixes(), Alignments()
    hw = plan.hotwords
    zeros = np.zeros(n, dtype=np.int64)
    h0 = (zeros.copy() if hw is None else hw.starts.copy(), zeros.copy(), zeros.copy())
    first = Cands(np.arange(n), np.arange(n) * b, zeros - 1, np.zeros(n), zeros, zeros, zeros, zeros, h0,
                  plan.lm_start((n,)), zeros.copy())
    pool = Pool.empty(n, plan.pool)
    carried = start(net, state, n)
    carried = carry(net, carried, np.repeat(np.arange(n), b), np.full(n * b, -1), np.zeros(n * b, np.int64))
    blank_rows = Beams.empty(n, b, plan)
    beams, pool = admit(net, replace(blank_rows, carried=carried), pool, first, lengths, plan, prefixes)
    if recorder is not None:
        recorder.step(first, beams, pool, plan)
    while np.isfinite(beams.score).any():
        cands = expand(net, beams, lengths, plan, prefixes, aligns)
        beams, pool = admit(net, beams, pool, cands, lengths, plan, prefixes)
        if recorder is not None:
            recorder.step(cands, beams, pool, plan)
    return pool, aligns


def expand(net: Network, beams: Beams, lengths: np.ndarray, plan: Plan, prefixes: Prefixes,
           aligns: Alignments) -> Cands:
    """One step: the joint on every expanding hypothesis, its candidates chosen (top of the
    beam, or greedy), and where each goes."""
    n, b = beams.score.shape
    valid = np.isfinite(beams.score)
    grow = valid
    if plan.schedule == "frame":
        tmin = np.where(valid, beams.t, np.iinfo(np.int64).max).min(axis=1)
        grow = valid & (beams.t == tmin[:, None])
    rows = np.flatnonzero(grow.ravel())
    u, s = np.divmod(rows, b)
    tok, dur = net.log_probs(u, beams.t[u, s], select_state(beams.carried[0], rows))
    stay_ok = beams.j[u, s] + 1 < plan.max_symbols
    closed = None
    if plan.schedule == "greedy":
        pick, col = greedy_pick(tok, dur, net, stay_ok), None
        score = beams.score[u, s] + np.take_along_axis(tok, pick[0][:, None], 1)[:, 0]
        if dur is not None:
            score = score + np.take_along_axis(dur, pick[1][:, None], 1)[:, 0]
        cu, cs, ctok, cdi = u, s, pick[0], pick[1]
        label_lp = np.take_along_axis(tok, ctok[:, None], 1)[:, 0]
    else:
        ids = token_cut(tok, plan)  # --> [R, V'] the token ids each row's candidates may use
        sub = tok if ids is None else np.take_along_axis(tok, ids, 1)
        is_blank = (np.arange(tok.shape[1]) == net.blank)[None, :] if ids is None else ids == net.blank
        grid = grid_scores(beams.score[u, s], sub, dur, is_blank, net.durations, stay_ok)
        closed = None if plan.fusion is None else plan.fusion.close(*(h[u, s] for h in beams.lm[:3]))[1:]
        cu, cs, col, score = top_candidates(beams, grow, (rows, u, s), grid, plan, net.blank, closed)
        nd = 1 if dur is None else dur.shape[1]
        ctok, cdi = np.divmod(np.where(col >= 0, col, 0), nd)
        at = np.zeros(n * b, dtype=np.int64)
        at[rows] = np.arange(rows.size)
        if ids is not None:
            ctok = ids[at[cu * b + cs], ctok]
        label_lp = tok[at[cu * b + cs], ctok]  # a waiting hypothesis's (col -1) is not read
        if closed is not None:  # each candidate's source row's (a waiting one's is not read)
            closed = (closed[0][at[cu * b + cs]], closed[1][at[cu * b + cs]])
    return moves(net, beams, plan, prefixes, aligns, (cu, cs, ctok, cdi, col, score, label_lp), closed)


def token_cut(tok: np.ndarray, plan: Plan) -> np.ndarray | None:
    """int64 ``[R, 2 * width + 1]``: each row's most probable tokens, or None (no cut: fewer
    tokens than that, or hotwords, an LM or a lexicon, whose terms can lift or bar any label).
    Lossless: a candidate (k, d) with ``2 * width + 1`` more probable tokens has at least
    ``2 * width`` better candidates of the same duration in its row (only the blank's duration 0
    is ruled out among them), so it is never among the ``2 * width`` an utterance keeps."""
    k = 2 * plan.width + 1
    if any(x is not None for x in (plan.hotwords, plan.fusion, plan.token, plan.lexicon)) or k >= tok.shape[1]:
        return None
    return np.argpartition(-tok, k - 1, axis=1)[:, :k]


def greedy_pick(tok: np.ndarray, dur: np.ndarray | None, net: Network,
                stay_ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The most probable token (lower id on ties) and, for TDT, the most probable duration,
    separately; a blank, or a label that may not stay at its frame, whose best duration is 0
    takes the smallest positive duration instead (the decoders' rule)."""
    best = np.argmax(tok, axis=1)
    if dur is None:
        return best, np.zeros_like(best)
    d = np.argmax(dur, axis=1)
    assert net.durations is not None
    forced = (net.durations[d] == 0) & ((best == net.blank) | ~stay_ok)
    return best, np.where(forced, net.first_move, d)


def top_candidates(beams: Beams, grow: np.ndarray, at: tuple[np.ndarray, np.ndarray, np.ndarray], grid: np.ndarray,
                   plan: Plan, blank: int, closed: tuple[np.ndarray, np.ndarray] | None = None,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each utterance's best ``2 * width`` candidates (every finite one when fewer) by score plus
    hotword bonus and LM terms: ``(u, s, col, score)``; ``col`` -1 is a waiting hypothesis kept as
    it is. ``at``: the expanding rows (flat ``[R]``, and their utterances and slots), ``grid``
    their candidates' scores ``[R, w]``; ``closed``: their unfinished words scored (word LM)."""
    n, b = beams.score.shape
    rows = at[0]
    w = grid.shape[1]
    acoustic = np.full((n * b, w + 1), NEG_INF)
    acoustic[rows, :w] = grid
    wait = (np.isfinite(beams.score) & ~grow).ravel()
    acoustic[wait, w] = beams.score.ravel()[wait]
    rank = acoustic
    terms = bonus_grid(beams, plan, at[1:], w, blank, closed)
    if terms is not None:  # the other rows' label columns are -inf: they stay so
        per_col, own = terms
        rank = acoustic.copy()
        rank[rows, :w] += per_col
        rank[:, w] += own
    flat = rank.reshape(n, b * (w + 1))
    k = min(2 * plan.width, flat.shape[1])
    part = np.argpartition(-flat, k - 1, axis=1)[:, :k] if k < flat.shape[1] else np.broadcast_to(
        np.arange(flat.shape[1]), (n, flat.shape[1]))
    uu, kk = np.nonzero(np.isfinite(np.take_along_axis(flat, part, 1)))
    pos = part[uu, kk]
    s, col = np.divmod(pos, w + 1)
    score = acoustic.reshape(n, -1)[uu, pos]
    return uu, s, np.where(col == w, -1, col), score


def bonus_grid(beams: Beams, plan: Plan, at: tuple[np.ndarray, np.ndarray], w: int, blank: int,
               closed: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The hotword bonus plus the LM terms of the candidates while decoding, -inf for one that
    leaves the lexicon (None without any of them): ``(per_col, own)``, float64 ``[R, w]`` of the
    expanding rows' candidates (utterances and slots ``at``, int ``[R]`` each): those of its labels
    once stepped by the candidate's label (the blank steps nothing), and ``[N * B]`` every
    hypothesis's own (a waiting one's candidate). ``closed``: the rows' unfinished words scored."""
    hw, fusion, token, lex = plan.hotwords, plan.fusion, plan.token, plan.lexicon
    if hw is None and fusion is None and token is None and lex is None:
        return None
    every = np.broadcast_to(plan.terms(beams.hot, beams.lm), beams.score.shape).ravel()  # 0.0: a lexicon alone
    u, s = at
    node, mask, done = (h[u, s][:, None] for h in beams.hot)
    hot, lm = (node, mask, done), tuple(h[u, s][:, None] for h in beams.lm)
    own = every[u * beams.score.shape[1] + s][:, None]  # --> [R, 1]
    if hw is not None:
        vocab = hw.vocab
    elif fusion is not None:
        vocab = fusion.ends.size
    elif lex is not None:
        vocab = lex.ends.size
    else:
        assert token is not None, "a hotword, LM or lexicon term is present (checked above)"
        vocab = token.vocab
    per_label = np.broadcast_to(own, (own.shape[0], vocab))  # --> [R, V]
    labels = np.arange(vocab)[None, :]
    if hw is not None:  # what each label adds
        gain = hw.weight * (hw.count(*hw.step(*hot, labels)) - hw.count(*hot))
        per_label = per_label + np.where(labels == blank, 0.0, gain)
    if fusion is not None:
        assert closed is not None, "the expanding rows' words are closed once, in expand"
        ends, logp = lm[2] > 0, closed[0][:, None]
        gain = np.where(ends, fusion.alpha * logp + fusion.beta, 0.0)  # the word a label ends, scored
        per_label = per_label + np.where(fusion.ends[None, :], gain, 0.0)
    if token is not None:  # each label's LM log-prob (the blank adds nothing)
        next_lp = beams.carried[2][0][u * beams.score.shape[1] + s]
        per_label = per_label + token.alpha * np.where(labels == blank, 0.0, next_lp)
    if lex is not None:  # a label that leaves the lexicon is no candidate
        inside = lex.step(beams.lex[u, s][:, None], np.where(labels == blank, -1, labels)) >= 0
        per_label = np.where(inside, per_label, NEG_INF)
    return np.repeat(per_label, w // vocab, axis=1), every  # grid column = label * Dn + duration


def moves(net: Network, beams: Beams, plan: Plan, prefixes: Prefixes, aligns: Alignments,
          picked: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray,
                        np.ndarray], closed: tuple[np.ndarray, np.ndarray] | None = None) -> Cands:
    """Where each chosen candidate goes: its frame, labels at the frame, label sequence,
    alignment node (with its label's log-prob, the last of ``picked``) and hotword state;
    ``closed``: each candidate's source row's unfinished word scored (None: scored here)."""
    u, s, tok, di, col, score, label_lp = picked
    b = beams.score.shape[1]
    t0, j0 = beams.t[u, s], beams.j[u, s]
    waiting = np.zeros(u.size, dtype=bool) if col is None else col < 0
    is_label = ~waiting & (tok != net.blank)
    step = np.ones_like(t0) if net.durations is None else net.durations[di]
    if net.durations is None:
        forced = j0 + 1 >= plan.max_symbols
        t = np.where(is_label & ~forced, t0, t0 + 1)
        j = np.where(is_label & ~forced, j0 + 1, 0)
    else:
        t = t0 + step
        j = np.where(is_label & (step == 0), j0 + 1, 0)
    t, j = np.where(waiting, t0, t), np.where(waiting, j0, j)
    node, align, lex = beams.node[u, s].copy(), beams.align[u, s].copy(), beams.lex[u, s].copy()
    hot, lm = hot_rows(beams.hot, (u, s)), lm_rows(beams.lm, (u, s))  # copies: advanced indexing
    lab = np.flatnonzero(is_label)
    if lab.size:
        node[lab] = prefixes.child(node[lab], tok[lab])
        align[lab] = aligns.grow(align[lab], tok[lab], t0[lab], step[lab], label_lp[lab])
        if plan.hotwords is not None:
            for h, v in zip(hot, plan.hotwords.step(*hot_rows(hot, lab), tok[lab]), strict=True):
                h[lab] = v
        if plan.fusion is not None:
            done = None if closed is None else (closed[0][lab], closed[1][lab])
            for h, v in zip(lm, plan.fusion.step(*lm_rows(lm, lab), tok[lab], done), strict=True):
                h[lab] = v
        if plan.token is not None:  # the token LM's log-prob of the label, from its source row
            lm[3][lab] += beams.carried[2][0][(u * b + s)[lab], tok[lab]]
        if plan.lexicon is not None:
            lex[lab] = plan.lexicon.step(lex[lab], tok[lab])
    return Cands(u, u * b + s, np.where(is_label, tok, -1), score, node, align, t, j, hot, lm, lex)
