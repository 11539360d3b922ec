"""Temperature fallback per window, in one running batch: openai/whisper's ``decode_with_fallback``
(its ``transcribe`` loop) for many windows at once, on the refill machinery
(:class:`beamsearch.refill.flight.Flight`).

Every window starts at the first temperature (beam search or greedy at 0). When a window's
result fails the checks it is queued again at the next temperature (sampling, ``best_of``) and
joins the search in flight at the next model call, in the rows the windows that passed left: the
batch stays full while windows fall back at their own pace. whisper's checks, in its order:

- fails when ``compression_ratio > compression_ratio_threshold`` (too repetitive) or
  ``avg_logprob < logprob_threshold``;
- but passes (silence) when ``no_speech_prob > no_speech_threshold`` and
  ``avg_logprob < logprob_threshold``;
- the result kept is the last one decoded (the last temperature's, when all fail).

At a temperature > 0 the beam options are dropped (sampling, ``best_of``); at 0 ``best_of`` is.
Each window's draws are keyed by its seed and its attempt, so its result is the one it gets
decoded alone, whatever windows share its calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from beamsearch.core.engine import StepFn
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.plan import run_plan
from beamsearch.refill.flight import Cohort, Flight
from beamsearch.refill.records import Decoded, Input, StreamStats
from beamsearch.whisper.decode import WhisperOptions, WhisperResult, window_plan, window_result
from beamsearch.whisper.tokens import WhisperTokens

__all__ = ["FallbackOptions", "FallbackResult", "at_temperature", "needs_fallback", "transcribe_windows"]


@dataclass(frozen=True)
class FallbackOptions:
    """openai/whisper's ``transcribe`` options of the fallback (same names and defaults).

    Attributes:
        temperatures: tried in order, each >= 0 (whisper's default ``(0.0, 0.2, ..., 1.0)``).
        compression_ratio_threshold: None (no check) or the most compression ratio that passes.
        logprob_threshold: None (no check) or the least ``avg_logprob`` that passes.
        no_speech_threshold: None, or the no-speech probability above which a low
            ``avg_logprob`` is taken as silence (passes).
        best_of: None (1) or the samples per window above temperature 0 (whisper's ``best_of``,
            which its ``transcribe`` passes to every attempt and drops at 0).
    """

    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    best_of: int | None = None

    def __post_init__(self) -> None:
        temps = self.temperatures
        if not temps or any(isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf")
                            for t in temps):
            raise ValueError(f"temperatures must be a non-empty sequence of finite numbers >= 0; got {temps!r}")
        b = self.best_of
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise ValueError(f"best_of must be None or an int >= 1; got {b!r}")


@dataclass(frozen=True)
class FallbackResult:
    """One window's outcome.

    Attributes:
        result: the result kept (the last decoded).
        temperatures: the temperatures it was decoded at, in order (the last is the result's).
        no_speech_prob: the window's no-speech probability (nan when none was given).
    """

    result: WhisperResult
    temperatures: tuple[float, ...]
    no_speech_prob: float


def needs_fallback(result: WhisperResult, no_speech_prob: float, o: FallbackOptions) -> bool:
    """Whether ``result`` is decoded again at the next temperature (whisper's checks, above)."""
    low = o.logprob_threshold is not None and result.avg_logprob < o.logprob_threshold
    repetitive = o.compression_ratio_threshold is not None and result.compression_ratio > o.compression_ratio_threshold
    silent = o.no_speech_threshold is not None and no_speech_prob > o.no_speech_threshold and low
    return (repetitive or low) and not silent


def at_temperature(options: WhisperOptions, temperature: float, best_of: int | None = None) -> WhisperOptions:
    """The options of one attempt: ``options`` (those at temperature 0) at 0; above 0 without
    ``beam_size`` and ``patience`` and with ``best_of`` (whisper's ``decode_with_fallback``)."""
    if temperature > 0:
        return dataclasses.replace(options, temperature=temperature, beam_size=None, patience=None, best_of=best_of)
    return dataclasses.replace(options, temperature=0.0)


def transcribe_windows(step_fn: StepFn, make_state: Callable[[list[int]], Any], prompts: Sequence[Sequence[int]],
                       tokens: WhisperTokens, options: WhisperOptions | None = None,
                       fallback: FallbackOptions | None = None, *, max_rows: int,
                       no_speech_probs: Sequence[float] | None = None,
                       detokenize: Callable[[list[int]], str] | None = None, seeds: Sequence[int] | None = None,
                       n_audio_ctx: int = 1500, n_text_ctx: int = 448, refill: bool = True) -> list[FallbackResult]:
    """Decode N windows with temperature fallback, refilling the batch as windows finish.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``; the state holds
            the rows of windows that joined at different calls (see
            :func:`beamsearch.refill.decode_stream` on joining states).
        make_state: ``make_state(windows) -> state``, one row per window index given (its audio,
            its prompt but the last token), called once per group of windows joining.
        prompts: per window its prompt (:func:`~beamsearch.whisper.tokens.initial_tokens`).
        tokens: the special ids.
        options: the decoding options at temperature 0 (``beam_size``, ``patience``); above 0 the
            same without those and with ``fallback.best_of`` (None: the defaults).
        fallback: the temperatures and checks (None: whisper's defaults).
        max_rows: the most rows per model call (>= each window's rows: its beam or ``best_of``).
        no_speech_probs: per window its no-speech probability, or None (the silence check is off).
        detokenize: ids -> text; needed for the compression-ratio check.
        seeds: per window (>= 0), the seed of its samples (default: its position).
        n_audio_ctx, n_text_ctx: as for :func:`~beamsearch.whisper.decode.decode_windows`.
        refill: True: an attempt joins the search in flight (the step must take rows at
            different steps in one call: a decoder-only adapter, a model of your own); False:
            each temperature's attempts are decoded in rounds of fixed batches, each of one prompt
            length (Whisper's decoders, openai/whisper's and transformers', give every row of a
            call one position). The results are the same.

    Returns:
        Per window its :class:`FallbackResult`, in the order of ``prompts``.
    """
    n = len(prompts)
    options = WhisperOptions() if options is None else options
    fallback = FallbackOptions() if fallback is None else fallback
    _check(n, fallback, options, no_speech_probs, detokenize, seeds)
    nsp = [float("nan")] * n if no_speech_probs is None else [float(p) for p in no_speech_probs]
    run = _Run(tokens, options, fallback, make_state, detokenize, (n_audio_ctx, n_text_ctx),
               list(range(n)) if seeds is None else [int(s) for s in seeds], prompts, nsp)
    rows = max(at_temperature(options, t, fallback.best_of).group for t in fallback.temperatures)
    if max_rows < rows:
        raise ValueError(f"max_rows={max_rows} is smaller than the rows one window may need ({rows})")
    if refill:
        _refilled(run, step_fn, max_rows, rows)
    else:
        _in_rounds(run, step_fn, max_rows)
    return [FallbackResult(run.kept[i], tuple(run.tried[i]), nsp[i]) for i in range(n)]


def _refilled(run: _Run, step_fn: StepFn, max_rows: int, rows: int) -> None:
    """Every attempt an input of one flight: it joins the search in flight as rows free up."""
    flight = Flight(StreamStats(max_rows), rows, rows, None)
    for i in range(len(run.prompts)):
        flight.waiting.append(run.attempt(i, 0))
    while True:
        for group in run.by_attempt(_drained(flight.admit(iter(()), run.read))):
            flight.join(group, run.join)
        if not flight.cohorts:
            flight.end()
            return
        x, new_state = _drained(flight.call(step_fn))
        for decoded in flight.retire(x, new_state):
            if decoded.error is not None:
                raise decoded.error
            i, a = run.jobs.pop(decoded.index)
            if run.decided(i, a, decoded.hypotheses):
                flight.waiting.append(run.attempt(i, a + 1))


def _in_rounds(run: _Run, step_fn: StepFn, max_rows: int) -> None:
    """Round r decodes every window at its r-th temperature, in fixed batches of the most windows
    ``max_rows`` holds, each batch of one prompt length (for a decoder whose rows cannot be at
    different steps in one call: it gives every row of a call one position)."""
    windows, a = list(range(len(run.prompts))), 0
    while windows:
        per_batch = max(1, max_rows // at_temperature(run.options, run.fallback.temperatures[a],
                                                     run.fallback.best_of).group)
        by_length: dict[int, list[int]] = {}
        for w in windows:
            by_length.setdefault(len(run.prompts[w]), []).append(w)
        again = []
        for same in by_length.values():
            for start in range(0, len(same), per_batch):
                batch = same[start : start + per_batch]
                results = run_plan(step_fn, run.make_state(batch), run.plan(batch, a))
                again += [w for w, hyps in zip(batch, results, strict=True) if run.decided(w, a, hyps)]
        windows, a = sorted(again), a + 1


def _check(n: int, fallback: FallbackOptions, options: WhisperOptions, no_speech_probs: Sequence[float] | None,
           detokenize: Callable[[list[int]], str] | None, seeds: Sequence[int] | None) -> None:
    """The arguments of :func:`transcribe_windows` that the options do not check."""
    if no_speech_probs is not None and len(no_speech_probs) != n:
        raise ValueError(f"no_speech_probs must hold one probability per prompt ({n}); got {len(no_speech_probs)}")
    if seeds is not None and (len(seeds) != n or any(int(s) < 0 for s in seeds)):
        raise ValueError(f"seeds must hold one int >= 0 per prompt ({n}); got {list(seeds)!r:.80}")
    if fallback.compression_ratio_threshold is not None and detokenize is None:
        raise ValueError("compression_ratio_threshold needs detokenize (the ratio is the text's); pass detokenize= "
                         "or compression_ratio_threshold=None")
    for t in fallback.temperatures:
        at_temperature(options, t, fallback.best_of)  # options one temperature refuses (n_best over best_of) fail here


class _Run:
    """The attempts of one :func:`transcribe_windows` call: each attempt an input of the flight,
    its stream index a fresh job id mapped to (window, attempt)."""

    def __init__(self, tokens: WhisperTokens, options: WhisperOptions, fallback: FallbackOptions,
                 make_state: Callable[[list[int]], Any], detokenize: Callable[[list[int]], str] | None,
                 ctx: tuple[int, int], seeds: list[int], prompts: Sequence[Sequence[int]], nsp: list[float]) -> None:
        self.tokens, self.options, self.fallback, self.make_state = tokens, options, fallback, make_state
        self.detokenize, self.ctx, self.seeds, self.prompts, self.nsp = detokenize, ctx, seeds, prompts, nsp
        self.jobs: dict[int, tuple[int, int]] = {}  # job id -> (window, attempt), while in flight
        self.next_job = 0
        self.tried: list[list[float]] = [[] for _ in prompts]
        self.kept: dict[int, WhisperResult] = {}

    def decided(self, window: int, a: int, hyps: list[Hypothesis]) -> bool:
        """Record the window's result at its ``a``-th temperature; whether it is decoded again."""
        temperature = self.fallback.temperatures[a]
        result = window_result(hyps, at_temperature(self.options, temperature, self.fallback.best_of),
                               self.detokenize)
        self.tried[window].append(temperature)
        self.kept[window] = result
        return a + 1 < len(self.fallback.temperatures) and needs_fallback(result, self.nsp[window], self.fallback)

    def attempt(self, window: int, a: int) -> Input:
        """Window ``window`` at its ``a``-th temperature, as an input ready to join."""
        job, self.next_job = self.next_job, self.next_job + 1
        self.jobs[job] = (window, a)
        plan = self.plan([window], a)
        width = len(self.prompts[window]) + int(plan.opts.controls.max_steps[0])
        return Input(job, {"prompt": list(self.prompts[window])}, window, plan.opts.controls.vocab_checks, width)

    def plan(self, windows: list[int], a: int) -> Any:
        options = at_temperature(self.options, self.fallback.temperatures[a], self.fallback.best_of)
        return window_plan([self.prompts[w] for w in windows], self.tokens, options, *self.ctx,
                           [self.seeds[w] for w in windows], salt=a)

    def read(self, position: int, item: Any, vocab: int | None) -> Input | Decoded:
        raise AssertionError("every attempt is queued as an input: nothing is read")

    def by_attempt(self, joining: list[Input]) -> list[list[Input]]:
        """The inputs joining at one call, one group (one cohort, one plan) per temperature."""
        groups: dict[int, list[Input]] = {}
        for i in joining:
            groups.setdefault(self.jobs[i.index][1], []).append(i)
        return list(groups.values())

    def join(self, group: list[Input]) -> tuple[Cohort, Any]:
        windows = [self.jobs[i.index][0] for i in group]
        return Cohort(group, self.plan(windows, self.jobs[group[0].index][1])), self.make_state(windows)


def _drained(phase: Generator[Decoded, None, Any]) -> Any:
    """Run a flight phase to its return value; an error result it yields (a token id outside the
    model's vocabulary) is raised."""
    while True:
        try:
            decoded = next(phase)
        except StopIteration as stop:
            return stop.value
        raise ValueError(f"window attempt {decoded.index}: {decoded.error}")
