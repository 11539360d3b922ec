"""The calendar constraint, against a plain oracle written from the definition with ``datetime``:
a next character is allowed iff the output so far plus it is the start of some real date's
``isoformat()`` (year 0001-9999), eos iff the output so far is a whole real date (or, for the "no
date" answer, empty)."""

from __future__ import annotations

import datetime as dt
import functools
import random

import numpy as np
import pytest

from beamsearch import beam_search_batch
from beamsearch.backends import backend_of
from beamsearch.processors import StepContext
from beamsearch.zoo.calendar import CalendarDates, why_not_a_date
from beamsearch.zoo.dates import TARGET_VOCAB

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]
V = len(TARGET_VOCAB)
EOS = TARGET_VOCAB.eos


def real(text: str) -> bool:
    try:
        return len(text) == 10 and dt.date.fromisoformat(text).isoformat() == text
    except ValueError:
        return False


YEAR_PREFIXES = {f"{y:04d}"[:n] for y in range(1, 10000) for n in range(1, 5)}


@functools.cache
def dates_of(year: int) -> tuple[str, ...]:
    """Every real date of ``year`` as ``isoformat()``."""
    first, last = dt.date(year, 1, 1).toordinal(), dt.date(year, 12, 31).toordinal()
    return tuple(dt.date.fromordinal(o).isoformat() for o in range(first, last + 1))


def oracle_allowed(prefix: str, allow_empty: bool = True) -> set[str]:
    """The characters (and "$" for eos) that can follow ``prefix``, by enumeration of real dates."""
    out = set()
    if real(prefix) or (allow_empty and prefix == ""):
        out.add("$")
    for c in "0123456789-":
        s = prefix + c
        if len(s) <= 4:  # a year prefix: some year 0001..9999 starts with it
            if s in YEAR_PREFIXES:
                out.add(c)
        elif s[:4] in YEAR_PREFIXES and any(d.startswith(s) for d in dates_of(int(s[:4]))):
            out.add(c)
    return out


def as_set(row: np.ndarray) -> set[str]:
    return {"$" if i == EOS else TARGET_VOCAB.itos[i] for i in np.flatnonzero(row)}


def history(prefixes: list[str]) -> np.ndarray:
    """int64 ``[k, H]`` left-padded with -1, as StepContext holds the generated tokens."""
    width = max(1, max(len(p) for p in prefixes))
    return np.array([[-1] * (width - len(p)) + TARGET_VOCAB.encode(p) for p in prefixes], dtype=np.int64)


def random_prefixes(rng: random.Random, n: int) -> list[str]:
    """Prefixes of real dates (found by walking the oracle), at every length 0..10."""
    out = []
    for _ in range(n):
        p, length = "", rng.randint(0, 10)
        while len(p) < length:
            p += rng.choice(sorted(oracle_allowed(p) - {"$"}))
        out.append(p)
    return out


HAND = ["", "2", "000", "1999", "1999-", "1999-1", "1999-0", "1999-02-", "1900-02-2", "2000-02-2", "2023-02-2",
        "2001-04-3", "2001-05-3", "1999-12-31", "0000"[:3]]


@pytest.mark.parametrize("prefix", HAND)
def test_allowed_characters_equal_the_oracle_by_hand(prefix):
    got = as_set(CalendarDates().allowed(history([prefix]))[0])
    assert got == oracle_allowed(prefix)


def test_hand_values():
    """By hand: February's last day in 1900 is 28 (a century, not divisible by 400), in 2000 29."""
    allowed = CalendarDates().allowed(history(["1900-02-2", "2000-02-2", "2001-04-3", "1999-1", "000"]))
    assert as_set(allowed[0]) == set("012345678") and as_set(allowed[1]) == set("0123456789")
    assert as_set(allowed[2]) == {"0"} and as_set(allowed[3]) == {"0", "1", "2"}
    assert as_set(allowed[4]) == set("123456789")  # year 0000 does not exist


def test_allowed_characters_equal_the_oracle_on_random_prefixes_of_mixed_lengths():
    rng = random.Random(0)
    prefixes = random_prefixes(rng, 300)
    allowed = CalendarDates().allowed(history(prefixes))  # one call, rows of different lengths
    for p, row in zip(prefixes, allowed, strict=True):
        assert as_set(row) == oracle_allowed(p), p
    no_empty = CalendarDates(allow_empty=False).allowed(history([""]))[0]
    assert as_set(no_empty) == oracle_allowed("", allow_empty=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_processor_masks_logits_on_each_backend(backend):
    rng = np.random.default_rng(1)
    prefixes = random_prefixes(random.Random(2), 40)
    logits = rng.normal(size=(len(prefixes), V))
    if backend == "torch":
        logits = torch.tensor(logits)
    h = history(prefixes)
    ctx = StepContext(step=h.shape[1] + 1, history=h, row_input=np.zeros(len(prefixes), np.int64),
                      backend=backend_of(logits))
    out = CalendarDates()(logits, ctx)
    out = out.numpy() if backend == "torch" else out
    raw = logits.numpy() if backend == "torch" else logits
    for p, row, before in zip(prefixes, out, raw, strict=True):
        keep = np.isfinite(row)
        assert as_set(keep) == oracle_allowed(p)
        assert np.array_equal(row[keep], before[keep])  # allowed logits unchanged


@pytest.mark.parametrize("backend", BACKENDS)
def test_any_model_under_the_constraint_writes_only_real_dates(backend):
    """A random model (logits from a seeded table by step and previous token, favouring junk such
    as '9' and '-') searched with the constraint: every output is a real date or empty, on numpy and
    torch, and the result of an input does not depend on its batch companions."""
    rng = np.random.default_rng(3)
    table = rng.normal(scale=3.0, size=(6, 16, V, V))  # by input, step, previous token
    table[..., TARGET_VOCAB.stoi["9"]] += 2.0

    def step(state, y_prev):  # state: int64 [k, 2], each row's (input, step)
        s = state if backend == "numpy" else state.numpy()
        y = y_prev if backend == "numpy" else y_prev.numpy()
        logits, s = table[s[:, 0], s[:, 1], y], s + [0, 1]
        return (logits, s) if backend == "numpy" else (torch.tensor(logits), torch.tensor(s))

    def search(inputs):
        init = np.array([[i, 0] for i in inputs])
        init = init if backend == "numpy" else torch.tensor(init)
        return beam_search_batch(step, init, [[TARGET_VOCAB.bos]] * len(inputs), eos_token_id=EOS, max_steps=15,
                                 beam_size=4, n_best=4, logits_processors=[CalendarDates()])

    results = search(range(6))
    texts = [TARGET_VOCAB.decode(h.tokens) for hyps in results for h in hyps]
    assert len(texts) == 24 and all(t == "" or real(t) for t in texts)
    assert sum(t != "" for t in texts) >= 12 and all(h.finished for hyps in results for h in hyps)
    for i in (0, 4):
        alone = search([i])[0]
        assert [h.tokens for h in alone] == [h.tokens for h in results[i]]
        assert [h.logprob for h in alone] == pytest.approx([h.logprob for h in results[i]], abs=1e-12)


def test_a_vocabulary_without_digits_is_refused():
    from beamsearch.zoo.dates import Vocab

    with pytest.raises(ValueError, match="vocab must hold the digits and '-'; it lacks '89'"):
        CalendarDates(Vocab("01234567-"))


def test_why_not_a_date_agrees_with_datetime():
    """Every YYYY-MM-DD string of months 00-13 and days 00-32 in a common year, a leap year, a
    century that is not one (1900) and one that is (2000), and year 0000: None exactly when
    ``datetime`` accepts it."""
    for year in (0, 1900, 2000, 2023, 2024):
        for month in range(14):
            for day in range(33):
                text = f"{year:04d}-{month:02d}-{day:02d}"
                assert (why_not_a_date(text) is None) == real(text), text


@pytest.mark.parametrize("text,why", [
    ("2023-02-29", "2023 is not a leap year"), ("1900-02-29", "1900 is not a leap year"),
    ("2021-02-30", "February has 28 days"), ("2001-04-31", "April has 30 days"),
    ("2001-13-01", "there is no month 13"), ("2001-00-05", "there is no month 00"),
    ("2001-05-00", "there is no day 00"), ("0000-01-01", "there is no year 0000"),
    ("2001-5-6", "it is not of the form YYYY-MM-DD"), ("", "it is not of the form YYYY-MM-DD"),
])
def test_why_not_a_date_by_hand(text, why):
    assert why_not_a_date(text) == why
