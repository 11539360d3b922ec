"""Word n-gram LM fusion and word timestamps in transducer beam search, against plain references:
every alignment enumerated (tests/oracles/transducer.py) with the LM terms of each label sequence
computed by a dict-based back-off scorer (tests/oracles/ctc.py PlainLM) and the hotword rule written out
(test_speech_hotwords.final_positions)."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from beamsearch.speech import KenLMModel, NgramLM, TokenLM, Vocabulary, transducer_beam_search, transducer_greedy
from oracles.ctc import PlainLM, random_arpa
from oracles.transducer import TinyTransducer, brute_force
from tests.speech.test_hotwords import final_positions
from tests.speech.test_ngram import record_closed_steps, rnn_lm, token_lm_logprob

TOKENS = ["<pad>", "a", "b", "|"]  # blank 0; "|" ends a word
CASES = [(None, 1), (None, 2), ([0, 1, 2], 2), ([1, 2], 1)]


def words_of(labels, tokens=TOKENS) -> list[str]:
    """The words of a label sequence, from the convention: token strings joined, split at "|"."""
    return [w for w in "".join(tokens[t] for t in labels).split("|") if w]


def objective(model, u, frames, m, text, alpha, beta, hot=None, weight=0.0, unk=0.0):
    """Every label sequence with acoustic + alpha * (LM + unk per word not among the ARPA's
    1-grams) + beta * words (+ bonus), best first."""
    plain = PlainLM(text)
    out = []
    for labels, acoustic in brute_force(model, u, frames, m).items():
        if acoustic == -math.inf:
            continue
        words = words_of(labels)
        bonus = 0.0 if hot is None else weight * final_positions(list(labels), hot)
        lm = plain.sentence(words) + unk * sum((w,) not in plain.grams for w in words)
        out.append((labels, acoustic, acoustic + alpha * lm + beta * len(words) + bonus))
    return sorted(out, key=lambda x: -x[2])


def case(seed):
    rng = np.random.default_rng(seed)
    text = random_arpa(rng, int(rng.integers(1, 4)), ["a", "b", "ab", "ba", "aa"], int(rng.integers(2, 12)),
                       unk=bool(rng.random() < 0.5))
    return rng, text, float(rng.uniform(0, 2)), float(rng.uniform(-2, 3))


def decode(model, method, m, text, alpha, beta, beam=4000, n_best=None, lengths=None, **kw):
    return transducer_beam_search(model.enc, lengths, predictor=model.predictor, joint=model.joint, blank=0,
                                  state=model.state0(), durations=model.durations, max_symbols_per_frame=m,
                                  beam_size=beam, n_best=n_best or beam, method=method,
                                  vocabulary=Vocabulary(TOKENS), lm=NgramLM.from_lines(text.splitlines()),
                                  alpha=alpha, beta=beta, **kw)


def check(hyps, ranked, text, alpha, beta, unk=0.0):
    """The results are the ranking of the objective, with each term its plain value."""
    plain = PlainLM(text)
    assert len(hyps) == len(ranked)
    np.testing.assert_allclose([h.score for h in hyps], [r[2] for r in ranked], rtol=1e-9, atol=1e-9)
    truth = {r[0]: r for r in ranked}
    for h in hyps:
        labels, acoustic, total = truth[tuple(h.tokens)]
        words = words_of(h.tokens)
        assert h.score == pytest.approx(total, abs=1e-9)
        assert h.acoustic_score == pytest.approx(acoustic, abs=1e-9)
        oov = sum((w,) not in plain.grams for w in words)
        assert h.lm_score == pytest.approx(alpha * (plain.sentence(words) + unk * oov), abs=1e-9)
        assert h.word_score == pytest.approx(beta * len(words), abs=1e-12)
        assert h.score == pytest.approx(h.acoustic_score + h.lm_score + h.word_score + h.hotword_bonus, abs=1e-9)
        assert h.text == " ".join(words)


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("method", ["modified", "alsd"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nothing_pruned_the_results_are_brute_force_with_the_lm(durations, m, method, seed):
    _, text, alpha, beta = case(seed)
    model = TinyTransducer.make(seed, n=2, frames=3, vocab=4, durations=durations, scale=1.5)
    lengths = np.array([3, 2])
    res = decode(model, method, m, text, alpha, beta, lengths=lengths)
    for u in range(2):
        check(res[u], objective(model, u, int(lengths[u]), m, text, alpha, beta), text, alpha, beta)


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("method", ["modified", "alsd"])
@pytest.mark.parametrize("seed", [0, 6])
def test_nothing_pruned_an_unknown_word_offset_is_brute_force(durations, m, method, seed):
    """Each completed word not among the ARPA's 1-grams adds alpha x the offset (in lm_score)."""
    rng, text, alpha, beta = case(seed)
    unk = float(rng.uniform(-6, -1))
    model = TinyTransducer.make(seed, n=2, frames=3, vocab=4, durations=durations, scale=1.5)
    lengths = np.array([3, 2])
    res = decode(model, method, m, text, alpha, beta, lengths=lengths, unk_score_offset=unk)
    for u in range(2):
        check(res[u], objective(model, u, int(lengths[u]), m, text, alpha, beta, unk=unk), text, alpha, beta, unk)


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("seed", [3, 4, 5])
def test_nothing_pruned_lm_and_hotwords_are_brute_force(durations, m, seed):
    rng, text, alpha, beta = case(seed)
    hot = [tuple(int(x) for x in rng.integers(1, 4, size=int(rng.integers(1, 3)))) for _ in range(2)]
    weight = float(rng.uniform(0.2, 2))
    model = TinyTransducer.make(seed, n=1, frames=3, vocab=4, durations=durations, scale=1.5)
    hyps = decode(model, "alsd", m, text, alpha, beta, hotwords=[list(h) for h in hot], hotword_weight=weight)[0]
    ranked = objective(model, 0, 3, m, text, alpha, beta, hot, weight)
    check(hyps, ranked, text, alpha, beta)
    for h in hyps:
        assert h.hotword_bonus == pytest.approx(weight * final_positions(h.tokens, hot), abs=1e-12)


@pytest.mark.parametrize("durations,m", CASES)
def test_each_step_scores_the_words_it_closes_once(durations, m, monkeypatch):
    """The candidates' ranking closes each expanding hypothesis's word once per step and the
    chosen ones' LM states reuse it (each step is handed the words already closed); the results
    stay brute force's."""
    stepped = record_closed_steps(monkeypatch)
    _, text, alpha, beta = case(7)
    model = TinyTransducer.make(7, n=1, frames=3, vocab=4, durations=durations, scale=1.5)
    for method in ("modified", "alsd"):
        res = decode(model, method, m, text, alpha, beta)[0]
        check(res, objective(model, 0, 3, m, text, alpha, beta), text, alpha, beta)
    assert stepped and all(stepped)


def test_the_lm_changes_the_best_and_zero_weights_change_nothing():
    """An LM that knows only "b" (every other word is <unk>, log10 -5) moves the best to a
    sequence spelling b's; alpha = beta = 0 gives the plain search's results."""
    model = TinyTransducer.make(2, n=1, frames=4, vocab=4, scale=1.5)
    text = "\\data\\\nngram 1=4\n\n\\1-grams:\n-99\t<s>\n-0.1\tb\n-0.1\t</s>\n-5\t<unk>\n\\end\\\n"
    fns = dict(predictor=model.predictor, joint=model.joint, blank=0, state=model.state0(), beam_size=8, n_best=8,
               vocabulary=Vocabulary(TOKENS))
    plain = transducer_beam_search(model.enc, **fns)[0]
    fused = decode(model, "modified", 1, text, 3.0, 0.0, beam=8)[0]
    assert set(fused[0].text.split()) <= {"b"} and plain[0].text != fused[0].text
    zero = decode(model, "modified", 1, text, 0.0, 0.0, beam=8)[0]
    assert [h.tokens for h in zero] == [h.tokens for h in plain]
    np.testing.assert_allclose([h.score for h in zero], [h.score for h in plain], atol=1e-12)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_batch_independence_and_numpy_equals_torch(durations):
    torch = pytest.importorskip("torch")
    _, text, _, _ = case(7)
    model = TinyTransducer.make(9, n=4, frames=7, vocab=4, durations=durations, scale=1.5)
    lengths = np.array([7, 3, 0, 6])
    lm = NgramLM.from_lines(text.splitlines())
    kw = dict(blank=0, beam_size=4, n_best=3, durations=durations, max_symbols_per_frame=2,
              vocabulary=Vocabulary(TOKENS), lm=lm, alpha=0.9, beta=0.5, method="alsd")
    batch = transducer_beam_search(model.enc, lengths, predictor=model.predictor, joint=model.joint,
                                   state=model.state0(), **kw)

    def predictor(state, y):
        h = torch.tanh(state @ torch.tensor(model.W) + torch.tensor(model.E)[y])
        return h, h

    def joint(enc, pred):
        return enc @ torch.tensor(model.A) + pred @ torch.tensor(model.B)

    on_torch = transducer_beam_search(torch.tensor(model.enc), torch.tensor(lengths), predictor=predictor,
                                      joint=joint, state=torch.tensor(model.state0()), **kw)
    for i in range(4):
        alone = transducer_beam_search(model.enc[i : i + 1, : lengths[i]], predictor=model.predictor,
                                       joint=model.joint, state=model.state0()[i : i + 1], **kw)[0]
        for a, b, c in zip(batch[i], alone, on_torch[i], strict=True):
            assert a.tokens == b.tokens == c.tokens
            assert np.isclose(a.score, b.score, rtol=1e-9) and np.isclose(a.score, c.score, rtol=1e-9)
            assert np.isclose(a.lm_score, c.lm_score) and a.word_score == c.word_score


def test_an_arpa_path_and_a_kenlm_model_decode_as_the_arpa_arrays(tmp_path):
    _, text, _, _ = case(8)
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    model = TinyTransducer.make(4, n=2, frames=5, vocab=4, durations=[0, 1, 2], scale=1.5)
    kw = dict(predictor=model.predictor, joint=model.joint, blank=0, state=model.state0(), durations=[0, 1, 2],
              beam_size=4, n_best=4, vocabulary=Vocabulary(TOKENS), alpha=0.8, beta=0.4)
    ours = transducer_beam_search(model.enc, lm=NgramLM.from_lines(text.splitlines()), **kw)
    lms = [str(path), path]
    if importlib.util.find_spec("kenlm") is not None:
        lms.append(KenLMModel(str(path), ["a", "b", "ab", "ba", "aa"]))
    for lm in lms:
        for a, b in zip(ours, transducer_beam_search(model.enc, lm=lm, **kw), strict=True):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(alpha=-1.0), ValueError, "alpha"), (dict(beta=float("nan")), ValueError, "beta"),
    (dict(lm=3), TypeError, "lm"), (dict(vocabulary=None), ValueError, "vocabulary")])
def test_bad_lm_arguments_name_the_parameter(kwargs, error, match):
    model = TinyTransducer.make(0, n=1, frames=2, vocab=4)
    _, text, _, _ = case(0)
    args = dict(predictor=model.predictor, joint=model.joint, blank=0, beam_size=2, state=model.state0(),
                vocabulary=Vocabulary(TOKENS), lm=NgramLM.from_lines(text.splitlines()))
    args.update(kwargs)
    with pytest.raises(error, match=match):
        transducer_beam_search(model.enc, **args)


class Scripted:
    """A TDT whose joint reads only the last label: frame t's token and duration are fixed, so the
    alignment is known by hand. Frames (T = 6): label 1 ("a") with duration 2 at frame 0, label
    3 ("|") with duration 3 at frame 2, then label 2 ("b") with duration 0 and the blank with
    duration 1 at frame 5."""

    durations = [0, 1, 2, 3]
    plan = {0: (1, 2), 2: (3, 3), 5: (2, 0)}

    def __init__(self):
        self.enc = np.arange(6, dtype=np.float64).reshape(1, 6, 1)

    def predictor(self, state, y):
        y = np.asarray(y)
        return np.asarray(y, np.float64)[:, None], None

    def joint(self, enc, pred):
        out = np.full((enc.shape[0], 8), -20.0)
        for r, (t, after) in enumerate(zip(enc[:, 0].astype(int), pred[:, 0], strict=True)):
            tok, d = self.plan.get(t, (0, 1))
            if t == 5 and after == 2:  # "b" was emitted at frame 5: the blank of duration 1 ends it
                tok, d = 0, 1
            out[r, tok], out[r, 4 + d] = 0.0, 0.0
        return out


def test_tdt_words_end_at_the_last_frame_their_last_label_covers():
    """A TDT label emitted at frame t with duration d covers frames t .. t + d - 1 (the next
    symbol is read at t + d); a label of duration 0 covers its own frame. So the word "a" (label
    at frame 0, duration 2) spans frames 0..1, and "b" (frame 5, duration 0) frame 5 alone; in
    seconds (frame 0.04 s): [0, 0.08] and [0.2, 0.24]; each label's times likewise. Greedy and
    beam agree."""
    net = Scripted()
    kw = dict(predictor=net.predictor, joint=net.joint, blank=0, durations=net.durations,
              vocabulary=Vocabulary(TOKENS), frame_duration=0.04, max_symbols_per_frame=2)
    greedy = transducer_greedy(net.enc, **kw)[0]
    beam = transducer_beam_search(net.enc, beam_size=3, method="alsd", **kw)[0][0]
    for h in (greedy, beam):
        assert h.tokens == [1, 3, 2] and h.token_frames.tolist() == [0, 2, 5]
        assert h.token_durations.tolist() == [2, 3, 0]
        assert [(w.text, w.start_frame, w.end_frame) for w in h.words] == [("a", 0, 1), ("b", 5, 5)]
        assert [x for w in h.words for x in (w.start, w.end)] == pytest.approx([0.0, 0.08, 0.2, 0.24])
        # labels: "a" frames 0..1, "|" frames 2..4, "b" frame 5
        np.testing.assert_allclose(h.token_times, [[0.0, 0.08], [0.08, 0.2], [0.2, 0.24]])
    rnnt = TinyTransducer.make(11, n=1, frames=4, vocab=4, scale=2.0)
    g = transducer_greedy(rnnt.enc, predictor=rnnt.predictor, joint=rnnt.joint, blank=0, state=rnnt.state0(),
                          frame_duration=0.04)[0]
    assert len(g.tokens) > 0  # RNN-T: a label covers its own frame
    np.testing.assert_allclose(g.token_times, np.stack([g.token_frames, g.token_frames + 1], 1) * 0.04)
    assert transducer_greedy(rnnt.enc, predictor=rnnt.predictor, joint=rnnt.joint, blank=0,
                             state=rnnt.state0())[0].token_times is None


# ---- a token-level LM (a step function) ----

def token_objective(model, u, frames, m, step, init, bos, eos, alpha, hot=None, weight=0.0):
    """Every label sequence with acoustic + alpha * token LM (+ bonus), the LM computed one label
    at a time by the plain reference of the CTC tests."""
    out = []
    for labels, acoustic in brute_force(model, u, frames, m).items():
        if acoustic > -math.inf:
            bonus = 0.0 if hot is None else weight * final_positions(list(labels), hot)
            lm = alpha * token_lm_logprob(step, init, bos, labels, 0, eos)
            out.append((labels, acoustic, acoustic + lm + bonus, lm))
    return sorted(out, key=lambda x: -x[2])


@pytest.mark.parametrize("durations,m", CASES)
@pytest.mark.parametrize("method", ["modified", "alsd"])
@pytest.mark.parametrize("eos", [None, 3])
def test_nothing_pruned_a_token_lm_is_brute_force(durations, m, method, eos):
    step, init = rnn_lm(5, vocab=4)
    model = TinyTransducer.make(12, n=2, frames=3, vocab=4, durations=durations, scale=1.5)
    lengths = np.array([3, 2])
    res = transducer_beam_search(model.enc, lengths, predictor=model.predictor, joint=model.joint, blank=0,
                                 state=model.state0(), durations=durations, max_symbols_per_frame=m, beam_size=4000,
                                 n_best=4000, method=method, lm=TokenLM(step, init, bos=1, eos=eos), alpha=0.7)
    for u in range(2):
        ranked = token_objective(model, u, int(lengths[u]), m, step, init, 1, eos, 0.7)
        hyps = res[u]
        assert len(hyps) == len(ranked)
        np.testing.assert_allclose([h.score for h in hyps], [r[2] for r in ranked], rtol=1e-9, atol=1e-9)
        truth = {r[0]: r for r in ranked}
        for h in hyps:
            _, acoustic, total, lm = truth[tuple(h.tokens)]
            assert h.acoustic_score == pytest.approx(acoustic, abs=1e-9) and h.word_score == 0.0
            assert h.lm_score == pytest.approx(lm, abs=1e-9) and h.score == pytest.approx(total, abs=1e-9)


@pytest.mark.parametrize("durations,m", CASES[:3])
def test_nothing_pruned_a_token_lm_with_hotwords_is_brute_force(durations, m):
    step, init = rnn_lm(6, vocab=4)
    hot = [(2, 1), (3,)]
    model = TinyTransducer.make(13, n=1, frames=3, vocab=4, durations=durations, scale=1.5)
    hyps = transducer_beam_search(model.enc, predictor=model.predictor, joint=model.joint, blank=0,
                                  state=model.state0(), durations=durations, max_symbols_per_frame=m, beam_size=4000,
                                  n_best=4000, method="alsd", lm=TokenLM(step, init, bos=2, eos=1), alpha=0.9,
                                  hotwords=[list(h) for h in hot], hotword_weight=1.3)[0]
    ranked = token_objective(model, 0, 3, m, step, init, 2, 1, 0.9, hot, 1.3)
    np.testing.assert_allclose([h.score for h in hyps], [r[2] for r in ranked], rtol=1e-9, atol=1e-9)
    for h in hyps:
        assert h.score == pytest.approx(h.acoustic_score + h.lm_score + h.hotword_bonus, abs=1e-9)


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_a_token_lm_on_torch_equals_numpy_and_batches_are_independent(durations):
    torch = pytest.importorskip("torch")
    model = TinyTransducer.make(14, n=4, frames=7, vocab=4, durations=durations, scale=1.5)
    lengths = np.array([7, 3, 0, 6])
    step_np, init_np = rnn_lm(7, vocab=4)
    step_t, init_t = rnn_lm(7, vocab=4, torch=torch)
    kw = dict(blank=0, beam_size=4, n_best=3, durations=durations, max_symbols_per_frame=2, alpha=0.8,
              method="alsd")
    fns = dict(predictor=model.predictor, joint=model.joint, state=model.state0())
    batch = transducer_beam_search(model.enc, lengths, lm=TokenLM(step_np, init_np, bos=1, eos=2), **fns, **kw)
    on_torch = transducer_beam_search(model.enc, lengths, lm=TokenLM(step_t, init_t, bos=1, eos=2), **fns, **kw)
    for i in range(4):
        alone = transducer_beam_search(model.enc[i : i + 1, : lengths[i]], predictor=model.predictor,
                                       joint=model.joint, state=model.state0()[i : i + 1],
                                       lm=TokenLM(step_np, init_np, bos=1, eos=2), **kw)[0]
        for a, b, c in zip(batch[i], alone, on_torch[i], strict=True):
            assert a.tokens == b.tokens == c.tokens
            assert np.isclose(a.score, b.score, rtol=1e-9) and np.isclose(a.score, c.score, rtol=1e-9)
            assert np.isclose(a.lm_score, 0.8 * token_lm_logprob(step_np, init_np, 1, a.tokens, 0, 2))


def test_a_token_lm_of_another_size_is_refused():
    step, init = rnn_lm(0, vocab=5)
    model = TinyTransducer.make(0, n=1, frames=2, vocab=4)
    args = dict(predictor=model.predictor, joint=model.joint, blank=0, beam_size=2, state=model.state0())
    with pytest.raises(ValueError, match="logits"):
        transducer_beam_search(model.enc, lm=TokenLM(step, init, bos=1), **args)
    with pytest.raises(ValueError, match="TokenLM.bos"):
        transducer_beam_search(model.enc, lm=TokenLM(step, init, bos=9), **args)


def terms_grid(bonus_grid, beams, plan, w):
    """float64 ``[N * B, w + 1]``: the ranking terms of every hypothesis's candidates (the last
    column its own), from ``bonus_grid`` asked for every row; asked for a random part of the
    rows in a random order (as a step expands only some), it gives those rows' lines."""
    n, b = beams.score.shape
    u, s = np.divmod(np.arange(n * b), b)
    closed = None if plan.fusion is None else plan.fusion.close(*(h[u, s] for h in beams.lm[:3]))[1:]
    per_col, own = bonus_grid(beams, plan, (u, s), w, 0, closed)
    grid = np.concatenate([per_col, own[:, None]], axis=1)
    part = np.random.default_rng(w).permutation(n * b)[: n * b // 2]
    closed = None if closed is None else tuple(c[part] for c in closed)
    sub, every = bonus_grid(beams, plan, (u[part], s[part]), w, 0, closed)
    np.testing.assert_array_equal(sub, per_col[part])
    np.testing.assert_array_equal(every, own)
    return grid


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
@pytest.mark.parametrize("hot", [None, [[1, 2], [3, 1, 3]]])
def test_while_decoding_a_candidate_ranks_by_the_terms_it_will_have(durations, hot):
    """Pruning ranks each candidate (label, duration) of a hypothesis by the hotword and LM terms
    it gets once stepped by its label (the rank keep_live then uses): every column of the
    ranking grid equals the terms of the stepped states, one label at a time; the blank steps
    nothing, so a match in progress keeps its bonus (it was ranked as if the blank reset it)."""
    from beamsearch.speech.fusion import WordFusion
    from beamsearch.speech.hotwords import hotwords_of
    from beamsearch.speech.transducer_merge import Beams, Plan
    from beamsearch.speech.transducer_search import bonus_grid

    rng, text, alpha, beta = case(21)
    n, b, vocab = 3, 4, len(TOKENS)
    fusion = WordFusion.of(NgramLM.from_lines(text.splitlines()), alpha, beta, Vocabulary(TOKENS), 0)
    hw = None if hot is None else hotwords_of(hot, 1.5, n, vocab, 0, None)
    plan = Plan(b, b, 2, "alignment", hw, fusion)
    beams = Beams.empty(n, b, plan)
    hs = tuple(h.ravel() for h in beams.hot)
    if hw is not None:
        hs = (np.repeat(hw.starts, b), hs[1], hs[2])
    ls = tuple(h.ravel() for h in beams.lm)
    for _ in range(6):  # random label sequences, one per slot
        label = rng.integers(1, vocab, size=n * b)
        ls = fusion.step(*ls, label)
        if hw is not None:
            hs = hw.step(*hs, label)
    beams.hot = tuple(h.reshape(n, b) for h in hs)  # type: ignore[assignment]
    beams.lm = tuple(h.reshape(n, b) for h in ls)
    dn = 1 if durations is None else len(durations)
    grid = terms_grid(bonus_grid, beams, plan, vocab * dn)
    np.testing.assert_allclose(grid[:, -1], plan.terms(hs, ls), rtol=1e-12)
    for k in range(vocab):
        label = np.full(n * b, k)
        stepped_h = hs if (hw is None or k == 0) else hw.step(*hs, label)
        stepped_l = ls if k == 0 else fusion.step(*ls, label)
        for d in range(dn):
            np.testing.assert_allclose(grid[:, k * dn + d], plan.terms(stepped_h, stepped_l), rtol=1e-12,
                                       err_msg=f"label {k}")


@pytest.mark.parametrize("durations", [None, [0, 1, 2]])
def test_while_decoding_a_token_lm_candidate_ranks_by_its_label_log_prob(durations):
    """With a token LM, column (label k, duration) of the ranking grid is alpha x (the LM
    log-prob of the labels so far + that of k from the slot's carried row); the blank adds
    nothing; hotwords add their stepped bonus as above."""
    from beamsearch.speech.hotwords import hotwords_of
    from beamsearch.speech.tokenlm import TokenFusion
    from beamsearch.speech.transducer_merge import Beams, Plan
    from beamsearch.speech.transducer_search import bonus_grid

    rng = np.random.default_rng(4)
    n, b, vocab = 2, 3, len(TOKENS)
    step, init = rnn_lm(2, vocab=vocab)
    token = TokenFusion(TokenLM(step, init, bos=1), 0.6, 0, vocab)
    hw = hotwords_of([[2, 3]], 0.7, n, vocab, 0, None)
    plan = Plan(b, b, 2, "alignment", hw, None, token)
    beams = Beams.empty(n, b, plan)
    so_far = rng.uniform(-5, 0, size=(n, b))
    beams.lm = beams.lm[:3] + (so_far,) + beams.lm[4:]
    beams.hot = (np.broadcast_to(hw.starts[:, None], (n, b)).copy(),) + beams.hot[1:]
    next_lp = np.log(rng.dirichlet(np.ones(vocab), size=n * b))
    beams.carried = (None, None, (next_lp, None))
    dn = 1 if durations is None else len(durations)
    grid = terms_grid(bonus_grid, beams, plan, vocab * dn)
    hs = tuple(h.ravel() for h in beams.hot)
    for k in range(vocab):
        stepped = hs if k == 0 else hw.step(*hs, np.full(n * b, k))
        want = 0.7 * hw.count(*stepped) + 0.6 * (so_far.ravel() + (0.0 if k == 0 else next_lp[:, k]))
        for d in range(dn):
            np.testing.assert_allclose(grid[:, k * dn + d], want, rtol=1e-12, err_msg=f"label {k}")
    np.testing.assert_allclose(grid[:, -1], 0.7 * hw.count(*hs) + 0.6 * so_far.ravel(), rtol=1e-12)
