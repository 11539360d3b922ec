"""Outputs restricted to a regular language: a deterministic finite automaton over token ids.

:class:`TokenDFA` takes the automaton as a transition table ``int [S, V]`` (-1: no transition).
Each row starts in ``start`` when generation begins (the prompt is not read: the constraint covers
the generated tokens only) and moves by each token it generates. At each step a row may take the
tokens with a transition from its current state, and an eos id only when that state is accepting;
every other token becomes -inf before log_softmax. So every finished hypothesis is a token
sequence the automaton accepts, then eos.

:meth:`TokenDFA.from_regex` compiles a regular expression over the vocabulary's strings (a token
may stand for several characters, or for characters the pattern splits differently): the pattern
is parsed into a character automaton by ``interegular`` (the optional
``regex`` extra; the library that ``outlines`` used), and each token's string is run through
it from every state, all states and tokens at once. States from which no accepting state can be
reached are removed, so a row is never led into a dead end.

In a search each row's state is carried beside the row (:class:`DFARows`, a
:class:`~beamsearch.processors.RowStates`): taken with its parent and advanced by one gather for
all rows when its token is chosen, so a search that continues rows (step search's next segment)
continues their automaton states. Called outside a search, the states are found by walking the
generated tokens through the table (one vectorized gather per position). Per step: one gather of
a ``[k, V]`` additive mask (0 where allowed, -inf elsewhere; built once per dtype and device) and
one add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, Backend
from beamsearch.core import validate as check
from beamsearch.core.state import concat_state, select_state
from beamsearch.extras import install_hint
from beamsearch.processors._base import RowCarrier, StepContext
from beamsearch.processors.allowed_tokens import generated_tokens

__all__ = ["DFARows", "TokenDFA"]


class DFARows:
    """The automaton state of each of ``k`` rows (a :class:`~beamsearch.processors.RowStates`).

    Attributes:
        table: int64 ``[S + 1, V]``: the transitions, state S the sink (no transition, not accepting).
        state: int64 ``[k]``: each row's state (S: it took a token without a transition).
    """

    __slots__ = ("table", "state")

    def __init__(self, table: np.ndarray, state: np.ndarray) -> None:
        self.table, self.state = table, state

    def __len__(self) -> int:
        return int(self.state.shape[0])

    def advance(self, tokens: np.ndarray) -> DFARows:
        """Each row moved by its token (int64 ``[k]``; an eos id leads to the sink)."""
        return DFARows(self.table, self.table[self.state, np.asarray(tokens, dtype=np.int64)])


@select_state.register(DFARows)
def _select_dfa_rows(rows: DFARows, idx: Any) -> DFARows:
    if hasattr(idx, "detach"):
        idx = idx.detach().cpu().numpy()
    return DFARows(rows.table, rows.state[np.asarray(idx, dtype=np.int64)])


@concat_state.register(DFARows)
def _concat_dfa_rows(parts: list[DFARows]) -> DFARows:
    return DFARows(parts[0].table, np.concatenate([p.state for p in parts]))


@dataclass(frozen=True)
class TokenDFA(RowCarrier):
    """A finite automaton over token ids as a logits processor.

    Args:
        transitions: integer ``[S, V]`` (a numpy array or nested lists): ``transitions[s, v]`` is
            the state after token v in state s, or -1 for none. V must be the model's vocabulary
            size; the eos ids' columns must be -1 (eos is governed by ``accepting`` alone).
        start: the state every row starts in, ``[0, S)``.
        accepting: the accepting states (ids in ``[0, S)``; may be empty, then nothing finishes).
        eos_token_id: the eos id, or a sequence of them; use the search's ``eos_token_id``.
    """

    transitions: Any
    start: int
    accepting: Sequence[int]
    eos_token_id: int | Sequence[int]
    needs_history = False  # the generated tokens alone (the last t - 1 history columns) are read
    _table: np.ndarray = field(init=False, repr=False, compare=False)
    _mask: np.ndarray = field(init=False, repr=False, compare=False)
    _eos: np.ndarray = field(init=False, repr=False, compare=False)
    _on_device: dict[Any, Any] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        table = _table(self.transitions)
        n_states, vocab = table.shape
        start = check.integer("start", self.start)
        if not 0 <= start < n_states:
            raise ValueError(f"start must be a state in [0, {n_states}); got {start}")
        accepting = np.asarray(check.token_list("accepting", self.accepting, allow_empty=True), dtype=np.int64)
        if accepting.size and accepting.max() >= n_states:
            raise ValueError(f"accepting must hold states in [0, {n_states}); got {int(accepting.max())}")
        eos = check.eos_ids("eos_token_id", self.eos_token_id)
        object.__setattr__(self, "_eos", eos)
        if eos.max() >= vocab:
            raise ValueError(f"eos_token_id must be in [0, {vocab}) (the transitions' V); got {self.eos_token_id!r}")
        moves = np.argwhere(table[:, eos] >= 0)
        if moves.size:
            s, e = moves[0]
            raise ValueError(f"transitions has a transition on eos id {int(eos[e])} from state {int(s)}; the eos "
                             "columns must be -1 (eos is allowed in accepting states, by `accepting` alone)")
        # a sink state S (no transition, not accepting) stands for "no transition": walks need no test
        sink = np.where(table >= 0, table, n_states)
        object.__setattr__(self, "_table", np.vstack([sink, np.full((1, vocab), n_states, np.int64)]))
        mask = np.where(table >= 0, 0.0, NEG_INF)  # --> [S, V], additive: 0 keeps, -inf masks
        mask[np.ix_(accepting, eos)] = 0.0
        object.__setattr__(self, "_mask", np.vstack([mask, np.full((1, vocab), NEG_INF)]))

    @property
    def n_states(self) -> int:
        """S, the number of states (the internal sink not counted)."""
        return int(self._table.shape[0]) - 1

    def start_rows(self, n: int) -> DFARows:
        """``n`` rows at ``start``."""
        return DFARows(self._table, np.full(n, self.start, np.int64))

    def states(self, tokens: np.ndarray) -> np.ndarray:
        """int64 ``[k]``: the state each row of ``tokens [k, t]`` (generated tokens) reaches from
        ``start``; -1 where a token had no transition."""
        state = np.full(tokens.shape[0], self.start, dtype=np.int64)
        for j in range(tokens.shape[1]):  # positions, each one gather over the rows
            state = self._table[state, tokens[:, j]]
        return np.where(state == self.n_states, -1, state)

    def accepts(self, tokens: Sequence[int]) -> bool:
        """Whether the automaton accepts the token sequence (without eos)."""
        ids = np.asarray(check.token_list("tokens", tokens, allow_empty=True), dtype=np.int64)
        state = int(self.states(ids[None, :])[0])
        return state >= 0 and bool(self._mask[state, self._eos[0]] == 0.0)

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        vocab = self._table.shape[1]
        if logits.shape[1] != vocab:
            raise ValueError(f"TokenDFA transitions have V={vocab} columns but the logits have "
                             f"{logits.shape[1]} (logits shape {tuple(logits.shape)})")
        carried = None if ctx.carried is None else ctx.carried.get(id(self))
        if carried is not None:
            state = carried.state  # --> [k], the sink S where a row left the automaton
        else:
            state = self.states(generated_tokens(ctx))  # --> [k]
            state = np.where(state < 0, self.n_states, state)
        b = ctx.backend
        mask = self._device_mask(b, logits)  # --> [S + 1, V], on the logits' device, in their dtype
        logits += b.take_rows(mask, b.index(state, logits))  # --> [k, V]: -inf where not allowed
        return logits

    def _device_mask(self, backend: Backend, logits: Any) -> Any:
        """The additive mask beside ``logits`` (library, device, dtype), made once for each."""
        key = (backend.name, str(getattr(logits, "device", "")), str(logits.dtype))
        mask = self._on_device.get(key)
        if mask is None:
            mask = self._on_device[key] = backend.from_host(self._mask, like=logits)
        return mask

    @classmethod
    def from_regex(cls, pattern: str, vocab: Sequence[str], eos_token_id: int | Sequence[int]) -> TokenDFA:
        """The automaton of the token sequences whose joined strings fully match ``pattern``.

        Args:
            pattern: a regular expression in Python's ``re`` syntax as ``interegular`` reads it
                (``|``, ``*``, ``+``, ``?``, ``{m,n}``, groups, character classes, ``\\d \\w \\s``
                as ASCII classes, ``(?i)``); anchors, back-references and other constructs it
                does not support are a ValueError. Matching is ``re.fullmatch`` on the whole
                generated text.
            vocab: V strings, ``vocab[v]`` the text of token v. A token with an empty string, and
                every eos id, gets no transition (an empty token would loop without changing the
                text; eos is allowed in accepting states).
            eos_token_id: the eos id, or a sequence of them.

        Raises:
            ImportError: ``interegular`` is not installed (the ``regex`` extra: ``pip install -e '.[regex]'``
                in the beamsearch checkout).
            ValueError: the pattern is not supported, or no sequence of tokens matches it.
        """
        transitions, start, accepting = compile_regex(pattern, vocab, eos_token_id)
        return cls(transitions, start, accepting, eos_token_id)


def compile_regex(pattern: str, vocab: Sequence[str], eos_token_id: int | Sequence[int]
                  ) -> tuple[np.ndarray, int, list[int]]:
    """``(transitions int64 [S, V], start, accepting)`` for :meth:`TokenDFA.from_regex`."""
    try:
        import interegular
    except ImportError as e:  # an optional extra
        raise ImportError(f"TokenDFA.from_regex needs the interegular package: {install_hint('regex')}, "
                          "or pip install interegular==0.3.3") from e
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str; got {pattern!r:.80}")
    if isinstance(vocab, (str, bytes)) or not hasattr(vocab, "__len__") or len(vocab) == 0:
        raise TypeError(f"vocab must be a non-empty sequence of strings, one per token id; got {vocab!r:.80}")
    for v, text in enumerate(vocab):
        if not isinstance(text, str):
            raise TypeError(f"vocab[{v}] must be a str; got {text!r:.80}")
    eos = check.eos_ids("eos_token_id", eos_token_id)
    if eos.max() >= len(vocab):
        raise ValueError(f"eos_token_id must be in [0, {len(vocab)}) (the vocab's size); got {eos_token_id!r}")
    try:
        fsm = interegular.parse_pattern(pattern).to_fsm()
    except Exception as e:  # interegular raises its own Unsupported and parse errors
        raise ValueError(f"pattern {pattern!r} is not supported: {type(e).__name__}: {e}") from e
    chars, start, finals = _char_table(fsm)
    table = _token_table(chars, fsm.alphabet, vocab)  # --> [Sc, V]
    table[:, [v for v, text in enumerate(vocab) if text == ""]] = -1
    table[:, eos] = -1
    return _trim(table, start, finals, pattern)


def _char_table(fsm: Any) -> tuple[np.ndarray, int, np.ndarray]:
    """The character automaton as ``(int64 [Sc, A] next state or -1, start, bool [Sc] final)``,
    states renumbered 0..Sc-1, A the alphabet's symbols."""
    states = sorted(fsm.states)
    number = {s: i for i, s in enumerate(states)}
    n_symbols = max(fsm.alphabet.values(), default=-1) + 1  # an empty pattern ("", "()"): no symbol
    chars = np.full((len(states), n_symbols), -1, dtype=np.int64)
    for s, moves in fsm.map.items():  # construction only
        for symbol, nxt in moves.items():
            chars[number[s], symbol] = number[nxt]
    finals = np.zeros(len(states), dtype=bool)
    finals[[number[s] for s in fsm.finals]] = True
    return chars, number[fsm.initial], finals


def _token_table(chars: np.ndarray, alphabet: Any, vocab: Sequence[str]) -> np.ndarray:
    """int64 ``[Sc, V]``: the character state after reading each token's string from each state
    (-1: the string leaves the automaton). All states and tokens at once, one gather per
    character position."""
    n_states = chars.shape[0]
    symbol_of: dict[str, int] = {}
    width = max(len(text) for text in vocab)
    symbols = np.full((len(vocab), width), -1, dtype=np.int64)  # -1: past the token's end
    for v, text in enumerate(vocab):  # construction only: each character's symbol, once
        for j, ch in enumerate(text):
            if ch not in symbol_of:
                # a character the pattern does not name has the symbol anything_else, which
                # interegular's alphabet holds unless the pattern matches only "" (then None:
                # the dead column below)
                found = alphabet[ch]
                symbol_of[ch] = chars.shape[1] if found is None else int(found)
            symbols[v, j] = symbol_of[ch]
    # a dead state n_states (all transitions to itself) stands for -1 during the walk, and a dead
    # column chars.shape[1] for a character outside the alphabet
    padded = np.full((n_states + 1, chars.shape[1] + 1), n_states, dtype=np.int64)
    padded[:n_states, :-1] = np.where(chars >= 0, chars, n_states)
    state = np.repeat(np.arange(n_states)[:, None], len(vocab), axis=1)  # --> [Sc, V]
    for j in range(width):
        moving = symbols[:, j] >= 0  # --> [V], the tokens with a j-th character
        state[:, moving] = padded[state[:, moving], symbols[moving, j]]
    return np.where(state == n_states, -1, state)


def _trim(table: np.ndarray, start: int, finals: np.ndarray, pattern: str) -> tuple[np.ndarray, int, list[int]]:
    """Keep the states reachable from ``start`` from which a final state can be reached (through
    token transitions); renumber them in order, ``start`` first. No such start: ValueError."""
    n_states = table.shape[0]
    live = finals.copy()
    while True:  # backward closure: at most Sc rounds, each one vectorized over [Sc, V]
        grown = live | ((table >= 0) & live[table]).any(axis=1)  # live[-1]: any value, masked
        if (grown == live).all():
            break
        live = grown
    if not live[start]:
        raise ValueError(f"pattern {pattern!r} matches no sequence of the vocabulary's tokens")
    table = np.where((table >= 0) & live[table], table, -1)
    reached = np.zeros(n_states, dtype=bool)
    reached[start] = True
    while True:  # forward closure from start
        nxt = reached.copy()
        nxt[table[reached][table[reached] >= 0]] = True
        if (nxt == reached).all():
            break
        reached = nxt
    keep = np.concatenate([[start], np.flatnonzero(reached & (np.arange(n_states) != start))])
    number = np.full(n_states + 1, -1, dtype=np.int64)  # number[-1] (the last entry) maps -1 to -1
    number[keep] = np.arange(keep.shape[0])
    return number[table[keep]], 0, np.flatnonzero(finals[keep]).tolist()


def _table(transitions: Any) -> np.ndarray:
    """The transition table as int64 ``[S, V]``, checked: 2-D, integers, entries -1 or a state."""
    if hasattr(transitions, "detach"):  # a torch tensor: read on the host, once
        transitions = transitions.detach().cpu().numpy()
    table = np.asarray(transitions)
    if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 1:
        raise ValueError(f"transitions must be a 2-D table [S, V] with S >= 1 and V >= 1; got shape {table.shape}")
    if not np.issubdtype(table.dtype, np.integer):
        raise TypeError(f"transitions must hold integers (state ids, -1 for none); got dtype {table.dtype}")
    bad = (table < -1) | (table >= table.shape[0])
    if bad.any():
        s, v = np.argwhere(bad)[0]
        raise ValueError(f"transitions[{s}, {v}] is {int(table[s, v])}; entries must be -1 (no transition) or a "
                         f"state in [0, {table.shape[0]})")
    return table.astype(np.int64)

