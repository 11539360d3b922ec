"""Token-level neural LMs in CTC beam search: any ``step_fn(state, y_prev) -> (logits, new_state)``.

Every label a hypothesis emits is scored by the LM given the labels before it:
``alpha * log p_LM(label | labels so far)``, the LM's logits normalized over the non-blank labels
(the blank is never a token of the text). The LM's state is carried with the hypotheses as
everywhere in the library: rows gathered with :func:`~beamsearch.core.state.select_state` (and
joined with :func:`~beamsearch.core.state.concat_state`), one row per slot of every utterance.
Once per frame the step function is called once, on the rows of the prefixes that grew, and each
slot keeps the LM's log-probabilities of its next label (``next_lp`` ``[n, B, V]``), so scoring
an extension is one lookup. With ``eos``, ``alpha * log p_LM(eos | labels)`` is added at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, backend_of, first_foreign_leaf, index_like
from beamsearch.core import validate
from beamsearch.core.model_checks import logits_shape, step_output
from beamsearch.core.state import concat_state, select_state


@dataclass(frozen=True)
class TokenLM:
    """A token-level LM over the CTC labels, for ``ctc_beam_search(..., lm=TokenLM(...))``.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``, V the emissions'
            number of labels (the blank's logit is ignored).
        init_state: the LM's state with one row (it is repeated for every utterance).
        bos: the label id passed as ``y_prev`` to the first call.
        eos: a label id whose LM log-probability after the last label is added at the end
            (None: nothing is added).
    """

    step_fn: Callable[[Any, Any], Any]
    init_state: Any
    bos: int
    eos: int | None = None


class TokenFusion:
    """A :class:`TokenLM` during one search: its weight and the state rows of every slot."""

    def __init__(self, lm: TokenLM, alpha: float, blank: int, vocab: int) -> None:
        if not callable(lm.step_fn):
            raise TypeError(f"TokenLM.step_fn must be callable; got {type(lm.step_fn).__name__}")
        for name, value in (("bos", lm.bos), ("eos", lm.eos)):
            if value is not None and not 0 <= validate.integer(f"TokenLM.{name}", value) < vocab:
                raise ValueError(f"TokenLM.{name} must be a label id in [0, V={vocab}); got {value}")
        self.lm, self.alpha, self.blank, self.vocab = lm, alpha, blank, vocab
        self.like = first_foreign_leaf(lm.init_state)
        self.state: Any = None
        self.total = 0

    def index(self, a: np.ndarray) -> Any:
        a = np.ascontiguousarray(a, dtype=np.int64)
        return a if self.like is None else index_like(a, self.like)

    def call(self, state: Any, y: np.ndarray) -> tuple[np.ndarray, Any]:
        """One step on ``k`` rows: float64 ``[k, V]`` log-probs over the non-blank labels, new state."""
        logits, new = step_output(self.lm.step_fn(state, self.index(y)))
        logits_shape(logits, y.shape[0], self.vocab)
        x = backend_of(logits).to_numpy(logits).astype(np.float64)
        x[:, self.blank] = NEG_INF
        return backend_of(x).log_softmax(x), new

    def start(self, n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The first call, on ``bos``: ``(tok_lm, next_lp)`` of the empty prefixes, ``[n, B]`` and
        ``[n, B, V]``; every slot's state row is set."""
        lp, state = self.call(self.lm.init_state, np.array([self.lm.bos]))
        self.total = n * width
        self.state = select_state(state, self.index(np.zeros(self.total, dtype=np.int64)))
        return np.zeros((n, width)), np.broadcast_to(lp[0], (n, width, self.vocab)).copy()

    def update(self, rows: np.ndarray, width: int, src: np.ndarray, grown: np.ndarray, label: np.ndarray,
               next_lp: np.ndarray) -> np.ndarray:
        """After a frame of utterances ``rows`` (int ``[m]``): slot ``b`` of ``rows[i]`` now holds
        slot ``src[i, b]``'s prefix, plus ``label[i, b]`` where ``grown[i, b]``. The state rows
        are gathered, the grown ones stepped; returns ``next_lp`` ``[m, B, V]`` with theirs."""
        total = self.total
        own = rows[:, None] * width + np.arange(width)  # --> [m, B]: the rows of these slots
        idx = np.arange(total)
        idx[own.ravel()] = (rows[:, None] * width + src).ravel()
        gathered = select_state(self.state, self.index(idx))
        moved = own[grown]
        if not moved.size:
            self.state = gathered
            return next_lp
        lp, stepped = self.call(select_state(gathered, self.index(moved)), label[grown])
        join = np.arange(total)
        join[moved] = total + np.arange(moved.size)
        self.state = select_state(concat_state([gathered, stepped]), self.index(join))
        out = next_lp.copy()
        out[grown] = lp
        return out

    def finish(self, tok_lm: np.ndarray, next_lp: np.ndarray) -> np.ndarray:
        """float64 ``[n, B]``: the LM log-prob of each prefix, with ``eos`` after it if given."""
        return tok_lm + (0.0 if self.lm.eos is None else next_lp[:, :, self.lm.eos])


@dataclass(frozen=True)
class TokenTerm:
    """The token LM's term of one frame's extensions (as :class:`beamsearch.speech.fusion.LMTerm`)."""

    alpha: float
    tok_lm: np.ndarray
    next_lp: np.ndarray
    up: np.ndarray

    @staticmethod
    def of(alpha: float, tok_lm: np.ndarray, next_lp: np.ndarray) -> TokenTerm:
        return TokenTerm(alpha, tok_lm, next_lp, alpha * tok_lm)  # a log-prob adds at most 0

    def now(self) -> np.ndarray:
        return self.alpha * self.tok_lm

    def term(self, utt: np.ndarray, slot: np.ndarray, label: np.ndarray) -> np.ndarray:
        return self.alpha * (self.tok_lm[utt, slot] + self.next_lp[utt, slot, label])
