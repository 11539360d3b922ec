"""CTC greedy decoding (beamsearch.speech.ctc_greedy, the best path) against a plain loop over the
frames written here, the most probable of every alignment enumerated (tests/oracles/ctc.py), and a
plain Viterbi for the labels' frames (the beam search's timestamps)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.speech import CTCHypothesis, Vocabulary, ctc_beam_search, ctc_greedy
from oracles.ctc import alignments, collapse, log_softmax, runs, viterbi


def plain_best_path(lp: np.ndarray, blank: int) -> tuple[list[int], list[tuple[int, int]], float]:
    """One frame at a time: the label of the largest log-prob (the first of equals: the lowest id),
    a label equal to the frame before's merged into its run, blanks dropped; the path's log-prob."""
    labels, frames, score, prev = [], [], 0.0, None
    for t in range(lp.shape[0]):
        best = 0
        for v in range(1, lp.shape[1]):
            if lp[t, v] > lp[t, best]:
                best = v
        score += float(lp[t, best])
        if best != blank and best == prev:
            frames[-1] = (frames[-1][0], t)
        elif best != blank:
            labels.append(best)
            frames.append((t, t))
        prev = best
    return labels, frames, score


def test_the_best_path_of_random_batches_equals_the_plain_loop():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, frames, vocab = int(rng.integers(1, 5)), int(rng.integers(1, 12)), int(rng.integers(2, 6))
        x = rng.normal(size=(n, frames, vocab)) * float(rng.choice([0.5, 3.0]))
        lengths = rng.integers(0, frames + 1, size=n)
        blank = int(rng.integers(0, vocab))
        got = ctc_greedy(x, lengths, blank=blank)
        assert len(got) == n and all(isinstance(h, CTCHypothesis) for h in got)
        for i, h in enumerate(got):
            lp = log_softmax(x[i, : lengths[i]])
            labels, spans, score = plain_best_path(lp, blank)
            assert h.tokens == labels
            assert h.token_frames.tolist() == [list(s) for s in spans] and h.token_frames.dtype == np.int64
            assert h.score == h.acoustic_score == pytest.approx(score, abs=1e-9)
            assert (h.hotword_bonus, h.lm_score, h.word_score, h.text, h.words) == (0.0, 0.0, 0.0, None, None)


def test_ties_go_to_the_lowest_label_id_as_the_plain_loop_takes_them():
    """Emissions of 0s and 1s tie at almost every frame: the first maximum (the lowest id) wins,
    so a frame tied between the blank (id 0 here) and a label is a blank."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        frames, vocab = int(rng.integers(1, 10)), int(rng.integers(2, 5))
        x = rng.integers(0, 2, size=(1, frames, vocab)).astype(np.float64)
        for blank in (0, vocab - 1):
            h = ctc_greedy(x, blank=blank)[0]
            labels, spans, score = plain_best_path(log_softmax(x[0]), blank)
            assert h.tokens == labels and h.token_frames.tolist() == [list(s) for s in spans]
            assert h.score == pytest.approx(score, abs=1e-12)
    tied = np.log(np.array([[[0.4, 0.4, 0.2], [0.2, 0.4, 0.4], [0.3, 0.3, 0.4]]]))
    assert ctc_greedy(tied, blank=0)[0].tokens == [1, 2]  # blank (0) over 1, then 1 over 2, then 2
    assert ctc_greedy(tied, blank=2)[0].tokens == [0, 1]


def test_its_labels_are_those_of_the_most_probable_of_every_alignment():
    rng = np.random.default_rng(2)
    for _ in range(150):
        frames, vocab = int(rng.integers(1, 6)), int(rng.integers(2, 4))
        lp = log_softmax(rng.normal(size=(frames, vocab)) * 2.0)
        blank = int(rng.integers(0, vocab))
        every = alignments(frames, vocab, blank)[0].tolist()  # [A, T]: every alignment
        best = max(every, key=lambda a: sum(lp[t, v] for t, v in enumerate(a)))
        h = ctc_greedy(lp[None], blank=blank)[0]
        assert tuple(h.tokens) == collapse(best, blank)
        assert h.score == pytest.approx(sum(lp[t, v] for t, v in enumerate(best)), abs=1e-9)


def test_word_times_and_confidence_are_the_beam_searchs_rule_on_the_best_path():
    """The frames of each label are those of the best alignment of its labels (a plain Viterbi, the
    beam search's timestamps: the best path is that alignment), the words' times and confidence as
    docs/speech.md states them, computed here."""
    rng = np.random.default_rng(3)
    vocab = Vocabulary(["_", "a", "b", "|"])
    for _ in range(100):
        frames = int(rng.integers(1, 16))
        lp = log_softmax(rng.normal(size=(frames, 4)) * 3.0)
        h = ctc_greedy(lp[None], blank=0, vocabulary=vocab, frame_duration=0.04)[0]
        assert [tuple(r) for r in h.token_frames.tolist()] == runs(viterbi(lp, h.tokens, 0), 0)
        words, cur = [], []
        for k, y in enumerate(h.tokens + [3]):  # "|" ends a word
            if y == 3:
                if cur:
                    words.append(cur)
                cur = []
            else:
                cur.append(k)
        assert h.text == " ".join("".join("_ab|"[h.tokens[k]] for k in w) for w in words)
        assert h.words is not None and len(h.words) == len(words)
        for w, ks in zip(h.words, words, strict=True):
            first, last = int(h.token_frames[ks[0], 0]), int(h.token_frames[ks[-1], 1])
            assert (w.start_frame, w.end_frame) == (first, last)
            assert w.start == pytest.approx(first * 0.04) and w.end == pytest.approx((last + 1) * 0.04)
            probs = [math.exp(lp[t, h.tokens[k]]) for k in ks
                     for t in range(h.token_frames[k, 0], h.token_frames[k, 1] + 1)]
            assert w.confidence == pytest.approx(min(probs))


def test_one_frame_per_label_is_also_the_beam_searchs_answer():
    """Where one alignment holds all the probability (one-hot frames), the best path, the prefix
    beam search and the plain loop agree on labels, score and frames."""
    path = [1, 1, 0, 2, 2, 2, 0, 2, 1]
    lp = np.log(np.eye(3)[path] * (1 - 3e-9) + 1e-9)[None]
    got, beam = ctc_greedy(lp, blank=0)[0], ctc_beam_search(lp, blank=0, beam_size=4)[0][0]
    assert got.tokens == beam.tokens == [1, 2, 2, 1]
    assert got.token_frames.tolist() == beam.token_frames.tolist() == [[0, 1], [3, 5], [7, 7], [8, 8]]
    assert got.score == pytest.approx(beam.score, abs=1e-6)


def test_torch_emissions_and_lengths_give_the_numpy_answer():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).normal(size=(3, 7, 5)).astype(np.float32)
    lengths = [7, 0, 4]
    want = ctc_greedy(x, lengths, blank=4)
    got = ctc_greedy(torch.from_numpy(x), torch.tensor(lengths), blank=4)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.token_frames.tolist() == w.token_frames.tolist()
        assert g.score == pytest.approx(w.score, abs=1e-5)
    assert got[1].tokens == [] and got[1].score == 0.0 and got[1].token_frames.shape == (0, 2)


def test_padding_past_an_utterances_length_is_never_read():
    x = np.random.default_rng(5).normal(size=(2, 6, 3))
    padded = x.copy()
    padded[0, 3:] = np.nan
    want = ctc_greedy(x[:1, :3], blank=0)[0]
    got = ctc_greedy(padded, [3, 6], blank=0)[0]
    assert got.tokens == want.tokens and got.score == pytest.approx(want.score)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"blank": 5}, ValueError, r"blank must be a label id in \[0, V=3\); got 5"),
    ({"blank": 0, "lengths": [4]}, ValueError, r"lengths\[0\] must be in \[0, T=2\]; got 4"),
    ({"blank": 0, "vocabulary": ["a", "b"]}, ValueError, r"vocabulary must have one token per label \(V=3\)"),
    ({"blank": 0, "frame_duration": 0.0}, ValueError, "frame_duration"),
])
def test_bad_arguments_name_the_parameter(kwargs, error, message):
    with pytest.raises(error, match=message):
        ctc_greedy(np.zeros((1, 2, 3)), **kwargs)
    with pytest.raises(ValueError, match=r"emissions\[0, 1\] must hold no NaN"):
        ctc_greedy(np.array([[[0.0, 1.0], [np.nan, np.nan]]]), blank=0)
