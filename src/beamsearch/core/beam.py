"""The records the engine threads through its loop; all numpy, on the host.

Shapes: ``N`` inputs, ``k`` live rows (input-major: input 0's rows first, each input's rows in
rank order), ``j`` candidates kept at a step, ``P`` prompt columns, ``t`` the steps taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.core.state import select_state


@dataclass(frozen=True)
class Beam:
    """The live rows: what the next model call is made for.

    Attributes:
        input: int64 ``[k]``, the input each row belongs to.
        logprob: float64 ``[k]``, the sum of the processed log-probabilities along the row.
        token: int64 ``[k]``, each row's last token (the next call's ``y_prev``).
        history: int64 ``[k, P + t]`` after step t, or None: the prompt (left-padded with -1) then
            the t generated tokens; kept only when a processor needs it.
        recent: int64 ``[k, w]`` or None: each row's last ``w`` generated tokens (left-padded
            with -1), for stop sequences; None without them.
        tags: the strategy's per-row data (each value an array with leading axis ``[k]``), as its
            :class:`Candidates` ``live.tags`` carried them, with the rows the engine retired
            dropped; None when the strategy keeps none.
        carried: the row states of the processors that carry one (a grammar's matchers: see
            :class:`beamsearch.processors.RowStates`), by the processor's ``id``, each ``[k]`` rows
            in this beam's order; None when no processor carries one. :func:`select_state` takes
            their rows (forking a row taken twice); the engine's ``extend`` advances them by the
            kept tokens, which consumes the parent beam's row states.
    """

    input: np.ndarray
    logprob: np.ndarray
    token: np.ndarray
    history: np.ndarray | None
    recent: np.ndarray | None
    tags: dict[str, np.ndarray] | None = None
    carried: dict[int, Any] | None = None

    @property
    def size(self) -> int:
        return int(self.input.shape[0])

    def take(self, idx: np.ndarray) -> Beam:
        """The rows ``idx`` (int64 ``[k']``, positions in this beam), in that order."""
        tags = None if self.tags is None else {name: a[idx] for name, a in self.tags.items()}
        carried = None if self.carried is None else {key: select_state(rows, idx) for key, rows in self.carried.items()}
        return Beam(self.input[idx], self.logprob[idx], self.token[idx],
                    None if self.history is None else self.history[idx],
                    None if self.recent is None else self.recent[idx], tags, carried)


@dataclass(frozen=True)
class Candidates:
    """Extensions chosen at one step, input-major and in rank (or production) order per input.

    Attributes:
        parent: int64 ``[j]``, the live row (position in this step's call) each extends.
        token: int64 ``[j]``.
        logprob: float64 ``[j]``: the parent's logprob plus the token's processed log-probability.
        tags: None, or a strategy's own per-candidate data (name -> array with leading axis
            ``[j]``: a constraint state, a group id, a perturbed score); ``take`` keeps it aligned
            and the engine hands the live rows' tags back as ``Beam.tags`` at the next step.
    """

    parent: np.ndarray
    token: np.ndarray
    logprob: np.ndarray
    tags: dict[str, np.ndarray] | None = None

    @property
    def size(self) -> int:
        return int(self.parent.shape[0])

    def take(self, idx: np.ndarray) -> Candidates:
        tags = None if self.tags is None else {name: a[idx] for name, a in self.tags.items()}
        return Candidates(self.parent[idx], self.token[idx], self.logprob[idx], tags)

    @staticmethod
    def empty() -> Candidates:
        return Candidates(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))

    @staticmethod
    def join(parts: list[Candidates]) -> Candidates:
        """The parts (each ``[j_p]``, ``parent`` already in one numbering) one after the other:
        ``[sum j_p]``. Tags are joined name by name when every part has them, else None."""
        if not parts:
            return Candidates.empty()
        tags, given = None, [p.tags for p in parts if p.tags is not None]
        if len(given) == len(parts):
            tags = {name: np.concatenate([t[name] for t in given]) for name in given[0]}
        return Candidates(np.concatenate([p.parent for p in parts]), np.concatenate([p.token for p in parts]),
                          np.concatenate([p.logprob for p in parts]), tags)


@dataclass(frozen=True)
class Ended:
    """Hypotheses that left the search, in production order.

    Attributes:
        input: int64 ``[h]``.
        logprob: float64 ``[h]``.
        step: int64 ``[h]``: the step of the last token (= the number of generated tokens).
        token: int64 ``[h]``: the last token.
        token_logprob: float64 ``[h]``: the last token's processed log-probability.
        parent: int64 ``[h]``: the row of that step's call it extends (a position in the trail).
        finished: bool ``[h]``: ended by eos or a stop sequence (False: out of steps).
    """

    input: np.ndarray
    logprob: np.ndarray
    step: np.ndarray
    token: np.ndarray
    token_logprob: np.ndarray
    parent: np.ndarray
    finished: np.ndarray

    @staticmethod
    def concat(parts: list[tuple[Beam, Candidates, int, bool | np.ndarray]]) -> Ended:
        """The hypotheses ``(beam, chosen, step, finished)`` recorded at each step, in order:
        ``chosen`` extends rows of ``beam`` at ``step``. Built once, at the end of the search."""
        if not parts:
            return Ended.empty()
        parent = np.concatenate([c.parent for _, c, _, _ in parts])
        logprob = np.concatenate([c.logprob for _, c, _, _ in parts])
        with np.errstate(invalid="ignore"):  # a scored target may be -inf: its token's share is NaN
            token_logprob = logprob - np.concatenate([b.logprob[c.parent] for b, c, _, _ in parts])
        return Ended(
            np.concatenate([b.input[c.parent] for b, c, _, _ in parts]),
            logprob,
            np.repeat(np.array([t for _, _, t, _ in parts], np.int64), [c.size for _, c, _, _ in parts]),
            np.concatenate([c.token for _, c, _, _ in parts]),
            token_logprob,
            parent,
            _flags([(c.size, f) for _, c, _, f in parts]),
        )

    def take(self, idx: np.ndarray) -> Ended:
        return Ended(*(getattr(self, f)[idx] for f in Ended.__dataclass_fields__))

    @staticmethod
    def empty() -> Ended:
        """No hypothesis: every field ``[0]``."""
        z = np.zeros(0, np.int64)
        return Ended(z, np.zeros(0), z, z, np.zeros(0), z, np.zeros(0, bool))

    @staticmethod
    def join(parts: list[Ended]) -> Ended:
        """The parts (each ``[h_p]``) one after the other, ``[sum h_p]``: production order kept
        when the parts are in it (``Ended.concat`` builds a part from a step's records)."""
        if not parts:
            return Ended.empty()
        return Ended(*(np.concatenate([getattr(p, f) for p in parts]) for f in Ended.__dataclass_fields__))


class Trail:
    """Back-pointers of every step's live rows: O(k) per step, paths rebuilt once at the end.

    ``token[t-1]`` and ``parent[t-1]`` (int64 ``[k_t]``) are the last token of each row passed to
    call t+1 and its row in call t; ``token_logprob[t-1]`` that token's log-probability.
    """

    def __init__(self) -> None:
        self.token: list[np.ndarray] = []
        self.parent: list[np.ndarray] = []
        self.token_logprob: list[np.ndarray] = []

    def add(self, token: np.ndarray, parent: np.ndarray, token_logprob: np.ndarray) -> None:
        self.token.append(token)
        self.parent.append(parent)
        self.token_logprob.append(token_logprob)

    def paths(self, ended: Ended) -> tuple[np.ndarray, np.ndarray]:
        """Tokens and per-token log-probabilities of ended hypotheses.

        Returns:
            int64 ``[h, S]`` tokens right-padded with -1 and float64 ``[h, S]`` right-padded with
            NaN, ``S`` the longest; row i holds ``ended.step[i]`` tokens.
        """
        h = ended.step.shape[0]
        width = int(ended.step.max()) if h else 0
        tokens = np.full((h, width), -1, np.int64)
        logprobs = np.full((h, width), np.nan)
        rows = np.arange(h)
        tokens[rows, ended.step - 1] = ended.token
        logprobs[rows, ended.step - 1] = ended.token_logprob
        ptr = ended.parent.copy()
        for s in range(width - 1, 0, -1):  # walk back: the row of call s+1 is step s's row
            on = np.flatnonzero(ended.step > s)
            p = ptr[on]
            tokens[on, s - 1] = self.token[s - 1][p]
            logprobs[on, s - 1] = self.token_logprob[s - 1][p]
            ptr[on] = self.parent[s - 1][p]
        return tokens, logprobs

    def generated(self, rows: np.ndarray, step: int) -> np.ndarray:
        """int64 ``[k, step - 1]``: the generated tokens of the rows of call ``step`` (their
        positions ``rows`` in that call), for a processor that reads history without the prompt."""
        out = np.empty((rows.shape[0], step - 1), np.int64)  # every column is written
        ptr = rows.copy()
        for s in range(step - 1, 0, -1):
            out[:, s - 1] = self.token[s - 1][ptr]
            ptr = self.parent[s - 1][ptr]
        return out


def _flags(parts: list[tuple[int, bool | np.ndarray]]) -> np.ndarray:
    """bool ``[h]`` from ``(count, flag)`` parts, a flag being one bool for its part or ``[count]``."""
    if all(isinstance(f, bool) for _, f in parts):
        return np.repeat(np.array([f for _, f in parts], bool), [n for n, _ in parts])
    return np.concatenate([np.broadcast_to(np.asarray(f, dtype=bool), (n,)) for n, f in parts])
