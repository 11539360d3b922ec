"""The pictures of the CTC and transducer searches (beamsearch.speech.trace_draw): the SVG read as XML
against the traces' nodes, and the pages in a real browser (Debian's chromium through Playwright, as
tests/test_viz.py)."""

from __future__ import annotations

import pathlib
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from beamsearch.speech import Vocabulary, ctc_beam_search, transducer_beam_search
from beamsearch.speech.trace import CTCTrace
from beamsearch.speech.trace_draw import ctc_html, ctc_svg, transducer_html, transducer_svg
from beamsearch.speech.transducer_trace import TransducerTrace
from oracles.ctc import log_softmax
from oracles.transducer import TinyTransducer
from test_viz import browser, browser_only, open_page, visible  # noqa: F401  (browser: the fixture)

SVG = "{http://www.w3.org/2000/svg}"
VOCAB = Vocabulary(["_", "a", "b", "c"])


def traced(seed=3, n=2, frames=8):
    lp = log_softmax(np.random.default_rng(seed).normal(size=(n, frames, 4)) * 2.0)
    trace = CTCTrace()
    hyps = ctc_beam_search(lp, blank=0, beam_size=3, n_best=2, vocabulary=VOCAB, trace=trace)
    return trace, hyps


def items(svg_text):
    return [g for g in ET.fromstring(svg_text).iter(SVG + "g") if "item" in g.get("class", "").split()]


def node_of(item):
    return next(g for g in item if g.get("class", "").startswith("node"))


def test_svg_has_every_node_its_edges_and_the_ranked_paths():
    trace, hyps = traced()
    got = items(ctc_svg(trace))  # each utterance's nodes, one utterance after the other
    assert [int(g.get("data-id")) for g in got] == [n.id for n in sorted(trace.nodes, key=lambda n: n.utterance)]
    by_id = {int(g.get("data-id")): g for g in got}
    for n in trace.nodes:
        g = by_id[n.id]
        edges = [p.get("class").split() for p in g if p.tag == SVG + "path"]
        assert [e[1] for e in edges] == ([] if n.parent < 0 else ["pruned" if n.status == "pruned" else n.kind]) + \
            (["merge"] if n.merged_from >= 0 else [])
        assert node_of(g).get("data-text") == trace.text(n.labels)
        assert node_of(g).get("data-rank") == ("" if n.rank < 0 else str(n.rank + 1))
    assert any(n.merged_from >= 0 for n in trace.nodes) and any(n.status == "pruned" for n in trace.nodes)
    for u in range(2):  # the thick path: from the start node to the best hypothesis, one node per frame
        best = [int(g.get("data-id")) for g in got if int(g.get("data-id")) in {n.id for n in trace.nodes
                                                                               if n.utterance == u}
                and "best" in node_of(g).get("class").split()]
        path = trace.path(trace.best(u))
        assert best == [n.id for n in path] and "".join(VOCAB.tokens[t] for t in path[-1].labels) == hyps[u][0].text
    root = ET.fromstring(ctc_svg(trace, utterance=1, labels=["x", "the second"]))
    assert root.get("width") and "the second" in "".join(root.itertext())
    assert {int(g.get("data-id")) for g in items(ctc_svg(trace, utterance=1))} == \
        {n.id for n in trace.nodes if n.utterance == 1}


@pytest.mark.parametrize("kw, error, words", [
    ({"utterance": 2}, ValueError, "utterance must be an integer in [0, 2); got 2"),
    ({"utterance": True}, ValueError, "utterance must be an integer"),
    ({"labels": ["one"]}, ValueError, "labels must be one text per utterance of the trace (2)"),
    ({"labels": "ab"}, ValueError, "labels must be one text per utterance"),
])
def test_bad_arguments(kw, error, words):
    trace, _ = traced()
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ctc_svg(trace, **kw)


def test_a_trace_no_search_finished():
    with pytest.raises(TypeError, match="trace must be a CTCTrace filled by a search; got 3"):
        ctc_html(3)
    with pytest.raises(ValueError, match="trace must be filled by a finished search"):
        ctc_svg(CTCTrace())


@browser_only
def test_page_in_browser_best_path_tooltip_collapse(browser, tmp_path):  # noqa: F811
    trace, hyps = traced(n=1, frames=10)
    path = tmp_path / "ctc.html"
    path.write_text(ctc_html(trace, title="one utterance"))
    page, outside = open_page(browser, pathlib.Path(path))
    assert page.locator("g.item").count() == visible(page) == len(trace.nodes)
    best = page.locator("g.item:has(> g.node.best)").evaluate_all("els => els.map(e => +e.dataset.id)")
    assert sorted(best) == [n.id for n in trace.path(trace.best(0))]
    top = trace.nodes[trace.best(0)]
    page.locator(f'g.item[data-id="{top.id}"] > g.node').hover()
    tip = page.locator("#tip").inner_text()
    assert hyps[0][0].text in tip and "result #1" in tip and f"{top.logprob:.4f}" in tip
    first = next(n for n in trace.at(0, 1) if any(m.parent == n.id for m in trace.nodes))  # collapse a frame-1 node
    below, frontier = 0, [first.id]
    while frontier:
        kids = [m.id for m in trace.nodes if m.parent in frontier]
        below, frontier = below + len(kids), kids
    page.locator(f'g.item[data-id="{first.id}"] > g.node').click()
    assert visible(page) == len(trace.nodes) - below
    page.locator(f'g.item[data-id="{first.id}"] > g.node').click()
    assert visible(page) == len(trace.nodes)
    assert outside == []
    page.close()


def transducer_traced(seed=0, n=2, frames=4):
    model = TinyTransducer.make(seed, n=n, frames=frames, vocab=3, durations=[0, 1, 2])
    trace = TransducerTrace()
    hyps = transducer_beam_search(model.enc, None, predictor=model.predictor, joint=model.joint, blank=0,
                                  state=model.state0(), durations=model.durations, max_symbols_per_frame=2,
                                  beam_size=3, n_best=2, vocabulary=["_", "a", "b"], trace=trace)
    return trace, hyps


def test_transducer_svg_has_every_node_its_edges_merges_and_the_ranked_paths():
    trace, hyps = transducer_traced()
    got = items(transducer_svg(trace))
    assert sorted(int(g.get("data-id")) for g in got) == [n.id for n in trace.nodes]
    by_id = {int(g.get("data-id")): g for g in got}
    for n in trace.nodes:
        g = by_id[n.id]
        edges = [p.get("class").split()[1] for p in g if p.tag == SVG + "path"]
        if n.kind == "end":
            assert edges == ["finish"] * len(n.parents)
        else:
            assert edges == [("pruned" if n.status == "pruned" else m) if i == 0 else "merge"
                             for i, m in enumerate(n.moves)]
        assert node_of(g).get("data-text") == trace.text(n.labels)
        assert node_of(g).get("data-rank") == ("" if n.rank < 0 else str(n.rank + 1))
        assert int(g.get("data-frame")) == n.step and int(g.get("data-parent")) == n.parent
    assert any(len(n.parents) > 1 for n in trace.nodes) and any(n.status == "pruned" for n in trace.nodes)
    for u in range(2):  # the thick path: from the start node to the best hypothesis
        best = {int(g.get("data-id")) for g in got if "best" in node_of(g).get("class").split()
                and trace.nodes[int(g.get("data-id"))].utterance == u}
        path = trace.path(trace.best(u))
        assert best == {n.id for n in path} and trace.text(path[-1].labels) == hyps[u][0].text
    assert {int(g.get("data-id")) for g in items(transducer_svg(trace, utterance=1))} == \
        {n.id for n in trace.nodes if n.utterance == 1}
    with pytest.raises(TypeError, match="trace must be a TransducerTrace filled by a search"):
        transducer_svg(CTCTrace())
    with pytest.raises(ValueError, match="trace must be filled by a finished search"):
        transducer_html(TransducerTrace())
    with pytest.raises(ValueError, match=r"utterance must be an integer in \[0, 2\); got 5"):
        transducer_svg(trace, utterance=5)


@browser_only
def test_transducer_page_in_browser_best_path_tooltip_collapse(browser, tmp_path):  # noqa: F811
    trace, hyps = transducer_traced(n=1, frames=5)
    path = tmp_path / "tdt.html"
    path.write_text(transducer_html(trace, title="one utterance"))
    page, outside = open_page(browser, pathlib.Path(path))
    assert page.locator("g.item").count() == visible(page) == len(trace.nodes)
    best = page.locator("g.item:has(> g.node.best)").evaluate_all("els => els.map(e => +e.dataset.id)")
    assert sorted(best) == sorted(n.id for n in trace.path(trace.best(0)))
    top = trace.nodes[trace.best(0)]
    page.locator(f'g.item[data-id="{top.id}"] > g.node').hover()
    tip = page.locator("#tip").inner_text()
    assert hyps[0][0].text in tip and "end  (result #1)" in tip and f"{top.total:.4f}" in tip
    first = next(n for n in trace.at(0, 1) if any(m.parent == n.id for m in trace.nodes))
    below, frontier = 0, [first.id]  # what grew from it by best parents
    while frontier:
        kids = [m.id for m in trace.nodes if m.parent in frontier]
        below, frontier = below + len(kids), kids
    page.locator(f'g.item[data-id="{first.id}"] > g.node').click()
    assert visible(page) == len(trace.nodes) - below
    page.locator(f'g.item[data-id="{first.id}"] > g.node').click()
    assert visible(page) == len(trace.nodes)
    assert outside == []
    page.close()
