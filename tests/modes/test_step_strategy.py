"""The step-search strategy's own functions (strategies/step.py) where the searches in
test_step.py cannot show them: numpy's warnings."""

from __future__ import annotations

import warnings

import pytest

from beamsearch.strategies.step import aggregate


def test_the_mean_of_step_scores_whose_sum_overflows_is_taken_without_a_numpy_warning():
    """[1e308, 1.5e308]: the float64 sum overflows (2.5e308 > 1.8e308); the mean is 1.25e308 by
    hand, finite, and numpy's overflow is not reported to the caller as a RuntimeWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert aggregate([1e308, 1.5e308], "mean") == pytest.approx(1.25e308, rel=1e-15)
        assert aggregate([-1e308, -1.5e308], "mean") == pytest.approx(-1.25e308, rel=1e-15)
