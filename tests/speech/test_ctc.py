"""CTC prefix beam search (beamsearch.speech) against every alignment enumerated, torch's
ctc_loss and a plain Viterbi (tests/oracles/ctc.py)."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech import CTCHypothesis, Vocabulary, ctc_beam_search
from oracles.ctc import (
    allowed_starts,
    best_alignment_brute,
    brute_force,
    log_softmax,
    prefix_beam_search,
    runs,
    viterbi,
)

WIDE = 1100  # more than the 1093 prefixes of up to 6 labels over 3 labels: nothing is pruned


def random_case(rng, frames=None, vocab=None, scale=None):
    frames = int(rng.integers(1, 7)) if frames is None else frames
    vocab = int(rng.integers(2, 5)) if vocab is None else vocab
    scale = float(rng.choice([0.5, 2.0, 5.0])) if scale is None else scale
    return rng.normal(size=(frames, vocab)) * scale, int(rng.integers(0, vocab))


def assert_matches(got: list[CTCHypothesis], want, n_best: int, tol: float = 1e-6):
    want = want[:n_best]
    assert [tuple(h.tokens) for h in got] == [labels for labels, _ in want]
    assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=tol)
    assert all(h.acoustic_score == h.score for h in got)


def test_exact_against_every_alignment_on_hundreds_of_tiny_cases():
    """Nothing pruned: the n-best labels and scores equal the enumeration of every alignment."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        x, blank = random_case(rng)
        n_best = int(rng.integers(1, 9))
        got = ctc_beam_search(x[None], blank=blank, beam_size=WIDE, n_best=n_best)[0]
        assert_matches(got, brute_force(log_softmax(x), blank), n_best)


def test_exact_on_hypothesis_generated_batches():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.settings(max_examples=150, deadline=None)
    @hyp.given(st.integers(1, 3), st.integers(1, 5), st.integers(2, 4), st.integers(0, 2**32 - 1), st.integers(1, 6))
    def check(n, frames, vocab, seed, n_best):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, frames, vocab)) * 3
        lengths = rng.integers(0, frames + 1, size=n)
        blank = int(rng.integers(0, vocab))
        got = ctc_beam_search(x, lengths, blank=blank, beam_size=400, n_best=n_best)
        for i in range(n):
            want = brute_force(log_softmax(x[i, : lengths[i]]), blank) if lengths[i] else [((), 0.0)]
            assert_matches(got[i], want, n_best)

    check()


@pytest.mark.parametrize("option", [{}, {"token_top_k": 3}, {"token_min_logp": -3.0}, {"beam_threshold": 3.0},
                                    {"blank_skip_threshold": 0.7, "token_top_k": 4, "beam_threshold": 6.0}])
def test_narrow_beams_equal_a_plain_prefix_beam_search(option):
    """With pruning, the vectorized search keeps the same prefixes as a plain one-prefix-at-a-time
    search with the same rules (on random emissions, where scores do not tie)."""
    rng = np.random.default_rng(12)
    for _ in range(25):
        frames, vocab, beam = int(rng.integers(1, 40)), int(rng.integers(2, 9)), int(rng.integers(1, 9))
        x, blank = random_case(rng, frames, vocab)
        lp = log_softmax(x)
        allowed = allowed_starts(lp, blank, option.get("token_top_k"), option.get("token_min_logp"),
                                 option.get("blank_skip_threshold"))
        got = ctc_beam_search(x[None], blank=blank, beam_size=beam, n_best=beam, **option)[0]
        want = prefix_beam_search(lp, blank, beam, allowed, option.get("beam_threshold"))
        assert [tuple(h.tokens) for h in got] == [p for p, _ in want]
        assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-9)


def test_narrow_beams_on_hypothesis_generated_batches_equal_the_plain_search():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies

    @hyp.settings(max_examples=100, deadline=None)
    @hyp.given(st.integers(1, 4), st.integers(1, 25), st.integers(2, 7), st.integers(1, 6), st.integers(0, 2**32 - 1),
               st.sampled_from([None, 2, 4]), st.sampled_from([None, 1.0, 5.0]))
    def check(n, frames, vocab, beam, seed, top_k, threshold):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, frames, vocab)) * 3
        lengths = rng.integers(0, frames + 1, size=n)
        blank = int(rng.integers(0, vocab))
        got = ctc_beam_search(x, lengths, blank=blank, beam_size=beam, n_best=beam, token_top_k=top_k,
                              beam_threshold=threshold)
        for i in range(n):
            lp = log_softmax(x[i, : lengths[i]])
            want = prefix_beam_search(lp, blank, beam, allowed_starts(lp, blank, top_k), threshold)
            assert [tuple(h.tokens) for h in got[i]] == [p for p, _ in want]
            assert [h.score for h in got[i]] == pytest.approx([s for _, s in want], abs=1e-9)

    check()


def test_every_score_equals_minus_torch_ctc_loss():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    for _ in range(40):
        frames, vocab = int(rng.integers(1, 9)), int(rng.integers(2, 4))
        x, blank = random_case(rng, frames, vocab)
        hyps = ctc_beam_search(x[None], blank=blank, beam_size=600, n_best=10)[0]  # 511 prefixes at most
        lp = torch.tensor(log_softmax(x))[:, None, :]  # --> [T, 1, V]
        for h in hyps:
            loss = torch.nn.functional.ctc_loss(lp, torch.tensor([h.tokens or [0]]), torch.tensor([frames]),
                                                torch.tensor([len(h.tokens)]), blank=blank, reduction="none")
            assert h.score == pytest.approx(-float(loss[0]), abs=1e-6)


def test_a_narrow_beam_never_scores_above_the_true_probability():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 30, 6)) * 3
    for i, hyps in enumerate(ctc_beam_search(x, blank=0, beam_size=4, n_best=4)):
        lp = torch.tensor(log_softmax(x[i]))[:, None, :]
        for h in hyps:
            loss = torch.nn.functional.ctc_loss(lp, torch.tensor([h.tokens]), torch.tensor([30]),
                                                torch.tensor([len(h.tokens)]), blank=0, reduction="none")
            assert h.score <= -float(loss[0]) + 1e-9


def test_token_frames_are_the_unique_best_alignment_by_enumeration():
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(150):
        x, blank = random_case(rng)
        lp = log_softmax(x)
        for h in ctc_beam_search(x[None], blank=blank, beam_size=WIDE, n_best=4)[0]:
            best, unique = best_alignment_brute(lp, h.tokens, blank)
            if unique:
                assert h.token_frames.tolist() == [list(r) for r in runs(best, blank)]
                checked += 1
    assert checked > 300


def test_token_frames_equal_a_plain_viterbi_on_longer_utterances():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 40, 5)) * 4
    lengths = np.array([40, 25, 7])
    for i, hyps in enumerate(ctc_beam_search(x, lengths, blank=4, beam_size=8, n_best=3)):
        lp = log_softmax(x[i, : lengths[i]])
        for h in hyps:
            assert h.token_frames.tolist() == [list(r) for r in runs(viterbi(lp, h.tokens, 4), 4)]
            assert h.token_frames.dtype == np.int64 and h.token_frames.shape == (len(h.tokens), 2)


def test_a_batch_with_different_lengths_equals_each_utterance_alone():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(5, 20, 7)) * 3
    lengths = np.array([20, 3, 0, 17, 11])
    x[1, 3:] = np.nan  # padding is never read
    batch = ctc_beam_search(x, lengths, blank=0, beam_size=6, n_best=3, token_top_k=4, beam_threshold=8.0)
    for i in range(5):
        alone = ctc_beam_search(x[i : i + 1, : lengths[i]], blank=0, beam_size=6, n_best=3, token_top_k=4,
                                beam_threshold=8.0)[0]
        assert [h.tokens for h in batch[i]] == [h.tokens for h in alone]
        assert [h.score for h in batch[i]] == pytest.approx([h.score for h in alone], abs=1e-12)
        assert [h.token_frames.tolist() for h in batch[i]] == [h.token_frames.tolist() for h in alone]
    assert [(h.tokens, h.score) for h in batch[2]] == [([], 0.0)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numpy_and_torch_emissions_agree(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = (rng.normal(size=(4, 30, 9)) * 3).astype(dtype)
    lengths = [30, 12, 29, 1]
    kw = dict(blank=2, beam_size=8, n_best=4, token_min_logp=-6.0)
    before = x.copy()
    a = ctc_beam_search(x, lengths, **kw)
    b = ctc_beam_search(torch.from_numpy(x), torch.tensor(lengths), **kw)
    assert np.array_equal(x, before)  # the caller's emissions (and the tensor sharing them) are not written
    tol = 1e-9 if dtype == "float64" else 1e-4
    for ha, hb in zip(a, b, strict=True):
        assert [h.tokens for h in ha] == [h.tokens for h in hb]
        assert [h.score for h in ha] == pytest.approx([h.score for h in hb], abs=tol)


def test_log_probabilities_and_logits_give_the_same_result():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 12, 5)) * 3
    a = ctc_beam_search(x + 7.5, blank=0, beam_size=5, n_best=3)
    b = ctc_beam_search(log_softmax(x), blank=0, beam_size=5, n_best=3)
    assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]
    assert [h.score for hs in a for h in hs] == pytest.approx([h.score for hs in b for h in hs], abs=1e-9)


@pytest.mark.parametrize("option", [
    {"token_top_k": 1}, {"token_top_k": 2}, {"token_min_logp": -1.5}, {"token_min_logp": -0.7},
    {"blank_skip_threshold": 0.5}, {"blank_skip_threshold": 0.2},
    {"token_top_k": 2, "token_min_logp": -2.0, "blank_skip_threshold": 0.6},
])
def test_token_pruning_is_exact_over_the_alignments_it_keeps(option):
    """With a wide beam, a pruned search sums exactly the alignments whose every label start the
    documented rule allows (computed here independently)."""
    rng = np.random.default_rng(8)
    for _ in range(60):
        x, blank = random_case(rng, vocab=int(rng.integers(3, 5)), scale=2.0)
        lp = log_softmax(x)
        allowed = allowed_starts(lp, blank, option.get("token_top_k"), option.get("token_min_logp"),
                                 option.get("blank_skip_threshold"))
        got = ctc_beam_search(x[None], blank=blank, beam_size=WIDE, n_best=5, **option)[0]
        assert_matches(got, brute_force(lp, blank, allowed), 5)


def test_pruning_options_at_their_neutral_values_change_nothing():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(3, 25, 6)) * 3
    off = ctc_beam_search(x, blank=1, beam_size=7, n_best=7)
    for option in ({"token_top_k": 5}, {"token_top_k": 6}, {"token_top_k": 1000}, {"token_min_logp": -np.inf},
                   {"beam_threshold": np.inf}, {"beam_threshold": 1e6}, {"blank_skip_threshold": 1.0}):
        on = ctc_beam_search(x, blank=1, beam_size=7, n_best=7, **option)
        assert [[(h.tokens, h.score) for h in hs] for hs in on] == [[(h.tokens, h.score) for h in hs] for hs in off]


def test_beam_threshold_keeps_only_hypotheses_within_it_of_the_best():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(4, 20, 5)) * 2
    wide = ctc_beam_search(x, blank=0, beam_size=16, n_best=16)
    for threshold in (0.0, 0.5, 2.0):
        cut = ctc_beam_search(x, blank=0, beam_size=16, n_best=16, beam_threshold=threshold)
        for hs, ws in zip(cut, wide, strict=True):
            assert hs[0].score - hs[-1].score <= threshold
            assert len(hs) <= len(ws)
            if threshold == 0.0:
                assert len(hs) == 1


def test_a_narrow_beam_returns_at_most_its_width_and_beam_one_follows_one_prefix():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2, 15, 4)) * 2
    hyps = ctc_beam_search(x, blank=0, beam_size=1, n_best=1)
    for i, hs in enumerate(hyps):
        assert len(hs) == 1
        # beam 1 keeps, each frame, the best of "stay" and each one-label extension of the one prefix
        lp, pb, pnb, prefix = log_softmax(x[i]), 0.0, -np.inf, []
        for t in range(15):
            cands = {tuple(prefix): (np.logaddexp(pb, pnb) + lp[t, 0],
                                     pnb + (lp[t, prefix[-1]] if prefix else -np.inf))}
            for c in range(1, 4):
                base = pb if prefix and prefix[-1] == c else np.logaddexp(pb, pnb)
                cands[tuple(prefix) + (c,)] = (-np.inf, base + lp[t, c])
            best = max(cands, key=lambda k: (np.logaddexp(*cands[k]), -len(k)))
            prefix, (pb, pnb) = list(best), cands[best]
        assert hs[0].tokens == prefix and hs[0].score == pytest.approx(float(np.logaddexp(pb, pnb)), abs=1e-9)


def test_a_beam_of_a_billion_on_a_tiny_input_is_exact_and_holds_only_its_prefixes():
    """beam_size 10**9 on a tiny input is exact and allocates only the 1 + 3 + 9 + 27 prefixes of
    up to 3 frames over 3 labels."""
    rng = np.random.default_rng(13)
    x = rng.normal(size=(2, 3, 4))
    got = ctc_beam_search(x, blank=0, beam_size=10**9, n_best=10**9)
    for i in range(2):
        assert_matches(got[i], brute_force(log_softmax(x[i]), 0), 10**9)
    assert len(got[0]) == len(brute_force(log_softmax(x[0]), 0)) <= 40


def test_fewer_hypotheses_than_n_best_when_fewer_sequences_exist():
    x = np.log(np.array([[[0.5, 0.5]]]))
    hyps = ctc_beam_search(x, blank=0, beam_size=4, n_best=4)[0]
    assert [(h.tokens, h.score) for h in hyps] == [([], pytest.approx(np.log(0.5))), ([1], pytest.approx(np.log(0.5)))]
    none = ctc_beam_search(np.zeros((2, 0, 3)), blank=0, beam_size=2, n_best=2)
    assert [[(h.tokens, h.score, h.token_frames.shape) for h in hs] for hs in none] == [[([], 0.0, (0, 2))]] * 2


def test_a_masked_label_is_never_emitted():
    with np.errstate(divide="ignore"):
        x = np.log(np.array([[[0.3, 0.7, 0.0], [0.6, 0.0, 0.4], [0.5, 0.5, 0.0]]]))
    hyps = ctc_beam_search(x, blank=0, beam_size=10, n_best=10)[0]
    assert [tuple(h.tokens) for h in hyps] == [labels for labels, _ in brute_force(x[0], 0)]
    assert all(np.isfinite(h.score) for h in hyps)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"blank": 3}, ValueError, ["blank", "3"]),
    ({"blank": -1}, ValueError, ["blank", "-1"]),
    ({"blank": 1.0}, TypeError, ["blank", "1.0"]),
    ({"beam_size": 0}, ValueError, ["beam_size", "0"]),
    ({"n_best": 5}, ValueError, ["n_best", "5"]),
    ({"token_top_k": 0}, ValueError, ["token_top_k", "0"]),
    ({"token_min_logp": 0.5}, ValueError, ["token_min_logp", "0.5"]),
    ({"token_min_logp": float("nan")}, ValueError, ["token_min_logp", "nan"]),
    ({"beam_threshold": -1.0}, ValueError, ["beam_threshold", "-1.0"]),
    ({"blank_skip_threshold": 1.5}, ValueError, ["blank_skip_threshold", "1.5"]),
    ({"frame_duration": 0.0}, ValueError, ["frame_duration", "0.0"]),
    ({"vocabulary": ["a", "b"]}, ValueError, ["vocabulary", "V=3", "2"]),
    ({"lengths": [4, 1]}, ValueError, ["lengths[0]", "T=3", "4"]),
    ({"lengths": [1]}, ValueError, ["lengths", "(2,)", "(1,)"]),
    ({"lengths": [1.0, 2.0]}, TypeError, ["lengths", "float"]),
])
def test_bad_arguments_name_the_parameter_and_the_value(kwargs, error, words):
    args = {"blank": 0, "beam_size": 4, "n_best": 1, **kwargs}
    lengths = args.pop("lengths", None)
    with pytest.raises(error) as info:
        ctc_beam_search(np.zeros((2, 3, 3)), lengths, **args)
    for word in words:
        assert word in str(info.value)


def test_bad_emissions_are_named_with_their_shape_or_frame():
    with pytest.raises(ValueError, match=r"3-D \[N, T, V\]; got shape \(2, 3\)"):
        ctc_beam_search(np.zeros((2, 3)), blank=0, beam_size=2)
    with pytest.raises(TypeError, match="emissions must hold real numbers; got dtype bool"):
        ctc_beam_search(np.zeros((1, 2, 3), dtype=bool), blank=0, beam_size=2)
    x = np.zeros((2, 4, 3))
    x[1, 2, 1] = np.nan
    with pytest.raises(ValueError, match=r"emissions\[1, 2\] must hold no NaN or \+inf and at least one finite entry; "
                                         r"got array\(\[ 0., nan,  0.\]\)"):
        ctc_beam_search(x, blank=0, beam_size=2)
    x[1, 2] = [np.inf, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"emissions\[1, 2\] must hold no NaN or \+inf"):
        ctc_beam_search(x, blank=0, beam_size=2)
    x[1, 2] = -np.inf
    with pytest.raises(ValueError,
                       match=r"emissions\[1, 2\] .* at least one finite entry; got array\(\[-inf, -inf, -inf\]\)"):
        ctc_beam_search(x, blank=0, beam_size=2)
    ctc_beam_search(x, [4, 2], blank=0, beam_size=2)  # the bad frame lies beyond utterance 1's length


def test_character_vocabulary_with_a_delimiter_gives_words_and_their_times():
    vocab = Vocabulary(["<pad>", "<s>", "</s>", "<unk>", "|", "a", "b", "c"])
    assert vocab.word_delimiter == "|" and vocab.special_ids == {0, 1, 2, 3}
    assert vocab.text([4, 5, 6, 4, 4, 7, 3, 5, 4]) == "ab ca"
    assert vocab.words([4, 5, 6, 4, 4, 7, 3, 5, 4]) == [("ab", 1, 2), ("ca", 5, 7)]
    # frames: blank, a, a, b, blank, |, c, blank, a: the labels a b | c a (blank is <pad>, id 0)
    frames = np.zeros((9, 8))
    frames[np.arange(9), [0, 5, 5, 6, 0, 4, 7, 0, 5]] = 9
    x = np.array([frames], dtype=np.float64) * 3
    best = ctc_beam_search(x, blank=0, beam_size=4, vocabulary=vocab, frame_duration=0.02)[0][0]
    assert best.tokens == [5, 6, 4, 7, 5] and best.text == "ab ca"
    assert best.token_frames.tolist() == [[1, 2], [3, 3], [5, 5], [6, 6], [8, 8]]
    assert [(w.text, w.start_frame, w.end_frame) for w in best.words] == [("ab", 1, 3), ("ca", 6, 8)]
    assert [(w.start, w.end) for w in best.words] == [pytest.approx((0.02, 0.08)), pytest.approx((0.12, 0.18))]
    plain = ctc_beam_search(x, blank=0, beam_size=4)[0][0]
    assert plain.text is None and plain.words is None and plain.tokens == best.tokens


def test_space_delimiter_sentencepiece_marks_and_special_tokens():
    spaces = Vocabulary(["_", " ", "h", "i"])
    assert spaces.word_delimiter == " " and spaces.text([1, 2, 3, 1, 1, 3, 1]) == "hi i"
    sp = Vocabulary(["<blk>", "\u2581he", "llo", "\u2581w", "orld", "\u2581", "<unk>"])
    assert sp.word_delimiter is None
    assert sp.words([1, 2, 6, 3, 4, 5, 2]) == [("hello", 0, 1), ("world", 3, 4), ("llo", 6, 6)]
    assert sp.text([5, 5, 1, 5]) == "he" and sp.text([0, 6]) == ""
    custom = Vocabulary(["x", "y", "[SEP]"], special_ids=[0])
    assert custom.text([0, 1, 2], blank=None) == "y[SEP]"
    assert Vocabulary(["a", "b"]).text([0, 1], blank=1) == "a"
    with pytest.raises(ValueError, match="word_delimiter must be one of the tokens; got '#'"):
        Vocabulary(["a", "b"], word_delimiter="#")
    with pytest.raises(ValueError, match=r"special_ids\[1\] must be a token id in \[0, 2\); got 5"):
        Vocabulary(["a", "b"], special_ids=[0, 5])
    with pytest.raises(TypeError, match=r"tokens\[1\] must be a string; got 3"):
        Vocabulary(["a", 3])


def test_vocabulary_from_a_wav2vec2_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    import json

    tokens = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, "a": 5, "b": 6}
    (tmp_path / "vocab.json").write_text(json.dumps(tokens))
    tok = transformers.Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"))
    vocab = Vocabulary.from_tokenizer(tok)
    assert vocab.tokens == list(tokens) and vocab.word_delimiter == "|" and vocab.special_ids == {0, 1, 2, 3}
    assert vocab.text([5, 6, 4, 6, 5], blank=0) == tok.decode([5, 6, 4, 6, 5]) == "ab ba"
    assert vocab.text([5, 6, 4, 6, 3, 5], blank=0) == "ab ba"  # <unk> is never text (the tokenizer writes it)


def test_speech_decodes_with_numpy_alone():
    """With torch unimportable, beamsearch.speech imports and decodes numpy emissions."""
    import os
    import subprocess
    import sys

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np\n"
            "from beamsearch.speech import ctc_beam_search\n"
            "h = ctc_beam_search(np.log([[[0.6, 0.4], [0.6, 0.4]]]), blank=0, beam_size=2)[0][0]\n"
            "assert h.tokens == [1] and 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_vocabulary_from_a_sentencepiece_style_tokenizer():
    """A Unigram tokenizer with ▁ word starts (Parakeet's and OmniASR's convention), built here."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    pieces = [("<unk>", 0.0), ("<pad>", 0.0), ("\u2581he", -1.0), ("llo", -1.0), ("\u2581w", -1.0), ("orld", -1.0),
              ("\u2581", -2.0)]
    tok = tokenizers.Tokenizer(tokenizers.models.Unigram(pieces, unk_id=0, byte_fallback=False))
    tok.pre_tokenizer, tok.decoder = tokenizers.pre_tokenizers.Metaspace(), tokenizers.decoders.Metaspace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")
    vocab = Vocabulary.from_tokenizer(fast)
    assert vocab.special_ids == {0, 1} and vocab.word_delimiter is None
    assert vocab.text([2, 3, 4, 5], blank=1) == fast.decode([2, 3, 4, 5]) == "hello world"
    assert vocab.text([2, 3, 6, 4, 5], blank=1) == "hello world"  # a lone ▁ ends a word: one space, never two
    assert vocab.words([6, 2, 3, 0, 6, 4, 5, 6]) == [("hello", 1, 2), ("world", 5, 6)]
