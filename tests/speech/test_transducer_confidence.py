"""Transducer word confidence: the least probability, over the word's labels, of the label where
the hypothesis's alignment emits it, against a plain reference that runs the predictor on the
label prefix and the joint at the label's frame, one label at a time (tests/oracles/transducer.py)."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech import NgramLM, transducer_beam_search, transducer_greedy
from oracles.ctc import random_arpa
from oracles.transducer import TinyTransducer

TOKENS = ["<pad>", "a", "b", "|"]  # blank 0; "|" between words


def plain_confidence(model, u, tokens, frames):
    """Each word's confidence from the definition: walk the labels; the probability of label i is
    the joint's softmax at its frame after labels 0..i-1; a "|" ends the word being spelled."""
    out, current = [], None
    for i, (y, t) in enumerate(zip(tokens, frames, strict=True)):
        tok_lp, _ = model.emission(u, int(t), tokens[:i])
        if TOKENS[y] == "|":
            if current is not None:
                out.append(current)
            current = None
            continue
        p = float(np.exp(tok_lp[y]))
        current = p if current is None else min(current, p)
    return out + ([] if current is None else [current])


def decode(model, method, **kw):
    fns = dict(predictor=model.predictor, joint=model.joint, blank=0, state=model.state0(),
               durations=model.durations, vocabulary=TOKENS)
    if method is None:
        return [[h] for h in transducer_greedy(model.enc, **fns, max_symbols_per_frame=2)]
    return transducer_beam_search(model.enc, **fns, beam_size=6, n_best=4, method=method,
                                  max_symbols_per_frame=2, **kw)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
@pytest.mark.parametrize("method", [None, "modified", "alsd"])
@pytest.mark.parametrize("seed", range(6))
def test_word_confidence_equals_a_plain_reference(durations, method, seed):
    model = TinyTransducer.make(seed, n=3, frames=8, vocab=4, dim=5, durations=durations, scale=2.0)
    words = 0
    for u, hyps in enumerate(decode(model, method)):
        for h in hyps:
            got = [w.confidence for w in h.words]
            np.testing.assert_allclose(got, plain_confidence(model, u, h.tokens, h.token_frames), rtol=1e-9)
            assert all(0.0 < c <= 1.0 for c in got)
            words += len(got)
    assert words > 0


def test_with_an_lm_the_confidence_is_still_the_acoustic_probability():
    """The LM changes which labels win, not the probability a label's emission is read at."""
    rng = np.random.default_rng(3)
    text = random_arpa(rng, 2, ["a", "b", "ab", "ba"], 6)
    model = TinyTransducer.make(4, n=2, frames=6, vocab=4, dim=5, scale=2.0)
    hyps = decode(model, "alsd", lm=NgramLM.from_lines(text.splitlines()), alpha=1.5, beta=0.5,
                  hotwords=[[1, 2]], hotword_weight=1.0)
    for u, per in enumerate(hyps):
        for h in per:
            np.testing.assert_allclose([w.confidence for w in h.words],
                                       plain_confidence(model, u, h.tokens, h.token_frames), rtol=1e-9)


def test_greedy_confidence_is_each_emission_s_most_probable_token():
    """Greedy emits the most probable token, so each word's confidence is the least, over its
    labels, of the joint's maximum probability at that emission (NeMo's max_prob with min
    aggregation and blanks excluded)."""
    model = TinyTransducer.make(9, n=1, frames=8, vocab=4, dim=5, scale=3.0)
    h = decode(model, None)[0][0]
    top = [float(np.exp(model.emission(0, int(t), h.tokens[:i])[0].max())) for i, t in enumerate(h.token_frames)]
    per_word, current = [], []
    for y, p in zip(h.tokens, top, strict=True):
        if TOKENS[y] == "|":
            per_word, current = per_word + ([min(current)] if current else []), []
        else:
            current.append(p)
    per_word += [min(current)] if current else []
    assert h.words and [w.confidence for w in h.words] == pytest.approx(per_word, rel=1e-9)
