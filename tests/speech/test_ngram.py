"""Word n-gram LMs (ARPA) and their fusion in CTC beam search, against independent oracles:
kenlm's ``full_scores``, a dict-based back-off scorer (tests/oracles/ctc.py PlainLM), hand-computed values,
and enumeration of every alignment with the LM terms added per label sequence."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beamsearch.speech import NgramLM, Vocabulary, ctc_beam_search
from oracles.ctc import PlainLM, brute_force, log_softmax, random_arpa

LN10 = math.log(10.0)

HAND = """
\\data\\
ngram 1=5
ngram 2=3
ngram 3=1

\\1-grams:
-99\t<s>\t-0.5
-0.7\ta\t-0.3
-0.9\tb\t-0.2
-1.2\t</s>
-2.0\t<unk>\t-0.4

\\2-grams:
-0.3\t<s> a\t-0.1
-0.2\ta b
-0.6\t<unk> b

\\3-grams:
-0.05\t<s> a b

\\end\\
"""


def test_hand_computed_scores():
    lm = NgramLM.from_lines(HAND.splitlines())
    # "a b": p(a|<s>) = -0.3 (bigram); p(b|<s> a) = -0.05 (trigram); p(</s>|a b): no "a b </s>",
    # "a b" has no back-off listed (0), no "b </s>", bo(b) = -0.2, p(</s>) = -1.2 -> -1.4
    assert np.allclose(lm.sentence_scores(["a", "b"]), np.array([-0.3, -0.05, -1.4]) * LN10)
    # "zz b": zz is <unk>: bo(<s>) -0.5 + p(<unk>) -2.0 = -2.5; then "<unk> b" = -0.6;
    # then </s> after "<unk> b" (no such trigram context): bo(b) -0.2 + -1.2 = -1.4
    assert np.allclose(lm.sentence_scores(["zz", "b"]), np.array([-2.5, -0.6, -1.4]) * LN10)
    # "b a": bo(<s>) -0.5 + p(b) -0.9 = -1.4; "b a" unknown: bo(b) -0.2 + p(a) -0.7 = -0.9;
    # </s>: bo(a) -0.3 + -1.2 = -1.5
    assert np.allclose(lm.sentence_scores(["b", "a"]), np.array([-1.4, -0.9, -1.5]) * LN10)
    assert np.allclose(lm.sentence_scores([]), [(-0.5 - 1.2) * LN10])


def test_a_file_without_unk_gives_it_minus_100_and_a_unigram_model_works():
    text = HAND.replace("-2.0\t<unk>\t-0.4\n", "").replace("-0.6\t<unk> b\n", "")
    text = text.replace("ngram 1=5", "ngram 1=4").replace("ngram 2=3", "ngram 2=2")
    lm = NgramLM.from_lines(text.splitlines())
    assert np.allclose(lm.sentence_scores(["zz"]), np.array([-100.5, -1.2]) * LN10)
    uni = NgramLM.from_lines(["\\data\\", "ngram 1=3", "", "\\1-grams:", "-1\t<s>", "-0.5\ta", "-0.25\t</s>",
                              "\\end\\"])
    assert np.allclose(uni.sentence_scores(["a", "q"]), np.array([-0.5, -100, -0.25]) * LN10)


@pytest.mark.parametrize("bad, needle", [
    ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n\\end\\\n", "the file has 1"),
    ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\nx\n\\end\\\n", "needs log10 prob"),
    ("\\data\\\nngram 1=2\nngram 2=1\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n\n"
     "\\2-grams:\n-1\t<s> q\n\\end\\\n", "no 1-gram"),
    ("hello\n", "not an ARPA file"),
])
def test_malformed_files_are_value_errors_naming_the_problem(bad, needle):
    with pytest.raises(ValueError, match=needle):
        NgramLM.from_lines(bad.splitlines())


def random_sentences(rng, words, count):
    pool = list(words) + ["oov", "zz"]
    return [[pool[i] for i in rng.integers(0, len(pool), size=int(rng.integers(0, 8)))] for _ in range(count)]


@pytest.mark.parametrize("seed", range(30))
def test_scores_equal_kenlm_full_scores_on_random_arpa_files(seed, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(int(rng.integers(2, 9)))]
    text = random_arpa(rng, int(rng.integers(2, 5)), words, int(rng.integers(3, 40)), unk=bool(seed % 2))
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    ref_model, lm = kenlm.Model(str(path)), NgramLM.from_arpa(str(path))
    for sent in random_sentences(rng, words, 30):
        ref = np.array([s for s, _, _ in ref_model.full_scores(" ".join(sent))]) * LN10
        np.testing.assert_allclose(lm.sentence_scores(sent), ref, rtol=1e-6, atol=1e-5)  # kenlm stores float32


@pytest.mark.parametrize("seed", range(30))
def test_scores_equal_a_plain_back_off_scorer_orders_one_to_four(seed):
    rng = np.random.default_rng(100 + seed)
    words = [f"w{i}" for i in range(int(rng.integers(2, 9)))]
    text = random_arpa(rng, int(rng.integers(1, 5)), words, int(rng.integers(3, 40)), unk=bool(seed % 2))
    lm, plain = NgramLM.from_lines(text.splitlines()), PlainLM(text)
    for sent in random_sentences(rng, words, 30):
        assert np.isclose(lm.sentence_scores(sent).sum(), plain.sentence(sent), rtol=1e-9, atol=1e-9)


def test_batch_scoring_equals_one_pair_at_a_time():
    rng = np.random.default_rng(7)
    lm = NgramLM.from_lines(random_arpa(rng, 3, ["a", "b", "c"], 20).splitlines())
    states = rng.integers(0, lm.logp.size, size=200)
    states = states[lm.order[states] < lm.max_order]  # states hold at most order - 1 words
    words = rng.integers(0, len(lm.words), size=states.size)
    got, new = lm.score(states, words)
    for s, w, g, n in zip(states, words, got, new, strict=True):
        one, one_new = lm.score(np.array([s]), np.array([w]))
        assert np.isclose(g, one[0]) and n == one_new[0]


# ---- fusion: the n-best equals brute force with the LM terms added per label sequence ----

TOKENS = ["<pad>", "a", "b", "|"]  # blank 0; "|" ends a word


def words_of(labels, tokens=TOKENS) -> list[str]:
    """The words of a label sequence over ``tokens``, written here from the convention: the token
    strings joined, split at "|", empty pieces dropped."""
    return [w for w in "".join(tokens[t] for t in labels).split("|") if w]


def lm_objective(lp, lm_text, alpha, beta, hot=None, weight=0.0, unk=0.0):
    """Every label sequence with acoustic + alpha * (LM + unk per word not among the ARPA's
    1-grams) + beta * words (+ hotword bonus), best first."""
    from tests.speech.test_hotwords import final_positions

    plain = PlainLM(lm_text)
    out = []
    for labels, acoustic in brute_force(lp, 0):
        words = words_of(labels)
        oov = sum((w,) not in plain.grams for w in words)
        bonus = 0.0 if hot is None else weight * final_positions(list(labels), hot)
        out.append((labels, acoustic + alpha * (plain.sentence(words) + unk * oov) + beta * len(words) + bonus))
    return sorted(out, key=lambda pair: -pair[1])


def check_n_best(hyps, ranked, n_best):
    scores = [h.score for h in hyps]
    np.testing.assert_allclose(scores, [s for _, s in ranked[: len(scores)]], rtol=1e-9, atol=1e-9)
    assert len(hyps) == min(n_best, len(ranked))
    for h in hyps:  # labels agree wherever the score is not tied
        tied = [lab for lab, s in ranked if abs(s - h.score) < 1e-9]
        assert tuple(h.tokens) in tied
        assert np.isclose(h.score, h.acoustic_score + h.lm_score + h.word_score + h.hotword_bonus)


def random_case(seed, frames=None):
    rng = np.random.default_rng(seed)
    t = int(rng.integers(1, 7)) if frames is None else frames
    lp = log_softmax(rng.normal(size=(t, 4)) * rng.uniform(0.5, 3))
    vocab = ["a", "b", "ab", "ba", "aa", "bb", "aba"]
    words = [w for w in vocab if rng.random() < 0.6] or ["a"]
    text = random_arpa(rng, int(rng.integers(1, 4)), words, int(rng.integers(2, 15)), unk=bool(rng.random() < 0.5))
    return rng, lp, text, float(rng.uniform(0, 2)), float(rng.uniform(-2, 3))


def decode(lp, text, alpha, beta, n_best, **kw):
    lm = NgramLM.from_lines(text.splitlines())
    return ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=n_best, vocabulary=Vocabulary(TOKENS),
                           lm=lm, alpha=alpha, beta=beta, **kw)[0]


@pytest.mark.parametrize("seed", range(60))
def test_nothing_pruned_the_n_best_equals_brute_force_with_the_lm(seed):
    _, lp, text, alpha, beta = random_case(seed)
    check_n_best(decode(lp, text, alpha, beta, 5), lm_objective(lp, text, alpha, beta), 5)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_hypothesis_cases_equal_brute_force_with_lm_and_hotwords(seed):
    rng, lp, text, alpha, beta = random_case(seed)
    hot = [list(rng.integers(1, 4, size=int(rng.integers(1, 4)))) for _ in range(int(rng.integers(0, 3)))]
    weight = float(rng.uniform(0, 3))
    hyps = decode(lp, text, alpha, beta, 4, hotwords=hot or None, hotword_weight=weight)
    check_n_best(hyps, lm_objective(lp, text, alpha, beta, hot or None, weight), 4)


def test_each_returned_term_equals_its_plain_value():
    _, lp, text, alpha, beta = random_case(3, frames=6)
    plain = PlainLM(text)
    for h in decode(lp, text, alpha, beta, 8):
        words = words_of(h.tokens)
        assert np.isclose(h.lm_score, alpha * plain.sentence(words))
        assert np.isclose(h.word_score, beta * len(words))
        truth = dict(brute_force(lp, 0))[tuple(h.tokens)]
        assert np.isclose(h.acoustic_score, truth)


def record_closed_steps(monkeypatch) -> list[bool]:
    """Whether each ``WordFusion.step`` call of the decode to come is handed the words already
    closed (its ``closed`` argument), one entry per call."""
    from beamsearch.speech.fusion import WordFusion

    stepped: list[bool] = []
    plain_step = WordFusion.step

    def step(self, *args, **kwargs):
        stepped.append(len(args) > 6 or kwargs.get("closed") is not None)
        return plain_step(self, *args, **kwargs)

    monkeypatch.setattr(WordFusion, "step", step)
    return stepped


def test_each_frame_scores_the_words_it_closes_once(monkeypatch):
    """The LM scores a slot's finished word once per frame: the extensions reuse the ranking's
    (each step is handed the words already closed), with the same results as brute force."""
    stepped = record_closed_steps(monkeypatch)
    for seed in range(4):
        _, lp, text, alpha, beta = random_case(seed, frames=5)
        check_n_best(decode(lp, text, alpha, beta, 5), lm_objective(lp, text, alpha, beta), 5)
    assert stepped and all(stepped)


def test_sentencepiece_words_are_scored_when_the_next_word_starts():
    tokens = ["<blk>", "\u2581a", "b", "\u2581"]
    text = random_arpa(np.random.default_rng(5), 2, ["a", "ab", "b"], 6)
    plain = PlainLM(text)
    rng = np.random.default_rng(9)
    lp = log_softmax(rng.normal(size=(5, 4)) * 2)
    hyps = ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=6, vocabulary=Vocabulary(tokens),
                           lm=NgramLM.from_lines(text.splitlines()), alpha=0.7, beta=0.3)[0]
    ranked = []
    for labels, acoustic in brute_force(lp, 0):
        words = [w for w in "".join(tokens[t] for t in labels).split("\u2581") if w]
        ranked.append((labels, acoustic + 0.7 * plain.sentence(words) + 0.3 * len(words)))
    check_n_best(hyps, sorted(ranked, key=lambda p: -p[1]), 6)


def test_batch_independence_and_numpy_equals_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    text = random_arpa(rng, 3, ["a", "b", "ab", "ba"], 12)
    lm = NgramLM.from_lines(text.splitlines())
    x = rng.normal(size=(5, 12, 4)) * 2
    lengths = np.array([12, 3, 0, 9, 12])
    kw = dict(blank=0, beam_size=8, n_best=3, vocabulary=Vocabulary(TOKENS), lm=lm, alpha=0.8, beta=0.5)
    batch = ctc_beam_search(x, lengths, **kw)
    on_torch = ctc_beam_search(torch.tensor(x), torch.tensor(lengths), **kw)
    for i in range(5):
        alone = ctc_beam_search(x[i : i + 1, : lengths[i]], **kw)[0]
        for a, b, c in zip(batch[i], alone, on_torch[i], strict=True):
            assert a.tokens == b.tokens == c.tokens
            assert np.isclose(a.score, b.score, rtol=1e-9) and np.isclose(a.score, c.score, rtol=1e-9)


def test_the_lm_changes_the_best_and_alpha_zero_beta_zero_changes_nothing():
    # the frames favour "ab" over "ba"; the LM knows only "ba" (and "ab" is <unk>, log10 -5)
    lp = np.log(np.array([[0.05, 0.6, 0.3, 0.05], [0.05, 0.3, 0.6, 0.05]]))  # "ab" 0.36, "ba" 0.09
    text = "\\data\\\nngram 1=4\n\n\\1-grams:\n-99\t<s>\n-0.1\tba\n-0.1\t</s>\n-5\t<unk>\n\\end\\\n"
    lm = NgramLM.from_lines(text.splitlines())
    kw = dict(blank=0, beam_size=16, vocabulary=Vocabulary(TOKENS))
    plain = ctc_beam_search(lp[None], **kw)[0][0]
    assert plain.tokens == [1, 2]
    fused = ctc_beam_search(lp[None], lm=lm, alpha=1.0, beta=0.0, **kw)[0][0]
    assert fused.tokens == [2, 1] and fused.text == "ba"
    zero = ctc_beam_search(lp[None], lm=lm, alpha=0.0, beta=0.0, **kw)[0][0]
    assert zero.tokens == plain.tokens and np.isclose(zero.score, plain.score)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(lm="x", alpha=-1.0), ValueError, ["alpha", "-1.0"]),
    (dict(lm="x", beta=float("nan")), ValueError, ["beta"]),
    (dict(lm=3), TypeError, ["lm", "int"]),
    (dict(lm="/nonexistent/x.arpa"), FileNotFoundError, ["x.arpa"]),
])
def test_bad_arguments_name_the_parameter_and_the_value(kwargs, error, words):
    with pytest.raises(error) as info:
        ctc_beam_search(np.zeros((1, 2, 4)), blank=0, beam_size=2, vocabulary=Vocabulary(TOKENS), **kwargs)
    for w in words:
        assert w in str(info.value)


# ---- the unknown-word offset: alpha x offset per completed word not among the LM's 1-grams ----

@pytest.mark.parametrize("seed", range(40))
def test_nothing_pruned_with_an_unknown_word_offset_the_n_best_equals_brute_force(seed):
    rng, lp, text, alpha, beta = random_case(seed)
    unk = float(rng.uniform(-8, 2))
    hyps = decode(lp, text, alpha, beta, 5, unk_score_offset=unk)
    ranked = lm_objective(lp, text, alpha, beta, unk=unk)
    check_n_best(hyps, ranked, 5)
    plain = PlainLM(text)
    for h in hyps:  # the offset is inside lm_score
        words = words_of(h.tokens)
        oov = sum((w,) not in plain.grams for w in words)
        assert np.isclose(h.lm_score, alpha * (plain.sentence(words) + unk * oov), rtol=1e-9, atol=1e-9)


def test_an_unknown_word_offset_of_a_hand_made_case():
    """The LM knows "ba" only: "ab" is <unk> (log10 -5, then </s> -0.1). At alpha 0.1, without an
    offset: "ab" ln 0.36 + 0.1 x ln 10 x (-5.1) = -1.022 - 1.174 = -2.196 beats "ba"
    ln 0.09 + 0.1 x ln 10 x (-0.1 - 0.1) = -2.408 - 0.046 = -2.454; an offset of -3 costs "ab"
    0.1 x -3 = -0.3 more (-2.496), so "ba" wins; "ba" itself, a known word, pays nothing."""
    lp = np.log(np.array([[0.05, 0.6, 0.3, 0.05], [0.05, 0.3, 0.6, 0.05]]))  # "ab" 0.36, "ba" 0.09
    text = "\\data\\\nngram 1=4\n\n\\1-grams:\n-99\t<s>\n-0.1\tba\n-0.1\t</s>\n-5\t<unk>\n\\end\\\n"
    kw = dict(blank=0, beam_size=16, n_best=16, vocabulary=Vocabulary(TOKENS),
              lm=NgramLM.from_lines(text.splitlines()), alpha=0.1, beta=0.0)
    without = ctc_beam_search(lp[None], **kw)[0]
    assert without[0].text == "ab"
    assert np.isclose(without[0].lm_score, 0.1 * math.log(10) * -5.1)
    offset = ctc_beam_search(lp[None], unk_score_offset=-3.0, **kw)[0]
    assert offset[0].text == "ba"
    by_text = {h.text: h for h in offset}
    assert np.isclose(by_text["ab"].lm_score, 0.1 * (math.log(10) * -5.1 - 3.0))
    assert np.isclose(by_text["ba"].lm_score, 0.1 * math.log(10) * -0.2)  # a known word pays nothing
    assert np.isclose(by_text["a"].lm_score, 0.1 * (math.log(10) * -5.1 - 3.0))
    assert np.isclose(offset[0].score, math.log(0.09) + 0.1 * math.log(10) * -0.2)


def test_an_unknown_word_offset_of_none_is_the_search_without_one():
    _, lp, text, alpha, beta = random_case(5, frames=6)
    today = decode(lp, text, alpha, beta, 8)
    for kw in (dict(unk_score_offset=None), dict(unk_score_offset=0.0)):
        again = decode(lp, text, alpha, beta, 8, **kw)
        assert [h.tokens for h in again] == [h.tokens for h in today]
        assert [h.score for h in again] == [h.score for h in today]
        assert [h.lm_score for h in again] == [h.lm_score for h in today]


def test_an_unknown_word_offset_keeps_batches_independent_numpy_equal_to_torch_and_streams_whole():
    torch = pytest.importorskip("torch")
    from beamsearch.speech import CTCStream

    rng = np.random.default_rng(13)
    text = random_arpa(rng, 3, ["a", "b", "ab"], 10)
    lm = NgramLM.from_lines(text.splitlines())
    x = rng.normal(size=(4, 10, 4)) * 2
    lengths = np.array([10, 4, 0, 7])
    kw = dict(blank=0, beam_size=8, n_best=3, vocabulary=Vocabulary(TOKENS), lm=lm, alpha=0.8, beta=0.5,
              unk_score_offset=-4.0)
    batch = ctc_beam_search(x, lengths, **kw)
    on_torch = ctc_beam_search(torch.tensor(x), torch.tensor(lengths), **kw)
    stream = CTCStream(4, 4, **kw)
    stream.feed(x[:, :3], np.minimum(lengths, 3))
    stream.feed(x[:, 3:], lengths - np.minimum(lengths, 3))
    streamed = stream.finish()
    assert batch != ctc_beam_search(x, lengths, **{**kw, "unk_score_offset": None})  # the offset matters here
    for i in range(4):
        alone = ctc_beam_search(x[i : i + 1, : lengths[i]], **kw)[0]
        for a, b, c, d in zip(batch[i], alone, on_torch[i], streamed[i], strict=True):
            assert a.tokens == b.tokens == c.tokens == d.tokens
            for h in (b, c, d):
                assert np.isclose(a.score, h.score, rtol=1e-9) and np.isclose(a.lm_score, h.lm_score, rtol=1e-9)


@pytest.mark.parametrize("value, error, match", [
    (float("nan"), ValueError, "unk_score_offset must be finite; got nan"),
    (float("inf"), ValueError, "unk_score_offset must be finite; got inf"),
    (-math.inf, ValueError, "unk_score_offset must be finite; got -inf"),
    ("x", TypeError, "unk_score_offset must be a real number; got 'x'"),
    (True, TypeError, "unk_score_offset must be a real number; got True"),
])
def test_bad_unknown_word_offsets_name_the_parameter(value, error, match):
    lm = NgramLM.from_lines(HAND.splitlines())
    with pytest.raises(error, match=match):
        ctc_beam_search(np.zeros((1, 2, 4)), blank=0, beam_size=2, vocabulary=Vocabulary(TOKENS), lm=lm,
                        unk_score_offset=value)


def test_an_unknown_word_offset_without_a_word_lm_is_refused():
    with pytest.raises(ValueError, match=r"unk_score_offset=-1.0 needs a word n-gram lm="):
        ctc_beam_search(np.zeros((1, 2, 4)), blank=0, beam_size=2, vocabulary=Vocabulary(TOKENS),
                        unk_score_offset=-1.0)


def test_an_lm_without_a_vocabulary_is_refused():
    lm = NgramLM.from_lines(HAND.splitlines())
    with pytest.raises(ValueError, match="vocabulary"):
        ctc_beam_search(np.zeros((1, 2, 4)), blank=0, beam_size=2, lm=lm)


# ---- token-level LMs as step functions ----

def rnn_lm(seed, vocab=4, hidden=3, torch=None):
    """A tiny recurrent LM: ``h' = tanh(W h + E[y])``, logits ``U h'``; numpy, or torch if given."""
    rng = np.random.default_rng(seed)
    w, e, u = (rng.normal(size=(hidden, hidden)), rng.normal(size=(vocab, hidden)) * 2,
               rng.normal(size=(hidden, vocab)) * 2)
    if torch is not None:
        w, e, u = (torch.tensor(a) for a in (w, e, u))

        def step(state, y):
            assert isinstance(y, torch.Tensor)
            h = torch.tanh(state["h"] @ w + e[y])
            return h @ u, {"h": h}
        return step, {"h": torch.zeros(1, hidden, dtype=torch.float64)}

    def step(state, y):
        h = np.tanh(state["h"] @ w + e[y])
        return h @ u, {"h": h}
    return step, {"h": np.zeros((1, hidden))}


def token_lm_logprob(step, init, bos, labels, blank, eos=None):
    """The LM's natural-log probability of ``labels`` (and eos), one row at a time, over the
    non-blank labels."""
    state, y, total = init, bos, 0.0
    for lab in list(labels) + ([eos] if eos is not None else []):
        logits, state = step(state, np.array([y]))
        x = np.asarray(logits, dtype=np.float64)[0].copy()
        x[blank] = -np.inf
        total += x[lab] - np.logaddexp.reduce(x[np.isfinite(x)])
        y = lab
    return total


@pytest.mark.parametrize("seed", range(40))
def test_token_lm_n_best_equals_brute_force(seed):
    from beamsearch.speech import TokenLM

    rng = np.random.default_rng(500 + seed)
    t = int(rng.integers(1, 7))
    lp = log_softmax(rng.normal(size=(t, 4)) * rng.uniform(0.5, 3))
    step, init = rnn_lm(seed)
    alpha = float(rng.uniform(0, 2))
    eos = None if seed % 2 else 3
    hyps = ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=5,
                           lm=TokenLM(step, init, bos=1, eos=eos), alpha=alpha)[0]
    ranked = sorted(((labels, a + alpha * token_lm_logprob(step, init, 1, labels, 0, eos))
                     for labels, a in brute_force(lp, 0)), key=lambda p: -p[1])
    check_n_best(hyps, ranked, 5)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_token_lm_with_hotwords_equals_brute_force(seed):
    from beamsearch.speech import TokenLM
    from tests.speech.test_hotwords import final_positions

    rng = np.random.default_rng(seed)
    lp = log_softmax(rng.normal(size=(int(rng.integers(1, 6)), 4)) * 2)
    step, init = rnn_lm(seed % 1000)
    hot = [list(rng.integers(1, 4, size=int(rng.integers(1, 3))))]
    hyps = ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=3, lm=TokenLM(step, init, bos=2),
                           alpha=0.7, hotwords=hot, hotword_weight=1.5)[0]
    ranked = sorted(((labels, a + 0.7 * token_lm_logprob(step, init, 2, labels, 0)
                      + 1.5 * final_positions(list(labels), hot)) for labels, a in brute_force(lp, 0)),
                    key=lambda p: -p[1])
    check_n_best(hyps, ranked, 3)


def test_token_lm_torch_equals_numpy_and_batch_independence():
    torch = pytest.importorskip("torch")
    from beamsearch.speech import TokenLM

    rng = np.random.default_rng(21)
    x = rng.normal(size=(4, 10, 4)) * 2
    lengths = np.array([10, 4, 0, 7])
    step_np, init_np = rnn_lm(3)
    step_t, init_t = rnn_lm(3, torch=torch)
    kw = dict(blank=0, beam_size=6, n_best=3, alpha=0.9)
    ours = ctc_beam_search(x, lengths, lm=TokenLM(step_np, init_np, bos=1, eos=2), **kw)
    theirs = ctc_beam_search(torch.tensor(x), torch.tensor(lengths), lm=TokenLM(step_t, init_t, bos=1, eos=2), **kw)
    for i in range(4):
        alone = ctc_beam_search(x[i : i + 1, : lengths[i]], lm=TokenLM(step_np, init_np, bos=1, eos=2), **kw)[0]
        for a, b, c in zip(ours[i], theirs[i], alone, strict=True):
            assert a.tokens == b.tokens == c.tokens
            assert np.isclose(a.score, b.score, rtol=1e-9) and np.isclose(a.score, c.score, rtol=1e-9)
            assert np.isclose(a.lm_score, 0.9 * token_lm_logprob(step_np, init_np, 1, a.tokens, 0, 2))


def test_token_lm_bad_arguments():
    from beamsearch.speech import TokenLM

    step, init = rnn_lm(0)
    with pytest.raises(ValueError, match="TokenLM.bos"):
        ctc_beam_search(np.zeros((1, 2, 4)), blank=0, beam_size=2, lm=TokenLM(step, init, bos=9))
    with pytest.raises(ValueError, match="logits"):
        ctc_beam_search(np.zeros((1, 2, 5)), blank=0, beam_size=2, lm=TokenLM(step, init, bos=1))


def test_a_kenlm_model_decodes_as_the_arpa_arrays(tmp_path):
    """KenLMModel (kenlm.Model underneath; binary files load the same way) scores and decodes as
    NgramLM on the same ARPA file, to kenlm's float32 rounding."""
    pytest.importorskip("kenlm")
    from beamsearch.speech import KenLMModel

    rng = np.random.default_rng(31)
    vocab_words = ["a", "b", "ab", "ba", "aa"]
    text = random_arpa(rng, 3, vocab_words, 20)
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    ours, theirs = NgramLM.from_arpa(str(path)), KenLMModel(str(path), vocab_words)
    for sent in random_sentences(rng, vocab_words, 20):
        state_a, state_b = np.array([ours.start]), np.array([theirs.start])
        for w in sent + ["</s>"]:
            sa, state_a = ours.score(state_a, ours.word_ids([w]))
            sb, state_b = theirs.score(state_b, np.array([theirs.index.get(w, theirs.unk)]))
            assert np.isclose(sa[0], sb[0], rtol=1e-6, atol=1e-5)
    x = rng.normal(size=(3, 8, 4)) * 2
    kw = dict(blank=0, beam_size=16, n_best=4, vocabulary=Vocabulary(TOKENS), alpha=0.8, beta=0.4)
    for a, b in zip(ctc_beam_search(x, lm=ours, **kw), ctc_beam_search(x, lm=theirs, **kw), strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert np.allclose([h.score for h in a], [h.score for h in b], rtol=1e-6, atol=1e-4)
    with pytest.raises(TypeError, match="words"):
        KenLMModel(str(path), "ab")


def plain_search(lp, beam, during, final):
    """A plain prefix beam search (a dict of prefixes, one label at a time) ranking each frame's
    prefixes by acoustic + ``during(prefix)``, the final ones by acoustic + ``final(prefix)``."""
    rank = lambda kv: -(np.logaddexp(*kv[1]) + during(kv[0]))  # noqa: E731
    beams = {(): (0.0, -np.inf)}
    for t in range(lp.shape[0]):
        nxt: dict = {}
        for prefix, (pb, pnb) in beams.items():
            entry = nxt.setdefault(prefix, [-np.inf, -np.inf])
            entry[0] = np.logaddexp(entry[0], np.logaddexp(pb, pnb) + lp[t, 0])
            if prefix:
                entry[1] = np.logaddexp(entry[1], pnb + lp[t, prefix[-1]])
            for c in range(1, lp.shape[1]):
                child = nxt.setdefault(prefix + (c,), [-np.inf, -np.inf])
                base = pb if prefix and prefix[-1] == c else np.logaddexp(pb, pnb)
                child[1] = np.logaddexp(child[1], base + lp[t, c])
        beams = {p: tuple(v) for p, v in sorted(nxt.items(), key=rank)[:beam] if np.logaddexp(*v) > -np.inf}
    return sorted(((p, np.logaddexp(*v) + final(p)) for p, v in beams.items()), key=lambda pair: -pair[1])


def plain_search_with_lm(lp, beam, plain, alpha, beta, tokens):
    """:func:`plain_search` ranking by alpha x LM + beta x words of the completed words (those
    followed by "|") while decoding; the final ones with every word and </s>."""
    def during(prefix):
        pieces = "".join(tokens[t] for t in prefix).split("|")
        done = [w for w in pieces[:-1] if w]
        return alpha * plain.sentence(done, eos=False) + beta * len(done)

    def final(prefix):
        words = words_of(prefix, tokens)
        return alpha * plain.sentence(words) + beta * len(words)
    return plain_search(lp, beam, during, final)


def test_narrow_beams_rank_by_the_completed_words_as_a_plain_search_does():
    """While decoding a prefix is ranked with the LM and word terms of its completed words; the
    search's shortcuts (the label cut per side, the bound) leave out only what cannot be kept."""
    rng = np.random.default_rng(17)
    for i in range(100):
        tokens = TOKENS if i % 2 else ["<pad>", "a", "b", "c", "d", "e", "|"]  # labels beyond the 2B cut
        frames, beam = int(rng.integers(1, 13)), int(rng.integers(1, 4 if i % 2 else 3))
        x = rng.normal(size=(frames, len(tokens))) * float(rng.choice([1.0, 3.0]))
        words = [w for w in ["a", "b", "ab", "ba", "cd", "e", "dd"] if rng.random() < 0.6] or ["a"]
        text = random_arpa(rng, int(rng.integers(1, 4)), words, 10)
        alpha, beta = float(rng.uniform(0, 2)), float(rng.uniform(-1, 6))
        got = ctc_beam_search(x[None], blank=0, beam_size=beam, n_best=beam, vocabulary=Vocabulary(tokens),
                              lm=NgramLM.from_lines(text.splitlines()), alpha=alpha, beta=beta)[0]
        want = plain_search_with_lm(log_softmax(x), beam, PlainLM(text), alpha, beta, tokens)
        assert [tuple(h.tokens) for h in got] == [p for p, _ in want]
        assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_narrow_beams_with_a_token_lm_rank_as_a_plain_search_does():
    from beamsearch.speech import TokenLM

    rng = np.random.default_rng(23)
    for i in range(40):
        frames, beam = int(rng.integers(1, 10)), int(rng.integers(1, 5))
        x = rng.normal(size=(frames, 4)) * float(rng.choice([1.0, 3.0]))
        step, init = rnn_lm(i)
        alpha, eos = float(rng.uniform(0, 2)), (None if i % 2 else 3)
        got = ctc_beam_search(x[None], blank=0, beam_size=beam, n_best=beam, lm=TokenLM(step, init, bos=1, eos=eos),
                              alpha=alpha)[0]
        want = plain_search(log_softmax(x), beam,
                            lambda p, a=alpha, s=step, i=init: a * token_lm_logprob(s, i, 1, p, 0),
                            lambda p, a=alpha, s=step, i=init, e=eos: a * token_lm_logprob(s, i, 1, p, 0, e))
        assert [tuple(h.tokens) for h in got] == [p for p, _ in want]
        assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-6)


def test_an_arpa_path_as_str_or_pathlib_decodes_as_the_loaded_lm(tmp_path):
    path = tmp_path / "hand.arpa"
    path.write_text(HAND)
    x = np.random.default_rng(2).normal(size=(2, 6, 4))
    kw = dict(blank=0, beam_size=8, n_best=3, vocabulary=Vocabulary(TOKENS))
    want = ctc_beam_search(x, lm=NgramLM.from_lines(HAND.splitlines()), **kw)
    for arpa in (str(path), path):
        got = ctc_beam_search(x, lm=arpa, **kw)
        assert [[(h.tokens, h.score) for h in u] for u in got] == [[(h.tokens, h.score) for h in u] for u in want]
