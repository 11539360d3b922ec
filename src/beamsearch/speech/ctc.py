"""CTC prefix beam search over a batch of utterances (docs/speech.md).

The frame loop (:func:`search`) runs every utterance's hypotheses of a frame as arrays
(:mod:`beamsearch.speech.prefix`); Python objects are built once, for the results.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from beamsearch.backends import backend_of
from beamsearch.speech.align import label_frames
from beamsearch.speech.checks import CTCOptions, ctc_options, emissions_shape, lengths_of
from beamsearch.speech.fusion import WordFusion
from beamsearch.speech.hotwords import Hotwords, hotwords_of
from beamsearch.speech.prefix import Beams, History, advance
from beamsearch.speech.results import CTCHypothesis, Word
from beamsearch.speech.tokenlm import TokenFusion, TokenLM
from beamsearch.speech.tokens import start_mask


def ctc_beam_search(emissions: Any, lengths: Any = None, *, blank: int, beam_size: int, n_best: int = 1,
                    token_min_logp: float | None = None, token_top_k: int | None = None,
                    beam_threshold: float | None = None, blank_skip_threshold: float | None = None,
                    vocabulary: Any = None, frame_duration: float | None = None, hotwords: Any = None,
                    hotword_weight: float = 10.0, lm: Any = None, alpha: float = 0.5,
                    beta: float = 1.0) -> list[list[CTCHypothesis]]:
    """CTC prefix beam search: the most probable label sequences of each utterance.

    A label sequence's probability is summed over all its alignments (identical prefixes reached
    by different alignments are merged by log-add, never max). With no pruning option and
    ``beam_size`` at least the number of distinct prefixes, the result is exact.

    Args:
        emissions: float ``[N, T, V]`` (numpy or torch, any device): per frame log-probabilities
            or logits; each frame is normalized with a log-softmax over V.
        lengths: int ``[N]``, each utterance's number of frames in ``[0, T]``; None: all T.
        blank: the blank label's id.
        beam_size: prefixes kept per utterance after each frame.
        n_best: hypotheses returned per utterance (at most ``beam_size``).
        token_min_logp: only labels with at least this log-probability at a frame start there.
        token_top_k: only the k most probable non-blank labels of a frame start there.
        beam_threshold: drop prefixes more than this below their utterance's best after a frame.
        blank_skip_threshold: no label starts at a frame whose blank probability exceeds this.
        vocabulary: a :class:`~beamsearch.speech.Vocabulary` or V token strings: the results
            then have ``text`` and ``words``.
        frame_duration: seconds per frame (e.g. 0.02): words then have times in seconds.
        hotwords: phrases to favour, each a sequence of label ids (or, with a character
            ``vocabulary``, a string): one list for the whole batch, or one list per utterance.
        hotword_weight: the bonus (>= 0, in natural-log units) per label position inside a
            phrase (docs/speech.md states the rule); a hypothesis's score is its acoustic score
            plus its bonus, and the results are ranked by that.
        lm: a word n-gram LM (:class:`~beamsearch.speech.NgramLM`, or an ARPA file's path; needs
            ``vocabulary``), each word scored when it ends; or a token-level
            :class:`~beamsearch.speech.TokenLM` (a step function) scoring every label
            (docs/speech.md, "Language models").
        alpha: the LM weight (>= 0): ``alpha`` x the natural-log LM probability adds to the score.
        beta: the word bonus: ``beta`` x the number of words adds to the score (word LMs only).

    Returns:
        per utterance, up to ``n_best`` :class:`~beamsearch.speech.CTCHypothesis`, best first
        (fewer when fewer label sequences have a finite probability).
    """
    emissions, (n, frames, vocab) = emissions_shape(emissions)
    opts = ctc_options(vocab, blank, beam_size, n_best, token_min_logp, token_top_k, beam_threshold,
                       blank_skip_threshold, vocabulary, frame_duration)
    lens = lengths_of(lengths, n, frames)
    hw = hotwords_of(hotwords, hotword_weight, n, vocab, opts.blank, opts.vocabulary)
    token = None
    if isinstance(lm, TokenLM):
        fusion = WordFusion.of(None, alpha, beta, opts.vocabulary, opts.blank)  # checks alpha and beta
        token = TokenFusion(lm, float(alpha), opts.blank, vocab)
    else:
        fusion = WordFusion.of(lm, alpha, beta, opts.vocabulary, opts.blank)
    lp = normalized(emissions, lens)
    beams, history = search(lp, lens, opts, hw, fusion, token)
    return results(lp, lens, beams, history, opts, hw, fusion, token)


def normalized(emissions: Any, lengths: np.ndarray) -> np.ndarray:
    """``[N, T, V]`` log-softmax of each frame, on the emissions' device, then on the host (float32
    stays float32, other floats float32, integers float64); a frame within its utterance's length
    with NaN, +inf or no finite entry is a ValueError."""
    backend = backend_of(emissions)
    x = backend.compute(emissions)
    shape = tuple(x.shape)
    flat = x.reshape(-1, shape[2]) if shape[0] * shape[1] else x.reshape(0, shape[2])
    lp = backend.to_numpy(backend.log_softmax(flat)).reshape(shape)  # a new array: the caller's is not written
    bad = np.isnan(lp[:, :, 0]) & (np.arange(shape[1])[None, :] < lengths[:, None])  # a bad frame is all NaN
    if bad.any():
        i, t = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"emissions[{i}, {t}] must hold no NaN or +inf and at least one finite entry; "
                         f"got {backend.to_numpy(x[i, t])[:8]!r}{' ...' if shape[2] > 8 else ''}")
    return lp


def search(lp: np.ndarray, lengths: np.ndarray, opts: CTCOptions, hw: Hotwords | None = None,
           fusion: WordFusion | None = None, token: TokenFusion | None = None) -> tuple[Beams, History]:
    """The frame loop: every live utterance advanced one frame at a time (an utterance stops at
    its length). Returns the final beams ``[N, B]`` and the history of their prefixes."""
    n, longest = lp.shape[0], int(lengths.max(initial=0))
    width = min(opts.beam_size, prefix_count(longest, lp.shape[2] - 1, opts.beam_size))
    beams, history = Beams.start(n, width, None if hw is None else hw.starts, fusion, token), History()
    for t in range(longest):
        live = lengths > t
        rows = None if live.all() else np.flatnonzero(live)
        part = beams if rows is None else beams.rows(rows)
        frame = (lp[:, t] if rows is None else lp[rows, t]).astype(np.float64)  # --> [n, V]
        allowed = start_mask(frame, opts.blank, opts.token_min_logp, opts.token_top_k, opts.blank_skip_threshold)
        part, (src, grown, label) = advance(part, frame, opts.blank, allowed, history, opts.beam_threshold, hw,
                                            fusion, token)
        if token is not None:  # the token LM steps the grown prefixes, all at once
            idx = np.arange(n) if rows is None else rows
            part = replace(part, next_lp=token.update(idx, width, src, grown, label, part.next_lp))
        beams = part if rows is None else beams.put(rows, part)
    return beams, history


def prefix_count(frames: int, labels: int, cap: int) -> int:
    """How many label sequences of at most ``frames`` labels over ``labels`` labels exist (every
    prefix a search of that many frames can hold), counted up to ``cap``: a wider beam than this
    prunes nothing, so the slots are never more."""
    total, power = 1, 1
    for _ in range(frames):
        if total >= cap or labels == 0:
            break
        power *= labels
        total += power
    return min(total, cap)


def results(lp: np.ndarray, lengths: np.ndarray, beams: Beams, history: History,
            opts: CTCOptions, hw: Hotwords | None = None,
            fusion: WordFusion | None = None, token: TokenFusion | None = None) -> list[list[CTCHypothesis]]:
    """Up to n_best hypotheses per utterance, best first, with their frames and words; ranked
    by acoustic score plus final hotword bonus (an unfinished match earns nothing) plus the LM
    terms with the last word and ``</s>`` scored."""
    acoustic = beams.score()  # --> [N, B]
    bonus = np.zeros_like(acoustic) if hw is None else hw.weight * beams.hot_done
    lm_term, word_term = np.zeros_like(acoustic), np.zeros_like(acoustic)
    if fusion is not None:
        lm, words = fusion.finish(*beams.lm_state())
        lm_term, word_term = fusion.alpha * lm, fusion.beta * words
    if token is not None:
        lm_term = token.alpha * token.finish(beams.tok_lm, beams.next_lp)
    scores = acoustic + bonus + lm_term + word_term
    order = np.argsort(-scores, axis=1, kind="stable")[:, : opts.n_best]
    utt, slot = np.nonzero(np.take_along_axis(scores, order, 1) > -np.inf)
    slot = order[utt, slot]
    labels = history.sequences(beams.node[utt, slot])
    if lp.shape[1]:
        frames = label_frames(lp, utt, lengths[utt], labels, opts.blank)
    else:
        frames = [np.zeros((0, 2), np.int64) for _ in labels]
    out: list[list[CTCHypothesis]] = [[] for _ in range(lp.shape[0])]
    for i, (u, s) in enumerate(zip(utt.tolist(), slot.tolist())):
        text, words = None, None
        if opts.vocabulary is not None:
            words = words_of(opts, labels[i], frames[i])
            text = " ".join(w.text for w in words)
        out[u].append(CTCHypothesis(labels[i], float(scores[u, s]), float(acoustic[u, s]), frames[i], text, words,
                                    float(bonus[u, s]), float(lm_term[u, s]), float(word_term[u, s])))
    return out


def words_of(opts: CTCOptions, labels: list[int], frames: np.ndarray) -> list[Word]:
    """The words of one hypothesis with their frames (and seconds given a frame duration)."""
    assert opts.vocabulary is not None
    out = []
    for text, first, last in opts.vocabulary.words(labels, opts.blank):
        start, end = int(frames[first, 0]), int(frames[last, 1])
        d = opts.frame_duration
        out.append(Word(text, start, end, None if d is None else start * d, None if d is None else (end + 1) * d))
    return out
