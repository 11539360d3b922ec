"""The result type of every search."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Hypothesis"]


@dataclass
class Hypothesis:
    """One decoded output.

    Attributes:
        tokens: generated tokens (after bos / after the prompt), Python ints; eos included iff
            ``finished``.
        logprob: sum of the normalized log-probabilities along the path (built-in float).
        score: what results are ranked by: the length-penalized logprob (built-in float).
        finished: True iff the hypothesis ended with eos.
    """

    tokens: list[int]
    logprob: float
    score: float
    finished: bool
