"""What a CTC prefix beam search did, frame by frame: the :class:`CTCTrace` a search fills.

    trace = CTCTrace()
    hyps = ctc_beam_search(emissions, blank=0, beam_size=4, vocabulary=vocab, trace=trace)
    open("ctc.html", "w").write(ctc_html(trace))  # from beamsearch.speech.trace_draw

The trace holds one :class:`CTCNode` per prefix alive after each frame (kept), plus, pruned at a
frame: each prefix that was alive before it and is not after it (it left the beam there), and
the ``width`` most probable extensions of the beam that the search did not keep (by their CTC
probability; recorded only for a search without an LM, hotwords or a lexicon, whose further terms
the trace does not have). Each node knows where its probability came
from: the same prefix before the frame (a *stay*: a blank, or its last label repeated) or its
parent prefix extended by a *label*; a stay whose prefix was also reached by extending the
prefix one label shorter, alive in the same beam, names that prefix (``merged_from``): the two
alignments' probabilities were added (log-add) into one prefix.

The search calls :meth:`CTCTrace.frame` once per frame with the beams before and after it
(the frame loop of :func:`beamsearch.speech.ctc.search`); an untraced search passes no
recorder and does nothing more. Recording is a Python loop over the utterances' slots, for
pictures of small searches, not part of any fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from beamsearch.speech.prefix import Beams, parent_slots, stays

__all__ = ["CTCNode", "CTCTrace"]

KINDS = ("start", "stay", "label")
"""How a node was reached: the empty prefix before the first frame, a stay, a label extension."""


class _Recorded(Protocol):
    """What :class:`NodeTrace` reads of a node."""

    @property
    def parent(self) -> int: ...

    @property
    def utterance(self) -> int: ...

    @property
    def rank(self) -> int: ...


NodeT = TypeVar("NodeT", bound=_Recorded)


class NodeTrace(Generic[NodeT]):
    """What the CTC and the transducer traces share: the nodes, filled by one search, and how to
    read them (a node's path, an utterance's best, labels as text).

    Attributes:
        nodes: every node, in the order they were made.
        n_utterances: N, the batch the search decoded.
        tokens: the label strings (from the search's vocabulary, its word delimiter as a space), or None.
        blank: the blank label's id.
    """

    def __init__(self) -> None:
        self.nodes: list[NodeT] = []
        self.n_utterances = 0
        self.tokens: list[str] | None = None
        self.blank = -1
        self._begun = self._finished = False

    def _begin(self, n: int, blank: int, vocabulary: Any) -> None:
        """The start of the one search that fills it (a second one: ValueError)."""
        if self._begun:
            raise ValueError(f"trace is already filled by a search; pass a new {type(self).__name__}() to each search")
        self._begun = True
        self.n_utterances, self.blank = n, int(blank)
        self.tokens = None if vocabulary is None else [" " if t == vocabulary.word_delimiter else t
                                                       for t in vocabulary.tokens]

    @property
    def finished(self) -> bool:
        """Whether the search that fills it has returned its results (the ranks are set)."""
        return self._finished

    def path(self, node: int) -> list[NodeT]:
        """The nodes from the start node to ``node``, one per frame or step, following the (best) parent."""
        out = []
        while node >= 0:
            out.append(self.nodes[node])
            node = self.nodes[node].parent
        return out[::-1]

    def best(self, utterance: int) -> int:
        """The node of the utterance's best returned hypothesis, -1 when none was returned."""
        return next((i for i, n in enumerate(self.nodes) if n.utterance == utterance and n.rank == 0), -1)

    def text(self, labels: Sequence[int]) -> str:
        """Labels as text: their label strings joined (label ids joined by spaces without tokens)."""
        if self.tokens is None:
            return " ".join(str(t) for t in labels)
        return "".join(self.tokens[t] for t in labels)


@dataclass
class CTCNode:
    """One prefix of one utterance after one frame.

    Attributes:
        id: its place in :attr:`CTCTrace.nodes`.
        utterance: the utterance's index in the batch.
        frame: how many frames were consumed (0: before the first).
        row: its place in the beam after that frame (0: the best; pruned nodes after the kept).
        parent: the node (one frame earlier) its probability came from; -1 for a start node.
        kind: ``"start"``, ``"stay"`` or ``"label"`` (:data:`KINDS`).
        label: the label a ``"label"`` node added; -1 otherwise.
        labels: the prefix, label ids first to last.
        logprob: its natural-log CTC probability (``logaddexp(pb, pnb)``; the acoustic score,
            which the beam ranks with the LM and hotword terms when the search has them).
        pb, pnb: the part of it that ends in a blank, in a label.
        status: ``"kept"`` or ``"pruned"``.
        merged_from: for a stay, the node of the prefix one label shorter whose extension was
            added into it at this frame; -1 when none.
        rank: its place in the utterance's returned hypotheses (0: the best), -1 if not returned.
    """

    id: int
    utterance: int
    frame: int
    row: int
    parent: int
    kind: str
    label: int
    labels: tuple[int, ...]
    logprob: float
    pb: float
    pnb: float
    status: str = "kept"
    merged_from: int = -1
    rank: int = -1


class CTCTrace(NodeTrace[CTCNode]):
    """The prefixes of a CTC prefix beam search after each frame; pass ``trace=CTCTrace()`` to
    :func:`~beamsearch.speech.ctc_beam_search` or :class:`~beamsearch.speech.CTCStream` and it
    is filled (one search per trace). Draw it with :mod:`beamsearch.speech.trace_draw`.

    Args:
        width: how many extensions the beam left out to record per utterance and frame (the most
            probable ones; 0: none).

    Attributes:
        nodes: every :class:`CTCNode`, in the order they were made.
        n_utterances: N, the batch the search decoded.
        tokens: the label strings (from the search's vocabulary, its word delimiter as a space), or None.
        blank: the blank label's id.
        frames: per utterance, the frames it consumed.
    """

    def __init__(self, width: int = 2) -> None:
        if isinstance(width, bool) or not isinstance(width, int) or width < 0:
            raise ValueError(f"width must be an integer >= 0 (pruned extensions recorded per frame); got {width!r}")
        super().__init__()
        self.width = width
        self.frames: list[int] = []
        self._current: dict[int, list[int]] = {}  # utterance -> node per slot of its beam (-1: empty)

    def begin(self, n: int, blank: int, vocabulary: Any = None, scored: bool = False) -> None:
        """Called by the search before its first frame: ``n`` utterances, the ``blank`` id, the
        vocabulary (or None) and whether further terms (LM, hotwords, lexicon) rank its candidates
        (then no pruned extension is recorded). A trace fills once: a second search on it is a
        ValueError."""
        self._begin(n, blank, vocabulary)
        self._extensions = 0 if scored else self.width
        self.frames = [0] * n

    def frame(self, rows: np.ndarray, before: Beams, after: Beams, lp: np.ndarray, allowed: np.ndarray | None,
              src: np.ndarray, grown: np.ndarray) -> None:
        """One frame of utterances ``rows`` (int ``[n]``, their batch indices): the beams
        ``before`` and ``after`` it (their rows in ``rows``' order, ``B`` slots), the frame's
        log-probs ``lp`` float64 ``[n, V]``, the labels allowed to start (bool ``[n, V]`` or None)
        and each slot's source slot ``src`` int ``[n, B]`` and whether it extends it, ``grown`` bool
        ``[n, B]`` (:func:`~beamsearch.speech.prefix.advance`'s)."""
        parent, found = parent_slots(before)
        pb, pnb = stays(before, lp, self.blank, allowed, parent, found)  # every slot's stay
        row = np.arange(lp.shape[0])[:, None]
        last = np.where(before.last >= 0, before.last, 0)
        base = np.where(before.last[row, parent] == before.last, before.pb[row, parent],
                        before.score()[row, parent])  # what the prefix one label shorter passes on
        ok = found & (before.last >= 0) & (base + lp[row, last] > -np.inf)
        merged = ok if allowed is None else ok & allowed[row, last]  # --> [n, B]: an extension flowed in
        alive_before, alive_after = before.score() > -np.inf, after.score() > -np.inf
        extensions = self._pruned_extensions(before, after, lp, allowed, (src, grown, parent, found))
        for k, u in enumerate(np.asarray(rows).tolist()):
            cur = self._current.get(u)
            if cur is None:
                cur = self._start(u, np.flatnonzero(alive_before[k]).tolist())
            f, new, stayed = self.frames[u] + 1, [-1] * after.key.shape[1], set()
            for j in np.flatnonzero(alive_after[k]).tolist():
                s, base = int(src[k, j]), self.nodes[cur[int(src[k, j])]]
                if grown[k, j]:
                    lab = int(after.last[k, j])
                    new[j] = self._add(u, f, j, base.id, "label", lab, base.labels + (lab,), after.pb[k, j],
                                       after.pnb[k, j])
                else:
                    stayed.add(s)
                    new[j] = self._add(u, f, j, base.id, "stay", -1, base.labels, after.pb[k, j], after.pnb[k, j])
                    if merged[k, s]:
                        self.nodes[new[j]].merged_from = cur[int(parent[k, s])]
            out = [b for b in np.flatnonzero(alive_before[k]).tolist() if b not in stayed]
            row0 = int(alive_after[k].sum())  # the kept are the slots 0, 1, ... (best first)
            for r, b in enumerate(sorted(out, key=lambda b: -np.logaddexp(pb[k, b], pnb[k, b]))):
                base = self.nodes[cur[b]]
                node = self._add(u, f, row0 + r, base.id, "stay", -1, base.labels, pb[k, b], pnb[k, b])
                self.nodes[node].status = "pruned"
            row0 += len(out)
            for r, (b, c, score) in enumerate(extensions[k]):
                base = self.nodes[cur[b]]
                node = self._add(u, f, row0 + r, base.id, "label", c, base.labels + (c,), -np.inf, score)
                self.nodes[node].status = "pruned"
            self._current[u], self.frames[u] = new, f

    def _pruned_extensions(self, before: Beams, after: Beams, lp: np.ndarray, allowed: np.ndarray | None,
                           slots: tuple[np.ndarray, ...]) -> list[list[tuple[int, int, float]]]:
        """Per utterance, its most probable extensions ``(slot, label, log-prob)`` that are neither
        kept nor merged into a prefix of the beam (at most ``width``, best first)."""
        src, grown, parent, found = slots
        n = before.last.shape[0]
        if not self._extensions:
            return [[] for _ in range(n)]
        cand = before.score()[:, :, None] + lp[:, None, :]  # --> [n, B, V]
        rn, rb = np.nonzero(before.last >= 0)  # a repeated label extends the part ending in a blank
        cand[rn, rb, before.last[rn, rb]] = before.pb[rn, rb] + lp[rn, before.last[rn, rb]]
        cand[:, :, self.blank] = -np.inf
        if allowed is not None:
            cand = np.where(allowed[:, None, :], cand, -np.inf)
        fn, fb = np.nonzero(found & (before.last >= 0))  # already in the beam: merged there
        cand[fn, parent[fn, fb], before.last[fn, fb]] = -np.inf
        gn, gj = np.nonzero(grown)  # kept
        cand[gn, src[gn, gj], after.last[gn, gj]] = -np.inf
        flat = cand.reshape(n, -1)
        top = np.argsort(-flat, axis=1, kind="stable")[:, : self._extensions]
        v = lp.shape[1]
        return [[(int(i) // v, int(i) % v, float(flat[r, i])) for i in top[r] if flat[r, i] > -np.inf]
                for r in range(n)]

    def finish(self, hypotheses: Sequence[Sequence[Any]]) -> None:
        """Called by the search with its results: marks each returned hypothesis's node with its
        rank (an utterance without frames gets its start node)."""
        for u, hyps in enumerate(hypotheses):
            cur = self._current.get(u)
            if cur is None:
                cur = self._current[u] = self._start(u, [0])
            by_labels = {self.nodes[v].labels: v for v in cur if v >= 0}
            for r, h in enumerate(hyps):
                self.nodes[by_labels[tuple(h.tokens)]].rank = r
        self._finished = True

    # ---- reading it ---------------------------------------------------------------------------

    def at(self, utterance: int, frame: int, status: str = "kept") -> list[CTCNode]:
        """The nodes of ``utterance`` after ``frame`` frames with this status, by row."""
        return [n for n in self.nodes if n.utterance == utterance and n.frame == frame and n.status == status]

    def _start(self, u: int, slots: list[int]) -> list[int]:
        """The start node of utterance ``u`` (the empty prefix before the first frame)."""
        cur = [-1] * max(slots + [0], default=0) + [-1]
        for s in slots:
            cur[s] = self._add(u, 0, 0, -1, "start", -1, (), 0.0, -np.inf)
        self._current[u] = cur
        return cur

    def _add(self, u: int, f: int, row: int, parent: int, kind: str, label: int, labels: tuple[int, ...],
             pb: float, pnb: float) -> int:
        node = CTCNode(len(self.nodes), u, f, row, parent, kind, label, labels,
                       float(np.logaddexp(pb, pnb)), float(pb), float(pnb))
        self.nodes.append(node)
        return node.id
