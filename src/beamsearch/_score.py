"""``score_sequences``: teacher-forced scoring under the search's own rules (SPEC section 10)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from beamsearch import _validate as check
from beamsearch._engine import StepFn, run
from beamsearch._hypothesis import Hypothesis
from beamsearch._results import build
from beamsearch._search import _batch_options
from beamsearch._strategies.forced import Forced
from beamsearch.processors import LogitsProcessor

__all__ = ["score_sequences"]


def score_sequences(
    step_fn: StepFn,
    init_state: Any,
    prompts: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    *,
    eos_token_id: int | Sequence[int],
    alpha: float = 0.6,
    length_penalty: str = "gnmt",
    no_repeat_ngram_size: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    bos_token_id: int | None = None,
    min_new_tokens: int = 0,
    stop_sequences: Sequence[Sequence[int]] = (),
    logits_processors: Sequence[LogitsProcessor] = (),
) -> list[Hypothesis]:
    """Score given outputs under the same rules as :func:`beam_search_batch` (teacher forcing).

    One model call per step for every input still being scored; step t feeds each row its
    target's token t-1 (the prompt's last token at t = 1) and adds the processed log-probability
    of target token t. A hypothesis that ``beam_search_batch`` returns, scored here with the same
    arguments and its tokens as the target, gets the same logprob and score.

    Args:
        step_fn, init_state, prompts, eos_token_id, alpha, length_penalty, no_repeat_ngram_size,
            temperature, top_k, bos_token_id, min_new_tokens, stop_sequences, logits_processors:
            as for :func:`beam_search_batch`.
        targets: ``N`` non-empty token-id sequences; an eos id may only be a target's last token.

    Returns:
        Per input, the :class:`Hypothesis` of ``targets[i]``: its tokens; ``logprob``, the sum of
        its processed log-probabilities (-inf when processing masked a token: not an error);
        ``score = logprob / lp(len(targets[i]))``; ``finished`` iff the target ends with an eos id,
        or with a stop sequence completed after step ``min_new_tokens``.
    """
    if isinstance(targets, (str, bytes)) or not hasattr(targets, "__len__"):
        raise TypeError(f"targets must be one token-id sequence per prompt; got {targets!r:.80}")
    rows = [check.token_list(f"targets[{i}]", t) for i, t in enumerate(targets)]
    if hasattr(prompts, "__len__") and len(rows) != len(prompts):
        raise ValueError(f"targets must have one sequence per prompt ({len(prompts)}); got {len(rows)}")
    lengths = np.array([len(t) for t in rows], dtype=np.int64)
    opts = _batch_options(prompts, eos_token_id, lengths if len(rows) else np.ones(1, np.int64), 1, 1, alpha,
                          no_repeat_ngram_size, temperature, top_k, bos_token_id, None, True, length_penalty,
                          logits_processors, min_new_tokens, stop_sequences, None, search=False)
    if not opts.prompts:
        return []
    eos = set(opts.controls.eos.tolist())
    for i, t in enumerate(rows):
        inner = [j for j, v in enumerate(t[:-1]) if v in eos]
        if inner:
            raise ValueError(f"targets[{i}] holds eos id {t[inner[0]]} at position {inner[0]}; "
                             "an eos id may only be a target's last token")
    padded = np.full((len(rows), int(lengths.max())), -1, np.int64)
    for i, t in enumerate(rows):
        padded[i, : len(t)] = t
    controls = opts.controls
    stops = controls.stops.sequences if controls.stops is not None else ()
    m = check.at_least("min_new_tokens", min_new_tokens, 0)
    finished = np.array([t[-1] in eos or (len(t) > m and any(tuple(t[len(t) - len(s):]) == s for s in stops))
                         for t in rows])
    controls = type(controls)(controls.eos, lengths, controls.processors, controls.masks, None, controls.prompts,
                              controls.vocab_checks + (("targets", rows),))
    outcome = run(step_fn, init_state, np.array([p[-1] for p in opts.prompts], np.int64),
                  Forced(padded, lengths, finished), controls)
    return [hyps[0] for hyps in build(outcome, len(rows), opts.penalty, opts.alpha, n_best=None,
                                      finished_first=True)]
