"""Spoken-number text: dates, years, clock times and numbers written as people say them.

Every sentence is lowercase words of ``a-z`` and ``'`` separated by single spaces, no punctuation:
the transcripts of the speech model's training and test audio. ``spoken_sentences(count, seed)``
draws them from a seeded generator, the same list for the same arguments.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["MONTHS", "cardinal", "clock_time", "date", "digits", "ordinal", "spoken_sentences", "year"]

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
_DAYS_IN_MONTH = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_ORDINAL_WORD = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                 "nine": "ninth", "twelve": "twelfth"}


def _below_hundred(n: int) -> str:
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("" if ones == 0 else " " + ONES[ones])


def cardinal(n: int) -> str:
    """``n`` (0 <= n < 1,000,000) in words, British style: 705 -> "seven hundred and five",
    3612 -> "three thousand six hundred and twelve", 2001 -> "two thousand and one"."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"n must be in [0, 1000000); got {n}")
    if n < 100:
        return _below_hundred(n)
    thousands, rest = divmod(n, 1000)
    hundreds, below = divmod(rest, 100)
    parts = []
    if thousands:
        parts.append(cardinal(thousands) + " thousand")
    if hundreds:
        parts.append(ONES[hundreds] + " hundred")
    if below:
        parts.append(("and " if parts else "") + _below_hundred(below))
    return " ".join(parts)


def ordinal(n: int) -> str:
    """``n`` (1 <= n < 100) as an ordinal: 3 -> "third", 21 -> "twenty first", 30 -> "thirtieth"."""
    if not 1 <= n < 100:
        raise ValueError(f"n must be in [1, 100); got {n}")
    words = _below_hundred(n).split()
    last = words[-1]
    if last in _ORDINAL_WORD:
        words[-1] = _ORDINAL_WORD[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def digits(text: str) -> str:
    """Digits read one by one, zero as "oh": "107" -> "one oh seven"."""
    return " ".join("oh" if c == "0" else ONES[int(c)] for c in text)


def year(y: int, rng: random.Random | None = None) -> str:
    """A year (1100..2099) as said: 1987 -> "nineteen eighty seven", 1905 -> "nineteen oh five",
    1900 -> "nineteen hundred", 2001 -> "two thousand one" (or "two thousand and one"),
    2024 -> "twenty twenty four" (or "two thousand twenty four"); ``rng`` picks among the ways."""
    if not 1100 <= y <= 2099:
        raise ValueError(f"y must be in [1100, 2099]; got {y}")
    pick = rng.random() if rng is not None else 0.5
    century, rest = divmod(y, 100)
    if 2000 <= y < 2010 or (y >= 2010 and pick < 0.3):
        return "two thousand" + ("" if rest == 0 else (" and " if pick > 0.8 else " ") + _below_hundred(rest))
    if rest == 0:
        return _below_hundred(century) + " hundred"
    if rest < 10:
        return _below_hundred(century) + " oh " + ONES[rest]
    return _below_hundred(century) + " " + _below_hundred(rest)


def date(month: int, day: int, y: int | None, rng: random.Random) -> str:
    """A date: "march third nineteen eighty seven", "the fourth of july two thousand one",
    "july fourth" (``y`` None: no year)."""
    m, d = MONTHS[month - 1], ordinal(day)
    said = f"the {d} of {m}" if rng.random() < 0.4 else f"{m} {d}"
    return said if y is None else f"{said} {year(y, rng)}"


def clock_time(hour: int, minute: int, rng: random.Random) -> str:
    """A clock time (hour 1..12): "half past five", "quarter to nine", "seven oh five",
    "ten thirty", "six o'clock", "twenty past three", "ten to four" (``rng`` picks among the ways)."""
    nxt = hour % 12 + 1
    if minute == 0:
        return f"{ONES[hour]} o'clock"
    if rng.random() < 0.5 and minute % 5 == 0:
        if minute == 30:
            return f"half past {ONES[hour]}"
        if minute == 15:
            return f"quarter past {ONES[hour]}"
        if minute == 45:
            return f"quarter to {ONES[nxt]}"
        if minute < 30:
            return f"{_below_hundred(minute)} past {ONES[hour]}"
        return f"{_below_hundred(60 - minute)} to {ONES[nxt]}"
    if minute < 10:
        return f"{ONES[hour]} oh {ONES[minute]}"
    return f"{ONES[hour]} {_below_hundred(minute)}"


def _a_date(rng: random.Random) -> str:
    month = rng.randrange(1, 13)
    day = rng.randrange(1, _DAYS_IN_MONTH[month - 1] + 1)
    return date(month, day, None if rng.random() < 0.25 else rng.randrange(1100, 2100), rng)


def _a_year(rng: random.Random) -> str:
    return year(rng.randrange(1900, 2100) if rng.random() < 0.8 else rng.randrange(1100, 2100), rng)


def _a_time(rng: random.Random) -> str:
    minute = rng.choice([0, 15, 30, 45]) if rng.random() < 0.4 else rng.randrange(60)
    return clock_time(rng.randrange(1, 13), minute, rng)


def _a_number(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.2:
        return digits(str(rng.randrange(100, 1000)) if rng.random() < 0.7 else str(rng.randrange(1000, 10000)))
    if kind < 0.45:
        return cardinal(rng.randrange(100))
    if kind < 0.75:
        return cardinal(rng.randrange(100, 1000))
    return cardinal(rng.randrange(1000, 100_000) if rng.random() < 0.8 else rng.randrange(100_000, 1_000_000))


_FORMS: list[tuple[float, Callable[[random.Random], str]]] = [(0.35, _a_date), (0.15, _a_year), (0.25, _a_time),
                                                              (0.25, _a_number)]


def spoken_sentences(count: int, seed: int) -> list[str]:
    """``count`` sentences (dates, years, clock times, numbers), each lowercase words without
    punctuation separated by single spaces, drawn from ``random.Random(seed)``: the same list for
    the same ``count`` and ``seed`` (and the first ``k`` of ``count`` are those of ``k``)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an integer >= 0; got {count!r}")
    rng = random.Random(seed)
    weights = [w for w, _ in _FORMS]
    return [rng.choices(_FORMS, weights)[0][1](rng) for _ in range(count)]
