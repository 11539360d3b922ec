"""CTCStream: fed a batch in chunks of random sizes (each utterance its own), its final results
equal decoding at once, and its hypotheses after each chunk equal decoding the frames so far at
once; with and without a word LM, hotwords and a token LM."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech import CTCStream, NgramLM, TokenLM, ctc_beam_search
from oracles.ctc import log_softmax, random_arpa
from tests.speech.test_ngram import rnn_lm

TOKENS = ["<pad>", "a", "b", "|", "c"]


def same(got, want):
    """Two decodes' results agree: labels, text, words, frames; scores to float64 rounding."""
    assert len(got) == len(want)
    for g_utt, w_utt in zip(got, want, strict=True):
        assert [h.tokens for h in g_utt] == [h.tokens for h in w_utt]
        assert [h.text for h in g_utt] == [h.text for h in w_utt]
        # a word's confidence is a probability computed from the emissions: torch and numpy may round
        # it differently (exp of a float32/float64 log-probability), so it is compared to a tolerance
        assert [[(w.text, w.start_frame, w.end_frame, w.start, w.end) for w in h.words] for h in g_utt] == \
               [[(w.text, w.start_frame, w.end_frame, w.start, w.end) for w in h.words] for h in w_utt]
        for g, w in zip(g_utt, w_utt, strict=True):
            np.testing.assert_allclose([x.confidence for x in g.words], [x.confidence for x in w.words],
                                       rtol=1e-9, atol=1e-12)
        for g, w in zip(g_utt, w_utt, strict=True):
            assert np.array_equal(g.token_frames, w.token_frames)
            np.testing.assert_allclose([g.score, g.acoustic_score, g.lm_score, g.word_score, g.hotword_bonus],
                                       [w.score, w.acoustic_score, w.lm_score, w.word_score, w.hotword_bonus],
                                       rtol=1e-9, atol=1e-9)


def chunks_of(rng, lp, lengths):
    """Each utterance's frames cut at its own random points; chunk k holds every utterance's k-th
    piece (padded with garbage past its length in the chunk, 0 frames once it has ended)."""
    n, _, vocab = lp.shape
    cuts = [np.sort(rng.choice(np.arange(1, max(int(length), 2)),
                               size=min(int(rng.integers(0, 4)), max(int(length) - 1, 0)), replace=False))
            for length in lengths]
    pieces = [np.split(np.arange(int(length)), c) for length, c in zip(lengths, cuts, strict=True)]
    for k in range(max(len(p) for p in pieces)):
        parts = [p[k] if k < len(p) else np.zeros(0, np.int64) for p in pieces]
        size = max(len(x) for x in parts)
        chunk = rng.normal(size=(n, size, vocab)) * 50  # garbage where no frame is
        for i, idx in enumerate(parts):
            chunk[i, : len(idx)] = lp[i, idx]
        yield chunk, np.array([len(x) for x in parts])


def case(seed):
    rng = np.random.default_rng(seed)
    n, frames = int(rng.integers(1, 4)), int(rng.integers(1, 14))
    lp = log_softmax(rng.normal(size=(n, frames, len(TOKENS))) * rng.uniform(0.5, 3))
    lengths = rng.integers(0, frames + 1, size=n)
    lengths[0] = frames
    return rng, lp, lengths


def kinds(rng, n):
    """Keyword sets: none; pruning; a word LM with hotwords; a token LM with hotwords per utterance."""
    text = random_arpa(rng, 2, ["a", "b", "ab", "ca", "bc"], 10)
    step, init = rnn_lm(int(rng.integers(1000)), vocab=len(TOKENS))
    hot = [[int(t) for t in rng.integers(1, 5, size=int(rng.integers(1, 3)))] for _ in range(2)]
    return [dict(),
            dict(token_min_logp=-2.5, beam_threshold=6.0, token_top_k=3),
            dict(lm=NgramLM.from_lines(text.splitlines()), alpha=0.7, beta=0.5, hotwords=["ab", "c"],
                 hotword_weight=1.5),
            dict(lm=TokenLM(step, init, bos=0), alpha=0.4, hotwords=[hot] * n, hotword_weight=0.8)]


@pytest.mark.parametrize("seed", range(12))
def test_fed_in_random_chunks_the_results_equal_decoding_at_once(seed):
    rng, lp, lengths = case(seed)
    n = lp.shape[0]
    for kw in kinds(rng, n):
        common = dict(blank=0, beam_size=6, n_best=3, vocabulary=TOKENS, frame_duration=0.02, **kw)
        want = ctc_beam_search(lp, lengths, **common)
        stream = CTCStream(n, len(TOKENS), **common)
        fed = np.zeros(n, dtype=np.int64)
        for chunk, sizes in chunks_of(rng, lp, lengths):
            partial = stream.feed(chunk, sizes)
            fed += sizes
            so_far = ctc_beam_search(lp[:, : int(fed.max(initial=0))], fed, **common)
            same(partial, so_far)  # the hypotheses so far are those of the frames so far
        same(stream.finish(), want)


def test_one_frame_at_a_time_with_torch_chunks_and_max_frames():
    torch = pytest.importorskip("torch")
    rng, lp, lengths = case(99)
    lp = log_softmax(rng.normal(size=(2, 9, len(TOKENS))))
    want = ctc_beam_search(lp, blank=0, beam_size=4, n_best=2, vocabulary=TOKENS)
    stream = CTCStream(2, len(TOKENS), blank=0, beam_size=4, n_best=2, vocabulary=TOKENS, max_frames=9)
    for t in range(9):
        assert stream.feed(torch.tensor(lp[:, t : t + 1]), partial=False) is None
    same(stream.finish(), want)
    with pytest.raises(ValueError, match="utterance 0 would have 3 frames, more than max_frames=2"):
        CTCStream(2, len(TOKENS), blank=0, beam_size=4, max_frames=2).feed(lp[:, :3])


def test_no_frames_and_bad_use():
    stream = CTCStream(2, 3, blank=0, beam_size=2, vocabulary=["<pad>", "a", "|"])
    assert [[h.tokens for h in u] for u in stream.hypotheses()] == [[[]], [[]]]
    stream.feed(np.zeros((2, 0, 3)))
    with pytest.raises(ValueError, match=r"emissions must be \[N=2, t, V=3\]; got shape \(2, 4, 5\)"):
        stream.feed(np.zeros((2, 4, 5)))
    with pytest.raises(ValueError, match=r"lengths\[1\] must be in \[0, T=1\]; got 2"):
        stream.feed(np.zeros((2, 1, 3)), [1, 2])
    stream.finish()
    with pytest.raises(RuntimeError, match="this CTCStream is finished"):
        stream.feed(np.zeros((2, 1, 3)))
    with pytest.raises(ValueError, match="batch_size must be >= 0; got -1"):
        CTCStream(-1, 3, blank=0, beam_size=2)
    with pytest.raises(ValueError, match=r"blank must be a label id in \[0, V=3\); got 3"):
        CTCStream(1, 3, blank=3, beam_size=2)
