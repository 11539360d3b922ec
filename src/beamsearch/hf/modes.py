"""Which registered search mode a :func:`beamsearch.hf.generate` call runs, and the keywords it
gets: the registry (:mod:`beamsearch.modes.registry`) read for ``generate``'s settings.

The mode: ``mode=NAME`` names any registered one; without it, the settings choose, as
``model.generate``'s did: a mode's own option given as a keyword (``constraints=``, ``seed=``,
...), or the ``GenerationConfig`` setting that option's :class:`~beamsearch.core.config.OptionInfo`
names (``hf=``: ``num_beam_groups`` / ``diversity_penalty`` for diverse beam search,
``force_words_ids`` for constrained beam search) set away from ``generate``'s default, selects its
mode; otherwise ``num_beams=1`` is greedy decoding and more beams are beam search.

The keywords: the shared controls the mode takes (:meth:`~beamsearch.core.mode.Mode.takes`); a
shared control it does not take, with its setting away from ``generate``'s default, is an error
when the call set it, and is left out with a warning naming it when it came from the model's
generation config; then the mode's own options (a keyword of their name, else their
``GenerationConfig`` setting).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from beamsearch.core.config import DecodingConfig, options_of
from beamsearch.core.mode import Mode
from beamsearch.modes.constrained import AnyOf
from beamsearch.modes.registry import MODES
from beamsearch.modes.registry import mode as registered

__all__ = ["choose_mode", "config_keywords", "generate_rule", "mode_keywords", "once_per_solution", "own_options"]

# the GenerationConfig setting each shared control is read from (num_beams for beam_size, ...)
_SETTING = {name: c.hf for name, (_, c) in options_of(DecodingConfig).items() if c.hf}


def own_options(overrides: dict[str, Any]) -> dict[str, Any]:
    """Take out of ``overrides`` (in place) the keywords that are a registered mode's own
    options; they are not ``GenerationConfig`` settings, or mean the mode's option here."""
    names = {name for spec in MODES.values() for name, (_, c) in spec.own.items() if c.selects_mode or name != c.hf}
    return {name: overrides.pop(name) for name in list(overrides) if name in names}


def _asked(cfg: Any, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, list[str]]:
    """mode name -> the keywords and settings of the call that ask for it."""
    asked: dict[str, list[str]] = {}
    for spec in MODES.values():
        for name, (_, c) in spec.own.items():
            if name in given:
                asked.setdefault(spec.name, []).append(f"{name}=")
            elif c.hf and c.selects_mode and getattr(cfg, c.hf, None) != defaults.get(c.hf):
                asked.setdefault(spec.name, []).append(f"{c.hf}={getattr(cfg, c.hf)!r}")
    return asked


def choose_mode(mode: str | None, cfg: Any, defaults: Mapping[str, Any], given: Mapping[str, Any]) -> Mode:
    """The mode a call runs (see the module's docstring).

    Args:
        mode: ``generate``'s ``mode=``: a registered name, or None.
        cfg: the call's resolved ``GenerationConfig``.
        defaults: ``generate``'s default for each setting.
        given: the modes' own options passed as keywords (:func:`own_options`).

    Raises:
        ValueError: an unregistered name (the registered ones listed), or settings that ask for
            another mode than ``mode`` (or for two modes), each named.
    """
    asked = _asked(cfg, defaults, given)
    if mode is not None:
        spec = registered(mode)
        others = {m: s for m, s in asked.items() if m != spec.name}
        if others:
            m, settings = next(iter(others.items()))
            raise ValueError(f"mode={mode!r} does not take {', '.join(settings)} (options of mode {m!r})")
        return spec
    if len(asked) > 1:
        named = "; ".join(f"{', '.join(s)} ask for mode {m!r}" for m, s in asked.items())
        raise ValueError(f"these settings ask for different modes: {named}")
    if asked:
        return MODES[next(iter(asked))]
    return MODES["greedy" if cfg.num_beams == 1 else "beam"]


def generate_rule(spec: Mode, beam_size: int) -> Mode:
    """The mode that runs ``spec`` with ``beam_size`` beams: ``mode="transformers"`` is
    ``generate``'s own decoding, which with one beam (``num_beams=1``) is greedy decoding (its
    processors on the logits, the argmax, no length penalty), not a beam of one; ``spec``
    otherwise."""
    return MODES["greedy"] if spec.name == "transformers" and beam_size == 1 else spec


def _forced_words(value: Any, n_inputs: int) -> list[list[Any]]:
    """``force_words_ids`` (``generate``'s form, for every input: a list whose items are a word's
    ids, or a list of alternative words' ids) as the constrained mode's ``constraints`` (one
    list per input; an item of alternatives is an :class:`AnyOf`)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"force_words_ids must be a list of token-id lists; got {value!r:.80}")
    words = [AnyOf(*item) if isinstance(item, (list, tuple)) and item and all(
        isinstance(w, (list, tuple)) for w in item) else item for item in value]
    return [list(words) for _ in range(n_inputs)]


# a GenerationConfig setting read into a mode's option in a form of its own
_FROM_SETTING = {"force_words_ids": _forced_words}


def config_keywords(spec: Mode, settings: Mapping[str, Any], cfg: Any, defaults: Mapping[str, Any],
                    n_inputs: int = 1) -> tuple[dict[str, Any], dict[str, tuple[str, Any]]]:
    """What a generation config gives the mode ``spec``, as :func:`beamsearch.hf.generate` reads
    it (and ``beamsearch decode --model hf:DIR``, for the options not given).

    Args:
        spec: the mode.
        settings: the shared controls and sizes read from the config (``beam_size``, ``alpha``,
            ``max_steps``, ``logits_processors``, ..., and ``early_stop``).
        cfg: the resolved ``GenerationConfig``; defaults: ``generate``'s default of each setting.
        n_inputs: N, for the options given once for every input (``force_words_ids``).

    Returns:
        ``(keywords, dropped)``: the keywords (the settings the mode takes; the mode's own default
        of a shared control whose setting is at ``generate``'s default; each own option from its
        ``GenerationConfig`` setting, even at the default, once the mode is chosen), and the
        settings the mode does not take that are set away from ``generate``'s defaults, as
        ``setting -> (keyword, value)``.
    """
    out: dict[str, Any] = {}
    dropped: dict[str, tuple[str, Any]] = {}
    for name, value in settings.items():
        if spec.takes(name):
            out[name] = value
            continue
        setting = _SETTING.get(name)
        if setting is not None and getattr(cfg, setting) != defaults.get(setting):
            dropped[setting] = (name, getattr(cfg, setting))  # not generate's default: the caller says so
    for name, value in spec.defaults.items():  # the mode's default, unless the call's config set the setting
        setting = _SETTING.get(name)
        if setting is None or getattr(cfg, setting) == defaults.get(setting):
            out[name] = value
    for name, (_, c) in spec.own.items():
        if c.hf and getattr(cfg, c.hf, None) is not None:
            value = getattr(cfg, c.hf)
            out[name] = _FROM_SETTING[c.hf](value, n_inputs) if c.hf in _FROM_SETTING else value
    return out, dropped


def mode_keywords(spec: Mode, settings: Mapping[str, Any], cfg: Any, defaults: Mapping[str, Any],
                  given: Mapping[str, Any], explicit: set[str], n_inputs: int) -> dict[str, Any]:
    """The keywords ``spec.function`` gets: :func:`config_keywords`, then the mode's own options
    given as keywords.

    Args:
        spec: the mode (:func:`choose_mode`).
        settings: the shared controls and sizes read from the config (``beam_size``, ``alpha``,
            ``max_steps``, ``logits_processors``, ..., and ``early_stop``).
        cfg, defaults, given: as for :func:`choose_mode`.
        explicit: the settings this call set (its keywords and its ``generation_config``'s).
        n_inputs: N, for the options given once for every input.

    Raises:
        ValueError: a setting of the call that the mode does not take (named with the mode's
            reason), or an option the mode needs and nobody gave.
    """
    out, dropped = config_keywords(spec, settings, cfg, defaults, n_inputs)
    for setting, (name, value) in dropped.items():
        if setting in explicit:
            why = spec.refused.get(name, "it is not one of its options")
            raise ValueError(f"mode {spec.name!r} does not take {setting}={value!r}: {why}")
    if dropped:
        shown = {setting: value for setting, (_, value) in dropped.items()}
        warnings.warn(f"mode {spec.name!r} does not take the model's generation settings {shown}; they are "
                      "not used", stacklevel=4)
    out.update({name: given[name] for name in spec.own if name in given})
    needed = [p.name for p in inspect.signature(spec.function).parameters.values()
              if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in out]
    if needed:
        c = spec.own[needed[0]][1] if needed[0] in spec.own else None
        also = f" (or generate's {c.hf})" if c is not None and c.hf else ""
        raise ValueError(f"mode {spec.name!r} needs {needed[0]}={also}")
    return out


_SEGMENT_START_OR_END = ("forced_bos_token_id", "forced_eos_token_id", "begin_suppress_tokens")
"""Settings that act at a step counted from the start of the output: step search counts each
segment's steps from 1 (and its ``max_new_tokens`` is per segment), so they would act in every
segment instead of once per solution."""


def once_per_solution(spec: Mode, cfg: Any, explicit: set[str]) -> None:
    """For step search: refuse a setting of :data:`_SEGMENT_START_OR_END` the call gave
    (``explicit``), and unset (with a warning) one the model's generation config sets (BART's
    ``forced_eos_token_id``), in ``cfg``, the call's own copy."""
    if spec.name != "step":
        return
    why = ("step search counts each segment's steps from 1, so it would act in every segment, not once per "
           "solution")
    for setting in _SEGMENT_START_OR_END:
        value = getattr(cfg, setting, None)
        if value is None or value == []:
            continue
        if setting in explicit:
            raise ValueError(f"mode 'step' does not take {setting}={value!r}: {why}")
        warnings.warn(f"mode 'step' does not take the model's generation setting {setting}={value!r} ({why}); "
                      "it is not used", stacklevel=3)
        setattr(cfg, setting, None)
