"""The Kneser-Ney ARPA builder (beamsearch.speech.lm_build) against independent oracles: values
computed by hand on a tiny corpus, Chen & Goodman's discount formula on given count-of-counts, every
context's distribution enumerated (it sums to 1), and kenlm's ``full_scores`` on the written file,
equal to beamsearch.speech.NgramLM's and to a plain recursive formula written here from the counts."""

from __future__ import annotations

import io
import math
import pathlib
import random
from collections import Counter

import numpy as np
import pytest

import beamsearch.zoo
from beamsearch.speech import NgramLM
from beamsearch.speech.lm_build import FALLBACK_DISCOUNTS, build_arpa, discounts, estimate, main, write_arpa

LN10 = math.log(10.0)
ARPA_ROUNDING = 1e-5  # 6 decimals of log10 per entry, a few entries per score, times ln 10


def test_hand_computed_bigram_model():
    # corpus "<s> a b </s>", "<s> b </s>", order 2; every count-of-counts has t3 = 0: the fallback
    # discounts D1 = 0.5, D2 = 1.0 at both orders.
    # 1-grams (continuation counts): a after {<s>} -> 1, b after {a, <s>} -> 2, </s> after {b} -> 1;
    # sum 4. u(a) = 0.5/4, u(b) = 1/4, u(</s>) = 0.5/4; b() = (0.5 + 1 + 0.5)/4 = 0.5, spread over
    # {a, b, </s>, <unk>}: + 0.125 each -> p(a) = .25, p(b) = .375, p(</s>) = .25, p(<unk>) = .125.
    # 2-grams (raw counts): <s> a 1, <s> b 1 -> b(<s>) = (0.5 + 0.5)/2 = .5,
    # p(a|<s>) = .5/2 + .5 * .25 = .375, p(b|<s>) = .25 + .5 * .375 = .4375;
    # a b 1 -> b(a) = .5, p(b|a) = .5 + .5 * .375 = .6875; b </s> 2 -> D2 = 1: u = 1/2, b(b) = .5,
    # p(</s>|b) = .5 + .5 * .25 = .625.
    model = estimate(["a b", "b"], order=2)
    assert model.fallback_orders == (1, 2)
    assert model.prob[0] == pytest.approx({("a",): .25, ("b",): .375, ("</s>",): .25, ("<unk>",): .125})
    assert model.prob[1] == pytest.approx({("<s>", "a"): .375, ("<s>", "b"): .4375, ("a", "b"): .6875,
                                           ("b", "</s>"): .625})
    assert model.backoff[0] == pytest.approx({("a",): .5, ("b",): .5, ("<s>",): .5, ("</s>",): 1.0,
                                             ("<unk>",): 1.0})
    lm = NgramLM.from_lines(arpa_text(model).splitlines())
    assert np.allclose(lm.sentence_scores(["a", "b"]), np.log([.375, .6875, .625]), atol=ARPA_ROUNDING)
    # "b a": p(b|<s>) = .4375; p(a|b): no "b a", b(b) .5 * p(a) .25; p(</s>|a) = b(a) .5 * .25
    assert np.allclose(lm.sentence_scores(["b", "a"]), np.log([.4375, .125, .125]), atol=ARPA_ROUNDING)


def test_chen_goodman_discounts_and_when_they_fall_back():
    # t = (4, 2, 1, 1): Y = 4 / (4 + 2*2) = .5; D1 = 1 - 2 * .5 * 2/4 = .5;
    # D2 = 2 - 3 * .5 * 1/2 = 1.25; D3+ = 3 - 4 * .5 * 1/1 = 1.0
    assert discounts(Counter({1: 4, 2: 2, 3: 1, 4: 1, 9: 3})) == pytest.approx((.5, 1.25, 1.0))
    assert discounts(Counter({1: 4, 2: 2, 3: 1})) is None  # t4 = 0
    # t = (1, 1, 1, 1): Y = 1/3, D1 = 1 - 2/3 = 1/3, D2 = 2 - 1 = 1, D3 = 3 - 4/3: all valid
    assert discounts(Counter({1: 1, 2: 1, 3: 1, 4: 1})) == pytest.approx((1 / 3, 1.0, 5 / 3))
    # t = (1, 1, 9, 1): Y = 1/3, D2 = 2 - 3 * 1/3 * 9/1 = -7 < 0: invalid
    assert discounts(Counter({1: 1, 2: 1, 3: 9, 4: 1})) is None
    assert FALLBACK_DISCOUNTS == (0.5, 1.0, 1.5)


WORDS = "abcdefghijklmnopqrst"


def random_corpus(seed: int, n: int = 200, words: str = WORDS) -> list[str]:
    rng = random.Random(seed)
    # Zipf-like word frequencies (1/rank^2), so that rare n-grams exist at every order
    weights = [1.0 / (i + 1) ** 2 for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(0, 6))) for _ in range(n)]


def arpa_text(model) -> str:
    out = io.StringIO()
    write_arpa(model, out)
    return out.getvalue()


def test_a_big_enough_corpus_takes_estimated_discounts_at_every_order():
    model = estimate(random_corpus(0, n=200), order=3)
    assert model.fallback_orders == ()
    assert all(0 < d1 < 1 and 0 < d2 < 2 and 0 < d3 < 3 for d1, d2, d3 in model.discounts)


@pytest.mark.parametrize(("seed", "n"), [(0, 200), (0, 100), (3, 200)])  # fallback: none, none, orders 1 and 2
def test_every_context_sums_to_one_over_the_words_end_and_unk(seed, n):
    sentences = random_corpus(seed, n)
    model = estimate(sentences, order=3)
    lm = NgramLM.from_lines(arpa_text(model).splitlines())
    predicted = sorted({w for s in sentences for w in s.split()}) + ["</s>", "<unk>"]
    assert sorted(lm.words) == sorted([*predicted, "<s>"])
    ids = lm.word_ids(predicted)
    seen = WORDS + "z"  # z: out of the vocabulary
    histories = [()] + [(x,) for x in seen] + [(x, y) for x in seen for y in seen]
    histories += [("a", y, z) for y in seen for z in seen]  # contexts without <s>
    for history in histories:
        state = np.array([lm.start])
        for w in lm.word_ids(history):
            state = lm.score(state, np.array([w]))[1]
        logp, _ = lm.score(np.repeat(state, ids.size), ids)
        assert np.exp(logp).sum() == pytest.approx(1.0, abs=ARPA_ROUNDING), history
    # and in the model's own floats, for every context it holds
    for n_ in range(1, model.order):
        for context in model.prob[n_ - 1]:
            if context[-1] != "</s>":
                total = sum(arpa_prob(model, context, w) for w in predicted)
                assert total == pytest.approx(1.0, abs=1e-12), context


def arpa_prob(model, history: tuple, word: str) -> float:
    """ARPA back-off over the model's float dicts."""
    if not history:
        return model.prob[0][(word,)]
    gram = (*history, word)
    if gram in model.prob[len(gram) - 1]:
        return model.prob[len(gram) - 1][gram]
    return model.backoff[len(history) - 1].get(history, 1.0) * arpa_prob(model, history[1:], word)


def reference_log10(sentences: list[str], order: int, history: list[str], word: str) -> float:
    """Interpolated modified Kneser-Ney, written plainly from the definitions (Chen & Goodman 1998):
    counts by scanning the padded sentences, continuation counts as sets of left neighbours."""
    padded = [["<s>", *s.split(), "</s>"] for s in sentences]
    vocab = sorted({w for p in padded for w in p[1:]} | {"<unk>"})

    def occurrences(gram):
        return [(p, i) for p in padded for i in range(len(p) - len(gram) + 1) if tuple(p[i:i + len(gram)]) == gram]

    def a(gram):
        if len(gram) == order or gram[0] == "<s>":
            return len(occurrences(gram))
        return len({p[i - 1] for p, i in occurrences(gram) if i > 0})

    def grams(n):
        return {tuple(p[i:i + n]) for p in padded for i in range(len(p) - n + 1)} - {("<s>",)}

    def disc(n):
        t = Counter(a(g) for g in grams(n))
        if min(t[1], t[2], t[3], t[4]) == 0:
            return (0.5, 1.0, 1.5)
        y = t[1] / (t[1] + 2 * t[2])
        d = [k - (k + 1) * y * t[k + 1] / t[k] for k in (1, 2, 3)]
        return tuple(d) if all(0 < d[k - 1] < k for k in (1, 2, 3)) else (0.5, 1.0, 1.5)

    def p(w, h):
        n = len(h) + 1
        followers = {g[-1]: a(g) for g in grams(n) if g[:-1] == h}
        if not followers:
            return p(w, h[1:]) if h else 1.0 / len(vocab)
        d = disc(n)
        total = sum(followers.values())
        c = followers.get(w, 0)
        own = (c - d[min(c, 3) - 1]) / total if c else 0.0
        weight = sum(d[min(x, 3) - 1] for x in followers.values()) / total
        lower = p(w, h[1:]) if h else 1.0 / len(vocab)
        return own + weight * lower

    h = tuple(x if x in vocab or x == "<s>" else "<unk>" for x in history)[-(order - 1):] if order > 1 else ()
    return math.log10(p(word if word in vocab else "<unk>", h))


@pytest.mark.parametrize("order", [2, 3])
def test_kenlm_ngramlm_and_the_plain_formula_agree_on_the_written_arpa(tmp_path, order):
    kenlm = pytest.importorskip("kenlm")
    sentences = random_corpus(0, n=100)
    path = tmp_path / "lm.arpa"
    build_arpa(sentences, str(path), order=order)
    ken, ours = kenlm.Model(str(path)), NgramLM.from_arpa(str(path))
    rng = random.Random(1)
    for _ in range(25):
        words = rng.choices("abcdefyz", k=rng.randint(0, 5))  # y, z: not in the corpus (<unk>)
        got_ken = np.array([s for s, _, _ in ken.full_scores(" ".join(words))])
        history, want = ["<s>"], []
        for w in [*words, "</s>"]:
            want.append(reference_log10(sentences, order, history, w))
            history.append(w)
        assert np.allclose(got_ken, want, atol=ARPA_ROUNDING), words
        assert np.allclose(ours.sentence_scores(words) / LN10, want, atol=ARPA_ROUNDING), words


def test_a_unigram_model_is_the_continuation_free_raw_count_estimate():
    # order 1: raw counts a: x 3, </s> 2, y 1 (sum 6); t3 = 1 but t4 = 0: fallback (.5, 1, 1.5).
    # u = (3 - 1.5)/6, (2 - 1)/6, (1 - .5)/6; b() = (1.5 + 1 + .5)/6 = .5 over {x, y, </s>, <unk>}
    model = estimate(["x x y", "x"], order=1)
    assert model.prob[0] == pytest.approx({("x",): .25 + .125, ("</s>",): 1 / 6 + .125, ("y",): 1 / 12 + .125,
                                           ("<unk>",): .125})
    lm = NgramLM.from_lines(arpa_text(model).splitlines())
    assert np.allclose(lm.sentence_scores(["y"]), np.log([1 / 12 + .125, 1 / 6 + .125]), atol=ARPA_ROUNDING)


def test_bad_arguments_are_one_clear_error():
    with pytest.raises(ValueError, match=r"^order must be an int >= 1; got 0$"):
        estimate(["a"], order=0)
    with pytest.raises(ValueError, match=r"^order must be an int >= 1; got True$"):
        estimate(["a"], order=True)
    with pytest.raises(ValueError, match=r"^sentences is empty: no text to estimate an LM from$"):
        estimate([])
    with pytest.raises(ValueError, match=r"^sentences\[1\] contains the reserved word '</s>'$"):
        estimate(["a", "b </s>"])
    with pytest.raises(TypeError, match=r"^sentences\[0\] must be a str; got list$"):
        estimate([["a"]])  # type: ignore[list-item]


def test_the_command_reads_a_file_or_stdin_and_skips_blank_lines(tmp_path, monkeypatch, capsys):
    text = tmp_path / "s.txt"
    text.write_text("a b\n\n  \nb\n", encoding="utf-8")
    out = tmp_path / "lm.arpa"
    assert main(["--out", str(out), "--order", "2", str(text)]) == 0
    assert capsys.readouterr().err == (f"wrote {out}: 2 sentences, 5 1-grams, 4 2-grams; fallback discounts "
                                       "(0.5, 1.0, 1.5) at orders [1, 2]\n")
    from_file = out.read_text(encoding="utf-8")
    assert from_file == arpa_text(estimate(["a b", "b"], order=2))
    monkeypatch.setattr("sys.stdin", io.StringIO("a b\nb\n"))
    assert main(["--out", str(out), "--order", "2"]) == 0
    assert out.read_text(encoding="utf-8") == from_file


def test_the_command_errors_are_one_line(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "lm.arpa"), str(tmp_path / "missing.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lm_build: error: [Errno 2] No such file or directory:") and err.count("\n") == 1
    bad = tmp_path / "bad.txt"
    bad.write_text("a <unk>\n", encoding="utf-8")
    assert main(["--out", str(tmp_path / "lm.arpa"), str(bad)]) == 2
    assert capsys.readouterr().err == "lm_build: error: sentences[0] contains the reserved word '<unk>'\n"


def test_the_shipped_domain_lm_is_what_the_documented_command_writes():
    # docs/speech-model.md: spoken_sentences(100000, 7) piped into python -m beamsearch.speech.lm_build
    from beamsearch.zoo.speech.text import spoken_sentences

    shipped = pathlib.Path(beamsearch.zoo.__file__).parent / "speech" / "domain.3gram.arpa"
    assert shipped.stat().st_size < 1 << 20
    assert shipped.read_text(encoding="utf-8") == arpa_text(estimate(spoken_sentences(100000, 7), order=3))
