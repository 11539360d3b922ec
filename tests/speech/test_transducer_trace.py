"""The transducer search's trace (beamsearch.speech.transducer_trace) against values computed here
without the search: each node's inflows are its parents' scores plus the log-probability of their
move, read off a one-row-at-a-time run of the tiny transducer (tests/oracles/transducer.py); a merged
node's score is the log-add of its inflows; each step keeps the best of its candidates by their
ranking score; the end nodes are the search's results, ranked, and equal its scores."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.speech import Vocabulary, transducer_beam_search
from beamsearch.speech.transducer_trace import TransducerTrace
from oracles.transducer import TinyTransducer

CASES = [(None, 1, "modified"), (None, 2, "alsd"), ([0, 1, 2], 2, "modified"), ([1, 2], 1, "alsd"),
         ([0, 1, 2, 3], 3, "alsd"), ([0, 2], 2, "modified")]


def traced(model, lengths, beam, m, method, **kw):
    trace = TransducerTrace()
    hyps = transducer_beam_search(model.enc, lengths, predictor=model.predictor, joint=model.joint,
                                  blank=model.blank, state=model.state0(), durations=model.durations,
                                  max_symbols_per_frame=m, beam_size=beam, n_best=beam, method=method,
                                  trace=trace, **kw)
    return trace, hyps


def move_logp(model, u, parent, node, i):
    """The log-probability of parent ``node.parents[i]``'s move into ``node``, computed here."""
    move, advance = node.moves[i], node.advances[i]
    if move == "wait":
        return 0.0
    tok, dur = model.emission(u, parent.frame, parent.labels)
    k = node.labels[-1] if move == "label" else model.blank
    return tok[k] + (0.0 if dur is None else dur[model.durations.index(advance)])


@pytest.mark.parametrize("durations,m,method", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_inflow_is_its_parents_score_and_move_and_a_merge_is_their_log_add(durations, m, method, seed):
    model = TinyTransducer.make(seed, n=2, frames=4, durations=durations)
    trace, hyps = traced(model, [4, 3], 3, m, method)
    merged = 0
    for node in trace.nodes:
        if node.kind == "start":
            assert node.parents == () and node.step == 0 and node.labels == () and node.score == 0.0
            continue
        if node.kind == "end":
            continue
        assert len(node.parents) == len(node.inflows) == len(node.moves) >= 1
        for i, p in enumerate(node.parents):
            parent = trace.nodes[p]
            assert parent.utterance == node.utterance and parent.step == node.step - 1 and parent.status == "kept"
            assert node.labels == parent.labels + ((node.labels[-1],) if node.moves[i] == "label" else ())
            assert node.inflows[i] == pytest.approx(parent.score + move_logp(model, node.utterance, parent, node, i),
                                                    abs=1e-9)
        assert node.score == pytest.approx(np.logaddexp.reduce(node.inflows), abs=1e-9)
        assert node.inflows[0] == max(node.inflows) and node.kind == node.moves[0]
        merged += len(node.parents) > 1
    assert merged  # every case here merges somewhere


@pytest.mark.parametrize("durations,m,method", CASES)
def test_each_step_keeps_the_best_of_its_candidates_and_the_end_is_the_result(durations, m, method):
    model = TinyTransducer.make(5, n=2, frames=5, durations=durations)
    beam = 3
    trace, hyps = traced(model, [5, 2], beam, m, method)
    for u in range(2):
        for step in range(1, trace.steps[u] + 1):
            nodes = trace.at(u, step)
            kept = [n for n in nodes if n.status == "kept"]
            live = [n for n in nodes if n.frame < trace.lengths[u]]  # the kept and those cut from the beam
            assert len(kept) <= beam and all(n.frame >= trace.lengths[u] for n in nodes if n.status == "finished")
            cut = sorted((n.total for n in live), reverse=True)[: len(kept)]
            assert sorted(n.total for n in kept) == pytest.approx(sorted(cut))  # the best by ranking score
            assert len(kept) == min(beam, len(live))
            assert [n.row for n in nodes] == list(range(len(nodes)))
        ends = sorted((n for n in trace.nodes if n.utterance == u and n.kind == "end"), key=lambda n: n.row)
        returned = sorted((n for n in ends if n.rank >= 0), key=lambda n: n.rank)
        assert [n.labels for n in returned] == [tuple(h.tokens) for h in hyps[u]]
        assert [n.score for n in returned] == pytest.approx([h.acoustic_score for h in hyps[u]], abs=1e-12)
        assert [n.total for n in returned] == pytest.approx([h.score for h in hyps[u]], abs=1e-12)
        for end in ends:  # the pool's merge: the log-add of the finished nodes of its labels
            parents = [trace.nodes[p] for p in end.parents]
            assert parents and all(p.status == "finished" and p.labels == end.labels for p in parents)
            assert end.score == pytest.approx(np.logaddexp.reduce([p.score for p in parents]), abs=1e-9)
            assert end.step == trace.steps[u] + 1
        best = trace.path(trace.best(u))
        assert best[0].kind == "start" and best[-1].rank == 0
        # one node per step up to where it finished; the pool's entry after the last step
        assert [n.step for n in best[:-1]] == list(range(len(best) - 1)) and best[-2].status == "finished"


def test_tracing_changes_no_result_and_word_lm_terms_are_in_the_totals():
    model = TinyTransducer.make(3, n=2, frames=5, vocab=4, durations=[0, 1, 2])
    vocab = Vocabulary(["_", "a", "b", " "])
    plain = transducer_beam_search(model.enc, [5, 4], predictor=model.predictor, joint=model.joint, blank=0,
                                   state=model.state0(), durations=model.durations, max_symbols_per_frame=2,
                                   beam_size=3, n_best=3, vocabulary=vocab, hotwords=["ab"], hotword_weight=1.5)
    trace, hyps = traced(model, [5, 4], 3, 2, "modified", vocabulary=vocab, hotwords=["ab"], hotword_weight=1.5)
    assert [[(h.tokens, h.score, h.acoustic_score) for h in hs] for hs in hyps] == \
        [[(h.tokens, h.score, h.acoustic_score) for h in hs] for hs in plain]
    assert trace.tokens == ["_", "a", "b", " "] and trace.text((1, 3, 2)) == "a b"
    for u, hs in enumerate(hyps):
        ends = {n.rank: n for n in trace.nodes if n.utterance == u and n.rank >= 0}
        assert [ends[r].total for r in range(len(hs))] == pytest.approx([h.score for h in hs])
        assert [ends[r].total - ends[r].score for r in range(len(hs))] == \
            pytest.approx([h.hotword_bonus for h in hs])


def test_an_utterance_without_frames_ends_at_its_start():
    model = TinyTransducer.make(0, n=2, frames=3, durations=[0, 1])
    trace, hyps = traced(model, [0, 3], 2, 2, "modified")
    start, end = [n for n in trace.nodes if n.utterance == 0]
    assert (start.kind, start.status, end.kind, end.rank, end.parents) == ("start", "finished", "end", 0, (start.id,))
    assert hyps[0][0].tokens == [] and end.score == hyps[0][0].acoustic_score == 0.0


def test_bad_traces():
    model = TinyTransducer.make(0, n=1, frames=2)
    with pytest.raises(TypeError, match="trace must be a TransducerTrace or None; got 3"):
        traced_with(model, 3)
    trace, _ = traced(model, None, 2, 1, "modified")
    with pytest.raises(ValueError, match="trace is already filled by a search"):
        traced_with(model, trace)


def traced_with(model, trace):
    return transducer_beam_search(model.enc, predictor=model.predictor, joint=model.joint, blank=model.blank,
                                  state=model.state0(), beam_size=2, trace=trace)
