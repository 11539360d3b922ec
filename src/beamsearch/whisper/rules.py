"""Whisper's logit rules as logits processors (openai/whisper's ``LogitFilter`` classes), in the
order its ``DecodingTask`` applies them:

1. ``suppress_blank``: no blank (``" "``) and no eot as the first generated token
   (:class:`~beamsearch.processors.SuppressTokens` with ``first_steps=1``);
2. ``suppress_tokens``: ids never generated (:class:`~beamsearch.processors.SuppressTokens`,
   the ids of :func:`beamsearch.whisper.tokens.suppressed_ids`);
3. the timestamp rules (:class:`TimestampRules`), unless the window decodes without timestamps.

Each reads the generated tokens only (those after the prompt), as whisper's filters read
``tokens[:, sample_begin:]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.processors import StepContext, SuppressTokens
from beamsearch.whisper.tokens import WhisperTokens, suppressed_ids

__all__ = ["TimestampRules", "generated_tokens", "whisper_processors"]


def generated_tokens(ctx: StepContext) -> np.ndarray:
    """int64 ``[k, t-1]``: each row's generated tokens before step t (the history's last columns:
    it holds the prompt too when some processor of the search asked for it)."""
    history, done = ctx.history, ctx.step - 1
    return history[:, history.shape[1] - done:] if done else history[:, :0]


@dataclass(frozen=True)
class TimestampRules:
    """openai/whisper's ``ApplyTimestampRules``, one mask per step for all rows.

    Per row, over its generated tokens ``seq``:

    - ``<|notimestamps|>`` is never generated;
    - timestamps come in pairs: after a lone timestamp (the last token one, the one before not)
      no text token may follow (only a timestamp or eot); after two timestamps, a text token must;
    - timestamps do not decrease: nothing below the last timestamp (below it + 1 where it opened
      no segment yet, so that a segment has a nonzero length);
    - at the first step only timestamps, up to ``timestamp_begin + max_initial_timestamp_index``;
    - where the timestamps' total probability (after the rules above and every processor before
      this one) beats every single text token's, only timestamps (the comparison in float32, as
      whisper's ``log_softmax(logits.float())``).

    Attributes:
        timestamp_begin: the id of ``<|0.00|>``.
        eot: the end of transcript id.
        no_timestamps: the id of ``<|notimestamps|>``.
        max_initial_timestamp_index: None, or the last timestamp (counted from ``<|0.00|>``)
            allowed first: ``round(max_initial_timestamp / precision)``, precision =
            ``30 / n_audio_ctx`` seconds (0.02).
    """

    timestamp_begin: int
    eot: int
    no_timestamps: int
    max_initial_timestamp_index: int | None = None
    needs_history = False
    last_step = None  # acts at every step
    masks_only = True  # it only sets entries to -inf

    def __post_init__(self) -> None:
        index = self.max_initial_timestamp_index
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise ValueError(f"max_initial_timestamp_index must be None or an int >= 0; got {index!r}")

    @property
    def vocab_checks(self) -> tuple[tuple[str, list[int]], ...]:
        return (("timestamp_begin", [self.timestamp_begin]), ("eot", [self.eot]),
                ("no_timestamps", [self.no_timestamps]))

    def banned(self, seq: np.ndarray, vocab: int) -> np.ndarray:
        """bool ``[k, V]``: what the pair, order and first-step rules ban after ``seq [k, t]``."""
        k, t = seq.shape
        tb, cols = self.timestamp_begin, np.arange(vocab)
        ban = np.zeros((k, vocab), dtype=bool)
        ban[:, self.no_timestamps] = True
        is_ts = seq >= tb  # --> [k, t]
        last: np.ndarray = is_ts[:, -1] if t >= 1 else np.zeros(k, bool)
        penultimate: np.ndarray = is_ts[:, -2] if t >= 2 else np.ones(k, bool)
        ban[last & penultimate, tb:] = True
        ban[last & ~penultimate, : self.eot] = True
        any_ts = np.any(is_ts, axis=1)  # --> [k]
        if any_ts.any():
            at = t - 1 - np.argmax(is_ts[:, ::-1], axis=1)  # --> [k]: the last timestamp's column
            last_ts = seq[np.arange(k), at]
            bound = np.where(last & ~penultimate, last_ts, last_ts + 1)  # --> [k]
            ban |= any_ts[:, None] & (cols >= tb) & (cols < bound[:, None])
        if t == 0:
            ban[:, :tb] = True
            if self.max_initial_timestamp_index is not None:
                ban[:, tb + self.max_initial_timestamp_index + 1:] = True
        return ban

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        b = ctx.backend
        vocab = int(logits.shape[1])
        ban = self.banned(generated_tokens(ctx), vocab)
        host = b.to_numpy(logits).astype(np.float32)  # --> [k, V]: the comparison in float32
        host = np.where(ban, -np.inf, host)
        with np.errstate(all="ignore"):
            top = host.max(axis=1, keepdims=True)
            logp = host - top - np.log(np.exp(host - top).sum(axis=1, keepdims=True))
            ts = logp[:, self.timestamp_begin:]
            ts_top = ts.max(axis=1)
            ts_total = ts_top + np.log(np.exp(ts - ts_top[:, None]).sum(axis=1))  # logsumexp, -inf when none
            text_best = logp[:, : self.timestamp_begin].max(axis=1)
        ban[ts_total > text_best, : self.timestamp_begin] = True
        additive = np.where(ban, -np.inf, 0.0).astype(np.float32)
        return logits + b.from_host(additive, logits)


def whisper_processors(tokens: WhisperTokens, *, suppress_blank: bool = True,
                       suppress_tokens: tuple[int, ...] | None = (-1,), timestamps: bool = True,
                       max_initial_timestamp_index: int | None = None) -> list[Any]:
    """The processors of one window, in whisper's order (this module's docstring).

    Args:
        tokens: the special ids.
        suppress_blank: ban ``" "`` and eot as the first token.
        suppress_tokens: as openai/whisper's option of that name (``(-1,)``: the non-speech
            symbols), the task, start and no-speech tokens always with them; None or empty: no
            suppression at all, as whisper skips its filter then.
        timestamps: apply :class:`TimestampRules` (False: the window decodes without timestamps).
        max_initial_timestamp_index: see :class:`TimestampRules`.
    """
    out: list[Any] = []
    if suppress_blank:
        out.append(SuppressTokens([*tokens.blank, tokens.eot], first_steps=1))
    if suppress_tokens:  # whisper applies no suppression at all for an empty list
        out.append(SuppressTokens(list(suppressed_ids(tokens, suppress_tokens))))
    if timestamps:
        out.append(TimestampRules(tokens.timestamp_begin, tokens.eot, tokens.no_timestamps,
                                  max_initial_timestamp_index))
    return out
