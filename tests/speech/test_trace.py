"""The CTC search's trace (beamsearch.speech.trace) against a plain prefix beam search
(tests/oracles/ctc.py) run on the first t frames: the search is causal, so its beam after frame t
is that search's final beam. What merged, what was pruned and the best path follow from those
beams by the definitions in the module's docstring."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech import CTCStream, Vocabulary, ctc_beam_search
from beamsearch.speech.trace import CTCTrace
from oracles.ctc import allowed_starts, log_softmax, prefix_beam_search


def random_case(rng):
    frames, vocab, beam = int(rng.integers(1, 7)), int(rng.integers(2, 5)), int(rng.integers(1, 5))
    return log_softmax(rng.normal(size=(frames, vocab)) * float(rng.choice([0.5, 2.0, 5.0]))), \
        int(rng.integers(0, vocab)), beam


def extensions_left_out(prev, want, lp_t, blank, allowed_t, width):
    """The ``width`` most probable extensions of the beam ``prev`` ({prefix: (pb, pnb)}) that are
    neither a prefix of ``prev`` (merged there) nor kept in ``want``: {(prefix, extended): log-prob}."""
    out = {}
    for p, (pb, pnb) in prev.items():
        for c in range(lp_t.shape[0]):
            child = p + (c,)
            if c == blank or child in prev or child in want or (allowed_t is not None and not allowed_t[c]):
                continue
            out[(p, child)] = (pb if p and p[-1] == c else np.logaddexp(pb, pnb)) + lp_t[c]
    ranked = sorted((v, k) for k, v in out.items() if v > -np.inf)[::-1][:width]
    return {k: v for v, k in ranked}


def check_against_plain(trace, u, lp, blank, beam, allowed=None, threshold=None, width=2):
    """Each frame's kept prefixes and log-probs, pruned prefixes (those that left the beam and the
    best extensions left out) and merges, as the plain search's."""
    prev: dict = {(): (0.0, -np.inf)}
    assert [(n.labels, n.kind) for n in trace.at(u, 0)] == [((), "start")]
    beams: list = []
    prefix_beam_search(lp, blank, beam, allowed, threshold, frames=beams)
    for t in range(1, lp.shape[0] + 1):
        want = beams[t - 1]
        kept = trace.at(u, t)
        assert {n.labels for n in kept} == set(want)
        for n in kept:
            assert (n.pb, n.pnb) == pytest.approx(want[n.labels], abs=1e-9)
            assert n.logprob == pytest.approx(np.logaddexp(n.pb, n.pnb), abs=1e-12)
            source = trace.nodes[n.parent]
            assert source.frame == t - 1 and source.status == "kept"
            assert (source.labels == n.labels) == (n.kind == "stay")
            if n.kind == "label":
                assert source.labels + (n.label,) == n.labels
        assert [n.row for n in kept] == list(range(len(kept)))  # rows: the kept best first, then the pruned
        pruned = trace.at(u, t, "pruned")
        assert [n.row for n in pruned] == list(range(len(kept), len(kept) + len(pruned)))
        assert [n.logprob for n in kept] == sorted((n.logprob for n in kept), reverse=True)
        assert {n.labels for n in pruned if n.kind == "stay"} == set(prev) - set(want)
        left_out = extensions_left_out(prev, want, lp[t - 1], blank, None if allowed is None else allowed[t - 1], width)
        got = {(trace.nodes[n.parent].labels, n.labels): n.logprob for n in pruned if n.kind == "label"}
        assert got.keys() == left_out.keys()
        assert all(got[k] == pytest.approx(v, abs=1e-9) for k, v in left_out.items())
        merges = {(trace.nodes[n.merged_from].labels, n.labels) for n in kept if n.merged_from >= 0}
        may = [p for p in want if p and p[:-1] in prev and p in prev]  # both alive before: the extension is added
        assert merges == {(p[:-1], p) for p in may if allowed is None or allowed[t - 1, p[-1]]}
        prev = want


@pytest.mark.parametrize("seed", range(40))
def test_each_frames_beam_merges_and_pruned_prefixes_are_the_plain_searchs(seed):
    rng = np.random.default_rng(seed)
    lp, blank, beam = random_case(rng)
    trace = CTCTrace()
    hyps = ctc_beam_search(lp[None], blank=blank, beam_size=beam, n_best=beam, trace=trace)
    check_against_plain(trace, 0, lp, blank, beam)
    assert trace.frames == [lp.shape[0]]
    for rank, h in enumerate(hyps[0]):  # every returned hypothesis is a node of the last frame
        node = next(n for n in trace.nodes if n.rank == rank)
        assert list(node.labels) == h.tokens and node.frame == lp.shape[0] and node.status == "kept"
    best = trace.path(trace.best(0))
    assert [n.frame for n in best] == list(range(lp.shape[0] + 1)) and list(best[-1].labels) == hyps[0][0].tokens


@pytest.mark.parametrize("seed", range(12))
def test_a_batch_with_pruning_options_and_lengths(seed):
    """Several utterances of different lengths, label starts cut by top-k and a threshold."""
    rng = np.random.default_rng(100 + seed)
    vocab, blank, beam = 4, int(rng.integers(0, 4)), int(rng.integers(1, 5))
    lengths = rng.integers(0, 6, size=3)
    lp = log_softmax(rng.normal(size=(3, 5, vocab)) * 2.0)
    trace = CTCTrace()
    hyps = ctc_beam_search(lp, lengths, blank=blank, beam_size=beam, token_top_k=2, beam_threshold=3.0,
                           trace=trace)
    for u in range(3):
        frames = lp[u, : lengths[u]]
        check_against_plain(trace, u, frames, blank, beam, allowed_starts(frames, blank, top_k=2), 3.0)
        assert trace.frames[u] == lengths[u]
        assert list(trace.nodes[trace.best(u)].labels) == hyps[u][0].tokens


def test_tracing_changes_no_result_and_a_stream_records_as_one_search():
    rng = np.random.default_rng(7)
    lp = log_softmax(rng.normal(size=(2, 9, 5)) * 2.0)
    vocab = Vocabulary(["_", "a", "b", "|", "c"])
    kw = dict(blank=0, beam_size=4, n_best=3, vocabulary=vocab, hotwords=["ab"], lm=None)
    plain = ctc_beam_search(lp, **kw)
    whole, chunked = CTCTrace(), CTCTrace()
    traced = ctc_beam_search(lp, **kw, trace=whole)
    stream = CTCStream(2, 5, **kw, trace=chunked)
    for a, b in ((0, 4), (4, 5), (5, 9)):
        stream.feed(lp[:, a:b])
    streamed = stream.finish()
    for got in (traced, streamed):
        assert [[(h.tokens, h.score) for h in hs] for hs in got] == [[(h.tokens, h.score) for h in hs] for hs in plain]
    def rows(trace):
        return sorted((n.utterance, n.frame, n.row, n.labels, n.status, n.rank, n.merged_from >= 0, round(n.logprob, 9))
                      for n in trace.nodes)

    assert rows(whole) == rows(chunked)
    assert not any(n.kind == "label" and n.status == "pruned" for n in whole.nodes)  # hotwords: ranked otherwise
    assert whole.tokens == ["_", "a", "b", " ", "c"] and whole.text([1, 2, 3, 1]) == "ab a"  # "|": a space


def test_an_utterance_without_frames_has_its_start_node_ranked():
    trace = CTCTrace()
    ctc_beam_search(np.zeros((1, 3, 3)), [0], blank=0, beam_size=2, trace=trace)
    assert [(n.frame, n.labels, n.rank) for n in trace.nodes] == [(0, (), 0)]


@pytest.mark.parametrize("width", [0, 1, 5])
def test_width_is_how_many_extensions_left_out_are_recorded(width):
    rng = np.random.default_rng(11)
    lp = log_softmax(rng.normal(size=(6, 4)) * 2.0)
    trace = CTCTrace(width=width)
    ctc_beam_search(lp[None], blank=0, beam_size=2, trace=trace)
    check_against_plain(trace, 0, lp, 0, 2, width=width)
    assert max(len([n for n in trace.at(0, t, "pruned") if n.kind == "label"]) for t in range(7)) == width


def test_bad_traces():
    for width in (-1, 1.5, True):
        with pytest.raises(ValueError, match=f"width must be an integer >= 0 .*; got {width!r}"):
            CTCTrace(width=width)
    with pytest.raises(TypeError, match="trace must be a CTCTrace or None; got 'yes'"):
        ctc_beam_search(np.zeros((1, 2, 3)), blank=0, beam_size=2, trace="yes")
    trace = CTCTrace()
    ctc_beam_search(np.zeros((1, 2, 3)), blank=0, beam_size=2, trace=trace)
    with pytest.raises(ValueError, match="trace is already filled by a search"):
        ctc_beam_search(np.zeros((1, 2, 3)), blank=0, beam_size=2, trace=trace)
    empty = CTCTrace()
    ctc_beam_search(np.zeros((0, 2, 3)), blank=0, beam_size=2, trace=empty)  # no utterance, still one search
    with pytest.raises(ValueError, match="trace is already filled by a search"):
        ctc_beam_search(np.zeros((1, 2, 3)), blank=0, beam_size=2, trace=empty)
