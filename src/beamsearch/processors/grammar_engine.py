"""The grammar engine under :class:`beamsearch.processors.Grammar`: llguidance, imported lazily.

Three things live here: the llguidance tokenizer of a vocabulary (built once per tokenizer, its
size and eos ids; the ``TOKENIZER_CACHE_SIZE`` most recently used kept), the compiled grammar (one
llguidance matcher per grammar text given to the engine and tokenizer; the ``CACHE_SIZE`` most
recently used kept; every row's matcher is a copy of it), and the two batched calls of a step:
every row's allowed-token bitmask filled in one call (llguidance's executor, in parallel from
``PARALLEL_ROWS`` rows), every row's matcher advanced by its new token. llguidance is the
optional ``grammar`` extra; why it and not xgrammar is in ``docs/grammar.md``.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.extras import install_hint

__all__ = ["CACHE_SIZE", "MAX_SCHEMA_DEPTH", "TOKENIZER_CACHE_SIZE", "Compiled", "compile_grammar", "engine",
           "executor", "unpack_bits"]

KINDS = ("json_schema", "lark", "regex")
CACHE_SIZE = 64  # compiled grammars kept (least recently used dropped)
TOKENIZER_CACHE_SIZE = 8  # llguidance tokenizers kept (least recently used dropped): each holds its vocabulary's trie
MAX_SCHEMA_DEPTH = 127
"""The deepest JSON Schema taken: objects and arrays nested 127 levels (the grammar engine's JSON
reader stops at 128)."""
PARALLEL_ROWS = 64  # masks of at least this many rows are filled in parallel (BENCHMARKS.md, grammar)
_COMPILED: OrderedDict[tuple[Any, ...], Compiled] = OrderedDict()
_TOKENIZERS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_EXECUTORS: dict[int | None, Any] = {}  # this process's llguidance thread pools, by thread count


def engine() -> Any:
    """The ``llguidance`` module, or an ImportError that names the extra to install."""
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401  (the bitmask helpers)
    except ImportError as e:  # an optional extra
        raise ImportError(f"beamsearch.processors.Grammar needs the llguidance package: {install_hint('grammar')}, "
                          "or pip install llguidance==1.9.1") from e
    return llguidance


@dataclass(frozen=True, eq=False)
class Compiled:
    """A grammar compiled for a tokenizer: what every row's matcher is copied from.

    Attributes:
        root: the llguidance matcher before any token (never advanced itself).
        n_vocab: the tokenizer's vocabulary size (the bitmask covers ids ``[0, n_vocab)``).
        eos: int64 ``[E]``, the eos ids the grammar allows where it can end.
    """

    root: Any
    n_vocab: int
    eos: np.ndarray

    def fill(self, matchers: Sequence[Any]) -> np.ndarray:
        """uint8 ``[k, 4 ceil(n_vocab / 32)]``: the tokens each matcher allows next (eos where it
        can end), packed (bit j of byte b: token ``8 b + j``; no bit at or past ``n_vocab``), all
        rows in one call of the engine (in parallel from ``PARALLEL_ROWS`` rows)."""
        llg = engine()
        bits = llg.numpy.allocate_token_bitmask(len(matchers), self.n_vocab)  # --> int32 [k, ceil(n_vocab / 32)]
        if matchers:
            pool = executor(None if len(matchers) >= PARALLEL_ROWS else 1)
            llg.numpy.fill_next_token_bitmask_par(pool, [(m, i) for i, m in enumerate(matchers)], bits)
        packed = np.ascontiguousarray(bits, dtype="<i4").view(np.uint8)  # --> [k, 4 W], little-endian bytes
        # a matcher left with no token (the vocabulary cannot spell what the grammar needs next) goes
        # into an error state whose mask holds eos: it allows nothing; eos only where it can end
        state = np.array([(m.is_error(), m.is_accepting()) for m in matchers], dtype=bool).reshape(len(matchers), 2)
        packed[state[:, 0]] = 0
        ending = np.flatnonzero(~state[:, 1])
        for e in self.eos[self.eos < self.n_vocab].tolist():
            packed[ending, e >> 3] &= np.uint8(0xFF ^ (1 << (e & 7)))
        cut = self.n_vocab >> 3  # the ids at or past n_vocab in the last word: never allowed
        if self.n_vocab & 7:
            packed[:, cut] &= np.uint8((1 << (self.n_vocab & 7)) - 1)
            cut += 1
        packed[:, cut:] = 0
        return packed

    def consume(self, matchers: Sequence[Any], tokens: np.ndarray) -> np.ndarray:
        """Advance each matcher by its token (int64 ``[k]``), in one call; bool ``[k]``: which
        accepted it (a rejected token leaves its matcher in an error state)."""
        # one call per row: cheaper than the executor's parallel call, whose dispatch costs more
        # than advancing a matcher by one token
        return np.fromiter((m.consume_token(t) for m, t in zip(matchers, tokens.tolist(), strict=True)), bool)


def executor(threads: int | None) -> Any:
    """This process's llguidance executor of ``threads`` threads (None: llguidance's default, 80%
    of the CPUs up to 32), made on first use. Masks of ``PARALLEL_ROWS`` rows or more are filled
    on the default one, fewer on one thread (waking a pool costs more than filling a few masks,
    and much more on a busy machine). An executor's threads do not survive a fork: a child process
    makes its own (the parent's would wait forever on threads the child does not have)."""
    pool = _EXECUTORS.get(threads)
    if pool is None:
        pool = _EXECUTORS[threads] = engine().LLExecutor(threads)
    return pool


def _forget_executors() -> None:
    _EXECUTORS.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_executors)


def unpack_bits(bits: np.ndarray, n_vocab: int) -> np.ndarray:
    """bool ``[k, n_vocab]`` from a packed mask uint8 ``[k, B]`` (bit j of byte b: token ``8 b + j``)."""
    return np.unpackbits(bits, axis=1, count=n_vocab, bitorder="little").view(bool)


def compile_grammar(kind: str, source: Any, tokenizer: Any, eos: np.ndarray, options: dict[str, Any] | None
                    ) -> Compiled:
    """The grammar ``source`` of ``kind`` compiled for ``tokenizer``, from the cache when it holds
    it: the cache's key is the grammar text the engine is given (a schema's keys in their order:
    they fix the order of the output's keys) and the tokenizer's.

    Raises:
        ValueError: the engine refuses the grammar (its message is included), or the grammar allows
            no output (its language is empty, or no token can begin any of its texts).
    """
    llg = engine()
    lltok, tok_key = _lltokenizer(llg, tokenizer, eos)
    text = lark_text(llg, kind, source, options)
    key = (kind, text, tok_key)
    hit = _COMPILED.get(key)
    if hit is not None:
        _COMPILED.move_to_end(key)
        return hit
    root = llg.LLMatcher(lltok, text, log_level=0)
    shown = source if isinstance(source, str) else json.dumps(source)
    if root.is_error():
        raise ValueError(f"{kind} {shown!r:.200} is refused by the grammar engine: {root.get_error()}")
    compiled = Compiled(root, int(lltok.vocab_size), eos)
    if not compiled.fill([root.deep_copy()]).any():  # the engine found no token, not even eos, at the start
        raise ValueError(f"{kind} {shown!r:.200} allows no output: its language is empty (a rule or $ref with no "
                         "finite derivation, a character class of no character, ...) or no token of the "
                         "tokenizer can begin any of its texts")
    _COMPILED[key] = compiled
    if len(_COMPILED) > CACHE_SIZE:
        del _COMPILED[next(iter(_COMPILED))]  # the least recently used
    return compiled


def lark_text(llg: Any, kind: str, source: Any, options: dict[str, Any] | None) -> str:
    """The grammar as llguidance's Lark text, with forcing off (``no_forcing``): the engine then
    allows every tokenization of an accepted text, not only the tokenizer's own, so the search
    ranks all of them (as the brute force over token sequences does). A JSON Schema is embedded
    with ``%json``, its keys in their order; its options (sorted by name): compact JSON (no
    whitespace between tokens), then the schema's own ``x-guidance``, then ``options``."""
    if kind == "json_schema":
        schema = json_schema(source)
        own = schema.get("x-guidance", {})
        if not isinstance(own, dict):
            raise ValueError(f"json_schema has an x-guidance that is not an object (the grammar engine's JSON "
                             f"options, e.g. {{\"whitespace_flexible\": true}}); got {own!r:.80}")
        guidance = {"whitespace_flexible": False, **own, **(options or {})}
        schema = {**schema, "x-guidance": dict(sorted(guidance.items()))}
        body = "start: %json " + json.dumps(schema)
    elif kind == "regex":
        body = json.loads(llg.LLMatcher.grammar_from_regex(source))["grammars"][0]["lark_grammar"]
    else:
        body = source
    return body + '\n%llguidance {"no_forcing": true}\n'  # last: the engine's line numbers are the source's


def json_schema(source: Any) -> dict[str, Any]:
    """The schema of ``source`` (a dict or its JSON text), checked: a JSON object nested at most
    ``MAX_SCHEMA_DEPTH`` levels (objects and arrays)."""
    deep = f"json_schema is nested more than {MAX_SCHEMA_DEPTH} levels deep (objects and arrays); the grammar " \
           f"engine reads at most {MAX_SCHEMA_DEPTH}"
    try:
        schema = json.loads(source) if isinstance(source, str) else source
    except RecursionError:  # deeper than Python's JSON reader goes
        raise ValueError(deep) from None
    except ValueError as e:
        raise ValueError(f"json_schema is not valid JSON text: {e}") from e
    if not isinstance(schema, dict):
        raise ValueError(f"json_schema must be a JSON object; got {source!r:.80}")
    level: list[dict | list] = [schema]  # the objects and arrays at one depth
    depth = 1
    while level:  # one level at a time, never recursing (a schema may be deeper than Python's stack)
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(deep)
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
        depth += 1
    return schema


def _lltokenizer(llg: Any, tokenizer: Any, eos: np.ndarray) -> tuple[Any, tuple[Any, ...]]:
    """llguidance's tokenizer of ``tokenizer`` (a fast Hugging Face tokenizer, or a sequence of
    token strings) with ``eos`` as its eos ids, and its cache key (a Hugging Face tokenizer's holds
    the object and its size: tokens added later make another key); the ``TOKENIZER_CACHE_SIZE``
    most recently used are kept, and a compiled grammar is dropped with its tokenizer (it keeps
    the tokenizer alive), so the caches hold at most that many tokenizers."""
    eos_key = tuple(eos.tolist())
    vocab = isinstance(tokenizer, (list, tuple))
    # a Hugging Face tokenizer's key holds the tokenizer itself: a compiled grammar in the cache keeps
    # it alive, so no tokenizer made later can take its id and be served a grammar compiled for another
    key = (eos_key, tuple(tokenizer)) if vocab else (eos_key, len(tokenizer), tokenizer)  # len: added tokens included
    found = _TOKENIZERS.get(key)
    if found is not None:
        _TOKENIZERS.move_to_end(key)
        return found, key
    if vocab:
        found = llg.LLTokenizer(llg.TokenizerWrapper(_VocabTokenizer(tokenizer, eos_key)), eos_token=list(eos_key),
                                slices=[])
    else:
        import llguidance.hf

        try:
            found = llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer), eos_token=list(eos_key))
        except ValueError as e:  # e.g. a tokenizer with no decoder: its tokens' bytes are unknown
            raise ValueError(f"tokenizer {type(tokenizer).__name__} cannot be read by the grammar engine (it needs "
                             f"each token's bytes, from the tokenizer's model and decoder): {e}") from None
    _TOKENIZERS[key] = found
    if len(_TOKENIZERS) > TOKENIZER_CACHE_SIZE:  # the least recently used goes, with the grammars that keep it alive
        dropped = next(iter(_TOKENIZERS))
        del _TOKENIZERS[dropped]
        for compiled in [k for k in _COMPILED if k[-1] == dropped]:  # the eos ids first: most differ at once
            del _COMPILED[compiled]
    return found, key


class _VocabTokenizer:
    """A vocabulary given as strings (``vocab[v]`` token v's text), as llguidance reads a
    tokenizer: each token's bytes, the eos ids (special: never text), and a greedy longest-match
    tokenization (llguidance tokenizes a grammar's literal strings with it)."""

    def __init__(self, vocab: Sequence[str], eos: tuple[int, ...]) -> None:
        self.eos_token_id = eos[0]
        self.bos_token_id = None
        self.special_token_ids = list(eos)
        self.tokens = [text.encode() for text in vocab]  # UTF-8
        self._by_length = sorted((v for v, t in enumerate(self.tokens) if t and v not in eos),
                                 key=lambda v: -len(self.tokens[v]))

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        out, i = [], 0
        while i < len(data):
            v = next((v for v in self._by_length if data.startswith(self.tokens[v], i)), None)
            if v is None:  # a byte no token starts with: skipped (the grammar can never produce it)
                i += 1
                continue
            out.append(v)
            i += len(self.tokens[v])
        return out
