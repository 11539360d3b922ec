"""The public searches: ``beam_search``, ``greedy_decode`` and ``beam_search_batch``.

Each validates its arguments, picks a selection rule and options, runs the one engine
(:func:`beamsearch._engine.run`) and builds :class:`Hypothesis` objects once, for the result.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from beamsearch import _validate as check
from beamsearch._engine import Outcome, Rows, StepFn, run
from beamsearch._hypothesis import Hypothesis
from beamsearch._penalties import LENGTH_PENALTIES, LengthPenalty, length_power
from beamsearch._results import BatchResults, TokenLogprobHypothesis
from beamsearch._rules import BatchRule, SingleRule
from beamsearch.processors import LogitsProcessor, NoRepeatNGram, Temperature, TopK

__all__ = ["beam_search", "beam_search_batch", "beam_search_each", "greedy_decode"]


def beam_search(
    step_fn: StepFn,
    init_state: Any,
    bos: int,
    eos: int,
    beam_size: int,
    max_len: int,
    length_penalty: float = 1.0,
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
        length_penalty: alpha >= 0; ``score = logprob / len(tokens) ** alpha``.

    Returns:
        Every finished hypothesis and the rows live at ``max_len`` (unfinished), sorted by score,
        highest first (stable: ties keep production order, finished before unfinished).
    """
    return beam_search_each(step_fn, init_state, 1, bos, eos, beam_size, max_len, length_penalty)[0]


def beam_search_each(
    step_fn: StepFn,
    init_state: Any,
    n_inputs: int,
    bos: int,
    eos: int,
    beam_size: int,
    max_len: int,
    length_penalty: float = 1.0,
) -> list[list[Hypothesis]]:
    """:func:`beam_search` for ``n_inputs`` inputs at once: one model call per step for the live
    rows of every input (input 0's rows first). Result i equals ``beam_search`` on input i alone.

    Args:
        init_state: one row per input (axis 0 of every array leaf).
        n_inputs: N >= 0; the first call passes N rows, each with ``y_prev = bos``.
        step_fn, bos, eos, beam_size, max_len, length_penalty: as for :func:`beam_search`.

    Returns:
        Per input, its hypotheses sorted by score as :func:`beam_search` returns them.
    """
    n = check.at_least("n_inputs", n_inputs, 0)
    bos = check.token("bos", bos)
    eos = check.token("eos", eos)
    beam_size = check.at_least("beam_size", beam_size, 1)
    max_len = check.at_least("max_len", max_len, 1)
    alpha = check.real("length_penalty", length_penalty)
    if n == 0:
        return []
    rule = SingleRule(beam_size, eos, n_inputs=n)
    outcome = run(step_fn, init_state, np.full(n, bos), rule, max_len, token_ids={"bos": bos, "eos": eos})
    fin = _Scored(outcome.finished, 0, True, length_power, alpha)
    live = _Scored(outcome.live, 0, False, length_power, alpha)
    results = []
    for i in range(n):  # finished then live, one stable sort: ties keep production order
        mine_f, mine_l = np.flatnonzero(fin.rows.input == i), np.flatnonzero(live.rows.input == i)
        scores = np.concatenate([fin.scores[mine_f], live.scores[mine_l]])
        order = np.argsort(-scores, kind="stable")
        results.append([fin.hypothesis(mine_f[j]) if j < len(mine_f) else live.hypothesis(mine_l[j - len(mine_f)])
                        for j in order.tolist()])
    return results


def greedy_decode(step_fn: StepFn, init_state: Any, bos: int, eos: int, max_len: int) -> Hypothesis:
    """Greedy decoding: the argmax of each step (ties to the lowest id) until eos or ``max_len``.

    It is :func:`beam_search` with one row and no length penalty, so ``score == logprob``.

    Args:
        step_fn, init_state, bos, eos, max_len: as for :func:`beam_search`.

    Returns:
        The one hypothesis, finished iff it ended with eos.
    """
    return beam_search(step_fn, init_state, bos, eos, beam_size=1, max_len=max_len,
                       length_penalty=0.0)[0]


def beam_search_batch(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    *,
    eos_token_id: int,
    max_steps: int,
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
) -> BatchResults:
    """Batched beam search over many inputs at once (SPEC section 6).

    One model call per step for the live rows of every input (input 0's rows, then input 1's,
    ...). Logits are processed per row: temperature, top-k (ties at the threshold kept),
    no-repeat n-gram over prompt + generated tokens, then ``logits_processors`` in order, then
    log_softmax. Per input, every finite eos extension is finished and the ``beam_size`` best
    non-eos extensions are the next live rows.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``.
        init_state: one row per prompt: what the model needs before its first step.
        prompts: ``N`` lists of token ids; the first call gets each prompt's last token. An
            empty prompt means ``[bos_token_id]``.
        eos_token_id: the token that finishes a hypothesis.
        max_steps: the most tokens generated per input, >= 1.
        beam_size: live rows per input, >= 1.
        n_best: results per input, ``1 <= n_best <= beam_size``.
        alpha: length-penalty strength >= 0.
        no_repeat_ngram_size: n > 0 bans tokens completing an n-gram already in the row.
        temperature: > 0, divides the logits.
        top_k: keep logits >= the row's k-th largest; None keeps all.
        bos_token_id: stands in for an empty prompt.
        pad_token_id: fills :meth:`BatchResults.arrays`; never changes the search.
        early_stop: stop an input once no live row can reach a score above its n_best-th
            finished one (``s / lp(max_steps)`` bounds a live row of logprob ``s``): lossless.
        length_penalty: ``"gnmt"`` for ``((5 + L) / 6) ** alpha`` or ``"power"`` for
            ``L ** alpha``; L counts eos.
        logits_processors: extra ``processor(logits, ctx) -> logits`` applied after the
            built-in ones (see :mod:`beamsearch.processors`).
        return_token_logprobs: return :class:`TokenLogprobHypothesis` objects that also carry
            each token's processed log-probability.

    Returns:
        A :class:`BatchResults` (a list): per input, its finished hypotheses sorted by score
        (stable), cut to n_best; when fewer than n_best finished, its live rows at the end fill up.
    """
    eos = check.token("eos_token_id", eos_token_id)
    max_steps = check.at_least("max_steps", max_steps, 1)
    beam_size = check.at_least("beam_size", beam_size, 1)
    n_best = check.at_least("n_best", n_best, 1)
    if n_best > beam_size:
        raise ValueError(f"n_best must be <= beam_size={beam_size}; got {n_best}")
    alpha = check.real("alpha", alpha)
    ngram = check.at_least("no_repeat_ngram_size", no_repeat_ngram_size, 0)
    temperature = check.real("temperature", temperature, positive=True)
    top_k = None if top_k is None else check.at_least("top_k", top_k, 1)
    bos = None if bos_token_id is None else check.token("bos_token_id", bos_token_id)
    pad = None if pad_token_id is None else check.integer("pad_token_id", pad_token_id)
    if length_penalty not in LENGTH_PENALTIES:
        raise ValueError(f"length_penalty must be one of {sorted(LENGTH_PENALTIES)}; got {length_penalty!r}")
    penalty = LENGTH_PENALTIES[length_penalty]
    if not isinstance(early_stop, (bool, np.bool_)):
        raise TypeError(f"early_stop must be a bool; got {early_stop!r}")
    for i, processor in enumerate(logits_processors):
        if not callable(processor):
            raise TypeError(f"logits_processors[{i}] must be callable; got {processor!r}")
    ids = check.prompts(prompts, bos)
    results = BatchResults(pad_token_id=pad)
    if not ids:
        return results
    processors: list[LogitsProcessor] = []
    if temperature != 1.0:
        processors.append(Temperature(temperature))
    if top_k is not None:
        processors.append(TopK(top_k))
    if ngram > 0:
        processors.append(NoRepeatNGram(ngram))
    processors.extend(logits_processors)
    rule = BatchRule(beam_size, eos, len(ids), n_best=n_best, penalty=penalty, alpha=alpha,
                     max_steps=max_steps, early_stop=bool(early_stop))
    token_ids = {"eos_token_id": eos} | ({} if bos is None else {"bos_token_id": bos})
    outcome = run(step_fn, init_state, np.array([p[-1] for p in ids]), rule, max_steps,
                  prompts=ids, processors=processors, token_ids=token_ids,
                  token_logprobs=return_token_logprobs)
    results.extend(_per_input(outcome, len(ids), n_best, penalty, alpha))
    return results


def _per_input(outcome: Outcome, n: int, n_best: int, penalty: LengthPenalty,
               alpha: float) -> list[list[Hypothesis]]:
    """Each input's finished hypotheses by score, cut to n_best, filled from its live rows."""
    fin = _Scored(outcome.finished, outcome.prompt_width, True, penalty, alpha)
    live = _Scored(outcome.live, outcome.prompt_width, False, penalty, alpha)
    out = []
    for i in range(n):
        best = fin.best(fin.rows.input == i, n_best)
        if len(best) < n_best:
            best += live.best(live.rows.input == i, n_best - len(best))
        out.append(best)
    return out


class _Scored:
    """Rows of one kind (finished or live) with their lengths and scores; Hypothesis objects
    are built only for the rows a result returns."""

    def __init__(self, rows: Rows, prompt_width: int, finished: bool, penalty: LengthPenalty,
                 alpha: float) -> None:
        self.rows = rows
        self.finished = finished
        self.tokens = rows.hist[:, prompt_width:]  # --> [j, t], right-padded with -1
        self.lengths = (self.tokens >= 0).sum(axis=1)
        self.scores = rows.logprob / penalty(self.lengths, alpha)  # --> [j]

    def best(self, mask: np.ndarray, count: int) -> list[Hypothesis]:
        """The ``count`` best rows of ``mask`` by score, highest first, ties in production order."""
        idx = np.flatnonzero(mask)
        return [self.hypothesis(i) for i in idx[np.argsort(-self.scores[idx], kind="stable")][:count]]

    def hypothesis(self, i: int) -> Hypothesis:
        n = int(self.lengths[i])
        tokens, logprob, score = self.tokens[i, :n].tolist(), float(self.rows.logprob[i]), float(self.scores[i])
        if self.rows.token_logprobs is None:
            return Hypothesis(tokens, logprob, score, self.finished)
        per_token = self.rows.token_logprobs[i, :n].tolist()
        return TokenLogprobHypothesis(tokens, logprob, score, self.finished, per_token)
