"""The transducer loss in torch: the negative log-likelihood of the label sequence summed over all
alignments (the forward algorithm over the T x U lattice, batched over utterances and over the
labels of a frame), for RNN-T (Graves 2012) and TDT (Xu et al. 2023).

The paths are those of the decoders (docs/transducer.md), with no bound on labels per frame:

- RNN-T: at frame ``t`` after ``u`` labels, the blank moves to ``t + 1``, label ``u + 1`` stays at ``t``;
  the path ends with the blank at frame ``T - 1``.
- TDT: a token with duration ``d`` moves to ``t + d``; a blank never has duration 0 (that probability
  is lost, not renormalized). **A path ends as soon as its frame reaches or passes ``T``**: the last
  step (the final blank, or the last label) may overshoot the last frame, as the decoders allow.

Within a frame the labels of duration 0 chain ``alpha[t, u] = logaddexp(X[t, u], alpha[t, u-1] +
w[t, u-1])`` (``X`` the moves from earlier frames), solved for all ``u`` at once by a cumulative
log-sum-exp; so the loop runs over frames only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["transducer_loss"]

_NEG = -1e30  # log 0 kept finite so that gradients stay finite


def _moves(token_logp: torch.Tensor, targets: torch.Tensor, blank: int, durations: Sequence[int] | None,
           duration_logp: torch.Tensor | None) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
    """``(blank_moves, label_moves)``: per duration ``d``, the log-weight ``[B, T, U+1]`` of the blank
    (of label ``u + 1``; the last column unused) moving ``d`` frames from ``(t, u)``."""
    b, t, u1, _ = token_logp.shape
    blank_lp = token_logp[..., blank]
    index = torch.cat([targets, targets.new_zeros(b, 1)], dim=1)[:, None, :, None].expand(b, t, u1, 1)
    label_lp = token_logp.gather(3, index).squeeze(3)
    if durations is None:
        return {1: blank_lp}, {0: label_lp}
    assert duration_logp is not None
    blanks = {d: blank_lp + duration_logp[..., k] for k, d in enumerate(durations) if d >= 1}
    labels = {d: label_lp + duration_logp[..., k] for k, d in enumerate(durations)}
    return blanks, labels


def _row(incoming: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
    """``alpha[t, :]`` from ``incoming`` ``X[t, :]`` and the duration-0 label weights ``chain``
    ``w[t, :]`` ``[B, U+1]``: ``alpha[u] = logaddexp(X[u], alpha[u-1] + w[u-1])``."""
    s = torch.cat([chain.new_zeros(chain.shape[0], 1), torch.cumsum(chain[:, :-1], dim=1)], dim=1)
    return s + torch.logcumsumexp(incoming - s, dim=1)


def _shift(x: torch.Tensor) -> torch.Tensor:
    """``x[:, u-1]`` at ``u`` (a label move goes from ``u - 1`` to ``u``), log 0 at ``u = 0``."""
    return torch.cat([torch.full_like(x[:, :1], _NEG), x[:, :-1]], dim=1)


def transducer_loss(token_logp: torch.Tensor, targets: torch.Tensor, frames: torch.Tensor,
                    target_lengths: torch.Tensor, *, blank: int, durations: Sequence[int] | None = None,
                    duration_logp: torch.Tensor | None = None) -> torch.Tensor:
    """The negative log-likelihood ``[B]`` of each utterance's labels (about ``1e30``, not inf,
    where no path holds them: more labels than the frames and durations allow).

    Args:
        token_logp: ``[B, T, U+1, V]`` log-probabilities over the labels and the blank (normalized),
            at frame ``t`` after ``u`` labels.
        targets: int ``[B, U]`` label ids (padding past ``target_lengths`` is ignored).
        frames: int ``[B]`` encoder frames of each utterance (1..T).
        target_lengths: int ``[B]`` labels of each utterance (0..U).
        blank: the blank's id.
        durations: TDT's durations (e.g. ``(0, 1, 2, 3, 4)``); None for RNN-T.
        duration_logp: ``[B, T, U+1, len(durations)]`` log-probabilities of the durations (TDT).
    """
    if (durations is None) != (duration_logp is None):
        raise ValueError("durations and duration_logp must be given together (TDT) or both be None (RNN-T)")
    if durations is not None and (len(durations) == 0 or min(durations) < 0):
        raise ValueError(f"durations must be non-negative integers; got {list(durations)}")
    b, t_max, _, _ = token_logp.shape
    blanks, labels = _moves(token_logp, targets, blank, durations, duration_logp)
    alphas: list[torch.Tensor] = []
    start = torch.full_like(token_logp[:, 0, :, 0], _NEG)
    start[:, 0] = 0.0
    for t in range(t_max):
        parts = [start] if t == 0 else []
        for d, w in blanks.items():
            if d <= t:
                parts.append(alphas[t - d] + w[:, t - d])
        for d, w in labels.items():
            if 1 <= d <= t:
                parts.append(_shift(alphas[t - d] + w[:, t - d]))
        incoming = torch.logsumexp(torch.stack(parts), dim=0)
        alphas.append(_row(incoming, labels[0][:, t]) if 0 in labels else incoming)
    alpha = torch.stack(alphas, dim=1)  # [B, T, U+1]
    return -_finish(alpha, blanks, labels, frames.long(), target_lengths.long())


def _finish(alpha: torch.Tensor, blanks: dict[int, torch.Tensor], labels: dict[int, torch.Tensor],
            frames: torch.Tensor, target_lengths: torch.Tensor) -> torch.Tensor:
    """Log-probability ``[B]`` of the paths that end: the blank after all labels, or the last
    label, moving from a frame ``t < T`` to ``t + d >= T``."""
    b, t_max, _ = alpha.shape
    rows = torch.arange(b)
    steps = torch.arange(t_max)[None, :]
    inside = steps < frames[:, None]
    last = alpha[rows, :, target_lengths]  # [B, T]
    before = alpha[rows, :, (target_lengths - 1).clamp(min=0)]
    has_label = (target_lengths > 0)[:, None]
    ends = []
    for d, w in blanks.items():
        ok = inside & (steps + d >= frames[:, None])
        ends.append(torch.where(ok, last + w[rows, :, target_lengths], _NEG))
    for d, w in labels.items():
        ok = inside & (steps + d >= frames[:, None]) & has_label
        ends.append(torch.where(ok, before + w[rows, :, (target_lengths - 1).clamp(min=0)], _NEG))
    return torch.logsumexp(torch.cat(ends, dim=1), dim=1)
