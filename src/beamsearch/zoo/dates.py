"""A dates data set, generated: human-written dates to ISO 8601 (``1987-03-03``).

Sources come in many forms ("3rd of March 1987", "Tue, Mar 3 1987", "03/03/87", "1987.3.3",
"march third nineteen eighty-seven"), with month and weekday names and abbreviations, ordinals,
mixed case and extra spaces. Numeric forms with slashes are month/day/year; with dots, day.month.year
or year.month.day (a four-digit year first).

Two-digit years ("'87", "03/03/87") carry real ambiguity: the writer's century is not written, and
in this corpus it is 1800s, 1900s or 2000s with probabilities 0.3, 0.3 and 0.4. So for such a
source the first digit of the year is '1' with probability 0.6, yet the single most likely output
starts with '2' (0.4 against 0.3 for each 1800s and 1900s reading): a greedy decoder commits to
'1' and a beam search can find '20'. Two-digit-year sources never name the weekday, which would
give the century away.

Splits are deterministic from seeds; the test set has no source that occurs in training.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

__all__ = ["CENTURY_WEIGHTS", "Example", "Vocab", "make_example", "make_splits", "SOURCE_VOCAB", "TARGET_VOCAB"]

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ORDINAL_ONES = ["", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
                "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth",
                "seventeenth", "eighteenth", "nineteenth"]
ORDINAL_TENS = {20: "twentieth", 30: "thirtieth"}
CENTURY_WEIGHTS = {1800: 0.3, 1900: 0.3, 2000: 0.4}
YEARS = (1800, 2099)

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


@dataclass(frozen=True)
class Example:
    source: str
    target: str
    two_digit_year: bool


class Vocab:
    """Characters to ids: 0 pad, 1 bos, 2 eos, 3 unk, then the characters."""

    def __init__(self, chars: str) -> None:
        self.itos = [PAD, BOS, EOS, UNK] + list(dict.fromkeys(chars))
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad, self.bos, self.eos, self.unk = 0, 1, 2, 3

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(c, self.unk) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.itos[i] for i in ids if i > self.unk)

    def unknown(self, text: str) -> list[str]:
        """The characters of ``text`` outside the vocabulary, in order of appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))


SOURCE_VOCAB = Vocab(" abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,./-'")
TARGET_VOCAB = Vocab("0123456789-")


def number_words(n: int) -> str:
    """0..99 in words: 'seven', 'forty-two'."""
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("-" + ONES[ones] if ones else "")


def ordinal_words(n: int) -> str:
    """1..31 as an ordinal: 'third', 'twenty-first', 'thirtieth'."""
    if n < 20:
        return ORDINAL_ONES[n]
    tens, ones = divmod(n, 10)
    return ORDINAL_TENS[tens * 10] if not ones else TENS[tens] + "-" + ORDINAL_ONES[ones]


def ordinal_digits(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def year_words(year: int, rng: random.Random) -> str:
    """'nineteen eighty-seven', 'eighteen oh five', 'two thousand three', 'twenty twelve'."""
    high, low = divmod(year, 100)
    if high == 20 and (low < 10 or rng.random() < 0.5):
        return "two thousand" + ((" and " if rng.random() < 0.3 else " ") + number_words(low) if low else "")
    if low == 0:
        return number_words(high) + " hundred"
    if low < 10:
        return f"{number_words(high)} oh {ONES[low]}"
    return f"{number_words(high)} {number_words(low)}"


def _case(text: str, rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return text
    if r < 0.7:
        return text.lower()
    if r < 0.8:
        return text.upper()
    if r < 0.9:
        return text.title()
    return "".join(c.upper() if rng.random() < 0.5 else c for c in text)


def _spaces(text: str, rng: random.Random) -> str:
    if rng.random() < 0.8:
        return text
    out = text.replace(" ", "  ") if rng.random() < 0.5 else text
    return (" " * rng.randint(0, 2)) + out + (" " * rng.randint(0, 2))


def _month(date: dt.date, rng: random.Random) -> str:
    name = MONTHS[date.month - 1]
    return name if rng.random() < 0.5 else name[:3]


def _weekday(date: dt.date, rng: random.Random) -> str:
    name = WEEKDAYS[date.weekday()]
    return name if rng.random() < 0.5 else name[:3]


def _day(date: dt.date, rng: random.Random) -> str:
    r = rng.random()
    return str(date.day) if r < 0.5 else (ordinal_digits(date.day) if r < 0.8 else ordinal_words(date.day))


def _four_digit_form(date: dt.date, rng: random.Random) -> str:
    y, m, d = date.year, date.month, date.day
    forms = [
        lambda: f"{_day(date, rng)} of {_month(date, rng)} {y}",
        lambda: f"{_month(date, rng)} {_day(date, rng)}, {y}",
        lambda: f"{_day(date, rng)} {_month(date, rng)} {y}",
        lambda: f"{_weekday(date, rng)}, {_month(date, rng)} {d} {y}",
        lambda: f"{_weekday(date, rng)} {_day(date, rng)} {_month(date, rng)} {y}",
        lambda: f"{m:02d}/{d:02d}/{y}" if rng.random() < 0.5 else f"{m}/{d}/{y}",
        lambda: f"{y}.{m}.{d}" if rng.random() < 0.5 else f"{y}.{m:02d}.{d:02d}",
        lambda: f"{d}.{m}.{y}" if rng.random() < 0.5 else f"{d:02d}.{m:02d}.{y}",
        lambda: f"{MONTHS[m - 1]} {ordinal_words(d)} {year_words(y, rng)}",
        lambda: f"the {ordinal_words(d)} of {MONTHS[m - 1]} {year_words(y, rng)}",
    ]
    return rng.choice(forms)()


def _two_digit_form(date: dt.date, rng: random.Random) -> str:
    yy, m, d = date.year % 100, date.month, date.day
    forms = [
        lambda: f"{_month(date, rng)} {d} '{yy:02d}",
        lambda: f"{_day(date, rng)} {_month(date, rng)} '{yy:02d}",
        lambda: f"{m:02d}/{d:02d}/{yy:02d}" if rng.random() < 0.5 else f"{m}/{d}/{yy:02d}",
        lambda: f"{_month(date, rng)} {_day(date, rng)} {yy:02d}",
        lambda: f"{MONTHS[m - 1]} {ordinal_words(d)} {number_words(yy) if yy >= 10 else 'oh ' + ONES[yy]}",
    ]
    return rng.choice(forms)()


def _random_date(year: int, rng: random.Random) -> dt.date:
    start = dt.date(year, 1, 1).toordinal()
    end = dt.date(year, 12, 31).toordinal()
    return dt.date.fromordinal(rng.randint(start, end))


def make_example(rng: random.Random, two_digit_share: float = 0.3) -> Example:
    """One example; with probability ``two_digit_share`` its source writes a two-digit year."""
    if rng.random() < two_digit_share:
        century = rng.choices(list(CENTURY_WEIGHTS), weights=list(CENTURY_WEIGHTS.values()))[0]
        while True:
            date = _random_date(century + rng.randint(0, 99), rng)
            if not (date.month == 2 and date.day == 29 and date.year % 100 == 0):
                break  # Feb 29 of a '00 year is a leap day in 2000 only: it would tell the century
        source = _two_digit_form(date, rng)
        two = True
    else:
        date = _random_date(rng.randint(*YEARS), rng)
        source = _four_digit_form(date, rng)
        two = False
    return Example(_spaces(_case(source, rng), rng), date.isoformat(), two)


def make_splits(train: int = 40_000, valid: int = 1_000, test: int = 2_000,
                seed: int = 0) -> dict[str, list[Example]]:
    """Deterministic train / valid / test splits; valid and test share no source with train."""
    rng = random.Random(seed)
    train_set = [make_example(rng) for _ in range(train)]
    seen = {e.source for e in train_set}
    out = {"train": train_set}
    for name, size in (("valid", valid), ("test", test)):
        part: list[Example] = []
        while len(part) < size:
            e = make_example(rng)
            if e.source not in seen:
                part.append(e)
                seen.add(e.source)
        out[name] = part
    return out
