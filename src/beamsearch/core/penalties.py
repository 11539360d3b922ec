"""Length penalties: ``score = logprob / lp(len(tokens))``, len counting eos.

Both are non-decreasing in the length for ``alpha >= 0``, which makes the early-stop bound
``s / lp(max_steps)`` of :func:`beamsearch.beam_search_batch` exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PenaltyFn = Callable[[np.ndarray, float], np.ndarray]
"""``penalty(lengths, alpha) -> lp``: :func:`length_wu` or :func:`length_power`."""

__all__ = ["LengthPenalty", "PenaltyFn", "length_power", "length_wu", "LENGTH_PENALTIES", "score"]


def length_power(length: np.ndarray, alpha: float) -> np.ndarray:
    """``len ** alpha`` (seed 000; alpha 0 is the raw logprob, 1 the mean per token)."""
    return np.asarray(length, dtype=np.float64) ** alpha


def length_wu(length: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT, Wu et al. (2016) section 7: ``((5 + len) / 6) ** alpha``."""
    return ((5.0 + np.asarray(length, dtype=np.float64)) / 6.0) ** alpha


LENGTH_PENALTIES: dict[str, PenaltyFn] = {"gnmt": length_wu, "power": length_power}


def score(logprob: np.ndarray, length: np.ndarray, penalty: PenaltyFn, alpha: float) -> np.ndarray:
    """The one scoring formula: ``logprob / penalty(length, alpha)``, float64 ``[j]``.

    Results are ranked by it, and the early-stop bound is it at ``length = max_steps``.
    """
    return np.asarray(logprob, dtype=np.float64) / penalty(length, alpha)


@dataclass(frozen=True)
class LengthPenalty:
    """A length penalty as one value: its ``kind`` (``"gnmt"``: :func:`length_wu`, ``"power"``:
    :func:`length_power`) and its strength ``alpha``; ``score = logprob / lp(len)``.

    The batched searches take it as two keywords, ``length_penalty`` (the kind) and ``alpha``;
    ``transformers``' float ``length_penalty`` is ``LengthPenalty("power", that float)``
    (:func:`beamsearch.hf.search_settings`). Not validated here: a search checks both at its entry.
    Its defaults are the configuration's (:class:`~beamsearch.core.config.DecodingConfig`), not its own.
    """

    kind: str
    alpha: float

    KINDS = LENGTH_PENALTIES
    """kind -> its function."""

    @property
    def function(self) -> PenaltyFn:
        """``penalty(lengths, alpha)`` of this kind."""
        return LENGTH_PENALTIES[self.kind]

    def __call__(self, length: np.ndarray) -> np.ndarray:
        """``lp(length)``, float64, the shape of ``length``."""
        return self.function(length, self.alpha)

    def score(self, logprob: np.ndarray, length: np.ndarray) -> np.ndarray:
        """:func:`score` with this penalty."""
        return score(logprob, length, self.function, self.alpha)
