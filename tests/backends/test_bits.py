"""Packed masks at their edges: a row with exactly half its bytes 0xFF is a mostly kept row (the
documented rule: at least half the bytes 0xFF), one more byte not full makes it mostly masked;
the named entries are those the bits say.

Oracle: the bits unpacked by hand (bit j of byte b: column 8 b + j), written beside each case.
"""

from __future__ import annotations

import numpy as np

from beamsearch.backends.bits import exceptions


def test_half_the_bytes_full_is_mostly_kept():
    """[0xFF, 0b00000101]: byte 1 keeps columns 8 and 10, so 9 and 11..15 are masked (a mostly
    kept row, 1 of 2 bytes not full)."""
    got = exceptions(np.array([[0xFF, 0b00000101]], np.uint8), 16, budget=1.0)
    assert got.rows.tolist() == [] and got.kept_rows.tolist() == []
    assert got.masked_rows.tolist() == [0] * 6 and got.masked_cols.tolist() == [9, 11, 12, 13, 14, 15]


def test_more_than_half_not_full_is_mostly_masked():
    """[0xFF, 0b00000101, 0]: 2 of 3 bytes not full: mostly masked, its kept entries are
    columns 0..7, 8 and 10. [0xFF, 0x01, 0xFF, 0x00] (2 of 4 not full) is kept: 9..15 and
    24..31 masked."""
    got = exceptions(np.array([[0xFF, 0b00000101, 0]], np.uint8), 24, budget=1.0)
    assert got.rows.tolist() == [0] and got.masked_rows.tolist() == []
    assert got.kept_rows.tolist() == [0] * 10 and got.kept_cols.tolist() == list(range(8)) + [8, 10]
    got = exceptions(np.array([[0xFF, 0x01, 0xFF, 0x00]], np.uint8), 32, budget=1.0)
    assert got.rows.tolist() == []
    assert got.masked_cols.tolist() == list(range(9, 16)) + list(range(24, 32))


def test_columns_past_the_width_are_never_named():
    """Width 12 over two bytes: byte 1's bits 4..7 (columns 12..15) are past it."""
    got = exceptions(np.array([[0xFF, 0b00000001]], np.uint8), 12, budget=1.0)
    assert got.masked_cols.tolist() == [9, 10, 11]
