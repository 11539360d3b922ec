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

:func:`written_year` reads back the year a source writes (four digits, or two when the century is
not written), in the forms above: what the translator checks its outputs against.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CENTURY_WEIGHTS", "FOUR_DIGIT_FORMS", "NO_DATE_FORMS", "SOURCE_VOCAB", "TARGET_VOCAB", "YEARS", "Example",
           "Vocab", "days_in_month", "make_example", "make_non_date", "make_splits", "written_year"]

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
YEARS = (1800, 2099)  # the years of the data set (four-digit years; two-digit years: CENTURY_WEIGHTS)

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


@dataclass(frozen=True)
class Example:
    """A source and its ISO 8601 target; the target is "" when the source is not a date."""

    source: str
    target: str
    two_digit_year: bool
    form: str = ""  # the name of the form it is written in ("two-digit year", "no date: ...")


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
    """'march', 'mar' or 'mar.'."""
    name, r = MONTHS[date.month - 1], rng.random()
    return name if r < 0.5 else name[:3] + ("." if r < 0.6 else "")


def _weekday(date: dt.date, rng: random.Random) -> str:
    name = WEEKDAYS[date.weekday()]
    return name if rng.random() < 0.5 else name[:3]


def _day(date: dt.date, rng: random.Random) -> str:
    r = rng.random()
    return str(date.day) if r < 0.5 else (ordinal_digits(date.day) if r < 0.8 else ordinal_words(date.day))


def _iso_like(sep: str) -> Callable[[dt.date, random.Random], str]:
    """Year first: ``1987-03-03``, ``1987/3/3``, ``1987.03.03`` (padded or not)."""
    def form(date: dt.date, rng: random.Random) -> str:
        m, d = (f"{date.month:02d}", f"{date.day:02d}") if rng.random() < 0.6 else (date.month, date.day)
        return f"{date.year}{sep}{m}{sep}{d}"
    return form


def _month_first(date: dt.date, rng: random.Random) -> str:
    """US numeric, month first: ``03/03/1987`` or ``3/3/1987``."""
    y, m, d = date.year, date.month, date.day
    return f"{m:02d}/{d:02d}/{y}" if rng.random() < 0.5 else f"{m}/{d}/{y}"


def _day_first_slash(date: dt.date, rng: random.Random) -> str:
    """European numeric with slashes, only where the day cannot be a month: ``25/12/1999``."""
    y, m, d = date.year, date.month, date.day
    return f"{d}/{m:02d}/{y}" if rng.random() < 0.5 else f"{d}/{m}/{y}"


# The four-digit-year forms, by name: (render, applies to this date?). Numeric forms with the year
# last read month first with slashes ("03/04/1999" is March 4), unless the first number is over 12
# ("25/12/1999" is 25 December), and day first with dots ("03.04.1999" is 3 April).
FOUR_DIGIT_FORMS: dict[str, Callable[[dt.date, random.Random], str]] = {
    "iso": lambda date, rng: date.isoformat(),
    "year-first dashes": _iso_like("-"),
    "year-first slashes": _iso_like("/"),
    "year-first dots": _iso_like("."),
    "compact": lambda date, rng: f"{date.year}{date.month:02d}{date.day:02d}",
    "us numeric": _month_first,
    "european slashes": _day_first_slash,
    "european dots": lambda date, rng: (f"{date.day}.{date.month}.{date.year}" if rng.random() < 0.5
                                        else f"{date.day:02d}.{date.month:02d}.{date.year}"),
    "day of month": lambda date, rng: f"{_day(date, rng)} of {_month(date, rng)} {date.year}",
    "month day, year": lambda date, rng: f"{_month(date, rng)} {_day(date, rng)}, {date.year}",
    "day month year": lambda date, rng: f"{_day(date, rng)} {_month(date, rng)} {date.year}",
    "year month day": lambda date, rng: f"{date.year} {_month(date, rng)} {_day(date, rng)}",
    "weekday, month day": lambda date, rng: f"{_weekday(date, rng)}, {_month(date, rng)} {date.day} {date.year}",
    "weekday day month": lambda date, rng: f"{_weekday(date, rng)} {_day(date, rng)} {_month(date, rng)} {date.year}",
    "words": lambda date, rng: f"{MONTHS[date.month - 1]} {ordinal_words(date.day)} {year_words(date.year, rng)}",
    "the words": lambda date, rng: (f"the {ordinal_words(date.day)} of {MONTHS[date.month - 1]} "
                                    f"{year_words(date.year, rng)}"),
}


def _four_digit_form(date: dt.date, rng: random.Random) -> tuple[str, str]:
    """-> (source, form name); "european slashes" only for days over 12."""
    names = [n for n in FOUR_DIGIT_FORMS if n != "european slashes" or date.day > 12]
    name = rng.choice(names)
    return FOUR_DIGIT_FORMS[name](date, rng), name


def _two_digit_form(date: dt.date, rng: random.Random) -> str:
    """'march 3 '87', '03/03/87', 'march third eighty-seven': the century is not written."""
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
    """One date; with probability ``two_digit_share`` its source writes a two-digit year."""
    if rng.random() < two_digit_share:
        century = rng.choices(list(CENTURY_WEIGHTS), weights=list(CENTURY_WEIGHTS.values()))[0]
        while True:
            date = _random_date(century + rng.randint(0, 99), rng)
            if not (date.month == 2 and date.day == 29 and date.year % 100 == 0):
                break  # Feb 29 of a '00 year is a leap day in 2000 only: it would tell the century
        source, form, two = _two_digit_form(date, rng), "two-digit year", True
    else:
        date = _random_date(rng.randint(*YEARS), rng)
        (source, form), two = _four_digit_form(date, rng), False
    return Example(_spaces(_case(source, rng), rng), date.isoformat(), two, form)


# ---- sources that are not dates: the model learns to answer "" (eos first) ---------------------------

WORDS = ["yesterday", "today", "tomorrow", "tonight", "now", "never", "soon", "later", "next", "last", "week",
         "month", "year", "day", "days", "ago", "hello", "world", "the", "of", "and", "a", "meeting", "lunch",
         "birthday", "deadline", "noon", "morning", "evening", "date", "time", "first", "second", "third",
         "spring", "summer", "autumn", "winter", "christmas", "easter", "weekend", "monday", "friday", "march",
         "may", "june", "dec", "sometime", "someday", "whenever", "asap", "tbd", "n/a", "none", "unknown",
         "in", "two", "three", "weeks", "from", "on", "at", "before", "after", "every", "other"]
_CHARS = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,./-'"


def days_in_month(year: int, month: int) -> int:
    """Days in ``month`` (1-12) of ``year``, Gregorian leap years."""
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _impossible_date(rng: random.Random) -> str:
    """A date-shaped source naming no real date: Feb 29 of a common year, April 31, month 13, day 0..."""
    y = rng.randint(*YEARS)
    kind = rng.random()
    if kind < 0.3:  # February 29 of a common year, or February 30 / 31
        while days_in_month(y, 2) == 29:
            y = rng.randint(*YEARS)
        m, d = 2, rng.choice([29, 29, 30, 31])
    elif kind < 0.6:  # one past the month's last day (32 for a 31-day month)
        m = rng.randint(1, 12)
        d = days_in_month(y, m) + 1 if days_in_month(y, m) < 31 or rng.random() < 0.5 else rng.randint(32, 39)
    elif kind < 0.8:  # month 0 or over 12
        m, d = rng.choice([0, 13, 14, 15, 19, 20, 31]), rng.randint(1, 31)
    else:  # day 0
        m, d = rng.randint(1, 12), 0
    forms = [f"{y}-{m:02d}-{d:02d}", f"{y}/{m:02d}/{d:02d}", f"{y}.{m}.{d}", f"{y}{m:02d}{d:02d}",
             f"{d:02d}.{m:02d}.{y}"]
    if m <= 12 or d > 12:  # "m/d/y" reads month first unless the first number is over 12
        forms.append(f"{m:02d}/{d:02d}/{y}")
        if (m, d) != (2, 29):  # with two digits, February 29 is real in some century
            forms.append(f"{m}/{d}/{y % 100:02d}")
    if 1 <= m <= 12:
        month = MONTHS[m - 1] if rng.random() < 0.5 else MONTHS[m - 1][:3]
        forms += [f"{month} {d}, {y}", f"{d} {month} {y}", f"{ordinal_digits(d)} of {month} {y}"]
    return rng.choice(forms)


def _no_year(rng: random.Random) -> str:
    """A day and month without a year: 'march 3', '3rd of May', '03/03'."""
    date = _random_date(2000, rng)  # a leap year: February 29 too
    return rng.choice([f"{_month(date, rng)} {_day(date, rng)}", f"{_day(date, rng)} of {_month(date, rng)}",
                       f"{date.month:02d}/{date.day:02d}", f"{_weekday(date, rng)} {date.day} {_month(date, rng)}"])


NO_DATE_FORMS: dict[str, Callable[[random.Random], str]] = {
    "random characters": lambda rng: "".join(rng.choice(_CHARS) for _ in range(rng.randint(1, 24))).strip() or "x",
    "words": lambda rng: " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))),
    "numbers": lambda rng: str(rng.randint(0, 99_999)) if rng.random() < 0.5 else str(rng.randint(10**8, 10**12)),
    "no year": _no_year,
    "impossible date": _impossible_date,
}


def make_non_date(rng: random.Random) -> Example:
    """A source that names no date (target ""): random characters, words ('yesterday'), numbers, a
    date without a year, or an impossible date ('Feb 29 2023', '13/13/2013', '31 april 2001')."""
    name = rng.choice(list(NO_DATE_FORMS))
    return Example(_spaces(_case(NO_DATE_FORMS[name](rng), rng), rng), "", False, f"no date: {name}")


def make_splits(train: int = 40_000, valid: int = 1_000, test: int = 2_000, seed: int = 0,
                no_date_share: float = 0.1) -> dict[str, list[Example]]:
    """Deterministic train / valid / test splits; valid and test share no source with train.

    A share ``no_date_share`` of each split are sources that are not dates (target "")."""
    rng = random.Random(seed)

    def draw() -> Example:
        return make_non_date(rng) if rng.random() < no_date_share else make_example(rng)

    train_set = [draw() for _ in range(train)]
    seen = {e.source for e in train_set}
    out = {"train": train_set}
    for name, size in (("valid", valid), ("test", test)):
        part: list[Example] = []
        while len(part) < size:
            e = draw()
            if e.source not in seen:
                part.append(e)
                seen.add(e.source)
        out[name] = part
    return out


# ---- the year a source writes -------------------------------------------------------------------------

_NUMBERS = {number_words(n): n for n in range(100)}  # 'seven' -> 7, 'forty-two' -> 42
_YEAR_WORDS = set(_NUMBERS) | {"hundred", "thousand", "oh", "and"}
_MONTH_TOKENS = set(MONTHS) | {m[:3] for m in MONTHS}
_DAY_WORDS = {ordinal_words(n) for n in range(1, 32)}
_FOUR = re.compile(r"(?<![0-9a-z'])(\d{8}|\d{4})(?![0-9a-z])")  # 1987, or 19870303 (compact)
_APOSTROPHE = re.compile(r"(?<![0-9a-z])'(\d{2})(?![0-9a-z])")  # '87


def written_year(source: str) -> str | None:
    """The year ``source`` writes, as written: four digits (``"1987"`` from "1987-03-03",
    "19870303", "3 mar 1987" or "nineteen eighty-seven"; ``"2150"``, ``"1750"`` too), two digits
    when the century is not written (``"87"`` from "march 3 '87", "03/03/87", "march 3rd 87",
    "march third eighty-seven"), or None when it writes no year or more than one reading of one.
    The inverse of the forms of :func:`make_example` (and of other years written the same ways)."""
    text = " ".join(source.lower().replace(",", " ").split())
    tokens = [t.rstrip(".") for t in text.split()]
    found = {m.group(1)[:4] for m in _FOUR.finditer(text)} | {m.group(1) for m in _APOSTROPHE.finditer(text)}
    slashes = re.fullmatch(r"\d{1,2}/\d{1,2}/(\d{2})", text)
    if slashes:  # 03/03/87
        found.add(slashes.group(1))
    named = any(t in _MONTH_TOKENS for t in tokens)
    if named and len(tokens) >= 3 and re.fullmatch(r"\d{2}", tokens[-1]) and any(map(_is_day, tokens[:-1])):
        found.add(tokens[-1])  # march 3 87
    words = _words_year(tokens)
    if words is not None and (len(words) == 4 or named):  # a two-digit year in words only after a month
        found.add(words)
    return found.pop() if len(found) == 1 else None


def _is_day(token: str) -> bool:
    return bool(re.fullmatch(r"\d{1,2}(st|nd|rd|th)?", token)) or token in _DAY_WORDS


def _words_year(tokens: list[str]) -> str | None:
    """The year written in words at the end of ``tokens`` (the longest reading), or None."""
    start = len(tokens)
    while start > 0 and tokens[start - 1] in _YEAR_WORDS:
        start -= 1
    tail = [t for t in tokens[start:] if t != "and"]
    readings = (_year_of_words(tail[i:]) for i in range(len(tail)))
    return next((r for r in readings if r is not None), None)


def _year_of_words(words: list[str]) -> str | None:
    """'nineteen eighty-seven' -> '1987', 'eighteen oh five' -> '1805', 'twenty-one hundred' ->
    '2100', 'two thousand three' -> '2003'; 'eighty-seven' -> '87', 'oh five' -> '05'; else None."""
    n = [_NUMBERS.get(w) for w in words]
    if len(words) in (2, 3) and words[1] == "thousand" and n[0] is not None and 1 <= n[0] <= 9:
        low = 0 if len(words) == 2 else n[2]
        return None if low is None else str(n[0] * 1000 + low)
    if len(words) == 1 and n[0] is not None and n[0] >= 10:
        return f"{n[0]:02d}"
    if len(words) == 2 and words[0] == "oh" and n[1] is not None and n[1] <= 9:
        return f"{n[1]:02d}"
    if n[0] is None or n[0] < 10 or len(words) not in (2, 3):
        return None
    if words[1:] == ["hundred"]:
        return f"{n[0]}00"
    if len(words) == 3 and words[1] == "oh" and n[2] is not None and n[2] <= 9:
        return f"{n[0]}0{n[2]}"
    if len(words) == 2 and n[1] is not None and n[1] >= 10:
        return f"{n[0]}{n[1]}"
    return None
