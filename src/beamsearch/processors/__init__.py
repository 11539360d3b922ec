"""Logits processors: small pieces applied to all rows at once before log_softmax.

:func:`beamsearch.beam_search_batch` processes each row in this order (SPEC section 10):
``min_new_tokens``' eos mask, :class:`Temperature`, :class:`TopK`, :class:`NoRepeatNGram`, then
the caller's ``logits_processors`` in order, then log_softmax, then the forced-prefix mask.

A processor is any callable ``processor(logits, ctx) -> logits``: ``logits`` is a ``[k, V]`` float
array (numpy, or a torch tensor on its device) and ``ctx`` a :class:`StepContext`. Use the return
value: a processor may write into ``logits`` (the search owns that buffer; the model's own array is
never handed over) or return a new array. Processors work row by row. A processor that reads
``ctx.history`` including the prompt declares a class attribute ``needs_history = True``; one that
does nothing after some step may say so with an int attribute ``last_step`` (the search then skips
it, and copies nothing for it); one that only sets entries to -inf may declare ``masks_only =
True`` (a :class:`Catalogue`'s or :class:`Grammar`'s allowed pairs before it are then still ranked
alone, ``StepContext.support``). A processor built with token ids may declare them as
``vocab_checks``: a sequence of ``(argument, ids)`` pairs (``ids`` an int or nested lists of
ints), checked against ``[0, V)`` at the first call; an id outside is a ValueError naming
``logits_processors[i]``, the processor, the argument, the id and V. What a processor of
``logits_processors`` returns must be an array of the logits' library, shape, dtype and device
(else a TypeError or ValueError naming it).

Ready processors, one module each: :class:`Temperature`, :class:`TopK`, :class:`TopP`,
:class:`NoRepeatNGram` (each row's n-grams carried as a :class:`RowStates`, so a step's cost does
not grow with the output), :class:`RepetitionPenalty`, :class:`SequenceBias`, :class:`BadWords`,
:class:`SuppressTokens`; allowed-token constraints (generated tokens only, see
``docs/allowed_tokens.md``): :class:`AllowedTokens` (a per-row callback), :class:`Catalogue` (a
trie of allowed outputs as CSR arrays, up to millions of them, each row's node carried as a
:class:`RowStates`; saved and loaded as one safetensors file), :class:`TokenDFA` (a finite automaton over token ids, and
``TokenDFA.from_regex``); :class:`Grammar` (a JSON Schema, a Lark grammar or a regex through the
grammar engine llguidance, ``docs/grammar.md``), which carries a matcher per row
(:class:`RowStates`).
"""

from beamsearch.processors._base import LogitsProcessor, RowCarrier, RowStates, StepContext
from beamsearch.processors.allowed_tokens import AllowedTokens
from beamsearch.processors.catalogue import Catalogue
from beamsearch.processors.grammar import Grammar
from beamsearch.processors.no_repeat_ngram import NoRepeatNGram, banned_ngram_tokens
from beamsearch.processors.repetition_penalty import RepetitionPenalty
from beamsearch.processors.sequence_bias import BadWords, SequenceBias
from beamsearch.processors.suppress_tokens import SuppressTokens
from beamsearch.processors.temperature import Temperature
from beamsearch.processors.token_dfa import TokenDFA
from beamsearch.processors.top_k import TopK
from beamsearch.processors.top_p import TopP

__all__ = [
    "AllowedTokens",
    "BadWords",
    "Catalogue",
    "Grammar",
    "LogitsProcessor",
    "NoRepeatNGram",
    "RepetitionPenalty",
    "RowCarrier",
    "RowStates",
    "SequenceBias",
    "StepContext",
    "SuppressTokens",
    "Temperature",
    "TokenDFA",
    "TopK",
    "TopP",
    "banned_ngram_tokens",
]
