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
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from beamsearch.speech.trace import CTCNode, CTCTrace
from beamsearch.viz import page

__all__ = ["ctc_html", "ctc_svg"]

DX, DY, MARGIN, HEAD = 64, 26, 30, 46  # px: one frame, one row, the border, an utterance's heading

_CSS = """
.bs-ctc { font: 11px sans-serif; }
.bs-ctc .edge { fill: none; stroke-width: 1.4; pointer-events: none; }
.bs-ctc .edge.stay { stroke: #a0aec0; }
.bs-ctc .edge.label { stroke: #4a6fa5; }
.bs-ctc .edge.merge { stroke: #805ad5; stroke-dasharray: 4 3; }
.bs-ctc .edge.pruned { stroke: #cbd5e0; stroke-dasharray: 3 3; }
.bs-ctc .edge.nbest { stroke: #d69e2e; stroke-width: 3; }
.bs-ctc .edge.best { stroke: #b7791f; stroke-width: 5; }
.bs-ctc .label { fill: #2c4a75; font-weight: bold; }
.bs-ctc .prefix { fill: #4a5568; }
.bs-ctc .frame-no { fill: #718096; }
.bs-ctc circle { stroke-width: 1.5; }
.bs-ctc .node.root circle { fill: #1a202c; stroke: #1a202c; }
.bs-ctc .node.kept circle { fill: #4a6fa5; stroke: #2c4a75; }
.bs-ctc .node.pruned circle { fill: #fff; stroke: #a0aec0; }
.bs-ctc .node.finished circle { fill: #38a169; stroke: #1c4532; stroke-width: 3; }
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
    if not trace.finished:
        raise ValueError("trace must be filled by a finished search (pass it to ctc_beam_search, or finish the "
                         "CTCStream); it has no results yet")
    n = trace.n_utterances
    if utterance is not None and (isinstance(utterance, bool) or not isinstance(utterance, int)
                                  or not 0 <= utterance < n):
        raise ValueError(f"utterance must be an integer in [0, {n}); got {utterance!r}")
    if labels is None:
        labels = [f"utterance {i}" for i in range(n)]
    elif isinstance(labels, str) or len(labels) != n:
        raise ValueError(f"labels must be one text per utterance of the trace ({n}); got {labels!r:.80}")
    parts, top, width = [], MARGIN + HEAD, 0
    for u in range(n) if utterance is None else [utterance]:
        nodes = [v for v in trace.nodes if v.utterance == u]
        parts.append(_draw(trace, nodes, top, str(labels[u])))
        top += (max((v.row for v in nodes), default=0) + 1) * DY + HEAD
        width = max(width, MARGIN * 2 + (trace.frames[u] + 1) * DX + 160)
    legend, right = _legend(top)
    parts.append(legend)
    width, height = max(width, right + MARGIN), top + LEGEND_H
    size = "" if page else f' width="{width}" height="{height}"'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="bs-ctc" viewBox="0 0 {width} {height}"{size}>'
            f'<style>{_CSS}</style><rect width="{width}" height="{height}" fill="#fff"/>'
            f'<g id="viewport">{"".join(parts)}</g></svg>')


def _on_paths(trace: CTCTrace, nodes: list[CTCNode]) -> tuple[set[int], set[int]]:
    """The node ids on the best hypothesis's path, and on the other returned ones' paths."""
    best: set[int] = set()
    other: set[int] = set()
    for v in nodes:
        if v.rank >= 0:
            (best if v.rank == 0 else other).update(p.id for p in trace.path(v.id))
    return best, other - best


def _draw(trace: CTCTrace, nodes: list[CTCNode], top: float, label: str) -> str:
    """SVG for one utterance's nodes, ``top`` px down under ``label``."""
    best, other = _on_paths(trace, nodes)
    xy = {v.id: (MARGIN + v.frame * DX + 10, top + v.row * DY) for v in nodes}
    last = max((v.frame for v in nodes), default=0)
    out = [f'<text class="input-label" x="{MARGIN}" y="{top - 28}">{html.escape(label)}</text>']
    out += [f'<text class="frame-no" x="{MARGIN + f * DX + 10}" y="{top - 12}" text-anchor="middle">{f}</text>'
            for f in range(last + 1)]
    for v in nodes:
        x, y = xy[v.id]
        path = " best" if v.id in best else " nbest" if v.id in other else ""
        edges = ""
        if v.parent >= 0:
            edges = _edge(xy[v.parent], (x, y), ("pruned" if v.status == "pruned" else v.kind) + path)
        if v.merged_from >= 0:
            edges += _edge(xy[v.merged_from], (x, y), "merge")
        text = trace.text(v.labels)
        note = ""
        if v.kind == "label":
            note = (f'<text class="label" x="{x - 8:.1f}" y="{y - 5:.1f}" text-anchor="end">'
                    f'{html.escape(trace.text([v.label]))}</text>')
        if v.kind == "label" or v.frame == last and v.status == "kept":
            note += f'<text class="prefix" x="{x + 8:.1f}" y="{y + 12:.1f}">{html.escape(text or "∅")}</text>'
        kind = "root" if v.kind == "start" else "finished" if v.rank >= 0 else v.status
        badge = (f'<text class="rank" x="{x + 9:.1f}" y="{y - 4:.1f}">#{v.rank + 1} {v.logprob:.3f}</text>'
                 if v.rank >= 0 else "")
        tip = html.escape(_tip(trace, v)).replace("\n", "&#10;")  # the newlines as references: one line
        out.append(f'<g class="item {v.status}" data-id="{v.id}" data-parent="{v.parent}" data-frame="{v.frame}" '
                   f'data-status="{v.status}">{edges}{note}'
                   f'<g class="node {kind}{path}" data-text="{html.escape(text)}" data-rank="'
                   f'{"" if v.rank < 0 else v.rank + 1}" data-tip="{tip}">'
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5"/>{badge}</g></g>')
    return "".join(out)


LEGEND_H = 30
_LEGEND = (("node kept", "kept"), ("node pruned", "pruned (left the beam, or not kept)"), ("node finished", "returned"),
           ("edge stay", "stay (blank or repeat)"), ("edge label", "label added"), ("edge merge", "merged (log-add)"),
           ("edge best", "best result (#1)"))


def _legend(y: float) -> tuple[str, int]:
    """The legend's SVG at height ``y``, and where it ends on the right."""
    out, x = ['<g class="legend">'], MARGIN
    for cls, text in _LEGEND:
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
