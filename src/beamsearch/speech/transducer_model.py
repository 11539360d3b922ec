"""A transducer given as functions (docs/transducer.md): encoder frames, a prediction network step
and a joint network, called on the rows of many hypotheses at once.

- ``encoder_out`` ``[N, T, D]`` (numpy or torch) with ``lengths`` ``[N]``;
- ``predictor(state, y_prev) -> (pred_out, new_state)``: ``y_prev`` int ``[K]`` (an index array
  of the encoder's library and device), ``pred_out`` ``[K, H]``; ``state`` has its rows on axis 0
  of every array leaf and is carried with the hypotheses by :func:`beamsearch.core.state.select_state`
  (an LSTM's ``(h, c)`` with rows first, or None for a stateless predictor);
- ``joint(enc_frames, pred_out) -> logits``: ``enc_frames`` ``[K, D]``, ``pred_out`` ``[K, H]``,
  logits ``[K, V]`` over the labels and the blank (RNN-T), or ``[K, V + len(durations)]`` (TDT:
  the token logits, then the duration logits). Each part is normalized with a log-softmax here.

The carried rows of the hypotheses are ``(pred_out, state, lm)``: ``lm`` None, or with a token
LM (:class:`~beamsearch.speech.tokenlm.TokenFusion`) ``(next_lp [K, V], lm_state)``: the LM's
log-probs of the next label and its state, stepped with the predictor on each new label.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, backend_of, index_like
from beamsearch.core.state import concat_state, select_state


@dataclass(frozen=True)
class Network:
    """The model of one decode: flat encoder frames ``[N * T, D]`` and the two networks."""

    enc: Any
    frames: int
    predictor: Callable[[Any, Any], tuple[Any, Any]]
    joint: Callable[[Any, Any], Any]
    blank: int
    durations: np.ndarray | None
    token: Any = None

    @cached_property
    def first_move(self) -> int:
        """TDT: the index of the smallest positive duration (what a step that may not stay takes
        instead of duration 0); computed once per decode."""
        assert self.durations is not None, "only a TDT network has durations"
        return int(np.argmin(np.where(self.durations > 0, self.durations, np.iinfo(np.int64).max)))

    def log_probs(self, utt: np.ndarray, t: np.ndarray, pred_out: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """float64 token log-probs ``[R, V]`` and (TDT) duration log-probs ``[R, len(durations)]``
        of rows at frames ``t`` (int ``[R]``, each below its utterance's length)."""
        enc = backend_of(self.enc).take_rows(self.enc, index_like(utt * self.frames + t, self.enc))
        logits = self.joint(enc, pred_out)
        backend = backend_of(logits)
        x = backend.compute(logits)
        width = int(x.shape[1]) if len(x.shape) == 2 else -1
        n_dur = 0 if self.durations is None else self.durations.size
        if len(x.shape) != 2 or int(x.shape[0]) != utt.size or width - n_dur <= self.blank:
            need = f"[{utt.size}, V{'' if n_dur == 0 else f' + {n_dur}'}] with V > blank={self.blank}"
            raise ValueError(f"joint must return logits {need}; got shape {tuple(x.shape)}")
        tok = backend.to_numpy(backend.log_softmax(x[:, : width - n_dur])).astype(np.float64)
        dur = None if n_dur == 0 else backend.to_numpy(backend.log_softmax(x[:, width - n_dur :])).astype(np.float64)
        if np.isnan(tok).any() or (dur is not None and np.isnan(dur).any()):
            raise ValueError("joint returned logits with NaN or +inf (or a row without a finite entry)")
        return tok, dur

    def predict(self, carried: Any, labels: np.ndarray) -> Any:
        """``(pred_out, state, lm)`` after ``labels`` (int ``[K]``) from ``carried`` (K rows);
        the token LM (if any) steps on the same labels."""
        state, lm = carried[1], carried[2]
        y = index_like(labels, self.enc)
        out, new_state = self.predictor(state, y)
        if not hasattr(out, "shape") or len(out.shape) < 1 or int(out.shape[0]) != labels.size:
            raise ValueError(f"predictor must return (pred_out [K={labels.size}, H], new_state); "
                             f"got pred_out of shape {getattr(out, 'shape', None)}")
        if lm is not None:
            lm = self.token.call(lm[1], labels)
        return out, new_state, lm


def start(net: Network, state: Any, n: int) -> Any:
    """The carried ``(pred_out, state, lm)`` of the N empty hypotheses: the predictor run once on
    the blank (the start symbol) from ``state`` (N rows, or None); the token LM once on its
    ``bos`` from its initial state."""
    out, new_state, _ = net.predict((None, state, None), np.full(n, net.blank, dtype=np.int64))
    lm = None
    if net.token is not None:
        lp, lm_state = net.token.call(net.token.lm.init_state, np.array([net.token.lm.bos]))
        lm = (np.repeat(lp, n, axis=0), select_state(lm_state, net.token.index(np.zeros(n, dtype=np.int64))))
    return out, new_state, lm


def carry(net: Network, carried: Any, src: np.ndarray, label: np.ndarray, key: np.ndarray) -> Any:
    """The carried rows of the kept hypotheses: row ``src[k]`` of ``carried``, advanced by
    ``label[k]`` where it is not -1. The predictor runs once per distinct ``key`` (utterance and
    label sequence) among the advanced rows: hypotheses sharing a prefix share the call."""
    grow = np.flatnonzero(label >= 0)
    if grow.size == 0:
        return select_state(carried, src)
    uniq, first, inv = np.unique(key[grow], return_index=True, return_inverse=True)
    new = net.predict(select_state(carried, src[grow[first]]), label[grow[first]])
    rows = src.copy()
    total = int(carried[0].shape[0])
    rows[grow] = total + inv.reshape(-1)
    return select_state(concat_state([carried, new]), rows)


def grid_scores(score: np.ndarray, tok: np.ndarray, dur: np.ndarray | None, is_blank: np.ndarray,
                durations: np.ndarray | None, stay_ok: np.ndarray) -> np.ndarray:
    """float64 ``[R, K * Dn]`` candidate scores (Dn = 1 for RNN-T) of rows' K tokens (log-probs
    ``tok`` ``[R, K]``, ``is_blank`` bool ``[R or 1, K]``): ``score + log p(token) + log
    p(duration)``; a blank of duration 0 is -inf (its probability is lost, as in the TDT loss),
    and so is a label of duration 0 where ``stay_ok`` (bool ``[R]``) is False."""
    if dur is None:
        return score[:, None] + tok
    out = score[:, None, None] + tok[:, :, None] + dur[:, None, :]
    zero = np.flatnonzero(durations == 0)
    if zero.size:
        banned = is_blank | ~stay_ok[:, None]  # --> [R, K]
        out[:, :, zero[0]] = np.where(banned, NEG_INF, out[:, :, zero[0]])
    return out.reshape(out.shape[0], -1)
