"""``model.generate``'s outputs from a search: the ``sequences`` tensor, ``sequences_scores``, and,
when asked, the per-step ``scores``, ``logits`` and ``beam_indices`` in ``generate``'s shapes
(:class:`StepOutputs`, a step callback of the search, reading the engine's step records).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from beamsearch.core.select import positions
from beamsearch.core.trace import FINISHED, KEPT, PRUNED, UNFINISHED, LogprobsCallback, StepRecord, stop_mask

__all__ = ["LogitsTap", "ProcessedTap", "StepOutputs", "sequences", "sequences_scores"]


def sequences(hypotheses: Sequence[Sequence[Any]], head: torch.Tensor, pad: int | None) -> torch.Tensor:
    """``generate``'s ``sequences``: each input's row of ``head`` then each of its hypotheses'
    tokens, input-major and best first, right-padded with ``pad`` (the longest sets the width).

    Args:
        hypotheses: per input, its hypotheses (``.tokens``: the new tokens).
        head: int64 ``[N, P]``: a causal LM's prompts as ``generate`` holds them (padded), or an
            encoder-decoder's decoder start token ``[N, 1]``.
        pad: the pad id (``generate`` pads with the pad id, else the first eos id); 0 when None.

    Returns:
        int64 ``[R, P + L]``, R the hypotheses in all, L the most new tokens of any.
    """
    hyps = [(i, h) for i, hs in enumerate(hypotheses) for h in hs]
    width = max((len(h.tokens) for _, h in hyps), default=0)
    out = torch.full((len(hyps), head.shape[1] + width), 0 if pad is None else pad, dtype=torch.long)
    out[:, : head.shape[1]] = head[torch.tensor([i for i, _ in hyps], dtype=torch.long)]
    for r, (_, h) in enumerate(hyps):
        out[r, head.shape[1]: head.shape[1] + len(h.tokens)] = torch.tensor(h.tokens, dtype=torch.long)
    return out


def sequences_scores(hypotheses: Sequence[Sequence[Any]]) -> torch.Tensor:
    """float32 ``[R]``: each hypothesis's score, in the rows of :func:`sequences`."""
    return torch.tensor([h.score for hs in hypotheses for h in hs], dtype=torch.float32)


class LogitsTap:
    """A step function that keeps the model's raw logits of its last call for :class:`StepOutputs`.

    Args:
        step: ``step(state, y_prev [k]) -> (logits [k, V], new_state)``.
        outputs: where the logits go (``outputs.last_logits``).
    """

    def __init__(self, step: Callable[[Any, Any], tuple[Any, Any]], outputs: StepOutputs) -> None:
        self.step, self.outputs = step, outputs

    def __call__(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        logits, new_state = self.step(state, y_prev)
        self.outputs.last_logits = logits
        return logits, new_state


class ProcessedTap:
    """A processor of the search, the last before log_softmax, that changes nothing and keeps each
    step's processed logits ``[k, V]`` for :class:`StepOutputs` (``outputs.last_processed``):
    ``generate``'s greedy ``scores``. Only a step's first call is kept (the engine calls the
    processors again on some rows to name one that made a row NaN)."""

    needs_history = False
    last_step = None
    masks_only = True  # it sets nothing

    def __init__(self, outputs: StepOutputs) -> None:
        self.outputs, self.step = outputs, 0

    def __call__(self, logits: Any, ctx: Any) -> Any:
        if ctx.step != self.step:
            self.step = ctx.step
            self.outputs.last_processed = ctx.backend.copy(logits)
        return logits


class StepOutputs(LogprobsCallback):
    """``generate``'s per-step outputs, collected by a search's step callback.

    Row ``i * width + j`` of a step's tensors is input i's j-th row of that step's model call
    (the rows in the search's order: best first under the search's rule); a row an input does not
    have at that step (one row at step 1; none after it stopped) is -inf.

    Args:
        width: the rows per input (``num_beams``; 1 for greedy decoding; ``k`` when sampling).
        scores: keep each step's processed log-probabilities (``output_scores``).
        logits: keep each step's raw logits (``output_logits``; the step must be a
            :class:`LogitsTap` on this object).
        inner: another step callback (its return, inputs to stop, is the search's).
        processed: with ``scores``, keep each step's processed logits (before log_softmax, as
            ``generate``'s greedy decoding gives them) in place of the log-probabilities: the
            search's last processor must be :attr:`tap`.

    Attributes (after the search):
        scores, logits: tuples of T float32 tensors ``[N * width, V]``, T the steps run (None when
            not asked).
        tap: the :class:`ProcessedTap` that feeds ``processed`` scores, else None.
    """

    def __init__(self, width: int, *, scores: bool, logits: bool,
                 inner: Callable[[StepRecord], Any] | None = None, processed: bool = False) -> None:
        self.width, self.keep_scores, self.keep_logits, self.inner = width, scores, logits, inner
        self.scores_: list[torch.Tensor] = []
        self.logits_: list[torch.Tensor] = []
        self.last_logits: Any = None
        self.last_processed: Any = None
        self.tap = ProcessedTap(self) if processed and scores else None
        self.tokens = self.paths = np.zeros((0, 0), np.int64)  # --> [k, t - 1] per row of the call
        self.ended: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}

    def __call__(self, record: StepRecord) -> Any:
        stop = self.inner(record) if self.inner is not None else None
        n, t = record.n_inputs, record.step
        if t == 1:
            self.tokens = self.paths = np.zeros((record.row_input.shape[0], 0), np.int64)
        flat = record.row_input * self.width + positions(record.row_input)  # --> [k]: each row's index
        if self.keep_scores:
            self.scores_.append(self._spread(record.logprobs if self.tap is None else self.last_processed, flat, n))
        if self.keep_logits:
            self.logits_.append(self._spread(self.last_logits, flat, n))
        c = np.flatnonzero(record.status != PRUNED)
        parent, status = record.parent[c], record.status[c]
        tokens = np.concatenate([self.tokens[parent], record.token[c, None]], axis=1)
        paths = np.concatenate([self.paths[parent], flat[parent, None]], axis=1)
        stopped = stop_mask(stop.cpu() if isinstance(stop, torch.Tensor) else stop, n)[record.input[c]]
        ends = (status == FINISHED) | (status == UNFINISHED) | ((status == KEPT) & stopped)
        for j in np.flatnonzero(ends).tolist():
            self.ended[(int(record.input[c[j]]), tuple(tokens[j].tolist()))] = paths[j]
        kept = (status == KEPT) & ~stopped
        self.tokens, self.paths = tokens[kept], paths[kept]
        return stop

    def _spread(self, x: Any, flat: np.ndarray, n: int) -> torch.Tensor:
        """``x`` (``[k, V]``, numpy or torch) as float32 ``[N * width, V]``, row ``flat[r]`` from ``x[r]``."""
        x = torch.as_tensor(x).float()
        out = torch.full((n * self.width, x.shape[1]), -torch.inf, dtype=torch.float32, device=x.device)
        out[torch.as_tensor(flat, device=x.device)] = x
        return out

    @property
    def scores(self) -> tuple[torch.Tensor, ...] | None:
        return tuple(self.scores_) if self.keep_scores else None

    @property
    def logits(self) -> tuple[torch.Tensor, ...] | None:
        return tuple(self.logits_) if self.keep_logits else None

    def beam_indices(self, hypotheses: Sequence[Sequence[Any]]) -> torch.Tensor:
        """int64 ``[R, L]``: for each hypothesis (the rows of :func:`sequences`), the row index
        (``i * width + j``) its token of each step extended, -1 past its end, as ``generate``'s
        ``beam_indices``; L the most new tokens of any."""
        hyps = [(i, h) for i, hs in enumerate(hypotheses) for h in hs]
        width = max((len(h.tokens) for _, h in hyps), default=0)
        out = torch.full((len(hyps), width), -1, dtype=torch.long)
        for r, (i, h) in enumerate(hyps):
            path = self.ended[(i, tuple(h.tokens))]
            out[r, : len(path)] = torch.as_tensor(path)
        return out


def step_outputs(spec: Any, search: dict[str, Any], cfg: Any, processed: bool = False) -> StepOutputs | None:
    """The step callback that collects ``output_scores`` / ``output_logits`` for the mode
    ``spec`` (its rows per input from ``search``), or None when neither is asked. ``processed``:
    greedy decoding's scores as ``generate`` gives them, the processed logits
    (``mode="transformers"`` with one beam; :attr:`StepOutputs.tap`).

    Raises:
        ValueError: asked of a mode that has no steps to record (exact search).
    """
    if not (cfg.output_scores or cfg.output_logits):
        return None
    if "callback" in spec.refused:
        asked = "output_scores" if cfg.output_scores else "output_logits"
        raise ValueError(f"{asked}=True: mode {spec.name!r} has no beam steps to record ({spec.refused['callback']})")
    return StepOutputs(spec.rows(search), scores=bool(cfg.output_scores), logits=bool(cfg.output_logits),
                       processed=processed and spec.name == "greedy")


def generate_outputs(hypotheses: Sequence[Sequence[Any]], head: torch.Tensor, pad: int | None, eos: Any,
                     steps: StepOutputs | None, scored: bool) -> dict[str, Any]:
    """The :class:`~beamsearch.hf.Generation` fields of ``generate``'s output: ``sequences``,
    ``sequences_scores`` (None unless ``scored``: greedy decoding has none), and with ``steps``
    its ``scores``, ``logits`` and ``beam_indices``.

    ``sequences`` is padded as ``generate`` pads it: greedy decoding with ``pad``; beam search
    (``scored``) with ``pad or eos[0]`` (``_beam_search``'s fill value: a pad id of 0 counts as
    unset there, so its rows end in eos ids), -1 without an eos id."""
    first = None if eos is None else [eos] if isinstance(eos, int) else list(eos)
    fill = pad if not scored else ((pad or first[0]) if first else -1)
    out: dict[str, Any] = {"sequences": sequences(hypotheses, head, fill),
                           "sequences_scores": sequences_scores(hypotheses) if scored else None}
    if steps is not None:
        out.update(scores=steps.scores, logits=steps.logits,
                   beam_indices=steps.beam_indices(hypotheses) if scored else None)
    return out
