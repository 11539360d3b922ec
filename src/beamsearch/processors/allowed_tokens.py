"""Allowed-token constraints: a callback names, per row, the only tokens it may take next.

:class:`AllowedTokens` is ``transformers``' ``prefix_allowed_tokens_fn`` as a logits processor:
``fn(input_index, tokens)`` returns the ids row may take, every other token becomes -inf before
log_softmax, so the search renormalizes over the allowed tokens (a hypothesis's logprob is a
log-probability under that constrained distribution). Two ready constraints are built the same way
with their own vectorized bookkeeping: :class:`~beamsearch.processors.catalogue.Catalogue` (a trie
of allowed outputs) and :class:`~beamsearch.processors.token_dfa.TokenDFA` (a finite automaton).

A row left with no allowed token (or only tokens the model gave -inf) has no extension: it ends
there, as SPEC section 6 says for any row that processing empties.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, Backend
from beamsearch.processors._base import StepContext

__all__ = ["AllowedTokens", "generated_tokens", "keep_pairs"]


@dataclass(frozen=True)
class AllowedTokens:
    """Only the tokens ``fn`` allows, per row; every other logit becomes -inf.

    Args:
        fn: ``fn(input_index, tokens) -> allowed ids``, called once per live row per step.
            ``input_index`` is the row's input (its prompt's position, a Python int); ``tokens``
            is a tuple of Python ints: the input's prompt as the search used it (an empty prompt
            is ``(bos_token_id,)``), then the tokens the row generated so far (none at step 1).
            It returns the allowed ids as any iterable of integers in ``[0, V)`` (a list, a
            range, a numpy array); repeats are fine, an empty result leaves the row no extension.

    The callback is the one per-row piece (Python, one call per row); the mask itself is built
    for all rows at once. Results are not cached: within a search each ``(input, tokens)``
    occurs once (the live rows of an input are distinct paths), so a cache would never hit.
    A bad id is a ValueError naming ``fn``, the input and the value, raised at the step where
    the callback returned it (V is only known once the model has answered).
    """

    fn: Callable[[int, tuple[int, ...]], Iterable[int]]
    needs_history = True

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"AllowedTokens fn must be callable; got {self.fn!r:.80}")

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        history = ctx.history  # --> [k, P + t - 1], left-padded with -1
        start = np.argmax(history >= 0, axis=1)  # --> [k], first column of each row's prompt
        inputs = ctx.row_input.tolist()
        allowed = []
        # the callback is per row
        for row, (tokens, s) in enumerate(zip(history.tolist(), start.tolist(), strict=True)):
            allowed.append(_ids(self.fn(inputs[row], tuple(tokens[s:])), inputs[row], logits.shape[1]))
        counts = [a.shape[0] for a in allowed]
        rows = np.repeat(np.arange(len(allowed)), counts)
        cols = np.concatenate([np.zeros(0, np.int64), *allowed])
        return keep_pairs(ctx.backend, logits, rows, cols)


def _ids(value: Any, input_index: int, vocab: int) -> np.ndarray:
    """The callback's answer as int64 ``[a]``, checked against ``[0, V)``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"AllowedTokens fn must return an iterable of token ids; got {value!r:.80} "
                        f"for input {input_index}")
    ids = np.asarray(list(value) if not hasattr(value, "dtype") else value)
    if ids.size == 0:
        return np.zeros(0, np.int64)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"AllowedTokens fn must return token ids (integers); got {value!r:.80} "
                        f"for input {input_index}")
    bad = (ids < 0) | (ids >= vocab)
    if bad.any():
        raise ValueError(f"AllowedTokens fn returned token id {int(ids[bad][0])} for input {input_index}; "
                         f"ids must be in [0, {vocab})")
    return ids.astype(np.int64, copy=False)


def keep_pairs(backend: Backend, logits: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
    """``logits [k, V]`` with every entry -inf except ``(rows[i], cols[i])``, which keep their value.

    Three whole-array operations on the logits' backend (read the kept values, fill, write them
    back), whatever the number of rows. Repeated pairs are fine.
    """
    kept = backend.take(logits, rows, cols)  # --> [p], on the logits' device
    logits = backend.fill_rows(logits, np.arange(logits.shape[0]), NEG_INF)
    return backend.put(logits, rows, cols, kept)


def generated_tokens(ctx: StepContext) -> np.ndarray:
    """int64 ``[k, t - 1]``: the tokens each row generated before step ``t`` (the prompt left out:
    whether or not the history holds it, the generated tokens are its last ``t - 1`` columns)."""
    history = ctx.history
    return history[:, history.shape[1] - (ctx.step - 1) :]
