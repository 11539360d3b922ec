"""Outputs restricted to a catalogue: a trie of allowed token sequences (as in entity linking,
De Cao et al. 2021, "Autoregressive Entity Retrieval", and generative retrieval over semantic ids,
Rajput et al. 2023, "Recommender Systems with Generative Retrieval").

A row may only follow a path of the trie from its root: at each step its allowed tokens are the
children of its node, plus the eos ids where a catalogue entry ends there (an entry that is a prefix
of another allows both eos and the longer entry's next token). The constraint covers the generated
tokens only; the prompt is not part of any path. With ``max_steps`` at least one more than the
longest entry, every finished hypothesis is a catalogue entry followed by eos (a stop sequence or
``max_steps`` can still end a row earlier, on a prefix of an entry, as for any search).

The trie is CSR arrays (:class:`~beamsearch.processors.trie.Trie`), built once by whole-array
operations. In a search each row's node id is carried beside the row (:class:`TrieRows`, a
:class:`~beamsearch.processors.RowStates`): taken with its parent and advanced by one lookup for
all rows when the row's token is chosen, never recomputed from the row's tokens. Per step the
allowed ``(row, token)`` pairs of all rows come from the CSR arrays in a few array operations (on
the host for numpy and CPU tensors; for tensors on an accelerator, on that device, from copies of
the arrays kept there: only the ``[k]`` node ids are sent), and everything else is set to -inf on
the logits' device in three backend operations; the pairs are also left on the step's context
(``ctx.support``) so that the search ranks those entries only, not the whole ``[k, V]`` array.
Called outside a search (no carried state), the nodes are found by walking the generated tokens
from the root (one vectorized lookup per position).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.select import SPARSE_FRACTION
from beamsearch.core.state import concat_state, select_state
from beamsearch.processors._base import RowCarrier, StepContext
from beamsearch.processors.allowed_tokens import generated_tokens, keep_pairs
from beamsearch.processors.trie import Trie

__all__ = ["Catalogue", "TrieRows"]


class TrieRows:
    """The trie node of each of ``k`` rows (a :class:`~beamsearch.processors.RowStates`).

    Attributes:
        trie: the catalogue's trie.
        node: int64 ``[k]``: each row's node (0: the root, nothing generated; -1: off the trie).
    """

    __slots__ = ("trie", "node")

    def __init__(self, trie: Trie, node: np.ndarray) -> None:
        self.trie, self.node = trie, node

    def __len__(self) -> int:
        return int(self.node.shape[0])

    def advance(self, tokens: np.ndarray) -> TrieRows:
        """Each row moved to its node's child by its token (int64 ``[k]``; -1 where there is none)."""
        return TrieRows(self.trie, self.trie.step(self.node, np.asarray(tokens, dtype=np.int64)))


@select_state.register(TrieRows)
def _select_trie_rows(rows: TrieRows, idx: Any) -> TrieRows:
    """Rows ``idx`` (``[k']``; a row taken twice is simply copied: a node id is a value)."""
    if hasattr(idx, "detach"):
        idx = idx.detach().cpu().numpy()
    return TrieRows(rows.trie, rows.node[np.asarray(idx, dtype=np.int64)])


@concat_state.register(TrieRows)
def _concat_trie_rows(parts: list[TrieRows]) -> TrieRows:
    """The rows of ``parts`` one after the other."""
    return TrieRows(parts[0].trie, np.concatenate([p.node for p in parts]))


@dataclass(frozen=True, eq=False)
class Catalogue(RowCarrier):
    """Outputs restricted to ``outputs``: each finished hypothesis is one entry, then eos.

    Args:
        outputs: the catalogue, one of: a non-empty sequence of non-empty token-id sequences
            (ids >= 0, no eos id); an integer array ``[M, L]`` (numpy or torch), row i's entry its
            ids before the first ``pad_id``; a sequence of strings, encoded by ``tokenizer`` (no
            special tokens added); or a :class:`~beamsearch.processors.trie.Trie`. Repeats are
            allowed and count once.
        eos_token_id: the eos id, or a sequence of them (each is allowed where an entry ends);
            use the search's ``eos_token_id``.
        pad_id: with an array ``outputs``: the id that pads the shorter entries at the end of
            their row (default -1; it may equal an eos id).
        tokenizer: with strings: a Hugging Face tokenizer (or any callable returning
            ``{"input_ids": lists}`` for a list of strings).

    Per step and row (``[k, V]`` logits): the children of the row's trie node keep their logits,
    the eos ids too where an entry ends at the node; every other token becomes -inf. A row whose
    generated tokens left the trie (a forced token outside it; or, called alone, histories it did
    not constrain itself) gets no token.
    Ids at or above the model's V are a ValueError at the first step (V is the logits' width).
    :meth:`save` writes the trie to one safetensors file and :meth:`load` reads it back.
    """

    outputs: Any
    eos_token_id: int | Sequence[int]
    pad_id: int = -1
    tokenizer: Any = None
    needs_history = False  # the generated tokens alone (the last t - 1 history columns) are read
    _trie: Trie = field(init=False, repr=False)
    _eos: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        eos = check.eos_ids("eos_token_id", self.eos_token_id)
        object.__setattr__(self, "_eos", eos)
        if isinstance(self.outputs, Trie):
            trie = self.outputs
            if trie.n_items == 0:
                raise ValueError("outputs must hold at least one token-id sequence; got an empty trie")
            if np.isin(trie.token, eos).any():
                raise ValueError(f"outputs holds an eos id ({self.eos_token_id!r}) in some entry; the catalogue lists "
                                 "outputs without eos (eos is allowed where an entry ends)")
        else:
            trie = Trie.build(*_padded(self.outputs, eos, self.pad_id, self.tokenizer))
        object.__setattr__(self, "_trie", trie)

    def __repr__(self) -> str:
        return f"Catalogue(<{self._trie.n_items} entries>, eos_token_id={self.eos_token_id!r})"

    @property
    def trie(self) -> Trie:
        """The catalogue's trie (CSR arrays: :class:`~beamsearch.processors.trie.Trie`)."""
        return self._trie

    def cut_warning(self, steps: int, name: str) -> str | None:
        """Why a search of at most ``steps`` new tokens (the setting ``name``) can end outputs that
        are not entries: its longest entry and eos need more; None when they fit. Its rows that
        follow a longer entry are cut unfinished, on a prefix of it."""
        depth = self._trie.depth
        if steps > depth:
            return None
        return (f"the catalogue's longest entry has {depth} tokens, {depth + 1} with its eos, but {name} is "
                f"{steps}: an output that follows an entry of {steps} tokens or more ends unfinished, cut to a "
                f"prefix of it (not an entry); set {name} to at least {depth + 1}")

    def save(self, path: str | Path) -> None:
        """Write the catalogue (its trie and eos ids) to ``path``, one safetensors file."""
        self._trie.save(path, self._eos)

    @classmethod
    def load(cls, path: str | Path, eos_token_id: int | Sequence[int] | None = None) -> Catalogue:
        """The catalogue :meth:`save` wrote to ``path``; ``eos_token_id`` replaces the saved eos
        ids (None: the saved ones).

        Raises:
            ValueError: not such a file, or an eos id that is a token of some entry.
        """
        trie, eos = Trie.load(path)
        return cls(trie, eos.tolist() if eos_token_id is None else eos_token_id)

    @classmethod
    def from_file(cls, path: str | Path, eos_token_id: int | Sequence[int] | None = None) -> Catalogue:
        """The catalogue in file ``path``: a safetensors file :meth:`save` wrote (recognized by its
        content), else a text file with one entry per line, its token ids separated by spaces
        (blank lines skipped). ``eos_token_id``: the search's eos ids (required for a text file;
        for a saved one, None keeps the saved ids).

        Raises:
            ValueError: an unreadable file, a line that is not token ids, or a bad catalogue.
        """
        path = Path(path)
        try:
            with open(path, "rb") as f:
                head = f.read(9)
        except OSError as e:
            raise ValueError(f"catalogue file {str(path)!r} cannot be read: {e.strerror}") from None
        if len(head) == 9 and head[8:] == b"{":  # safetensors: an 8-byte header length, then its JSON
            return cls.load(path, eos_token_id)
        if eos_token_id is None:
            raise ValueError(f"eos_token_id is required with a text catalogue file ({str(path)!r})")
        return cls(_text_entries(path), eos_token_id)

    def start_rows(self, n: int) -> TrieRows:
        """``n`` rows at the root."""
        return TrieRows(self._trie, np.zeros(n, np.int64))

    def nodes(self, ctx: StepContext) -> np.ndarray:
        """int64 ``[k]``: each row's node, as carried by the search, else walked from the root
        along the row's generated tokens."""
        carried = None if ctx.carried is None else ctx.carried.get(id(self))
        return carried.node if carried is not None else self._trie.walk(generated_tokens(ctx))

    def allowed_pairs(self, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The allowed ``(rows [p], tokens [p])`` of rows at ``node`` (int64 ``[k]``): each row's
        children, then the eos ids of the rows where an entry ends."""
        rows, cols = self._trie.children(node)
        ending = np.flatnonzero(self._trie.ending(node))  # rows at a node where an entry ends: eos allowed
        rows = np.concatenate([rows, np.repeat(ending, self._eos.shape[0])])
        cols = np.concatenate([cols, np.tile(self._eos, ending.shape[0])])
        return rows, cols

    def allowed_pairs_on(self, node: np.ndarray, like: Any) -> tuple[Any, Any]:
        """:meth:`allowed_pairs` computed on the device of the torch tensor ``like`` from the
        trie's arrays kept there (only the ``[k]`` node ids are sent): int64 tensors ``[p]``."""
        import torch

        trie = self._trie.on(like.device)
        at = torch.from_numpy(node).to(like.device)
        rows, cols = trie.children(at)
        ending = torch.nonzero(trie.ending(at)).reshape(-1)
        eos = torch.from_numpy(self._eos).to(like.device)
        rows = torch.cat([rows, torch.repeat_interleave(ending, eos.shape[0])])
        return rows, torch.cat([cols, eos.repeat(ending.shape[0])])

    def __call__(self, logits: Any, ctx: StepContext) -> Any:
        vocab = logits.shape[1]
        if self._trie.width > vocab or int(self._eos.max()) >= vocab:
            raise ValueError(f"Catalogue token ids must be in [0, {vocab}) (the logits' V); the outputs hold ids "
                             f"up to {self._trie.width - 1} and eos_token_id {self.eos_token_id!r}")
        node = self.nodes(ctx)
        if not on_accelerator(logits):
            rows, cols = self.allowed_pairs(node)  # --> [p] each, on the host
            ctx.support = (rows, cols)
            return keep_pairs(ctx.backend, logits, rows, cols)
        rows, cols = self.allowed_pairs_on(node, logits)  # --> [p] each, on the logits' device
        if rows.shape[0] * SPARSE_FRACTION <= logits.shape[0] * vocab:  # the search ranks them alone: to the host
            ctx.support = (rows.cpu().numpy(), cols.cpu().numpy())
        return keep_pairs(ctx.backend, logits, rows, cols)


def _text_entries(path: Path) -> list[list[int]]:
    """The entries of a text catalogue file: one per line, its ids in ASCII decimal digits
    separated by whitespace (no sign, no other digits), blank lines skipped."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"catalogue file {str(path)!r} is not UTF-8 text (byte {e.start}) nor a saved "
                         "catalogue") from None
    except OSError as e:
        raise ValueError(f"catalogue file {str(path)!r} cannot be read: {e.strerror}") from None
    entries = []
    for n, line in enumerate(text.splitlines(), 1):  # construction only: a split per line
        ids = line.split()
        if ids and not all(t.isascii() and t.isdigit() for t in ids):  # int() also takes "+7", "-1", "٣"
            raise ValueError(f"catalogue file {str(path)!r} line {n} is not token ids separated by spaces: "
                             f"{line!r:.80}")
        if ids:
            entries.append([int(t) for t in ids])
    return entries


def on_accelerator(logits: Any) -> bool:
    """Whether ``logits`` is a tensor on a device other than the CPU: the allowed pairs are then
    computed there, from the trie's arrays kept on that device."""
    device = getattr(logits, "device", None)
    return device is not None and getattr(device, "type", "cpu") != "cpu"


def _padded(outputs: Any, eos: np.ndarray, pad_id: Any, tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
    """The catalogue as int64 ``[M, L]`` and its entries' lengths ``[M]``, checked: at least one
    entry, each non-empty, ids >= 0, no eos id."""
    if tokenizer is not None:
        outputs = _encoded(outputs, tokenizer)
    if hasattr(outputs, "ndim") and hasattr(outputs, "dtype"):
        items, lengths = _from_array(outputs, check.int64("pad_id", pad_id))
    else:
        items, lengths = _from_lists(outputs)
    if items.shape[0] == 0:
        raise ValueError("outputs must hold at least one token-id sequence; got an empty catalogue")
    at = np.flatnonzero(np.isin(items, eos) & (np.arange(items.shape[1]) < lengths[:, None]))  # row-major
    if at.size:
        i = int(at[0]) // items.shape[1]
        raise ValueError(f"outputs[{i}] holds the eos id {int(items.flat[at[0]])}: "
                         f"{items[i, :lengths[i]].tolist()!r:.80}; the catalogue lists outputs without eos (eos is "
                         "allowed where an entry ends)")
    return items, lengths


def _encoded(outputs: Any, tokenizer: Any) -> list[list[int]]:
    """Strings encoded by ``tokenizer`` (one batch call, no special tokens)."""
    if isinstance(outputs, str) or not all(isinstance(s, str) for s in outputs):
        raise TypeError(f"outputs must be a sequence of strings when a tokenizer is given; got {outputs!r:.80}")
    return [list(ids) for ids in tokenizer(list(outputs), add_special_tokens=False)["input_ids"]]


def _from_array(outputs: Any, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """An integer array ``[M, L]``: each row's entry runs to its first ``pad`` (then pads only)."""
    items = outputs.detach().cpu().numpy() if hasattr(outputs, "detach") else np.asarray(outputs)
    if items.ndim != 2 or not np.issubdtype(items.dtype, np.integer):
        raise TypeError(f"outputs as an array must be integers [M, L]; got shape {tuple(items.shape)} "
                        f"dtype {items.dtype}")
    past = items > np.iinfo(np.int64).max if items.dtype == np.uint64 else None  # would wrap to < 0 (-1: the pad)
    if past is not None and past.any():
        i, j = (int(v[0]) for v in np.nonzero(past))
        raise ValueError(f"outputs[{i}][{j}] must be in [0, V); got {int(items[i, j])}, and no V is larger than "
                         "2**63 - 1")
    if items.shape[1] == 0 and items.shape[0] > 0:
        raise ValueError(f"outputs as an array [M, L] must have L >= 1 (every entry is non-empty); got shape "
                         f"{tuple(items.shape)}")
    items = items.astype(np.int64, copy=False)
    if items.shape[0] == 0:  # no entry: the caller refuses the empty catalogue
        return items, np.zeros(0, np.int64)
    is_pad = items == pad
    lengths = np.where(is_pad.any(axis=1), is_pad.argmax(axis=1), items.shape[1]).astype(np.int64)
    inside = np.arange(items.shape[1]) < lengths[:, None]  # --> [M, L]
    if (~inside & ~is_pad).any():
        i = int(np.flatnonzero((~inside & ~is_pad).any(axis=1))[0])
        raise ValueError(f"outputs[{i}] has an id after pad_id {pad}: {items[i].tolist()!r:.80}; pad only ends a row")
    if (lengths == 0).any():
        raise ValueError(f"outputs[{int(np.flatnonzero(lengths == 0)[0])}] must be a non-empty sequence of token ids; "
                         f"its row starts with pad_id {pad}")
    bad = inside & (items < 0)
    if bad.any():
        i, j = (int(v[0]) for v in np.nonzero(bad))
        raise ValueError(f"outputs[{i}][{j}] must be in [0, V); got {int(items[i, j])}")
    return items, lengths


def _from_lists(outputs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Token-id sequences, flattened in one pass when they are plain ids >= 0 of one signed
    integer type; else entry by entry through the per-entry check (which names the first bad one)."""
    if isinstance(outputs, (str, bytes, Mapping, AbstractSet)) or not hasattr(outputs, "__len__"):
        raise TypeError(f"outputs must be a sequence of token-id sequences; got {outputs!r:.80}")
    if any(issubclass(kind, (Mapping, AbstractSet)) for kind in set(map(type, outputs))):  # one pass of type()
        i = next(i for i, out in enumerate(outputs) if isinstance(out, (Mapping, AbstractSet)))
        raise TypeError(f"outputs[{i}] must be a sequence of token ids (in order); got {outputs[i]!r:.80}")
    try:
        lengths = np.fromiter(map(len, outputs), dtype=np.int64)
        ids = list(itertools.chain.from_iterable(outputs))
        flat = np.array(ids)
    except (TypeError, ValueError):  # an entry without a length, or nested deeper than ids
        flat = None
    plain = flat is not None and flat.shape == (int(lengths.sum()),) and (lengths > 0).all() and \
        np.issubdtype(flat.dtype, np.signedinteger) and int(flat.min()) >= 0 and \
        not {bool, np.bool_} & set(map(type, ids))  # numpy reads [3, True] as integers: a bool is no id
    if flat is None or not plain:  # mixed id types (int64 and uint64 entries), or a bad entry: the check names it
        entries = [check.token_list(f"outputs[{i}]", out) for i, out in enumerate(outputs)]
        lengths = np.fromiter(map(len, entries), dtype=np.int64)
        flat = np.fromiter(itertools.chain.from_iterable(entries), dtype=np.int64)
    items = np.zeros((lengths.shape[0], int(lengths.max(initial=1))), np.int64)
    items[np.arange(items.shape[1]) < lengths[:, None]] = flat  # row-major fill of each entry
    return items, lengths
