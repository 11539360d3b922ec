"""Hotword biasing at decoding time over a decoder's own tokens (Whisper's byte-level BPE): the
phrase trie of :mod:`beamsearch.speech.hotwords` as a logits processor.

The bonus is the CTC decoder's (docs/speech.md): after each token, ``weight`` x the positions
lying in completed phrase occurrences or in the match in progress (the longest suffix of the
text that starts some phrase); a match abandoned gives back what it earned. As a processor, each
row's logits get, for every next token v, the *change* of that bonus if v comes next, so a
hypothesis's processed log-probabilities carry the bonus of its tokens so far (the softmax then
renormalizes, as shallow fusion does); eot and timestamps abandon a match in progress, so a
finished text keeps the bonus of its completed phrases only.

A phrase is a sequence of token ids: give each phrase as the tokenizer encodes it where it stands
in the text (Whisper's BPE: usually with its leading space, ``tokenizer.encode(" Kubernetes")``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from beamsearch.core import validate as check
from beamsearch.processors import RowCarrier, StepContext
from beamsearch.speech.hotwords import FULL, Hotwords, compile_lists, popcount

__all__ = ["HotwordBias", "HotwordRows"]


class HotwordRows(NamedTuple):
    """The rows' match states (int64 ``[k]`` each: node, completed-position mask, positions done)
    and the compiled phrases (passed through by ``select_state``)."""

    node: np.ndarray
    mask: np.ndarray
    done: np.ndarray
    hw: Hotwords

    def advance(self, tokens: np.ndarray) -> HotwordRows:
        return HotwordRows(*self.hw.step(self.node, self.mask, self.done, np.asarray(tokens, np.int64)), self.hw)


class HotwordBias(RowCarrier):
    """Add each next token's change of the hotword bonus to the logits (module docstring).

    Args:
        phrases: token-id sequences (1 to 62 ids each) for every input, or one such list per
            input (``per_input=True``).
        weight: the bonus per token position (>= 0).
        vocab_size: V, the logits' width.
        per_input: ``phrases`` holds one list per input.
    """

    needs_history = False
    last_step = None  # acts at every step
    masks_only = False

    def __init__(self, phrases: Sequence[Any], weight: float, vocab_size: int, *, per_input: bool = False) -> None:
        self.weight = check.real("weight", weight, finite=True)
        self.vocab_size = check.at_least("vocab_size", vocab_size, 1)
        lists = [list(p) for p in phrases] if per_input else [list(phrases)]
        self.lists = [tuple(self._phrase(f"phrases[{i}][{j}]" if per_input else f"phrases[{j}]", p)
                            for j, p in enumerate(lst)) for i, lst in enumerate(lists)]
        self.per_input = per_input
        self.hw = compile_lists(self.lists, self.weight, self.vocab_size)

    def _phrase(self, name: str, phrase: Any) -> tuple[int, ...]:
        ids = tuple(check.integer(f"{name}[{t}]", x) for t, x in enumerate(phrase))
        if not 1 <= len(ids) <= 62 or any(not 0 <= t < self.vocab_size for t in ids):
            raise ValueError(f"{name} must hold 1 to 62 token ids in [0, {self.vocab_size}); got {list(phrase)!r:.80}")
        return ids

    def start_rows(self, n: int) -> HotwordRows:
        if self.per_input and n != len(self.lists):
            raise ValueError(f"HotwordBias has phrases for {len(self.lists)} inputs; the search has {n}")
        starts = self.hw.starts if self.per_input else np.repeat(self.hw.starts[:1], n)
        zeros = np.zeros(n, np.int64)
        return HotwordRows(starts.astype(np.int64), zeros, zeros.copy(), self.hw)

    def deltas(self, rows: HotwordRows) -> np.ndarray:
        """float64 ``[k, V]``: each row's bonus change for each next token."""
        hw, node = self.hw, rows.node
        k, v = node.shape[0], hw.vocab
        nxt = hw.root_next[hw.root_of[node]]  # --> [k, V]: where each label leads by failure links
        lo, hi = np.searchsorted(hw.codes, node * v), np.searchsorted(hw.codes, (node + 1) * v)
        count = hi - lo  # the row's own transitions
        if count.sum():
            row = np.repeat(np.arange(k), count)
            pos = np.arange(row.shape[0]) - np.repeat(np.cumsum(count) - count, count) + np.repeat(lo, count)
            nxt = nxt.copy()
            nxt[row, hw.codes[pos] % v] = hw.targets[pos]
        shifted = ((rows.mask << 1) & FULL)[:, None]  # --> [k, 1]
        new = (np.int64(1) << hw.longest[nxt]) - 1  # --> [k, V]
        after = hw.count(nxt, shifted | new, rows.done[:, None] + popcount(new & ~shifted))
        return hw.weight * (after - hw.count(node, rows.mask, rows.done)[:, None]).astype(np.float64)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        delta = self.deltas(ctx.row_states(self))
        if not delta.any():
            return logits
        return logits + ctx.backend.from_host(delta, logits)
