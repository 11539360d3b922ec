"""CTC greedy decoding: the best path (docs/speech.md, "Greedy decoding").

``ctc_greedy(emissions [N, T, V], lengths [N], *, blank)`` takes the most probable label of each
frame, merges repeated labels and drops the blanks, as every CTC toolkit's greedy decoder does;
every utterance of the batch at once, as arrays. Its hypotheses are those of
:func:`~beamsearch.speech.ctc_beam_search` (text, words with times and confidence) for the one
alignment it takes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from beamsearch.speech.checks import ctc_options, emissions_shape, lengths_of
from beamsearch.speech.ctc import normalized, words_of
from beamsearch.speech.results import CTCHypothesis

__all__ = ["ctc_greedy"]


def ctc_greedy(emissions: Any, lengths: Any = None, *, blank: int, vocabulary: Any = None,
               frame_duration: float | None = None) -> list[CTCHypothesis]:
    """Best-path CTC decoding: per utterance, the labels of its most probable alignment.

    At each frame the most probable label is taken (on ties, the lowest label id: the first
    maximum, as numpy's and torch's ``argmax``); runs of the same label are merged into one and
    the blanks dropped (``a a _ a b b`` -> ``a a b``). The result is the single most probable
    alignment's labels, not the most probable label sequence (which sums over alignments: the
    prefix beam search's aim).

    Args:
        emissions: float ``[N, T, V]`` (numpy or torch, any device): per frame log-probabilities
            or logits; each frame is normalized with a log-softmax over V.
        lengths: int ``[N]``, each utterance's number of frames in ``[0, T]``; None: all T.
        blank: the blank label's id.
        vocabulary: a :class:`~beamsearch.speech.Vocabulary` or V token strings: the results
            then have ``text`` and ``words``.
        frame_duration: seconds per frame: words then have times in seconds.

    Returns:
        one :class:`~beamsearch.speech.CTCHypothesis` per utterance: ``tokens`` the collapsed
        labels; ``score`` = ``acoustic_score`` the natural-log probability of the best path (the
        sum over the frames of each one's largest log-probability: the one alignment kept);
        ``token_frames`` int64 ``[L, 2]`` the first and last frame of each label's run on it;
        ``words`` with their frames, times and confidence as the beam search gives them.
    """
    emissions, (n, frames, vocab) = emissions_shape(emissions)
    opts = ctc_options(vocab, blank, 1, 1, None, None, None, None, vocabulary, frame_duration)
    lens = lengths_of(lengths, n, frames)
    lp = normalized(emissions, lens)  # --> [N, T, V]
    inside = np.arange(frames)[None, :] < lens[:, None]  # --> [N, T]
    best = np.where(inside, lp.argmax(axis=2) if frames else np.zeros((n, 0), np.int64), -1)  # -1: past the end
    best_lp = np.take_along_axis(lp, np.maximum(best, 0)[:, :, None], 2)[:, :, 0]
    score = np.where(inside, best_lp.astype(np.float64), 0.0).sum(axis=1)  # --> [N]
    before = np.concatenate([np.full((n, 1), -1), best[:, :-1]], axis=1)  # the label of the frame before
    after = np.concatenate([best[:, 1:], np.full((n, 1), -1)], axis=1)
    label = inside & (best != opts.blank)
    first, last = label & (best != before), label & (best != after)  # a run's first and last frame
    rows, starts = np.nonzero(first)  # --> [R] each, row by row, frame by frame
    ends = np.nonzero(last)[1]
    cuts = np.searchsorted(rows, np.arange(n + 1))
    out = []
    for u in range(n):
        a, b = cuts[u], cuts[u + 1]
        tokens = best[u, starts[a:b]].tolist()
        spans = np.stack([starts[a:b], ends[a:b]], axis=1).astype(np.int64)  # --> [L, 2]
        words = None if opts.vocabulary is None else words_of(opts, tokens, spans, lp[u])
        text = None if words is None else " ".join(w.text for w in words)
        out.append(CTCHypothesis(tokens, float(score[u]), float(score[u]), spans, text, words))
    return out
