"""pyctcdecode 0.5.0 with a kenlm ARPA LM beside ours: the same best text where the two
objectives coincide, and each documented difference shown by a case (docs/speech.md)."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest

from beamsearch.speech import NgramLM, Vocabulary, ctc_beam_search
from oracles.ctc import PlainLM, brute_force, log_softmax, random_arpa

pytest.importorskip("kenlm")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pyctcdecode = pytest.importorskip("pyctcdecode")
logging.getLogger("pyctcdecode").setLevel(logging.ERROR)

NO_PRUNING = dict(beam_prune_logp=-1000.0, token_min_logp=-1000.0)


def decoders(tmp_path, text, labels, **kw):
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    theirs = pyctcdecode.build_ctcdecoder(labels, str(path), alpha=0.5, beta=1.0, **kw)
    return NgramLM.from_arpa(str(path)), theirs


@pytest.mark.parametrize("offset", [0.0, None, -2.0])
def test_best_text_agrees_where_the_objectives_coincide(tmp_path, offset):
    """One word per transcript (no delimiter label), no pruning, wide beams, pyctcdecode's
    unknown-word offset (0, its default -10, or -2; log10) given to ours times ln 10: the same
    best text on every case whose best text is not empty for either."""
    labels = ["", "a", "b"]
    compared = 0
    theirs_kw = {} if offset is None else dict(unk_score_offset=offset)
    ours_unk = (-10.0 if offset is None else offset) * math.log(10.0)
    for seed in range(120):
        rng = np.random.default_rng(seed)
        text = random_arpa(rng, 2, ["a", "b", "ab", "ba", "aa"], 8)
        lm, theirs = decoders(tmp_path, text, labels, **theirs_kw)
        lp = log_softmax(rng.normal(size=(int(rng.integers(2, 7)), 3)) * 2)
        their_text = theirs.decode(lp, beam_width=256, **NO_PRUNING)
        ours = ctc_beam_search(lp[None], blank=0, beam_size=256, vocabulary=Vocabulary(labels), lm=lm,
                               alpha=0.5, beta=1.0, unk_score_offset=ours_unk or None)[0][0]
        if ours.text and their_text:  # the empty transcript is scored differently (next test)
            assert ours.text == their_text, seed
            compared += 1
    assert compared >= 100


def test_difference_the_empty_transcript_is_one_unknown_word_in_pyctcdecode(tmp_path):
    """pyctcdecode scores an empty transcript as the word "" (unknown) then </s>, with beta;
    ours as </s> right after <s>, no word."""
    labels = ["", "a", "b"]
    rng = np.random.default_rng(12)
    text = random_arpa(rng, 2, ["a", "b", "ab", "ba", "aa"], 8)
    lm, theirs = decoders(tmp_path, text, labels, unk_score_offset=0.0)
    lp = log_softmax(rng.normal(size=(int(rng.integers(2, 7)), 3)) * 2)
    beams = {b[0]: b for b in theirs.decode_beams(lp, beam_width=256, **NO_PRUNING)}
    plain = PlainLM(text)
    logit, combined = beams[""][-2], beams[""][-1]
    assert np.isclose(combined, logit + 0.5 * plain.sentence(["<not a word>"]) + 1.0, atol=1e-5)
    ours = {tuple(h.tokens): h for h in ctc_beam_search(lp[None], blank=0, beam_size=256, n_best=64,
                                                          vocabulary=Vocabulary(labels), lm=lm, alpha=0.5)[0]}
    assert np.isclose(ours[()].lm_score, 0.5 * plain.sentence([])) and ours[()].word_score == 0.0


def test_difference_label_sequences_with_one_text_are_merged_in_pyctcdecode(tmp_path):
    """With a delimiter label, "b", " b", "b " and " b " are one text: pyctcdecode adds their
    probabilities into one beam; ours keeps label sequences apart (each its own CTC probability)."""
    labels = ["", "a", "b", " "]
    rng = np.random.default_rng(4)
    text = random_arpa(rng, 2, ["a", "b", "ab", "ba", "aa"], 8)
    _, theirs = decoders(tmp_path, text, labels, unk_score_offset=0.0)
    lp = log_softmax(rng.normal(size=(int(rng.integers(2, 7)), 4)) * 2)
    beams = {b[0]: b for b in theirs.decode_beams(lp, beam_width=256, **NO_PRUNING)}
    by_text: dict[str, float] = {}
    for seq, logp in brute_force(lp, 0):
        key = " ".join("".join(labels[t] for t in seq).split())
        by_text[key] = float(np.logaddexp(by_text.get(key, -np.inf), logp))
    ours = ctc_beam_search(lp[None], blank=0, beam_size=256, n_best=64, vocabulary=Vocabulary(labels))[0]
    b_seqs = [h for h in ours if h.text == "b"]
    assert len(b_seqs) > 1  # several label sequences spell "b"
    assert np.isclose(beams["b"][-2], by_text["b"], atol=1e-6)
    assert all(h.acoustic_score < by_text["b"] for h in b_seqs)


def test_difference_partial_words_and_unknown_words_pay_pyctcdecode_s_offset(tmp_path):
    """pyctcdecode's default ``unk_score_offset=-10`` (log10) is added to an unknown word and, while
    decoding, to a partial word that starts no known word; ours scores a word only when it ends,
    an unknown one with the ARPA's <unk> probability (plus ``unk_score_offset`` when given, here
    not, and not to a partial word either way). At beam 1 the partial-word score
    changes the path: "a" (a prefix of no word) loses to "b" (a prefix of "ba") after frame 1.
    (pyctcdecode also takes as its known words only the 1-grams that list a back-off.)"""
    labels = ["", "a", "b", " "]
    text = ("\\data\\\nngram 1=4\nngram 2=1\n\n\\1-grams:\n-99\t<s>\t0\n-0.5\tba\t0\n-0.5\t</s>\t0\n-3\t<unk>\t0\n\n"
            "\\2-grams:\n-0.4\t<s> ba\n\\end\\\n")  # kenlm needs a 2-gram; pyctcdecode 1-grams with a back-off
    lm, theirs = decoders(tmp_path, text, labels)  # pyctcdecode's default offset
    lp = np.log(np.array([[0.05, 0.5, 0.4, 0.05], [0.05, 0.4, 0.5, 0.05]]))
    their_text = theirs.decode(lp, beam_width=1, **NO_PRUNING)
    ours = ctc_beam_search(lp[None], blank=0, beam_size=1, vocabulary=Vocabulary(labels), lm=lm,
                           alpha=0.5, beta=1.0)[0][0]
    assert their_text == "b" and ours.text == "ab"  # after frame 1: theirs holds "b", ours "a" (0.5 > 0.4)
    beams = {b[0]: b for b in theirs.decode_beams(lp, beam_width=16, **NO_PRUNING)}
    logit, combined = beams["ab"][-2], beams["ab"][-1]
    assert np.isclose(combined, logit + 0.5 * math.log(10) * (-3 - 0.5 - 10) + 1.0, atol=1e-5)
