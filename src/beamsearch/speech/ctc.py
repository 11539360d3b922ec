"""CTC prefix beam search over a batch of utterances (docs/speech.md).

The frame loop (:func:`search`) runs every utterance's hypotheses of a frame as arrays
(:mod:`beamsearch.speech.prefix`); Python objects are built once, for the results.
:class:`CTCStream` holds the beams between chunks of frames; :func:`ctc_beam_search` is one
stream fed every frame in one chunk.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, backend_of
from beamsearch.core import validate
from beamsearch.speech.align import label_frames, run_confidence
from beamsearch.speech.checks import CTCOptions, ctc_options, emissions_shape, lengths_of
from beamsearch.speech.fusion import WordFusion
from beamsearch.speech.hotwords import Hotwords, hotwords_of
from beamsearch.speech.lexicon import Lexicon
from beamsearch.speech.prefix import Beams, History, advance
from beamsearch.speech.results import CTCHypothesis, Word
from beamsearch.speech.tokenlm import TokenFusion, TokenLM
from beamsearch.speech.tokens import start_mask
from beamsearch.speech.trace import CTCTrace

Scorers = tuple[Hotwords | None, WordFusion | None, TokenFusion | None, Lexicon | None]
"""What adds to a hypothesis's score beside the acoustic one: hotwords, a word LM, a token LM, a lexicon."""


def ctc_beam_search(emissions: Any, lengths: Any = None, *, blank: int, beam_size: int, n_best: int = 1,
                    token_min_logp: float | None = None, token_top_k: int | None = None,
                    beam_threshold: float | None = None, blank_skip_threshold: float | None = None,
                    vocabulary: Any = None, frame_duration: float | None = None, hotwords: Any = None,
                    hotword_weight: float = 10.0, lm: Any = None, alpha: float = 0.5,
                    beta: float = 1.0, unk_score_offset: float | None = None, lexicon: Any = None,
                    trace: CTCTrace | None = None) -> list[list[CTCHypothesis]]:
    """CTC prefix beam search: the most probable label sequences of each utterance.

    A label sequence's probability is summed over all its alignments (identical prefixes reached
    by different alignments are merged by log-add, never max). With no pruning option and
    ``beam_size`` at least the number of distinct prefixes, the result is exact. This is one
    :class:`CTCStream` fed every frame as one chunk.

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
        unk_score_offset: with a word n-gram LM, a finite number (natural log, usually < 0) added
            to the LM log-probability of every completed word not in the LM's vocabulary, on top
            of the LM's ``<unk>`` probability; so, as pyctcdecode's ``unk_score_offset``, it is
            weighted by ``alpha`` and counted in ``lm_score`` (pyctcdecode's is in log10 units:
            theirs x ln 10 is ours). None: no offset (a word LM alone; with no LM or a token LM,
            giving one is a ValueError).
        lexicon: the words hypotheses may spell (strings without spaces, or a compiled
            :class:`~beamsearch.speech.Lexicon`; needs ``vocabulary``): every completed word must
            be one of them and the word being spelled a prefix of one; at the end, a hypothesis
            whose last word is not a whole word is not returned (docs/speech.md, "Lexicon").
            None: any label sequence.
        trace: a new :class:`~beamsearch.speech.trace.CTCTrace`, filled with the prefixes after
            each frame (docs/speech.md, "The search picture"); None: nothing is recorded.

    Returns:
        per utterance, up to ``n_best`` :class:`~beamsearch.speech.CTCHypothesis`, best first
        (fewer when fewer label sequences have a finite probability).
    """
    emissions, (n, frames, vocab) = emissions_shape(emissions)
    stream = CTCStream(n, vocab, blank=blank, beam_size=beam_size, n_best=n_best, token_min_logp=token_min_logp,
                       token_top_k=token_top_k, beam_threshold=beam_threshold,
                       blank_skip_threshold=blank_skip_threshold, vocabulary=vocabulary,
                       frame_duration=frame_duration, hotwords=hotwords, hotword_weight=hotword_weight, lm=lm,
                       alpha=alpha, beta=beta, unk_score_offset=unk_score_offset, lexicon=lexicon,
                       max_frames=frames, trace=trace)
    stream.feed(emissions, lengths, partial=False)
    return stream.finish()


class CTCStream:
    """CTC prefix beam search fed frames a chunk at a time (docs/speech.md, "Streaming").

    ``CTCStream(N, V, blank=..., beam_size=..., ...)`` takes every keyword of
    :func:`ctc_beam_search`; :meth:`feed` advances every utterance by its frames of a chunk and
    returns the hypotheses of the frames so far; :meth:`finish` returns the final ones. The frame
    step is the one :func:`ctc_beam_search` runs (it is this object fed one chunk), so fed a
    whole utterance in chunks of any sizes, the results equal decoding it at once, and the
    hypotheses after each chunk equal decoding the frames so far at once.

    Args:
        batch_size: N, the utterances decoded side by side.
        vocab_size: V, the labels of every frame.
        max_frames: an upper bound on any utterance's frames, if known: a beam wider than the
            prefixes that many frames can hold is narrowed (the same results, cheaper); feeding
            more is a ValueError. None: no bound.
        others: as :func:`ctc_beam_search`'s.
    """

    def __init__(self, batch_size: int, vocab_size: int, *, blank: int, beam_size: int, n_best: int = 1,
                 token_min_logp: float | None = None, token_top_k: int | None = None,
                 beam_threshold: float | None = None, blank_skip_threshold: float | None = None,
                 vocabulary: Any = None, frame_duration: float | None = None, hotwords: Any = None,
                 hotword_weight: float = 10.0, lm: Any = None, alpha: float = 0.5, beta: float = 1.0,
                 unk_score_offset: float | None = None, lexicon: Any = None, max_frames: int | None = None,
                 trace: CTCTrace | None = None) -> None:
        n, vocab = validate.at_least("batch_size", batch_size, 0), validate.at_least("vocab_size", vocab_size, 1)
        opts = ctc_options(vocab, blank, beam_size, n_best, token_min_logp, token_top_k, beam_threshold,
                           blank_skip_threshold, vocabulary, frame_duration)
        self.max_frames = None if max_frames is None else validate.at_least("max_frames", max_frames, 0)
        self.opts, self.shape = opts, (n, vocab)
        self.hw = hotwords_of(hotwords, hotword_weight, n, vocab, opts.blank, opts.vocabulary)
        self.lex = Lexicon.of(lexicon, opts.vocabulary, opts.blank)
        self.token = None
        if isinstance(lm, TokenLM):
            # checks alpha, beta and unk_score_offset
            self.fusion = WordFusion.of(None, alpha, beta, opts.vocabulary, opts.blank, unk_score_offset)
            self.token = TokenFusion(lm, float(alpha), opts.blank, vocab)
        else:
            self.fusion = WordFusion.of(lm, alpha, beta, opts.vocabulary, opts.blank, unk_score_offset)
        width = opts.beam_size if self.max_frames is None else min(
            opts.beam_size, prefix_count(self.max_frames, vocab - 1, opts.beam_size))
        self.beams = Beams.start(n, width, None if self.hw is None else self.hw.starts, self.fusion, self.token)
        self.history, self.frames = History(), np.zeros(n, dtype=np.int64)
        self.chunks: list[tuple[np.ndarray, np.ndarray]] | None = []
        if trace is not None and not isinstance(trace, CTCTrace):
            raise TypeError(f"trace must be a CTCTrace or None; got {trace!r:.80}")
        self.trace = trace
        if trace is not None:
            trace.begin(n, opts.blank, opts.vocabulary,
                        scored=any(x is not None for x in (self.hw, self.fusion, self.token, self.lex)))

    def feed(self, emissions: Any, lengths: Any = None, *, partial: bool = True) -> list[list[CTCHypothesis]] | None:
        """Advance every utterance by its frames of this chunk.

        Args:
            emissions: float ``[N, t, V]`` (numpy or torch): the chunk's log-probabilities or logits.
            lengths: int ``[N]``, each utterance's frames in this chunk (in ``[0, t]``; 0 for one
                that has ended or has none yet); None: all ``t``.
            partial: return the hypotheses of the frames so far (as :func:`ctc_beam_search` of
                them; a Viterbi pass over all of them for the timestamps); False: return None.
        """
        if self.chunks is None:
            raise RuntimeError("this CTCStream is finished: start a new one for new utterances")
        emissions, (n, frames, vocab) = emissions_shape(emissions)
        if (n, vocab) != self.shape:
            raise ValueError(f"emissions must be [N={self.shape[0]}, t, V={self.shape[1]}]; "
                             f"got shape {(n, frames, vocab)}")
        lens = lengths_of(lengths, n, frames)
        over = np.flatnonzero(self.frames + lens > (np.inf if self.max_frames is None else self.max_frames))
        if over.size:
            raise ValueError(f"utterance {over[0]} would have {int(self.frames[over[0]] + lens[over[0]])} frames, "
                             f"more than max_frames={self.max_frames}")
        lp = normalized(emissions, lens)
        self.beams = search(self.beams, lp, lens, self.opts, self.history, (self.hw, self.fusion, self.token, self.lex),
                            self.trace)
        self.chunks.append((lp, lens))
        self.frames = self.frames + lens
        return self.hypotheses() if partial else None

    def hypotheses(self) -> list[list[CTCHypothesis]]:
        """The hypotheses of the frames fed so far, as :func:`ctc_beam_search` of them returns."""
        if self.chunks is None:
            raise RuntimeError("this CTCStream is finished: start a new one for new utterances")
        return results(frames_fed(self.chunks, self.frames, self.shape), self.frames, self.beams, self.history,
                       self.opts, (self.hw, self.fusion, self.token, self.lex))

    def finish(self) -> list[list[CTCHypothesis]]:
        """The final hypotheses (per utterance, up to ``n_best``, best first); the stream then
        takes no more frames and lets go of them."""
        out = self.hypotheses()
        self.chunks = None
        if self.trace is not None:
            self.trace.finish(out)
        return out


def frames_fed(chunks: list[tuple[np.ndarray, np.ndarray]], frames: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """float ``[N, max(frames), V]``: each utterance's frames of every chunk, one after another."""
    if len(chunks) == 1:
        return chunks[0][0]
    dtype = np.result_type(*(lp.dtype for lp, _ in chunks)) if chunks else np.float32
    out = np.zeros((shape[0], int(frames.max(initial=0)), shape[1]), dtype=dtype)
    offset = np.zeros(shape[0], dtype=np.int64)
    for lp, lens in chunks:
        rows, cols = np.nonzero(np.arange(lp.shape[1])[None, :] < lens[:, None])
        out[rows, offset[rows] + cols] = lp[rows, cols]
        offset = offset + lens
    return out


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


def search(beams: Beams, lp: np.ndarray, lengths: np.ndarray, opts: CTCOptions, history: History,
           scorers: Scorers = (None, None, None, None), recorder: CTCTrace | None = None) -> Beams:
    """The frame loop: every live utterance advanced one frame at a time from ``beams`` (an
    utterance stops at its length in this chunk, ``lp`` ``[N, t, V]``). Returns the beams after it.
    ``recorder``: a :class:`~beamsearch.speech.trace.CTCTrace` told each frame's beams (None: none)."""
    hw, fusion, token, lex = scorers
    n, width = beams.last.shape
    for t in range(int(lengths.max(initial=0))):
        live = lengths > t
        rows = None if live.all() else np.flatnonzero(live)
        part = beams if rows is None else beams.rows(rows)
        frame = (lp[:, t] if rows is None else lp[rows, t]).astype(np.float64)  # --> [n, V]
        allowed = start_mask(frame, opts.blank, opts.token_min_logp, opts.token_top_k, opts.blank_skip_threshold)
        before = part
        part, (src, grown, label) = advance(part, frame, opts.blank, allowed, history, opts.beam_threshold, hw,
                                            fusion, token, lex)
        if recorder is not None:
            recorder.frame(np.arange(n) if rows is None else rows, before, part, frame, allowed, src, grown)
        if token is not None:  # the token LM steps the grown prefixes, all at once
            idx = np.arange(n) if rows is None else rows
            part = replace(part, next_lp=token.update(idx, width, src, grown, label, part.next_lp))
        beams = part if rows is None else beams.put(rows, part)
    return beams


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
            opts: CTCOptions, scorers: Scorers = (None, None, None, None)) -> list[list[CTCHypothesis]]:
    """Up to n_best hypotheses per utterance, best first, with their frames and words; ranked
    by acoustic score plus final hotword bonus (an unfinished match earns nothing) plus the LM
    terms with the last word and ``</s>`` scored; with a lexicon, only those whose last word is
    whole."""
    hw, fusion, token, lex = scorers
    acoustic = beams.score()  # --> [N, B]
    bonus = np.zeros_like(acoustic) if hw is None else hw.weight * beams.hot_done
    lm_term, word_term = np.zeros_like(acoustic), np.zeros_like(acoustic)
    if fusion is not None:
        lm, words = fusion.finish(*beams.lm_state())
        lm_term, word_term = fusion.alpha * lm, fusion.beta * words
    if token is not None:
        lm_term = token.alpha * token.finish(beams.tok_lm, beams.next_lp)
    scores = acoustic + bonus + lm_term + word_term
    if lex is not None:
        scores = np.where(lex.finished(beams.lex), scores, NEG_INF)
    order = np.argsort(-scores, axis=1, kind="stable")[:, : opts.n_best]
    utt, slot = np.nonzero(np.take_along_axis(scores, order, 1) > -np.inf)
    slot = order[utt, slot]
    labels = history.sequences(beams.node[utt, slot])
    if lp.shape[1]:
        frames = label_frames(lp, utt, lengths[utt], labels, opts.blank)
    else:
        frames = [np.zeros((0, 2), np.int64) for _ in labels]
    out: list[list[CTCHypothesis]] = [[] for _ in range(lp.shape[0])]
    for i, (u, s) in enumerate(zip(utt.tolist(), slot.tolist(), strict=True)):
        text, spelled = None, None
        if opts.vocabulary is not None:
            spelled = words_of(opts, labels[i], frames[i], lp[u])
            text = " ".join(w.text for w in spelled)
        out[u].append(CTCHypothesis(labels[i], float(scores[u, s]), float(acoustic[u, s]), frames[i], text, spelled,
                                    float(bonus[u, s]), float(lm_term[u, s]), float(word_term[u, s])))
    return out


def words_of(opts: CTCOptions, labels: list[int], frames: np.ndarray, lp: np.ndarray) -> list[Word]:
    """The words of one hypothesis with their frames (and seconds given a frame duration) and
    confidence (``lp`` float ``[T, V]``: its utterance's log-probs)."""
    assert opts.vocabulary is not None
    out = []
    conf = run_confidence(lp, labels, frames) if labels else np.zeros(0)  # --> [L]
    for text, first, last in opts.vocabulary.words(labels, opts.blank):
        start, end = int(frames[first, 0]), int(frames[last, 1])
        out.append(Word.at(text, start, end, opts.frame_duration, float(conf[first : last + 1].min())))
    return out
