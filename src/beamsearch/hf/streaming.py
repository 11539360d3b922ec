"""The step callback of :func:`beamsearch.hf.generate`'s ``stopping_criteria`` and ``streamer``
(:class:`HookCallback`), on the search's callback seam (:class:`~beamsearch.core.trace.StepRecord`
in, inputs to stop out).

Stopping criteria. After each step's selection the criteria are called once, as ``generate``
calls them, ``criterion(input_ids, None)`` (``scores`` is None, what ``generate`` passes without
``output_scores=True``), with ``input_ids`` int64 ``[k', P + t]``: each kept row (a live row that
goes on to the next step) as ``generate`` holds it, its held prompt then its t generated tokens.
A criterion returns bool ``[k']``; the rows flagged by any criterion stop their inputs at this
step: each kept row of such an input ends as an unfinished hypothesis (the flagged token its
last), the hypotheses the input finished before or at this step stay, and its results are
ranked from these by the mode's rule, exactly as when its ``max_steps`` ends at this step.
Rows that finished or ended at this step are not passed (they have ended). A criterion only
stops inputs earlier than ``max_new_tokens`` / ``max_length`` (``generate`` lets a custom
``MaxLengthCriteria`` replace its own length limit). ``generate``'s beam search reads a flag
differently: it finishes the flagged candidate like an eos and goes on; the two agree when a
criterion flags every row of an input at once (length and time criteria), and with greedy decoding.

Streamer. ``put(prompt)`` (the held prompt ``[1, P]``) before the search; then, per step, each
new token of the prefix that every hypothesis that may still be the best shares: every kept row
and every ended hypothesis not beaten by a finished one of higher score (a 1-D tensor of one
token per call); after the search, the rest of the best hypothesis, one token per call; then
``end()``. So the streamer receives exactly the best hypothesis's tokens, in order; with greedy
decoding (one row) these are ``generate``'s calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from beamsearch.core.trace import FINISHED, KEPT, UNFINISHED, StepRecord

__all__ = ["STREAMED_MODES", "HookCallback", "Streaming"]

STREAMED_MODES = ("greedy", "beam", "transformers")
"""The modes whose best hypothesis a streamer can follow (their results ranked by score)."""


class Streaming:
    """A ``generate`` streamer fed the best hypothesis of one input (see the module's docstring).

    Attributes:
        streamer: the object with ``put(tensor)`` and ``end()``.
        sent: the generated tokens put so far.
        ended: the ended hypotheses that may still be the best: ``(tokens, score, finished)``.
    """

    def __init__(self, streamer: Any) -> None:
        self.streamer = streamer
        self.sent: list[int] = []
        self.ended: list[tuple[list[int], float, bool]] = []

    @staticmethod
    def check(streamer: Any, mode: str, n_inputs: int) -> None:
        """A streamer has ``put`` and ``end``, follows one input (``generate``'s streamers take a
        batch of one), and a mode of :data:`STREAMED_MODES`."""
        if not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
            raise TypeError(f"streamer must have put(tensor) and end() (a transformers streamer); got {streamer!r:.80}")
        if n_inputs != 1:
            raise ValueError(f"streamer= streams one input (generate's streamers take a batch of one); got {n_inputs} "
                             "inputs")
        if mode not in STREAMED_MODES:
            raise ValueError(f"streamer= follows the best hypothesis of modes {STREAMED_MODES}; got mode {mode!r}")

    def step(self, kept: list[list[int]], ended: list[tuple[list[int], float, bool]]) -> None:
        """Put the new tokens shared by the ``kept`` rows' tokens and the ended hypotheses that
        may still be the best (``ended``: this step's, added to those before)."""
        pool = self.ended + ended
        best = max((s for _, s, finished in pool if finished), default=-np.inf)
        self.ended = [h for h in pool if not h[1] < best]  # beaten by a finished one: never the best
        paths = kept + [tokens for tokens, _, _ in self.ended]
        if not paths:
            return
        first, n = paths[0], min(len(p) for p in paths)
        shared = next((j for j in range(n) if any(p[j] != first[j] for p in paths[1:])), n)
        self.put(first[len(self.sent):shared])

    def put(self, tokens: list[int]) -> None:
        for token in tokens:
            self.streamer.put(torch.tensor([token]))
            self.sent.append(token)

    def flush(self, best: list[int]) -> None:
        """The rest of the best hypothesis ``best`` (its tokens)."""
        assert best[:len(self.sent)] == self.sent, "a streamed token is not the best hypothesis's"
        self.put(best[len(self.sent):])


class HookCallback:
    """The search's ``callback`` for ``stopping_criteria`` and a streamer (module docstring).

    Args:
        held: the call's :class:`~beamsearch.hf.hooks.HeldPrompts`.
        n_inputs: N.
        criteria: the stopping criteria, each ``criterion(input_ids, scores) -> bool [k]``.
        streaming: a :class:`Streaming`, or None.
    """

    def __init__(self, held: Any, n_inputs: int, criteria: list[Any], streaming: Streaming | None) -> None:
        self.held, self.n, self.criteria, self.streaming = held, n_inputs, criteria, streaming

    def start(self) -> None:
        """Before the search: the streamer gets the prompt."""
        if self.streaming is not None:
            self.streaming.streamer.put(self.held.ids.cpu())

    def __call__(self, record: StepRecord) -> np.ndarray:
        """bool ``[N]``: the inputs the criteria stop at this step (and the streamer fed)."""
        kept = np.flatnonzero(record.status == KEPT)
        stop = np.zeros(self.n, bool)
        if self.criteria and kept.size:
            stop[record.input[kept[self._flagged(record, kept)]]] = True
        if self.streaming is not None:
            going = kept[~stop[record.input[kept]]]
            ended = np.flatnonzero((record.status == FINISHED) | (record.status == UNFINISHED))
            ended = np.concatenate([ended, kept[stop[record.input[kept]]]])
            finished = record.status[ended] == FINISHED
            self.streaming.step(record.tokens(going).tolist(),
                                list(zip(record.tokens(ended).tolist(), record.score[ended].tolist(),
                                         finished.tolist(), strict=True)))
        return stop

    def _flagged(self, record: StepRecord, kept: np.ndarray) -> np.ndarray:
        """bool ``[len(kept)]``: the kept rows any criterion flags."""
        input_ids = self.held.rows(record.input[kept], record.tokens(kept))
        flagged = np.zeros(kept.shape[0], bool)
        for i, criterion in enumerate(self.criteria):
            answer = criterion(input_ids, None)
            out = np.asarray(answer.detach().cpu() if isinstance(answer, torch.Tensor) else answer)
            if out.dtype != bool or out.size != kept.shape[0]:
                raise ValueError(f"stopping_criteria[{i}] must return a bool tensor of one value per row "
                                 f"({kept.shape[0]} rows); got {answer!r:.80}")
            flagged |= out.reshape(-1)
        return flagged

    def flush(self, results: Any) -> None:
        """After the search: the rest of the best hypothesis to the streamer."""
        if self.streaming is not None and results and results[0]:
            self.streaming.flush(list(results[0][0].tokens))

    def end(self) -> None:
        if self.streaming is not None:
            self.streaming.streamer.end()
