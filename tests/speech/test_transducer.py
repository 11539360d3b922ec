"""Transducer (RNN-T, TDT) greedy and beam search against plain references (tests/oracles/transducer.py):
every alignment enumerated, the forward algorithm, a one-step-at-a-time greedy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.speech import transducer_beam_search, transducer_greedy
from oracles.transducer import TinyTransducer, brute_force, forward, greedy

CASES = [(None, 1), (None, 2), (None, 3), ([0, 1, 2], 2), ([1, 2], 1), ([0, 2], 3)]


def decode(model, method=None, beam=4000, m=2, **kw):
    fns = dict(predictor=model.predictor, joint=model.joint, blank=model.blank, state=model.state0(),
               durations=model.durations, max_symbols_per_frame=m)
    if method is None:
        return transducer_greedy(model.enc, kw.pop("lengths", None), **fns, **kw)
    return transducer_beam_search(model.enc, kw.pop("lengths", None), **fns, beam_size=beam,
                                  n_best=kw.pop("n_best", beam), method=method, **kw)


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_brute_force_equals_forward(durations, m, seed):
    model = TinyTransducer.make(seed, n=1, frames=3, durations=durations)
    every = brute_force(model, 0, 3, m)
    assert len(every) > 5
    for labels, logp in every.items():
        assert forward(model, 0, 3, labels, m) == pytest.approx(logp, abs=1e-9)
    assert forward(model, 0, 3, (1, 1, 1, 1, 1, 1, 1, 1, 1, 1), m) == -math.inf  # more labels than can fit


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("method", ["modified", "alsd"])
def test_exhaustive_beam_is_the_exact_ranking(durations, m, method):
    model = TinyTransducer.make(3, n=2, frames=3, durations=durations)
    results = decode(model, method, m=m, lengths=np.array([3, 2]))
    for u, frames in enumerate([3, 2]):
        want = {k: v for k, v in brute_force(model, u, frames, m).items() if v > -math.inf}
        got = {tuple(h.tokens): h.acoustic_score for h in results[u]}
        assert set(got) == set(want)
        for labels, score in got.items():
            assert score == pytest.approx(want[labels], abs=1e-9)
            assert score == pytest.approx(forward(model, u, frames, labels, m), abs=1e-9)
        scores = [h.score for h in results[u]]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_rnnt_probabilities_sum_to_one(m):
    """Every RNN-T path ends (blank or forced move at the last frame): nothing is lost."""
    model = TinyTransducer.make(5, n=1, frames=3)
    total = np.logaddexp.reduce([h.acoustic_score for h in decode(model, "alsd", m=m)[0]])
    assert total == pytest.approx(0.0, abs=1e-9)


def test_tdt_blank_duration_zero_is_lost_and_steps_overshoot():
    """One frame, durations [0, 2]: the empty sequence's only path is a blank of duration 2,
    which overshoots the last frame and counts; a blank of duration 0 never does (hand rule:
    P(empty) = P(blank) P(d=2), not renormalized)."""
    model = TinyTransducer.make(7, n=1, frames=1, durations=[0, 2])
    tok, dur = model.emission(0, 0, ())
    got = {tuple(h.tokens): h.acoustic_score for h in decode(model, "alsd", m=2)[0]}
    assert got[()] == pytest.approx(tok[0] + dur[1], abs=1e-12)
    # a label of duration 0 then the blank of duration 2: the label's path, also overshooting
    assert got[(1,)] == pytest.approx(np.logaddexp(tok[1] + dur[1], tok[1] + dur[0] + model.emission(0, 0, (1,))[0][0]
                                                    + model.emission(0, 0, (1,))[1][1]), abs=1e-12)


@pytest.mark.parametrize("durations,m", CASES)
def test_greedy_equals_plain_greedy(durations, m):
    model = TinyTransducer.make(11, n=3, frames=4, durations=durations, scale=2.0)
    lengths = np.array([4, 0, 3])
    for u, h in enumerate(decode(model, None, m=m, lengths=lengths)):
        labels, frames = greedy(model, u, int(lengths[u]), m)
        assert h.tokens == labels and h.token_frames.tolist() == frames


@pytest.mark.parametrize("seed", range(4))
def test_modified_beam_one_is_greedy_one_label_per_frame(seed):
    model = TinyTransducer.make(seed, n=3, frames=6, vocab=5, dim=6, scale=2.0)
    beam = decode(model, "modified", beam=1, m=1)
    for g, b in zip(decode(model, None, m=1), beam, strict=True):
        assert b[0].tokens == g.tokens and b[0].token_frames.tolist() == g.token_frames.tolist()
        assert b[0].acoustic_score == pytest.approx(g.acoustic_score, abs=1e-9)


@pytest.mark.parametrize("durations", [None, [0, 1, 2, 3]])
@pytest.mark.parametrize("method", ["modified", "alsd"])
def test_batch_independence(durations, method):
    model = TinyTransducer.make(2, n=3, frames=6, vocab=5, dim=6, durations=durations, scale=2.0)
    lengths = np.array([6, 3, 5])
    batch = decode(model, method, beam=3, n_best=3, m=2, lengths=lengths)
    for u in range(3):
        one = TinyTransducer(model.enc[u : u + 1], model.W, model.E, model.A, model.B, 0, durations)
        alone = decode(one, method, beam=3, n_best=3, m=2, lengths=lengths[u : u + 1])[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch[u]]
        assert [h.token_frames.tolist() for h in alone] == [h.token_frames.tolist() for h in batch[u]]
        np.testing.assert_allclose([h.score for h in alone], [h.score for h in batch[u]], atol=1e-9)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_numpy_equals_torch(durations):
    torch = pytest.importorskip("torch")
    model = TinyTransducer.make(4, n=2, frames=5, vocab=4, dim=5, durations=durations)
    t = {k: torch.tensor(getattr(model, k)) for k in ("enc", "W", "E", "A", "B")}

    def predictor(state, y):
        assert isinstance(y, torch.Tensor)
        h = torch.tanh(state @ t["W"] + t["E"][y])
        return h, h

    def joint(enc, pred):
        return enc @ t["A"] + pred @ t["B"]

    for method in ("modified", "alsd"):
        want = decode(model, method, beam=5, n_best=5, m=2)
        got = transducer_beam_search(t["enc"], predictor=predictor, joint=joint, blank=0, beam_size=5, n_best=5,
                                     method=method, state=torch.zeros(2, 5, dtype=torch.float64),
                                     durations=durations, max_symbols_per_frame=2)
        for w, g in zip(want, got, strict=True):
            assert [h.tokens for h in w] == [h.tokens for h in g]
            np.testing.assert_allclose([h.score for h in w], [h.score for h in g], atol=1e-9)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_scores_equal_forward_when_nothing_pruned(durations):
    """A beam wider than every candidate set: each returned score is the forward algorithm's."""
    model = TinyTransducer.make(9, n=1, frames=4, durations=durations)
    for h in decode(model, "alsd", beam=6000, n_best=20, m=1)[0]:
        assert h.acoustic_score == pytest.approx(forward(model, 0, 4, h.tokens, 1), abs=1e-9)


@pytest.mark.parametrize("durations", [None, [0, 1, 2, 3]])
@pytest.mark.parametrize("method", ["modified", "alsd"])
def test_greedy_and_beam_agree_on_frames(durations, method):
    """Where the beam's best labels are greedy's, so are their frames (peaky models)."""
    compared = 0
    for seed in range(12):
        model = TinyTransducer.make(seed, n=2, frames=8, vocab=5, dim=6, durations=durations, scale=4.0)
        for g, b in zip(decode(model, None, m=2), decode(model, method, beam=4, n_best=1, m=2), strict=True):
            if b[0].tokens == g.tokens and g.tokens:
                compared += 1
                assert b[0].token_frames.tolist() == g.token_frames.tolist()
                if durations is not None:
                    assert b[0].token_durations.tolist() == g.token_durations.tolist()
    assert compared >= 10


def test_predictor_called_once_per_distinct_prefix():
    """The state carries each row's utterance and label sequence: no call sees a pair twice."""
    model = TinyTransducer.make(6, n=2, frames=5, vocab=3, durations=[0, 1, 2])
    seen_calls = []

    def predictor(state, y):
        h, who = state
        code = who[:, 1] * 7 + np.asarray(y) + 1
        pairs = list(zip(who[:, 0].tolist(), code.tolist(), strict=True))
        assert len(set(pairs)) == len(pairs)
        seen_calls.append(len(pairs))
        out, _ = model.predictor(h, y)
        return out, (out, np.stack([who[:, 0], code], 1))

    state = (model.state0(), np.stack([np.arange(2), np.zeros(2, np.int64)], 1))
    res = transducer_beam_search(model.enc, predictor=predictor, joint=model.joint, blank=0, beam_size=8,
                                 state=state, durations=[0, 1, 2], method="alsd", max_symbols_per_frame=2)
    assert len(seen_calls) > 3 and res[0]


def test_hotwords_rank_by_acoustic_plus_bonus():
    """The bonus of a completed phrase: weight x its positions; ranking by acoustic + bonus; the
    exhaustive beam's acoustic scores stay the forward algorithm's."""
    model = TinyTransducer.make(3, n=1, frames=3)
    plain = {tuple(h.tokens): h.acoustic_score for h in decode(model, "alsd", m=2)[0]}
    hot = decode(model, "alsd", m=2, hotwords=[[2, 1]], hotword_weight=1.5)[0]
    for h in hot:
        occurrences = sum(1 for i in range(len(h.tokens) - 1) if h.tokens[i : i + 2] == [2, 1])
        covered = {i + d for i in range(len(h.tokens) - 1) if h.tokens[i : i + 2] == [2, 1] for d in (0, 1)}
        assert h.hotword_bonus == pytest.approx(1.5 * len(covered)) and (occurrences > 0) == (h.hotword_bonus > 0)
        assert h.acoustic_score == pytest.approx(plain[tuple(h.tokens)], abs=1e-9)
        assert h.score == pytest.approx(h.acoustic_score + h.hotword_bonus)
    assert [h.score for h in hot] == sorted((h.score for h in hot), reverse=True)


def test_words_and_seconds():
    model = TinyTransducer.make(11, n=1, frames=4, scale=2.0)
    h = decode(model, None, m=2, vocabulary=["_", "a", "|"], frame_duration=0.08)[0]
    assert h.text is not None and h.words is not None
    for w in h.words:
        assert w.start == pytest.approx(w.start_frame * 0.08) and w.end == pytest.approx((w.end_frame + 1) * 0.08)


@pytest.mark.parametrize("kw,match", [
    (dict(method="beam"), "method"), (dict(durations=[0]), "durations"), (dict(durations=[1, 1]), "durations"),
    (dict(max_symbols_per_frame=0), "max_symbols_per_frame"), (dict(beam_size=0), "beam_size"),
    (dict(n_best=5), "n_best"), (dict(blank=-1), "blank")])
def test_bad_arguments(kw, match):
    model = TinyTransducer.make(0, n=1, frames=2)
    args = dict(predictor=model.predictor, joint=model.joint, blank=0, beam_size=2, state=model.state0())
    args.update(kw)
    with pytest.raises((ValueError, TypeError), match=match):
        transducer_beam_search(model.enc, **args)


def test_joint_of_wrong_shape():
    model = TinyTransducer.make(0, n=1, frames=2)
    with pytest.raises(ValueError, match="joint must return logits"):
        transducer_greedy(model.enc, predictor=model.predictor, joint=lambda e, p: model.joint(e, p)[:, :1], blank=1,
                          state=model.state0())


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
@pytest.mark.parametrize("method", ["modified", "alsd"])
def test_token_cut_is_lossless(durations, method):
    """Without hotwords each row's candidates come from its 2 x beam + 1 best tokens; with a
    hotword of weight 0 (no cut, no bonus) the results are the same."""
    model = TinyTransducer.make(8, n=8, frames=6, vocab=12, dim=6, durations=durations, scale=0.3)
    cut = decode(model, method, beam=3, n_best=3, m=2)
    full = decode(model, method, beam=3, n_best=3, m=2, hotwords=[[1]], hotword_weight=0.0)
    for a, b in zip(cut, full, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-12)


def test_vocabulary_of_wrong_size():
    model = TinyTransducer.make(0, n=1, frames=2)
    for fn, extra in ((transducer_greedy, {}), (transducer_beam_search, {"beam_size": 2})):
        with pytest.raises(ValueError, match=r"vocabulary must have one token per label \(V=3\); got 2"):
            fn(model.enc, predictor=model.predictor, joint=model.joint, blank=0, state=model.state0(),
               vocabulary=["_", "a"], **extra)
