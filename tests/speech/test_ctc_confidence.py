"""Word confidence: the least probability of the emitted label over the word's non-blank frames
on the best alignment, against a plain reference (a plain Viterbi, its frames walked one by one)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.speech import ctc_beam_search
from oracles.ctc import log_softmax, viterbi

TOKENS = ["a", "b", "|", "c", "<pad>"]  # blank 4 (last), "|" between words


def plain_confidence(lp, labels, blank=4):
    """Each word's confidence, written from the definition: walk the best alignment's frames;
    a non-blank frame belongs to the word being spelled (a "|" frame to none); keep the least
    probability of the frame's label per word."""
    out, current = [], None
    for t, a in enumerate(viterbi(lp, labels, blank)):
        if a == blank:
            continue
        if TOKENS[a] == "|":
            if current is not None:
                out.append(current)
                current = None
            continue
        p = math.exp(lp[t, a])
        current = p if current is None else min(current, p)
    return out + ([] if current is None else [current])


@pytest.mark.parametrize("seed", range(40))
def test_word_confidence_equals_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    frames = int(rng.integers(1, 30))
    lp = log_softmax(rng.normal(size=(2, frames, len(TOKENS))) * rng.uniform(0.5, 4))
    for u, hyps in enumerate(ctc_beam_search(lp, blank=4, beam_size=6, n_best=4, vocabulary=TOKENS)):
        for h in hyps:
            got = [w.confidence for w in h.words]
            np.testing.assert_allclose(got, plain_confidence(lp[u], h.tokens), rtol=1e-6, atol=0)
            assert all(0.0 < c <= 1.0 for c in got)


def test_hand_computed_confidence():
    """Frames a a - | b (the blank last): "a" is emitted at frames 0 and 1 (p .7, .6): its
    confidence is .6; "b" at frame 4 (p .5): .5. The blank frame (p .9) counts for no word."""
    probs = np.array([[0.7, 0.1, 0.1, 0.05, 0.05], [0.6, 0.1, 0.1, 0.1, 0.1], [0.02, 0.02, 0.02, 0.04, 0.9],
                      [0.1, 0.1, 0.6, 0.1, 0.1], [0.1, 0.5, 0.2, 0.1, 0.1]])
    best = ctc_beam_search(np.log(probs)[None], blank=4, beam_size=8, vocabulary=TOKENS)[0][0]
    assert best.text == "a b"
    assert [(w.text, w.start_frame, w.end_frame) for w in best.words] == [("a", 0, 1), ("b", 4, 4)]
    np.testing.assert_allclose([w.confidence for w in best.words], [0.6, 0.5])
