"""Lexicon-constrained CTC decoding against every alignment enumerated, with the rule written here
from its statement (docs/speech.md, "Lexicon"): a label sequence is kept when each of its words
(the token strings joined, split at the delimiter and at ``▁``, special tokens no text) is a word
of the lexicon; while decoding, the last word need only be a prefix of one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beamsearch.speech import CTCStream, Lexicon, NgramLM, Vocabulary, ctc_beam_search, transducer_beam_search
from oracles.ctc import brute_force, log_softmax, random_arpa
from oracles.transducer import TinyTransducer
from tests.speech.test_ngram import check_n_best, lm_objective, plain_search
from tests.speech.test_transducer_lm import CASES, case, check, objective

CHARS = ["<pad>", "a", "b", "|"]  # blank 0; "|" ends a word
PIECES = ["<blk>", "\u2581a", "b", "\u2581", "<unk>", "a"]  # blank 0; "<unk>" special: no text, ends nothing
WORDS = ["a", "b", "ab", "ba", "aa", "bb", "aba", "abb", "bab"]


def words_of(labels, tokens) -> list[str]:
    """The words of a label sequence: the tokens' strings (special ones none) joined, split at the
    delimiter and at the ``▁`` marker, empty pieces dropped."""
    text = "".join("" if tokens[t].startswith("<") else tokens[t] for t in labels)
    return text.replace("|", " ").replace("\u2581", " ").split()


def whole(labels, tokens, lexicon) -> bool:
    return all(w in lexicon for w in words_of(labels, tokens))


def spelling(labels, tokens, lexicon) -> bool:
    """While decoding: every word but the last is in the lexicon, the last a prefix of one (the
    last word is unfinished unless the sequence ends with an ending token)."""
    text = "".join("" if tokens[t].startswith("<") else tokens[t] for t in labels)
    pieces = text.replace("|", " ").replace("\u2581", " ").split(" ")
    done, last = [w for w in pieces[:-1] if w], pieces[-1]
    return all(w in lexicon for w in done) and (not last or any(w.startswith(last) for w in lexicon))


def random_lexicon(rng):
    return [w for w in WORDS if rng.random() < 0.5] or ["ab"]


@pytest.mark.parametrize("seed", range(80))
def test_nothing_pruned_the_n_best_equals_brute_force_over_the_lexicon_s_sequences(seed):
    rng = np.random.default_rng(seed)
    tokens = CHARS if seed % 2 else PIECES
    lp = log_softmax(rng.normal(size=(int(rng.integers(1, 7)), len(tokens))) * rng.uniform(0.5, 3))
    if tokens is PIECES:
        lp = lp[: min(lp.shape[0], 5)]  # 6 labels: at most 5 frames keep the enumeration small
    lexicon = random_lexicon(rng)
    want = [(lab, s) for lab, s in brute_force(lp, 0) if whole(lab, tokens, lexicon)]
    got = ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=6, vocabulary=Vocabulary(tokens),
                          lexicon=lexicon)[0]
    check_n_best(got, want, 6)
    for h in got:  # every returned score is the full CTC probability of its labels
        assert np.isclose(h.acoustic_score, dict(brute_force(lp, 0))[tuple(h.tokens)], rtol=1e-9)
        assert all(w.text in lexicon for w in h.words)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_with_an_lm_and_hotwords_the_n_best_equals_brute_force_over_the_lexicon(seed):
    rng = np.random.default_rng(seed)
    lp = log_softmax(rng.normal(size=(int(rng.integers(1, 7)), 4)) * rng.uniform(0.5, 3))
    lexicon = random_lexicon(rng)
    text = random_arpa(rng, int(rng.integers(1, 4)), random_lexicon(rng), 8, unk=bool(rng.random() < 0.5))
    alpha, beta = float(rng.uniform(0, 2)), float(rng.uniform(-2, 3))
    hot = [list(rng.integers(1, 4, size=int(rng.integers(1, 3)))) for _ in range(int(rng.integers(0, 3)))] or None
    weight = float(rng.uniform(0, 3))
    want = [(lab, s) for lab, s in lm_objective(lp, text, alpha, beta, hot, weight) if whole(lab, CHARS, lexicon)]
    got = ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=4, vocabulary=Vocabulary(CHARS),
                          lm=NgramLM.from_lines(text.splitlines()), alpha=alpha, beta=beta, hotwords=hot,
                          hotword_weight=weight, lexicon=lexicon)[0]
    check_n_best(got, want, 4)


def test_narrow_beams_rank_only_prefixes_that_spell_the_lexicon_as_a_plain_search_does():
    """A plain prefix beam search whose candidates are the prefixes the rule allows while
    decoding (the others ranked -inf, never kept ahead of one it allows), and whose finished
    ones must have whole words; the label cut and the bound leave out nothing that can be kept."""
    rng = np.random.default_rng(31)
    for i in range(80):
        tokens = CHARS if i % 2 else ["<pad>", "a", "b", "c", "d", "|"]
        frames, beam = int(rng.integers(1, 12)), int(rng.integers(1, 5))
        x = rng.normal(size=(frames, len(tokens))) * float(rng.choice([1.0, 3.0]))
        lexicon = [w for w in WORDS + ["cd", "dc", "ccd", "d"] if rng.random() < 0.4] or ["ab"]
        got = ctc_beam_search(x[None], blank=0, beam_size=beam, n_best=beam, vocabulary=Vocabulary(tokens),
                              lexicon=lexicon)[0]
        want = plain_search(log_softmax(x), beam, lambda p, t=tokens, w=lexicon: 0.0 if spelling(p, t, w) else -np.inf,
                            lambda p, t=tokens, w=lexicon: 0.0 if whole(p, t, w) else -np.inf)
        want = [(p, s) for p, s in want if s > -np.inf]
        assert [tuple(h.tokens) for h in got] == [p for p, _ in want], i
        assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_a_word_may_be_spelled_by_any_pieces():
    """"ab" is "▁a" then "b", or "▁" "a" "b": both spell the lexicon's word; "▁a" "▁" "b" is "a b"."""
    lex = Lexicon.of(["ab"], Vocabulary(PIECES), 0)
    for labels, ok in [([1, 2], True), ([3, 5, 2], True), ([1, 3, 2], False), ([2], False), ([1, 4, 2], True)]:
        node = np.zeros(1, dtype=np.int64)
        for t in labels:
            node = lex.step(node, np.array([t]))
        assert bool(lex.finished(node)[0]) == ok, labels


def test_hand_computed_the_lexicon_turns_the_best_into_its_word():
    """Frames favour "ba" (0.6 x 0.6 = .36 on the one-label-per-frame alignments) over "ab"
    (.3 x .3 = .09); with the lexicon ["ab"] the best is "ab", scored with its own probability:
    its alignments are "ab" alone (.09), as T = 2 leaves no blank."""
    lp = np.log(np.array([[0.05, 0.3, 0.6, 0.05], [0.05, 0.6, 0.3, 0.05]]))
    plain = ctc_beam_search(lp[None], blank=0, beam_size=16, vocabulary=CHARS)[0][0]
    assert plain.text == "ba"
    best = ctc_beam_search(lp[None], blank=0, beam_size=16, vocabulary=CHARS, lexicon=["ab"])[0][0]
    assert best.text == "ab" and np.isclose(best.score, np.log(0.09))


def test_an_unfinished_last_word_is_not_returned():
    """Lexicon ["aa"], one frame: "a" spells a prefix of "aa" while decoding, but the utterance
    ends there, so only the sequences with no word are left: the empty one and "|"."""
    lp = np.log(np.array([[0.1, 0.7, 0.1, 0.1]]))
    got = ctc_beam_search(lp[None], blank=0, beam_size=16, n_best=8, vocabulary=CHARS, lexicon=["aa"])[0]
    assert sorted(tuple(h.tokens) for h in got) == [(), (3,)]
    assert all(h.text == "" for h in got)
    none = ctc_beam_search(lp[None], blank=0, beam_size=16, vocabulary=CHARS, lexicon=["b"], lengths=[0])[0]
    assert [h.tokens for h in none] == [[]]


def test_batch_independence_streaming_and_numpy_equals_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 14, 4)) * 2
    lengths = np.array([14, 5, 0, 11])
    lex = Lexicon.of(["ab", "ba", "a", "bab"], CHARS, 0)  # token strings or a Vocabulary
    kw = dict(blank=0, beam_size=6, n_best=3, vocabulary=CHARS, lexicon=lex)
    batch = ctc_beam_search(x, lengths, **kw)
    on_torch = ctc_beam_search(torch.tensor(x), torch.tensor(lengths), **kw)
    stream = CTCStream(4, 4, **kw)
    for lo, hi in [(0, 3), (3, 4), (4, 14)]:
        stream.feed(x[:, lo:hi], np.clip(lengths - lo, 0, hi - lo))
    chunked = stream.finish()
    for i in range(4):
        alone = ctc_beam_search(x[i : i + 1, : lengths[i]], **kw)[0]
        assert len(batch[i]) == len(alone) == len(on_torch[i]) == len(chunked[i]) > 0
        for a, b, c, d in zip(batch[i], alone, on_torch[i], chunked[i], strict=True):
            assert a.tokens == b.tokens == c.tokens == d.tokens
            assert np.isclose(a.score, b.score, rtol=1e-9) and np.isclose(a.score, c.score, rtol=1e-9)
            assert np.isclose(a.score, d.score, rtol=1e-9)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(lexicon=["ab"]), ValueError, ["lexicon", "vocabulary"]),
    (dict(lexicon="ab", vocabulary=CHARS), TypeError, ["lexicon", "'ab'"]),
    (dict(lexicon=["ab", "a b"], vocabulary=CHARS), ValueError, ["lexicon[1]", "'a b'"]),
    (dict(lexicon=["ab", ""], vocabulary=CHARS), ValueError, ["lexicon[1]", "''"]),
    (dict(lexicon=[3], vocabulary=CHARS), ValueError, ["lexicon[0]", "3"]),
    (dict(lexicon=Lexicon.of(["ab"], Vocabulary(PIECES), 0), vocabulary=CHARS), ValueError, ["6 labels", "V=4"]),
])
def test_bad_lexicons_name_the_parameter_and_the_value(kwargs, error, words):
    with pytest.raises(error) as info:
        ctc_beam_search(np.zeros((1, 2, 4)), blank=0, beam_size=2, **kwargs)
    for w in words:
        assert w in str(info.value)


# ---- the transducer search: the same lexicon term (speech.lexicon) on its candidates ----


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("method", ["modified", "alsd"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transducer_nothing_pruned_is_brute_force_over_the_lexicon_s_sequences(durations, m, method, seed):
    """Every alignment enumerated (tests/oracles/transducer.py), the LM terms added, and only the
    label sequences whose words are all in the lexicon kept: the exhaustive beam's results."""
    rng, text, alpha, beta = case(seed)
    lexicon = random_lexicon(rng)
    model = TinyTransducer.make(seed, n=2, frames=3, vocab=4, durations=durations, scale=1.5)
    lengths = np.array([3, 2])
    res = transducer_beam_search(model.enc, lengths, predictor=model.predictor, joint=model.joint, blank=0,
                                 state=model.state0(), durations=durations, max_symbols_per_frame=m, beam_size=4000,
                                 n_best=4000, method=method, vocabulary=Vocabulary(CHARS),
                                 lm=NgramLM.from_lines(text.splitlines()), alpha=alpha, beta=beta, lexicon=lexicon)
    for u in range(2):
        ranked = [r for r in objective(model, u, int(lengths[u]), m, text, alpha, beta) if whole(r[0], CHARS, lexicon)]
        check(res[u], ranked, text, alpha, beta)


def test_transducer_batch_independence_with_a_lexicon():
    model = TinyTransducer.make(7, n=3, frames=7, vocab=4, dim=5, durations=[0, 1, 2], scale=2.0)
    lengths = np.array([7, 4, 6])
    kw = dict(predictor=model.predictor, joint=model.joint, blank=0, durations=[0, 1, 2], beam_size=5, n_best=3,
              method="alsd", max_symbols_per_frame=2, vocabulary=CHARS, lexicon=["ab", "b", "ba"])
    batch = transducer_beam_search(model.enc, lengths, state=model.state0(), **kw)
    for i in range(3):
        alone = transducer_beam_search(model.enc[i : i + 1, : lengths[i]], state=model.state0()[i : i + 1], **kw)[0]
        assert [h.tokens for h in batch[i]] == [h.tokens for h in alone] and alone
        assert [h.score for h in batch[i]] == pytest.approx([h.score for h in alone], rel=1e-9)
        assert all(w.text in ["ab", "b", "ba"] for h in alone for w in h.words)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_transducer_narrow_beams_keep_only_hypotheses_inside_the_lexicon(durations):
    """Lexicon ["a", "b"]: every prefix inside it is also a whole answer, so a beam of 1 or 2 that
    keeps only such prefixes always returns one; a search that checked the lexicon only at the
    end would lose its few hypotheses to words like "ab" and return nothing on some of these."""
    for seed in range(20):
        model = TinyTransducer.make(seed, n=2, frames=6, vocab=4, dim=5, durations=durations, scale=2.0)
        for beam in (1, 2):
            res = transducer_beam_search(model.enc, predictor=model.predictor, joint=model.joint, blank=0,
                                         state=model.state0(), durations=durations, beam_size=beam, method="alsd",
                                         max_symbols_per_frame=2, vocabulary=CHARS, lexicon=["a", "b"])
            for hyps in res:
                assert hyps and all(w.text in ("a", "b") for w in hyps[0].words), (seed, beam)
