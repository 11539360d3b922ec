"""What :func:`beamsearch.hf.generate` does with each keyword of ``model.generate`` and each field of
``GenerationConfig`` (transformers 5.25): honoured, mapped, or refused with the library's way.

:data:`KEYWORDS` is the one list: README's table "From generate() in one line" is checked against
it (``tests/hf/test_keywords.py``), and :func:`refuse` raises its refusals, each naming the keyword
and the way to get it here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from beamsearch.hf.calls import MODEL_INPUTS

__all__ = ["HONOURED", "KEYWORDS", "MAPPED", "REFUSED", "refuse", "refuse_arguments"]

HONOURED, MAPPED, REFUSED = "honoured", "mapped", "refused"

_SAMPLING = "used only when sampling, in generate too: no effect on a search"
_ASSISTED = "used only with an assistant model, in generate too: no effect"
_SPECULATIVE = ("speculative decoding, whose outputs are greedy decoding's: num_beams=1 gives them "
                "(mode='greedy')")
_CACHE = "the adapter's own cache, always on: no effect on the results"
_YOUR_PROCESSOR = "a logits_processor= entry of your own (or logits_processors= over hf.causal_lm)"

# name -> (status, what it is here); for a refused keyword, what to do instead
KEYWORDS: dict[str, tuple[str, str]] = {
    # generate's own parameters
    "inputs": (HONOURED, "a tensor [N, P] of ids, a BatchEncoding, N strings (with tokenizer=), or N lists of ids"),
    "generation_config": (HONOURED, "the call's config, its unset fields from the model's, then the keyword overrides"),
    "logits_processor": (HONOURED, "a LogitsProcessorList, run on the search's scores with the history generate "
                                   "gives it"),
    "stopping_criteria": (HONOURED, "a StoppingCriteriaList, called each step: an input it flags stops"),
    "prefix_allowed_tokens_fn": (HONOURED, "fn(batch_id, input_ids) -> allowed ids, as generate calls it"),
    "streamer": (HONOURED, "with beams, the prefix every live beam of the input shares, as it grows"),
    "synced_gpus": (MAPPED, "no effect: one process"),
    "assistant_model": (REFUSED, _SPECULATIVE),
    "negative_prompt_ids": (REFUSED, "classifier-free guidance: " + _YOUR_PROCESSOR),
    "negative_prompt_attention_mask": (REFUSED, "classifier-free guidance: " + _YOUR_PROCESSOR),
    "custom_generate": (REFUSED, "hf.generate runs beamsearch's own searches: mode= picks one; "
                                 "model.generate(custom_generate=hf.custom_generate) runs ours from generate"),
    # the model's inputs, and the tokenizer
    "input_ids": (HONOURED, "the prompts (a causal LM's) or the sources (an encoder-decoder's), [N, P]"),
    "attention_mask": (HONOURED, "[N, P], left or right padding; without it, generate's inferred mask and warning"),
    "tokenizer": (HONOURED, "strings in, texts out, stop_strings"),
    **{name: (REFUSED, "a model input hf.generate does not pass to the model (it feeds input_ids and "
                       "attention_mask only)") for name in MODEL_INPUTS},
    # GenerationConfig: lengths, sizes, the search
    "max_new_tokens": (HONOURED, ""),
    "max_length": (HONOURED, "counts each input's own prompt, not the batch's padding"),
    "min_new_tokens": (HONOURED, ""),
    "min_length": (HONOURED, "refused with prompts of different lengths: give min_new_tokens"),
    "num_beams": (HONOURED, "1: greedy decoding; more: beam search by the library's rule (mode= for another)"),
    "num_return_sequences": (MAPPED, "n_best"),
    "length_penalty": (MAPPED, "alpha of the power penalty: score = logprob / len ** length_penalty"),
    "early_stopping": (MAPPED, "the library's early stop is exact whatever its value; mode='transformers' reads it "
                               "as generate does"),
    "num_beam_groups": (MAPPED, "num_groups of diverse_beam_search (mode='diverse')"),
    "diversity_penalty": (MAPPED, "diversity_penalty of diverse_beam_search (mode='diverse')"),
    "force_words_ids": (MAPPED, "constraints of constrained_beam_search (mode='constrained')"),
    "constraints": (REFUSED, "constraints are transformers Constraint objects: give force_words_ids, or constraints= "
                             "as constrained_beam_search takes them (one list per input)"),
    "do_sample": (REFUSED, "True in the call: mode='stochastic' samples k outputs without replacement (k=, seed=); "
                           "True in the model's config: a warning, and not used"),
    # token ids
    "eos_token_id": (HONOURED, "one id or several"),
    "pad_token_id": (HONOURED, ""),
    "bos_token_id": (HONOURED, ""),
    "decoder_start_token_id": (HONOURED, ""),
    # the processors
    "no_repeat_ngram_size": (HONOURED, ""),
    "bad_words_ids": (HONOURED, "BadWords"),
    "sequence_bias": (HONOURED, "SequenceBias"),
    "repetition_penalty": (HONOURED, "RepetitionPenalty"),
    "suppress_tokens": (HONOURED, "SuppressTokens"),
    "begin_suppress_tokens": (HONOURED, "SuppressTokens at the first step"),
    "forced_bos_token_id": (HONOURED, "encoder-decoders; refused on a decoder-only model"),
    "forced_eos_token_id": (HONOURED, ""),
    "stop_strings": (MAPPED, "stop_sequences: each string as the tokenizer encodes it (needs tokenizer=)"),
    "renormalize_logits": (MAPPED, "the library's rule always renormalizes after the processors; refused with "
                                   "mode='transformers'"),
    "temperature": (HONOURED, _SAMPLING),
    "top_k": (HONOURED, _SAMPLING),
    "top_p": (HONOURED, _SAMPLING),
    "typical_p": (HONOURED, _SAMPLING),
    "min_p": (HONOURED, _SAMPLING),
    "top_h": (HONOURED, _SAMPLING),
    "epsilon_cutoff": (HONOURED, _SAMPLING),
    "eta_cutoff": (HONOURED, _SAMPLING),
    # outputs
    "return_dict_in_generate": (HONOURED, "Generation.sequences_scores"),
    "output_scores": (HONOURED, "Generation.scores and Generation.beam_indices"),
    "output_logits": (HONOURED, "Generation.logits"),
    "output_attentions": (REFUSED, "run the model on Generation.sequences for them"),
    "output_hidden_states": (REFUSED, "run the model on Generation.sequences for them"),
    # caches, compilation, memory
    "use_cache": (MAPPED, _CACHE),
    "cache_implementation": (MAPPED, _CACHE),
    "cache_config": (MAPPED, _CACHE),
    "max_cache_len": (MAPPED, _CACHE),
    "compile_config": (MAPPED, "no effect: nothing is compiled"),
    "disable_compile": (MAPPED, "no effect: nothing is compiled"),
    "prefill_chunk_size": (MAPPED, "no effect: the prefill runs whole, once per input"),
    "low_memory": (MAPPED, "no effect: the cache holds the live rows only"),
    "continuous_batching_config": (REFUSED, "continuous batching: beamsearch.refill.decode_stream, or "
                                            "beamsearch decode"),
    # assisted and speculative decoding
    "num_assistant_tokens": (HONOURED, _ASSISTED),
    "num_assistant_tokens_schedule": (HONOURED, _ASSISTED),
    "assistant_confidence_threshold": (HONOURED, _ASSISTED),
    "assistant_lookbehind": (HONOURED, _ASSISTED),
    "target_lookbehind": (HONOURED, _ASSISTED),
    "is_assistant": (HONOURED, _ASSISTED),
    "max_matching_ngram_size": (HONOURED, "used only with prompt_lookup_num_tokens, in generate too: no effect"),
    "assistant_ensemble_weight": (HONOURED, _ASSISTED),
    "prompt_lookup_num_tokens": (REFUSED, _SPECULATIVE),
    "assistant_early_exit": (REFUSED, _SPECULATIVE),
    "use_mtp": (REFUSED, _SPECULATIVE),
    "speculation_type": (REFUSED, _SPECULATIVE),
    # other decoding methods and penalties
    "penalty_alpha": (REFUSED, "contrastive search, which transformers moved to the Hub: not supported"),
    "dola_layers": (REFUSED, "DoLa decoding, which transformers moved to the Hub: not supported"),
    "guidance_scale": (REFUSED, "classifier-free guidance: " + _YOUR_PROCESSOR),
    "watermarking_config": (REFUSED, "watermarking: " + _YOUR_PROCESSOR),
    "encoder_no_repeat_ngram_size": (REFUSED, "a processor of your own that reads the source: " + _YOUR_PROCESSOR),
    "encoder_repetition_penalty": (REFUSED, "a processor of your own that reads the source: " + _YOUR_PROCESSOR),
    "exponential_decay_length_penalty": (REFUSED, "not supported: " + _YOUR_PROCESSOR),
    "remove_invalid_values": (REFUSED, "not supported: NaN or +inf logits are an error naming the step"),
    "token_healing": (REFUSED, "not supported"),
    "max_time": (REFUSED, "a wall clock makes results depend on the machine: bound max_new_tokens"),
}

# a refused setting's value that asks for nothing (generate applies guidance only above 1)
_NEUTRAL = {"guidance_scale": 1.0}
# generate's parameters that are not GenerationConfig fields, refused when given (not None)
_ARGUMENTS = ("assistant_model", "negative_prompt_ids", "negative_prompt_attention_mask", "custom_generate")


def refuse_arguments(overrides: dict[str, Any]) -> None:
    """Raise for a refused argument of ``generate`` (not a ``GenerationConfig`` field) in
    ``overrides``; take ``synced_gpus`` out (no effect here).

    Raises:
        ValueError: naming the argument and what to do instead.
    """
    overrides.pop("synced_gpus", None)
    for name in _ARGUMENTS:
        if overrides.get(name) is not None:
            raise ValueError(f"{name}= is not supported by beamsearch.hf.generate: {KEYWORDS[name][1]}")
        overrides.pop(name, None)


def refuse(cfg: Any, defaults: Mapping[str, Any], explicit: set[str], mode: str | None = None) -> None:
    """Raise for the refused settings of a resolved ``GenerationConfig`` set away from
    ``generate``'s defaults; warn for ``do_sample=True`` from the model's config.

    Args:
        cfg: the call's resolved ``GenerationConfig``.
        defaults: ``generate``'s default of each setting (None where it has none).
        explicit: the settings the call set (its keywords and its ``generation_config``'s).
        mode: the mode the call named, if any (``renormalize_logits`` is refused with
            ``"transformers"``).

    Raises:
        ValueError: naming every refused setting set, with its value and the way to get it here.
    """
    refused = {name: getattr(cfg, name, None) for name, (status, _) in KEYWORDS.items()
               if status == REFUSED and name not in _ARGUMENTS and name not in MODEL_INPUTS and name != "do_sample"
               and getattr(cfg, name, None) not in (None, False, defaults.get(name), _NEUTRAL.get(name))}
    if cfg.do_sample and "do_sample" in explicit:
        refused["do_sample"] = True
    if refused:
        why = "; ".join(f"{name}={value!r:.60}: {KEYWORDS[name][1]}" for name, value in refused.items())
        raise ValueError(f"these generation settings are not supported by beamsearch.hf.generate: {why}")
    if mode == "transformers" and cfg.renormalize_logits:
        raise ValueError("renormalize_logits=True with mode='transformers': generate's beam search rule "
                         "without renormalizing is what that mode reproduces; the library's own rule (no mode=) "
                         "always renormalizes")
    if cfg.do_sample:
        warnings.warn("do_sample=True in the model's generation config: beamsearch does not sample as generate "
                      "does, so do_sample and the sampling settings are not used (mode='stochastic' with k= and "
                      "seed= samples without replacement); pass do_sample=False to silence this", stacklevel=4)
