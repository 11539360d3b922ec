"""The spoken-number sentences: each form checked against examples written out by hand."""

import random
import re

import pytest

from beamsearch.zoo.speech.text import cardinal, clock_time, date, digits, ordinal, spoken_sentences, year


@pytest.mark.parametrize(("n", "said"), [
    (0, "zero"), (7, "seven"), (13, "thirteen"), (40, "forty"), (99, "ninety nine"), (100, "one hundred"),
    (705, "seven hundred and five"), (110, "one hundred and ten"), (1000, "one thousand"),
    (2001, "two thousand and one"), (3612, "three thousand six hundred and twelve"),
    (40_511, "forty thousand five hundred and eleven"), (100_000, "one hundred thousand"),
    (999_999, "nine hundred and ninety nine thousand nine hundred and ninety nine"),
])
def test_cardinal_as_said(n, said):
    assert cardinal(n) == said


@pytest.mark.parametrize(("n", "said"), [
    (1, "first"), (2, "second"), (3, "third"), (4, "fourth"), (5, "fifth"), (8, "eighth"), (9, "ninth"),
    (12, "twelfth"), (20, "twentieth"), (21, "twenty first"), (22, "twenty second"), (30, "thirtieth"),
    (31, "thirty first"),
])
def test_ordinal_as_said(n, said):
    assert ordinal(n) == said


def test_digits_read_one_by_one_zero_as_oh():
    assert digits("107") == "one oh seven"
    assert digits("2040") == "two oh four oh"


@pytest.mark.parametrize(("y", "said"), [
    (1987, "nineteen eighty seven"), (1926, "nineteen twenty six"), (1905, "nineteen oh five"),
    (1900, "nineteen hundred"), (2001, "two thousand one"), (2000, "two thousand"), (1203, "twelve oh three"),
    (2024, "twenty twenty four"),
])
def test_year_as_said_without_choices(y, said):
    assert year(y) == said  # rng None: the first way of each


def test_year_choices_are_among_the_ways_people_say_it():
    rng = random.Random(1)
    assert {year(2001, rng) for _ in range(200)} == {"two thousand one", "two thousand and one"}
    assert {year(2024, rng) for _ in range(200)} == {"twenty twenty four", "two thousand twenty four"}


def test_dates_in_both_orders_with_and_without_year():
    rng = random.Random(0)
    seen = {date(3, 3, 1987, rng) for _ in range(200)} | {date(7, 4, 2001, rng) for _ in range(200)}
    assert "march third nineteen eighty seven" in seen
    assert "the fourth of july two thousand one" in seen
    assert {date(7, 4, None, rng) for _ in range(100)} == {"july fourth", "the fourth of july"}


@pytest.mark.parametrize(("hour", "minute", "ways"), [
    (5, 30, {"half past five", "five thirty"}), (8, 45, {"quarter to nine", "eight forty five"}),
    (10, 15, {"quarter past ten", "ten fifteen"}), (7, 5, {"seven oh five", "five past seven"}),
    (3, 20, {"twenty past three", "three twenty"}), (3, 50, {"ten to four", "three fifty"}),
    (12, 45, {"quarter to one", "twelve forty five"}), (6, 0, {"six o'clock"}), (11, 37, {"eleven thirty seven"}),
])
def test_clock_times_as_said(hour, minute, ways):
    rng = random.Random(0)
    assert {clock_time(hour, minute, rng) for _ in range(100)} == ways


def test_sentences_are_seeded_lowercase_words_single_spaces():
    a = spoken_sentences(500, seed=3)
    assert a == spoken_sentences(500, seed=3)
    assert a != spoken_sentences(500, seed=4)
    assert spoken_sentences(20, seed=3) == a[:20]
    assert all(re.fullmatch(r"[a-z']+( [a-z']+)*", s) for s in a)
    joined = "\n".join(a)
    for form in (" of ", " past ", "hundred and", " oh ", "thousand", "nineteen"):
        assert form in joined  # every form is drawn


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_count_names_the_parameter(bad):
    with pytest.raises(ValueError, match="count"):
        spoken_sentences(bad, seed=0)


def test_out_of_range_numbers_name_the_parameter():
    with pytest.raises(ValueError, match="n must be"):
        cardinal(1_000_000)
    with pytest.raises(ValueError, match="y must be"):
        year(2100)
