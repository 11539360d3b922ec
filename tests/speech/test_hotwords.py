"""Hotwords in CTC beam search, against plain references written from the documented rule
(docs/speech.md): every occurrence of every phrase found by comparing slices, independent of
the trie."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech import Vocabulary, ctc_beam_search
from beamsearch.speech.hotwords import compile_lists
from oracles.ctc import brute_force, log_softmax

WIDE = 1100  # more than the 1093 prefixes of up to 6 labels over 3 labels: nothing is pruned


def covered(labels, phrases) -> set[int]:
    """The positions inside some completed occurrence of some phrase."""
    out: set[int] = set()
    for ph in phrases:
        for i in range(len(labels) - len(ph) + 1):
            if tuple(labels[i : i + len(ph)]) == tuple(ph):
                out.update(range(i, i + len(ph)))
    return out


def final_positions(labels, phrases) -> int:
    return len(covered(labels, phrases))


def decoding_positions(labels, phrases) -> int:
    """Completed occurrences plus the match in progress: the longest suffix that is a prefix of
    some phrase."""
    n = len(labels)
    match = max((k for k in range(n + 1) for ph in phrases if k <= len(ph) and
                 tuple(labels[n - k :]) == tuple(ph[:k])), default=0)
    return len(covered(labels, phrases) | set(range(n - match, n)))


def random_phrases(rng, labels: int, count: int, longest: int = 4):
    """Phrases over labels 1..labels, with prefixes of one another and repeats thrown in."""
    out = []
    for _ in range(count):
        if out and rng.random() < 0.3:
            base = out[int(rng.integers(len(out)))]
            out.append(base[: int(rng.integers(1, len(base) + 1))])  # a prefix of another phrase
        else:
            out.append(tuple(int(t) for t in rng.integers(1, labels + 1, size=int(rng.integers(1, longest + 1)))))
    return out


def walk(hw, labels, row=0):
    """The compiled automaton's counts after each label: (while decoding, final)."""
    node, mask, done = (np.array([v]) for v in (hw.starts[row], 0, 0))
    out = []
    for t in labels:
        node, mask, done = hw.step(node, mask, done, np.array([t]))
        out.append((int(hw.count(node, mask, done)[0]), int(done[0])))
    return out


def test_the_two_documented_examples():
    hw = compile_lists([((1, 1),)], 1.0, 3)  # a phrase "a a" over "a a a": every position earns
    assert walk(hw, [1, 1, 1]) == [(1, 0), (2, 2), (3, 3)]
    hw = compile_lists([((1, 2), (1, 2, 3, 4))], 1.0, 5)  # "a b" is a prefix of "a b c d"
    assert walk(hw, [1, 2, 3, 1]) == [(1, 0), (2, 2), (3, 2), (3, 2)]  # "c" earns, then is taken back
    assert walk(hw, [1, 2, 3, 4]) == [(1, 0), (2, 2), (3, 2), (4, 4)]


def test_the_automaton_equals_the_plain_rule_on_hundreds_of_random_phrase_lists():
    rng = np.random.default_rng(0)
    for _ in range(400):
        labels = int(rng.integers(1, 4))
        phrases = random_phrases(rng, labels, int(rng.integers(1, 6)))
        hw = compile_lists([tuple(phrases)], 1.0, labels + 1)
        seq = [int(t) for t in rng.integers(1, labels + 1, size=int(rng.integers(1, 14)))]
        want = [(decoding_positions(seq[: i + 1], phrases), final_positions(seq[: i + 1], phrases))
                for i in range(len(seq))]
        assert walk(hw, seq) == want, (phrases, seq)


def test_every_returned_bonus_equals_the_plain_rule():
    rng = np.random.default_rng(1)
    for _ in range(150):
        vocab, frames = int(rng.integers(2, 6)), int(rng.integers(1, 12))
        x = rng.normal(size=(2, frames, vocab)) * 3
        phrases = random_phrases(rng, vocab - 1, int(rng.integers(1, 5)))
        weight = float(rng.choice([0.5, 2.0, 7.0]))
        got = ctc_beam_search(x, blank=0, beam_size=int(rng.integers(1, 9)), n_best=1, hotwords=phrases,
                              hotword_weight=weight)
        for hyps in got:
            for h in hyps:
                assert h.hotword_bonus == pytest.approx(weight * final_positions(h.tokens, phrases), abs=1e-9)
                assert h.score == pytest.approx(h.acoustic_score + h.hotword_bonus, abs=1e-9)


def brute_with_bonus(lp, blank, phrases, weight):
    return sorted(((seq, s + weight * final_positions(seq, phrases)) for seq, s in brute_force(lp, blank)),
                  key=lambda pair: -pair[1])


def test_nothing_pruned_the_n_best_equals_brute_force_with_the_final_bonus():
    """While decoding a partial match lifts a prefix, but a wide beam keeps every prefix, so the
    final ranking (acoustic + bonus of completed occurrences) is exact."""
    rng = np.random.default_rng(2)
    for _ in range(200):
        vocab, frames = int(rng.integers(2, 5)), int(rng.integers(1, 7))
        x = rng.normal(size=(frames, vocab)) * float(rng.choice([0.5, 2.0, 5.0]))
        phrases = random_phrases(rng, vocab - 1, int(rng.integers(1, 4)), longest=3)
        weight, n_best = float(rng.choice([0.3, 1.0, 4.0])), int(rng.integers(1, 6))
        got = ctc_beam_search(x[None], blank=0, beam_size=WIDE, n_best=n_best, hotwords=phrases,
                              hotword_weight=weight)[0]
        want = brute_with_bonus(log_softmax(x), 0, phrases, weight)[:n_best]
        assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-6)
        assert [tuple(h.tokens) for h in got] == [seq for seq, _ in want]
        plain = dict(brute_force(log_softmax(x), 0))
        assert [h.acoustic_score for h in got] == pytest.approx([plain[tuple(h.tokens)] for h in got], abs=1e-6)


def test_per_utterance_lists_and_batch_independence():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 15, 5)) * 2
    lengths = np.array([15, 7, 0, 12])
    lists = [[(1, 2)], [], [(3,)], [(2, 2), (4, 1, 4)]]
    kw = dict(blank=0, beam_size=6, n_best=3, hotword_weight=2.5)
    batch = ctc_beam_search(x, lengths, hotwords=lists, **kw)
    for i in range(4):
        alone = ctc_beam_search(x[i : i + 1, : lengths[i]], hotwords=lists[i] or None, **kw)[0]
        assert [h.tokens for h in batch[i]] == [h.tokens for h in alone]
        assert [h.score for h in batch[i]] == pytest.approx([h.score for h in alone], abs=1e-12)
        for h in batch[i]:
            assert h.hotword_bonus == pytest.approx(2.5 * final_positions(h.tokens, lists[i]))
    shared = ctc_beam_search(x, lengths, hotwords=[(1, 2)], **kw)
    each = ctc_beam_search(x, lengths, hotwords=[[(1, 2)]] * 4, **kw)
    assert [[h.tokens for h in hs] for hs in shared] == [[h.tokens for h in hs] for hs in each]


def test_a_bonus_changes_the_best_and_weight_zero_changes_nothing():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 20, 6)) * 2
    kw = dict(blank=0, beam_size=8, n_best=4)
    plain = ctc_beam_search(x, **kw)
    zero = ctc_beam_search(x, hotwords=[(1, 2), (3, 3, 4)], hotword_weight=0.0, **kw)
    for a, b in zip(plain, zero, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-12)
        assert all(h.hotword_bonus == 0.0 for h in b)
    boosted = ctc_beam_search(x, hotwords=[(5, 5, 5)], hotword_weight=20.0, **kw)
    assert all(h.hotword_bonus > 0 for hs in boosted for h in hs[:1])


def test_numpy_and_torch_emissions_agree():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 25, 7)) * 3
    kw = dict(blank=2, beam_size=8, n_best=3, hotwords=[(1, 3), (3, 4, 1)], hotword_weight=3.0)
    a, b = ctc_beam_search(x, **kw), ctc_beam_search(torch.from_numpy(x), **kw)
    for ha, hb in zip(a, b, strict=True):
        assert [h.tokens for h in ha] == [h.tokens for h in hb]
        assert [h.score for h in ha] == pytest.approx([h.score for h in hb], abs=1e-9)


def test_text_phrases_in_a_character_vocabulary():
    vocab = Vocabulary(["<pad>", "|", "a", "b", "c"])
    rng = np.random.default_rng(6)
    x = rng.normal(size=(1, 12, 5))
    got = ctc_beam_search(x, blank=0, beam_size=4, vocabulary=vocab, hotwords=["ab c"], hotword_weight=1.0)
    ids = ctc_beam_search(x, blank=0, beam_size=4, hotwords=[(2, 3, 1, 4)], hotword_weight=1.0)
    assert got[0][0].tokens == ids[0][0].tokens and got[0][0].score == ids[0][0].score


@pytest.mark.parametrize("kwargs, error, words", [
    ({"hotword_weight": -1.0}, ValueError, ["hotword_weight", "-1.0"]),
    ({"hotword_weight": float("inf")}, ValueError, ["hotword_weight", "inf"]),
    ({"hotwords": "ab"}, TypeError, ["hotwords", "'ab'"]),
    ({"hotwords": [(1, 5)]}, ValueError, ["hotwords[0][1]", "V=3", "5"]),
    ({"hotwords": [(1, 0)]}, ValueError, ["hotwords[0][1]", "blank", "0"]),
    ({"hotwords": [(1,), ()]}, ValueError, ["hotwords[1]", "1 to 62"]),
    ({"hotwords": [(1,) * 63]}, ValueError, ["hotwords[0]", "1 to 62"]),
    ({"hotwords": [[(1,)]]}, ValueError, ["hotwords", "N=2", "1"]),
    ({"hotwords": [[(1,)], [(1.5,)]]}, TypeError, ["hotwords[1][0][0]", "1.5"]),
    ({"hotwords": ["ab"]}, ValueError, ["hotwords[0]", "vocabulary"]),
])
def test_bad_arguments_name_the_parameter_and_the_value(kwargs, error, words):
    with pytest.raises(error) as info:
        ctc_beam_search(np.zeros((2, 3, 3)), blank=0, beam_size=4, **kwargs)
    for word in words:
        assert word in str(info.value)


def plain_search_with_bonus(lp, blank, beam, phrases, weight):
    """A plain prefix beam search (a dict of prefixes, one label at a time) ranking each frame's
    prefixes by acoustic + the bonus while decoding; the final ones by acoustic + final bonus."""
    beams = {(): (0.0, -np.inf)}
    rank = lambda kv: -(np.logaddexp(*kv[1]) + weight * decoding_positions(kv[0], phrases))  # noqa: E731
    for t in range(lp.shape[0]):
        nxt: dict = {}
        for prefix, (pb, pnb) in beams.items():
            entry = nxt.setdefault(prefix, [-np.inf, -np.inf])
            entry[0] = np.logaddexp(entry[0], np.logaddexp(pb, pnb) + lp[t, blank])
            if prefix:
                entry[1] = np.logaddexp(entry[1], pnb + lp[t, prefix[-1]])
            for c in range(lp.shape[1]):
                if c != blank:
                    child = nxt.setdefault(prefix + (c,), [-np.inf, -np.inf])
                    base = pb if prefix and prefix[-1] == c else np.logaddexp(pb, pnb)
                    child[1] = np.logaddexp(child[1], base + lp[t, c])
        beams = {p: tuple(v) for p, v in sorted(nxt.items(), key=rank)[:beam] if np.logaddexp(*v) > -np.inf}
    final = [(p, np.logaddexp(*v) + weight * final_positions(p, phrases)) for p, v in beams.items()]
    return sorted(final, key=lambda pair: -pair[1])


def assert_as_plain_search(x, beam, phrases, weight):
    """The search's n-best (n = beam) of one utterance ``x`` [T, V] equals the plain search's."""
    got = ctc_beam_search(x[None], blank=0, beam_size=beam, n_best=beam, hotwords=phrases,
                          hotword_weight=weight)[0]
    want = plain_search_with_bonus(log_softmax(x), 0, beam, phrases, weight)
    assert [tuple(h.tokens) for h in got] == [p for p, _ in want]
    assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_narrow_beams_rank_by_the_bonus_while_decoding_as_a_plain_search_does():
    """A partial match lifts its prefix while decoding (and may keep it in a narrow beam); the
    search's ranking shortcuts leave out only extensions that cannot be kept, bonus included."""
    rng = np.random.default_rng(7)
    for _ in range(120):
        vocab, frames, beam = int(rng.integers(2, 7)), int(rng.integers(1, 16)), int(rng.integers(1, 6))
        x = rng.normal(size=(frames, vocab)) * float(rng.choice([1.0, 3.0]))
        phrases = random_phrases(rng, vocab - 1, int(rng.integers(1, 5)))
        weight = float(rng.choice([0.5, 2.0, 6.0]))
        assert_as_plain_search(x, beam, phrases, weight)


def test_narrow_beams_over_many_labels_and_phrases_rank_as_a_plain_search_does():
    """With more labels than twice the beam, a frame's labels are cut per class (those that start
    a phrase, the others) and each slot's own transitions are added: still the plain search's
    beams, for many phrases (most labels start one) and few."""
    rng = np.random.default_rng(11)
    for _ in range(60):
        vocab, frames, beam = int(rng.integers(8, 17)), int(rng.integers(1, 9)), int(rng.integers(1, 4))
        x = rng.normal(size=(frames, vocab)) * float(rng.choice([1.0, 3.0]))
        phrases = random_phrases(rng, vocab - 1, int(rng.choice([2, 20])), longest=3)
        weight = float(rng.choice([0.5, 2.0, 6.0]))
        assert_as_plain_search(x, beam, phrases, weight)
