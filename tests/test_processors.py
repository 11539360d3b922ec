"""The library's logits processors (beamsearch.processors) against plain per-row Python loops.

TopP, RepetitionPenalty, SequenceBias, BadWords and SuppressTokens: each is checked on random,
tie-heavy inputs with -inf entries (numpy and torch, float64 and float32), then end to end
through ``beam_search_batch(..., logits_processors=[...])`` against the plain reference search of
models.py, fed with the same processing written out. Processors are looked up on the module in
each test, so a missing one fails its own tests only.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import numpy as np
import pytest

import beamsearch
from beamsearch import processors as P

from beamsearch.backends import backend_of
from models import SequenceModel, gnmt, log_softmax, random_table, reference_batch

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None

BACKENDS = ["numpy"] + (["torch"] if torch is not None else [])
DTYPES = [np.float64, np.float32]
NEG_INF = -math.inf


# ---- plain references, one row at a time ------------------------------------------------------

def softmax(row: Sequence[float]) -> list[float]:
    finite = [v for v in row if v != NEG_INF]
    top = max(finite)
    e = [math.exp(v - top) if v != NEG_INF else 0.0 for v in row]
    total = math.fsum(e)
    return [v / total for v in e]


def top_p_cumsums(row: Sequence[float]) -> list[float]:
    q = softmax(row)
    order = sorted(range(len(row)), key=lambda j: -row[j])
    sums, acc = [], []
    for j in order:
        acc.append(q[j])
        sums.append(math.fsum(acc))
    return sums


def top_p_row(row: Sequence[float], p: float) -> list[float]:
    """Keep the logits >= the logit at the first position where the sorted mass reaches p."""
    if p >= 1:
        return list(row)
    q = softmax(row)
    order = sorted(range(len(row)), key=lambda j: -row[j])
    acc: list[float] = []
    threshold = row[order[-1]]
    for j in order:
        acc.append(q[j])
        if math.fsum(acc) >= p:
            threshold = row[j]
            break
    return [v if v >= threshold else NEG_INF for v in row]


def tokens_of(history_row: Sequence[int]) -> list[int]:
    """A history row without its left padding (-1)."""
    return [int(t) for t in history_row if t >= 0]


def repetition_row(row: Sequence[float], history: Sequence[int], penalty: float) -> list[float]:
    out = list(row)
    for t in set(history):
        out[t] = out[t] / penalty if out[t] > 0 else out[t] * penalty
    return out


def ends_with(history: Sequence[int], prefix: Sequence[int]) -> bool:
    return len(history) >= len(prefix) and list(history[len(history) - len(prefix):]) == list(prefix)


def sequence_bias_row(row: Sequence[float], history: Sequence[int], bias: dict) -> list[float]:
    out = list(row)
    for seq, b in bias.items():
        if len(seq) == 1 or ends_with(history, seq[:-1]):
            out[seq[-1]] += b
    return out


def bad_words_row(row: Sequence[float], history: Sequence[int], sequences: Sequence[Sequence[int]]) -> list[float]:
    out = list(row)
    for seq in sequences:
        if len(seq) == 1 or ends_with(history, seq[:-1]):
            out[seq[-1]] = NEG_INF
    return out


def suppress_row(row: Sequence[float], step: int, token_ids: Sequence[int], first_steps: int | None) -> list[float]:
    out = list(row)
    if first_steps is None or step <= first_steps:
        for t in token_ids:
            out[t] = NEG_INF
    return out


# ---- random inputs -------------------------------------------------------------------------------

def as_backend(a: np.ndarray, name: str):
    return torch.from_numpy(a.copy()) if name == "torch" else a.copy()


def to_np(x) -> np.ndarray:
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def history_matrix(rows: Sequence[Sequence[int]], width: int | None = None) -> np.ndarray:
    width = max([len(r) for r in rows] + [0]) if width is None else width
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r):] = r
    return out


def random_logits(rng: np.random.Generator, dtype: Any, rows: int | None = None,
                  vocab: int | None = None) -> np.ndarray:
    k = int(rng.integers(1, 5)) if rows is None else rows
    v = int(rng.integers(1, 13)) if vocab is None else vocab
    if rng.random() < 0.5:
        x = rng.integers(-3, 4, size=(k, v)).astype(np.float64)  # ties and zeros
    else:
        x = np.round(rng.normal(size=(k, v)) * 2.0, 3)
    x[rng.random(x.shape) < 0.2] = -np.inf
    for r in range(k):
        if not np.isfinite(x[r]).any():
            x[r, int(rng.integers(v))] = float(rng.integers(-2, 3))
    return x.astype(dtype)


def random_histories(rng: np.random.Generator, k: int, vocab: int) -> np.ndarray:
    width = int(rng.integers(0, 8))
    rows = [[int(t) for t in rng.integers(0, vocab, size=int(rng.integers(0, width + 1)))] for _ in range(k)]
    return history_matrix(rows, width)


def apply(processor: Callable, x: np.ndarray, name: str, history: np.ndarray, step: int = 1) -> np.ndarray:
    """Run ``processor`` on a backend copy of ``x``; its return value, as float64 numpy."""
    xb = as_backend(x, name)
    out = processor(xb, P.StepContext(step, history, np.arange(x.shape[0], dtype=np.int64),
                                      backend_of(xb)))
    got = to_np(out)
    assert got.shape == x.shape
    return got.astype(np.float64)


def tolerance(dtype: Any) -> dict:
    return dict(rtol=1e-12, atol=0) if dtype == np.float64 else dict(rtol=2e-6, atol=1e-6)


def assert_rows_close(got: np.ndarray, expected: Sequence[Sequence[float]], dtype: Any) -> None:
    np.testing.assert_allclose(got, np.array(expected, dtype=np.float64), **tolerance(dtype))


CASES = 150


# ---- TopP --------------------------------------------------------------------------------------

def safe_p(rng: np.random.Generator, x: np.ndarray, margin: float = 1e-5) -> float:
    """A p in (0, 1) with no cumulative sum of any row within ``margin`` of it."""
    sums = [s for r in range(x.shape[0]) for s in top_p_cumsums(x[r].astype(np.float64).tolist())]
    while True:
        p = float(rng.choice([rng.uniform(0.01, 0.99), rng.uniform(0.9, 0.999), rng.uniform(0.001, 0.2)]))
        if all(abs(s - p) > margin for s in sums):
            return p


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_top_p_equals_a_plain_loop(name, dtype):
    rng = np.random.default_rng(10)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        p = safe_p(rng, x)
        got = apply(P.TopP(p), x, name, random_histories(rng, x.shape[0], x.shape[1]))
        expected = [top_p_row(x[r].astype(np.float64).tolist(), p) for r in range(x.shape[0])]
        assert got.tolist() == expected, (case, x.tolist(), p)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_top_p_one_keeps_every_token(name, dtype):
    rng = np.random.default_rng(11)
    for _ in range(40):
        x = random_logits(rng, dtype)
        got = apply(P.TopP(1.0), x, name, history_matrix([[]] * x.shape[0]))
        assert got.tolist() == x.astype(np.float64).tolist()
    # tokens whose probability underflows to 0 are kept too, and an int p = 1 is a real number
    x = np.array([[0.0, -800.0, 5.0, -np.inf], [3.0, 3.0, -1000.0, 2.0]], dtype=dtype)
    for p in (1.0, 1):
        assert apply(P.TopP(p), x, name, history_matrix([[], []])).tolist() == x.astype(np.float64).tolist()


@pytest.mark.parametrize("name", BACKENDS)
def test_top_p_by_hand(name):
    # q = softmax([2, 2, 0, -inf]) = [0.4683, 0.4683, 0.0634, 0]: p = 0.3 stops at the first 2,
    # whose tie is kept; p = 0.95 needs the 0 too. [5, -800]: the first token alone has q = 1.
    x = np.array([[2.0, 2.0, 0.0, -np.inf], [2.0, 0.0, 2.0, 1.0], [5.0, -800.0, -np.inf, -np.inf]])
    h = history_matrix([[], [], []])
    assert apply(P.TopP(0.3), x, name, h).tolist() == [
        [2.0, 2.0, NEG_INF, NEG_INF], [2.0, NEG_INF, 2.0, NEG_INF], [5.0, NEG_INF, NEG_INF, NEG_INF]]
    assert apply(P.TopP(0.95), x, name, h).tolist() == [
        [2.0, 2.0, 0.0, NEG_INF], [2.0, 0.0, 2.0, 1.0], [5.0, NEG_INF, NEG_INF, NEG_INF]]
    # a single finite token, and V = 1
    assert apply(P.TopP(0.01), np.array([[-np.inf, 1.5]]), name, h[:1]).tolist() == [[NEG_INF, 1.5]]
    assert apply(P.TopP(0.5), np.array([[0.25]]), name, h[:1]).tolist() == [[0.25]]


@pytest.mark.parametrize("p", [0, 0.0, -0.1, 1.0000001, 1.5, float("nan"), float("inf"), -float("inf")])
def test_top_p_out_of_range(p):
    with pytest.raises(ValueError, match=r"(^|\W|_)p\b"):
        P.TopP(p)


@pytest.mark.parametrize("p", ["0.5", None, [0.5], 0.5j])
def test_top_p_not_a_real_number(p):
    with pytest.raises(TypeError, match=r"(^|\W|_)p\b"):
        P.TopP(p)


def test_top_p_accepts_numpy_reals():
    x = np.array([[1.0, 0.0, -1.0]])
    h = history_matrix([[]])
    assert apply(P.TopP(np.float64(0.5)), x, "numpy", h).tolist() == [top_p_row([1.0, 0.0, -1.0], 0.5)]
    assert apply(P.TopP(np.float32(0.9)), x, "numpy", h).tolist() == [top_p_row([1.0, 0.0, -1.0], 0.9)]


# ---- RepetitionPenalty ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_repetition_penalty_equals_a_plain_loop(name, dtype):
    rng = np.random.default_rng(20)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        hist = random_histories(rng, x.shape[0], x.shape[1])
        penalty = float(rng.choice([1.0, 1.3, 2.0, 0.7, 0.25, 5.0]))
        got = apply(P.RepetitionPenalty(penalty), x, name, hist)
        expected = [repetition_row(x[r].astype(np.float64).tolist(), tokens_of(hist[r]), penalty)
                    for r in range(x.shape[0])]
        assert_rows_close(got, expected, dtype)


@pytest.mark.parametrize("name", BACKENDS)
def test_repetition_penalty_by_hand(name):
    # token 1 appears three times: it is penalized once; -inf and 0 stay; token 4 is not in history
    x = np.array([[2.0, 3.0, -1.5, 0.0, 4.0, -np.inf], [2.0, 3.0, -1.5, 0.0, 4.0, -np.inf]])
    hist = history_matrix([[1, 1, 2, 3, 1, 5, 0], [4]])
    got = apply(P.RepetitionPenalty(2.0), x, name, hist)
    assert got.tolist() == [[1.0, 1.5, -3.0, 0.0, 4.0, NEG_INF], [2.0, 3.0, -1.5, 0.0, 2.0, NEG_INF]]
    # a penalty below 1 rewards repetition
    got = apply(P.RepetitionPenalty(0.5), x, name, hist)
    assert got.tolist() == [[4.0, 6.0, -0.75, 0.0, 4.0, NEG_INF], [2.0, 3.0, -1.5, 0.0, 8.0, NEG_INF]]
    # an empty history (width 0 or all padding) changes nothing
    for empty in (history_matrix([[], []]), history_matrix([[], []], 3)):
        assert apply(P.RepetitionPenalty(3.0), x, name, empty).tolist() == x.tolist()


@pytest.mark.parametrize("penalty", [0, 0.0, -1.0, float("nan"), float("inf"), -float("inf")])
def test_repetition_penalty_refused(penalty):
    with pytest.raises(ValueError, match="penalty"):
        P.RepetitionPenalty(penalty)


# ---- SequenceBias --------------------------------------------------------------------------------

def random_sequences(rng: np.random.Generator, vocab: int, hist: np.ndarray, count: int) -> list[tuple]:
    """Sequences of length 1-3, half of them built to match some row's history tail."""
    out = []
    for _ in range(count):
        length = int(rng.integers(1, 4))
        seq = [int(t) for t in rng.integers(0, vocab, size=length)]
        row = tokens_of(hist[int(rng.integers(hist.shape[0]))])
        if length > 1 and len(row) >= length - 1 and rng.random() < 0.5:
            seq[:-1] = row[len(row) - (length - 1):]
        out.append(tuple(seq))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_sequence_bias_equals_a_plain_loop(name, dtype):
    rng = np.random.default_rng(30)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        v = x.shape[1]
        hist = random_histories(rng, x.shape[0], v)
        seqs = random_sequences(rng, v, hist, int(rng.integers(1, 6)))
        bias = {s: float(rng.choice([-2.5, -1.0, 0.5, 1.25, 3.0])) for s in seqs}
        got = apply(P.SequenceBias(dict(bias)), x, name, hist)
        expected = [sequence_bias_row(x[r].astype(np.float64).tolist(), tokens_of(hist[r]), bias)
                    for r in range(x.shape[0])]
        assert_rows_close(got, expected, dtype)


@pytest.mark.parametrize("name", BACKENDS)
def test_sequence_bias_by_hand(name):
    x = np.zeros((3, 4))
    x[2, 3] = -np.inf
    hist = history_matrix([[0, 1], [2, 0, 2], [1]])
    bias = {(3,): 1.0, (1, 2): 2.0, (0, 1, 2): 4.0, (2, 3): -8.0, (0, 2, 1): 16.0, (1, 2, 0, 2, 0): 32.0}
    got = apply(P.SequenceBias(bias), x, name, hist)
    # row 0 ends (0, 1): (1, 2) and (0, 1, 2) add up on token 2; row 1 ends (.., 0, 2): (2, 3)
    # and (0, 2, 1); row 2 ends (1,): (1, 2); a longer sequence than the history never matches;
    # -inf stays -inf
    assert got.tolist() == [[0.0, 0.0, 6.0, 1.0], [0.0, 16.0, 0.0, -7.0], [0.0, 0.0, 2.0, NEG_INF]]


@pytest.mark.parametrize("bias, error", [
    ({(): 1.0}, ValueError),
    ({(1,): 1.0, (): -1.0}, ValueError),
    ({(-1,): 1.0}, ValueError),
    ({(0, -2): 1.0}, ValueError),
    ({(1.5,): 1.0}, TypeError),
    ({(0, "a"): 1.0}, TypeError),
    ({(None,): 1.0}, TypeError),
    ({(1,): float("nan")}, ValueError),
])
def test_sequence_bias_refused(bias, error):
    with pytest.raises(error, match="bias"):
        P.SequenceBias(bias)


# ---- BadWords ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_bad_words_equal_a_plain_loop(name, dtype):
    rng = np.random.default_rng(40)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        v = x.shape[1]
        hist = random_histories(rng, x.shape[0], v)
        seqs = random_sequences(rng, v, hist, int(rng.integers(1, 5)))
        sequences = [list(s) if rng.random() < 0.5 else s for s in seqs]
        got = apply(P.BadWords(sequences), x, name, hist)
        expected = [bad_words_row(x[r].astype(np.float64).tolist(), tokens_of(hist[r]), seqs)
                    for r in range(x.shape[0])]
        assert got.tolist() == expected, case


@pytest.mark.parametrize("name", BACKENDS)
def test_bad_words_by_hand(name):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    hist = history_matrix([[2, 1], [1, 2], []])
    got = apply(P.BadWords([[0], (2, 1, 3), [2, 2]]), x, name, hist)
    # [0] everywhere; (2, 1, 3) in row 0 only; [2, 2] in row 1 only; row 2 has no history
    assert got.tolist() == [[NEG_INF, 1.0, 2.0, NEG_INF], [NEG_INF, 5.0, NEG_INF, 7.0], [NEG_INF, 9.0, 10.0, 11.0]]


@pytest.mark.parametrize("sequences", [[[]], [[1], []], [(2, 3), ()]])
def test_bad_words_empty_sequence(sequences):
    with pytest.raises(ValueError, match="sequences"):
        P.BadWords(sequences)


# ---- SuppressTokens ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BACKENDS)
def test_suppress_tokens_equal_a_plain_loop(name, dtype):
    rng = np.random.default_rng(50)
    for case in range(CASES):
        x = random_logits(rng, dtype)
        v = x.shape[1]
        ids = [int(t) for t in rng.integers(0, v, size=int(rng.integers(1, 4)))]
        first = [None, 1, 2, 3][case % 4]
        step = int(rng.integers(1, 5))
        hist = random_histories(rng, x.shape[0], v)
        got = apply(P.SuppressTokens(ids, first_steps=first), x, name, hist, step=step)
        expected = [suppress_row(x[r].astype(np.float64).tolist(), step, ids, first) for r in range(x.shape[0])]
        assert got.tolist() == expected, (case, step, first)


@pytest.mark.parametrize("name", BACKENDS)
def test_suppress_tokens_by_hand(name):
    x = np.array([[1.0, 2.0, 3.0], [-1.0, -np.inf, 0.5]])
    h = history_matrix([[0], []])
    for step in (1, 2, 7):
        assert apply(P.SuppressTokens([0, 2]), x, name, h, step=step).tolist() == [
            [NEG_INF, 2.0, NEG_INF], [NEG_INF, NEG_INF, NEG_INF]]
        assert apply(P.SuppressTokens((1,)), x, name, h, step=step).tolist() == [
            [1.0, NEG_INF, 3.0], [-1.0, NEG_INF, 0.5]]
    begin = P.SuppressTokens([2], first_steps=1)  # transformers' suppress at begin
    assert apply(begin, x, name, h, step=1).tolist() == [[1.0, 2.0, NEG_INF], [-1.0, NEG_INF, NEG_INF]]
    assert apply(begin, x, name, h, step=2).tolist() == x.tolist()
    two = P.SuppressTokens([0], first_steps=2)
    assert apply(two, x, name, h, step=2)[:, 0].tolist() == [NEG_INF, NEG_INF]
    assert apply(two, x, name, h, step=3).tolist() == x.tolist()


def test_suppress_tokens_refused():
    with pytest.raises(ValueError, match="token_ids"):
        P.SuppressTokens([1, -1])
    with pytest.raises(ValueError, match="first_steps"):
        P.SuppressTokens([1], first_steps=0)


def test_history_readers_say_so():
    assert P.RepetitionPenalty.needs_history is True
    assert P.SequenceBias.needs_history is True
    assert P.BadWords.needs_history is True
    assert P.RepetitionPenalty(1.5).needs_history is True
    assert P.SequenceBias({(1,): 1.0}).needs_history is True
    assert P.BadWords([[1]]).needs_history is True


# ---- end to end through beam_search_batch ------------------------------------------------------

EOS = 0


def oracle_chain(specs: Sequence[tuple], row: Sequence[float], seq: Sequence[int], step: int) -> list[float]:
    """The processors described by ``specs`` applied in order to one row, as plain loops.

    ``seq`` is the row's prompt + generated tokens (its history), ``step`` the model call number.
    """
    x = [float(v) for v in row]
    for kind, arg in specs:
        if kind == "top_p":
            if any(v != NEG_INF for v in x):
                sums = top_p_cumsums(x)
                assert all(abs(s - arg) > 1e-7 for s in sums), "ambiguous test input: pick another seed"
                x = top_p_row(x, arg)
        elif kind == "repetition":
            x = repetition_row(x, list(seq), arg)
        elif kind == "bias":
            x = sequence_bias_row(x, list(seq), arg)
        elif kind == "bad":
            x = bad_words_row(x, list(seq), arg)
        elif kind == "suppress":
            x = suppress_row(x, step, arg[0], arg[1])
        else:  # pragma: no cover
            raise AssertionError(kind)
    return x


def build(specs: Sequence[tuple]) -> list:
    made = []
    for kind, arg in specs:
        if kind == "top_p":
            made.append(P.TopP(arg))
        elif kind == "repetition":
            made.append(P.RepetitionPenalty(arg))
        elif kind == "bias":
            made.append(P.SequenceBias(dict(arg)))
        elif kind == "bad":
            made.append(P.BadWords([list(s) for s in arg]))
        elif kind == "suppress":
            made.append(P.SuppressTokens(list(arg[0]), first_steps=arg[1]))
    return made


def search(table, prompts, specs, backend="numpy", **kw):
    model = SequenceModel(table, backend=backend)
    out = beamsearch.beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS,
                            logits_processors=build(specs), **kw)
    return out, model


def reference(table, prompts, specs, *, prompt_in_history=True, **kw):
    """reference_batch, one prompt at a time, over the table with the processing written out."""
    results = []
    for prompt in prompts:
        def processed(seq, prompt=tuple(prompt)):
            step = len(seq) - len(prompt) + 1
            hist = seq if prompt_in_history else seq[len(prompt):]
            return oracle_chain(specs, table(seq), hist, step)

        results += reference_batch(processed, [prompt], eos=EOS, **kw)
    return results


def rescored(table, prompt, tokens, specs) -> float:
    """The plain recomputation of a hypothesis's logprob: the processed log-softmax along it."""
    total = 0.0
    for t in range(len(tokens)):
        seq = tuple(prompt) + tuple(tokens[:t])
        total += log_softmax(oracle_chain(specs, table(seq), seq, t + 1))[tokens[t]]
    return total


def assert_matches(out, ref, table, prompts, specs, alpha):
    assert [[(tuple(h.tokens), h.finished) for h in hyps] for hyps in out] == \
        [[(e[0], e[3]) for e in r] for r in ref]
    for prompt, hyps, r in zip(prompts, out, ref):
        assert [h.logprob for h in hyps] == pytest.approx([e[1] for e in r], abs=1e-9)
        assert [h.score for h in hyps] == pytest.approx([e[2] for e in r], abs=1e-9)
        for h in hyps:
            assert h.logprob == pytest.approx(rescored(table, prompt, h.tokens, specs), abs=1e-9)
            assert h.score == pytest.approx(h.logprob / gnmt(len(h.tokens), alpha), abs=1e-9)


def random_specs(rng: np.random.Generator, vocab: int) -> list[tuple]:
    pool = []
    if rng.random() < 0.6:
        pool.append(("repetition", float(rng.choice([1.5, 2.0, 0.8]))))
    if rng.random() < 0.6:
        seqs = [tuple(int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 4)))) for _ in range(3)]
        pool.append(("bias", {s: float(rng.choice([-3.0, -1.0, 1.0, 2.0])) for s in seqs}))
    if rng.random() < 0.5:
        # at most two bans: with vocab >= 4 every row keeps a finite token
        pool.append(("bad", [tuple(int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 3))))
                             for _ in range(2)]))
    if rng.random() < 0.4:
        pool.append(("suppress", ([int(rng.integers(0, vocab))], [None, 1, 2][int(rng.integers(3))])))
    if rng.random() < 0.6:
        pool.append(("top_p", float(rng.choice([0.5, 0.8, 0.93]))))
    order = rng.permutation(len(pool))
    return [pool[i] for i in order]


@pytest.mark.parametrize("backend", BACKENDS)
def test_search_with_processors_equals_the_plain_reference(backend):
    rng = np.random.default_rng(60)
    for case in range(25):
        vocab = int(rng.integers(4, 7))
        table = random_table(vocab, 100 + case, eos=EOS, eos_shift=0.3)
        prompts = [[int(t) for t in rng.integers(0, vocab, size=int(rng.integers(1, 4)))]
                   for _ in range(int(rng.integers(1, 4)))]
        beam = int(rng.integers(1, 4))
        kw = dict(max_steps=int(rng.integers(1, 5)), beam_size=beam, n_best=int(rng.integers(1, beam + 1)),
                  alpha=0.6)
        specs = random_specs(rng, vocab)
        out, _ = search(table, prompts, specs, backend, **kw)
        ref = reference(table, prompts, specs, max_steps=kw["max_steps"], beam=beam, n_best=kw["n_best"],
                        alpha=0.6)
        assert_matches(out, ref, table, prompts, specs, 0.6)


@pytest.mark.parametrize("specs", [
    [("top_p", 0.7)],
    [("repetition", 1.8)],
    [("bias", {(2,): 1.5, (3, 1): -2.0, (1, 2, 3): 2.5})],
    [("bad", [(1,), (2, 3)])],
    [("suppress", ([EOS], 1))],
    [("suppress", ([2, 3], None))],
])
@pytest.mark.parametrize("backend", BACKENDS)
def test_each_processor_alone_in_the_search(backend, specs):
    for seed in range(4):
        table = random_table(5, 200 + seed, levels=2, eos=EOS, eos_shift=0.5)  # ties
        prompts = [[1], [3, 2], [2, 3, 1]]
        out, _ = search(table, prompts, specs, backend, max_steps=4, beam_size=3, n_best=2, alpha=0.6)
        ref = reference(table, prompts, specs, max_steps=4, beam=3, n_best=2, alpha=0.6)
        assert_matches(out, ref, table, prompts, specs, 0.6)


# the prompt counts: tokens that appear only in the prompt change the first step

FLAT = [0.0, 1.0, 2.0, -1.0, 0.5]  # eos = 0; the same logits after every prefix


def flat_table(seq):
    return FLAT


def first_step_logprobs(prompt, specs, backend="numpy"):
    """token -> logprob of the one-token hypotheses (every token kept: beam 5, one step)."""
    out, _ = search(flat_table, [prompt], specs, backend, max_steps=1, beam_size=5, n_best=5, alpha=0.6)
    got = {h.tokens[0]: h.logprob for h in out[0]}
    assert all(len(h.tokens) == 1 for h in out[0])
    return got


@pytest.mark.parametrize("backend", BACKENDS)
def test_repetition_penalty_counts_the_prompt(backend):
    prompt = [3, 2]  # 2 is the last prompt token (the first y_prev), 3 an earlier one
    got = first_step_logprobs(prompt, [("repetition", 2.0)], backend)
    expected = log_softmax([0.0, 1.0, 1.0, -2.0, 0.5])
    assert got == pytest.approx({v: expected[v] for v in range(5)}, abs=1e-12)
    assert abs(got[2] - log_softmax(FLAT)[2]) > 0.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_bias_and_bad_words_count_the_prompt(backend):
    bias = {(2, 4): 3.0, (3, 2, 1): -5.0, (1, 1): 7.0}
    got = first_step_logprobs([3, 2], [("bias", bias)], backend)
    expected = log_softmax([0.0, -4.0, 2.0, -1.0, 3.5])
    assert got == pytest.approx({v: expected[v] for v in range(5)}, abs=1e-12)
    got = first_step_logprobs([3, 2], [("bad", [(2, 4), (3, 2, 1), (1, 3)])], backend)
    expected = log_softmax([0.0, -math.inf, 2.0, -1.0, -math.inf])
    assert got == pytest.approx({v: expected[v] for v in (0, 2, 3)}, abs=1e-12)
    # a sequence that spans the prompt and the generated tokens
    table = random_table(5, 7, eos=EOS)
    specs = [("bad", [(2, 3, 1)]), ("bias", {(2, 1, 4): 2.0})]
    out, _ = search(table, [[3, 2]], specs, backend, max_steps=3, beam_size=5, n_best=5, alpha=0.6)
    ref = reference(table, [[3, 2]], specs, max_steps=3, beam=5, n_best=5, alpha=0.6)
    assert_matches(out, ref, table, [[3, 2]], specs, 0.6)
    assert all(h.tokens[:2] != [3, 1] for h in out[0])
    without = reference(table, [[3, 2]], specs, prompt_in_history=False, max_steps=3, beam=5, n_best=5,
                        alpha=0.6)
    assert [e[1] for e in ref[0]] != pytest.approx([e[1] for e in without[0]], abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_suppress_at_begin_in_the_search(backend):
    # eos is the best token everywhere but may not come first
    def table(seq):
        return [3.0, 1.0, 0.5, 0.0, -1.0]

    out, _ = search(table, [[1], [2, 2]], [("suppress", ([EOS], 1))], backend, max_steps=3, beam_size=2,
                    n_best=2, alpha=0.6)
    for hyps in out:
        assert len(hyps) == 2
        for h in hyps:
            assert h.finished and len(h.tokens) == 2 and h.tokens[0] != EOS
    first = log_softmax([-math.inf, 1.0, 0.5, 0.0, -1.0])
    assert [h.tokens for h in out[0]] == [[1, EOS], [2, EOS]]
    assert out[0][0].logprob == pytest.approx(first[1] + log_softmax(table(()))[EOS], abs=1e-12)


def test_history_processors_see_the_prompt_and_the_step():
    seen = []

    class Probe:
        needs_history = True

        def __call__(self, logits, ctx):
            seen.append((ctx.step, np.array(ctx.history, copy=True), np.array(ctx.row_input, copy=True)))
            return logits

    table = random_table(4, 3, eos=EOS)
    prompts = [[1, 2, 3], [2]]
    model = SequenceModel(table)
    beamsearch.beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=3,
                      beam_size=2, logits_processors=[Probe()])
    assert [s for s, _, _ in seen] == list(range(1, len(model.calls) + 1))
    for (_, hist, _), call in zip(seen, model.calls):
        assert hist.dtype == np.int64
        assert [tuple(tokens_of(r)) for r in hist] == call  # prompt + generated tokens, per row
        for r in hist:  # left padding only
            pad = int((r < 0).sum())
            assert (r[:pad] == -1).all() and (r[pad:] >= 0).all()


# ---- clear errors: ids outside [0, V), empty arguments, what a processor returns (issue 20 item 5) ----

def never_called(state, y_prev):
    raise AssertionError("the model must not be called for invalid arguments")


# (processor, its index, the argument named, the bad id): V = 5 below
OUTSIDE = [
    (lambda: P.SuppressTokens([1, 7]), "SuppressTokens(token_ids=[1, 7], first_steps=None)", "token_ids[1]", 7),
    (lambda: P.BadWords([[1], [2, 9]]), "BadWords(sequences=[[1], [2, 9]])", "sequences[1][1]", 9),
    (lambda: P.SequenceBias({(1,): 0.5, (5, 2): -1.0}), "SequenceBias(bias={(1,): 0.5, (5, 2): -1.0})",
     "bias key (5, 2)[0]", 5),
]


@pytest.mark.parametrize("make, shown, argument, bad", OUTSIDE, ids=["suppress", "bad_words", "bias"])
@pytest.mark.parametrize("entry", ["beam_search_batch", "score_sequences", "decode_stream"])
def test_processor_ids_outside_the_vocabulary_are_named(make, shown, argument, bad, entry):
    model = SequenceModel(random_table(5, 1))
    processors = [P.TopP(0.9), make()]  # the second: logits_processors[1]
    if entry == "beam_search_batch":
        call = lambda: beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0,
                                                    max_steps=3, beam_size=2, logits_processors=processors)
    elif entry == "score_sequences":
        call = lambda: beamsearch.score_sequences(model.step, model.init_state([[1]]), [[1]], [[2, 0]],
                                                  eos_token_id=0, logits_processors=processors)
    else:
        from beamsearch.refill import decode_stream

        def call():
            (result,) = decode_stream(model.step, lambda items: model.init_state([[1]]), [[1]], max_rows=2,
                                      beam_size=2, eos_token_id=0, max_steps=3, logits_processors=processors)
            raise result.error
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == f"logits_processors[1] ({shown}) {argument} must be in [0, V) with V=5; got {bad}"
    assert len(model.calls) == 1  # the first call gives V; nothing is processed or selected after it


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: P.BadWords([]), ValueError, r"^sequences must hold at least one token-id sequence; got \[\]$"),
    (lambda: P.SequenceBias({}), ValueError, r"^bias must map at least one token-id sequence to a bias; got \{\}$"),
    (lambda: P.SuppressTokens([]), ValueError, r"^token_ids must be a non-empty sequence of token ids; got \[\]$"),
    (lambda: P.SequenceBias({(1,): "x"}), TypeError, r"^bias\[\(1,\)\] must be a real number; got 'x'"),
    (lambda: P.SequenceBias({(1,): None}), TypeError, r"^bias\[\(1,\)\] must be a real number; got None"),
    (lambda: P.SequenceBias({(1,): float("inf")}), ValueError, r"^bias\[\(1,\)\] must be finite; got inf$"),
    (lambda: P.Temperature(float("inf")), ValueError, r"^temperature must be > 0 and finite; got inf$"),
    (lambda: P.Temperature(0.0), ValueError, r"^temperature must be > 0 and finite; got 0.0$"),
    (lambda: P.Temperature("1"), TypeError, r"^temperature must be a real number; got '1'"),
    (lambda: P.TopK(0), ValueError, r"^k must be >= 1; got 0$"),
    (lambda: P.TopK(2**63), ValueError, r"^k must be <= 2\*\*62"),
    (lambda: P.NoRepeatNGram(0), ValueError, r"^n must be >= 1; got 0$"),
    (lambda: P.SuppressTokens([2**63]), ValueError, r"^token_ids\[0\] must be in \[0, V\); got 9223372036854775808"),
])
def test_processor_arguments_refused_at_construction(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


@pytest.mark.parametrize("temperature", [float("inf"), np.float32("inf"), 0.0, -1.0, float("nan")])
def test_temperature_keyword_must_be_positive_and_finite(temperature):
    with pytest.raises(ValueError, match=r"^temperature must be > 0 and finite; got "):
        beamsearch.beam_search_batch(never_called, np.zeros(1), [[1]], eos_token_id=0, max_steps=2, beam_size=2,
                                     temperature=temperature)


def _returning(value_of):
    """A user processor returning ``value_of(logits)``."""

    def bad(logits, ctx):
        return value_of(logits)

    return bad


RETURNS = [
    (lambda x: None, TypeError, r"returned None; expected a numpy float64 ndarray of shape \(1, 5\) like the logits "
     r"it was given \(did it write into the logits and not return them\?\)$"),
    (lambda x: x.tolist(), TypeError, r"returned list \[\[.*; expected a numpy float64 ndarray of shape \(1, 5\)"),
    (lambda x: x[:, :3], ValueError, r"returned shape \(1, 3\); expected a numpy float64 ndarray of shape \(1, 5\)"),
    (lambda x: x.astype(np.int64), TypeError, r"returned dtype int64; expected a numpy float64 ndarray"),
    (lambda x: x.astype(np.float32), TypeError, r"returned dtype float32; expected a numpy float64 ndarray"),
    (lambda x: x[0], ValueError, r"returned shape \(5,\); expected a numpy float64 ndarray of shape \(1, 5\)"),
] + ([(lambda x: torch.from_numpy(x), TypeError, r"returned Tensor of shape \(1, 5\); expected a numpy float64")]
     if torch is not None else [])


@pytest.mark.parametrize("value_of, error, pattern", RETURNS)
def test_a_user_processor_returning_the_wrong_thing_is_named(value_of, error, pattern):
    model = SequenceModel(random_table(5, 1))
    bad = _returning(value_of)
    shown = re.escape(f"function {bad.__qualname__}")
    with pytest.raises(error, match=rf"^logits_processors\[1\] \({shown}\) " + pattern):
        beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                                     beam_size=2, logits_processors=[P.TopP(1.0), bad])


@pytest.mark.skipif(torch is None, reason="no torch")
def test_a_user_processor_returning_numpy_for_torch_logits_is_named():
    model = SequenceModel(random_table(5, 1), backend="torch")
    bad = _returning(lambda x: x.numpy())
    shown = re.escape(f"function {bad.__qualname__}")
    with pytest.raises(TypeError, match=rf"^logits_processors\[0\] \({shown}\) returned ndarray of shape \(1, 5\); "
                                        r"expected a torch float64 Tensor of shape \(1, 5\) on cpu like the logits"):
        beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0, max_steps=3,
                                     beam_size=2, logits_processors=[bad])


def test_a_new_array_of_the_right_kind_is_fine():
    # a processor may return a new array instead of writing in place: results equal the in-place one's
    model = SequenceModel(random_table(5, 1))
    run = lambda p: beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0,
                                                 max_steps=3, beam_size=2, logits_processors=[p])

    def in_place(x, ctx):
        x[:, 2] = NEG_INF
        return x

    def new(x, ctx):
        return np.where(np.arange(5) == 2, NEG_INF, x)

    assert run(new) == run(in_place) and all(2 not in h.tokens for h in run(new)[0])


def nan_token_1(x, ctx):
    x[:, 1] = np.nan
    return x


def inf_token_0(x, ctx):
    x[:, 0] = np.inf
    return x


def mask_all(x, ctx):
    x[:] = NEG_INF
    return x


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_a_non_finite_row_is_blamed_on_the_processor_that_made_it():
    model = SequenceModel(lambda prefix: np.array([1.0, 0.0, 0.0]))
    run = lambda **kw: beamsearch.beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=0,
                                                    max_steps=2, beam_size=2, **kw)
    # 1.0 / 1e-310 overflows to +inf: the temperature keyword did it, not logits_processors
    with pytest.raises(ValueError, match=r"^logits row 0 contains \+inf after temperature=1e-310 "):
        run(temperature=1e-310)

    with pytest.raises(ValueError, match=rf"^logits row 0 contains NaN after logits_processors\[1\] "
                                         r"\(function nan_token_1\) "):
        run(logits_processors=[P.TopP(1.0), nan_token_1, P.TopP(1.0)])

    # +inf masked afterwards: the row is left with no entry, which is no error (no extension)
    assert run(logits_processors=[inf_token_0, mask_all]) == [[]]


def test_banned_ngram_tokens_of_a_history_shorter_than_n_is_empty():
    """No n-gram fits in a history of fewer than n columns: two empty int64 arrays (the documented
    return), and NoRepeatNGram leaves the logits as they are."""
    history = np.array([[5, 6], [-1, 7]])
    rows, tokens = P.banned_ngram_tokens(history, 3)
    assert rows.shape == (0,) and tokens.shape == (0,)
    assert rows.dtype == np.int64 and tokens.dtype == np.int64
    logits = np.arange(16, dtype=np.float64).reshape(2, 8)
    ctx = P.StepContext(3, history, np.zeros(2, np.int64), backend_of(logits))
    assert P.NoRepeatNGram(3)(logits.copy(), ctx).tolist() == logits.tolist()


# ---- n-gram blocking's carried index against a plain loop over the whole history ---------------

def plain_banned(sequence: Sequence[int], n: int) -> set[int]:
    """The tokens that would repeat an n-gram of ``sequence`` (prompt + generated): a loop over
    every position, written from SPEC section 6."""
    if len(sequence) < n - 1:
        return set()
    tail = tuple(sequence[len(sequence) - (n - 1):]) if n > 1 else ()
    return {sequence[i + n - 1] for i in range(len(sequence) - n + 1) if tuple(sequence[i:i + n - 1]) == tail}


class NGramSpy:
    """Placed beside a :class:`NoRepeatNGram` in a search: at every step, each row's banned tokens
    from the index the search carries for it equal :func:`plain_banned` over the row's whole
    history (it reads the history, so the engine keeps it); it changes no logit."""

    needs_history = True
    last_step = None

    def __init__(self, ngram: P.NoRepeatNGram) -> None:
        self.ngram, self.checked, self.widest = ngram, 0, 0

    def __call__(self, logits, ctx):
        state = ctx.row_states(self.ngram)
        rows, tokens = state.banned()
        got: list[set[int]] = [set() for _ in range(ctx.history.shape[0])]
        for r, t in zip(rows.tolist(), tokens.tolist()):
            got[r].add(t)
        for r, row in enumerate(ctx.history.tolist()):
            assert got[r] == plain_banned([t for t in row if t >= 0], self.ngram.n), (ctx.step, r, row)
        self.checked += len(got)
        self.widest = max(self.widest, state.window.shape[1])
        return logits


def ngram_case(seed: int):
    rng = np.random.default_rng(seed)
    vocab, n = int(rng.integers(4, 8)), int(rng.integers(1, 5))
    prompts = [rng.integers(1, vocab, size=int(rng.integers(0, 7))).tolist() for _ in range(int(rng.integers(1, 4)))]
    return vocab, n, [p or [1] for p in prompts], int(rng.integers(1, 5))


@pytest.mark.parametrize("seed", range(3))
def test_ngram_table_lookups_equal_a_dict_through_its_merges(seed):
    """The search's table of shared n-grams against a Python dict of sets: 4,000 random entries
    (3 inputs, contexts of 2 tokens out of 6, so many repeat) added in batches of 1 to 60, past
    several merges of its latest part into the older one; after each batch, lookups of random
    (input, context) pairs find exactly the dict's tokens."""
    from beamsearch.processors.no_repeat_ngram import NGramTable

    rng = np.random.default_rng(seed)
    table, want, added = NGramTable(2), {}, 0
    while added < 4000:
        m = int(rng.integers(1, 61))
        owner, context, token = rng.integers(0, 3, m), rng.integers(0, 6, (m, 2)), rng.integers(0, 50, m)
        table.add(owner, context, token)
        for o, c, t in zip(owner.tolist(), context.tolist(), token.tolist()):
            want.setdefault((o, *c), set()).add(t)
        added += m
        q_owner, q_context = rng.integers(0, 4, 20), rng.integers(0, 7, (20, 2))
        query, tokens = table.lookup(q_owner, q_context)
        got: list[set[int]] = [set() for _ in range(20)]
        for i, t in zip(query.tolist(), tokens.tolist()):
            got[i].add(t)
        assert got == [want.get((o, *c), set()) for o, c in zip(q_owner.tolist(), q_context.tolist())]
    assert len(table) == added and table.old[0].size > 0  # the latest part was merged at least once


def banned_sets(rows: Any) -> list[set[int]]:
    """Each row's banned tokens from a :class:`~beamsearch.processors.no_repeat_ngram.NGramRows`."""
    got: list[set[int]] = [set() for _ in range(len(rows))]
    for r, t in zip(*(a.tolist() for a in rows.banned())):
        got[r].add(t)
    return got


@pytest.mark.parametrize("seed", range(24))
def test_ngram_rows_under_random_reorders_equal_the_plain_loop(seed):
    """The row states alone, driven as a search drives them: 1 to 3 inputs with random prompts
    (some empty or shorter than n - 1), n from 1 to 4, a vocabulary of 2 to 4 tokens (n-grams
    repeat often); each step the rows are taken by random parents (shuffled, forked, an input's
    rows often all children of one row so that they agree and their tokens move to the table,
    sometimes an input dropped) and advanced by random tokens. At every step each row's banned
    tokens equal the plain loop over its whole sequence, kept here as Python lists."""
    from beamsearch.core.state import select_state

    rng = np.random.default_rng(seed)
    n, vocab, inputs = int(rng.integers(1, 5)), int(rng.integers(2, 5)), int(rng.integers(1, 4))
    prompts = [rng.integers(0, vocab, size=int(rng.integers(0, 6))).tolist() for _ in range(inputs)]
    rows = P.NoRepeatNGram(n).start_prompts(prompts)
    seqs, owner = [list(p) for p in prompts], list(range(inputs))
    before = settled = len(rows.table)  # the prompts' n-grams
    for step in range(80):
        assert banned_sets(rows) == [plain_banned(s, n) for s in seqs], (seed, step)
        parent = []
        for i in sorted(set(owner)):
            mine = [r for r, o in enumerate(owner) if o == i]
            if rng.random() < 0.05 and len(set(owner)) > 1:
                continue  # the input ends
            source = [mine[int(rng.integers(len(mine)))]] if rng.random() < 0.4 else mine
            parent += rng.choice(source, size=int(rng.integers(1, 5))).tolist()
        parent = rng.permutation(parent)
        rows = select_state(rows, parent)
        seqs, owner = [list(seqs[p]) for p in parent], [owner[p] for p in parent]
        tokens = rng.integers(0, vocab, size=len(parent))
        if rng.random() < 0.3:
            tokens[:] = tokens[0]
        rows = rows.advance(tokens)
        for s, t in zip(seqs, tokens.tolist()):
            s.append(t)
        settled = max(settled, len(rows.table))
    assert banned_sets(rows) == [plain_banned(s, n) for s in seqs]
    assert settled > before  # generated n-grams moved to the table, not only kept in the windows


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(12))
def test_carried_ngram_index_equals_a_plain_loop_over_the_history(seed, backend):
    """Beam search over random models, batches of prompts of random lengths (some shorter than
    n - 1), n from 1 to 4: at every step each row's banned tokens from its carried index (rows
    reordered by their parents, forked for their children, the tokens all rows of an input share
    moved to the search's table) equal the plain loop's, and the results equal the plain
    reference search's (one hypothesis at a time, n-gram blocking by a loop)."""
    vocab, n, prompts, beam = ngram_case(seed)
    table = random_table(vocab, 400 + seed, eos=0, eos_shift=-1.0)
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    model = SequenceModel(table, backend=backend)
    got = beamsearch.beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=0, max_steps=14,
                                       beam_size=beam, n_best=beam, logits_processors=[ngram, spy], early_stop=False)
    assert spy.checked > 0
    want = reference_batch(table, prompts, eos=0, max_steps=14, beam=beam, n_best=beam, ngram=n, early_stop=False)
    for hyps, ref in zip(got, want):
        assert [tuple(h.tokens) for h in hyps] == [r[0] for r in ref]


@pytest.mark.parametrize("seed", range(4))
def test_carried_ngram_index_in_exact_search(seed):
    """The same check where a step's rows are passed in several calls (exact search, 2 rows per
    call, every prefix within the budget expanded: rows of one input apart for long)."""
    vocab, n, prompts, _ = ngram_case(100 + seed)
    table = random_table(vocab, 500 + seed, eos=0, eos_shift=-0.5)
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    model = SequenceModel(table)
    beamsearch.exact_search(model.step, model.init_state(prompts), prompts, eos_token_id=0, max_steps=5,
                            batch_rows=2, node_budget=300, logits_processors=[ngram, spy])
    assert spy.checked > 0


@pytest.mark.parametrize("seed", range(4))
def test_carried_ngram_index_in_refill(seed):
    """The same check where inputs join a running search (refill: cohorts started at different
    steps share the model calls), and the results equal the plain reference search's."""
    from beamsearch.refill import decode_stream

    rng = np.random.default_rng(600 + seed)
    vocab, n = int(rng.integers(4, 8)), int(rng.integers(1, 5))
    many = [rng.integers(1, vocab, size=int(rng.integers(1, 7))).tolist() for _ in range(8)]
    table = random_table(vocab, 500 + seed, eos=0, eos_shift=0.5)
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    model = SequenceModel(table)
    stream = decode_stream(model.step, lambda items: model.init_state(items), many, max_rows=7, eos_token_id=0,
                           max_steps=10, beam_size=3, logits_processors=[ngram, spy])
    got = {r.index: r.hypotheses for r in stream}
    assert spy.checked > 0 and stream.stats.mixed_calls > 0
    want = reference_batch(table, many, eos=0, max_steps=10, beam=3, ngram=n)
    for i, ref in enumerate(want):
        assert [tuple(h.tokens) for h in got[i]] == [r[0] for r in ref]


@pytest.mark.parametrize("expansion", ["beam", "sample"])
def test_step_search_blocks_ngrams_across_rounds(expansion):
    """Step search gives a round's segments whole prompts (the prompt and the solution so far)
    when n-gram blocking is on, so an n-gram is blocked against every earlier round too: no
    generated token of any solution completes an n-gram that was already in its prompt and the
    tokens before it (checked by the plain loop over the whole sequence)."""
    vocab, delim, n = 6, 5, 2
    model = SequenceModel(random_table(vocab, 77, eos=0, eos_shift=-2.0))
    prompts = [[1, 2, 1], [3]]
    kw = dict(scorer=lambda p, s: [0.5] * len(s), n=4, m=2, rounds=4, eos_token_id=0, max_steps=3,
              stop_sequences=[[delim]], no_repeat_ngram_size=n, expansion=expansion)
    if expansion == "sample":
        kw["sample_seed"] = 1
    got = beamsearch.step_search(model.step, model.init_state(prompts), prompts, **kw)
    rounds_seen = 0
    for prompt, solutions in zip(prompts, got):
        for s in solutions:
            rounds_seen = max(rounds_seen, len(s.segments))
            seq = prompt + s.tokens
            for j in range(len(prompt), len(seq)):
                assert seq[j] not in plain_banned(seq[:j], n), (prompt, s.tokens, j)
    assert rounds_seen >= 2
    # the same search with the spy beside the blocker: at every step of every round each row's
    # carried index (started from the whole prompt, forked for the round's expansions) equals
    # the plain loop over the prompt, the earlier rounds' tokens and this round's
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    del kw["no_repeat_ngram_size"]
    again = beamsearch.step_search(model.step, model.init_state(prompts), prompts, logits_processors=[ngram, spy], **kw)
    assert spy.checked > 0
    assert [[s.tokens for s in x] for x in again] == [[s.tokens for s in x] for x in got]


def test_the_carried_ngram_window_stays_short_while_rows_agree():
    """The rows of a beam agree a few steps back, so what each row keeps beside the table (its
    window) stays short however long the output: after 200 steps of beam 4 it is far narrower
    than the 204 tokens each row holds (the whole history, before)."""
    table = random_table(30, 3, eos=0, eos_shift=-50.0)
    ngram = P.NoRepeatNGram(3)
    spy = NGramSpy(ngram)
    model = SequenceModel(table)
    beamsearch.beam_search_batch(model.step, model.init_state([[1, 2, 3, 4]]), [[1, 2, 3, 4]], eos_token_id=0,
                                 max_steps=200, beam_size=4, logits_processors=[ngram, spy], early_stop=False)
    assert spy.checked == 4 * 199 + 1 and spy.widest < 60
