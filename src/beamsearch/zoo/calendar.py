"""A decoding-time constraint: the dates models only ever write a real date.

:class:`CalendarDates` is a logits processor (the ``processor(logits, ctx) -> logits`` protocol of
:mod:`beamsearch.processors`): at each step it masks (-inf) every target character that cannot
continue the row's output into ``YYYY-MM-DD`` followed by eos, where the date exists in the
Gregorian calendar (year 0001-9999, month 01-12, day 01 to the month's length, February 29 in leap
years only). With ``allow_empty`` the output may also be eos alone: the models' "no date" answer.
Masking happens before log_softmax, so a hypothesis's logprob is a log-probability under the
constrained distribution (the search renormalizes over the allowed characters).

:func:`why_not_a_date` says why a text is not such a date (for outputs of a search without the
constraint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.processors import StepContext
from beamsearch.zoo.dates import MONTHS, TARGET_VOCAB, Vocab, days_in_month

__all__ = ["CalendarDates", "why_not_a_date"]

DATE_LENGTH = 10  # "YYYY-MM-DD"
_DIGITS = np.arange(10)


def _leap(year: np.ndarray) -> np.ndarray:
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


def _month_length(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    """int ``[k]``: days in ``month`` of ``year`` (0 where the month is not yet known)."""
    thirty = np.isin(month, (4, 6, 9, 11))
    return np.where(month == 2, 28 + _leap(year), np.where(thirty, 30, 31))


@dataclass(frozen=True)
class CalendarDates:
    """Masks every character that cannot lead to a real ``YYYY-MM-DD`` date, then eos.

    Args:
        vocab: the target vocabulary; it must hold the characters ``0``-``9`` and ``-``.
        allow_empty: also allow eos as the first token (the empty "no date" output).
    """

    vocab: Vocab = TARGET_VOCAB
    allow_empty: bool = True
    needs_history = False  # the generated tokens are enough
    _digit_ids: np.ndarray = field(init=False, repr=False, compare=False)
    _digit_of: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = [c for c in "0123456789-" if c not in self.vocab.stoi]
        if missing:
            raise ValueError(f"vocab must hold the digits and '-'; it lacks {''.join(missing)!r}")
        ids = np.array([self.vocab.stoi[str(d)] for d in range(10)])
        digit_of = np.full(len(self.vocab) + 1, -1)  # token id -> digit value; -1 (also for id -1)
        digit_of[ids] = _DIGITS
        object.__setattr__(self, "_digit_ids", ids)
        object.__setattr__(self, "_digit_of", digit_of)

    def allowed(self, history: np.ndarray) -> np.ndarray:
        """bool ``[k, V]``: the tokens each row may write next, given its generated tokens
        ``history`` int64 ``[k, H]`` (left-padded with -1, as :class:`StepContext` gives them)."""
        k, width = history.shape
        length = (history >= 0).sum(axis=1)  # --> [k], the position of the next character
        # the row's first DATE_LENGTH characters as digits, -1 elsewhere ('-' and not yet written):
        # a loop over the 10 positions, vectorized over rows
        digits = np.full((k, DATE_LENGTH), -1)
        for j in range(DATE_LENGTH):
            written = j < length
            col = width - length[written] + j
            digits[written, j] = self._digit_of[history[written, col]]
        year = digits[:, 0] * 1000 + digits[:, 1] * 100 + digits[:, 2] * 10 + digits[:, 3]
        month = digits[:, 5] * 10 + digits[:, 6]
        last = _month_length(year, month)[:, None]  # --> [k, 1]
        d, pos = _DIGITS[None, :], length[:, None]  # --> [1, 10], [k, 1]
        month_tens, day_tens = digits[:, 5:6], digits[:, 8:9]  # --> [k, 1]
        first_three_zero = (digits[:, :3] == 0).all(axis=1)[:, None]  # year 0000 does not exist
        digit_ok = np.select(
            [pos < 3, pos == 3, pos == 5, pos == 6, pos == 8, pos == 9],
            [np.ones((k, 10), bool), ~(first_three_zero & (d == 0)), np.broadcast_to(d <= 1, (k, 10)),
             np.where(month_tens == 0, d >= 1, d <= 2), d <= last // 10,
             np.where(day_tens == 0, d >= 1, day_tens * 10 + d <= last)],
            False)  # --> [k, 10]
        allowed = np.zeros((k, len(self.vocab)), dtype=bool)
        allowed[:, self._digit_ids] = digit_ok
        allowed[:, self.vocab.stoi["-"]] = (length == 4) | (length == 7)
        allowed[:, self.vocab.eos] = (length == DATE_LENGTH) | (self.allow_empty & (length == 0))
        return allowed

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        """``logits [k, V]`` -> the same with every disallowed token at -inf."""
        add = np.where(self.allowed(ctx.history), 0.0, -np.inf)  # --> [k, V]
        return logits + ctx.backend.from_host(add, logits)


def why_not_a_date(text: str) -> str | None:
    """None when ``text`` is a real date ``YYYY-MM-DD`` (the dates :class:`CalendarDates` allows);
    otherwise why it is not: ``"2023 is not a leap year"`` for 2023-02-29, ``"April has 30
    days"``, ``"there is no month 13"``, ``"it is not of the form YYYY-MM-DD"``."""
    m = re.fullmatch(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", text)
    if m is None:
        return "it is not of the form YYYY-MM-DD"
    year, month, day = (int(g) for g in m.groups())
    if year == 0:
        return "there is no year 0000"
    if not 1 <= month <= 12:
        return f"there is no month {m.group(2)}"
    last = days_in_month(year, month)
    if day == 0 or day > last:
        if (month, day) == (2, 29):
            return f"{year} is not a leap year"
        return "there is no day 00" if day == 0 else f"{MONTHS[month - 1].title()} has {last} days"
    return None
