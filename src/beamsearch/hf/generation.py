""":func:`generate`: a model and its generation config, decoded as ``model.generate`` would with
beamsearch's rules; :class:`Generation`, what it returns; and the mapping from a
``GenerationConfig`` to the search (:func:`search_settings`, :data:`SEARCH_SETTINGS`,
:func:`other_settings`, :func:`saved_generation_config`, which ``beamsearch decode --model
hf:DIR`` reads too), with the config's logits processors and the settings refused.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig

from beamsearch.controls.shared import check_batch
from beamsearch.core import validate as check
from beamsearch.core.config import GrammarOptions, SearchConfig
from beamsearch.core.hypothesis import BatchResults
from beamsearch.hf.caches import inference
from beamsearch.hf.calls import inferred_mask
from beamsearch.hf.catalogue import catalogues, check_catalogue
from beamsearch.hf.forced import ForcedTokens
from beamsearch.hf.grammar import OUTPUT_CONSTRAINTS, grammars, output_constraints
from beamsearch.hf.hooks import generate_hooks, held_prompts
from beamsearch.hf.inputs import in_vocab, input_rows, search_eos
from beamsearch.hf.keywords import refuse, refuse_arguments
from beamsearch.hf.modes import choose_mode, generate_rule, mode_keywords, once_per_solution, own_options
from beamsearch.hf.multimodal import call_model_inputs, media_rows
from beamsearch.hf.outputs import LogitsTap, generate_outputs, step_outputs
from beamsearch.hf.prefill import prefill
from beamsearch.hf.settings import generate_defaults, search_settings
from beamsearch.hf.shared import check_shared
from beamsearch.processors import BadWords, RepetitionPenalty, SequenceBias, SuppressTokens


@dataclass
class Generation:
    """What :func:`generate` returns.

    Attributes:
        hypotheses: per input, up to ``num_return_sequences`` :class:`beamsearch.Hypothesis`
            (new tokens only, eos included iff finished), best first.
        texts: per input, each hypothesis's tokens decoded by the tokenizer (special tokens
            skipped), or None when no tokenizer was given.
        settings: the search the generation config was mapped to: the keywords ``mode``'s
            function got (beam search: ``beam_size``, ``n_best``, ``max_steps`` (one per input),
            ``alpha``, ``length_penalty``, ``eos_token_id``, ``min_new_tokens``,
            ``no_repeat_ngram_size``, ``logits_processors``, ``stop_sequences``, ``early_stop``;
            greedy decoding: the same but the sizes and ``early_stop``; a mode's own options),
            the model's step, state and prompts aside.
        mode: the registered search mode that ran (``"greedy"``, ``"beam"``, ``"diverse"``, ...;
            ``mode="transformers"`` with one beam runs ``"greedy"``, as ``generate`` does).
        sequences: ``generate``'s ``sequences``, int64 ``[R, P + L]``: per hypothesis (input-major,
            best first; R = N * num_return_sequences), a causal LM's prompt as ``generate`` holds it
            (the tensor as given, padding included; lists left-padded) or an encoder-decoder's
            decoder start token, then its new tokens, right-padded as ``generate`` pads: greedy
            decoding with the pad id (else the first eos id), beam search with ``pad_token_id or
            eos_token_id[0]`` (its fill value, where a pad id of 0 counts as unset); L the most new
            tokens of any.
        sequences_scores: float32 ``[R]``, each hypothesis's score (None for greedy decoding, as
            in ``generate``).
        scores: with ``output_scores=True``: a tuple of T float32 tensors ``[N * W, V]``, T the
            steps the search ran, W its rows per input (``num_beams``; 1 for greedy decoding):
            row ``i * W + j`` holds the processed log-probabilities of input i's j-th row of that
            step (the search's rows, best first), -inf where the input had no such row (one row
            at step 1; none after it stopped). ``generate``'s values under ``mode="transformers"``
            (its beam search's processors act after log_softmax; with one beam, its greedy
            ``scores``: the processed logits); under the library's rule and in greedy decoding,
            the log_softmax of the processed logits. None when not asked.
        logits: with ``output_logits=True``: the model's raw logits, laid out as ``scores``.
        beam_indices: with ``output_scores=True`` (beam modes): int64 ``[R, L]``, the row
            (``i * W + j``) each hypothesis's token of each step extended, -1 past its end.
    """

    hypotheses: BatchResults
    texts: list[list[str]] | None
    settings: dict[str, Any]
    mode: str = "beam"
    sequences: Any = None
    sequences_scores: Any = None
    scores: tuple[Any, ...] | None = None
    logits: tuple[Any, ...] | None = None
    beam_indices: Any = None


def _config(model: Any, generation_config: Any, overrides: dict[str, Any]) -> GenerationConfig:
    """The settings ``model.generate`` would use, resolved in its order: ``generation_config``
    (default: an empty one), its unset fields from the model's generation config, then the
    library's defaults, then ``overrides``; an override that is not a generation setting is a
    TypeError naming it."""
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        raise TypeError(f"generation_config must be a transformers.GenerationConfig; got "
                        f"{type(generation_config).__name__}")
    cfg = copy.deepcopy(generation_config if generation_config is not None else GenerationConfig())
    cfg.update(**model.generation_config.to_dict(), defaults_only=True, allow_custom_entries=True)
    cfg.update(**generate_defaults(), defaults_only=True)
    unknown = sorted(name for name in overrides if not hasattr(cfg, name))
    if unknown:
        raise TypeError(f"generate() got settings that are not GenerationConfig fields: {unknown}")
    for name, value in overrides.items():  # not cfg.update: its checks are generate's modes' (this call's
        setattr(cfg, name, value)           # settings are checked by the search the mode runs)
    return cfg


def _default_length(model: Any, generation_config: Any, overrides: dict[str, Any]) -> bool:
    """Whether no ``max_length`` is set by the call, its config or the model's: then ``generate``
    (transformers 5) makes the library's ``max_length=20`` count new tokens only (capped at the
    model's ``max_position_embeddings``), not the prompt."""
    return (overrides.get("max_length") is None
            and (generation_config is None or generation_config.max_length is None)
            and model.generation_config.max_length is None)


def _lengths(cfg: GenerationConfig, rows: list[list[int]], encoder_decoder: bool,
             default_new: int | None = None) -> tuple[list[int], int]:
    """(max_steps per input, min_new_tokens). ``max_new_tokens`` wins over ``max_length``, which
    counts the prompt (a causal LM's, per input; an encoder-decoder's decoder start token).
    ``default_new``: the new tokens of every input when no ``max_length`` was set (see
    :func:`_default_length`)."""
    base = [1] * len(rows) if encoder_decoder else [len(r) for r in rows]
    if cfg.max_new_tokens is not None:
        steps = [check.at_least("max_new_tokens", cfg.max_new_tokens, 1)] * len(rows)
    elif default_new is not None:
        if default_new < 1:
            raise ValueError("the prompts fill the model's max_position_embeddings: no new token fits; "
                             "set max_new_tokens")
        steps = [default_new] * len(rows)
    else:
        steps = [check.integer("max_length", cfg.max_length) - b for b in base]
        short = [i for i, s in enumerate(steps) if s < 1]
        if short:
            raise ValueError(f"max_length={cfg.max_length} leaves no new token for inputs[{short[0]}] "
                             f"({base[short[0]]} tokens already): set max_new_tokens")
    m = check.at_least("min_new_tokens", cfg.min_new_tokens or 0, 0)
    if cfg.min_length:
        if len(set(base)) > 1:
            raise ValueError(f"min_length={cfg.min_length} counts the prompt, and the prompts differ in length "
                             "(generate would count the padding): set min_new_tokens instead")
        m = max(m, check.integer("min_length", cfg.min_length) - base[0])
    return steps, m


def _processors(cfg: GenerationConfig, eos: np.ndarray | None, steps: list[int],
                encoder_decoder: bool, zero: bool = False) -> list[Any]:
    """The generation config's logits processors, in ``generate``'s order (the n-gram block and
    the min-new-tokens mask are the search's own keywords). ``zero``: forced tokens at 0, as
    ``generate``'s processors set them (:class:`ForcedTokens`; ``mode="transformers"``)."""
    out: list[Any] = []
    if cfg.sequence_bias is not None:
        bias = cfg.sequence_bias
        if isinstance(bias, list):  # generate's list form [[ids, bias], ...]
            bias = {tuple(ids): b for ids, b in bias}
        out.append(SequenceBias(bias))
    if cfg.repetition_penalty is not None and cfg.repetition_penalty != 1.0:
        out.append(RepetitionPenalty(cfg.repetition_penalty))
    if cfg.bad_words_ids is not None:
        # as generate does: a bad word that is a single eos id is dropped
        words = [w for w in cfg.bad_words_ids if eos is None or not (len(w) == 1 and w[0] in eos)]
        if words:
            out.append(BadWords(words))
    n = len(steps)
    if cfg.forced_bos_token_id is not None:
        if not encoder_decoder:
            raise ValueError("forced_bos_token_id is set: generate forces it only where the decoder input is one "
                             "token (encoder-decoders); unset it for a decoder-only model")
        ids = np.array([check.token("forced_bos_token_id", cfg.forced_bos_token_id)])
        out.append(ForcedTokens(ids, np.ones(n, np.int64), zero))
    if cfg.forced_eos_token_id is not None:
        forced = cfg.forced_eos_token_id
        out.append(ForcedTokens(check.eos_ids("forced_eos_token_id", forced), np.asarray(steps, np.int64), zero))
    if cfg.suppress_tokens:
        out.append(SuppressTokens(list(cfg.suppress_tokens)))
    if cfg.begin_suppress_tokens:
        if cfg.forced_bos_token_id is not None:
            raise ValueError("begin_suppress_tokens with forced_bos_token_id (suppression at the second token) is "
                             "not supported")
        out.append(SuppressTokens(list(cfg.begin_suppress_tokens), first_steps=1))
    return out


def _stop_sequences(cfg: GenerationConfig, tokenizer: Any) -> list[list[int]]:
    """``stop_strings`` as token sequences: each string as the tokenizer encodes it alone."""
    strings = cfg.stop_strings
    if not strings:
        return []
    if tokenizer is None:
        raise ValueError(f"stop_strings={strings!r} needs the tokenizer: pass tokenizer=")
    if isinstance(strings, str):
        strings = [strings]
    return [list(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in strings]


def _settings(model: Any, cfg: GenerationConfig, rows: list[list[int]], tokenizer: Any, constraints: GrammarOptions,
              default_length: bool = False, zero: bool = False) -> dict[str, Any]:
    """The search a generation config asks for (see :attr:`Generation.settings`), checked before
    the model runs. ``default_length``: no ``max_length`` was set (:func:`_default_length`), so
    ``max_length`` counts new tokens only, as ``generate`` counts them: every input gets
    ``min(max_length + P, max_position_embeddings) - P`` with ``P`` the padded prompt width (1,
    the decoder start token, for an encoder-decoder). ``zero``: forced tokens at ``generate``'s
    0 (:func:`_processors`)."""
    encoder_decoder = bool(model.config.is_encoder_decoder)
    eos, extra = search_eos(model, cfg.eos_token_id)
    eos_ids = None if extra else check.eos_ids("eos_token_id", eos)
    common = search_settings(cfg)
    new = None
    if default_length and cfg.max_new_tokens is None:
        width = 1 if encoder_decoder else max((len(r) for r in rows), default=0)
        limit = getattr(model.config, "max_position_embeddings", None)  # as generate reads it
        total = cfg.max_length + width
        new = (total if limit is None else min(total, limit)) - width
    steps, m = _lengths(cfg, rows, encoder_decoder, new)
    del common["max_new_tokens"]
    return {**common, "max_steps": steps, "eos_token_id": eos, "min_new_tokens": m,
            "logits_processors": [*_processors(cfg, eos_ids, steps, encoder_decoder, zero),
                                  *grammars(constraints, tokenizer, eos_ids),
                                  *catalogues(constraints, cfg, tokenizer, eos_ids, steps)],
            "stop_sequences": _stop_sequences(cfg, tokenizer), "early_stop": True}


def _after_prefill(config: SearchConfig, eos: Any, processors: Any) -> SearchConfig:
    """The configuration made before the prefill, with the model's eos ids and the processors (the
    outputs' tap appended) where they differ from it: a changed value is checked again, with the plan."""
    changes: dict[str, Any] = {"logits_processors": processors} if processors is not config.value(
        "logits_processors") else {}
    if np.atleast_1d(np.asarray(eos)).tolist() != np.atleast_1d(np.asarray(config.value("eos_token_id"))).tolist():
        changes["eos_token_id"] = eos
    return config.replace(**changes) if changes else config


def _result_pad(pad_token_id: Any, eos: Any) -> int | None:
    """The pad id of :func:`generate`'s ``hypotheses.arrays()``: the generation config's (the
    call's, else the model's), else the first eos id, as ``generate`` pads; None without either."""
    if isinstance(pad_token_id, torch.Tensor):
        pad_token_id = pad_token_id.reshape(-1)[0].item()
    if pad_token_id is not None:
        return check.int64("pad_token_id", pad_token_id)
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return ids[0] if ids else None


@inference
def generate(model: Any, inputs: Any = None, *, input_ids: Any = None, attention_mask: Any = None,
             tokenizer: Any = None, generation_config: Any = None, mode: str | None = None,
             logits_processor: Any = None, prefix_allowed_tokens_fn: Any = None, stopping_criteria: Any = None,
             streamer: Any = None, share_prompt_cache: bool = False,
             **overrides: Any) -> Generation:
    """Decode a batch with a ``transformers`` model under its generation config, as
    ``model.generate`` would, with beamsearch's rules (README: "Where our rules and generate's
    differ").

    The settings honoured: ``num_beams`` (1: greedy; more: :func:`beamsearch.beam_search_batch`),
    ``num_beam_groups`` and ``diversity_penalty`` (:func:`beamsearch.diverse_beam_search`),
    ``force_words_ids`` (:func:`beamsearch.constrained_beam_search`; every input must contain
    each word, a list of alternative words: one of them), ``num_return_sequences`` (n_best),
    ``length_penalty`` (the power penalty ``logprob / len ** length_penalty``),
    ``max_new_tokens`` / ``max_length``,
    ``min_new_tokens`` / ``min_length``, ``eos_token_id`` (one id or several),
    ``no_repeat_ngram_size``, ``bad_words_ids``, ``repetition_penalty``, ``sequence_bias``,
    ``suppress_tokens``, ``begin_suppress_tokens``, ``forced_bos_token_id``,
    ``forced_eos_token_id``, ``stop_strings``, ``json_schema`` / ``grammar`` / ``regex`` (with
    ``tokenizer``: docs/grammar.md), ``catalogue`` (every output one of its entries, then eos: a
    :class:`beamsearch.processors.Catalogue`, a file for :meth:`~beamsearch.processors.Catalogue.from_file`,
    token-id lists, an array ``[M, L]`` padded with -1, or strings with ``tokenizer``; README:
    "Generative retrieval"). ``early_stopping`` is
    accepted with any value: our early stop is exact (it never loses a better hypothesis), so
    every value gives what ``"never"`` aims at (``mode="transformers"`` reads it as ``generate``
    does). ``output_scores`` / ``output_logits`` fill :attr:`Generation.scores`, ``.logits`` and
    ``.beam_indices``. ``do_sample=True`` in the call is refused (a warning when the model's config
    sets it). What every other keyword of ``model.generate`` does here:
    :data:`beamsearch.hf.keywords.KEYWORDS` (README: "From generate() in one line"); a refused one
    away from its default is a ValueError naming it.

    Args:
        model: a causal LM or an encoder-decoder, in eval mode.
        inputs: N strings (with ``tokenizer``), N token-id lists, a 2-D tensor ``[N, P]`` of
            ids with its ``attention_mask`` ``[N, P]`` (padding left or right; without a mask,
            ``generate``'s, inferred from the pad id), or a tokenizer's ``BatchEncoding``.
        input_ids: ``[N, P]``, in place of ``inputs`` (``**tokenizer(texts, return_tensors="pt",
            padding=True)`` passes it and the mask).
        attention_mask: ``[N, P]``, with a tensor of ids only.
        tokenizer: turns strings into ids and the results back into strings; needed for
            ``stop_strings``.
        generation_config: a ``GenerationConfig``; default ``model.generation_config``.
        mode: a registered search mode (``beamsearch.modes.registry.MODES``: ``"beam"``,
            ``"greedy"``, ``"constrained"``, ``"diverse"``, ``"stochastic"``, ``"exact"``,
            ``"transformers"`` (``generate``'s own beam search rule: its sequences and scores,
            its ``early_stopping`` read as the rule's), and any registered later); default: the
            one the settings ask for (``num_beam_groups``: diverse, ``force_words_ids`` or
            ``constraints=``: constrained, ``num_beams=1``: greedy, else beam search). A shared
            setting the mode does not take is an error when the call sets it (``num_beams`` with
            ``mode="exact"``), and is not used, with a warning, when it comes from the model's
            generation config.
        logits_processor: ``transformers`` logits processors (a ``LogitsProcessorList``), run
            after the config's own, each ``p(input_ids [k, P + t], scores [k, V])`` on the live
            rows (``input_ids``: the prompt as ``generate`` holds it, then the row's tokens),
            before log_softmax (greedy, beam) or after it (``mode="transformers"``, as
            ``generate``'s beam search); ones tied to ``generate``'s row layout are a ValueError
            (:data:`beamsearch.hf.hooks.LAYOUT_BOUND`).
        prefix_allowed_tokens_fn: ``fn(batch_id, input_ids [P + t]) -> allowed ids``, as
            ``generate`` calls it (:class:`beamsearch.processors.AllowedTokens`).
        stopping_criteria: ``criterion(input_ids [k, P + t], None) -> bool [k]``, called after
            each step on the rows that go on; a flagged row stops its input (its live rows end
            unfinished; :mod:`beamsearch.hf.streaming`).
        streamer: an object with ``put(tensor)`` and ``end()``, for one input: the prompt, then
            the best hypothesis's tokens (greedy: ``generate``'s calls; beams: each token once
            every hypothesis that may still be the best shares it, the rest at the end).
        share_prompt_cache: a causal LM's prompt cache held once per input and read by every
            beam (:func:`causal_lm`'s ``share_prompt``; docs/hf_shared_prompt.md): the cache
            grows with beams x new tokens only. Decoder-only models of the types in
            :data:`beamsearch.hf.shared.SHARED_TYPES`; a ValueError otherwise.
        **overrides: generation settings that replace the config's (``num_beams=4``, ...), and
            the mode's own options by their names (``constraints`` (one list per input, as
            :func:`beamsearch.constrained_beam_search` takes them), ``ordered``, ``num_groups``,
            ``diversity_penalty``, ``k``, ``seed``, ``node_budget``, ``seed_beam``, ...).

    Without ``max_new_tokens`` or any ``max_length`` (the call's, the config's, the model's),
    ``max_length`` is the library's 20 counted as new tokens, as transformers 5 counts it: 20 new
    tokens per input, fewer where the padded prompt plus 20 passes ``max_position_embeddings``.

    Returns:
        A :class:`Generation`: ``hypotheses[i]`` best first, and ``texts[i]`` with a tokenizer;
        ``hypotheses.arrays()`` pads with ``pad_token_id`` (the call's or the model's), else
        with the first eos id, as ``generate`` pads.

    Raises:
        ValueError / TypeError: before the model runs, naming the setting or argument at fault.
    """
    if not isinstance(share_prompt_cache, bool):
        raise TypeError(f"share_prompt_cache must be True or False; got {share_prompt_cache!r}")
    if share_prompt_cache:
        check_shared(model, "share_prompt_cache")
    given = own_options(overrides)
    refuse_arguments(overrides)
    media, inputs, attention_mask = call_model_inputs(model, inputs, input_ids, attention_mask, overrides)
    taken = {name: overrides.pop(name) for name in OUTPUT_CONSTRAINTS if name in overrides}
    cfg = _config(model, generation_config, overrides)
    constraints = output_constraints(taken, cfg)  # a value, not attributes set on the config
    check_catalogue(constraints.catalogue)
    explicit = set(overrides) | set(generation_config.to_diff_dict() if generation_config is not None else ())
    defaults = generate_defaults()
    refuse(cfg, defaults, explicit, mode)
    if isinstance(inputs, torch.Tensor) and attention_mask is None:  # generate's mask, inferred from the pad id
        attention_mask = inferred_mask(inputs, cfg.pad_token_id, cfg.eos_token_id)
    rows = media_rows(model, media) if inputs is None else input_rows(inputs, attention_mask, tokenizer, "inputs")
    in_vocab(model, rows, "inputs")
    spec = choose_mode(mode, cfg, defaults, given)
    once_per_solution(spec, cfg, explicit)
    rule = spec.name == "transformers"  # generate's values: forced tokens at 0, greedy scores the processed logits
    settings = _settings(model, cfg, rows, tokenizer, constraints, _default_length(model, generation_config, overrides),
                         rule)
    spec = generate_rule(spec, settings["beam_size"])
    if spec.takes("beam_size") and settings["n_best"] > settings["beam_size"]:
        raise ValueError(f"num_return_sequences={settings['n_best']} must be at most num_beams={settings['beam_size']}")
    hooks = generate_hooks(model, spec, cfg, inputs, rows, logits_processor=logits_processor, streamer=streamer,
                           prefix_allowed_tokens_fn=prefix_allowed_tokens_fn, stopping_criteria=stopping_criteria)
    search = hooks.keywords(mode_keywords(spec, settings, cfg, defaults, given, explicit, len(rows)))
    if spec.takes("pad_token_id"):
        search["pad_token_id"] = _result_pad(cfg.pad_token_id, search["eos_token_id"])
    encoder_decoder = bool(model.config.is_encoder_decoder)
    config = None  # the mode's own checks, before the prefill runs the model (no plan made of them)
    if spec.plan is not None:
        config = check_batch(spec, search, [[0]] * len(rows) if encoder_decoder else rows)
    steps = step_outputs(spec, search, cfg, processed=rule)  # its refusal too, before the prefill
    if steps is not None and steps.tap is not None:
        search["logits_processors"] = [*search["logits_processors"], steps.tap]
    dec = prefill(model, cfg, None if inputs is None else rows, rows, max(settings["max_steps"]), share_prompt_cache,
                    media.keywords())
    search["eos_token_id"] = dec.eos_token_id
    step = LogitsTap(dec.step, steps) if steps is not None and steps.keep_logits else dec.step
    if config is None:
        hypotheses = hooks.run(spec.function, step, dec.init_state, dec.prompts, outputs=steps, **search)
    else:  # the configuration made before the prefill, with the model's eos ids and the outputs' tap
        config = _after_prefill(config, dec.eos_token_id, search["logits_processors"])
        hypotheses = hooks.run(partial(spec.run, config=config), step, dec.init_state, dec.prompts, outputs=steps)
    texts = None
    if tokenizer is not None:
        texts = [[tokenizer.decode(h.tokens, skip_special_tokens=True) for h in hyps] for hyps in hypotheses]
    pad = _result_pad(cfg.pad_token_id, dec.eos_token_id)
    head = torch.tensor(dec.prompts) if encoder_decoder else \
        held_prompts(model, inputs, rows, 0 if pad is None else pad, None).ids.cpu()
    return Generation(hypotheses, texts, search, spec.name,
                      **generate_outputs(hypotheses, head, pad, dec.eos_token_id, steps, spec.name != "greedy"))
