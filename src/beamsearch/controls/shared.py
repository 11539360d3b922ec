"""The shared controls of every search mode, validated once and assembled in the documented
order into the engine's :class:`~beamsearch.core.protocols.Controls` (:func:`options`,
:func:`mode_options`): the built-in processors (min_new_tokens' eos mask, temperature, top-k,
n-gram blocking), the caller's, the forced prefix, the stop sequences, and the length penalty.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.controls.min_new_tokens import MinNewTokens
from beamsearch.controls.prefix import ForcedPrefix
from beamsearch.controls.stop_sequences import StopSequences
from beamsearch.core import validate as check
from beamsearch.core.config import REQUIRED_CONTROLS, SHARED_CONTROLS, DecodingConfig, SearchConfig
from beamsearch.core.mode import Mode
from beamsearch.core.penalties import LengthPenalty, PenaltyFn
from beamsearch.core.plan import CheckedControls, checked_controls
from beamsearch.core.protocols import Controls
from beamsearch.processors import NoRepeatNGram, Temperature, TopK

__all__ = ["Inputs", "Options", "check_batch", "checked_inputs", "mode_options", "options"]


def mode_options(mode: str, prompts: Sequence[Sequence[int]], controls: dict[str, Any],
                 refused: dict[str, str] | None = None) -> Options:
    """The validated shared controls of a search mode's ``**controls`` (the fields of
    :class:`~beamsearch.core.config.DecodingConfig` in :data:`SHARED_CONTROLS`, by the names and
    with the defaults of :func:`beam_search_batch`), checked before any model call. Their names
    are checked first: a keyword in ``refused`` (name -> why the mode does not take it) or not a
    shared control at all is a TypeError naming ``mode`` (the public function) and the keyword,
    as is a missing ``eos_token_id`` or ``max_steps``."""
    check.keywords(mode, controls, SHARED_CONTROLS, REQUIRED_CONTROLS, refused or {})
    return options(prompts, DecodingConfig(**controls))


@dataclass(frozen=True, eq=False)
class Options:
    """The validated arguments of a batched search (or of ``score_sequences``), never changed
    after they are made.

    Attributes:
        prompts: the prompts the search starts from (an empty one is ``[bos]``).
        controls: the engine's :class:`~beamsearch.controls.Controls`.
        scoring: the length penalty as one value (a
            :class:`~beamsearch.core.penalties.LengthPenalty`: its kind and strength); ``penalty``
            (its function) and ``alpha`` (its strength) are its parts, as the scoring functions take
            them. (``length_penalty``, in the library, names only the kind.)
    """

    prompts: list[list[int]]
    controls: Controls
    scoring: LengthPenalty

    @property
    def penalty(self) -> PenaltyFn:
        return self.scoring.function

    @property
    def alpha(self) -> float:
        return self.scoring.alpha


@dataclass(frozen=True, eq=False)
class Inputs:
    """A batch's prompts and the values each input gives for itself, validated against a
    configuration's shared controls (:func:`checked_inputs`): what a batch checks beside its
    configuration, and all that one input of a stream is checked with before it joins (no plan
    is made of it alone).

    Attributes:
        given: the prompts as given (an empty one holds no id).
        prompts: the prompts the search starts from (an empty one is ``[bos]``).
        max_steps: int64 ``[N]``, each input's limit.
        alpha: the length penalty's strength, checked at the longest limit.
        prefix: None, or each input's forced tokens.
        vocab_checks: ``(name, ids)`` pairs of every token id given, for the ``[0, V)`` check once
            V is known (:func:`beamsearch.core.model_checks.token_ids_below`).
        eos: int64 ``[E]``, the eos ids (the configuration's, checked).
    """

    given: list[list[int]]
    prompts: list[list[int]]
    max_steps: np.ndarray
    alpha: float
    prefix: list[list[int]] | None
    vocab_checks: tuple[tuple[str, Any], ...]
    eos: np.ndarray


def checked_inputs(prompts: Any, config: DecodingConfig, k: CheckedControls,
                   limits: np.ndarray | None = None) -> Inputs:
    """Validate the prompts, ``max_steps``, the length penalty's strength at the longest of them
    and the ``prefix`` of ``config`` (SPEC sections 7 and 10, before any model call), each error
    naming its keyword; ``k`` is ``config``'s prompt-free controls, already checked
    (:func:`~beamsearch.core.plan.checked_controls`); ``limits`` as for :func:`options`."""
    given = check.prompts(prompts)
    ids = check.with_bos(given, k.bos)
    steps = limits if limits is not None else check.max_steps(config.max_steps, len(ids))
    alpha = check.penalty_strength("alpha", config.alpha, k.penalty, int(steps.max(initial=1)))
    forced = check.prefix(config.prefix, len(ids), k.eos, steps)
    checks: list[tuple[str, Any]] = [("eos_token_id", check.ids_as_given(config.eos_token_id))]
    if k.bos is not None:
        checks.append(("bos_token_id", k.bos))
    checks += [("prompts", given), ("stop_sequences", k.stops)]  # the prompts as given: an empty one holds no id
    if forced is not None:
        checks.append(("prefix", forced))
    checks += [pair for processor in k.user for pair in processor.vocab_checks]
    return Inputs(given, ids, steps, alpha, forced, tuple(checks), k.eos)


def options(prompts: Any, config: DecodingConfig, limits: np.ndarray | None = None,
            checked: CheckedControls | None = None) -> Options:
    """Validate the rules shared by the search and ``score_sequences`` (SPEC sections 7 and 10,
    before any model call) and assemble the controls in the documented order.

    Args:
        prompts: as given to the search.
        config: the controls (its :data:`SHARED_CONTROLS` fields are read).
        limits: None (the search: ``config.max_steps``), or (``score_sequences``) the targets'
            lengths, int64 ``[N]``.
        checked: ``config``'s prompt-free controls where they were checked already (a
            configuration's :attr:`~beamsearch.core.config.SearchConfig.checked`); None: checked here.
    """
    k = checked_controls(config) if checked is None else checked
    given = checked_inputs(prompts, config, k, limits)
    ids, steps, forced, m = given.prompts, given.max_steps, given.prefix, k.min_new_tokens
    processors: list[Any] = [MinNewTokens(k.eos, m)] if m > 0 else []
    if k.temperature != 1.0:
        processors.append(Temperature(k.temperature))
    if k.top_k is not None:
        processors.append(TopK(k.top_k))
    if k.no_repeat_ngram_size > 0:
        processors.append(NoRepeatNGram(k.no_repeat_ngram_size))
    processors.extend(k.user)
    masks = () if forced is None or not any(forced) else (ForcedPrefix.of(forced),)
    controls = Controls(k.eos, steps, tuple(processors), masks, StopSequences(tuple(k.stops), m) if k.stops else None,
                        ids, given.vocab_checks)
    return Options(ids, controls, LengthPenalty(config.length_penalty, given.alpha))


def check_batch(spec: Mode, keywords: Mapping[str, Any], prompts: Any) -> SearchConfig:
    """Every check the plan of mode ``spec`` makes over ``prompts`` with ``keywords``, without
    making it: the configuration (:meth:`~beamsearch.core.mode.Mode.configure`, returned), the
    prompts and per-input values against it (:func:`checked_inputs`) and the mode's own per-input
    options (its ``check_input``). For an entry that checks before its model runs
    (:func:`beamsearch.hf.generate`, before the prefill) and makes its plan after."""
    config = spec.configure(keywords)
    inputs = checked_inputs(prompts, config.controls, config.checked)
    if spec.check_input is not None:
        spec.check_input(config, inputs)
    return config
