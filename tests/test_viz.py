"""beamsearch.viz: the SVG and the page, read as XML here and run in a real browser (Debian's
chromium driven by Playwright's Python API; nothing is downloaded)."""

from __future__ import annotations

import io
import os
import pathlib
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from beamsearch import beam_search, beam_search_batch, greedy_decode
from beamsearch.viz import Trace, to_html, to_svg
from models import PrefixModel, SequenceModel, greedy_oracle, random_table

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]
SVG = "{http://www.w3.org/2000/svg}"
V, EOS, SEED = 5, 0, 15  # seed 15: beam 3 finds [2, 1, 0] while greedy goes [4, 2, 1, 2]
VOCAB = ["<eos>", "a", "b", "c", "d"]
CHROMIUM = os.environ.get("BEAMSEARCH_CHROMIUM", "/usr/bin/chromium")


def searches(backend="numpy"):
    """Beam 3 and greedy on the same random prefix model (V=5, eos 0, 4 steps)."""
    table = random_table(V, SEED)
    model = PrefixModel(table, backend=backend)
    trace, greedy = Trace(), Trace()
    results = beam_search(model.step, model.init_state(), 0, EOS, 3, 4, 0.0, trace=trace, trace_width=2)
    g = greedy_decode(model.step, model.init_state(), 0, EOS, 4, trace=greedy)
    return trace, greedy, results, g, table


def items(svg_text):
    root = ET.fromstring(svg_text)
    return root, [g for g in root.iter(SVG + "g") if "item" in g.get("class", "").split()]


def node_of(item):
    return next(g for g in item if g.get("class", "").startswith("node"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_svg_has_every_node_and_the_best_path(backend):
    trace, greedy, results, g, table = searches(backend)
    assert results[0].tokens != g.tokens  # the case the picture is for
    _, nodes = items(to_svg(trace, vocab=VOCAB))
    assert len(nodes) == len(trace)
    assert sorted(int(n.get("data-id")) for n in nodes) == list(range(len(trace)))
    best = sorted((node_of(n) for n in nodes if "best" in node_of(n).get("class").split()),
                  key=lambda n: int(n.get("data-step")))
    assert [int(n.get("data-token")) for n in best] == results[0].tokens
    ranked = {int(node_of(n).get("data-rank")): node_of(n) for n in nodes if node_of(n).get("data-rank")}
    assert sorted(ranked) == list(range(1, len(results) + 1))
    for r, h in enumerate(results, 1):
        assert float(ranked[r].get("data-score")) == pytest.approx(h.score, abs=1e-4)
    statuses = [node_of(n).get("data-status") for n in nodes]
    assert statuses.count("pruned") == int((trace.status == 2).sum()) > 0


def test_greedy_overlay_adds_the_path_the_beam_never_kept():
    trace, greedy, results, g, table = searches()
    tokens, _ = greedy_oracle(table, EOS, 4)
    _, nodes = items(to_svg(trace, greedy=greedy))
    on = sorted((node_of(n) for n in nodes if "on-greedy" in node_of(n).get("class").split()),
                key=lambda n: int(n.get("data-step")))
    assert [int(n.get("data-token")) for n in on[1:]] == tokens  # root, then the greedy tokens
    # the beam kept the greedy prefix as far as it goes in the trace; the rest are greedy-only nodes
    shared = 0
    while shared < len(tokens) and any(trace.tokens(int(v)) == tokens[: shared + 1] for v in range(len(trace))):
        shared += 1
    extra = [n for n in nodes if "greedy-only" in n.get("class").split()]
    assert len(extra) == len(tokens) - shared and len(nodes) == len(trace) + len(extra)


@pytest.mark.parametrize("width, extra", [(0, 2), (1, 1)])
def test_greedy_path_outside_the_beam_is_drawn_as_greedy_only_nodes(width, extra):
    """Hand example (eos 0, a 1, b 2, c 3): p(a, b, c) = .4, .35, .25; after a: .34, .33, .33 for
    a, b, c; after b: .5, .45, .05; anything else uniform. Greedy: a (.4), a (.34), then a uniform
    row -> eos (ties to the lowest id). Beam 2 keeps a, b at step 1 and then b-a (.35 * .5 = .175),
    b-b (.1575) over a-a (.4 * .34 = .136): a-a is pruned (recorded with trace_width >= 1), so the
    beam's tree holds greedy's a, maybe a-a, and never a-a-eos: 2 or 1 greedy-only nodes."""
    probs = {(): [0, .4, .35, .25], (1,): [0, .34, .33, .33], (2,): [0, .5, .45, .05]}
    model = PrefixModel(lambda p: np.log(np.array(probs.get(p, [.25] * 4)) + 1e-300))
    trace, greedy = Trace(), Trace()
    beam_search(model.step, model.init_state(), 0, EOS, 2, 3, 0.0, trace=trace, trace_width=width)
    assert greedy_decode(model.step, model.init_state(), 0, EOS, 3, trace=greedy).tokens == [1, 1, 0]
    _, nodes = items(to_svg(trace, greedy=greedy))
    only = [node_of(n) for n in nodes if "greedy-only" in n.get("class").split()]
    assert len(only) == extra and len(nodes) == len(trace) + extra
    assert [int(n.get("data-token")) for n in only] == [1, 0][2 - extra:]
    assert float(only[-1].get("data-logprob")) == pytest.approx(np.log(.4 * .34 * .25), abs=1e-4)


def test_vocab_list_and_tokenizer_give_the_same_labels():
    trace, *_ = searches()

    class Tokenizer:
        def decode(self, ids):
            return "".join(VOCAB[i] for i in ids)

    assert to_svg(trace, vocab=VOCAB) == to_svg(trace, vocab=Tokenizer())
    _, nodes = items(to_svg(trace, vocab=VOCAB))
    v = trace.best(0)
    text = node_of(next(n for n in nodes if int(n.get("data-id")) == v)).get("data-text")
    assert text == "".join(VOCAB[t] for t in trace.tokens(v))


def test_page_is_self_contained_and_repr_html_is_the_page():
    trace, greedy, *_ = searches()
    page = to_html(trace, greedy=greedy)
    assert trace._repr_html_() == to_html(trace)
    for needle in ("<script src", "<link", "@import", "url(", "src=\"http", "href=\"http"):
        assert needle not in page
    assert "<script>" in page and "<style>" in page


def batch_trace():
    """The trace of a beam search over two inputs, prompts [1] and [2, 3]."""
    table = random_table(V, 3)
    prompts = [[1], [2, 3]]
    model = SequenceModel(table)
    trace = Trace()
    beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=3, beam_size=2,
                      trace=trace)
    return trace


def test_batch_trace_draws_each_input_or_one():
    trace = batch_trace()
    assert len(items(to_svg(trace))[1]) == len(trace)
    _, one = items(to_svg(trace, input=1))
    assert len(one) == int((trace.input == 1).sum())


def test_labels_head_each_inputs_tree():
    trace = batch_trace()
    heads = [t.text for t in ET.fromstring(to_svg(trace)).iter("{http://www.w3.org/2000/svg}text")
             if t.get("class") == "input-label"]
    assert heads == ["input 0: 1", "input 1: 23"]  # the default: inputs from 0, then the prompt's tokens
    svg = to_svg(trace, labels=["line 7 <a>", "line 9"])
    heads = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")
             if t.get("class") == "input-label"]
    assert heads == ["line 7 <a>: 1", "line 9: 23"]  # escaped in the SVG, read back as given
    assert "line 7 &lt;a&gt;" in to_html(trace, labels=["line 7 <a>", "line 9"], input=0)


@pytest.mark.parametrize("kw, error, word", [
    (dict(input=2), ValueError, "input"), (dict(input="0"), TypeError, "input"),
    (dict(greedy="x"), TypeError, "greedy"), (dict(labels=["a", "b"]), ValueError, "labels"),
    (dict(labels="a"), ValueError, "labels"),
])
def test_bad_arguments(kw, error, word):
    trace, *_ = searches()
    with pytest.raises(error, match=word):
        to_html(trace, **kw)
    with pytest.raises(TypeError, match="trace"):
        to_svg(Trace())


# ---- in a real browser ---------------------------------------------------------------------------

def _browser_missing():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[viz-test]')"
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
    return None


browser_only = pytest.mark.skipif(_browser_missing() is not None, reason=str(_browser_missing()))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, path):
    """The page loaded from a file; every request is routed and any non-file URL is recorded and
    aborted (so the page cannot reach the network, and a test sees that it tried)."""
    page = browser.new_page(viewport={"width": 1100, "height": 700}, accept_downloads=True)
    outside = []

    def route(r):
        if r.request.url.startswith(("file:", "blob:", "data:")):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("request", lambda req: None if req.url.startswith(("file:", "blob:", "data:")) else outside.append(req.url))
    page.goto(pathlib.Path(path).resolve().as_uri())
    page.wait_for_load_state("load")
    return page, outside


def visible(page):
    return page.locator("g.item:not(.greedy-only)").evaluate_all(
        "els => els.filter(e => e.getBoundingClientRect().width > 0).length")


@browser_only
def test_page_in_browser_nodes_best_path_collapse_and_screenshot(browser, tmp_path):
    trace, greedy, results, *_ = searches()
    path = tmp_path / "tree.html"
    path.write_text(to_html(trace, vocab=VOCAB, greedy=greedy))
    page, outside = open_page(browser, path)
    assert page.locator("g.item:not(.greedy-only)").count() == len(trace)
    assert visible(page) == len(trace)
    best = page.locator("g.node.best").evaluate_all(
        "els => els.map(e => [+e.dataset.step, +e.dataset.token]).sort((a, b) => a[0] - b[0]).map(x => x[1])")
    assert best == trace.tokens(trace.best(0)) == results[0].tokens
    # collapse the root's first kept child: its descendants (from the trace) disappear, then come back
    child = int(next(v for v in trace.children(0) if trace.children(int(v)).size))
    below, frontier = 0, [child]
    while frontier:
        kids = [int(c) for v in frontier for c in trace.children(v)]
        below, frontier = below + len(kids), kids
    page.locator(f'g.item[data-id="{child}"] > g.node').click()
    assert visible(page) == len(trace) - below
    assert page.locator(f'g.item[data-id="{child}"] > g.node.collapsed').count() == 1
    shot = page.screenshot(path=str(tmp_path / "collapsed.png"))
    page.locator(f'g.item[data-id="{child}"] > g.node').click()
    assert visible(page) == len(trace)
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("L"), dtype=np.float64)
    assert pixels.var() > 100.0  # a blank page has variance 0 (checked below); the tree is far above
    blank = browser.new_page(viewport={"width": 1100, "height": 700})
    blank.set_content("<html><body style='background:#fff'></body></html>")
    assert np.asarray(Image.open(io.BytesIO(blank.screenshot())).convert("L"), dtype=np.float64).var() == 0.0
    blank.close()
    assert outside == []
    page.close()


@browser_only
def test_page_hover_zoom_and_svg_export(browser, tmp_path):
    trace, greedy, results, *_ = searches()
    path = tmp_path / "tree.html"
    path.write_text(to_html(trace, greedy=greedy))
    page, outside = open_page(browser, path)
    best = trace.best(0)
    page.locator(f'g.item[data-id="{best}"] > g.node').hover()
    tip = page.locator("#tip").inner_text()
    assert f"{trace.score[best]:.4f}" in tip and "finished" in tip and "result #1" in tip
    width = page.evaluate("document.querySelector('#view svg').viewBox.baseVal.width")
    page.mouse.move(500, 300)
    page.mouse.wheel(0, -300)
    assert page.evaluate("document.querySelector('#view svg').viewBox.baseVal.width") < width
    page.locator("#fit").click()
    assert page.evaluate("document.querySelector('#view svg').viewBox.baseVal.width") == width
    page.locator(f'g.item[data-id="{int(trace.children(0)[0])}"] > g.node').click()  # collapse, then export
    shown = visible(page) + page.locator("g.item.greedy-only").evaluate_all(
        "els => els.filter(e => e.getBoundingClientRect().width > 0).length")
    with page.expect_download() as info:
        page.locator("#export").click()
    exported = pathlib.Path(info.value.path()).read_text()
    _, nodes = items(exported)
    assert len(nodes) == shown < len(trace)
    assert outside == []
    page.close()


@browser_only
def test_the_network_check_sees_a_request(browser, tmp_path):
    """The check above is not vacuous: a page that loads an image from the web is caught."""
    path = tmp_path / "leaky.html"
    path.write_text('<html><body><img src="http://example.invalid/x.png"></body></html>')
    page, outside = open_page(browser, path)
    assert outside and outside[0].startswith("http://example.invalid/")
    page.close()
