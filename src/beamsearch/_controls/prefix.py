"""A forced, scored prefix (SPEC section 10): at step ``t <= len(prefix[i])``, after log_softmax,
every token of input i but ``prefix[i][t-1]`` becomes -inf. The forced token keeps its processed
log-probability (it is scored, not assumed); -inf there leaves the input without an extension."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from beamsearch import _validate as check
from beamsearch.processors import StepContext


@dataclass(frozen=True)
class ForcedPrefix:
    """Attributes:
        tokens: int64 ``[N, L]``, each input's prefix right-padded with -1.
        lengths: int64 ``[N]``.
    """

    tokens: np.ndarray
    lengths: np.ndarray

    @property
    def last_step(self) -> int:
        """No-op after the longest prefix (the engine then skips it)."""
        return int(self.tokens.shape[1])

    def __call__(self, logp: Any, ctx: StepContext) -> Any:
        if ctx.step > self.tokens.shape[1]:
            return logp
        rows = np.flatnonzero(self.lengths[ctx.row_input] >= ctx.step)
        if rows.size == 0:
            return logp
        return ctx.backend.keep_only(logp, rows, self.tokens[ctx.row_input[rows], ctx.step - 1])


def forced_prefix(value: Any, n_inputs: int, eos: np.ndarray, max_steps: np.ndarray) -> ForcedPrefix | None:
    """Validate ``prefix`` (None, or one token-id sequence per input) into a :class:`ForcedPrefix`."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"prefix must be None or one token-id sequence per prompt; got {value!r:.80}")
    if len(value) != n_inputs:
        raise ValueError(f"prefix must have one sequence per prompt ({n_inputs}); got {len(value)}")
    rows: list[Sequence[int]] = [check.token_list(f"prefix[{i}]", p, allow_empty=True) for i, p in enumerate(value)]
    for i, p in enumerate(rows):
        bad = [t for t in p if t in set(eos.tolist())]
        if bad:
            raise ValueError(f"prefix[{i}] must not hold an eos id; got {list(p)} (eos {bad[0]})")
        if len(p) > max_steps[i]:
            raise ValueError(f"prefix[{i}] is longer ({len(p)}) than max_steps for input {i} ({max_steps[i]})")
    if not any(rows):
        return None
    width = max(len(p) for p in rows)
    tokens = np.full((n_inputs, width), -1, np.int64)
    for i, p in enumerate(rows):
        tokens[i, : len(p)] = p
    return ForcedPrefix(tokens, np.array([len(p) for p in rows], dtype=np.int64))
