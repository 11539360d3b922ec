"""Which labels may start at a frame: the per-frame token pruning of CTC beam search.

A label *starts* at frame t when an alignment emits it there after a blank or after another label
(a repeat of the same label's run is not a start). The pruning options restrict starts only, so
with the beam wide enough the search returns exactly the CTC probabilities summed over the
alignments whose every start is allowed:

- ``token_top_k``: only the k most probable non-blank labels of the frame (ties to the lower id);
- ``token_min_logp``: only labels whose log-probability at the frame is at least this;
- ``blank_skip_threshold``: no label starts at a frame whose blank probability is above this
  (every hypothesis only stays there: a blank or a repeat of its last label).

Independently of these, each frame's candidates are cut to the ``2 * beam_size`` most probable
allowed labels: lossless, since a slot loses at most ``beam_size - 1`` of them to prefixes already
in the beam and one to its own last label, and every other label scores below the ``beam_size``
left (up to ties between equal scores); with a token LM or a lexicon there is no such cut (an LM
term can lift a less probable label, a lexicon bar a more probable one); with hotwords the cut is
made apart for the labels that start a phrase and for the others (a slot's bonus is one value
within each:
:class:`beamsearch.speech.hotwords.HotTerm`), widened by the most labels that continue any slot's
match, and those labels are added; with a word LM the cut is made apart for the labels that end a
word and for the others (within each, a slot's LM term is one value). A label whose extension of
the utterance's most probable prefix would score below a lower bound of the utterance's
``beam_size``-th best candidate (:func:`beamsearch.speech.ranking.lower_bound`) is left out too:
no extension by it can be kept.
"""

from __future__ import annotations

import math

import numpy as np

from beamsearch.backends import NEG_INF, backend_of


def start_mask(lp: np.ndarray, blank: int, min_logp: float | None, top_k: int | None,
               skip_threshold: float | None) -> np.ndarray | None:
    """bool ``[n, V]``: the labels that may start at this frame (``lp`` float64 ``[n, V]``), or
    None when every non-blank label may (no pruning asked for)."""
    n, vocab = lp.shape
    if min_logp is None and (top_k is None or top_k >= vocab - 1) and skip_threshold is None:
        return None
    allowed = np.ones((n, vocab), dtype=bool)
    allowed[:, blank] = False
    if top_k is not None and top_k < vocab - 1:
        masked = lp.copy()
        masked[:, blank] = NEG_INF
        idx, _ = backend_of(masked).topk_stable(masked, top_k)
        keep = np.zeros_like(allowed)
        keep[np.arange(n)[:, None], idx] = True
        allowed &= keep
    if min_logp is not None:
        allowed &= lp >= min_logp
    if skip_threshold is not None:
        skip = lp[:, blank] > (math.log(skip_threshold) if skip_threshold > 0 else NEG_INF)
        allowed[skip] = False
    return allowed


def startable(lp: np.ndarray, blank: int, allowed: np.ndarray | None) -> np.ndarray:
    """float64 ``[n, V]``: ``lp`` with -inf for the blank and every label that may not start."""
    masked = lp.copy() if allowed is None else np.where(allowed, lp, NEG_INF)
    masked[:, blank] = NEG_INF
    return masked


def most_probable(masked: np.ndarray, classes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's most probable startable label (the lower id on ties) and its log-prob, ``[n, 1]``;
    with ``classes`` (int or bool ``[V]`` or ``[n, V]``), that of each class, ``[n, C]``."""
    if classes is None:
        best = np.argmax(masked, axis=1)[:, None]
        return best, np.take_along_axis(masked, best, 1)
    groups = [np.where(classes == c, masked, NEG_INF) for c in np.unique(classes).tolist()]
    best = np.stack([np.argmax(g, axis=1) for g in groups], 1)
    return best, np.stack([np.take_along_axis(g, best[:, i : i + 1], 1)[:, 0] for i, g in enumerate(groups)], 1)


def candidates(masked: np.ndarray, beam_size: int, floor: np.ndarray, split: np.ndarray | None = None,
               end_floor: np.ndarray | None = None, also: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_candidates`, or with ``split`` (bool ``[V]``: the labels that end a word, whose
    LM term differs from the others') the ``2 * beam_size`` best of each side, merged most probable
    first (ties to the lower id): within a side a slot's term is one value, so the cut is lossless.
    ``end_floor`` (float64 ``[n]``; None: ``floor``) is the floor of the labels in ``split``."""
    if split is None:
        return top_candidates(masked, beam_size, floor)
    if split.ndim == 2 or also is not None:
        return class_candidates(masked, beam_size, floor, split, end_floor, also)
    a_tok, a_lp = top_candidates(np.where(split, NEG_INF, masked), beam_size, floor)
    b_tok, b_lp = top_candidates(np.where(split, masked, NEG_INF), beam_size, floor if end_floor is None else end_floor)
    tok, val = np.concatenate([a_tok, b_tok], 1), np.concatenate([a_lp, b_lp], 1)
    order = np.lexsort((tok, -val), axis=1)
    width = int((val > NEG_INF).sum(1).max(initial=0))
    return np.take_along_axis(tok, order, 1)[:, :width], np.take_along_axis(val, order, 1)[:, :width]


def class_candidates(masked: np.ndarray, beam_size: int, floor: np.ndarray, classes: np.ndarray,
                     end_floor: np.ndarray | None, also: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`candidates` with ``classes`` int ``[V]`` or ``[n, V]`` (a slot's further term is one
    value within a class; odd classes end a word and take ``end_floor``): the ``2 * beam_size``
    best of each class, and every label of ``also`` (bool ``[n, V]``; None: none), as one set,
    most probable first (ties to the lower id)."""
    n = masked.shape[0]
    keep = np.zeros(masked.shape, dtype=bool) if also is None else also.copy()
    row = np.arange(n)[:, None]
    for c in np.unique(classes).tolist():
        fl = end_floor if c % 2 and end_floor is not None else floor
        tok, val = top_candidates(np.where(classes == c, masked, NEG_INF), beam_size, fl)
        keep[np.broadcast_to(row, tok.shape)[val > NEG_INF], tok[val > NEG_INF]] = True
    return top_candidates(np.where(keep, masked, NEG_INF), masked.shape[1], np.full(n, NEG_INF))


def top_candidates(masked: np.ndarray, beam_size: int, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The labels each utterance's hypotheses are extended by at this frame: ``(tok, tok_lp)``,
    int64 and float64 ``[n, M]``, most probable first (ties to the lower id), -inf log-prob for
    padding. ``masked`` is :func:`startable`'s; ``M`` is at most ``2 * beam_size``; a label below
    ``floor`` (float64 ``[n]``) is left out: no extension by it can be among the best (the
    caller's bound)."""
    n = masked.shape[0]
    keep = (masked >= floor[:, None]) & (masked > NEG_INF)  # --> [n, V]
    rows, cols = np.nonzero(keep)  # row by row, ids ascending
    count = np.bincount(rows, minlength=n)
    packed_width = int(count.max(initial=0))
    if packed_width == 0:
        return np.zeros((n, 0), np.int64), np.zeros((n, 0))
    pos = np.arange(rows.size) - (np.cumsum(count) - count)[rows]
    tok = np.zeros((n, packed_width), dtype=np.int64)
    val = np.full((n, packed_width), NEG_INF)
    tok[rows, pos], val[rows, pos] = cols, masked[rows, cols]
    order, top = backend_of(val).topk_stable(val, min(packed_width, 2 * beam_size))  # ties: lower position, lower id
    return np.take_along_axis(tok, order, 1), top
