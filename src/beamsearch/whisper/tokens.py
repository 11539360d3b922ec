"""Whisper's special tokens and the decoder prompt built of them (openai/whisper's ``Tokenizer``
and ``DecodingTask._get_initial_tokens`` / ``_get_suppress_tokens``), as plain ids: the rules
need no tokenizer at decoding time.

The prompt of one 30-second window is, in order::

    [<|startofprev|>, previous text...]  <|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>]  [prefix...]

and the generated tokens start right after it (``sample_begin``): the rules of
:mod:`beamsearch.whisper.rules` read those only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["WhisperTokens", "initial_tokens", "non_speech_ids", "suppressed_ids"]


@dataclass(frozen=True)
class WhisperTokens:
    """The ids the decoding rules need (openai/whisper's ``Tokenizer`` properties of that name).

    Attributes:
        eot: end of transcript (the eos of the search).
        sot: start of transcript.
        sot_prev: starts the previous text (the prompt of a window conditioned on it).
        sot_lm: start of LM (only ever suppressed).
        no_speech: no-speech token (its probability at ``sot`` is the no-speech probability), or None.
        no_timestamps: the token that asks for text without timestamps.
        timestamp_begin: ``<|0.00|>``; every id from it up is a timestamp (precision apart).
        transcribe, translate: the task tokens.
        blank: the ids of ``" "`` (``suppress_blank`` bans them and eot at the first step).
        non_speech: the ids ``suppress_tokens="-1"`` bans (symbols that are not speech).
        sot_sequence: ``(sot, language, task)`` (or ``(sot,)`` for an English-only model).
    """

    eot: int
    sot: int
    sot_prev: int
    sot_lm: int
    no_speech: int | None
    no_timestamps: int
    timestamp_begin: int
    transcribe: int
    translate: int
    blank: tuple[int, ...]
    non_speech: tuple[int, ...]
    sot_sequence: tuple[int, ...]

    @classmethod
    def from_openai(cls, tokenizer: Any) -> WhisperTokens:
        """The ids of an openai/whisper ``Tokenizer`` (``whisper.tokenizer.get_tokenizer(...)``)."""
        return cls(eot=tokenizer.eot, sot=tokenizer.sot, sot_prev=tokenizer.sot_prev, sot_lm=tokenizer.sot_lm,
                   no_speech=tokenizer.no_speech, no_timestamps=tokenizer.no_timestamps,
                   timestamp_begin=tokenizer.timestamp_begin, transcribe=tokenizer.transcribe,
                   translate=tokenizer.translate, blank=tuple(tokenizer.encode(" ")),
                   non_speech=tuple(tokenizer.non_speech_tokens), sot_sequence=tuple(tokenizer.sot_sequence))

    @classmethod
    def from_transformers(cls, tokenizer: Any, language: str | None = None,
                          task: str = "transcribe") -> WhisperTokens:
        """The ids of a ``transformers`` Whisper tokenizer (``WhisperTokenizer``, a
        ``WhisperProcessor``'s ``tokenizer``), by the special tokens' names.

        Args:
            language: the language code of the start sequence (``"en"``); None: ``"en"`` where the
                tokenizer has ``<|en|>``, else an English-only start sequence ``(sot,)``.
            task: ``"transcribe"`` or ``"translate"`` (read only with a language).

        Raises:
            ValueError: a special token, the language or the task missing from its vocabulary.
        """
        vocab = tokenizer.get_vocab()

        def ids(name: str) -> int:
            if name not in vocab:
                raise ValueError(f"the tokenizer has no {name}: it is not a Whisper tokenizer")
            return int(vocab[name])

        if task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate'; got {task!r}")
        if language is None and "<|en|>" in vocab:
            language = "en"
        sot = ids("<|startoftranscript|>")
        start = (sot,) if language is None else (sot, ids(f"<|{language}|>"), ids(f"<|{task}|>"))
        encode = lambda text: list(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
        return cls(eot=ids("<|endoftext|>"), sot=sot, sot_prev=ids("<|startofprev|>"), sot_lm=ids("<|startoflm|>"),
                   no_speech=vocab.get("<|nospeech|>", vocab.get("<|nocaptions|>")),
                   no_timestamps=ids("<|notimestamps|>"), timestamp_begin=ids("<|0.00|>"),
                   transcribe=ids("<|transcribe|>"), translate=ids("<|translate|>"), blank=tuple(encode(" ")),
                   non_speech=non_speech_ids(encode), sot_sequence=start)


def non_speech_ids(encode: Callable[[str], list[int]]) -> tuple[int, ...]:
    """The ids of the symbols that are not speech (openai/whisper's ``Tokenizer.non_speech_tokens``,
    what ``suppress_tokens=-1`` bans), by a tokenizer's ``encode(text) -> ids`` (no special tokens):
    each symbol alone or after a space where it is one token (the first token of the musical
    signs, whatever their length), and the first token of ``" -"`` and ``" '"``."""
    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += ["<<", ">>", "<<<", ">>>", "--", "---", "-(", "-[", "('", '("', "((", "))", "(((", ")))", "[[", "]]",
                "{{", "}}", "♪♪", "♪♪♪"]
    miscellaneous = set("♩♪♫♬♭♮♯")
    result = {encode(" -")[0], encode(" '")[0]}
    for symbol in symbols + sorted(miscellaneous):
        for ids in (encode(symbol), encode(" " + symbol)):
            if len(ids) == 1 or symbol in miscellaneous:
                result.add(ids[0])
    return tuple(sorted(result))


def initial_tokens(tokens: WhisperTokens, *, timestamps: bool = True, prompt: Sequence[int] = (),
                   prefix: Sequence[int] = (), n_ctx: int = 448, sample_len: int | None = None) -> list[int]:
    """The decoder prompt of one window (openai/whisper's ``_get_initial_tokens``).

    Args:
        tokens: the special ids.
        timestamps: False appends ``<|notimestamps|>`` to the start sequence.
        prompt: the previous text's ids; given, ``<|startofprev|>`` and its last ``n_ctx // 2 - 1``
            ids come first.
        prefix: ids the text must start with; its last ``n_ctx // 2 - sample_len`` are kept
            (with ``sample_len``).
        n_ctx: the decoder's context (``n_text_ctx``, 448).
        sample_len: the most tokens the window generates (None: no cut of the prefix).

    Returns:
        The prompt's ids; the generated tokens start after them.
    """
    out = list(tokens.sot_sequence) + ([] if timestamps else [tokens.no_timestamps])
    if prefix:
        kept = list(prefix)
        if sample_len is not None:
            kept = kept[-(n_ctx // 2 - sample_len):]
        out += kept
    if prompt:
        out = [tokens.sot_prev] + list(prompt)[-(n_ctx // 2 - 1):] + out
    return out


def suppressed_ids(tokens: WhisperTokens, suppress_tokens: Sequence[int] | None = (-1,)) -> tuple[int, ...]:
    """The ids ``suppress_tokens`` bans at every step (openai/whisper's ``_get_suppress_tokens``):
    the given ids (``-1`` among them stands for :attr:`WhisperTokens.non_speech`), always with the
    task, start and no-speech tokens; sorted, each once. None or empty: those alone."""
    given = [] if not suppress_tokens else [int(t) for t in suppress_tokens]
    for t in given:
        if t < -1:
            raise ValueError(f"suppress_tokens holds {t}: ids are >= 0, or -1 for the non-speech symbols")
    ids = [t for t in given if t >= 0] + (list(tokens.non_speech) if -1 in given else [])
    ids += [tokens.transcribe, tokens.translate, tokens.sot, tokens.sot_prev, tokens.sot_lm]
    if tokens.no_speech is not None:
        ids.append(tokens.no_speech)
    return tuple(sorted(set(ids)))
