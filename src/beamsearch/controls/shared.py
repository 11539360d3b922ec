"""The shared controls of every search mode, validated once and assembled in the documented
order into the engine's :class:`~beamsearch.core.protocols.Controls` (:func:`options`,
:func:`mode_options`): the built-in processors (min_new_tokens' eos mask, temperature, top-k,
n-gram blocking), the caller's, the forced prefix, the stop sequences, and the length penalty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.controls.min_new_tokens import MinNewTokens
from beamsearch.controls.prefix import ForcedPrefix
from beamsearch.controls.stop_sequences import StopSequences
from beamsearch.core import validate as check
from beamsearch.core.config import REQUIRED_CONTROLS, SHARED_CONTROLS, DecodingConfig
from beamsearch.core.penalties import LengthPenalty, PenaltyFn
from beamsearch.core.plan import checked_controls
from beamsearch.core.protocols import Controls
from beamsearch.processors import NoRepeatNGram, Temperature, TopK

__all__ = ["Options", "mode_options", "options"]


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


def options(prompts: Any, config: DecodingConfig, limits: np.ndarray | None = None) -> Options:
    """Validate the rules shared by the search and ``score_sequences`` (SPEC sections 7 and 10,
    before any model call) and assemble the controls in the documented order.

    Args:
        prompts: as given to the search.
        config: the controls (its :data:`SHARED_CONTROLS` fields are read).
        limits: None (the search: ``config.max_steps``), or (``score_sequences``) the targets'
            lengths, int64 ``[N]``.
    """
    c = config
    k = checked_controls(c)
    eos, bos, m, stops, user = k.eos, k.bos, k.min_new_tokens, k.stops, k.user
    given = check.prompts(prompts)
    ids = check.with_bos(given, bos)
    steps = limits if limits is not None else check.max_steps(c.max_steps, len(ids))
    alpha = check.penalty_strength("alpha", c.alpha, k.penalty, int(steps.max(initial=1)))
    forced = check.prefix(c.prefix, len(ids), eos, steps)
    processors: list[Any] = [MinNewTokens(eos, m)] if m > 0 else []
    if k.temperature != 1.0:
        processors.append(Temperature(k.temperature))
    if k.top_k is not None:
        processors.append(TopK(k.top_k))
    if k.no_repeat_ngram_size > 0:
        processors.append(NoRepeatNGram(k.no_repeat_ngram_size))
    processors.extend(user)
    checks: list[tuple[str, Any]] = [("eos_token_id", check.ids_as_given(c.eos_token_id))]
    if bos is not None:
        checks.append(("bos_token_id", bos))
    checks += [("prompts", given), ("stop_sequences", stops)]  # the prompts as given: an empty one holds no id
    if forced is not None:
        checks.append(("prefix", forced))
    checks += [pair for processor in user for pair in processor.vocab_checks]
    masks = () if forced is None or not any(forced) else (ForcedPrefix.of(forced),)
    controls = Controls(eos, steps, tuple(processors), masks, StopSequences(tuple(stops), m) if stops else None,
                        ids, tuple(checks))
    return Options(ids, controls, LengthPenalty(c.length_penalty, alpha))
