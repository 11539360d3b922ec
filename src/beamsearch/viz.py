"""See a search: its :class:`Trace` as an SVG picture or a self-contained interactive HTML page.

    trace = Trace()
    results = beam_search_batch(..., trace=trace)
    open("tree.html", "w").write(to_html(trace, vocab=tokenizer))

The tree runs left to right, depth = step: each node is a prefix, each edge is labelled with its
token (as text when a vocabulary or a tokenizer is given) and its probability. Kept, pruned,
finished and ended-unfinished nodes are drawn differently; the final n-best are ranked (#1, #2,
...) and the path to the best is highlighted; a greedy run's trace (``greedy=``) is overlaid as
a dashed red path, with the part the beam never kept drawn as extra nodes.

The page is one file with its script and styles inline: it opens from disk, offline. Click a
node to collapse or expand its subtree, hover for its numbers, scroll to zoom, drag to pan, and
"Export SVG" saves the picture as it is shown. One layout (computed here, in Python) serves
both the page and :func:`to_svg`. Drawing is a Python loop over the nodes (a picture of a few
thousand nodes at most), not part of any search.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.core.trace import STATUS, SearchTree, StepRecord

__all__ = ["StepRecord", "Trace", "page", "to_html", "to_svg"]

DX, DY, MARGIN = 120, 24, 30  # px: one step, one leaf slot, the border

_CSS = """
.bs-tree { font: 11px sans-serif; }
.bs-tree .edge { fill: none; stroke: #4a6fa5; stroke-width: 1.4; }
.bs-tree .edge.pruned { stroke: #b8c0cc; stroke-dasharray: 3 3; }
.bs-tree .edge.nbest { stroke: #d69e2e; stroke-width: 3; }
.bs-tree .edge.best { stroke: #b7791f; stroke-width: 5; }
.bs-tree .greedy-line { fill: none; stroke: #e53e3e; stroke-width: 2; stroke-dasharray: 6 4; }
.bs-tree .label { fill: #1a202c; }
.bs-tree .item.pruned .label { fill: #8a94a6; }
.bs-tree circle { stroke-width: 1.5; }
.bs-tree .node.root circle { fill: #1a202c; stroke: #1a202c; }
.bs-tree .node.kept circle { fill: #4a6fa5; stroke: #2c4a75; }
.bs-tree .node.pruned circle { fill: #fff; stroke: #a0aec0; }
.bs-tree .node.finished circle { fill: #38a169; stroke: #1c4532; stroke-width: 3; }
.bs-tree .node.unfinished circle { fill: #ed8936; stroke: #9c4221; }
.bs-tree .node.greedy-only circle { fill: #fff; stroke: #e53e3e; stroke-dasharray: 2 2; }
.bs-tree .node.on-greedy circle { stroke: #e53e3e; stroke-width: 3; }
.bs-tree .node.collapsed circle { stroke: #000; stroke-width: 3; }
.bs-tree .rank { fill: #975a16; font-weight: bold; }
.bs-tree .input-label { fill: #1a202c; font-weight: bold; }
.bs-tree .legend text { fill: #1a202c; }
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body { margin: 0; font: 13px sans-serif; color: #1a202c; }
#bar { padding: 6px 10px; border-bottom: 1px solid #cbd5e0; background: #f7fafc; }
#bar button { margin-right: 4px; }
#view { width: 100vw; height: calc(100vh - 40px); overflow: hidden; cursor: grab; }
#view svg { width: 100%; height: 100%; }
#tip { position: fixed; display: none; pointer-events: none; background: #fffff0; border: 1px solid #975a16;
       padding: 4px 6px; font: 12px monospace; white-space: pre; }
</style></head><body>
<div id="bar"><b>__TITLE__</b> &nbsp;
<button id="zoom-in">+</button><button id="zoom-out">&minus;</button><button id="fit">fit</button>
<button id="expand-all">expand all</button><button id="export">Export SVG</button>
<span id="status"></span></div>
<div id="view">__SVG__</div><div id="tip"></div>
<script>
(function () {
  var svg = document.querySelector('#view svg'), vp = document.getElementById('viewport');
  var tip = document.getElementById('tip'), box = svg.viewBox.baseVal;
  var full = {x: box.x, y: box.y, w: box.width, h: box.height};
  var kids = {}, items = {};
  svg.querySelectorAll('g.item').forEach(function (g) {
    items[g.dataset.id] = g;
    (kids[g.dataset.parent] = kids[g.dataset.parent] || []).push(g.dataset.id);
  });
  function setVisible(id, show) {  // show/hide the subtree below node id, keeping inner collapses
    (kids[id] || []).forEach(function (c) {
      items[c].style.display = show ? '' : 'none';
      if (!show || !items[c].querySelector('.node').classList.contains('collapsed')) setVisible(c, show);
    });
  }
  function toggle(id) {
    var node = items[id].querySelector('.node');
    if (!(kids[id] || []).length) return;
    var collapse = !node.classList.contains('collapsed');
    node.classList.toggle('collapsed', collapse);
    setVisible(id, !collapse);
  }
  function zoom(f, cx, cy) {
    var nw = box.width / f, nh = box.height / f;
    box.x = cx - (cx - box.x) / f; box.y = cy - (cy - box.y) / f; box.width = nw; box.height = nh;
  }
  function fit() { box.x = full.x; box.y = full.y; box.width = full.w; box.height = full.h; }
  function point(ev) {
    var r = svg.getBoundingClientRect(), s = Math.max(box.width / r.width, box.height / r.height);
    var ox = (r.width * s - box.width) / 2, oy = (r.height * s - box.height) / 2;
    return {x: box.x - ox + (ev.clientX - r.left) * s, y: box.y - oy + (ev.clientY - r.top) * s, s: s};
  }
  svg.addEventListener('wheel', function (ev) {
    ev.preventDefault(); var p = point(ev); zoom(ev.deltaY < 0 ? 1.2 : 1 / 1.2, p.x, p.y);
  }, {passive: false});
  var drag = null; svg.addEventListener('mousedown', function (ev) { drag = {x: ev.clientX, y: ev.clientY}; });
  window.addEventListener('mouseup', function () { drag = null; });
  window.addEventListener('mousemove', function (ev) {
    if (!drag) return;
    var s = point(ev).s, dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
    box.x -= dx * s; box.y -= dy * s; drag.x = ev.clientX; drag.y = ev.clientY;
  });
  svg.querySelectorAll('.node').forEach(function (n) {
    n.addEventListener('click', function (ev) { ev.stopPropagation(); toggle(n.parentNode.dataset.id); });
    n.addEventListener('mousemove', function (ev) {
      var d = n.dataset;
      tip.textContent = d.tip ? d.tip : 'prefix   ' + d.text + '\\nstatus   ' + d.status +
        (d.rank ? '  (result #' + d.rank + ')' : '') +
        '\\nstep     ' + d.step + '\\np        ' + d.p + '\\nlogprob  ' + d.logprob + '\\nscore    ' + d.score;
      tip.style.display = 'block'; tip.style.left = (ev.clientX + 12) + 'px'; tip.style.top = (ev.clientY + 12) + 'px';
    });
    n.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  });
  function zoomCentre(factor) { zoom(factor, box.x + box.width / 2, box.y + box.height / 2); }
  document.getElementById('zoom-in').onclick = function () { zoomCentre(1.25); };
  document.getElementById('zoom-out').onclick = function () { zoomCentre(0.8); };
  document.getElementById('fit').onclick = fit;
  document.getElementById('expand-all').onclick = function () {
    svg.querySelectorAll('.node.collapsed').forEach(function (n) { n.classList.remove('collapsed'); });
    Object.keys(items).forEach(function (id) { items[id].style.display = ''; });
  };
  document.getElementById('export').onclick = function () {
    var copy = svg.cloneNode(true), b = copy.viewBox.baseVal;
    b.x = full.x; b.y = full.y; b.width = full.w; b.height = full.h;
    copy.setAttribute('width', full.w); copy.setAttribute('height', full.h);
    copy.querySelectorAll('g.item[style*="none"]').forEach(function (g) { g.remove(); });
    var text = '<?xml version="1.0" encoding="UTF-8"?>\\n' + new XMLSerializer().serializeToString(copy);
    var a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([text], {type: 'image/svg+xml'}));
    a.download = 'beam-search-tree.svg'; document.body.appendChild(a); a.click(); a.remove();
  };
  document.getElementById('status').textContent =
    svg.querySelectorAll('g.item:not(.greedy-only)').length +
    ' nodes; click a node to collapse it, scroll to zoom, drag to pan';
})();
</script></body></html>
"""


class Trace(SearchTree):
    """The tree a search explored, drawn in a notebook as its interactive page (:func:`to_html`);
    pass ``trace=Trace()`` to a search and it is filled. Its attributes and methods are those of
    :class:`beamsearch.core.trace.SearchTree` (the arrays over the ``n`` nodes)."""

    def _repr_html_(self) -> str:
        return to_html(self)


@dataclass
class _Node:
    """One drawn node: a trace node, or (``id`` >= the trace's length, status ``greedy-only``) a
    step of the greedy path the beam never made."""

    id: int
    parent: int
    input: int
    token: int
    step: int
    logprob: float
    token_logprob: float
    score: float
    status: str
    rank: int
    y: float = 0.0
    on_greedy: bool = False


def to_svg(trace: Trace, *, vocab: Any = None, greedy: Trace | None = None, input: int | None = None,
           labels: Sequence[str] | None = None) -> str:
    """The search tree as a standalone SVG document (styles inline), for papers and READMEs.

    Args:
        trace: a filled :class:`Trace`.
        vocab: None (tokens as ids), a list of strings (``vocab[id]``), or a tokenizer with
            ``decode(list_of_ids) -> str``.
        greedy: the :class:`Trace` of a greedy run (``greedy_decode(..., trace=...)`` or beam 1)
            on the same input(s): its best path is overlaid.
        input: draw only this input's tree (default: every input, one below the other).
        labels: the heading of each input's tree, one per input of the trace (default ``input
            i``, ``i`` counted from 0), e.g. the line of a file it came from.

    Returns:
        The SVG text; node ``g.item`` elements carry ``data-*`` numbers (see :func:`to_html`).
    """
    return _svg(trace, vocab, greedy, input, labels, page=False)


def to_html(trace: Trace, *, vocab: Any = None, greedy: Trace | None = None, input: int | None = None,
            title: str = "Beam search tree", labels: Sequence[str] | None = None) -> str:
    """The search tree as one self-contained HTML page (inline script and styles, no network).

    Args:
        trace, vocab, greedy, input, labels: as for :func:`to_svg`.
        title: the page title.

    Returns:
        The HTML text. Each node is a ``g.item`` (``data-id``, ``data-parent``) holding its
        incoming edge, its label and a ``.node`` group with class ``root``, ``kept``, ``pruned``,
        ``finished``, ``unfinished`` or ``greedy-only`` and ``data-token``, ``data-text``,
        ``data-step``, ``data-p``, ``data-logprob``, ``data-score``, ``data-status``,
        ``data-rank``; the path to each input's best result has class ``best``.
    """
    return page(_svg(trace, vocab, greedy, input, labels, page=True), title)


def page(svg: str, title: str) -> str:
    """An SVG (``#viewport`` inside) as :func:`to_html`'s page; a ``.node``'s ``data-tip`` is its tooltip."""
    return _PAGE.replace("__TITLE__", html.escape(title)).replace("__SVG__", svg)


# ---- layout and drawing ---------------------------------------------------------------------------

def _svg(trace: Trace, vocab: Any, greedy: Trace | None, input: int | None, labels: Sequence[str] | None,
         page: bool) -> str:
    if not isinstance(trace, Trace) or not hasattr(trace, "input"):
        raise TypeError(f"trace must be a Trace filled by a search; got {trace!r:.80}")
    if greedy is not None and (not isinstance(greedy, Trace) or not hasattr(greedy, "input")):
        raise TypeError(f"greedy must be the Trace of a greedy search or None; got {greedy!r:.80}")
    inputs = range(trace.n_inputs) if input is None else [_input(trace, input)]
    if greedy is not None and greedy.n_inputs != trace.n_inputs:
        raise ValueError(f"greedy has {greedy.n_inputs} inputs; the trace has {trace.n_inputs}")
    if labels is None:
        labels = [f"input {i}" for i in range(trace.n_inputs)]
    elif isinstance(labels, str) or len(labels) != trace.n_inputs:
        raise ValueError(f"labels must be one text per input of the trace ({trace.n_inputs}); got {labels!r:.80}")
    parts, top, width = [], MARGIN, 0
    for i in inputs:
        nodes = _nodes(trace, i, greedy)
        slots = _layout(nodes)
        body, w = _draw(nodes, trace, i, vocab, top, str(labels[i]))
        parts.append(body)
        top += slots * DY + 2 * DY
        width = max(width, w)
    height = top + _LEGEND_H
    parts.append(_legend(height - _LEGEND_H + 10, greedy is not None))
    size = "" if page else f' width="{width}" height="{height}"'
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="bs-tree" viewBox="0 0 {width} {height}"{size}>'
            f'<style>{_CSS}</style><rect width="{width}" height="{height}" fill="#fff"/>'
            f'<g id="viewport">{"".join(parts)}</g></svg>')


def _input(trace: Trace, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"input must be an integer; got {value!r}")
    if not 0 <= value < trace.n_inputs:
        raise ValueError(f"input must be in [0, {trace.n_inputs}); got {value}")
    return int(value)


def _nodes(trace: Trace, i: int, greedy: Trace | None) -> dict[int, _Node]:
    """Input i's nodes (trace order), plus the greedy path's nodes the trace lacks (ids from
    ``len(trace)`` on)."""
    ids = np.flatnonzero(trace.input == i)
    nodes = {int(v): _Node(int(v), int(trace.parent[v]), i, int(trace.token[v]), int(trace.step[v]),
                           float(trace.logprob[v]), float(trace.token_logprob[v]), float(trace.score[v]),
                           STATUS[trace.status[v]], int(trace.rank[v])) for v in ids}
    if greedy is None or greedy.best(i) < 0:
        return nodes
    child = {(n.parent, n.token): n.id for n in nodes.values()}  # a prefix is one node
    at, new = i, len(trace)
    nodes[at].on_greedy = True
    g_path = _path(greedy, greedy.best(i))
    for g in g_path:
        token = int(greedy.token[g])
        if (at, token) in child:
            at = child[(at, token)]
        else:  # the beam never made this prefix: draw it as a greedy-only node
            nodes[new] = _Node(new, at, i, token, int(greedy.step[g]), float(greedy.logprob[g]),
                               float(greedy.token_logprob[g]), float(greedy.score[g]), "greedy-only", -1)
            at, new = new, new + 1
        nodes[at].on_greedy = True
    return nodes


def _path(trace: Trace, node: int) -> list[int]:
    """The nodes from a root's child down to ``node``."""
    out = []
    while trace.parent[node] >= 0:
        out.append(node)
        node = int(trace.parent[node])
    return out[::-1]


def _layout(nodes: dict[int, _Node]) -> int:
    """Give every node its ``y`` in leaf slots (a leaf per slot, in depth-first order with each
    node's children best first; a parent midway between its first and last child). Returns the
    number of slots."""
    kids: dict[int, list[_Node]] = {}
    for n in nodes.values():
        kids.setdefault(n.parent, []).append(n)
    for group in kids.values():
        group.sort(key=lambda n: (n.status == "greedy-only", -n.logprob if math.isfinite(n.logprob) else math.inf))
    root = next(n for n in nodes.values() if n.parent < 0)
    slot, stack = 0, [(root, False)]
    while stack:  # iterative post-order walk (a search can be deeper than Python's recursion limit)
        n, done = stack.pop()
        below = kids.get(n.id, [])
        if not below:
            n.y, slot = float(slot), slot + 1
        elif done:
            n.y = (below[0].y + below[-1].y) / 2
        else:
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(below))
    return slot


def _text(token: int, vocab: Any) -> str:
    if token < 0:
        return ""
    if vocab is None:
        return str(token)
    if hasattr(vocab, "decode"):
        return str(vocab.decode([token]))
    return str(vocab[token])


def _num(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else str(x)


def _draw(nodes: dict[int, _Node], trace: Trace, i: int, vocab: Any, top: float, label: str) -> tuple[str, int]:
    """SVG for input i's tree placed ``top`` px down under ``label``; returns it and its width in px."""
    best = trace.best(i)
    on_best: set[int] = set()  # node ids on the best result's path
    on_result: set[int] = set()  # node ids on another result's path
    for r in trace.results(i):
        for v in _path(trace, int(r)):
            (on_best if r == best else on_result).add(v)
    prompt = "".join(_text(t, vocab) for t in trace.prompts[i]) if trace.prompts[i] else ""
    out = [f'<text class="input-label" x="{MARGIN}" y="{top - 12}">{html.escape(label)}'
           f'{html.escape(": " + prompt) if prompt else ""}</text>']
    prefix: dict[int, str] = {}
    xy = {n.id: (MARGIN + n.step * DX + 10, top + n.y * DY) for n in nodes.values()}
    for n in sorted(nodes.values(), key=lambda n: (n.step, n.id)):
        x, y = xy[n.id]
        text = _text(n.token, vocab)
        prefix[n.id] = prefix.get(n.parent, "") + text
        kind = "greedy-only" if n.status == "greedy-only" else n.status
        cls = "item " + kind
        edge = ""
        if n.parent in xy:
            px, py = xy[n.parent]
            mx = (px + x) / 2
            ecls = "edge " + ("pruned" if kind == "pruned" else "") + (" best" if n.id in on_best else "") + \
                   (" nbest" if n.id in on_result else "")
            p = math.exp(n.token_logprob) if math.isfinite(n.token_logprob) else 0.0
            curve = f"M{px:.1f},{py:.1f} C{mx:.1f},{py:.1f} {mx:.1f},{y:.1f} {x:.1f},{y:.1f}"
            edge = (f'<path class="{ecls.strip()}" d="{curve}"/><text class="label" x="{x - 8:.1f}" '
                    f'y="{y - 5:.1f}" text-anchor="end">{html.escape(text)} {p:.2f}</text>')
            if n.on_greedy:
                edge += f'<path class="greedy-line" d="{curve}"/>'
        p = math.exp(n.token_logprob) if n.parent >= 0 else 1.0
        rank = f"{n.rank + 1}" if n.rank >= 0 else ""
        ncls = f"node {kind}" + (" on-greedy" if n.on_greedy else "") + (" best" if n.id in on_best else "")
        badge = (f'<text class="rank" x="{x + 9:.1f}" y="{y + 4:.1f}">#{rank} {_num(n.score)}</text>'
                 if rank else "")
        out.append(
            f'<g class="{cls}" data-id="{n.id}" data-parent="{n.parent}">{edge}'
            f'<g class="{ncls}" data-token="{n.token}" data-text="{html.escape(prefix[n.id] or "(empty)")}" '
            f'data-step="{n.step}" data-p="{_num(p)}" data-logprob="{_num(n.logprob)}" '
            f'data-score="{_num(n.score)}" data-status="{kind}" data-rank="{rank}">'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5"/>{badge}</g></g>')
    steps = max((n.step for n in nodes.values()), default=0)
    return "".join(out), int(MARGIN + (steps + 1) * DX + 120)


_LEGEND_H = 40
_LEGEND = (("kept", "kept"), ("pruned", "pruned (best few per row)"), ("finished", "finished"),
           ("unfinished", "ended unfinished"))


def _legend(y: float, with_greedy: bool) -> str:
    out, x = ['<g class="legend">'], MARGIN
    for cls, label in _LEGEND:
        out.append(f'<g class="node {cls}"><circle cx="{x}" cy="{y}" r="5"/></g>'
                   f'<text x="{x + 9}" y="{y + 4}">{label}</text>')
        x += 40 + 6 * len(label)
    out.append(f'<path class="edge best" d="M{x},{y} l24,0"/><text x="{x + 30}" y="{y + 4}">best result (#1)</text>')
    x += 140
    if with_greedy:
        out.append(f'<path class="greedy-line" d="M{x},{y} l24,0"/><text x="{x + 30}" y="{y + 4}">greedy</text>')
    out.append("</g>")
    return "".join(out)
