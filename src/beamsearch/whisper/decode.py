"""One 30-second window per input, decoded as openai/whisper's ``decode`` does (its
``DecodingTask``), on the one engine: the prompt of :func:`~beamsearch.whisper.tokens.initial_tokens`,
the rules of :mod:`beamsearch.whisper.rules`, and whisper's beam rule
(:mod:`beamsearch.whisper.beam`), greedy (its B = 1 case) or sampling
(:mod:`beamsearch.whisper.sample`), for a whole batch at once with a different prompt per input
where it needs one.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.controls.shared import mode_options
from beamsearch.core import validate as check
from beamsearch.core.engine import StepFn
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.plan import Plan, run_plan
from beamsearch.whisper.beam import WhisperBeam, finalize, rank
from beamsearch.whisper.rules import whisper_processors
from beamsearch.whisper.sample import WhisperSample
from beamsearch.whisper.tokens import WhisperTokens
from beamsearch.whisper.word_lm import WordLM, WordLMFusion

__all__ = ["WhisperOptions", "WhisperResult", "compression_ratio", "decode_windows", "window_plan", "window_result"]


@dataclass(frozen=True)
class WhisperOptions:
    """openai/whisper's ``DecodingOptions`` that shape the search (same names, same defaults).

    Attributes:
        temperature: 0 decodes greedily or by beam; above 0 samples (``best_of`` each).
        beam_size: None (greedy at temperature 0) or B >= 1 (temperature 0 only).
        patience: None (1.0) or > 0: the beam ends with ``round(B * patience)`` finished candidates.
        best_of: None (1) or the samples per input at temperature > 0.
        length_penalty: None (rank by logprob / length) or alpha in [0, 1] (GNMT's penalty).
        sample_len: the most tokens a window generates (None: ``n_text_ctx // 2``).
        suppress_blank, suppress_tokens: see :func:`beamsearch.whisper.rules.whisper_processors`.
        timestamps: False decodes text only (whisper's ``without_timestamps=True``).
        max_initial_timestamp: seconds, or None / 0: the latest first timestamp.
        n_best: candidates returned per input, best first (whisper returns one).
        logits_processors: more processors, applied after whisper's rules (a
            :class:`~beamsearch.whisper.hotwords.HotwordBias`, ...).
        lm: None or a :class:`~beamsearch.whisper.word_lm.WordLM`: a word n-gram LM fused at
            word boundaries (``lm_alpha`` x its natural-log probability + ``lm_beta`` per word).
        lm_alpha: the LM's weight (>= 0).
        lm_beta: the bonus per completed word (any finite number).
    """

    temperature: float = 0.0
    beam_size: int | None = None
    patience: float | None = None
    best_of: int | None = None
    length_penalty: float | None = None
    sample_len: int | None = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] | None = (-1,)
    timestamps: bool = True
    max_initial_timestamp: float | None = 1.0
    n_best: int = 1
    logits_processors: tuple[Any, ...] = ()
    lm: WordLM | None = None
    lm_alpha: float = 0.5
    lm_beta: float = 1.0

    def __post_init__(self) -> None:
        _check_options(self)
        _check_lm(self)

    @property
    def group(self) -> int:
        """Rows per input: B for beam search, ``best_of`` when sampling, else 1."""
        return self.beam_size or self.best_of or 1


def _check_options(o: WhisperOptions) -> None:
    """whisper's ``_verify_options``, each message naming the option and its value."""
    if not (isinstance(o.temperature, (int, float)) and 0 <= o.temperature < float("inf")):
        raise ValueError(f"temperature must be a finite number >= 0; got {o.temperature!r}")
    for name in ("beam_size", "best_of", "sample_len", "n_best"):
        value = getattr(o, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be None or an int >= 1; got {value!r}")
    if o.beam_size is not None and o.best_of is not None:
        raise ValueError(f"beam_size and best_of can't be given together; got beam_size={o.beam_size}, "
                         f"best_of={o.best_of}")
    if o.beam_size is not None and o.temperature > 0:
        raise ValueError(f"beam_size decodes at temperature 0; got temperature={o.temperature}")
    if o.temperature == 0 and o.best_of is not None:
        raise ValueError(f"best_of samples at a temperature > 0; got best_of={o.best_of} at temperature 0")
    if o.patience is not None and (o.beam_size is None or not o.patience > 0):
        raise ValueError(f"patience must be > 0 and needs beam_size; got patience={o.patience!r}, "
                         f"beam_size={o.beam_size!r}")
    if o.length_penalty is not None and not 0 <= o.length_penalty <= 1:
        raise ValueError(f"length_penalty (alpha) must be None or in [0, 1]; got {o.length_penalty!r}")
    if o.n_best > o.group:
        raise ValueError(f"n_best must be <= the candidates per input ({o.group}); got n_best={o.n_best}")


def _check_lm(o: WhisperOptions) -> None:
    """``lm``, ``lm_alpha`` and ``lm_beta``, each message naming the option and its value."""
    if o.lm is not None and not isinstance(o.lm, WordLM):
        raise TypeError(f"lm must be None or a WordLM (beamsearch.whisper.WordLM); got {type(o.lm).__name__}")
    check.real("lm_alpha", o.lm_alpha, finite=True)
    check.finite("lm_beta", o.lm_beta)


@dataclass(frozen=True)
class WhisperResult:
    """One window's result (whisper's ``DecodingResult``, with the n-best beside it).

    Attributes:
        tokens: the text tokens (generated, eot not included).
        sum_logprob: their log-probability, eot's included when it ended (float32 sums); the
            model's own, the LM term taken out (``n_best[0].logprob - lm_scores[0]``).
        avg_logprob: ``sum_logprob / (len(tokens) + 1)``, as whisper counts it.
        temperature: the temperature it was decoded at.
        n_best: the ``n_best`` best candidates, best first (this result's first).
        text: the text, when a ``detokenize`` was given ("" otherwise).
        compression_ratio: of ``text`` (nan without one).
        lm_scores: per ``n_best`` candidate the word LM's term in its logprob (``lm_alpha`` x
            ln P_LM of its words + ``lm_beta`` x words; 0.0 without ``lm``).
    """

    tokens: list[int]
    sum_logprob: float
    avg_logprob: float
    temperature: float
    n_best: list[Hypothesis] = field(default_factory=list)
    text: str = ""
    compression_ratio: float = float("nan")
    lm_scores: list[float] = field(default_factory=list)


def compression_ratio(text: str) -> float:
    """UTF-8 bytes over zlib-compressed bytes (whisper's ``compression_ratio``)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def decode_windows(step_fn: StepFn, init_state: Any, prompts: Sequence[Sequence[int]], tokens: WhisperTokens,
                   options: WhisperOptions = WhisperOptions(), *, n_audio_ctx: int = 1500, n_text_ctx: int = 448,
                   detokenize: Callable[[list[int]], str] | None = None,
                   seeds: Sequence[int] | None = None, salt: int = 0) -> list[WhisperResult]:
    """Decode N windows together, each by whisper's rules (its ``decode`` on one window).

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)`` of the decoder.
        init_state: one row per window (its audio and prompt but the prompt's last token).
        prompts: per window its prompt (:func:`~beamsearch.whisper.tokens.initial_tokens`); the
            first call gets each prompt's last token.
        tokens: the special ids.
        options: the decoding options.
        n_audio_ctx: the encoder's positions (timestamp precision = ``30 / n_audio_ctx`` s).
        n_text_ctx: the decoder's context: a window stops where prompt + text would exceed it.
        detokenize: ids -> text, for ``text`` and ``compression_ratio``.
        seeds: per window, the seed of its samples (temperature > 0; default its position): a
            window's samples do not depend on the other windows of the batch.
        salt: >= 0, a second key of every draw (:mod:`beamsearch.whisper.fallback` draws anew at
            each attempt with the attempt's number).

    Returns:
        Per window its :class:`WhisperResult`.
    """
    n = len(prompts)
    if seeds is not None and (len(seeds) != n or any(int(s) < 0 for s in seeds)):
        raise ValueError(f"seeds must hold one int >= 0 per prompt ({n}); got {list(seeds)!r:.80}")
    if isinstance(salt, bool) or not isinstance(salt, int) or salt < 0:
        raise ValueError(f"salt must be an int >= 0; got {salt!r}")
    plan = window_plan(prompts, tokens, options, n_audio_ctx, n_text_ctx, seeds, salt)
    results = run_plan(step_fn, init_state, plan)
    return [window_result(hyps, options, detokenize) for hyps in results]


def window_plan(prompts: Sequence[Sequence[int]], tokens: WhisperTokens, o: WhisperOptions, n_audio_ctx: int,
                n_text_ctx: int, seeds: Sequence[int] | None, salt: int = 0) -> Plan:
    """The engine's plan of one batch: the rules as processors, whisper's stop at ``sample_len``
    or where the context is full, and the beam, greedy or sampling rule (its draws keyed by each
    input's seed and ``salt``)."""
    index = None
    if o.timestamps and o.max_initial_timestamp:
        index = round(o.max_initial_timestamp / (30 / n_audio_ctx))
    processors = whisper_processors(tokens, suppress_blank=o.suppress_blank, suppress_tokens=o.suppress_tokens,
                                    timestamps=o.timestamps, max_initial_timestamp_index=index)
    processors += list(o.logits_processors)
    sample_len = o.sample_len or n_text_ctx // 2
    steps = [max(1, min(sample_len, n_text_ctx - len(p) + 1)) for p in prompts]  # whisper: tokens > n_ctx stops
    opts = mode_options("decode_windows", prompts, {"eos_token_id": tokens.eot, "max_steps": steps,
                                                    "logits_processors": processors})
    if o.lm is not None:  # after log_softmax: the term adds to the logprob as it is
        lm = WordLMFusion(o.lm, o.lm_alpha, o.lm_beta)
        opts = dataclasses.replace(opts, controls=dataclasses.replace(opts.controls,
                                                                      masks=(*opts.controls.masks, lm)))
    strategy: Any
    if o.temperature > 0:
        given = np.arange(len(prompts)) if seeds is None else np.asarray(seeds, dtype=np.int64)
        strategy = WhisperSample(o.best_of or 1, float(o.temperature), given, salt)
    else:
        strategy = WhisperBeam(o.beam_size or 1, 1.0 if o.patience is None else float(o.patience))
    return Plan(opts, strategy, o.group, n_best=None)


def window_result(hyps: list[Hypothesis], o: WhisperOptions,
                  detokenize: Callable[[list[int]], str] | None) -> WhisperResult:
    """One window's result from every hypothesis its search ended."""
    ranked = rank(finalize(hyps, o.group), o.length_penalty)
    text_of = [Hypothesis(h.tokens[: len(h.tokens) - int(h.finished)], h.logprob, h.score, h.finished)
               for h in ranked]
    if not text_of:  # every extension was masked at the first step: nothing to rank
        return WhisperResult([], float("-inf"), float("-inf"), float(o.temperature))
    lm_scores = [0.0 if o.lm is None else o.lm.scores(h.tokens, o.lm_alpha, o.lm_beta) for h in ranked[: o.n_best]]
    best, own = text_of[0], text_of[0].logprob - lm_scores[0]
    text = "" if detokenize is None else detokenize(best.tokens).strip()
    ratio = float("nan") if detokenize is None else compression_ratio(text)
    return WhisperResult(best.tokens, own, own / (len(best.tokens) + 1), float(o.temperature),
                         text_of[: o.n_best], text, ratio, lm_scores)
