"""A word n-gram LM fused at word boundaries: each candidate's logprob is the model's (a plain
teacher-forced log_softmax sum over its tokens) plus ``alpha`` x kenlm's ``full_scores`` (x ln 10)
over the words of its text (split by a plain regex over the decoded text) + ``beta`` x words; the
LM changes the best where it should; windows are independent of their batch companions; bad
values are one-line errors naming the parameter."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from beamsearch.speech.ngram import NgramLM
from beamsearch.whisper import (
    FallbackOptions,
    WhisperOptions,
    WhisperTokens,
    WordLM,
    decode_windows,
    initial_tokens,
    transcribe_windows,
)
from beamsearch.whisper.word_lm import piece

kenlm = pytest.importorskip("kenlm")

TEXTS = [b" ", b" the", b" cat", b"s", b",", b" sat", b" dog", b"'s", b" .", b" cow"]  # ids 0-9 are text
EOT, V = 10, 20
TOKENS = WhisperTokens(eot=10, sot=11, translate=12, transcribe=13, sot_lm=14, sot_prev=15, no_speech=16,
                       no_timestamps=17, timestamp_begin=18, blank=(0,), non_speech=(), sot_sequence=(11, 13))
PROMPT = initial_tokens(TOKENS, timestamps=False)
# a bigram LM by hand; "cow" is no word of it (<unk>)
ARPA = """\\data\\
ngram 1=9
ngram 2=7

\\1-grams:
-1.0\t<unk>
-99\t<s>\t-0.3
-1.2\t</s>
-0.8\tthe\t-0.2
-0.9\tcat\t-0.25
-1.1\tcats\t-0.1
-1.0\tsat\t-0.3
-1.3\tdog\t-0.2
-1.4\tcat's\t-0.1

\\2-grams:
-0.2\t<s> the
-0.1\tthe cat
-2.5\tthe dog
-0.3\tcat sat
-0.4\tdog sat
-0.2\tsat </s>
-0.6\tcats sat

\\end\\
"""


@pytest.fixture(scope="module")
def arpa(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("lm") / "lm.arpa"
    path.write_text(ARPA)
    return str(path)


def plain_words(ids: list[int], finished: bool) -> list[str]:
    """The completed words of a text, from its decoded string: runs of letters and digits, joined
    by an apostrophe inside a word; unfinished, a word that reaches the text's end is still being
    spelled."""
    text = b"".join(TEXTS[i] for i in ids if i < len(TEXTS)).decode()
    found = list(re.finditer(r"[^\W_]+(?:'[^\W_]+)*", text))
    if not finished and found and found[-1].end() == len(text):
        found.pop()
    return [m.group() for m in found]


def plain_term(model: object, ids: list[int], alpha: float, beta: float) -> float:
    """alpha x kenlm's full_scores (natural log) over the words, </s> when eot ended the text, +
    beta x words."""
    finished = bool(ids) and ids[-1] == EOT
    words = plain_words([i for i in ids if i != EOT], finished)
    log10 = sum(s for s, _, _ in model.full_scores(" ".join(words), bos=True, eos=finished))  # type: ignore[attr-defined]
    return alpha * log10 * math.log(10) + beta * len(words)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


def table_step(table: np.ndarray):  # noqa: ANN201
    """The toy decoder: ``table[window, step, last token]`` are the logits."""
    def step(state: tuple, y_prev: np.ndarray) -> tuple:
        window, t = state
        return table[window, np.minimum(t, table.shape[1] - 1), y_prev], (window, t + 1)
    return step


def model_logprob(table: np.ndarray, window: int, ids: list[int]) -> float:
    """Teacher-forced: the sum of each token's log_softmax (no rule acts with these options)."""
    total, prev = 0.0, PROMPT[-1]
    for t, tok in enumerate(ids):
        total += log_softmax(table[window, min(t, table.shape[1] - 1), prev])[tok]
        prev = tok
    return total


def random_table(seed: int, n: int = 3) -> np.ndarray:
    table = np.random.default_rng(seed).normal(size=(n, 8, V, V)).astype(np.float32)
    table[..., EOT + 1 :] -= 30  # the special tokens and timestamps out of the way
    table[:, 4:, :, EOT] += 2.0
    return table


def decode(table: np.ndarray, options: WhisperOptions, windows: list[int] | None = None) -> list:
    windows = list(range(table.shape[0])) if windows is None else windows
    state = (np.asarray(windows), np.zeros(len(windows), np.int64))
    return decode_windows(table_step(table), state, [PROMPT] * len(windows), TOKENS, options, seeds=windows)


def opts(lm: WordLM | None, alpha: float, beta: float, **kw: object) -> WhisperOptions:
    base = {"suppress_blank": False, "suppress_tokens": (), "timestamps": False, "sample_len": 7, "lm": lm,
            "lm_alpha": alpha, "lm_beta": beta}
    return WhisperOptions(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kw", [{"beam_size": 4, "patience": 1.5, "n_best": 4}, {}, {"temperature": 0.8, "best_of": 3,
                                                                                      "n_best": 3}])
def test_each_candidates_added_score_is_kenlms_over_its_words(arpa: str, seed: int, kw: dict) -> None:
    ref = kenlm.Model(arpa)
    alpha, beta = [(0.7, 0.3), (1.3, -0.5), (0.0, 2.0)][seed % 3]
    table = random_table(seed)
    lm = WordLM(arpa, TEXTS, EOT, V, lowercase=seed % 2 == 1)
    for w, r in enumerate(decode(table, opts(lm, alpha, beta, **kw))):
        assert len(r.lm_scores) == len(r.n_best) and r.n_best
        for h, lm_score in zip(r.n_best, r.lm_scores, strict=True):
            ids = h.tokens + [EOT] * h.finished
            want = plain_term(ref, ids, alpha, beta)
            assert lm_score == pytest.approx(want, rel=1e-5, abs=1e-4)
            assert h.logprob == pytest.approx(model_logprob(table, w, ids) + want, rel=1e-5, abs=1e-4)
        best = r.n_best[0].tokens + [EOT] * r.n_best[0].finished
        assert r.sum_logprob == pytest.approx(model_logprob(table, w, best), rel=1e-5, abs=1e-4)


def test_the_lm_changes_the_best() -> None:
    """The model says " the dog sat" (dog 1.0 over cat 0.5); the LM's ``the dog`` is log10 -2.5
    against ``the cat`` -0.1 (hand-computed from the ARPA: ln 10 x 2.4 x alpha = 5.5 at alpha 1
    beats the 0.5 logit gap; ``dog sat`` -0.4 vs ``cat sat`` -0.3 adds to it)."""
    table = np.full((1, 5, V, V), -8.0, np.float32)
    table[0, 0, :, 1] = 5.0  # " the"
    table[0, 1, :, 6], table[0, 1, :, 2] = 1.0, 0.5  # " dog" | " cat"
    table[0, 2, :, 5] = 5.0  # " sat"
    table[0, 3:, :, EOT] = 5.0
    lm = WordLM(NgramLM.from_lines(ARPA.splitlines()), TEXTS, EOT, V)
    plain = decode(table, opts(None, 0.0, 0.0, beam_size=3))[0]
    fused = decode(table, opts(lm, 1.0, 0.0, beam_size=3))[0]
    assert plain.tokens == [1, 6, 5] and fused.tokens == [1, 2, 5]
    assert fused.sum_logprob < plain.sum_logprob  # the model alone prefers the other


@pytest.mark.parametrize("kw", [{"beam_size": 3, "n_best": 2}, {"temperature": 1.0, "best_of": 2}])
def test_a_window_decodes_as_alone_in_any_batch(arpa: str, kw: dict) -> None:
    table = random_table(11, 4)
    o = opts(WordLM(arpa, TEXTS, EOT, V), 0.9, 0.4, **kw)
    together = decode(table, o, [0, 1, 2, 3])
    for w in range(4):
        alone = decode(table, o, [w])[0]
        assert together[w].tokens == alone.tokens
        assert together[w].lm_scores == pytest.approx(alone.lm_scores)
        assert together[w].sum_logprob == pytest.approx(alone.sum_logprob, rel=1e-5)


def test_word_boundaries_of_byte_level_bpe() -> None:
    """(ends the word before, text it adds): a leading space starts a word; punctuation and
    whitespace end one and add nothing; other pieces (a contraction, a split character) add."""
    assert piece(b" Hello", False) == (True, "Hello")
    assert piece(b" Hello", True) == (True, "hello")
    assert piece(b"ing", False) == (False, "ing")
    assert piece(b"'s", False) == (False, "'s")
    assert piece(b",", False) == (True, "") and piece(b" ...", False) == (True, "")
    assert piece(b"\n", False) == (True, "")
    assert piece(" é".encode()[:2], False) == (True, "\xc3")  # the first byte of a 2-byte character


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"lm_alpha": -1.0}, ValueError, r"lm_alpha must be >= 0 and finite; got -1.0"),
    ({"lm_alpha": float("nan")}, ValueError, r"lm_alpha must be >= 0 and finite; got nan"),
    ({"lm_alpha": "1"}, TypeError, r"lm_alpha must be a real number; got '1'"),
    ({"lm_beta": float("inf")}, ValueError, r"lm_beta must be finite; got inf"),
    ({"lm": "lm.arpa"}, TypeError, r"lm must be None or a WordLM .*; got str"),
])
def test_bad_options_name_the_option(kw: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as info:
        WhisperOptions(**kw)
    assert "\n" not in str(info.value)


def test_bad_word_lm_arguments_name_the_parameter(arpa: str) -> None:
    with pytest.raises(ValueError, match=r"eot must be in \[len\(token_bytes\)=10, vocab_size=20\); got 5"):
        WordLM(arpa, TEXTS, 5, V)
    with pytest.raises(TypeError, match="lm must be an NgramLM or an ARPA file's path; got int"):
        WordLM(3, TEXTS, EOT, V)
    lm = WordLM(arpa, TEXTS, EOT, 24)
    table = random_table(0, 1)
    with pytest.raises(ValueError, match="lm was bound to vocab_size=24; the logits have 20"):
        decode(table, opts(lm, 1.0, 0.0))


@pytest.mark.parametrize("refill", [True, False])
def test_fallback_keeps_the_lm_and_each_window_decodes_as_alone(arpa: str, refill: bool) -> None:
    """Temperature fallback with the LM in one batch of at most 6 rows: every window's attempts
    and result are those it gets alone, and the LM term of its result is kenlm's."""
    ref, table = kenlm.Model(arpa), random_table(5, 5)
    table[0, :, :, 1] += 6  # window 0: confident, passes at temperature 0; the others fall back
    o = opts(WordLM(arpa, TEXTS, EOT, V), 0.8, 0.2, beam_size=3)
    fb = FallbackOptions(temperatures=(0.0, 0.5, 1.0), logprob_threshold=-1.0, compression_ratio_threshold=None,
                         best_of=2)

    def run(windows: list[int]) -> list:
        return transcribe_windows(table_step(table), lambda ws: (np.asarray([windows[w] for w in ws]),
                                                                 np.zeros(len(ws), np.int64)),
                                  [PROMPT] * len(windows), TOKENS, o, fb, max_rows=6, seeds=windows, refill=refill)

    together = run([0, 1, 2, 3, 4])
    assert len(together[0].temperatures) == 1 and max(len(r.temperatures) for r in together) > 1
    for w, got in enumerate(together):
        alone = run([w])[0]
        assert got.temperatures == alone.temperatures and got.result.tokens == alone.result.tokens
        best = got.result.n_best[0]
        assert got.result.lm_scores[0] == pytest.approx(plain_term(ref, best.tokens + [EOT] * best.finished, 0.8, 0.2),
                                                         rel=1e-5, abs=1e-4)


def test_whispers_own_tokenizer_words(arpa: str) -> None:
    """openai-whisper's GPT-2 byte-level BPE: the words of a real text's tokens, punctuation and
    a contraction included, scored as kenlm scores the words a plain split finds."""
    from tests.whisper import openai_package

    tok = openai_package.load().tokenizer.get_tokenizer(False)
    vocab = tok.encoding.n_vocab
    lm = WordLM.from_openai(arpa, tok, vocab, lowercase=True)
    text = " The cat's, sat. The dogs sat!"
    ids = [*tok.encode(text), tok.eot]
    words = ["the", "cat's", "sat", "the", "dogs", "sat"]  # by hand: lower-cased, punctuation dropped
    ref = kenlm.Model(arpa)
    for eos, upto in [(True, len(ids)), (False, -1)]:  # without eot: "sat" ends at "!", no </s>
        want = 0.6 * math.log(10) * sum(s for s, _, _ in ref.full_scores(" ".join(words), eos=eos)) - 0.4 * 6
        assert lm.scores(ids[:upto], 0.6, -0.4) == pytest.approx(want, rel=1e-5)
