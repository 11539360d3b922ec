"""``score_sequences``: teacher-forced scoring under the search's own rules (SPEC section 10)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from beamsearch.controls.shared import options
from beamsearch.controls.stop_sequences import StopSequences
from beamsearch.core import validate as check
from beamsearch.core.config import DecodingConfig
from beamsearch.core.engine import StepFn, run
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.results import build
from beamsearch.processors import LogitsProcessor
from beamsearch.strategies.forced import Forced

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
    eos = check.eos_ids("eos_token_id", eos_token_id)
    rows = check.targets(targets, len(prompts) if hasattr(prompts, "__len__") else None, eos)
    lengths = np.array([len(t) for t in rows])
    config = DecodingConfig(eos_token_id=eos_token_id, alpha=alpha, length_penalty=length_penalty,
                            no_repeat_ngram_size=no_repeat_ngram_size, temperature=temperature, top_k=top_k,
                            bos_token_id=bos_token_id, min_new_tokens=min_new_tokens, stop_sequences=stop_sequences,
                            logits_processors=logits_processors)
    opts = options(prompts, config, limits=lengths)
    if not rows:
        return []
    controls, stops = opts.controls, cast(StopSequences | None, opts.controls.stops)  # options() makes them
    ends = set(eos.tolist())
    finished = np.array([t[-1] in ends or (stops is not None and len(t) > stops.min_new_tokens and
                                           any(tuple(t[len(t) - len(s):]) == s for s in stops.sequences))
                         for t in rows])
    forced = Forced(np.concatenate([np.array(t) for t in rows]), np.cumsum(lengths) - lengths, lengths, finished)
    controls = dataclasses.replace(controls, stops=None, vocab_checks=controls.vocab_checks + (("targets", rows),))
    outcome = run(step_fn, init_state, np.array([p[-1] for p in opts.prompts]), forced, controls)
    return [hyps[0] for hyps in build(outcome, len(rows), opts.penalty, opts.alpha, n_best=None,
                                      finished_first=True)]
