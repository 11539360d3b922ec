"""The result types of every search: :class:`Hypothesis`, and the batch result containers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.backends import NEG_INF

__all__ = ["BatchArrays", "BatchResults", "Hypothesis", "TokenLogprobHypothesis"]


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


@dataclass
class TokenLogprobHypothesis(Hypothesis):
    """A :class:`Hypothesis` that also carries each token's processed log-probability.

    Attributes:
        token_logprobs: ``len(tokens)`` built-in floats; they sum to ``logprob`` (up to rounding).
    """

    token_logprobs: list[float] | None = None


@dataclass
class BatchArrays:
    """Padded arrays of a batch result: N inputs, n_best slots, T the longest output.

    Attributes:
        tokens: int64 ``[N, n_best, T]``, right-padded with ``pad_token_id``.
        lengths: int64 ``[N, n_best]``, tokens in each hypothesis (eos counted), 0 for an empty
            slot.
        logprobs: float64 ``[N, n_best]``; -inf for an empty slot.
        scores: float64 ``[N, n_best]``; -inf for an empty slot.
        finished: bool ``[N, n_best]``.
        token_logprobs: float64 ``[N, n_best, T]`` (NaN beyond each length), or None when the
            search was not asked for them.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    logprobs: np.ndarray
    scores: np.ndarray
    finished: np.ndarray
    token_logprobs: np.ndarray | None


class BatchResults(list[list[Hypothesis]]):
    """``results[i]`` is input i's list of :class:`Hypothesis`, best first."""

    def __init__(self, *args: object, pad_token_id: int | None = None) -> None:
        super().__init__(*args)
        self.pad_token_id = pad_token_id

    def arrays(self, n_best: int | None = None) -> BatchArrays:
        """The results as padded numpy arrays (see :class:`BatchArrays`).

        Args:
            n_best: slots per input; defaults to the most results any input has.

        Raises:
            ValueError: the search was run without ``pad_token_id``.
        """
        if self.pad_token_id is None:
            raise ValueError("pad_token_id is None: pass pad_token_id to beam_search_batch to get arrays")
        slots = max((len(r) for r in self), default=0) if n_best is None else n_best
        width = max((len(h.tokens) for r in self for h in r), default=0)
        shape = (len(self), slots)
        out = BatchArrays(np.full(shape + (width,), self.pad_token_id, np.int64),
                          np.zeros(shape, np.int64), np.full(shape, NEG_INF), np.full(shape, NEG_INF),
                          np.zeros(shape, bool), None)
        with_lp = any(isinstance(h, TokenLogprobHypothesis) for r in self for h in r)
        if with_lp:
            out.token_logprobs = np.full(shape + (width,), np.nan)
        for i, hyps in enumerate(self):
            for j, h in enumerate(hyps[:slots]):
                out.tokens[i, j, : len(h.tokens)] = h.tokens
                out.lengths[i, j] = len(h.tokens)
                out.logprobs[i, j], out.scores[i, j], out.finished[i, j] = h.logprob, h.score, h.finished
                if with_lp and isinstance(h, TokenLogprobHypothesis) and h.token_logprobs is not None:
                    out.token_logprobs[i, j, : len(h.tokens)] = h.token_logprobs  # type: ignore[index]
        return out
