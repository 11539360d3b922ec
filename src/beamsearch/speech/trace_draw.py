"""The picture of a CTC prefix beam search (:class:`~beamsearch.speech.trace.CTCTrace`): the beam
over frames, as an SVG or as the interactive page of :mod:`beamsearch.viz` (one file, offline).

Frames run left to right (column ``f``: the beam after ``f`` frames), each column's prefixes top
to bottom best first, the pruned ones (those that left the beam at that frame, then the best
extensions it did not keep) below the kept, hollow. An edge joins each prefix to where its
probability came from one frame earlier: a grey *stay* (a blank or its last label repeated: the
same prefix) or a blue *label* edge (the parent prefix extended, the label written on it); a
dashed purple *merge* edge joins a prefix to the prefix one label shorter whose extension was
added into it (log-add). The returned hypotheses
are ranked (#1, #2, ...) at the last frame and the path of each drawn thick, the best's thickest.
Click a node to collapse what grew from it, hover for its numbers.

The transducer beam search (:class:`~beamsearch.speech.transducer_trace.TransducerTrace`) is drawn
the same way over its steps (:func:`transducer_svg`, :func:`transducer_html`): a column per step,
the merges of candidates with equal labels, frame and labels at the frame, those cut from the beam,
those that reached the end, and the finished pool with the n-best at the last column.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from beamsearch.speech.trace import CTCNode, CTCTrace
from beamsearch.speech.transducer_trace import TransducerNode, TransducerTrace
from beamsearch.viz import page

__all__ = ["ctc_html", "ctc_svg", "transducer_html", "transducer_svg"]

DX, DY, MARGIN, HEAD = 64, 26, 30, 46  # px: one frame, one row, the border, an utterance's heading

_CSS = """
.bs-ctc { font: 11px sans-serif; }
.bs-ctc .edge { fill: none; stroke-width: 1.4; pointer-events: none; }
.bs-ctc .edge.stay { stroke: #a0aec0; }
.bs-ctc .edge.label { stroke: #4a6fa5; }
.bs-ctc .edge.merge { stroke: #805ad5; stroke-dasharray: 4 3; }
.bs-ctc .edge.blank { stroke: #a0aec0; }
.bs-ctc .edge.wait { stroke: #cbd5e0; stroke-dasharray: 1 3; }
.bs-ctc .edge.finish { stroke: #68d391; }
.bs-ctc .edge.pruned { stroke: #cbd5e0; stroke-dasharray: 3 3; }
.bs-ctc .edge.nbest { stroke: #d69e2e; stroke-width: 3; }
.bs-ctc .edge.best { stroke: #b7791f; stroke-width: 5; }
.bs-ctc text.label { fill: #2c4a75; font-weight: bold; }
.bs-ctc .prefix { fill: #4a5568; }
.bs-ctc .frame-no { fill: #718096; }
.bs-ctc circle { stroke-width: 1.5; }
.bs-ctc .node.root circle { fill: #1a202c; stroke: #1a202c; }
.bs-ctc .node.kept circle { fill: #4a6fa5; stroke: #2c4a75; }
.bs-ctc .node.pruned circle { fill: #fff; stroke: #a0aec0; }
.bs-ctc .node.finished circle { fill: #38a169; stroke: #1c4532; stroke-width: 3; }
.bs-ctc .node.ended circle { fill: #fff; stroke: #38a169; stroke-width: 2; }
.bs-ctc .node.collapsed circle { stroke: #000; stroke-width: 3; }
.bs-ctc .rank { fill: #975a16; font-weight: bold; }
.bs-ctc .input-label { fill: #1a202c; font-weight: bold; }
"""


def ctc_svg(trace: CTCTrace, *, utterance: int | None = None, labels: Sequence[str] | None = None) -> str:
    """The beam over frames as a standalone SVG document (styles inline).

    Args:
        trace: a :class:`~beamsearch.speech.trace.CTCTrace` filled by a finished search.
        utterance: draw only this utterance (default: each, one below the other).
        labels: the heading of each utterance, one per utterance of the trace (default
            ``utterance i``).

    Returns:
        The SVG text: a ``g.item`` per node (``data-id``, ``data-parent``, ``data-frame``,
        ``data-status``) holding its edges, its ``.node`` group (class ``root``, ``kept``,
        ``pruned`` or ``finished``; ``data-text``, ``data-rank``, ``data-tip``) and its texts;
        edges have class ``stay``, ``label`` or ``merge``, and ``best``/``nbest`` on a returned
        hypothesis's path.
    """
    return _svg(trace, utterance, labels, page=False)


def ctc_html(trace: CTCTrace, *, utterance: int | None = None, labels: Sequence[str] | None = None,
             title: str = "CTC prefix beam search") -> str:
    """The beam over frames as one self-contained interactive HTML page (as
    :func:`beamsearch.viz.to_html`'s: collapse, hover, zoom, pan, "Export SVG").

    Args:
        trace, utterance, labels: as for :func:`ctc_svg`.
        title: the page title.
    """
    return page(_svg(trace, utterance, labels, page=True), title)


def _svg(trace: CTCTrace, utterance: int | None, labels: Sequence[str] | None, page: bool) -> str:
    if not isinstance(trace, CTCTrace):
        raise TypeError(f"trace must be a CTCTrace filled by a search; got {trace!r:.80}")
    _check(trace, utterance, "pass it to ctc_beam_search, or finish the CTCStream")
    dots = [_ctc_dot(trace, v, max((w.frame for w in trace.nodes if w.utterance == v.utterance), default=0))
            for v in trace.nodes]
    return _picture(dots, trace.n_utterances, trace.frames, utterance, labels, page, "bs-ctc", _LEGEND)


def transducer_svg(trace: TransducerTrace, *, utterance: int | None = None,
                   labels: Sequence[str] | None = None) -> str:
    """The transducer beam search over its steps as a standalone SVG document (styles inline).

    Steps run left to right (column ``k``: the hypotheses after ``k`` steps; the last column of an
    utterance: the finished pool's hypotheses), each column's hypotheses top to bottom, the kept best
    first, then those that reached the end (ringed green), then those cut from the beam (hollow).
    An edge joins each hypothesis to its best parent one step earlier: a grey *blank*, a blue
    *label* (the label written on it) or a light dotted *wait* (a frame-synchronous search's
    hypothesis that waited while those at an earlier frame expanded); a dashed purple *merge* edge
    joins it to each other candidate that reached the same labels, frame and labels at the frame
    (log-add); a green *finish* edge joins a pool hypothesis to the finished ones of its labels.

    Args:
        trace: a :class:`~beamsearch.speech.transducer_trace.TransducerTrace` filled by a finished
            search.
        utterance, labels: as for :func:`ctc_svg`.

    Returns:
        The SVG text, as :func:`ctc_svg`'s (``data-frame`` is the node's step; node classes
        ``root``, ``kept``, ``pruned``, ``ended`` (reached the end, not returned) or ``finished``
        (returned); edge classes ``blank``, ``label``, ``wait``, ``finish``, ``merge``, ``pruned``).
    """
    return _transducer_svg(trace, utterance, labels, page=False)


def transducer_html(trace: TransducerTrace, *, utterance: int | None = None, labels: Sequence[str] | None = None,
                    title: str = "Transducer beam search") -> str:
    """The transducer beam search over its steps as one self-contained interactive HTML page (as
    :func:`ctc_html`'s).

    Args:
        trace, utterance, labels: as for :func:`transducer_svg`.
        title: the page title.
    """
    return page(_transducer_svg(trace, utterance, labels, page=True), title)


def _transducer_svg(trace: TransducerTrace, utterance: int | None, labels: Sequence[str] | None, page: bool) -> str:
    if not isinstance(trace, TransducerTrace):
        raise TypeError(f"trace must be a TransducerTrace filled by a search; got {trace!r:.80}")
    _check(trace, utterance, "pass it to transducer_beam_search")
    dots = [_transducer_dot(trace, v) for v in trace.nodes]
    return _picture(dots, trace.n_utterances, [s + 1 for s in trace.steps], utterance, labels, page,
                    "bs-ctc bs-transducer", _TRANSDUCER_LEGEND)


def _transducer_dot(trace: TransducerTrace, v: TransducerNode) -> _Dot:
    edges = tuple((p, ("pruned" if v.status == "pruned" else move) if i == 0 else "merge")
                  for i, (p, move) in enumerate(zip(v.parents, v.moves, strict=True)))
    if v.kind == "end":
        edges = tuple((p, "finish") for p in v.parents)
    kind = "root" if v.kind == "start" else "finished" if v.rank >= 0 else \
        "ended" if v.status in ("finished", "end") else v.status
    return _Dot(v.id, v.utterance, v.step, v.row, v.parent, v.status, edges, kind, trace.text(v.labels),
                trace.text([v.label]) if v.kind == "label" else None, v.kind in ("label", "end"), v.rank, v.total,
                _transducer_tip(trace, v))


def _check(trace: CTCTrace | TransducerTrace, utterance: int | None, how: str) -> None:
    """A finished trace and an utterance of it (or None)."""
    if not trace.finished:
        raise ValueError(f"trace must be filled by a finished search ({how}); it has no results yet")
    n = trace.n_utterances
    if utterance is not None and (isinstance(utterance, bool) or not isinstance(utterance, int)
                                  or not 0 <= utterance < n):
        raise ValueError(f"utterance must be an integer in [0, {n}); got {utterance!r}")


@dataclass(frozen=True)
class _Dot:
    """A node as drawn: its column and row, the edges into it (``(node id, class)``), its class
    (``root``, ``kept``, ``pruned``, ``ended`` or ``finished``), texts and tooltip."""

    id: int
    utterance: int
    column: int
    row: int
    parent: int
    status: str
    edges: tuple[tuple[int, str], ...]
    kind: str
    text: str
    label: str | None
    show_text: bool
    rank: int
    score: float
    tip: str


def _ctc_dot(trace: CTCTrace, v: CTCNode, last: int) -> _Dot:
    edges: tuple[tuple[int, str], ...] = () if v.parent < 0 else (
        (v.parent, "pruned" if v.status == "pruned" else v.kind),)
    if v.merged_from >= 0:
        edges += ((v.merged_from, "merge"),)
    kind = "root" if v.kind == "start" else "finished" if v.rank >= 0 else v.status
    return _Dot(v.id, v.utterance, v.frame, v.row, v.parent, v.status, edges, kind, trace.text(v.labels),
                trace.text([v.label]) if v.kind == "label" else None,
                v.kind == "label" or v.frame == last and v.status == "kept", v.rank, v.logprob, _tip(trace, v))


def _picture(dots: list[_Dot], n: int, columns: Sequence[int], utterance: int | None, labels: Sequence[str] | None,
             page: bool, cls: str, legend: tuple[tuple[str, str], ...]) -> str:
    """The SVG of the nodes ``dots`` of ``n`` utterances (each ``columns[u] + 1`` columns wide)."""
    if labels is None:
        labels = [f"utterance {i}" for i in range(n)]
    elif isinstance(labels, str) or len(labels) != n:
        raise ValueError(f"labels must be one text per utterance of the trace ({n}); got {labels!r:.80}")
    parts, top, width = [], MARGIN + HEAD, 0
    for u in range(n) if utterance is None else [utterance]:
        nodes = [v for v in dots if v.utterance == u]
        parts.append(_draw(nodes, top, str(labels[u])))
        top += (max((v.row for v in nodes), default=0) + 1) * DY + HEAD
        width = max(width, MARGIN * 2 + (columns[u] + 1) * DX + 160)
    drawn, right = _legend(top, legend)
    parts.append(drawn)
    width, height = max(width, right + MARGIN), top + LEGEND_H
    size = "" if page else f' width="{width}" height="{height}"'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" viewBox="0 0 {width} {height}"{size}>'
            f'<style>{_CSS}</style><rect width="{width}" height="{height}" fill="#fff"/>'
            f'<g id="viewport">{"".join(parts)}</g></svg>')


def _on_paths(nodes: list[_Dot]) -> tuple[set[int], set[int]]:
    """The node ids on the best hypothesis's path (following each node's first parent), and on the
    other returned ones' paths."""
    by_id = {v.id: v for v in nodes}
    best: set[int] = set()
    other: set[int] = set()
    for v in nodes:
        if v.rank >= 0:
            on, w = (best if v.rank == 0 else other), v.id
            while w >= 0:
                on.add(w)
                w = by_id[w].parent
    return best, other - best


def _draw(nodes: list[_Dot], top: float, label: str) -> str:
    """SVG for one utterance's nodes, ``top`` px down under ``label``."""
    best, other = _on_paths(nodes)
    xy = {v.id: (MARGIN + v.column * DX + 10, top + v.row * DY) for v in nodes}
    last = max((v.column for v in nodes), default=0)
    out = [f'<text class="input-label" x="{MARGIN}" y="{top - 28}">{html.escape(label)}</text>']
    out += [f'<text class="frame-no" x="{MARGIN + f * DX + 10}" y="{top - 12}" text-anchor="middle">{f}</text>'
            for f in range(last + 1)]
    for v in nodes:
        x, y = xy[v.id]
        path = " best" if v.id in best else " nbest" if v.id in other else ""
        edges = "".join(_edge(xy[src], (x, y), cls + (path if i == 0 else ""))  # the path: the first edge
                        for i, (src, cls) in enumerate(v.edges))
        note = ""
        if v.label is not None:
            note = (f'<text class="label" x="{x - 8:.1f}" y="{y - 5:.1f}" text-anchor="end">'
                    f'{html.escape(v.label)}</text>')
        if v.show_text:
            note += f'<text class="prefix" x="{x + 8:.1f}" y="{y + 12:.1f}">{html.escape(v.text or "∅")}</text>'
        badge = (f'<text class="rank" x="{x + 9:.1f}" y="{y - 4:.1f}">#{v.rank + 1} {v.score:.3f}</text>'
                 if v.rank >= 0 else "")
        tip = html.escape(v.tip).replace("\n", "&#10;")  # the newlines as references: one line
        out.append(f'<g class="item {v.status}" data-id="{v.id}" data-parent="{v.parent}" data-frame="{v.column}" '
                   f'data-status="{v.status}">{edges}{note}'
                   f'<g class="node {v.kind}{path}" data-text="{html.escape(v.text)}" data-rank="'
                   f'{"" if v.rank < 0 else v.rank + 1}" data-tip="{tip}">'
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5"/>{badge}</g></g>')
    return "".join(out)


LEGEND_H = 30
_LEGEND: tuple[tuple[str, str], ...] = (
    ("node kept", "kept"), ("node pruned", "pruned (left the beam, or not kept)"), ("node finished", "returned"),
    ("edge stay", "stay (blank or repeat)"), ("edge label", "label added"), ("edge merge", "merged (log-add)"),
    ("edge best", "best result (#1)"))
_TRANSDUCER_LEGEND: tuple[tuple[str, str], ...] = (
    ("node kept", "kept"), ("node ended", "reached the end"), ("node pruned", "cut from the beam"),
    ("node finished", "returned"), ("edge blank", "blank"), ("edge label", "label"), ("edge wait", "waited"),
    ("edge merge", "merged (log-add)"), ("edge finish", "pooled"), ("edge best", "best result (#1)"))


def _legend(y: float, entries: tuple[tuple[str, str], ...]) -> tuple[str, int]:
    """The legend's SVG at height ``y``, and where it ends on the right."""
    out, x = ['<g class="legend">'], MARGIN
    for cls, text in entries:
        mark = (f'<g class="{cls}"><circle cx="{x + 5}" cy="{y}" r="5"/></g>' if cls.startswith("node")
                else f'<path class="{cls}" d="M{x - 5},{y} l20,0"/>')
        out.append(f'{mark}<text x="{x + 20}" y="{y + 4}">{text}</text>')
        x += 36 + 6 * len(text)
    return "".join(out) + "</g>", x


def _edge(a: tuple[float, float], b: tuple[float, float], cls: str) -> str:
    (px, py), (x, y) = a, b
    mx = (px + x) / 2
    return f'<path class="edge {cls}" d="M{px:.1f},{py:.1f} C{mx:.1f},{py:.1f} {mx:.1f},{y:.1f} {x:.1f},{y:.1f}"/>'


def _num(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def _tip(trace: CTCTrace, v: CTCNode) -> str:
    """A node's tooltip: its prefix, frame, status and log-probabilities, and where they came from."""
    how = {"start": "the empty prefix before the first frame", "stay": "stay (blank or its last label repeated)",
           "label": f"label {trace.text([v.label])!r} added"}[v.kind]
    lines = [f"prefix   {trace.text(v.labels) or '(empty)'}",
             f"frame    {v.frame}  {v.status}" + (f"  (result #{v.rank + 1})" if v.rank >= 0 else ""),
             f"logprob  {_num(v.logprob)}", f"  blank  {_num(v.pb)}", f"  label  {_num(v.pnb)}", f"from     {how}"]
    if v.merged_from >= 0:
        lines.append(f"merged   + {trace.text(trace.nodes[v.merged_from].labels) or '(empty)'!r} extended (log-add)")
    return "\n".join(lines)


def _transducer_tip(trace: TransducerTrace, v: TransducerNode) -> str:
    """A transducer node's tooltip: its labels, step, frame, status and scores, and its inflows."""
    status = v.status + (f"  (result #{v.rank + 1})" if v.rank >= 0 else "")
    lines = [f"labels   {trace.text(v.labels) or '(empty)'}", f"step     {v.step}  {status}",
             f"frame    {v.frame}" + (f"  ({v.at_frame} labels at it)" if v.at_frame else ""),
             f"score    {_num(v.score)}", f"ranked   {_num(v.total)}"]
    for p, move, advance, inflow in zip(v.parents, v.moves, v.advances, v.inflows, strict=True):
        source = trace.nodes[p]
        how = f"{move} +{advance} frames" if move in ("blank", "label") else move
        lines.append(f"from     {trace.text(source.labels) or '(empty)'!r} at frame {source.frame}: {how}, "
                     f"{_num(inflow)}")
    if len(v.parents) > 1:
        lines.append(f"merged   {len(v.parents)} candidates (log-add)")
    return "\n".join(lines)
