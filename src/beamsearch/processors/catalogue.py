"""Outputs restricted to a catalogue: a trie of allowed token sequences (as in entity linking,
De Cao et al. 2021, "Autoregressive Entity Retrieval").

A row may only follow a path of the trie from its root: at each step its allowed tokens are the
children of its node, plus the eos ids where a catalogue entry ends there (an entry that is a prefix
of another allows both eos and the longer entry's next token). The constraint covers the generated
tokens only; the prompt is not part of any path. With ``max_steps`` at least one more than the
longest entry, every finished hypothesis is a catalogue entry followed by eos (a stop sequence or
``max_steps`` can still end a row earlier, on a prefix of an entry, as for any search).

The trie is arrays (edges sorted by ``(parent, token)``), so a step is a few whole-array operations:
each row's node is found by walking its generated tokens from the root (one vectorized lookup per
position, a loop over positions, not rows), then the allowed ``(row, token)`` pairs are kept and
everything else is set to -inf in three backend operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from beamsearch.core import validate as check
from beamsearch.processors._base import StepContext
from beamsearch.processors.allowed_tokens import generated_tokens, keep_pairs

__all__ = ["Catalogue"]


@dataclass(frozen=True)
class Trie:
    """A trie as arrays; node 0 is the root, ``E`` edges, ``n`` nodes.

    Attributes:
        key: int64 ``[E]``, sorted: ``parent * width + token`` of every edge.
        child: int64 ``[E]``: the node each edge leads to.
        first: int64 ``[n + 1]``: node j's edges are ``first[j]:first[j + 1]``.
        token: int64 ``[E]``: each edge's token.
        ends: bool ``[n]``: an entry ends at the node.
        width: one more than the largest token id in the trie.
    """

    key: np.ndarray
    child: np.ndarray
    first: np.ndarray
    token: np.ndarray
    ends: np.ndarray
    width: int

    @staticmethod
    def build(entries: Sequence[tuple[int, ...]]) -> Trie:
        """The trie of ``entries`` (non-empty tuples of ids >= 0). Built once, on the host."""
        children: list[dict[int, int]] = [{}]
        ends = [False]
        for entry in entries:  # construction only: a dict walk per entry token
            node = 0
            for t in entry:
                nxt = children[node].get(t)
                if nxt is None:
                    nxt = children[node][t] = len(children)
                    children.append({})
                    ends.append(False)
                node = nxt
            ends[node] = True
        parent = np.array([p for p, c in enumerate(children) for _ in c], dtype=np.int64)
        token = np.array([t for c in children for t in c], dtype=np.int64)
        child = np.array([n for c in children for n in c.values()], dtype=np.int64)
        width = int(token.max()) + 1
        order = np.argsort(parent * width + token, kind="stable")
        parent, token, child = parent[order], token[order], child[order]
        first = np.searchsorted(parent, np.arange(len(children) + 1))
        return Trie(parent * width + token, child, first, token, np.array(ends), width)

    def step(self, node: np.ndarray, token: np.ndarray) -> np.ndarray:
        """int64 ``[k]``: the child of ``node[i]`` by ``token[i]``; -1 where there is none or
        ``node[i]`` is -1 (off the trie)."""
        key = node * self.width + token  # negative for node -1: matches no edge, stays -1
        at = np.minimum(np.searchsorted(self.key, key), self.key.shape[0] - 1)
        found = (token < self.width) & (self.key[at] == key)
        return np.where(found, self.child[at], -1)

    def walk(self, tokens: np.ndarray) -> np.ndarray:
        """int64 ``[k]``: the node each row of ``tokens [k, t]`` reaches from the root (-1: off)."""
        node = np.zeros(tokens.shape[0], dtype=np.int64)
        for j in range(tokens.shape[1]):  # positions, each a vectorized lookup over the rows
            node = self.step(node, tokens[:, j])
        return node


@dataclass(frozen=True)
class Catalogue:
    """Outputs restricted to ``outputs``: each finished hypothesis is one entry, then eos.

    Args:
        outputs: a non-empty sequence of non-empty token-id sequences (ids >= 0, no eos id);
            repeats are allowed and count once.
        eos_token_id: the eos id, or a sequence of them (each is allowed where an entry ends);
            use the search's ``eos_token_id``.

    Per step and row (``[k, V]`` logits): the children of the row's trie node keep their logits,
    the eos ids too where an entry ends at the node; every other token becomes -inf. A row whose
    generated tokens left the trie (possible only when it is called on histories it did not
    constrain itself) gets no token.
    Ids at or above the model's V are a ValueError at the first step (V is the logits' width).
    """

    outputs: Sequence[Sequence[int]]
    eos_token_id: int | Sequence[int]
    needs_history = False  # the generated tokens alone (the last t - 1 history columns) are read
    _trie: Trie = field(init=False, repr=False, compare=False)
    _eos: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        eos = check.eos_ids("eos_token_id", self.eos_token_id)
        entries = _entries(self.outputs, eos)
        object.__setattr__(self, "_eos", eos)
        object.__setattr__(self, "_trie", Trie.build(entries))

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        vocab = logits.shape[1]
        if self._trie.width > vocab or int(self._eos.max()) >= vocab:
            raise ValueError(f"Catalogue token ids must be in [0, {vocab}) (the logits' V); the outputs hold ids "
                             f"up to {self._trie.width - 1} and eos_token_id {self.eos_token_id!r}")
        trie = self._trie
        node = trie.walk(generated_tokens(ctx))  # --> [k]
        on = np.flatnonzero(node >= 0)
        start, count = trie.first[node[on]], np.diff(trie.first)[node[on]]
        rows = np.repeat(on, count)  # --> [p], one entry per (row, child)
        edge = np.arange(rows.shape[0]) - np.repeat(np.cumsum(count) - count - start, count)
        ending = on[trie.ends[node[on]]]  # rows at a node where an entry ends: eos allowed
        rows = np.concatenate([rows, np.repeat(ending, self._eos.shape[0])])
        cols = np.concatenate([trie.token[edge], np.tile(self._eos, ending.shape[0])])
        return keep_pairs(ctx.backend, logits, rows, cols)


def _entries(outputs: Any, eos: np.ndarray) -> list[tuple[int, ...]]:
    """The catalogue's entries as tuples, checked: non-empty, ids >= 0, no eos id."""
    if isinstance(outputs, (str, bytes)) or not hasattr(outputs, "__len__"):
        raise TypeError(f"outputs must be a sequence of token-id sequences; got {outputs!r:.80}")
    if len(outputs) == 0:
        raise ValueError("outputs must hold at least one token-id sequence; got an empty catalogue")
    entries = [tuple(check.token_list(f"outputs[{i}]", out)) for i, out in enumerate(outputs)]
    eos_set = set(eos.tolist())
    for i, entry in enumerate(entries):
        held = eos_set.intersection(entry)
        if held:
            raise ValueError(f"outputs[{i}] holds the eos id {min(held)}: {list(entry)!r:.80}; the catalogue "
                             "lists outputs without eos (eos is allowed where an entry ends)")
    return entries
