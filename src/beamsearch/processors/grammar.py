"""Outputs restricted to a grammar: a JSON Schema, a Lark (EBNF) grammar or a regular expression,
through a grammar engine (llguidance, the optional ``grammar`` extra).

:class:`Grammar` is a logits processor that carries a state per row: each live row has its own
matcher, the engine's incremental parser of the row's generated tokens. The search keeps the
matchers beside the rows (``Beam.carried``, :class:`~beamsearch.processors.RowStates`): when a
row is kept its parent's matcher is moved to it, or forked (copied) for a second child of the same
parent, then advanced by the row's new token; a row that leaves drops its matcher. No row's prefix
is ever replayed, so a step costs the same at token 10 as at token 1000.

Per step: every row's allowed tokens are filled into one bitmask by one engine call (in
parallel), sent packed to the logits' backend (numpy or torch, on their device) and applied there
(``Backend.keep_bits``: -inf added where a bit is 0, touching only a row's exceptions where it
is mostly allowed or mostly masked): a token the grammar does not allow becomes -inf before
log_softmax, so the search ranks the model's distribution renormalized over the allowed tokens.
Where every row allows a handful, those pairs alone are ranked (``StepContext.support``).
An eos id is allowed only where the grammar can end. A row whose grammar allows nothing (a token
it rejected was forced on it: a forced prefix, a scored target) gets no token and dies.

The grammar constrains the generated tokens only (every row starts at the grammar's start, the
prompt is not read). Guarantees and limits: ``docs/grammar.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.backends.bits import exceptions
from beamsearch.core import validate as check
from beamsearch.core.state import concat_state, select_state
from beamsearch.processors._base import RowCarrier, StepContext
from beamsearch.processors.grammar_engine import KINDS, Compiled, compile_grammar, unpack_bits

__all__ = ["Grammar", "MatcherRows"]

SUPPORT_SHARE = 256
"""The allowed pairs go to the selection (``StepContext.support``, ranked alone by sorting them on
the host) when they are at most 1/256 of ``[k, V]``: about 125 per row at V = 32,000, where the
sort costs less than a pass over the array (bench_grammar.py)."""


class MatcherRows:
    """The grammar matchers of ``k`` rows (a :class:`~beamsearch.processors.RowStates`).

    Attributes:
        compiled: the compiled grammar the matchers were copied from.
        matchers: ``k`` llguidance matchers, row i's at i.
        dead: bool ``[k]``: a row that took a token its grammar rejects (it allows nothing since).
    """

    __slots__ = ("compiled", "matchers", "dead")

    def __init__(self, compiled: Compiled, matchers: list[Any], dead: np.ndarray) -> None:
        self.compiled, self.matchers, self.dead = compiled, matchers, dead

    def __len__(self) -> int:
        return len(self.matchers)

    def advance(self, tokens: np.ndarray) -> MatcherRows:
        """Each row's matcher advanced by its token (int64 ``[k]``), in one engine call; these
        rows' matchers are moved into the result (this object is consumed)."""
        ok = self.compiled.consume(self.matchers, np.asarray(tokens, dtype=np.int64))
        return MatcherRows(self.compiled, self.matchers, self.dead | ~ok)

    def allowed_bits(self) -> np.ndarray:
        """uint8 ``[k, B]``, ``8 B >= n_vocab``: each row's allowed next tokens, packed (bit j of
        byte b: token ``8 b + j``; none for a dead row)."""
        bits = self.compiled.fill(self.matchers)
        bits[self.dead] = 0
        return bits

    def allowed(self) -> np.ndarray:
        """bool ``[k, n_vocab]``: each row's allowed next tokens (none for a dead row)."""
        return unpack_bits(self.allowed_bits(), self.compiled.n_vocab)


@select_state.register(MatcherRows)
def _select_matchers(rows: MatcherRows, idx: Any) -> MatcherRows:
    """Rows ``idx`` (``[k']``): a row's first occurrence takes its matcher, every further one a
    fork (a deep copy: the two rows then parse independently)."""
    if hasattr(idx, "detach"):
        idx = idx.detach().cpu().numpy()
    idx = np.asarray(idx, dtype=np.int64)
    taken = [False] * len(rows)
    out = []
    for i in idx.tolist():  # one object per kept row: a move, or a fork of a parent kept twice
        out.append(rows.matchers[i].deep_copy() if taken[i] else rows.matchers[i])
        taken[i] = True
    return MatcherRows(rows.compiled, out, rows.dead[idx])


@concat_state.register(MatcherRows)
def _concat_matchers(parts: list[MatcherRows]) -> MatcherRows:
    """The rows of ``parts`` one after the other (their matchers moved into the result)."""
    return MatcherRows(parts[0].compiled, [m for p in parts for m in p.matchers],
                       np.concatenate([p.dead for p in parts]))


@dataclass(frozen=True, eq=False)
class Grammar(RowCarrier):
    """A grammar over the generated text as a logits processor (module docstring).

    Build it with :meth:`json_schema`, :meth:`lark` or :meth:`regex`. The grammar is compiled
    once per ``(grammar, tokenizer, eos ids)`` and cached: building the same one again is free.

    Args:
        kind: ``"json_schema"``, ``"lark"`` or ``"regex"``.
        source: the schema (a dict or its JSON text), the Lark grammar text, or the pattern.
        tokenizer: a fast Hugging Face tokenizer (``PreTrainedTokenizerFast``: its tokens' bytes,
            byte-level BPE included; special tokens are never allowed, eos excepted), or a
            sequence of V strings, ``tokenizer[v]`` the text of token v.
        eos_token_id: the eos id, or a sequence of them, allowed where the grammar can end: the
            search's ``eos_token_id`` (a search with other eos ids refuses the grammar,
            :meth:`check_search_eos`). None: the Hugging Face tokenizer's ``eos_token_id``.
        options: for ``json_schema`` only, llguidance's JSON options (``whitespace_flexible``,
            ``item_separator``, ``key_separator``, ...), over the schema's own ``x-guidance``;
            by default compact JSON, no whitespace between tokens (``{"a":1,"b":[2]}``).

    Raises:
        ImportError: llguidance is not installed (the ``grammar`` extra: ``pip install -e
            '.[grammar]'`` in the beamsearch checkout).
        ValueError, TypeError: a bad argument, a grammar the engine refuses (its message), or a
            grammar that allows no output (its language is empty, or no token can begin it).
    """

    kind: str
    source: Any
    tokenizer: Any
    eos_token_id: int | Sequence[int] | None = None
    options: dict[str, Any] | None = None
    needs_history = False  # the matchers carry the rows' tokens
    _compiled: Compiled = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        _check_source(self.kind, self.source)
        _check_tokenizer(self.tokenizer)
        eos = self.eos_token_id
        if eos is None:
            eos = getattr(self.tokenizer, "eos_token_id", None)
            if eos is None:
                raise ValueError("eos_token_id is required: the tokenizer has no eos_token_id (pass the search's)")
        eos_ids = check.eos_ids("eos_token_id", eos)
        if self.options is not None and (self.kind != "json_schema" or not isinstance(self.options, dict)):
            raise ValueError(f"options must be None or a dict, for json_schema only; got {self.options!r:.80} "
                             f"for kind {self.kind!r}")
        compiled = compile_grammar(self.kind, self.source, self.tokenizer, eos_ids, self.options)
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str, tokenizer: Any, *,
                    eos_token_id: int | Sequence[int] | None = None, options: dict[str, Any] | None = None) -> Grammar:
        """JSON text valid under ``schema`` (a dict or its JSON text; JSON Schema as llguidance
        supports it: ``docs/grammar.md``)."""
        return cls("json_schema", schema, tokenizer, eos_token_id, options)

    @classmethod
    def lark(cls, grammar: str, tokenizer: Any, *, eos_token_id: int | Sequence[int] | None = None) -> Grammar:
        """Text of the Lark grammar ``grammar`` (rule ``start``; EBNF: ``|``, ``*``, ``+``, ``?``,
        ``"literals"``, ``/regex/`` terminals, ``%ignore``)."""
        return cls("lark", grammar, tokenizer, eos_token_id)

    @classmethod
    def regex(cls, pattern: str, tokenizer: Any, *, eos_token_id: int | Sequence[int] | None = None) -> Grammar:
        """Text that fully matches ``pattern`` (``re.fullmatch`` semantics, no anchors needed)."""
        return cls("regex", pattern, tokenizer, eos_token_id)

    @property
    def n_vocab(self) -> int:
        """The tokenizer's vocabulary size (ids at or above it are never allowed)."""
        return self._compiled.n_vocab

    @property
    def vocab_checks(self) -> tuple[tuple[str, Any], ...]:
        return (("eos_token_id", self._compiled.eos.tolist()),)

    def check_search_eos(self, eos: np.ndarray, name: str = "Grammar") -> None:
        """Refuse a search whose eos ids (int64 ``[E]``) are not the grammar's: the grammar allows
        its own eos ids where it can end, and the search ends rows on its own; with other ids a row
        would end where the grammar cannot, or go on past the grammar's end.

        Raises:
            ValueError: naming ``name`` (the processor as the search lists it) and both sets of ids.
        """
        mine, search = sorted(set(self._compiled.eos.tolist())), sorted(set(np.asarray(eos).tolist()))
        if mine != search:
            raise ValueError(f"{name}: the Grammar's eos_token_id {mine} is not the search's eos_token_id {search}: "
                             "build the Grammar with the search's eos_token_id")

    def start_rows(self, n: int) -> MatcherRows:
        """The matchers of ``n`` rows at the grammar's start (copies of the compiled one)."""
        root = self._compiled.root
        return MatcherRows(self._compiled, [root.deep_copy() for _ in range(n)], np.zeros(n, dtype=bool))

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        """``logits [k, V]`` with -inf wherever the row's grammar does not allow the token."""
        vocab, n_vocab = int(logits.shape[1]), self._compiled.n_vocab
        if vocab < n_vocab:
            raise ValueError(f"Grammar's tokenizer has {n_vocab} tokens but the logits have V={vocab} "
                             f"(logits shape {tuple(logits.shape)})")
        bits = ctx.row_states(self).allowed_bits()  # --> uint8 [k, B], no bit at or past n_vocab
        if 8 * bits.shape[1] < vocab:  # the model's ids past the tokenizer's: never allowed
            bits = np.pad(bits, ((0, 0), (0, -(-vocab // 8) - bits.shape[1])))
        few = exceptions(bits, vocab)
        if few is not None and few.rows.size == len(bits) and SUPPORT_SHARE * few.kept_rows.size <= bits.size * 8:
            ctx.support = (few.kept_rows, few.kept_cols)  # every row allows a handful: they alone are ranked
        return ctx.backend.keep_bits(logits, bits, few)

    def allowed_after(self, tokens: Sequence[int]) -> np.ndarray:
        """bool ``[n_vocab]``: the tokens allowed after ``tokens`` by a matcher replayed from the
        start along them (the reference a row's carried matcher equals); none if one is rejected."""
        rows = self.start_rows(1)
        for t in check.token_list("tokens", tokens, allow_empty=True):
            rows = rows.advance(np.array([t]))
        return rows.allowed()[0]

    def accepts(self, tokens: Sequence[int]) -> bool:
        """Whether the grammar accepts the token sequence (without eos) as a whole output."""
        allowed = self.allowed_after(tokens)
        return bool(allowed[self._compiled.eos].any())


def _check_source(kind: str, source: Any) -> None:
    if kind == "json_schema":
        if not isinstance(source, (dict, str)):
            raise TypeError(f"json_schema must be a dict or its JSON text; got {source!r:.80}")
    elif not isinstance(source, str):
        name = "grammar" if kind == "lark" else "pattern"
        raise TypeError(f"{name} must be a str; got {source!r:.80}")


def _check_tokenizer(tokenizer: Any) -> None:
    if isinstance(tokenizer, (list, tuple)):
        if not tokenizer:
            raise ValueError("tokenizer must not be an empty vocabulary")
        for v, text in enumerate(tokenizer):
            if not isinstance(text, str):
                raise TypeError(f"tokenizer[{v}] must be a str (the text of token {v}); got {text!r:.80}")
    elif not hasattr(tokenizer, "backend_tokenizer"):
        raise TypeError("tokenizer must be a fast Hugging Face tokenizer (PreTrainedTokenizerFast) or a list of "
                        f"token strings; got {type(tokenizer).__name__}")
