"""flashlight-text 0.0.7's lexicon-free CTC decoder with its KenLM beside ours: the same n-best
where the two objectives coincide, and each documented difference shown by a case
(docs/speech.md, "Peers")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.speech import NgramLM, Vocabulary, ctc_beam_search
from oracles.ctc import PlainLM, brute_force, log_softmax, random_arpa

fl_decoder = pytest.importorskip("flashlight.lib.text.decoder")
fl_kenlm = pytest.importorskip("flashlight.lib.text.decoder.kenlm")
fl_dictionary = pytest.importorskip("flashlight.lib.text.dictionary")

LN10 = math.log(10.0)
PIECES = ["<blk>", "\u2581a", "\u2581b", "\u2581c"]  # blank 0; every piece is a word
WORDS = ["<blk>", "a", "b", "c"]  # the same labels as flashlight's LM words


def theirs(lp, tokens, arpa_path, alpha, log_add=True, beam=2000):
    """flashlight's lexicon-free decoder on ``lp`` ``[T, V]`` (no pruning: every token, a
    threshold of 1000, a wide beam), its LM a KenLM over ``tokens`` as words, weighted so that
    its log10 scores count as ``alpha`` x natural logs. Returns (labels, score, lm log10) per
    hypothesis, best first; the labels its alignment collapsed (repeats merged, blanks dropped)."""
    lm = fl_kenlm.KenLM(str(arpa_path), fl_dictionary.Dictionary(tokens))
    opts = fl_decoder.LexiconFreeDecoderOptions(
        beam_size=beam, beam_size_token=len(tokens), beam_threshold=1000.0, lm_weight=alpha * LN10, sil_score=0.0,
        log_add=log_add, criterion_type=fl_decoder.CriterionType.CTC)
    decoder = fl_decoder.LexiconFreeDecoder(opts, lm, 0, 0, [])
    x = np.ascontiguousarray(lp, dtype=np.float32)
    out = []
    for r in decoder.decode(x.ctypes.data, x.shape[0], x.shape[1]):
        path = list(r.tokens)
        labels = tuple(a for i, a in enumerate(path) if a != 0 and (i == 0 or path[i - 1] != a))
        out.append((labels, r.score, r.lmScore))
    return out


def arpa(tmp_path, text):
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    return path


def test_the_n_best_agrees_where_the_objectives_coincide(tmp_path):
    """Every label a word (SentencePiece pieces that all start with ▁), log-add merging in
    flashlight, no word bonus in ours (``beta=0``), nothing pruned: the same label sequences
    in the same order (where two scores are not within float32 rounding) with the same scores."""
    compared = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        text = random_arpa(rng, int(rng.integers(2, 4)), ["a", "b", "c"], 10, unk=bool(rng.random() < 0.5))
        if "\\2-grams:" not in text:  # kenlm reads no unigram model
            continue
        path = arpa(tmp_path, text)
        lp = log_softmax(rng.normal(size=(int(rng.integers(1, 9)), 4)) * rng.uniform(0.5, 3))
        alpha = float(rng.uniform(0, 2))
        ours = ctc_beam_search(lp[None], blank=0, beam_size=2000, n_best=5, vocabulary=Vocabulary(PIECES),
                               lm=NgramLM.from_arpa(str(path)), alpha=alpha, beta=0.0)[0]
        fl = theirs(lp, WORDS, path, alpha)[: len(ours)]
        assert len(fl) == len(ours)
        np.testing.assert_allclose([s for _, s, _ in fl], [h.score for h in ours], rtol=1e-5, atol=1e-4)
        for i, (h, (labels, _, lm10)) in enumerate(zip(ours, fl, strict=True)):
            tied = [g for g in ours if abs(g.score - h.score) < 1e-4]
            if len(tied) == 1:
                assert tuple(h.tokens) == labels, (seed, i)
                assert np.isclose(h.lm_score, alpha * lm10 * LN10, rtol=1e-5, atol=1e-4)
                compared += 1
    assert compared >= 200


def flat_arpa(tmp_path):
    """Every word probability 1 (log10 0): the LM adds nothing."""
    text = ("\\data\\\nngram 1=5\nngram 2=1\n\n\\1-grams:\n-99\t<s>\t0\n0\ta\t0\n0\tb\t0\n0\t</s>\n0\t<unk>\n\n"
            "\\2-grams:\n0\t<s> a\n\n\\end\\\n")  # kenlm needs a 2-gram
    return arpa(tmp_path, text)


def test_difference_flashlight_merges_by_max_without_log_add(tmp_path):
    """``log_add=False`` (torchaudio's default for this decoder) keeps the best alignment of a
    prefix, not their sum: two frames of p(blank) 0.6, p(a) 0.4 give "" (0.36) the lead over "a",
    whose alignments sum to 0.64 (0.24 at best). Ours sums: "a". With ``log_add=True`` flashlight
    agrees."""
    path = flat_arpa(tmp_path)
    lp = np.log(np.array([[0.6, 0.4, 1e-9], [0.6, 0.4, 1e-9]]))
    by_max = theirs(lp, ["<blk>", "a", "b"], path, 0.0, log_add=False)
    assert by_max[0][0] == () and np.isclose(math.exp(by_max[0][1]), 0.36, rtol=1e-5)
    assert dict((lab, s) for lab, s, _ in by_max)[(1,)] == pytest.approx(math.log(0.24), rel=1e-5)
    by_sum = theirs(lp, ["<blk>", "a", "b"], path, 0.0, log_add=True)
    ours = ctc_beam_search(lp[None], blank=0, beam_size=16, n_best=2)[0]
    assert by_sum[0][0] == tuple(ours[0].tokens) == (1,)
    assert np.isclose(ours[0].score, dict(brute_force(lp, 0))[(1,)]) and np.isclose(math.exp(ours[0].score), 0.64)


def test_difference_the_lexicon_free_lm_scores_every_token_as_a_word(tmp_path):
    """Lexicon-free, flashlight's LM takes each label as a word, as soon as it is emitted, and
    there is no word bonus; ours splits labels into words by the vocabulary (here "|" between
    words) and scores a word when it ends. With a character vocabulary its LM score of "ab|b" is
    that of the words "a", "b", "|", "b"; ours is that of "ab", "b"."""
    chars = ["<blk>", "a", "b", "|"]
    text = random_arpa(np.random.default_rng(2), 2, ["a", "b", "ab", "|"], 10)
    path = arpa(tmp_path, text)
    probs = np.full((4, 4), 0.02)
    for t, label in enumerate([1, 2, 3, 2]):
        probs[t, label] = 0.94
    lp = np.log(probs)
    fl = theirs(lp, chars, path, 1.0)
    best = {lab: lm10 for lab, _, lm10 in fl}[(1, 2, 3, 2)]
    plain = PlainLM(text)
    assert np.isclose(best * LN10, plain.sentence(["a", "b", "|", "b"]), atol=1e-4)
    ours = {tuple(h.tokens): h for h in ctc_beam_search(lp[None], blank=0, beam_size=64, n_best=64,
                                                          vocabulary=chars, lm=NgramLM.from_arpa(str(path)),
                                                          alpha=1.0, beta=0.0)[0]}
    assert np.isclose(ours[(1, 2, 3, 2)].lm_score, plain.sentence(["ab", "b"]))
    assert not np.isclose(plain.sentence(["ab", "b"]), plain.sentence(["a", "b", "|", "b"]))


def lexicon_decode(lp, words, sil):
    """flashlight's lexicon decoder, no LM, no word score: the words of its best hypothesis and
    its score (``words``: each word's spelling in labels; ``sil`` its silence label)."""
    trie = fl_decoder.Trie(lp.shape[1], sil)
    for i, spelling in enumerate(words):
        trie.insert(list(spelling), i, 0.0)
    trie.smear(fl_decoder.SmearingMode.NONE)
    opts = fl_decoder.LexiconDecoderOptions(
        beam_size=64, beam_size_token=lp.shape[1], beam_threshold=1000.0, lm_weight=0.0, word_score=0.0,
        unk_score=-math.inf, sil_score=0.0, log_add=True, criterion_type=fl_decoder.CriterionType.CTC)
    decoder = fl_decoder.LexiconDecoder(opts, trie, fl_decoder.ZeroLM(), sil, 0, -1, [], False)
    x = np.ascontiguousarray(lp, dtype=np.float32)
    best = decoder.decode(x.ctypes.data, x.shape[0], x.shape[1])[0]
    return [i for i in best.words if i >= 0], best.score


def test_difference_flashlight_s_lexicon_decoder_ends_a_word_on_one_frame_without_silence():
    """Words that start with ▁ and no silence label between them: flashlight's lexicon decoder
    (CTC) returns to its trie's root when a word's last label is emitted, so that label cannot
    last a second frame: on "▁a ▁a - ▁b ▁b" (each label two frames, every other label 1e-6) it
    finds "a b" only through alignments that replace a frame of each word's last label (by a
    label of probability 1e-6), more than 20 nats below the probability of "a b" (with a beam
    threshold of 10, as in the benchmarks, it loses them and returns other words). On "▁a - ▁b"
    it scores "a b" as ours does."""
    tokens = ["<blk>", "\u2581a", "\u2581b", "<sil>"]  # <sil>: flashlight's silence, never emitted
    for path, two_frames in [([1, 1, 0, 2, 2, 0], True), ([1, 0, 2, 0], False)]:
        probs = np.full((len(path), 4), 1e-6)
        probs[np.arange(len(path)), path] = 1.0
        lp = np.log(probs / probs.sum(1, keepdims=True))
        ours = ctc_beam_search(lp[None], blank=0, beam_size=16, vocabulary=tokens, lexicon=["a", "b"])[0][0]
        assert ours.text == "a b" and np.isclose(ours.score, dict(brute_force(lp, 0))[(1, 2)])
        words, score = lexicon_decode(lp, [[1], [2]], 3)
        assert words == [0, 1]
        if two_frames:
            assert score < ours.score - 20
        else:
            assert score == pytest.approx(ours.score, abs=1e-4)
