"""The best alignment of given label sequences (Viterbi on the CTC trellis) and the frames of
each label on it, for many sequences at once.

The trellis of labels ``y_1 .. y_L`` has ``S = 2L + 1`` states: blanks at even positions, label
``y_i`` at position ``2i - 1``. From state ``s`` an alignment moves to ``s``, ``s + 1``, or
``s + 2`` when that skips a blank between two different labels; it starts in state 0 or 1 and ends
in state ``S - 1`` or ``S - 2`` (the blank when the two tie). Among equal-scoring predecessors
the one that stays is preferred, then ``s - 1``: on ties the backtrace from the last frame keeps
its state as long as it can, so each transition is as early as the ties allow.
"""

from __future__ import annotations

import numpy as np

from beamsearch.backends import NEG_INF


def label_frames(lp: np.ndarray, utt: np.ndarray, lengths: np.ndarray, labels: list[list[int]],
                 blank: int) -> list[np.ndarray]:
    """For each sequence, int64 ``[L, 2]``: the first and last frame (0-based, inclusive) of each
    label on the sequence's best alignment.

    ``lp`` float ``[N, T, V]``: the utterances' frame log-probs, ``T >= 1``; ``utt`` int ``[R]``:
    each sequence's utterance; ``lengths`` int ``[R]``: its number of frames; ``labels``: R label
    sequences. A sequence with no alignment of finite log-probability gets frames -1."""
    r_count, frames = utt.shape[0], lp.shape[1]
    if r_count == 0:
        return []
    size = max(len(seq) for seq in labels)
    states = 2 * size + 1
    ext = np.full((r_count, states), blank, dtype=np.int64)  # --> [R, S]: blank, y1, blank, y2, ...
    n_states = np.array([2 * len(seq) + 1 for seq in labels])
    for r, seq in enumerate(labels):
        ext[r, 1 : 2 * len(seq) : 2] = seq
    inside = np.arange(states)[None, :] < n_states[:, None]  # --> [R, S]
    emit = lp[utt[:, None, None], np.arange(frames)[None, :, None], ext[:, None, :]]  # --> [R, T, S]
    emit = np.where(inside[:, None, :], emit.astype(np.float64), NEG_INF)  # --> [R, T, S]
    skip = np.zeros((r_count, states), dtype=bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    back = viterbi(emit, lengths, skip)
    return frames_of(back, emit, lengths, n_states)


def viterbi(emit: np.ndarray, lengths: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Forward max pass: ``(back, alpha)``, int8 ``[T, R, S]`` (0 stay, 1 from s-1, 2 from s-2) and
    float64 ``[R, S]`` the scores at each sequence's last frame."""
    r_count, frames, states = emit.shape
    alpha = np.full((r_count, states), NEG_INF)
    alpha[:, :2] = emit[:, 0, :2]
    back = np.zeros((frames, r_count, states), dtype=np.int8)
    for t in range(1, frames):
        prev1 = np.full_like(alpha, NEG_INF)
        prev1[:, 1:] = alpha[:, :-1]
        prev2 = np.full_like(alpha, NEG_INF)
        prev2[:, 2:] = np.where(skip[:, 2:], alpha[:, :-2], NEG_INF)
        stacked = np.stack([alpha, prev1, prev2])  # --> [3, R, S]
        choice = np.argmax(stacked, 0)  # the first maximum: stay, then s-1, then s-2
        step = np.take_along_axis(stacked, choice[None], 0)[0] + emit[:, t]
        live = (t < lengths)[:, None]
        alpha = np.where(live, step, alpha)
        back[t] = np.where(live, choice, 0)
    return back, alpha


def frames_of(viterbi_out: tuple[np.ndarray, np.ndarray], emit: np.ndarray, lengths: np.ndarray,
              n_states: np.ndarray) -> list[np.ndarray]:
    """Backtrack every sequence's best path and read each label's first and last frame."""
    back, alpha = viterbi_out
    r_count, frames, states = emit.shape
    rows = np.arange(r_count)
    end_blank, end_label = n_states - 1, np.maximum(n_states - 2, 0)
    a_blank, a_label = alpha[rows, end_blank], alpha[rows, end_label]
    state = np.where((a_label > a_blank) & (n_states > 1), end_label, end_blank)
    path = np.zeros((r_count, frames), dtype=np.int64)
    for t in range(frames - 1, -1, -1):
        path[:, t] = state
        state = state - back[t, rows, state]
    labels = (n_states - 1) // 2
    first = np.full((r_count, max(int(labels.max()), 1)), frames, dtype=np.int64)
    last = np.full_like(first, -1)
    valid = (path % 2 == 1) & (np.arange(frames)[None, :] < lengths[:, None])
    rr, tt = np.nonzero(valid)
    pos = (path[rr, tt] - 1) // 2
    np.minimum.at(first, (rr, pos), tt)
    np.maximum.at(last, (rr, pos), tt)
    found = np.maximum(a_blank, a_label) > NEG_INF
    out = []
    for r in range(r_count):
        pair = np.stack([first[r, : labels[r]], last[r, : labels[r]]], 1)
        out.append(pair if found[r] else np.full_like(pair, -1))
    return out


def run_confidence(lp: np.ndarray, labels: list[int], frames: np.ndarray) -> np.ndarray:
    """float64 ``[L]``: per label, the least probability of it at the frames of its run on the
    best alignment (``frames`` int ``[L, 2]``, first and last, inclusive), the blank frames left
    out; ``lp`` float ``[T, V]``: the utterance's log-probs. NaN where a label has no frames."""
    if not labels:
        return np.zeros(0)
    if (frames < 0).any():
        return np.full(len(labels), np.nan)
    sizes = frames[:, 1] - frames[:, 0] + 1  # --> [L]
    starts = np.cumsum(sizes) - sizes
    t = np.repeat(frames[:, 0], sizes) + np.arange(int(sizes.sum())) - np.repeat(starts, sizes)
    p = np.exp(lp[t, np.repeat(np.asarray(labels, dtype=np.int64), sizes)].astype(np.float64))
    return np.minimum.reduceat(p, starts)
