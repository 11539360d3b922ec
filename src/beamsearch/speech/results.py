"""What a CTC decode returns: one list of :class:`CTCHypothesis` per utterance, best first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Word:
    """A word of a hypothesis and where it was said.

    ``start_frame``/``end_frame``: the first frame of its first label and the last frame of its
    last label on the hypothesis's best alignment (0-based, inclusive). ``start``/``end``: the same
    in seconds, ``start_frame * frame_duration`` and ``(end_frame + 1) * frame_duration`` (the
    end of its last frame); None when no frame duration was given. ``confidence``: the least
    probability, over the non-blank frames of its labels on that alignment, of the label
    emitted there (the max-probability measure aggregated by minimum, docs/speech.md, "Word
    confidence"; a transducer's: over its labels' emissions, docs/transducer.md), in ``[0, 1]``."""

    text: str
    start_frame: int
    end_frame: int
    start: float | None
    end: float | None
    confidence: float | None = None

    @staticmethod
    def at(text: str, start_frame: int, end_frame: int, frame_duration: float | None, confidence: float) -> Word:
        """The word spanning these frames, with their times given a frame duration (else None)."""
        d = frame_duration
        return Word(text, start_frame, end_frame, None if d is None else start_frame * d,
                    None if d is None else (end_frame + 1) * d, confidence)


@dataclass(frozen=True)
class CTCHypothesis:
    """One decoded label sequence of an utterance.

    Fields:
        tokens: the label ids, collapsed and without blanks (Python ints).
        score: what the results are ranked by:
            ``acoustic_score + lm_score + word_score + hotword_bonus``.
        acoustic_score: the natural-log CTC probability of ``tokens`` summed over the alignments
            the search kept (every alignment when nothing on their way was pruned: then it equals
            ``-ctc_loss`` of ``tokens``).
        token_frames: int64 ``[L, 2]``, per label the first and last frame (0-based, inclusive) of
            its run on the best alignment of ``tokens`` (Viterbi over all its alignments).
        text: the words joined by single spaces; None without a vocabulary.
        words: the words with their frames and times; None without a vocabulary.
        hotword_bonus: ``hotword_weight`` x the label positions inside completed hotword
            occurrences (0.0 without hotwords; docs/speech.md).
        lm_score: ``alpha`` x the natural-log LM probability of its words and ``</s>`` (a word
            LM) or of its labels and the LM's ``eos`` if given (a token LM); 0.0 without an LM.
        word_score: ``beta`` x its number of words (0.0 without an LM).
    """

    tokens: list[int]
    score: float
    acoustic_score: float
    token_frames: np.ndarray
    text: str | None = None
    words: list[Word] | None = None
    hotword_bonus: float = 0.0
    lm_score: float = 0.0
    word_score: float = 0.0
