"""The public searches: ``beam_search``, ``greedy_decode``, ``beam_search_each`` and
``beam_search_batch``.

Each validates its arguments, picks a strategy and controls, runs the one engine
(:func:`beamsearch.core.engine.run`) and builds :class:`Hypothesis` objects once, for the result.
The batched searches are split in two: a plan (:class:`Plan`: the validated arguments, the
strategy, how results are built; :func:`beam_plan` and each search mode's plan function) and a
runner (:func:`run_plan` for one batch, :func:`beamsearch.refill.decode_stream` for a stream).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from beamsearch.controls import Controls
from beamsearch.controls.shared import options
from beamsearch.core import validate as check
from beamsearch.core.config import SearchConfig
from beamsearch.core.engine import StepFn, run
from beamsearch.core.hypothesis import BatchResults, Hypothesis
from beamsearch.core.mode import Mode
from beamsearch.core.penalties import length_power
from beamsearch.core.plan import Plan, StepCallback, run_plan
from beamsearch.core.results import build
from beamsearch.core.trace import SearchTree, tracer
from beamsearch.processors import LogitsProcessor
from beamsearch.strategies.batch import BatchBeam
from beamsearch.strategies.narrowing import NarrowingBeam

__all__ = ["BEAM", "GREEDY", "beam_plan", "beam_search", "beam_search_batch", "beam_search_each", "greedy_decode",
           "greedy_plan", "greedy_search"]


def beam_search(
    step_fn: StepFn,
    init_state: Any,
    bos: int,
    eos: int,
    beam_size: int,
    max_len: int,
    length_penalty: float = 1.0,
    *,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
) -> list[Hypothesis]:
    """Beam search for one input (SPEC section 4).

    Each step ranks all ``k*V`` extensions of the ``k`` live rows together (ties to the lower
    flat index ``b*V + v``) and keeps the first ``beam_size - finished so far`` finite ones; a
    kept eos finishes and keeps its slot, so the beam narrows.

    Args:
        step_fn: ``step_fn(state, y_prev) -> (logits, new_state)``; ``y_prev`` is int64 ``[k]``
            (a torch tensor on the state's device when ``init_state`` holds torch tensors, numpy
            otherwise), ``logits`` is ``[k, V]``.
        init_state: the model state with exactly one row (axis 0 of every array leaf).
        bos: the token passed as ``y_prev`` to the first call, ``[0, V)``.
        eos: the token that ends a hypothesis, ``[0, V)``.
        beam_size: K >= 1, the most live rows.
        max_len: the most tokens generated (eos counted), >= 1.
        length_penalty: alpha >= 0; ``score = logprob / len(tokens) ** alpha``. This pinned
            signature's ``length_penalty`` is a strength: it is converted here to the ``"power"``
            kind with ``alpha`` = this value, as everywhere else in the library ``length_penalty``
            names the kind and ``alpha`` its strength (:func:`beam_search_batch`).
        callback: ``callback(record) -> None | inputs to stop``, called once per step with a
            :class:`~beamsearch.core.trace.StepRecord` (see ``docs/trace.md``).
        trace: a new :class:`~beamsearch.viz.Trace`, filled with the search tree.
        trace_width: the best pruned candidates recorded per row and step (>= 0).

    Returns:
        Every finished hypothesis and the rows live at ``max_len`` (unfinished), sorted by score,
        highest first (stable: ties keep production order, finished before unfinished).
    """
    return beam_search_each(step_fn, init_state, 1, bos, eos, beam_size, max_len, length_penalty,
                            callback=callback, trace=trace, trace_width=trace_width)[0]


def beam_search_each(
    step_fn: StepFn,
    init_state: Any,
    n_inputs: int,
    bos: int,
    eos: int | Sequence[int],
    beam_size: int,
    max_len: int,
    length_penalty: float = 1.0,
    *,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
) -> list[list[Hypothesis]]:
    """:func:`beam_search` for ``n_inputs`` inputs at once: one model call per step for the live
    rows of every input (input 0's rows first). Result i equals ``beam_search`` on input i alone.

    Args:
        init_state: one row per input (axis 0 of every array leaf).
        n_inputs: N >= 0; the first call passes N rows, each with ``y_prev = bos``.
        eos: the eos id, or a non-empty sequence of ids (any of them finishes a hypothesis).
        step_fn, bos, beam_size, max_len, length_penalty, callback, trace, trace_width: as for
            :func:`beam_search`.

    Returns:
        Per input, its hypotheses sorted by score as :func:`beam_search` returns them.
    """
    n = check.at_least("n_inputs", n_inputs, 0)
    bos = check.token("bos", bos)
    eos_ids = check.eos_ids("eos", eos)
    beam_size = check.at_least("beam_size", beam_size, 1)
    max_len = check.at_least("max_len", max_len, 1)
    alpha = check.penalty_strength("length_penalty", length_penalty, length_power, max_len)
    observer = tracer(callback, trace, trace_width, n, length_power, alpha, keep=beam_size + eos_ids.shape[0])
    if n == 0:
        results: list[list[Hypothesis]] = []
    else:
        controls = Controls(eos_ids, np.full(n, max_len),
                            vocab_checks=(("bos", bos), ("eos", check.ids_as_given(eos))))
        outcome = run(step_fn, init_state, np.full(n, bos), NarrowingBeam(beam_size), controls, observer=observer)
        results = build(outcome, n, length_power, alpha, n_best=None, finished_first=False)
    if observer is not None:
        observer.finish(results)
    return results


def greedy_decode(step_fn: StepFn, init_state: Any, bos: int, eos: int, max_len: int, *,
                  callback: StepCallback | None = None, trace: SearchTree | None = None,
                  trace_width: int = 3) -> Hypothesis:
    """Greedy decoding: the argmax of each step (ties to the lowest id) until eos or ``max_len``.

    It is :func:`beam_search` with one row and no length penalty, so ``score == logprob``.

    Args:
        step_fn, init_state, bos, eos, max_len, callback, trace, trace_width: as for
            :func:`beam_search` (a greedy trace is what ``beamsearch.viz`` overlays as the greedy path).

    Returns:
        The one hypothesis, finished iff it ended with eos.
    """
    return beam_search(step_fn, init_state, bos, eos, beam_size=1, max_len=max_len, length_penalty=0.0,
                       callback=callback, trace=trace, trace_width=trace_width)[0]


def beam_search_batch(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    *,
    eos_token_id: int | Sequence[int],
    max_steps: int | Sequence[int],
    beam_size: int,
    n_best: int = 1,
    alpha: float = 0.6,
    no_repeat_ngram_size: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    bos_token_id: int | None = None,
    pad_token_id: int | None = None,
    early_stop: bool = True,
    length_penalty: str = "gnmt",
    logits_processors: Sequence[LogitsProcessor] = (),
    return_token_logprobs: bool = False,
    min_new_tokens: int = 0,
    stop_sequences: Sequence[Sequence[int]] = (),
    prefix: Sequence[Sequence[int]] | None = None,
    callback: StepCallback | None = None,
    trace: SearchTree | None = None,
    trace_width: int = 3,
) -> BatchResults:
    """Batched beam search over many inputs at once (SPEC sections 6 and 10).

    One model call per step for the live rows of every input (input 0's rows, then input 1's,
    ...). Each row's logits are processed in this order: ``min_new_tokens``' eos mask,
    temperature, top-k (ties at the threshold kept), no-repeat n-gram over prompt + generated
    tokens, ``logits_processors`` in order; then log_softmax; then the forced ``prefix``. Per
    input, every finite eos (or stop-sequence) extension is finished and the ``beam_size`` best
    other extensions are the next live rows.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt: what the model needs before its first step.
        prompts: ``N`` lists of token ids; the first call gets each prompt's last token. An
            empty prompt means ``[bos_token_id]``.
        eos_token_id: the token, or a non-empty sequence of tokens, that finishes a hypothesis.
        max_steps: the most tokens generated, >= 1: one int, or one per input.
        beam_size: live rows per input, >= 1.
        n_best: results per input, ``1 <= n_best <= beam_size``.
        alpha: length-penalty strength >= 0 (finite, and ``lp(max_steps)`` must not overflow).
        no_repeat_ngram_size: n > 0 bans tokens completing an n-gram already in the row.
        temperature: > 0 and finite, divides the logits.
        top_k: keep logits >= the row's k-th largest; None keeps all.
        bos_token_id: stands in for an empty prompt.
        pad_token_id: fills :meth:`BatchResults.arrays`; never changes the search.
        early_stop: stop an input once no live row can reach a score above its n_best-th
            finished one (``s / lp(max_steps[i])`` bounds a live row of logprob ``s``): lossless.
        length_penalty: ``"gnmt"`` for ``((5 + L) / 6) ** alpha`` or ``"power"`` for
            ``L ** alpha``; L counts eos.
        logits_processors: extra ``processor(logits, ctx) -> logits`` applied after the
            built-in ones (see :mod:`beamsearch.processors`).
        return_token_logprobs: return :class:`TokenLogprobHypothesis` objects that also carry
            each token's processed log-probability.
        min_new_tokens: m >= 0: no eos and no stop sequence finishes a hypothesis at steps
            ``t <= m``, so every finished hypothesis has more than m tokens.
        stop_sequences: non-empty token-id sequences without eos ids; an extension whose
            generated tokens end with one finishes like eos (its tokens end with the sequence).
        prefix: None, or one token-id sequence per input forced as its first generated tokens
            and scored (each keeps its processed log-probability).
        callback, trace, trace_width: as for :func:`beam_search`; the record covers every input.

    Returns:
        A :class:`BatchResults` (a list): per input, its finished hypotheses sorted by score
        (stable), cut to n_best; when fewer than n_best finished, its live rows at the end fill up.
    """
    config = BEAM.configure(dict(
        beam_size=beam_size, n_best=n_best, early_stop=early_stop, pad_token_id=pad_token_id,
        return_token_logprobs=return_token_logprobs, eos_token_id=eos_token_id, max_steps=max_steps, alpha=alpha,
        no_repeat_ngram_size=no_repeat_ngram_size, temperature=temperature, top_k=top_k, bos_token_id=bos_token_id,
        length_penalty=length_penalty, logits_processors=logits_processors, min_new_tokens=min_new_tokens,
        stop_sequences=stop_sequences, prefix=prefix))
    return run_plan(step_fn, init_state, beam_plan(prompts, config), callback=callback, trace=trace,
                    trace_width=trace_width)


def beam_plan(prompts: Sequence[Sequence[int]], config: SearchConfig) -> Plan:
    """The :class:`Plan` of :func:`beam_search_batch` over ``prompts`` with its configuration
    (``BEAM.configure`` of its keywords but the model, the state and the callback/trace ones):
    the prompts and per-input values are checked, the configuration is not again."""
    c = config.controls
    opts = options(prompts, c, checked=config.checked)
    bound = opts.penalty(opts.controls.max_steps, opts.alpha)  # --> [N], lp(max_steps[i])
    strategy = BatchBeam(c.beam_size, c.n_best, opts.penalty, opts.alpha, bound, c.early_stop)
    return Plan(opts, strategy, c.beam_size, n_best=c.n_best, pad_token_id=c.pad_token_id,
                token_logprobs=c.return_token_logprobs)


def greedy_plan(prompts: Sequence[Sequence[int]], config: SearchConfig) -> Plan:
    """The :class:`Plan` of greedy decoding over a batch: one row per input, which takes its best
    extension at every step until it ends (SPEC section 4 with one row), the rule ``generate``
    runs for ``num_beams=1`` (:func:`beamsearch.hf.generate`, ``beamsearch decode --mode
    greedy``). Not a beam of one: :func:`beam_search_batch` with ``beam_size=1`` also keeps a
    finished candidate that is not its row's best extension and may return it. ``config`` is
    ``GREEDY.configure`` of the shared controls of :func:`beam_search_batch`; ``alpha`` and
    ``length_penalty`` only scale each result's reported ``score`` (``logprob / lp(len)``;
    ``alpha=0``: the logprob)."""
    c = config.controls
    opts = options(prompts, c, checked=config.checked)
    return Plan(opts, NarrowingBeam(1), 1, n_best=1, finished_first=False, pad_token_id=c.pad_token_id,
                token_logprobs=c.return_token_logprobs)


def greedy_search(step_fn: StepFn, init_state: Any, prompts: Sequence[Sequence[int]], *,
                  pad_token_id: int | None = None, return_token_logprobs: bool = False,
                  callback: StepCallback | None = None, trace: SearchTree | None = None, trace_width: int = 3,
                  **controls: Any) -> BatchResults:
    """Greedy decoding of a batch (:func:`greedy_plan`'s rule), with the shared controls of
    :func:`beam_search_batch` (``eos_token_id`` and ``max_steps`` required).

    Args:
        step_fn, init_state, prompts, pad_token_id, return_token_logprobs, callback, trace,
            trace_width, **controls: as for :func:`beam_search_batch` (``beam_size``, ``n_best``
            and ``early_stop`` are refused).

    Returns:
        A :class:`BatchResults`: one hypothesis per input.
    """
    config = GREEDY.configure(dict(controls, pad_token_id=pad_token_id, return_token_logprobs=return_token_logprobs))
    plan = greedy_plan(prompts, config)
    return run_plan(step_fn, init_state, plan, callback=callback, trace=trace, trace_width=trace_width)


_GREEDY_REFUSED = {"beam_size": "greedy decoding has one row per input",
                   "n_best": "greedy decoding has one output per input",
                   "early_stop": "greedy decoding ends each row at its eos"}

BEAM = Mode("beam", "beam search (beam_search_batch)", beam_search_batch, plan=beam_plan,
            rows=lambda keywords: keywords["beam_size"],
            sizes=("beam_size", "n_best", "early_stop", "return_token_logprobs", "pad_token_id"),
            check=lambda kw: dict(zip(("beam_size", "n_best"), check.search_sizes(kw["beam_size"], kw["n_best"]),
                                      strict=True), early_stop=check.flag("early_stop", kw["early_stop"])))
"""Beam search, SPEC section 6 (:func:`beam_search_batch`)."""

GREEDY = Mode("greedy", "greedy decoding: one row per input, its best extension at every step (what generate "
                        "does for num_beams=1)", greedy_search, plan=greedy_plan, rows=lambda keywords: 1,
              sizes=("return_token_logprobs", "pad_token_id"), refused=_GREEDY_REFUSED, defaults={"alpha": 0.0})
"""Greedy decoding over a batch (:func:`greedy_plan`); its score is the logprob unless an ``alpha`` is given."""
