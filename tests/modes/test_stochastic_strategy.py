"""The stochastic beam strategy's noise (strategies/stochastic.py, gumbel_noise) where no seeded
search reaches it: an exponential draw of exactly 0."""

from __future__ import annotations

import math

import numpy as np

import beamsearch.strategies.stochastic as stochastic


class _Zeros:
    """A generator whose every exponential draw is 0 (a real float32 ziggurat rarely gives one)."""

    def standard_exponential(self, size, dtype):
        return np.zeros(size, dtype)


def test_an_exponential_draw_of_zero_gives_the_largest_finite_gumbel_not_inf(monkeypatch):
    """E = 0 is raised to the smallest normal float32 (2**-126) before -log E, so every entry of
    the noise is 126 log 2 = 87.3365... (by hand), finite, in the requested dtype."""
    monkeypatch.setattr(stochastic, "_stream", lambda entropy, step: _Zeros())
    entropy = np.zeros((2, 4), np.uint32)
    for dtype in (np.float32, np.float64):
        noise = stochastic.gumbel_noise(entropy, np.array([0, 0, 1]), 1, 5, np.dtype(dtype))
        assert noise.shape == (3, 5) and noise.dtype == dtype
        np.testing.assert_allclose(noise, 126 * math.log(2), rtol=1e-6)
