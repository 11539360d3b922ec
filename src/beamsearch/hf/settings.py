"""The one mapping from a ``GenerationConfig`` to the search's settings that are the same for
every input (:func:`search_settings`, :data:`SEARCH_SETTINGS`), the settings it does not map
(:func:`other_settings`), a saved model's generation config (:func:`saved_generation_config`), and
``generate``'s defaults: what :func:`beamsearch.hf.generate` builds on and ``beamsearch decode
--model hf:DIR`` reads.
"""

from __future__ import annotations

import copy
from typing import Any

from transformers import GenerationConfig

from beamsearch.core import validate as check
from beamsearch.core.config import DecodingConfig, options_of

__all__ = ["SEARCH_SETTINGS", "generate_defaults", "other_settings", "saved_generation_config", "search_settings"]


def generate_defaults() -> dict[str, Any]:
    """The library's default generation settings (what ``generate`` fills unset fields with)."""
    return GenerationConfig()._get_default_generation_params()


def search_settings(generation_config: GenerationConfig) -> dict[str, Any]:
    """The search a ``GenerationConfig`` asks for (its unset fields at ``generate``'s defaults),
    in the settings that are the same for every input: the one mapping from ``generate``'s
    settings to the search's keywords, which :func:`generate` builds on and ``beamsearch decode
    --model hf:DIR`` takes its defaults from.

    Returns:
        ``{"beam_size": num_beams, "n_best": num_return_sequences (1 when unset),
        "length_penalty": "power", "alpha": length_penalty, "no_repeat_ngram_size": (0 when
        unset), "min_new_tokens": (0 when unset), "max_new_tokens": int or None (unset)}``.
        With ``beam_size`` 1, ``generate`` decodes greedily, without a length penalty: decode
        with :func:`beamsearch.modes.beam.greedy_plan` and ``alpha=0.0`` then (a beam of one is
        not greedy decoding: it may return a finished candidate that is not its row's best).

    Raises:
        ValueError / TypeError: a setting out of range, named with its value (a negative
            ``length_penalty``, ``num_beams=0``, ...).
    """
    cfg = copy.deepcopy(generation_config)
    for name, value in generate_defaults().items():  # its unset fields: generate's defaults (not cfg.update, whose
        if getattr(cfg, name, None) is None:  # checks are those of generate's own modes)
            setattr(cfg, name, value)
    out: dict[str, Any] = {name: _READ[name](c.hf, getattr(cfg, c.hf))
                           for name, (_, c) in options_of(DecodingConfig).items() if c.hf is not None}
    out["length_penalty"] = "power"  # transformers' float length_penalty is the strength of len ** alpha
    out["max_new_tokens"] = out.pop("max_steps")
    return out


_READ = {"max_steps": lambda setting, v: None if v is None else check.at_least(setting, v, 1),
         "beam_size": lambda setting, v: check.at_least(setting, v, 1),
         "n_best": lambda setting, v: check.at_least(setting, v or 1, 1),
         "alpha": lambda setting, v: check.real(setting, v, finite=True),  # >= 0: not favouring short outputs
         "no_repeat_ngram_size": lambda setting, v: check.at_least(setting, v or 0, 0),
         "min_new_tokens": lambda setting, v: check.at_least(setting, v or 0, 0)}
"""How each shared control reads its ``GenerationConfig`` setting (the setting is the control's
``OptionInfo.hf``, declared once in :class:`~beamsearch.core.config.DecodingConfig`): unset counts as
``generate``'s default, each checked and named as the setting."""


# the settings search_settings maps (each shared control's hf name), and those of a generation config that
# change no search
SEARCH_SETTINGS = tuple(c.hf for _, c in options_of(DecodingConfig).values() if c.hf)
_NOT_SEARCH = ("bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id", "transformers_version",
               "_from_model_config", "use_cache", "cache_implementation", "return_dict_in_generate",
               "output_attentions", "output_hidden_states", "output_scores", "output_logits", "early_stopping")


def other_settings(generation_config: GenerationConfig) -> dict[str, Any]:
    """The settings ``generation_config`` sets away from ``transformers``' defaults that
    :func:`search_settings` does not map and that change a search (``max_length``,
    ``repetition_penalty``, ``forced_eos_token_id``, ``do_sample``, ...): what ``beamsearch decode
    --model hf:DIR`` names on stderr as not applied. Token ids and output flags are not listed;
    nor is ``early_stopping`` (the search's early stop is exact)."""
    return {k: v for k, v in sorted(generation_config.to_diff_dict().items())
            if k not in SEARCH_SETTINGS and k not in _NOT_SEARCH}


def saved_generation_config(directory: Any) -> GenerationConfig:
    """The generation config ``from_pretrained`` gives the model saved in ``directory``: its
    ``generation_config.json``, else the one made from its ``config.json`` (nothing is
    downloaded; the weights are not read).

    Raises:
        OSError: ``directory`` holds neither file.
    """
    from transformers import AutoConfig

    try:
        return GenerationConfig.from_pretrained(directory, local_files_only=True)
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(directory, local_files_only=True))
