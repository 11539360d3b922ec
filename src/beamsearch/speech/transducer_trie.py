"""Label sequences and alignments of transducer hypotheses, held as arrays.

:class:`Prefixes` gives every label sequence one id (a trie whose edges are a sorted table of
``parent * LABEL_SPAN + label`` codes, searched by binary search), so hypotheses with equal labels are
recognised by equal ids however they were reached. :class:`Alignments` is an append-only tree
of emitted labels with the frame each was emitted at (and, for TDT, its duration) and its
log-probability there: the frames of one alignment of a hypothesis, which equal label sequences
do not share.
"""

from __future__ import annotations

import numpy as np

LABEL_SPAN = 1 << 24
"""Label ids are below this (a code is ``parent * LABEL_SPAN + label``)."""


class Prefixes:
    """Ids of label sequences: the empty sequence is 0; :meth:`child` extends them."""

    def __init__(self) -> None:
        self.codes = np.zeros(0, dtype=np.int64)
        self.ids = np.zeros(0, dtype=np.int64)
        self.size = 1

    def child(self, node: np.ndarray, label: np.ndarray) -> np.ndarray:
        """int64 ``[K]``: the id of each sequence ``node[k]`` followed by ``label[k]`` (new ids
        for sequences not seen before, one per distinct sequence)."""
        code = node.astype(np.int64) * LABEL_SPAN + label
        pos = np.minimum(np.searchsorted(self.codes, code), max(self.codes.size - 1, 0))
        found = self.codes[pos] == code if self.codes.size else np.zeros(code.shape, dtype=bool)
        out = np.where(found, self.ids[pos] if self.codes.size else 0, -1)
        if not found.all():
            new, inv = np.unique(code[~found], return_inverse=True)
            new_ids = self.size + np.arange(new.size, dtype=np.int64)
            self.size += new.size
            out[~found] = new_ids[inv.reshape(-1)]
            codes = np.concatenate([self.codes, new])
            order = np.argsort(codes, kind="stable")
            self.codes, self.ids = codes[order], np.concatenate([self.ids, new_ids])[order]
        return out


class Alignments:
    """Emitted labels as a tree: node 0 is the empty alignment; node k > 0 holds a label, the
    frame it was emitted at, its duration (1 for RNN-T), its parent, and the label's natural-log
    probability at that emission (the joint's, over the labels and the blank)."""

    def __init__(self) -> None:
        self.chunks: list[tuple[np.ndarray, ...]] = []
        self.size = 1

    def grow(self, parent: np.ndarray, label: np.ndarray, frame: np.ndarray, duration: np.ndarray,
             logp: np.ndarray) -> np.ndarray:
        """int64 ``[K]``: new nodes, one per row (``logp`` float64 ``[K]``: each label's log-prob)."""
        ids = self.size + np.arange(parent.size, dtype=np.int64)
        self.size += parent.size
        self.chunks.append((parent.astype(np.int64), label.astype(np.int64), frame.astype(np.int64),
                            duration.astype(np.int64), logp.astype(np.float64)))
        return ids

    def paths(self, nodes: np.ndarray) -> list[tuple[list[int], np.ndarray, np.ndarray, np.ndarray]]:
        """Per node, its labels, their frames (int64 ``[L]``), durations (int64 ``[L]``) and
        log-probs (float64 ``[L]``)."""
        cols = [np.concatenate([np.zeros(1, c0.dtype)] + [c[i] for c in self.chunks])
                for i, c0 in enumerate(self.chunks[0])] if self.chunks else [np.zeros(1, np.int64)] * 5
        parent, label, frame, dur, logp = cols
        out = []
        for node in nodes.tolist():
            seq = []
            while node > 0:
                seq.append(node)
                node = int(parent[node])
            seq.reverse()
            idx = np.array(seq, dtype=np.int64)
            out.append((label[idx].tolist(), frame[idx], dur[idx], logp[idx]))
        return out
