"""What a transducer (RNN-T, TDT) beam search did, step by step: the :class:`TransducerTrace` a
search fills.

    trace = TransducerTrace()
    hyps = transducer_beam_search(enc, lengths, predictor=..., joint=..., blank=0, beam_size=4, trace=trace)
    open("tdt.html", "w").write(transducer_html(trace))  # from beamsearch.speech.trace_draw

The search runs in steps (docs/transducer.md): each step every expanding hypothesis emits one
symbol (the blank or a label; TDT: with a duration), the best candidates of each utterance are
merged by (labels, frame, labels at the frame) with log-add, and cut to the beam; those at or past
the utterance's last frame go to the finished pool, merged by labels. The trace holds, after each
step, one :class:`TransducerNode` per merged candidate: ``kept`` (in the beam after the step),
``pruned`` (cut from the beam) or ``finished`` (reached the end: into the pool; ``pruned`` instead
when the pool did not keep it; one that a later step's better hypotheses push out of the pool keeps
its status, and no ``end`` node counts it). Each node names every candidate merged into it (its ``parents``,
hypotheses of the step before, with what each brought: the parent's score plus its move's
log-probability, or, for a hypothesis that waited at its frame while others expanded, its score as
it was). After the last step, one ``end`` node per hypothesis of the finished pool, whose parents are
the finished nodes of its labels merged into it; the returned ones carry their rank.

Only the candidates the search considered are recorded: each step's ``2 x beam_size`` best of an
utterance (the others cannot enter a beam of ``beam_size``). Recording is a Python loop over the
candidates, for pictures of small searches, not part of any fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.speech.trace import NodeTrace

__all__ = ["TransducerNode", "TransducerTrace"]

KINDS = ("start", "blank", "label", "wait", "end")
"""How a node was reached (by its best parent): the empty sequence before the first step, a blank,
a label, waiting at its frame (frame-synchronous search), or the finished pool's entry."""


@dataclass
class TransducerNode:
    """One hypothesis of one utterance after one step.

    Attributes:
        id: its place in :attr:`TransducerTrace.nodes`.
        utterance: the utterance's index in the batch.
        step: the steps taken (0: the start; the ``end`` nodes: one after the utterance's last step).
        row: its place in the step's column (the kept best first, then the finished, then the pruned).
        parents: the nodes (one step earlier) merged into it, the best first; empty for a start node.
        inflows: per parent, what it brought (natural log): the parent's score plus the log-probability
            of its move (the token's, plus the duration's for TDT), or the parent's score for a
            waiting parent or an ``end`` node's finished parent.
        moves: per parent, ``"blank"``, ``"label"``, ``"wait"`` or ``"finish"`` (an ``end`` node's).
        advances: per parent, the frames its move advanced (TDT: the duration; RNN-T: 1 for a blank
            or a label that may not stay, else 0; 0 for a wait or a finish).
        kind: the best parent's move (:data:`KINDS`).
        label: the label its best parent's move emitted, -1 for none.
        labels: its label sequence, first to last.
        frame: the encoder frame it stands at (at or past the utterance's length: finished).
        at_frame: the labels it emitted at that frame (a label of duration 0, or RNN-T's stay).
        score: its acoustic log-probability: the log-add of its ``inflows``.
        total: what the search ranks it by: ``score`` plus the hotword bonus and the LM terms while
            decoding (an ``end`` node: the final ones, as the results' ``score``).
        status: ``"kept"``, ``"pruned"``, ``"finished"`` or ``"end"``.
        rank: an ``end`` node's place in the returned hypotheses (0: the best), -1 if not returned.
    """

    id: int
    utterance: int
    step: int
    row: int
    parents: tuple[int, ...]
    inflows: tuple[float, ...]
    moves: tuple[str, ...]
    advances: tuple[int, ...]
    kind: str
    label: int
    labels: tuple[int, ...]
    frame: int
    at_frame: int
    score: float
    total: float
    status: str
    rank: int = -1

    @property
    def parent(self) -> int:
        """The best parent, -1 for a start node."""
        return self.parents[0] if self.parents else -1


@dataclass
class _Group:
    """The candidates of one step merged into one node (the trace's working record)."""

    members: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    inflows: list[float] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    advances: list[int] = field(default_factory=list)


class TransducerTrace(NodeTrace[TransducerNode]):
    """The hypotheses of a transducer beam search after each step; pass ``trace=TransducerTrace()``
    to :func:`~beamsearch.speech.transducer_beam_search` and it is filled (one search per trace).
    Draw it with :func:`beamsearch.speech.trace_draw.transducer_html`.

    Attributes:
        nodes: every :class:`TransducerNode`, in the order they were made.
        n_utterances: N, the batch the search decoded.
        tokens: the label strings (from the search's vocabulary, its word delimiter as a space), or None.
        blank: the blank label's id.
        steps: per utterance, the steps it took (its ``end`` nodes are at the step after).
        lengths: per utterance, its number of frames.
    """

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[int] = []
        self.lengths: list[int] = []
        self._slots: list[dict[int, int]] = []  # per utterance: beam slot -> node after the last step
        self._pool: list[dict[int, list[int]]] = []  # per utterance: prefix id in the pool -> finished nodes
        self._labels: dict[int, tuple[int, ...]] = {}  # prefix id -> labels
        self._prefix: dict[int, int] = {}  # node -> its prefix id
        self._taken = 0  # the steps recorded

    def begin(self, n: int, blank: int, lengths: np.ndarray, vocabulary: Any = None) -> None:
        """Called by the search before its first step. A trace fills once: a second search on it is
        a ValueError."""
        self._begin(n, blank, vocabulary)
        self.steps, self.lengths = [0] * n, [int(x) for x in lengths]
        self._slots, self._pool = [{} for _ in range(n)], [{} for _ in range(n)]
        self._labels = {0: ()}

    def step(self, cands: Any, after: Any, pool: Any, plan: Any) -> None:
        """One step: the candidates ``cands`` (a :class:`~beamsearch.speech.transducer_merge.Cands`,
        before merging; the first call: the start hypotheses), the beams ``after`` the step and the
        finished ``pool`` after it, and the search's ``plan`` (its ranking terms)."""
        b = after.score.shape[1]
        first = self._taken == 0
        self._taken += 1
        terms = np.broadcast_to(plan.terms(cands.hot, cands.lm), cands.score.shape)
        live: dict[tuple[int, ...], _Group] = {}
        done: dict[tuple[int, ...], _Group] = {}
        for k in range(cands.u.size):
            u, node, t = int(cands.u[k]), int(cands.node[k]), int(cands.t[k])
            finished = t >= self.lengths[u]
            key: tuple[int, ...] = (u, node) if finished else (u, node, t, int(cands.j[k]))
            group = (done if finished else live).setdefault(key, _Group())
            group.members.append(k)
            if first:
                continue
            parent = self.nodes[self._slots[u][int(cands.src[k]) - u * b]]
            if int(cands.label[k]) >= 0:
                self._labels.setdefault(node, parent.labels + (int(cands.label[k]),))
            # a blank always moves to a later frame: a candidate without a label at its parent's frame waited
            move = "label" if int(cands.label[k]) >= 0 else "wait" if t == parent.frame else "blank"
            group.parents.append(parent.id)
            group.inflows.append(float(cands.score[k]))
            group.moves.append(move)
            group.advances.append(t - parent.frame)
        kept: dict[tuple[int, ...], int] = {  # (u, labels, frame, labels at it) -> its slot in the beam
            (int(u), int(after.node[u, s]), int(after.t[u, s]), int(after.j[u, s])): int(s)
            for u, s in zip(*np.nonzero(np.isfinite(after.score)), strict=True)}
        slots: list[dict[int, int]] = [{} for _ in range(self.n_utterances)]
        made: dict[int, list[int]] = {}
        for key, group in sorted(live.items(), key=lambda kv: kept.get(kv[0], b)):
            u = key[0]
            score = float(after.score[u, kept[key]]) if key in kept else float(np.logaddexp.reduce(
                cands.score[group.members]))
            node = self._add(u, key[1], cands, group, terms, score, "kept" if key in kept else "pruned")
            made.setdefault(u, []).append(node)
            if key in kept:
                slots[u][kept[key]] = node
        in_pool = [{int(pool.node[u, s]) for s in np.flatnonzero(np.isfinite(pool.score[u]))}
                   for u in range(self.n_utterances)]
        for key, group in done.items():
            u = key[0]
            node = self._add(u, key[1], cands, group, terms, float(np.logaddexp.reduce(cands.score[group.members])),
                             "finished" if key[1] in in_pool[u] else "pruned")
            made.setdefault(u, []).append(node)
            if key[1] in in_pool[u]:
                self._pool[u].setdefault(key[1], []).append(node)
        for u in range(self.n_utterances):
            self._pool[u] = {p: v for p, v in self._pool[u].items() if p in in_pool[u]}  # pool evictions
            order = {"kept": 0, "finished": 1, "pruned": 2}
            for row, i in enumerate(sorted(made.get(u, []), key=lambda i: (order[self.nodes[i].status],
                                                                            -self.nodes[i].total))):
                self.nodes[i].row = row
            if u in made:
                self.steps[u] += 0 if first else 1
        self._slots = slots

    def finish(self, pool: Any, plan: Any, hypotheses: Sequence[Sequence[Any]]) -> None:
        """Called by the search with the finished pool and its results: one ``end`` node per pool
        hypothesis (merging its finished nodes), the returned ones ranked."""
        rank = pool.rank(plan)
        for u, hyps in enumerate(hypotheses):
            ranked = {tuple(h.tokens): r for r, h in enumerate(hyps)}
            entries = [int(s) for s in np.flatnonzero(np.isfinite(pool.score[u]))]
            for row, s in enumerate(sorted(entries, key=lambda s: -rank[u, s])):
                prefix = int(pool.node[u, s])
                parents = sorted(self._pool[u].get(prefix, []), key=lambda i: -self.nodes[i].score)
                labels = self._labels[prefix]
                best = self.nodes[parents[0]] if parents else None
                self.nodes.append(TransducerNode(
                    len(self.nodes), u, self.steps[u] + 1, row, tuple(parents),
                    tuple(self.nodes[i].score for i in parents), ("finish",) * len(parents), (0,) * len(parents),
                    "end", -1, labels,
                    best.frame if best is not None else self.lengths[u], 0, float(pool.score[u, s]),
                    float(rank[u, s]), "end", ranked.get(labels, -1)))
        self._finished = True

    # ---- reading it ---------------------------------------------------------------------------

    def at(self, utterance: int, step: int, status: str | None = None) -> list[TransducerNode]:
        """The nodes of ``utterance`` after ``step`` steps (with this status; None: all), by row."""
        return sorted((n for n in self.nodes if n.utterance == utterance and n.step == step
                       and (status is None or n.status == status)), key=lambda n: n.row)

    def _add(self, u: int, prefix: int, cands: Any, group: _Group, terms: np.ndarray, score: float,
             status: str) -> int:
        k = group.members[0]
        best = int(np.argmax(group.inflows)) if group.inflows else 0
        order = sorted(range(len(group.parents)), key=lambda i: (i != best, -group.inflows[i]))
        labels = self._labels.get(prefix, ())
        move = group.moves[best] if group.moves else "start"
        node = TransducerNode(len(self.nodes), u, self.steps[u] + (0 if not group.parents else 1), 0,
                              tuple(group.parents[i] for i in order), tuple(group.inflows[i] for i in order),
                              tuple(group.moves[i] for i in order), tuple(group.advances[i] for i in order), move,
                              labels[-1] if move == "label" else -1, labels, int(cands.t[k]), int(cands.j[k]),
                              score, score + float(terms[k]), status)
        self.nodes.append(node)
        self._prefix[node.id] = prefix
        return node.id
