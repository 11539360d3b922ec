"""A trie of token sequences as CSR arrays, built by whole-array operations from up to millions of
sequences, saved and loaded as one safetensors file.

Layout (``n`` nodes, ``n - 1`` edges): node 0 is the root; nodes are numbered breadth-first, and
within a depth by ``(parent, token)``, so edge ``e`` leads to node ``e + 1`` and the edges of node
``j`` are the contiguous run ``first[j]:first[j + 1]``, sorted by token. A build is one
``np.unique`` over ``parent * width + token`` per depth (a loop over the L positions, never over
the items), so a million items of 4 tokens build in about a second and load (three arrays
read, one repeat to rebuild the lookup keys) in a few tens of milliseconds. :class:`DeviceTrie`
holds copies of the arrays on a torch device, read there for logits that live there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMAT", "DeviceTrie", "Trie", "checked_trie"]

FORMAT = "beamsearch.catalogue/1"
"""The ``format`` entry of a saved catalogue's safetensors metadata."""


def _check_keys(nodes: int, width: int, name: str = "the trie") -> None:
    """The keys ``node * width + token`` of a trie of ``nodes`` nodes (tokens ``< width``), at most
    ``nodes * width - 1``, must fit int64, and ``width`` too (numpy would wrap silently)."""
    if nodes * width >= 2**63:
        raise ValueError(f"{name}: a trie of {nodes} nodes over token ids up to {width - 1} does not fit its int64 "
                         "keys (nodes x (largest id + 1) must be < 2**63); token ids are a vocabulary's, < V")


@dataclass(frozen=True, eq=False)
class Trie:
    """A trie of non-empty token sequences (ids >= 0) as arrays.

    Attributes:
        first: int64 ``[n + 1]``: node j's edges are ``first[j]:first[j + 1]`` (edge e leads to
            node ``e + 1``).
        token: int64 ``[n - 1]``: each edge's token (ascending within a node's run).
        ends: bool ``[n]``: an item ends at the node.
        width: one more than the largest token id (1 for a trie of nothing but the root).
        key: int64 ``[n - 1]``, sorted: ``parent * width + token`` of every edge (the lookup of
            :meth:`step`), derived from the rest.
    """

    first: np.ndarray
    token: np.ndarray
    ends: np.ndarray
    width: int
    key: np.ndarray = field(init=False, repr=False)
    _devices: dict[str, DeviceTrie] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        _check_keys(self.n_nodes, self.width)  # step() looks up from any node
        parent = np.repeat(np.arange(self.ends.shape[0], dtype=np.int64), np.diff(self.first))  # --> [n - 1]
        object.__setattr__(self, "key", parent * self.width + self.token)

    def on(self, device: Any) -> DeviceTrie:
        """The arrays :meth:`children` and :meth:`ending` read, on a torch ``device`` (copied
        there once, then kept)."""
        found = self._devices.get(str(device))
        if found is None:
            found = self._devices[str(device)] = DeviceTrie(self, device)
        return found

    @property
    def n_nodes(self) -> int:
        return int(self.ends.shape[0])

    @property
    def n_items(self) -> int:
        """The distinct items (one per node where one ends)."""
        return int(np.count_nonzero(self.ends))

    @property
    def depth(self) -> int:
        """The longest item's length (0 for the root alone): the levels below the root, found one
        level at a time (every node's children at once)."""
        level, depth = np.zeros(1, np.int64), 0
        while True:
            start, count = self.first[level], self.first[level + 1] - self.first[level]
            total = int(count.sum())
            if total == 0:
                return depth
            level = np.arange(total) - np.repeat(np.cumsum(count) - count - start, count) + 1  # the children's ids
            depth += 1

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (the lookup keys included)."""
        return int(self.first.nbytes + self.token.nbytes + self.ends.nbytes + self.key.nbytes)

    @staticmethod
    def build(items: np.ndarray, lengths: np.ndarray) -> Trie:
        """The trie of ``items``: int64 ``[M, L]``, row i's item its first ``lengths[i]`` ids
        (``lengths`` int64 ``[M]``, each in ``[1, L]``; what follows is ignored). Repeats count
        once. One ``np.unique`` per position, over the items that are that long."""
        m, longest = items.shape
        width = int(items[np.arange(longest) < lengths[:, None]].max()) + 1 if m else 1
        node = np.zeros(m, np.int64)  # --> [M]: the node each item has reached
        tokens, parents, count = [], [], 1
        for d in range(longest):  # positions, each one whole-array pass over the items
            at = np.flatnonzero(lengths > d)
            _check_keys(count, width, "outputs")  # this depth's parents are nodes < count
            key = node[at] * width + items[at, d]
            uniq, inverse = np.unique(key, return_inverse=True)  # sorted by (parent, token)
            node[at] = count + inverse
            parents.append(uniq // width)
            tokens.append(uniq % width)
            count += uniq.shape[0]
        _check_keys(count, width, "outputs")  # the trie's own lookups (Trie.step) run from every node
        parent = np.concatenate(parents) if parents else np.zeros(0)  # its dtype: searchsorted's input only
        ends = np.zeros(count, dtype=bool)
        ends[node] = True
        first = np.searchsorted(parent, np.arange(count + 1)).astype(np.int64)
        token = np.concatenate(tokens) if tokens else np.zeros(0)  # made int64 below
        return Trie(first, token.astype(np.int64), ends, width)

    def step(self, node: np.ndarray, token: np.ndarray) -> np.ndarray:
        """int64 ``[k]``: the child of ``node[i]`` by ``token[i]``; -1 where there is none or
        ``node[i]`` is -1 (off the trie)."""
        if self.key.shape[0] == 0:
            return np.full(node.shape[0], -1, np.int64)
        key = node * self.width + token  # negative for node -1: matches no edge, stays -1
        at = np.minimum(np.searchsorted(self.key, key), self.key.shape[0] - 1)
        found = (node >= 0) & (token < self.width) & (self.key[at] == key)
        return np.where(found, at + 1, -1)

    def walk(self, tokens: np.ndarray) -> np.ndarray:
        """int64 ``[k]``: the node each row of ``tokens [k, t]`` reaches from the root (-1: off)."""
        node = np.zeros(tokens.shape[0], dtype=np.int64)
        for j in range(tokens.shape[1]):  # positions, each a vectorized lookup over the rows
            node = self.step(node, tokens[:, j])
        return node

    def children(self, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The children of each row's node (``node`` int64 ``[k]``, -1: none) as pairs
        ``(rows [p], tokens [p])``, row-major, tokens ascending within a row."""
        on = np.flatnonzero(node >= 0)
        start = self.first[node[on]]
        count = self.first[node[on] + 1] - start
        rows = np.repeat(on, count)  # --> [p], one entry per (row, child)
        edge = np.arange(rows.shape[0]) - np.repeat(np.cumsum(count) - count - start, count)
        return rows, self.token[edge]

    def ending(self, node: np.ndarray) -> np.ndarray:
        """bool ``[k]``: rows whose node is one where an item ends (False off the trie: -1 reads the
        root's entry, never an end since every item is non-empty)."""
        return self.ends[np.maximum(node, 0)]

    def items(self) -> list[tuple[int, ...]]:
        """Every distinct item, in the trie's order (shorter first, then by tokens). For checks
        and small tries: a Python tuple per item."""
        parent = np.repeat(np.arange(self.n_nodes), np.diff(self.first))  # --> [n - 1]: node e + 1's parent
        out = []
        for j in np.flatnonzero(self.ends).tolist():
            path = []
            while j:
                path.append(int(self.token[j - 1]))
                j = int(parent[j - 1])
            out.append(tuple(reversed(path)))
        return out

    def save(self, path: str | Path, eos: np.ndarray) -> None:
        """Write the trie and the eos ids (int64 ``[E]``) to one safetensors file."""
        from safetensors.numpy import save_file

        token = self.token.astype(np.int32) if self.width <= np.iinfo(np.int32).max else self.token
        save_file({"first": self.first, "token": token, "ends": self.ends.astype(np.uint8), "eos": eos},
                  str(path), metadata={"format": FORMAT, "width": str(self.width)})

    @staticmethod
    def load(path: str | Path) -> tuple[Trie, np.ndarray]:
        """``(trie, eos ids)`` read from a file :meth:`save` wrote, its arrays checked
        (:func:`checked_trie`).

        Raises:
            ValueError: the file is not a safetensors file of a saved catalogue, or one of its
                fields is not what :meth:`save` writes (named, with the file).
        """
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
                if meta.get("format") != FORMAT:
                    raise ValueError(f"catalogue file {str(path)!r} is not a saved catalogue (its safetensors "
                                     f"metadata has format {meta.get('format')!r}, not {FORMAT!r})")
                stored = set(f.keys())  # (a safetensors file handle has no `in`)
                missing = [name for name in ("first", "token", "ends", "eos") if name not in stored]
                if missing:
                    raise ValueError(f"catalogue file {str(path)!r} has no field {missing[0]!r} (a saved catalogue "
                                     "has first, token, ends and eos)")
                arrays = {name: f.get_tensor(name) for name in ("first", "token", "ends", "eos")}
        except (OSError, RuntimeError, SafetensorError) as e:
            raise ValueError(f"catalogue file {str(path)!r} cannot be read as safetensors: {e}") from None
        return checked_trie(f"catalogue file {str(path)!r}", arrays, meta.get("width"))


def checked_trie(where: str, arrays: dict[str, np.ndarray], width: Any) -> tuple[Trie, np.ndarray]:
    """``(trie, eos ids int64 [E])`` of a saved catalogue's ``first``, ``token``, ``ends``, ``eos``
    and ``width`` (its metadata's text), checked to be a trie :meth:`Trie.build` could have made:
    offsets from 0 to the edge count, never decreasing; tokens in ``[0, width)``, ascending and
    distinct among a node's children; every edge leading to a node after its parent (so no cycle,
    and every node reached once from the root); no entry at the root, one at every leaf. Each
    check is one pass over the nodes or the edges.

    Raises:
        ValueError: ``where``, then the field and what is wrong with it.
    """
    def bad(field: str, why: str) -> ValueError:
        return ValueError(f"{where}: field {field!r} {why}")

    if not (isinstance(width, str) and width.isascii() and width.isdigit() and int(width) >= 1):
        raise bad("width", f"(metadata) must be a positive integer, one more than the largest token id; got {width!r}")
    for name in ("first", "token", "ends", "eos"):
        a = arrays[name]
        if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or (name == "ends" and a.dtype == np.bool_)):
            raise bad(name, f"must be a 1-D array of integers; got shape {a.shape} dtype {a.dtype}")
    token, ends, eos, wide = arrays["token"], arrays["ends"], arrays["eos"], int(width)
    n = ends.shape[0]
    if n == 0 or ((ends != 0) & (ends != 1)).any():
        raise bad("ends", f"must hold 0 or 1 for each node, the root first; got {ends[:8].tolist()!r:.80}")
    if arrays["first"].shape[0] != n + 1 or token.shape[0] != n - 1:
        raise bad("first", f"must hold one offset per node and one more ({n + 1}), token one id per edge ({n - 1}); "
                           f"got {arrays['first'].shape[0]} offsets and {token.shape[0]} tokens for {n} nodes")
    first = arrays["first"].astype(np.int64)
    count = np.diff(first)  # --> [n]: each node's edges
    if int(first[0]) != 0 or int(first[-1]) != n - 1 or (count < 0).any():
        raise bad("first", f"must rise from 0 to the edge count {n - 1} and never decrease; got "
                           f"{first[:8].tolist()!r:.60} ... {int(first[-1])}")
    back = np.flatnonzero((count > 0) & (first[:-1] < np.arange(n)))
    if back.size:  # edge e leads to node e + 1: node j's first edge must lead past j (else a cycle, or cut off)
        j = int(back[0])
        raise bad("first", f"makes edge {int(first[j])} of node {j} lead to node {int(first[j]) + 1}, not after it: "
                           "every node's edges lead to later nodes (else a cycle, or nodes the root never reaches)")
    lo, hi = (int(token.min()), int(token.max())) if token.size else (0, 0)
    if lo < 0 or hi >= wide:
        raise bad("token", f"must hold ids in [0, width) = [0, {wide}); got ids from {lo} to {hi}")
    leaf = np.flatnonzero((count == 0) & (ends == 0))
    if ends[0] or leaf.size:
        raise bad("ends", "marks the root as an entry (entries are non-empty)" if ends[0] else
                  f"leaves node {int(leaf[0])} with no child and no entry ending there")
    if eos.shape[0] == 0 or int(eos.min()) < 0:
        raise bad("eos", f"must hold one or more ids >= 0; got {eos.tolist()!r:.80}")
    _check_keys(n, wide, where)
    trie = Trie(first, token.astype(np.int64), ends.astype(bool), wide)
    unsorted = np.flatnonzero(trie.key[1:] <= trie.key[:-1])  # parent * width + token: ascending iff sorted children
    if unsorted.size:
        e = int(unsorted[0])
        raise bad("token", f"must be ascending and distinct among a node's children; node {int(trie.key[e]) // wide} "
                           f"has {int(trie.token[e])} then {int(trie.token[e + 1])}")
    return trie, eos.astype(np.int64)


class DeviceTrie:
    """A trie's ``first``, ``token`` and ``ends`` as torch tensors on one device, read there by
    whole-tensor operations: :meth:`children` and :meth:`ending` of :class:`Trie`, for node ids
    that are a tensor on that device (one synchronization: the number of pairs)."""

    def __init__(self, trie: Trie, device: Any) -> None:
        import torch

        self.first = torch.from_numpy(trie.first).to(device)
        self.token = torch.from_numpy(trie.token).to(device)
        self.ends = torch.from_numpy(trie.ends).to(device)

    def children(self, node: Any) -> tuple[Any, Any]:
        """``(rows [p], tokens [p])`` (int64 tensors), as :meth:`Trie.children` gives them."""
        import torch

        on = torch.nonzero(node >= 0).reshape(-1)
        start = self.first[node[on]]
        count = self.first[node[on] + 1] - start
        total = int(count.sum())
        rows = torch.repeat_interleave(on, count, output_size=total)  # --> [p], one entry per (row, child)
        shift = torch.repeat_interleave(torch.cumsum(count, 0) - count - start, count, output_size=total)
        return rows, self.token[torch.arange(total, device=node.device) - shift]

    def ending(self, node: Any) -> Any:
        """bool ``[k]`` tensor: rows whose node is one where an item ends (-1, off the trie, reads
        the root's entry: never an end)."""
        return self.ends[node.clamp(min=0)]
