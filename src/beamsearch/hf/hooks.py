"""``model.generate``'s hooks for :func:`beamsearch.hf.generate`: ``logits_processor``,
``prefix_allowed_tokens_fn``, ``stopping_criteria`` and ``streamer``, each on one of the
library's seams.

- ``logits_processor`` (a ``LogitsProcessorList``) is one processor of the search
  (:class:`TransformersProcessors`, after the generation config's own), and
  ``prefix_allowed_tokens_fn`` is :class:`beamsearch.processors.AllowedTokens` (before them, at
  ``generate``'s place): both see each row as ``generate`` shows it, ``input_ids`` the prompt as
  ``generate`` holds it (:class:`HeldPrompts`) followed by the row's generated tokens. They act
  where the mode's processors act: on the logits before log_softmax (greedy, beam search), on the
  log-probabilities after it with ``mode="transformers"`` (as ``generate``'s beam search applies
  its processors).
- ``stopping_criteria`` and ``streamer`` are the search's step callback
  (:class:`~beamsearch.hf.streaming.HookCallback`): the criteria stop inputs, the streamer gets
  the tokens of each input's best hypothesis as soon as they are certain.

The search's rows per step vary (an input's rows leave when it stops; an input starts with one
row, not ``num_beams``), so a processor must treat rows independently. ``transformers``'
processors that assume ``generate``'s ``[batch * num_beams]`` layout, or keep state across
steps by row position, are refused (:data:`LAYOUT_BOUND`).
A custom processor of a type ``generate`` also builds from a setting of the call is refused
(``generate`` would use it in the setting's place). Not reproduced: ``generate``'s prefix
constraint gives the allowed tokens a score of 0 when every beam of an input has them all at
-inf (here such a row has no extension), and its forced BOS token (set to 0 after the prefix
constraint) wins over a prefix function that disallows it (here the two masks intersect).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from beamsearch.hf.inputs import left_padded, search_eos
from beamsearch.hf.outputs import StepOutputs
from beamsearch.hf.streaming import HookCallback, Streaming
from beamsearch.processors import AllowedTokens, StepContext
from beamsearch.processors.allowed_tokens import generated_tokens

__all__ = ["LAYOUT_BOUND", "HeldPrompts", "Hooks", "TransformersProcessors", "generate_hooks"]

# transformers' processors whose result depends on generate's row layout or on the same rows at every step
LAYOUT_BOUND = {
    "PrefixConstrainedLogitsProcessor": "it maps rows to inputs by num_beams: give prefix_allowed_tokens_fn",
    "EncoderRepetitionPenaltyLogitsProcessor": "it maps rows to its encoder_input_ids by generate's num_beams",
    "EncoderNoRepeatNGramLogitsProcessor": "it maps rows to its encoder_input_ids by generate's num_beams",
    "ClassifierFreeGuidanceLogitsProcessor": "it reads a doubled batch (conditional, unconditional)",
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "it runs the model on its own cache, row by row position",
    "SynthIDTextWatermarkLogitsProcessor": "it keeps each row's context across steps by row position",
    "WhisperNoSpeechDetection": "it runs the model on generate's batch",
    "DiaClassifierFreeGuidanceLogitsProcessor": "it reads a doubled batch (conditional, unconditional)",
    "DiaEOSChannelFilterLogitsProcessor": "it reads generate's channel layout of rows",
    "DiaEOSDelayPatternLogitsProcessor": "it keeps each row's state across steps by row position",
}
"""``transformers`` logits processor class name -> why ``logits_processor=`` refuses it."""

# the processors generate builds from a setting: a custom one of the same type replaces generate's
_FROM_SETTING = {
    "SequenceBiasLogitsProcessor": "sequence_bias", "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size", "NoBadWordsLogitsProcessor": "bad_words_ids",
    "MinLengthLogitsProcessor": "min_length", "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id", "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
    "SuppressTokensLogitsProcessor": "suppress_tokens", "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
}
_OFF: tuple[Any, ...] = (None, 0, 1.0, [], ())  # a setting at one of these builds no processor in generate


@dataclass(frozen=True)
class HeldPrompts:
    """Each input's prompt as ``generate`` holds it, and where the search's own prompt ends.

    Attributes:
        ids: int64 ``[N, P]`` on the model's device: a causal LM's prompts as given (a padded
            tensor as it is; token lists left-padded with the pad id), an encoder-decoder's
            decoder start token (``P = 1``).
        search_length: per input, the length of the prompt the search starts from (the tokens
            before the generated ones in :class:`AllowedTokens`' ``tokens``).
    """

    ids: torch.Tensor
    search_length: list[int]

    def rows(self, inputs: Any, generated: Any) -> torch.Tensor:
        """int64 ``[k, P + t]``: the held prompt of each row's input (``inputs`` ``[k]``) and its
        generated tokens (``generated`` int64 ``[k, t]``), as ``generate``'s ``input_ids``."""
        index = torch.as_tensor(inputs, device=self.ids.device)
        return torch.cat([self.ids[index], torch.as_tensor(generated, device=self.ids.device)], dim=1)


def held_prompts(model: Any, inputs: Any, rows: list[list[int]], pad: int, start: int | None) -> HeldPrompts:
    """The :class:`HeldPrompts` of a call: ``inputs`` as given (a tensor) or ``rows`` left-padded
    with ``pad``; ``start`` (the decoder start token) for an encoder-decoder."""
    device = model.device
    if model.config.is_encoder_decoder:
        if start is None:
            raise ValueError("an encoder-decoder's hooks read the decoder start token: set decoder_start_token_id "
                             "(or bos_token_id) in the generation config; got None for both")
        return HeldPrompts(torch.full((len(rows), 1), start, dtype=torch.long, device=device), [1] * len(rows))
    if isinstance(inputs, torch.Tensor):
        ids = inputs.to(device=device, dtype=torch.long)
    else:
        ids = left_padded(rows, pad, device)[0]
    return HeldPrompts(ids, [len(r) for r in rows])


class TransformersProcessors:
    """``transformers`` logits processors as one processor of the search (row by row).

    Each call runs ``scores = p(input_ids, scores)`` for every ``p`` in order, with
    ``input_ids`` int64 ``[k, P + t - 1]`` (:meth:`HeldPrompts.rows` of the live rows) and
    ``scores`` the search's float32 ``[k, V]`` (without the never-produced eos column the
    adapter adds for a model without eos, which keeps its -inf).
    """

    needs_history = True

    def __init__(self, processors: list[Callable[..., Any]], held: HeldPrompts, extra_column: bool) -> None:
        self.processors, self.held, self.extra_column = processors, held, extra_column

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        input_ids = self.held.rows(ctx.row_input, generated_tokens(ctx))
        scores = logits[:, :-1] if self.extra_column else logits
        for processor in self.processors:
            scores = processor(input_ids, scores)
        if self.extra_column:
            scores = torch.cat([scores, logits[:, -1:]], dim=1)
        return scores


def prefix_constraint(fn: Callable[[int, torch.Tensor], Any], held: HeldPrompts) -> AllowedTokens:
    """``prefix_allowed_tokens_fn`` as :class:`AllowedTokens`: ``fn(batch_id, input_ids)`` with
    ``batch_id`` the row's input and ``input_ids`` int64 ``[P + t - 1]``, the row as ``generate``
    passes it; an empty answer is a ValueError, as in ``generate``."""

    def allowed(i: int, tokens: tuple[int, ...]) -> Any:
        generated = torch.tensor(tokens[held.search_length[i]:], dtype=torch.long, device=held.ids.device)
        ids = fn(i, torch.cat([held.ids[i], generated]))
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if ids is not None and hasattr(ids, "__len__") and len(ids) == 0:
            raise ValueError(f"prefix_allowed_tokens_fn returned no token for input {i} (generate refuses an "
                             "unsatisfiable constraint too)")
        return ids

    return AllowedTokens(allowed)


def _callables(name: str, value: Any) -> list[Any]:
    """A list (``LogitsProcessorList`` / ``StoppingCriteriaList``) of callables, named on error."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or callable(value) and not isinstance(value, list) \
            or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a list of callables (a transformers {name_list(name)}); got {value!r:.80}")
    out = list(value)
    for i, item in enumerate(out):
        if not callable(item):
            raise TypeError(f"{name}[{i}] must be callable; got {item!r:.80}")
    return out


def name_list(name: str) -> str:
    return "LogitsProcessorList" if name == "logits_processor" else "StoppingCriteriaList"


def _check_processors(processors: list[Any], cfg: Any) -> None:
    """Refuse a layout-bound processor (:data:`LAYOUT_BOUND`), and one of a type ``generate``
    also builds from a setting of this call (it would use the custom one in the setting's place)."""
    for i, p in enumerate(processors):
        kind = type(p).__name__
        if kind in LAYOUT_BOUND:
            raise ValueError(f"logits_processor[{i}] ({kind}) is not supported: {LAYOUT_BOUND[kind]}")
        if kind == "RepetitionPenaltyLogitsProcessor" and isinstance(getattr(p, "prompt_ignore_length", None),
                                                                     torch.Tensor):
            raise ValueError(f"logits_processor[{i}] ({kind}) with a tensor prompt_ignore_length is not supported: "
                             "it maps rows to inputs by generate's layout")
        setting = _FROM_SETTING.get(kind)
        value = getattr(cfg, setting, None) if setting else None
        off = (None,) if setting in ("forced_bos_token_id", "forced_eos_token_id") else _OFF  # token 0 is a token
        if setting and not any(value is o or (not isinstance(value, list) and value == o) for o in off):
            raise ValueError(f"logits_processor[{i}] ({kind}) and {setting}={value!r} are both given: generate "
                             f"would use the custom processor in place of the setting's; give one of them")


@dataclass
class Hooks:
    """The hooks of one :func:`~beamsearch.hf.generation.generate` call, ready for its search.

    Attributes:
        processors: the search's processors for ``prefix_allowed_tokens_fn`` and
            ``logits_processor``, in ``generate``'s order.
        callback: the step callback for ``stopping_criteria`` and ``streamer``, or None.
    """

    processors: list[Any]
    callback: HookCallback | None = None

    def keywords(self, search: dict[str, Any]) -> dict[str, Any]:
        """``search`` (the mode's keywords) with the hooks' processors after its own."""
        if not self.processors:
            return search
        return {**search, "logits_processors": [*search["logits_processors"], *self.processors]}

    def run(self, function: Callable[..., Any], step: Any, state: Any, prompts: Any, *,
            outputs: StepOutputs | None = None, **search: Any) -> Any:
        """``function(step, state, prompts, **search)`` with the callback (no pruned candidates
        recorded), the streamer fed before, during and after it; the streamer's ``end()`` is
        called whether the search returns or raises (a reader thread is never left waiting).
        ``outputs``: the collector of ``generate``'s per-step outputs, the search's callback
        then, calling the hooks' own."""
        watch: dict[str, Any] = {}
        if outputs is not None:
            outputs.inner = self.callback
            watch["callback"] = outputs
        elif self.callback is not None:
            watch["callback"] = self.callback
        if watch and "trace_width" in inspect.signature(function).parameters:
            watch["trace_width"] = 0  # no pruned candidates read per step
        if self.callback is None:
            return function(step, state, prompts, **watch, **search)
        self.callback.start()
        try:
            results = function(step, state, prompts, **watch, **search)
            self.callback.flush(results)
        finally:
            self.callback.end()
        return results


def _check_mode(spec: Any, processors: bool, callback: bool, streamer: Any, n_inputs: int) -> None:
    """The mode must take processors (for the first two hooks) and a step callback (for the
    other two); a streamer needs one input and a mode whose best hypothesis it can follow."""
    if processors and not spec.takes("logits_processors"):
        raise ValueError(f"mode {spec.name!r} does not take logits processors: logits_processor and "
                         "prefix_allowed_tokens_fn are not supported with it")
    if callback and "callback" not in inspect.signature(spec.function).parameters:
        raise ValueError(f"mode {spec.name!r} has no step callback: stopping_criteria and streamer are not "
                         "supported with it")
    if streamer is not None:
        Streaming.check(streamer, spec.name, n_inputs)


def generate_hooks(model: Any, spec: Any, cfg: Any, inputs: Any, rows: list[list[int]], *,
                   logits_processor: Any = None, prefix_allowed_tokens_fn: Any = None,
                   stopping_criteria: Any = None, streamer: Any = None) -> Hooks:
    """Check a call's hooks (before the model runs) and make its :class:`Hooks`.

    Args:
        model: the call's model.
        spec: the mode the call runs (:class:`~beamsearch.core.mode.Mode`).
        cfg: the call's resolved ``GenerationConfig``.
        inputs: the inputs as given (a padded tensor is what ``generate`` holds).
        rows: each input's token ids, padding removed.
        logits_processor, prefix_allowed_tokens_fn, stopping_criteria, streamer: as
            ``model.generate`` takes them (see :func:`~beamsearch.hf.generation.generate`).

    Raises:
        TypeError / ValueError: a hook that is not what ``generate`` takes, a processor refused
            (:data:`LAYOUT_BOUND`), a mode that cannot run a hook, a streamer with several inputs.
    """
    custom = _callables("logits_processor", logits_processor)
    criteria = _callables("stopping_criteria", stopping_criteria)
    if prefix_allowed_tokens_fn is not None and not callable(prefix_allowed_tokens_fn):
        raise TypeError(f"prefix_allowed_tokens_fn must be callable (batch_id, input_ids) -> allowed ids; got "
                        f"{prefix_allowed_tokens_fn!r:.80}")
    _check_processors(custom, cfg)
    uses_processors = bool(custom) or prefix_allowed_tokens_fn is not None
    _check_mode(spec, uses_processors, bool(criteria) or streamer is not None, streamer, len(rows))
    if not (uses_processors or criteria or streamer is not None):
        return Hooks([])
    pad = cfg.pad_token_id if isinstance(cfg.pad_token_id, int) else 0
    start = None
    if model.config.is_encoder_decoder:  # the call's, else the model's, else its bos id (as generate reads it)
        start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else cfg.bos_token_id
    held = held_prompts(model, inputs, rows, pad, start)
    processors: list[Any] = []
    if prefix_allowed_tokens_fn is not None:
        processors.append(prefix_constraint(prefix_allowed_tokens_fn, held))
    if custom:
        processors.append(TransformersProcessors(custom, held, search_eos(model, cfg.eos_token_id)[1]))
    callback = None
    if criteria or streamer is not None:
        callback = HookCallback(held, len(rows), criteria, Streaming(streamer) if streamer is not None else None)
    return Hooks(processors, callback)
