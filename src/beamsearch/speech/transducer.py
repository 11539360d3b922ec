"""Transducer (RNN-T and TDT) decoding over any prediction and joint network (docs/transducer.md).

``transducer_greedy`` and ``transducer_beam_search`` take per-frame encoder outputs ``[N, T, D]``
with lengths, a ``predictor(state, y_prev) -> (pred_out, new_state)`` and a
``joint(enc_frames, pred_out) -> logits`` (:mod:`beamsearch.speech.transducer_model`), and
return per utterance the label sequences with their scores and the frame of every label. Both
run the same step loop (:mod:`beamsearch.speech.transducer_search`) over every utterance's
hypotheses at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from beamsearch.backends import first_foreign_leaf, index_like
from beamsearch.core import validate
from beamsearch.core.model_checks import step_output
from beamsearch.core.state import select_state
from beamsearch.speech.checks import emissions_shape, lengths_of, vocabulary_of
from beamsearch.speech.fusion import WordFusion
from beamsearch.speech.hotwords import hotwords_of
from beamsearch.speech.lexicon import Lexicon
from beamsearch.speech.results import Word
from beamsearch.speech.tokenlm import TokenFusion, TokenLM
from beamsearch.speech.transducer_merge import Plan, Pool
from beamsearch.speech.transducer_model import Network, start
from beamsearch.speech.transducer_search import search
from beamsearch.speech.transducer_trace import TransducerTrace

METHODS = ("modified", "alsd")


@dataclass(frozen=True)
class TransducerHypothesis:
    """One decoded label sequence of an utterance.

    Fields:
        tokens: the label ids (Python ints, no blanks).
        score: what the results are ranked by:
            ``acoustic_score + lm_score + word_score + hotword_bonus``.
        acoustic_score: the natural-log probability of ``tokens`` summed over the alignments the
            search kept and merged (greedy: its one alignment's).
        token_frames: int64 ``[L]``, the encoder frame each label was emitted at (on the kept
            alignment of highest probability).
        token_durations: int64 ``[L]``, each label's duration in frames (TDT); None for RNN-T.
        text, words: with a vocabulary, the words joined by spaces and the words with their
            frames (a word ends at the last frame its last label covers: RNN-T its emission frame, TDT
            that frame + its duration - 1), with ``frame_duration`` seconds, and a confidence: the
            least probability, over the word's labels, of the label where the kept alignment
            emits it (the joint's softmax over the labels and the blank; for TDT the duration's
            probability left out), docs/transducer.md, "Word confidence".
        hotword_bonus: ``hotword_weight`` x the label positions inside completed hotword
            occurrences (0.0 without hotwords; the rule of docs/speech.md).
        lm_score: ``alpha`` x the natural-log LM probability of its words and ``</s>`` (a word
            LM) or of its labels and the LM's ``eos`` if given (a token LM); 0.0 without an LM.
        word_score: ``beta`` x its number of words (0.0 without a word LM).
        token_times: with ``frame_duration``, float64 ``[L, 2]``: each label's start and end in
            seconds, ``frame * frame_duration`` and ``(last frame it covers + 1) *
            frame_duration`` (RNN-T: its frame; TDT: ``frame + max(duration, 1) - 1``); else None.
    """

    tokens: list[int]
    score: float
    acoustic_score: float
    token_frames: np.ndarray
    token_durations: np.ndarray | None = None
    text: str | None = None
    words: list[Word] | None = None
    hotword_bonus: float = 0.0
    lm_score: float = 0.0
    word_score: float = 0.0
    token_times: np.ndarray | None = None


def transducer_greedy(encoder_out: Any, lengths: Any = None, *, predictor: Callable, joint: Callable, blank: int,
                      state: Any = None, durations: Any = None, max_symbols_per_frame: int = 10,
                      vocabulary: Any = None, frame_duration: float | None = None) -> list[TransducerHypothesis]:
    """Greedy transducer decoding: one hypothesis per utterance taking the most probable token.

    RNN-T: a blank moves to the next frame; a label stays, except the ``max_symbols_per_frame``-th
    label at a frame, which moves on without a blank (transformers' and NeMo's greedy rule).
    TDT (``durations`` given): the most probable token and the most probable duration, chosen
    separately; the frame advances by the duration; a blank whose best duration is 0, or a
    label of duration 0 that would be the ``max_symbols_per_frame``-th at its frame, takes the
    smallest positive duration instead. Decoding ends when the frame reaches the utterance's
    length (a TDT step may overshoot it).

    Args and returns as :func:`transducer_beam_search` (one hypothesis per utterance).
    """
    net, lens, opts = prepare(encoder_out, lengths, predictor, joint, blank, durations, vocabulary, frame_duration)
    m = validate.at_least("max_symbols_per_frame", max_symbols_per_frame, 1)
    if opts[0] is not None:
        vocabulary_size(net, state, opts[0])
    plan = Plan(1, 1, m, "greedy", None)
    pool, aligns = search(net, lens, state, plan)
    return [hyps[0] for hyps in results(pool, aligns, opts, plan)]


def transducer_beam_search(encoder_out: Any, lengths: Any = None, *, predictor: Callable, joint: Callable,
                           blank: int, beam_size: int, method: str = "modified", state: Any = None,
                           durations: Any = None, max_symbols_per_frame: int | None = None, n_best: int = 1,
                           vocabulary: Any = None, frame_duration: float | None = None, hotwords: Any = None,
                           hotword_weight: float = 10.0, lm: Any = None, alpha: float = 0.5,
                           beta: float = 1.0, unk_score_offset: float | None = None,
                           lexicon: Any = None, trace: TransducerTrace | None = None,
                           ) -> list[list[TransducerHypothesis]]:
    """Transducer beam search, batched over utterances and hypotheses.

    Each step a hypothesis emits one symbol (blank or label; TDT: with a duration). Candidates
    reaching the same label sequence at the same frame (and count of labels at that frame) are
    merged by log-add; finished ones are merged by labels. With ``beam_size`` at least the number
    of candidates, nothing is pruned and each result's ``acoustic_score`` is the exact
    probability of its labels under the rule of ``max_symbols_per_frame``.

    Args:
        encoder_out: float ``[N, T, D]`` encoder frames (numpy or torch).
        lengths: int ``[N]``, frames of each utterance in ``[0, T]``; None: all T.
        predictor: ``(state, y_prev [K]) -> (pred_out [K, H], new_state)``; first called on the
            blank (the start symbol) from ``state``.
        joint: ``(enc_frames [K, D], pred_out [K, H]) -> logits [K, V]`` (RNN-T) or
            ``[K, V + len(durations)]`` (TDT).
        blank: the blank's label id.
        beam_size: hypotheses kept per utterance after each step (and finished ones pooled).
        method: ``"modified"``: frame-synchronous, only the hypotheses at their utterance's
            earliest frame are expanded each step (with ``max_symbols_per_frame=1``, icefall's
            modified beam search); ``"alsd"``: alignment-length synchronous, every hypothesis is
            expanded each step (Saon et al. 2020).
        state: the predictor's state for the N utterances (rows first), or None.
        durations: TDT's duration set, e.g. ``[0, 1, 2, 3, 4]``; None: RNN-T.
        max_symbols_per_frame: at most this many labels at one frame; None: 1 for
            ``"modified"``, 10 for ``"alsd"``. RNN-T: the last of them moves to the next frame
            without a blank; TDT: a label of duration 0 may not be the last of them.
        n_best: hypotheses returned per utterance (at most ``beam_size``).
        vocabulary: a :class:`~beamsearch.speech.Vocabulary` or V token strings (text, words).
        frame_duration: seconds per encoder frame: words then have times in seconds.
        hotwords, hotword_weight: phrases to favour and the bonus per label position inside a
            phrase, as for :func:`~beamsearch.speech.ctc_beam_search`.
        lm, alpha, beta: fused as in :func:`~beamsearch.speech.ctc_beam_search`. A word n-gram
            LM (:class:`~beamsearch.speech.NgramLM`, :class:`~beamsearch.speech.KenLMModel` or an
            ARPA file's path; needs ``vocabulary``): ``alpha`` x its natural-log probability of
            each word, scored when the word ends (the last one and ``</s>`` when the hypothesis
            finishes), plus ``beta`` per word. A :class:`~beamsearch.speech.TokenLM` (a step
            function over the joint's V labels): ``alpha`` x its log-probability of each label
            (and of its ``eos`` at the end). Hypotheses are ranked by acoustic score + LM terms
            + hotword bonus while decoding and in the results.
        unk_score_offset: as for :func:`~beamsearch.speech.ctc_beam_search`: with a word
            n-gram LM, added (natural log) to the LM log-probability of each completed word not
            in the LM's vocabulary, so weighted by ``alpha`` and counted in ``lm_score``; None:
            none.
        lexicon: the words hypotheses may spell, as for :func:`~beamsearch.speech.ctc_beam_search`
            (needs ``vocabulary``): a candidate whose labels leave the lexicon is never kept,
            and a finished one whose last word is not whole is not returned.
        trace: a new :class:`~beamsearch.speech.transducer_trace.TransducerTrace`, filled with the
            hypotheses after each step, merged, pruned and finished (docs/transducer.md, "The search
            picture"); None: nothing is recorded.

    Returns:
        per utterance, up to ``n_best`` :class:`TransducerHypothesis`, best first.
    """
    net, lens, opts = prepare(encoder_out, lengths, predictor, joint, blank, durations, vocabulary, frame_duration)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    beam, best = validate.search_sizes(beam_size, n_best)
    m = 1 if method == "modified" else 10
    if max_symbols_per_frame is not None:
        m = validate.at_least("max_symbols_per_frame", max_symbols_per_frame, 1)
    hw, token = None, None
    fusion = WordFusion.of(None if isinstance(lm, TokenLM) else lm, alpha, beta, opts[0], net.blank, unk_score_offset)
    lex = Lexicon.of(lexicon, opts[0], net.blank)
    if hotwords is not None or opts[0] is not None or isinstance(lm, TokenLM):
        vocab = vocabulary_size(net, state, opts[0], lm)
        hw = hotwords_of(hotwords, hotword_weight, lens.size, vocab, net.blank, opts[0])
        if isinstance(lm, TokenLM):
            token = TokenFusion(lm, float(alpha), net.blank, vocab)
            net = replace(net, token=token)
    plan = Plan(beam, beam, m, "frame" if method == "modified" else "alignment", hw, fusion, token, lex)
    if trace is not None and not isinstance(trace, TransducerTrace):
        raise TypeError(f"trace must be a TransducerTrace or None; got {trace!r:.80}")
    if trace is not None:
        trace.begin(lens.size, net.blank, lens, opts[0])
    pool, aligns = search(net, lens, state, plan, trace)
    out = [hyps[:best] for hyps in results(pool, aligns, opts, plan)]
    if trace is not None:
        trace.finish(pool, plan, out)
    return out


def vocabulary_size(net: Network, state: Any, voc: Any, lm: Any = None) -> int:
    """V, the joint's number of token logits, from one predictor and joint call on the first
    utterance (hotwords are compiled over V labels); a vocabulary of another size is a
    ValueError. Without frames: the vocabulary's size, else a token LM's (the width of its
    logits on its ``bos``), else ``blank + 1``."""
    if net.enc.shape[0] == 0:
        if voc is None and isinstance(lm, TokenLM):
            like = first_foreign_leaf(lm.init_state)
            y = np.array([lm.bos]) if like is None else index_like(np.array([lm.bos]), like)
            return int(step_output(lm.step_fn(lm.init_state, y))[0].shape[-1])
        return len(voc) if voc is not None else net.blank + 1
    carried = start(net, select_state(state, [0]), 1)
    tok, _ = net.log_probs(np.zeros(1, np.int64), np.zeros(1, np.int64), carried[0])
    vocabulary_of(voc, int(tok.shape[1]))
    return int(tok.shape[1])


def prepare(encoder_out: Any, lengths: Any, predictor: Any, joint: Any, blank: Any, durations: Any,
            vocabulary: Any, frame_duration: Any) -> tuple[Network, np.ndarray, tuple]:
    """The checked arguments: the network, the lengths and ``(vocabulary, frame_duration, tdt)``."""
    enc, (n, frames, dim) = emissions_shape(encoder_out)
    for name, fn in (("predictor", predictor), ("joint", joint)):
        if not callable(fn):
            raise TypeError(f"{name} must be a callable; got {fn!r:.80}")
    b = validate.integer("blank", blank)
    if b < 0:
        raise ValueError(f"blank must be a label id >= 0; got {b}")
    lens = lengths_of(lengths, n, frames)
    dur = None
    if durations is not None:
        dur = np.asarray([validate.integer(f"durations[{i}]", d) for i, d in enumerate(durations)], dtype=np.int64)
        if dur.size == 0 or (dur < 0).any() or not (dur > 0).any() or np.unique(dur).size != dur.size:
            raise ValueError(f"durations must be distinct integers >= 0, at least one > 0; got {list(durations)!r}")
    voc = vocabulary_of(vocabulary, len(vocabulary)) if vocabulary is not None else None
    fd = None if frame_duration is None else validate.real("frame_duration", frame_duration, positive=True, finite=True)
    flat = enc.reshape(n * frames, dim)
    return Network(flat, frames, predictor, joint, b, dur), lens, (voc, fd, dur is not None)


def results(pool: Pool, aligns: Any, opts: tuple, plan: Plan) -> list[list[TransducerHypothesis]]:
    """The pool's hypotheses, best first, with their labels, frames, words and score terms."""
    voc, fd, tdt = opts
    rank = pool.rank(plan)
    order = np.argsort(-rank, axis=1, kind="stable")
    uu, kk = np.nonzero(np.take_along_axis(np.isfinite(pool.score), order, 1))
    ss = order[uu, kk]
    paths = aligns.paths(pool.align[uu, ss])
    weight = 0.0 if plan.hotwords is None else plan.hotwords.weight
    alpha, beta = (0.0, 0.0) if plan.fusion is None else (plan.fusion.alpha, plan.fusion.beta)
    if plan.token is not None:
        alpha = plan.token.alpha
    out: list[list[TransducerHypothesis]] = [[] for _ in range(pool.score.shape[0])]
    for (u, s), (labels, frames, durs, logp) in zip(zip(uu.tolist(), ss.tolist(), strict=True), paths, strict=True):
        ends = label_ends(frames, durs if tdt else None)
        words = None if voc is None else words_of(voc, labels, frames, ends, fd, np.exp(logp))
        times = None if fd is None else np.stack([frames, ends + 1], 1) * fd
        out[u].append(TransducerHypothesis(
            labels, float(rank[u, s]), float(pool.score[u, s]), frames, durs if tdt else None,
            None if words is None else " ".join(w.text for w in words), words, weight * float(pool.done[u, s]),
            alpha * float(pool.lm[u, s]), beta * float(pool.words[u, s]), times))
    return out


def label_ends(frames: np.ndarray, durs: np.ndarray | None) -> np.ndarray:
    """int64 ``[L]``: the last frame each label covers: RNN-T its emission frame; TDT ``frame +
    duration - 1`` (a label emitted at frame t with duration d spans frames t .. t + d - 1; one
    of duration 0 its frame t alone)."""
    return frames if durs is None else frames + np.maximum(durs, 1) - 1


def words_of(voc: Any, labels: list[int], frames: np.ndarray, ends: np.ndarray, fd: float | None,
             prob: np.ndarray) -> list[Word]:
    """The words of one hypothesis: from its first label's frame to the last frame its last label
    covers (``ends``, :func:`label_ends`), with their confidence: the least of ``prob`` (float64
    ``[L]``, each label's probability where it was emitted) over the word's labels."""
    out = []
    for text, first, last in voc.words(labels):
        start, end = int(frames[first]), int(ends[last])
        out.append(Word.at(text, start, end, fd, float(prob[first : last + 1].min())))
    return out
