"""Length penalties called directly, against values computed by hand (derivations in the
docstring and comments)."""

from __future__ import annotations

import math

import numpy as np

from beamsearch.core.penalties import LengthPenalty


def test_length_penalty_values_by_hand():
    """gnmt: ((5 + len) / 6) ** alpha: len 1 gives 1, len 7 gives 2 ** alpha; power: len ** alpha,
    float64 even for an integer alpha (3 ** 2 = 9.0)."""
    gnmt = LengthPenalty("gnmt", 0.5)
    got = gnmt(np.array([1, 7]))
    assert got.dtype == np.float64 and got.tolist() == [1.0, math.sqrt(2.0)]
    power = LengthPenalty("power", 2)
    assert power(np.array([3])).dtype == np.float64 and power(np.array([3])).tolist() == [9.0]
    # score = logprob / lp: -6 / 3 ** 1 = -2; -3 / sqrt(2) under gnmt 0.5 at len 7
    assert LengthPenalty("power", 1.0).score(np.array([-6.0]), np.array([3])).tolist() == [-2.0]
    assert gnmt.score(np.array([-3.0, -1.0]), np.array([7, 1])).tolist() == [-3.0 / math.sqrt(2.0), -1.0]
