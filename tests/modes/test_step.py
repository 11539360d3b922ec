"""step_search against a plain reference loop written from the method's description (one prompt at a
time, Python lists, every segment enumerated), a plain inverse-CDF sampler, the exact sampling
probabilities, itself across backends and batches, DVTS with one subtree, and its budgets."""

from __future__ import annotations

import itertools
import json
import math
import re
import sys

import numpy as np
import pytest

from approx import FLOAT64, assert_same_hypotheses
from beamsearch import step_search
from beamsearch.modes.step import StepResults
from beamsearch.processors import SuppressTokens
from beamsearch.strategies.step import aggregate, mix, uniforms
from models import SequenceModel, log_softmax, random_table

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]

V, EOS, DELIM = 5, 0, 4  # tokens 1, 2, 3 are words; 4 ends a step; 0 ends the solution


def scorer(prompts, partials):
    """A deterministic verifier: a value in (0, 1) from the prompt and the partial solution's tokens."""
    return [((sum((i + 3) * t for i, t in enumerate(p + s)) * 7919) % 1009 + 1) / 1011
            for p, s in zip(prompts, partials, strict=True)]


def segments_from(table, prefix, limit):
    """Every segment after ``prefix`` (ending at its first eos or delimiter, or cut at ``limit``
    tokens) with its logprob and whether it ended by eos or the delimiter, by brute force."""
    out = []
    words = [v for v in range(V) if v not in (EOS, DELIM)]
    for length in range(1, limit + 1):
        bodies = itertools.product(words, repeat=length - 1)
        for body in bodies:
            for end in (EOS, DELIM) + (tuple(words) if length == limit else ()):
                seg = list(body) + [end]
                lp = 0.0
                for i in range(len(seg)):  # a segment through a masked token is never produced
                    lp += log_softmax(table(tuple(prefix + seg[:i])))[seg[i]]
                    if lp == -math.inf:
                        break
                else:
                    out.append((seg, lp, end in (EOS, DELIM)))
    return out


def reference(table, prompt, *, n, m, rounds, limit, how, dvts):
    """Step search from its description, one prompt, Python lists: round 1 expands the prompt into
    its n best segments (here: all of them, ranked as a beam ranks them: ended first, then by
    logprob), each later round every partial solution kept into its m best (all); one score per
    candidate; finished (eos) ones collected; the n/m best others (DVTS: each subtree's best) go
    on; at the end the kept ones are results. Ranked by score, logprob, tokens."""
    live = [([], [], [], 0.0, 0)]  # tokens, segments, step scores, logprob, subtree
    done = []
    for r in range(rounds):
        cands = []
        for tokens, segs, steps, lp, sub in live:
            found = sorted(segments_from(table, prompt + tokens, limit), key=lambda x: (not x[2], -x[1]))
            cands += [(tokens, segs, steps, lp, sub, seg, slp) for seg, slp, _ in found[: n if r == 0 else m]]
        scores = scorer([prompt] * len(cands), [c[0] + c[5] for c in cands])
        going = []
        for c, (tokens, segs, steps, lp, sub, seg, slp) in enumerate(cands):
            item = (tokens + seg, segs + [seg], steps + [scores[c]], lp + slp, c // m if r == 0 else sub)
            (done if seg[-1] == EOS else going).append((item, seg[-1] == EOS))
        key = lambda x: (-aggregate(x[0][2], how), -x[0][3], x[0][0])  # noqa: E731
        going = sorted(going, key=key)
        if dvts:
            live = [min([g for g in going if g[0][4] == t], key=key)[0] for t in range(n // m)
                    if any(g[0][4] == t for g in going)]
        else:
            live = [g[0] for g in going[: n // m]]
    results = done + [(x, False) for x in live]
    results.sort(key=lambda x: (-aggregate(x[0][2], how), -x[0][3], x[0][0]))
    return [(x[0], x[1], x[2], x[3], aggregate(x[2], how), fin) for x, fin in results]


def as_tuples(hyps):
    return [(h.tokens, h.segments, h.step_scores, h.logprob, h.score, h.finished) for h in hyps]


def assert_same(got, want):
    assert [(g[0], g[1], g[5]) for g in got] == [(w[0], w[1], w[5]) for w in want]
    assert [g[2] for g in got] == [w[2] for w in want]  # the same scorer on the same lists
    for i in (3, 4):
        assert [g[i] for g in got] == pytest.approx([w[i] for w in want], abs=FLOAT64)


@pytest.mark.parametrize("how", ["last", "min", "prod", "mean"])
@pytest.mark.parametrize("dvts", [False, True])
def test_exhaustive_beam_equals_the_reference_loop(how, dvts):
    table = random_table(V, 7)
    prompts = [[1, 2], [3], [2, 2, 1]]
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=20, m=10, rounds=3,
                      expansion="beam", aggregation=how, dvts=dvts, eos_token_id=EOS, max_steps=2,
                      stop_sequences=[[DELIM]])
    for i, prompt in enumerate(prompts):
        want = reference(table, prompt, n=20, m=10, rounds=3, limit=2, how=how, dvts=dvts)
        assert_same(as_tuples(got[i]), want)
        segs = [s for h in got[i] for s in h.segments]
        assert all(1 <= len(s) <= 2 for s in segs)


@pytest.mark.parametrize("dvts", [False, True])
def test_exhaustive_beam_under_a_catalogue_equals_the_reference_loop(dvts):
    """A catalogue whose entries span several segments (the delimiter inside them), beams wider
    than the segments there are: the reference loop over every segment with the catalogue applied
    to the solution's tokens (prompt left out), renormalized over the allowed tokens, written
    from the catalogue's definition (a segment started at the trie's root in every round)."""
    entries = [[1, DELIM, 2, DELIM, 3], [1, DELIM, 1], [2, 3, DELIM, 2, 2, DELIM, 1], [3], [2, 3, DELIM, 1]]
    table = random_table(V, 9)

    def constrained(prompt):
        def row(prefix):
            done = list(prefix[len(prompt):])
            allowed = {e[len(done)] for e in entries if e[: len(done)] == done and len(e) > len(done)}
            allowed |= {EOS} if done in entries else set()
            return np.where(np.isin(np.arange(V), sorted(allowed)), table(prefix), -math.inf)
        return row

    from beamsearch.processors import Catalogue

    prompts = [[1, 2], [3]]
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=20, m=10, rounds=5,
                      expansion="beam", dvts=dvts, eos_token_id=EOS, max_steps=2, stop_sequences=[[DELIM]],
                      logits_processors=[Catalogue(entries, EOS)])
    for i, prompt in enumerate(prompts):
        want = reference(constrained(prompt), prompt, n=20, m=10, rounds=5, limit=2, how="last", dvts=dvts)
        assert_same(as_tuples(got[i]), want)
        finished = sorted(h.tokens[:-1] for h in got[i] if h.finished)
        assert finished == sorted(entries) if not dvts else finished and all(f in entries for f in finished)


def plain_sample(table, prompt, key, limit, ends=(EOS, DELIM)):
    """One segment by inverse-CDF sampling, written out: token t takes the first v whose running
    probability reaches u_t times the total, u_t = uniforms(key, t)."""
    seg, lp = [], 0.0
    for t in range(1, limit + 1):
        logp = log_softmax(table(tuple(prompt + seg)))
        probs = [math.exp(x) for x in logp]
        u = float(uniforms(np.array([key], np.uint64), t)[0])
        run, pick = 0.0, V - 1
        for v, p in enumerate(probs):
            run += p
            if run >= u * sum(probs):
                pick = v
                break
        seg.append(pick)
        lp += logp[pick]
        if pick in ends:
            break
    return seg, lp


@pytest.mark.parametrize("backend", BACKENDS)
def test_best_of_n_is_n_samples_ranked_by_the_scorer(backend):
    table = random_table(V, 3)
    prompts = [[1], [2, 3]]
    model = SequenceModel(table, backend=backend)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=6, m=1, rounds=1,
                      sample_seed=11, eos_token_id=EOS, max_steps=6)
    for i, prompt in enumerate(prompts):
        base = int(mix(11, *prompt))
        samples = []
        for c in range(6):
            samples.append(plain_sample(table, prompt, int(mix(base, 0, c)), 6, ends=(EOS,)))
        scores = scorer([prompt] * 6, [s for s, _ in samples])
        want = sorted(zip(scores, samples, strict=True), key=lambda x: (-x[0], -x[1][1], x[1][0]))
        assert [h.tokens for h in got[i]] == [s[0] for _, s in want]
        assert [h.score for h in got[i]] == [sc for sc, _ in want]
        assert [h.logprob for h in got[i]] == pytest.approx([s[1] for _, s in want], abs=FLOAT64)
        assert [h.finished for h in got[i]] == [s[0][-1] == EOS for _, s in want]
        assert got.info[i]["scored"] == 6 and got.info[i]["rounds"] == 1


def test_sampled_segments_follow_the_model_distribution():
    """One-token segments from one prompt: the frequencies of 3000 samples against the exact
    probabilities (each within 4.5 standard deviations)."""
    probs = np.array([0.1, 0.45, 0.05, 0.3, 0.1])
    table = lambda prefix: np.log(probs)  # noqa: E731
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=lambda p, s: [0.0] * len(s), n=3000,
                      sample_seed=5, eos_token_id=EOS, max_steps=1)
    counts = np.bincount([h.tokens[0] for h in got[0]], minlength=V)
    sd = np.sqrt(3000 * probs * (1 - probs))
    assert (np.abs(counts - 3000 * probs) <= 4.5 * sd).all(), counts


def run_sampled(backend, prompts, **kw):
    model = SequenceModel(random_table(V, 5), backend=backend)
    args = dict(scorer=scorer, n=8, m=2, rounds=3, sample_seed=3, eos_token_id=EOS, max_steps=3,
                stop_sequences=[[DELIM]], temperature=0.9, top_p=0.95)
    args.update(kw)
    return step_search(model.step, model.init_state(prompts), prompts, **args)


@pytest.mark.skipif(torch is None, reason="no torch")
@pytest.mark.parametrize("dvts", [False, True])
def test_same_seed_same_solutions_numpy_torch_alone_or_batched(dvts):
    prompts = [[1, 2], [3], [2, 2, 1]]
    batched = run_sampled("numpy", prompts, dvts=dvts)
    assert_same_hypotheses(run_sampled("torch", prompts, dvts=dvts), batched)
    for i, p in enumerate(prompts):
        for backend in ("numpy", "torch"):
            alone = run_sampled(backend, [p], dvts=dvts)
            assert_same_hypotheses(alone, [batched[i]])
            assert [h.segments for h in alone[0]] == [h.segments for h in batched[i]]
    assert [h.tokens for h in run_sampled("numpy", prompts, sample_seed=4)[0]] != [h.tokens for h in batched[0]]


@pytest.mark.parametrize("expansion", ["sample", "beam"])
@pytest.mark.parametrize("how", ["last", "min"])
def test_dvts_with_one_subtree_is_step_search_with_n_equal_m(expansion, how):
    prompts = [[1, 2], [3]]
    one = run_sampled("numpy", prompts, n=3, m=3, dvts=True, expansion=expansion, aggregation=how)
    plain = run_sampled("numpy", prompts, n=3, m=3, dvts=False, expansion=expansion, aggregation=how)
    assert [as_tuples(x) for x in one] == [as_tuples(x) for x in plain]
    assert one.info == plain.info


def rows_fed(model, prompts):
    """Per prompt, the rows the model was called with (each prompt is told by its tokens)."""
    out = [0] * len(prompts)
    for call in model.calls:
        for prefix in call:
            out[[i for i, p in enumerate(prompts) if tuple(p) == prefix[: len(p)]][0]] += 1
    return out


def calls_held(model, prompts):
    """Per prompt, the model calls that held at least one of its rows."""
    return [sum(any(prefix[: len(p)] == tuple(p) for prefix in call) for call in model.calls) for p in prompts]


@pytest.mark.parametrize("expansion", ["sample", "beam"])
@pytest.mark.parametrize("budget", [dict(token_budget=7), dict(token_budget=40), dict(scored_budget=9), dict(rounds=2),
                                    dict(token_budget=25, scored_budget=20)])
def test_budgets_are_never_exceeded_and_count_what_the_model_did(expansion, budget):
    prompts = [[1, 2], [3, 3, 3]]
    model = SequenceModel(random_table(V, 9))
    args = dict(scorer=scorer, n=4, m=2, rounds=5, sample_seed=1, eos_token_id=EOS, max_steps=4,
                stop_sequences=[[DELIM]], expansion=expansion)
    args.update(budget)
    got = step_search(model.step, model.init_state(prompts), prompts, **args)
    fed, held = rows_fed(model, prompts), calls_held(model, prompts)
    for i in range(2):
        info = got.info[i]
        assert info["generated_tokens"] == fed[i] and info["model_calls"] == held[i]
        assert info["generated_tokens"] <= budget.get("token_budget", 10**9)
        assert info["scored"] <= budget.get("scored_budget", 10**9)
        assert info["rounds"] <= args["rounds"] and info["scorer_calls"] == info["rounds"]
        assert all(len(h.segments) <= info["rounds"] for h in got[i])
    assert got.model_calls == len(model.calls)
    assert got.scorer_calls == max(x["rounds"] for x in got.info)


def test_expansions_share_the_prefix_no_row_is_fed_twice():
    """Every row the model is called with feeds one new token of one candidate: the rows fed equal
    the tokens of every candidate's newest segment, summed over the rounds (a prefix fed again, or
    one fed per expansion, would add rows); the m expansions of a partial solution start from its
    state copied by select_state: the first call of round 2 feeds each kept partial solution's last
    token m times, on its state (prompt + partial solution, nothing re-run)."""
    prompts = [[1, 2], [3]]
    model = SequenceModel(random_table(V, 4))
    seen = []

    def recording(p, s):
        seen.append([tuple(a) + tuple(b) for a, b in zip(p, s, strict=True)])  # prompt + partial solution
        return scorer(p, s)

    got = step_search(model.step, model.init_state(prompts), prompts, scorer=recording, n=6, m=3, rounds=3,
                      sample_seed=2, eos_token_id=EOS, max_steps=3, stop_sequences=[[DELIM]])
    new_tokens = 0
    for r, batch in enumerate(seen):
        before = [tuple(p) for p in prompts] if r == 0 else seen[r - 1]
        for s in batch:
            new_tokens += len(s) - max(len(b) for b in before if s[: len(b)] == b and len(b) < len(s))
    assert sum(len(c) for c in model.calls) == new_tokens == sum(x["generated_tokens"] for x in got.info)
    calls_in_round_1 = max(len(s) - len(p) for s in seen[0] for p in prompts if s[: len(p)] == tuple(p))
    parents = sorted({b for s in seen[1] for b in seen[0] if s[: len(b)] == b})
    assert sorted(model.calls[calls_in_round_1]) == sorted(b for b in parents for _ in range(3))
    assert len(seen[1]) == 3 * len(parents)


def test_step_scores_aggregate_by_hand():
    assert aggregate([0.5, 0.2, 0.9], "last") == 0.9
    assert aggregate([0.5, 0.2, 0.9], "min") == 0.2
    assert aggregate([0.5, 0.2, 0.9], "prod") == pytest.approx(0.09)
    assert aggregate([0.5, 0.2, 0.9], "mean") == pytest.approx(1.6 / 3)


@pytest.mark.parametrize("kw, error, text", [
    (dict(n=6, m=4), ValueError, "n must be a multiple of m"),
    (dict(n=0), ValueError, "n must be >= 1"),
    (dict(expansion="greedy"), ValueError, "expansion must be one of"),
    (dict(aggregation="max"), ValueError, "aggregation must be one of"),
    (dict(scorer=3), TypeError, "scorer must be callable"),
    (dict(scorer="nomodule"), ValueError, "module:function"),
    (dict(scorer="no_such_module_x:f"), ValueError, "cannot be imported"),
    (dict(token_budget=0), ValueError, "token_budget must be >= 1"),
    (dict(beam_size=3), TypeError, "beam_size"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(scorer=lambda p, s: [1.0]), ValueError, "shape"),
    (dict(scorer=lambda p, s: [float("nan")] * len(s)), ValueError, "NaN"),
])
def test_bad_arguments_are_named(kw, error, text):
    model = SequenceModel(random_table(V, 1))
    args = dict(scorer=scorer, n=4, m=2, eos_token_id=EOS, max_steps=3)
    args.update(kw)
    with pytest.raises(error, match=text):
        step_search(model.step, model.init_state([[1], [2]]), [[1], [2]], **args)


SCORER_MODULE = '''
def score(prompts, partials):
    return [((sum((i + 1) * t for i, t in enumerate(s)) * 31) % 97 + 1) / 98 for s in partials]
'''


def test_decode_mode_step_equals_step_search_on_each_line_alone(tmp_path, monkeypatch, capsys):
    import json

    from beamsearch import corpus
    from beamsearch.cli import main

    (tmp_path / "line_scorer.py").write_text(SCORER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "line_scorer", raising=False)  # another test's, from its own folder
    texts = ["hello", "beam search", "x"]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    out = tmp_path / "out.jsonl"
    flags = ["--mode", "step", "--scorer", "line_scorer:score", "--n", "4", "--m", "2", "--rounds", "3",
             "--max-steps", "3", "--sample-seed", "5", "--stop-sequences", "a", "--aggregation", "min"]
    assert main(["decode", "--model", "_toy", "--input", str(tmp_path / "in.txt"), "--output", str(out), *flags]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    model = corpus.toy_model()
    import line_scorer

    for r in records:
        alone = step_search(model.step, model.make_state([{"source": r["input"]}]), [[model.bos]],
                            scorer=line_scorer.score, n=4, m=2, rounds=3, max_steps=3, sample_seed=5,
                            eos_token_id=model.eos, stop_sequences=[model.tokens("a")], aggregation="min")
        assert [(h["tokens"], h["finished"], h["score"]) for h in r["nbest"]] == \
            [(h.tokens, h.finished, h.score) for h in alone[0]]
        assert r["step_scores"] == [h.step_scores for h in alone[0]]
        assert {k: r[k] for k in alone.info[0]} == alone.info[0]
    for argv, message in ((["--mode", "step", "--max-steps", "3"], "mode 'step' needs --scorer"),
                          (["--mode", "step", "--scorer", "no_such_mod:f", "--max-steps", "3"], "cannot be imported"),
                          (["--mode", "step", "--scorer", "line_scorer:score", "--n", "3", "--m", "2",
                            "--max-steps", "3"], "n must be a multiple of m")):
        code = main(["decode", "--model", "_toy", "--input", str(tmp_path / "in.txt"), "--output", str(out), *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], err


def test_take_state_leaves_the_state_as_it_was():
    """take_state gives rows of a state without touching it, even when the state holds a cache type
    whose select_state reorders in place (it is copied first, by its concat_state)."""
    from beamsearch import concat_state, select_state
    from beamsearch.core.state import take_state

    class InPlace:
        def __init__(self, rows):
            self.rows = rows

    @select_state.register(InPlace)
    def _(cache, idx):
        cache.rows = cache.rows[np.asarray(idx)]  # in place, as the Hugging Face adapter's cache
        return cache

    @concat_state.register(InPlace)
    def _(states):
        return InPlace(np.concatenate([s.rows for s in states]))

    state = (np.arange(4) * 10, InPlace(np.arange(4) + 100))
    taken = take_state(state, [3, 1, 1])
    assert taken[0].tolist() == [30, 10, 10] and taken[1].rows.tolist() == [103, 101, 101]
    assert state[0].tolist() == [0, 10, 20, 30] and state[1].rows.tolist() == [100, 101, 102, 103]


def test_the_engine_keeps_the_state_rows_of_what_ended():
    """run(..., keep_states=True): joined, the kept states' rows align with the ended hypotheses, and
    row h is what continues hypothesis h: its prefix is the prompt and every token but the last
    (which is the next call's y_prev); the live rows' reorders were not disturbed (the model checks
    that its state's leaves moved together)."""
    from beamsearch import concat_state
    from beamsearch.core.engine import run
    from beamsearch.modes.beam import BEAM, beam_plan

    prompts = [[1, 2], [3]]
    model = SequenceModel(random_table(V, 6))
    plan = beam_plan(prompts, BEAM.configure(dict(beam_size=3, n_best=3, eos_token_id=EOS, max_steps=3,
                                                  stop_sequences=[[DELIM]])))
    outcome = run(model.step, model.init_state(prompts), np.array([2, 3]), plan.strategy, plan.opts.controls,
                  keep_states=True)
    joined = concat_state(list(outcome.model_states))
    tokens, _ = outcome.trail.paths(outcome.ended)
    assert joined.prefix.shape[0] == outcome.ended.input.shape[0] > 6
    for h in range(joined.prefix.shape[0]):
        generated = tokens[h, : outcome.ended.step[h]].tolist()
        assert joined.prefix[h] == tuple(prompts[outcome.ended.input[h]] + generated[:-1])


# ---- constraints across rounds: a solution's constraint state goes on from segment to segment ----

GVOCAB = ["</s>", "a", "b", "1", "2", "-", "{", "}", '"', ":", ",", "[", "]", "x", "xb", '":', "ab"]
INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
INTEGER_PREFIX = re.compile(r"-?|-?(0|[1-9][0-9]*)")  # every prefix of the integers' compact JSON texts


def gtext(tokens):
    return "".join(GVOCAB[t] for t in tokens if t != EOS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("expansion", ["sample", "beam"])
def test_a_grammar_holds_across_rounds(backend, expansion):
    """JSON Schema {"type": "integer"}, rounds of 2-token segments: each segment was constrained
    alone ('-2-22' finished, '2221-2' unfinished). Every finished solution is an integer (Python's
    json and re, not the grammar engine), every unfinished one a prefix of one."""
    pytest.importorskip("llguidance")
    from beamsearch.processors import Grammar

    grammar = Grammar.json_schema({"type": "integer"}, GVOCAB, eos_token_id=EOS)
    seen = {True: 0, False: 0}
    for seed in range(6):
        model = SequenceModel(random_table(len(GVOCAB), seed), backend=backend)
        got = step_search(model.step, model.init_state([[1], [2]]), [[1], [2]], scorer=scorer, n=4, m=2, rounds=3,
                          expansion=expansion, sample_seed=seed, eos_token_id=EOS, max_steps=2,
                          logits_processors=[grammar])
        for h in (h for hyps in got for h in hyps):
            text = gtext(h.tokens)
            seen[h.finished] += 1
            if h.finished:
                assert INTEGER.fullmatch(text) and isinstance(json.loads(text), int), (seed, text)
            else:
                assert INTEGER_PREFIX.fullmatch(text), (seed, text)
            assert h.tokens == [t for s in h.segments for t in s] and h.finished == (h.tokens[-1] == EOS)
    assert seen[True] and (seen[False] or expansion == "beam")  # a beam ranks ended segments first


def test_a_catalogue_holds_across_rounds():
    """A one-entry catalogue [4, 5, 4, 5, 4, 5], 4-token segments, 3 rounds: each segment started
    at the trie's root, giving [4, 5, 4, 5, 4, 5, 4, 5, ...]. Round 2 completes the entry; eos is
    then its only allowed token."""
    from beamsearch.processors import Catalogue

    entry = [4, 5, 4, 5, 4, 5]
    model = SequenceModel(random_table(7, 3))
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=2, rounds=3, sample_seed=0,
                      eos_token_id=EOS, max_steps=4, logits_processors=[Catalogue([entry], EOS)])
    assert [(h.tokens, h.finished) for h in got[0]] == [(entry + [EOS], True)] * 2
    assert [[len(s) for s in h.segments] for h in got[0]] == [[4, 3]] * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_token_automaton_holds_across_rounds(backend):
    """A TokenDFA for (1 2)+ then eos, over V = 5 (3 and 4 never allowed), 1-token segments: each
    segment restarted the automaton, so every solution was 1 1 1 ... Here every finished one
    alternates 1 2 ... 2, every unfinished one a prefix of that."""
    from beamsearch.processors import TokenDFA

    table = np.full((3, V), -1)
    table[0, 1], table[1, 2], table[2, 1] = 1, 2, 1  # state 2: after "1 2", accepting
    dfa = TokenDFA(table, 0, [2], EOS)
    model = SequenceModel(random_table(V, 1), backend=backend)
    got = step_search(model.step, model.init_state([[3]]), [[3]], scorer=scorer, n=4, m=2, rounds=6, sample_seed=2,
                      eos_token_id=EOS, max_steps=1, logits_processors=[dfa])
    for h in got[0]:
        body = h.tokens[:-1] if h.finished else h.tokens
        assert body == [1, 2] * (len(body) // 2) + [1] * (len(body) % 2), h.tokens
        assert not h.finished or (len(body) % 2 == 0 and body)
    assert max(len(h.tokens) for h in got[0]) >= 4


def test_an_automaton_holds_for_a_prompt_that_goes_on_after_another_ran_out_of_budget():
    """The TokenDFA for (1 2)+ then eos; prompts [3] (2-token segments) and [4] (1-token), n=4,
    m=2, token budget 10, by hand: round 1 costs [3] 4 x 2 = 8 rows (2 left: its round 2 would need
    4) and [4] 4 rows (6 left); round 2 runs [4] alone (4 rows). [4]'s partial solutions keep their
    automaton state from round 1 (after '1': 2 next), so each is 1 2 in two steps; restarted, the
    automaton would have allowed 1 only."""
    from beamsearch.processors import TokenDFA

    table = np.full((3, V), -1)
    table[0, 1], table[1, 2], table[2, 1] = 1, 2, 1  # state 2: after "1 2", accepting
    dfa = TokenDFA(table, 0, [2], EOS)
    model = SequenceModel(random_table(V, 1))
    got = step_search(model.step, model.init_state([[3], [4]]), [[3], [4]], scorer=scorer, n=4, m=2, rounds=4,
                      sample_seed=2, eos_token_id=EOS, max_steps=[2, 1], logits_processors=[dfa], token_budget=10)
    assert [(x["rounds"], x["generated_tokens"]) for x in got.info] == [(1, 8), (2, 8)]
    assert [(h.tokens, h.segments) for h in got[0]] == [([1, 2], [[1, 2]])] * 2
    assert [(h.tokens, h.segments) for h in got[1]] == [([1, 2], [[1], [2]])] * 2


def test_allowed_tokens_see_the_prompt_index_and_the_whole_solution():
    """AllowedTokens' fn got the engine input of an expansion (up to n * prompts - 1) and, where
    it read its input, the wrong prompt. Here it gets the prompt's index and the prompt then the
    solution so far, and forbids repeating the last token: no solution repeats a token across a
    segment boundary either."""
    from beamsearch.processors import AllowedTokens

    prompts = [[1, 2], [3]]
    calls = []

    def no_repeat(i, tokens):
        calls.append((i, tokens))
        assert list(tokens[: len(prompts[i])]) == prompts[i]
        return [v for v in range(V) if v != tokens[-1]]

    model = SequenceModel(random_table(V, 4))
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=4, m=2, rounds=4,
                      sample_seed=1, eos_token_id=EOS, max_steps=2, logits_processors=[AllowedTokens(no_repeat)])
    assert {i for i, _ in calls} == {0, 1}
    for prompt, hyps in zip(prompts, got, strict=True):
        for h in hyps:
            whole = prompt + h.tokens
            assert all(a != b for a, b in zip(whole, whole[1:], strict=False)), whole
    assert max(len(h.segments) for hyps in got for h in hyps) >= 3


def expected_segments(tokens, limit, delimiter):
    """A solution's segments from its tokens alone: a segment ends at eos, where the tokens since
    the last delimiter end with the delimiter (across a segment cut at ``limit`` too), or after
    ``limit`` tokens."""
    segs, seg, open_step = [], [], []
    for t in tokens:
        seg.append(t)
        open_step.append(t)
        if t == EOS or open_step[-len(delimiter):] == delimiter:
            segs.append(seg)
            seg, open_step = [], []
        elif len(seg) == limit:
            segs.append(seg)
            seg = []
    return segs + ([seg] if seg else [])


@pytest.mark.parametrize("expansion", ["sample", "beam"])
def test_a_delimiter_cut_by_the_segment_limit_still_ends_the_step(expansion):
    """Delimiter [3, 4], 3-token segments: a segment cut after its 3 went on past the 4 that
    completed the delimiter in the next segment. Each solution's segments are those its tokens
    give (``expected_segments``), and some delimiter is completed across a cut."""
    def likes_the_delimiter(seed):
        base = random_table(V, seed)

        def table(prefix):
            row = base(prefix)
            row[3] += 3.0 if len(prefix) % 3 == 0 else -3.0  # 3 as a full segment's last token, 4 after it
            row[4] += 3.0 if prefix[-1] == 3 else -3.0
            row[EOS] = -math.inf  # no eos: a beam ranks the segments it ends first
            return row
        return table

    across = 0
    for seed in range(8):
        model = SequenceModel(likes_the_delimiter(seed))
        got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=4, m=2, rounds=4,
                          expansion=expansion, sample_seed=seed, eos_token_id=EOS, max_steps=3,
                          stop_sequences=[[3, 4]])
        for h in got[0]:
            assert h.segments == expected_segments(h.tokens, 3, [3, 4]), (seed, h.tokens, h.segments)
            across += sum(1 for a, b in zip(h.segments, h.segments[1:], strict=False) if a[-1] == 3 and b == [4])
    assert across


def test_decode_mode_step_with_a_regex_holds_across_rounds(tmp_path, monkeypatch):
    """`decode --mode step --regex`: 2-token segments, 4 rounds. Every finished record matches
    the pattern (Python's re), every unfinished one is a prefix of a match."""
    pytest.importorskip("llguidance")
    from beamsearch.cli import main

    (tmp_path / "line_scorer.py").write_text(SCORER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "line_scorer", raising=False)  # another test's, from its own folder
    pattern, prefixes = r"(ab|c)+d?", r"(ab|c)*a?|(ab|c)+d"
    (tmp_path / "in.txt").write_text("hello\nbeam search\nx\nabc\n")
    seen = set()
    for seed in range(3):
        out = tmp_path / f"out{seed}.jsonl"
        flags = ["--mode", "step", "--scorer", "line_scorer:score", "--n", "4", "--m", "2", "--rounds", "4",
                 "--max-steps", "2", "--sample-seed", str(seed), "--regex", pattern]
        assert main(["decode", "--model", "_toy", "--input", str(tmp_path / "in.txt"), "--output", str(out),
                     *flags]) == 0
        for record in (json.loads(x) for x in out.read_text().splitlines()):
            for h in record["nbest"]:
                seen.add(h["finished"])
                assert re.fullmatch(pattern if h["finished"] else prefixes, h["text"]), (seed, h)
    assert True in seen


def test_hf_generate_mode_step_with_a_json_schema_holds_across_rounds():
    """``hf.generate(mode="step", json_schema={"type": "integer"})`` on a random GPT-2 with a
    byte-level BPE trained here, 2-token segments, 4 rounds: each segment was constrained alone
    (seed 2 gave a finished non-integer). Finished texts are integers (Python's re), unfinished
    ones prefixes of one."""
    pytest.importorskip("llguidance")
    transformers = pytest.importorskip("transformers")
    from beamsearch.hf import generate
    from tests.processors.test_grammar_tokenizers import bpe

    tok = bpe()
    torch.manual_seed(3)
    ids = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=len(tok) + 4, n_embd=16, n_layer=1,
                                                                 n_head=2, n_positions=64, **ids)).eval()
    model.generation_config.update(**ids)
    for seed in range(3):
        got = generate(model, ['{"a":1}', '{"b"'], tokenizer=tok, mode="step", scorer=scorer, n=4, m=2, rounds=4,
                       max_new_tokens=2, sample_seed=seed, json_schema={"type": "integer"})
        for hyps, texts in zip(got.hypotheses, got.texts, strict=True):
            for h, text in zip(hyps, texts, strict=True):
                assert (INTEGER if h.finished else INTEGER_PREFIX).fullmatch(text), (seed, text, h.finished)


def test_round_numbers_start_at_0_and_dvts_keeps_are_numbered_by_subtree_skipping_dead_ones():
    """docs/step_search.md's seeds, worked by hand. One-token segments, p(eos) = 1/2, then 1/8
    each for 1, 2, 3 and the delimiter: a draw u <= 1/2 is eos. Candidate c of round r draws
    u = uniforms(mix(key, r, c), 1) (round 0 the first), key = mix(seed, *prompt). DVTS, n = 4,
    m = 2: the seed is chosen so that round 0's candidates 0 and 1 (subtree 0) both draw eos and
    candidate 2 or 3 does not: subtree 1's kept solution is then at place 0, and its round-1
    candidates are c = 0 and 1 (not 2 and 3, its subtree's numbers)."""
    probs = np.array([0.5, 0.125, 0.125, 0.125, 0.125])
    table = lambda prefix: np.log(probs)  # noqa: E731

    def pick(u):
        return int(np.flatnonzero(np.cumsum(probs) >= u)[0])

    def draw(seed, r, c):
        key = mix(seed, 1)
        return pick(float(uniforms(mix(np.array([key], np.uint64), r, c), 1)[0]))

    seed = next(s for s in range(1000) if draw(s, 0, 0) == draw(s, 0, 1) == EOS and
                (draw(s, 0, 2), draw(s, 0, 3)) != (EOS, EOS) and
                [draw(s, 1, c) for c in (0, 1)] != [draw(s, 1, c) for c in (2, 3)])
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=lambda p, s: [0.5] * len(s), n=4, m=2,
                      rounds=2, dvts=True, sample_seed=seed, eos_token_id=EOS, max_steps=1)
    first = [draw(seed, 0, c) for c in range(4)]
    kept = min(t for t in first[2:] if t != EOS)  # subtree 1's best (equal scores and logprobs: lowest token)
    want = sorted([[t] for t in first if t == EOS] + [[kept, draw(seed, 1, c)] for c in (0, 1)])
    assert sorted(h.tokens for h in got[0]) == want


# step_search's rounds, noise, budgets and book-keeping against plain references: SplitMix64 in
# Python integers (checked on its published first outputs), a sampled step search written as a
# Python-list loop from the docstring (candidate c of round r draws from mix(key, r, c)), the budget
# arithmetic worked by hand, and the scorer's answers and the arguments' errors by name.


MASK = 2**64 - 1


def plain_splitmix(x):
    """SplitMix64's output for state ``x`` (Steele, Lea & Flood 2014) in Python integers."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def plain_mix(*parts):
    h = plain_splitmix(parts[0])
    for p in parts[1:]:
        h = plain_splitmix(h ^ p)
    return h


def plain_aggregate(steps, how):
    if how == "last":
        return steps[-1]
    if how == "min":
        return min(steps)
    if how == "prod":
        return math.prod(steps)
    return sum(steps) / len(steps)


def test_mix_and_uniforms_against_plain_splitmix64():
    # the generator seeded 0 outputs 0xE220A8397B1DCDAF, then 0x6E789E6AA1B965F4: its first two
    # outputs are the finalizer of 1 and 2 times the golden gamma, i.e. mix(0) and mix(golden)
    assert plain_splitmix(0) == 0xE220A8397B1DCDAF and plain_splitmix(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4
    assert int(mix(0)) == 0xE220A8397B1DCDAF and int(mix(0x9E3779B97F4A7C15)) == 0x6E789E6AA1B965F4
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, size=6, dtype=np.uint64)
    for parts in [(5,), (5, 1), (7, 2, 3), (2**63 + 11, 0, 9, 4)]:
        assert int(mix(*parts)) == plain_mix(*parts)
    got = mix(keys, 3, np.arange(6))
    assert got.tolist() == [plain_mix(int(k), 3, c) for c, k in enumerate(keys)]
    for t in (1, 2, 7):  # ((mix(key, t) >> 11) + 0.5) / 2**53, strictly inside (0, 1)
        u = uniforms(keys, t)
        assert u.tolist() == [((plain_mix(int(k), t) >> 11) + 0.5) / 2**53 for k in keys]
        assert ((u > 0) & (u < 1)).all()


def test_aggregate_by_hand():
    assert aggregate([10**10, 10**10], "prod") == 1e20  # integer step scores multiply as reals
    assert aggregate([0.5, 0.25], "prod") == 0.125
    assert aggregate([1, 2], "mean") == 1.5 and aggregate([0.5], "min") == 0.5 and aggregate([3, 1], "last") == 1


# ---- a sampled step search written as a plain loop ------------------------------------------------

def sampled_reference(table, prompt, seed, *, n, m, rounds, limit, how, dvts):
    """From step_search's docstring: key = mix(seed, *prompt); the kept partial solution at place s
    (its prompt's keeps: best first; with DVTS by subtree) has candidates c = s*m .. s*m + m - 1 in
    round r (round 0: the prompt, c = 0 .. n - 1), each sampled with mix(key, r, c); finished ones
    are collected, the n/m best others go on (DVTS: each subtree's best; subtree = c // m of round
    0). Ranked by aggregated score, logprob, tokens. Segments by inverse-CDF sampling (token t: the
    first whose running probability reaches u_t times the total, u_t = uniforms(key, t))."""
    key = plain_mix(seed, *prompt)
    live = [([], [], [], 0.0, 0)]  # tokens, segments, step scores, logprob, subtree
    done = []
    for r in range(rounds):
        width = n if r == 0 else m
        cands = []
        for s, (tokens, segs, steps, lp, sub) in enumerate(live):
            for j in range(width):
                c = s * width + j
                seg, slp = plain_sample(table, prompt + tokens, plain_mix(key, r, c), limit)
                cands.append((tokens + seg, segs + [seg], steps, lp + slp, c // m if r == 0 else sub))
        scores = scorer([prompt] * len(cands), [c[0] for c in cands])
        going = []
        for (tokens, segs, steps, lp, sub), v in zip(cands, scores, strict=True):
            item = (tokens, segs, steps + [v], lp, sub)
            (done if tokens[-1] == EOS else going).append(item)
        key_of = lambda x: (-plain_aggregate(x[2], how), -x[3], x[0])  # noqa: E731
        going.sort(key=key_of)
        if dvts:
            live = [min((g for g in going if g[4] == t), key=key_of)
                    for t in range(n // m) if any(g[4] == t for g in going)]
        else:
            live = going[: n // m]
    out = [(x, True) for x in done] + [(x, False) for x in live]
    out.sort(key=lambda x: (-plain_aggregate(x[0][2], how), -x[0][3], x[0][0]))
    return [(x[0], x[1], x[2], x[3], plain_aggregate(x[2], how), fin) for x, fin in out]


def assert_solutions(got, want):
    assert [(g[0], g[1], g[2], g[5]) for g in got] == [(w[0], w[1], w[2], w[5]) for w in want]
    assert [g[3] for g in got] == pytest.approx([w[3] for w in want], abs=FLOAT64)
    assert [g[4] for g in got] == pytest.approx([w[4] for w in want], abs=FLOAT64)


@pytest.mark.parametrize("how, dvts", [("last", False), ("min", True), ("prod", False), ("mean", True)])
def test_sampled_rounds_equal_the_plain_loop(how, dvts):
    table = random_table(V, 5)
    prompts = [[1, 2], [3]]
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=6, m=2, rounds=3,
                      aggregation=how, dvts=dvts, sample_seed=[5, 9], eos_token_id=EOS, max_steps=3,
                      stop_sequences=[[DELIM]])
    for i, (prompt, seed) in enumerate(zip(prompts, [5, 9], strict=True)):
        want = sampled_reference(table, prompt, seed, n=6, m=2, rounds=3, limit=3, how=how, dvts=dvts)
        assert_solutions(as_tuples(got[i]), want)
    one = step_search(model.step, model.init_state(prompts[:1]), prompts[:1], scorer=scorer, n=6, m=2, rounds=3,
                      aggregation=how, dvts=dvts, sample_seed=5, eos_token_id=EOS, max_steps=3,
                      stop_sequences=[[DELIM]])
    assert_solutions(as_tuples(one[0]), sampled_reference(table, [1, 2], 5, n=6, m=2, rounds=3, limit=3, how=how,
                                                           dvts=dvts))


def test_beam_dvts_rounds_equal_the_plain_loop():
    """Exhaustive beams with DVTS: round 1's candidate c (its place among the prompt's n best
    segments) starts subtree c // m."""
    table = random_table(V, 2)
    prompts = [[2], [1, 3]]
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=6, m=3, rounds=3,
                      expansion="beam", aggregation="min", dvts=True, eos_token_id=EOS, max_steps=2,
                      stop_sequences=[[DELIM]])
    for i, prompt in enumerate(prompts):
        want = reference(table, prompt, n=6, m=3, rounds=3, limit=2, how="min", dvts=True)
        assert_solutions(as_tuples(got[i]), want)


def test_the_same_generator_state_gives_the_same_solutions():
    table = random_table(V, 5)
    runs = []
    for _ in range(2):
        model = SequenceModel(table)
        runs.append(step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=8, rounds=2, m=2,
                                rng=np.random.default_rng(7), eos_token_id=EOS, max_steps=4))
    assert as_tuples(runs[0][0]) == as_tuples(runs[1][0])


# ---- budgets and book-keeping, worked by hand ---------------------------------------------------

W7, DELIM7 = 7, 6


def no_end_table(prefix):
    """7 tokens; eos (0) and the delimiter (6) never drawn: every segment runs to its limit."""
    row = random_table(W7, 1)(prefix)
    row[EOS] = row[DELIM7] = -math.inf
    return row


def fed_rows(model):
    return sum(len(call) for call in model.calls)


def run_budget(expansion, **kw):
    model = SequenceModel(no_end_table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=4, m=2, rounds=5,
                      expansion=expansion, sample_seed=3, eos_token_id=EOS, max_steps=3,
                      stop_sequences=[[DELIM7]], **kw)
    return got, model


def test_sampled_budgets_by_hand():
    """Sampling, n=4, m=2, max_steps 3: each round runs 4 segments of one row per token. Token
    budget 26: round 1's limit is min(3, 26 // 4) = 3 (12 rows, 14 left), round 2's min(3, 14 // 4)
    = 3 (12 rows, 2 left), round 3's 2 // 4 = 0: it does not run. Scored budget 8: 4 + 4 <= 8, both
    rounds run (a third would need 12)."""
    got, model = run_budget("sample", token_budget=26, scored_budget=8)
    info = got.info[0]
    assert (info["rounds"], info["scored"], info["generated_tokens"], info["scorer_calls"]) == (2, 8, 24, 2)
    assert fed_rows(model) == 24 and got.model_calls == len(model.calls) == 6 and got.scorer_calls == 2
    assert sorted(len(h.segments) for h in got[0]) == [2, 2] and all(len(s) == 3 for h in got[0] for s in h.segments)
    got, _ = run_budget("sample", scored_budget=7)  # 4 + 4 > 7: one round
    assert got.info[0]["rounds"] == 1 and got.info[0]["scored"] == 4 and len(got[0]) == 2


def test_beam_budgets_by_hand():
    """Beams, n=4, m=2, max_steps 3: round 1 is one beam of width 4 (1 row at its first token, 4
    after), later rounds two beams of width 2 (1 row, then 2). Token budget 20: round 1's limit is
    min(3, 20 // (1 * 4)) = 3: 1 + 4 + 4 = 9 rows, 11 left; round 2's min(3, 11 // (2 * 2)) = 2:
    2 * (1 + 2) = 6 rows, 5 left; round 3's 5 // 4 = 1: 2 rows, 3 left; round 4's 3 // 4 = 0. Each
    round scores 4 candidates (n, then m per beam)."""
    got, model = run_budget("beam", token_budget=20)
    info = got.info[0]
    assert (info["rounds"], info["scored"], info["generated_tokens"]) == (3, 12, 17) and fed_rows(model) == 17
    assert all([len(s) for s in h.segments] == [3, 2, 1] for h in got[0]) and len(got[0]) == 2
    got, _ = run_budget("beam", scored_budget=7)  # 4 + 4 > 7: one round
    assert got.info[0]["rounds"] == 1 and got.info[0]["scored"] == 4


@pytest.mark.parametrize("expansion", ["sample", "beam"])
def test_one_row_a_round_may_spend_the_whole_token_budget(expansion):
    """n = m = 1 (one sampled segment, or a beam of width 1: one row per token), max_steps 4,
    token budget 5, segments never end early. By hand: round 1's limit is min(4, 5 // 1) = 4 (4
    rows, 1 left), round 2's min(4, 1 // 1) = 1 (0 left), round 3's 0: it does not run. One
    solution of segments [4, 1], 5 rows."""
    model = SequenceModel(no_end_table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=1, m=1, rounds=5,
                      expansion=expansion, sample_seed=3, eos_token_id=EOS, max_steps=4, stop_sequences=[[DELIM7]],
                      token_budget=5)
    assert (got.info[0]["rounds"], got.info[0]["generated_tokens"]) == (2, 5) and fed_rows(model) == 5
    assert [[len(s) for s in h.segments] for h in got[0]] == [[4, 1]]


def test_budget_stopped_solutions_keep_their_aggregation_and_results_their_pad():
    got, _ = run_budget("sample", token_budget=26, aggregation="min", pad_token_id=9)
    for h in got[0]:
        assert h.score == min(h.step_scores) and len(h.step_scores) == 2
    model = SequenceModel(random_table(V, 4, eos=EOS, eos_shift=1.5))  # eos likely: lengths differ
    got = step_search(model.step, model.init_state([[1], [2]]), [[1], [2]], scorer=scorer, n=3, sample_seed=1,
                      eos_token_id=EOS, max_steps=4, pad_token_id=9)
    arr, padded = got.arrays().tokens, 0
    for i, hyps in enumerate(got):
        for j, h in enumerate(hyps):
            assert arr[i, j, : len(h.tokens)].tolist() == h.tokens
            assert (arr[i, j, len(h.tokens):] == 9).all()
            padded += arr.shape[2] - len(h.tokens)
    assert padded > 0


def test_a_prompt_that_finishes_in_round_one_is_not_counted_again():
    """Prompt [3]'s only token is eos: its 3 candidates finish in round 1 (3 rows, 1 scorer call,
    3 scored); prompt [1] goes on for 3 rounds of 3 candidates. n=1, m=1 (best of one) also counts
    a round that scores one candidate."""
    def table(prefix):
        if prefix[0] == 3:
            return np.array([0.0] + [-math.inf] * (V - 1))
        return no_end_table(prefix)[:V]

    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1], [3]]), [[1], [3]], scorer=scorer, n=3, m=3, rounds=3,
                      sample_seed=2, eos_token_id=EOS, max_steps=2)
    assert [(x["rounds"], x["scored"], x["scorer_calls"], x["generated_tokens"]) for x in got.info] == [
        (3, 9, 3, 18), (1, 3, 1, 3)]
    assert all(h.finished and h.tokens == [EOS] for h in got[1]) and len(got[1]) == 3
    model = SequenceModel(no_end_table)
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=1, rounds=3, sample_seed=2,
                      eos_token_id=EOS, max_steps=2)
    assert (got.info[0]["rounds"], got.info[0]["scored"], got.info[0]["scorer_calls"]) == (3, 3, 3)
    assert len(got[0]) == 1 and len(got[0][0].segments) == 3
    model = SequenceModel(no_end_table)  # rounds defaults to 1
    got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=2, sample_seed=2,
                      eos_token_id=EOS, max_steps=2)
    assert got.info[0]["rounds"] == 1 and got.scorer_calls == 1


def test_step_results_start_with_nothing_spent():
    empty = StepResults([])
    assert empty.model_calls == 0 and empty.scorer_calls == 0 and empty.info == []


# ---- what the processors see ------------------------------------------------------------------

def test_segments_see_the_whole_solution_and_top_p_keeps_the_processors():
    """no_repeat_ngram_size=1 bans every token already in prompt + solution: no solution repeats a
    word or one of its prompt's (each later round's segments must see the earlier segments). With
    top_p < 1 the given processors still apply: token 2, suppressed, never appears."""
    table = random_table(V, 6)
    model = SequenceModel(table)
    prompts = [[1], [3]]
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=4, m=2, rounds=3,
                      sample_seed=4, eos_token_id=EOS, max_steps=1, stop_sequences=[[DELIM]],
                      no_repeat_ngram_size=1)
    for prompt, hyps in zip(prompts, got, strict=True):
        for h in hyps:
            words = [t for t in prompt + h.tokens if t not in (EOS, DELIM)]
            assert len(words) == len(set(words)), (prompt, h.tokens)
    assert max(len(h.segments) for hyps in got for h in hyps) == 3
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state(prompts), prompts, scorer=scorer, n=8, m=2, rounds=2,
                      sample_seed=4, eos_token_id=EOS, max_steps=3, top_p=0.9,
                      logits_processors=[SuppressTokens([2])])
    assert all(2 not in h.tokens for hyps in got for h in hyps) and sum(len(x) for x in got) >= 8


# ---- the scorer's answers and the arguments, by name --------------------------------------------

def search_with(**kw):
    model = SequenceModel(random_table(V, 1))
    args = dict(scorer=scorer, n=4, m=2, eos_token_id=EOS, max_steps=3, sample_seed=0)
    args.update(kw)
    return step_search(model.step, model.init_state([[1], [2]]), [[1], [2]], **args)


@pytest.mark.skipif(torch is None, reason="no torch")
def test_a_scorer_may_answer_a_tensor_that_needs_grad():
    def tensor_scorer(prompts, partials):
        return torch.tensor(scorer(prompts, partials), dtype=torch.float64, requires_grad=True) * 1.0

    got = search_with(scorer=tensor_scorer, rounds=2)
    want = search_with(rounds=2)
    assert [as_tuples(x) for x in got] == [as_tuples(x) for x in want]


def test_integer_scores_are_kept_as_reals():
    got = search_with(scorer=lambda p, s: [len(x) for x in s], rounds=2)
    assert all(type(v) is float for hyps in got for h in hyps for v in h.step_scores)
    assert all(h.step_scores == [float(len(h.segments[0])), float(len(h.tokens))] for hyps in got for h in hyps
               if len(h.segments) == 2)


@pytest.mark.parametrize("kw, error, message", [
    (dict(m=0), ValueError, r"^m must be >= 1; got 0$"),
    (dict(rounds=0), ValueError, r"^rounds must be >= 1; got 0$"),
    (dict(dvts="yes"), TypeError, r"^dvts must be a bool; got 'yes'$"),
    (dict(scored_budget=0), ValueError, r"^scored_budget must be >= 1; got 0$"),
    (dict(top_p=0.0), ValueError, r"^top_p must be > 0"),
    (dict(top_p=1.5), ValueError, r"^top_p must be in \(0, 1\]; got 1\.5$"),
    (dict(aggregation="max"), ValueError, r"^aggregation must be one of last, min, prod, mean; got 'max'$"),
    (dict(expansion="greedy"), ValueError, r"^expansion must be one of sample, beam; got 'greedy'$"),
    (dict(sample_seed=[1]), ValueError, r"^sample_seed must be one int or one int per prompt \(2\); got 1$"),
    (dict(sample_seed=[1, 2], rng=np.random.default_rng(0)), ValueError,
     r"^give rng or sample_seed, not both; got rng=Generator\(PCG64\) at \w+ and sample_seed=\[1, 2\]$"),
    (dict(sample_seed=5, rng=np.random.default_rng(0)), ValueError,
     r"^give rng or sample_seed, not both; .* sample_seed=5$"),
    (dict(sample_seed=-1), ValueError, r"^sample_seed must be >= 0; got -1$"),
    (dict(sample_seed=[3, -2]), ValueError, r"^sample_seed\[1\] must be >= 0; got -2$"),
    (dict(sample_seed=1.5), TypeError, r"^sample_seed must be an integer; got 1\.5 of type float$"),
    (dict(scorer=":f"), ValueError, r"^scorer must be a callable or 'module:function'; got ':f'$"),
    (dict(scorer="math:"), ValueError, r"^scorer must be a callable or 'module:function'; got 'math:'$"),
    (dict(scorer="math:pi:x"), ValueError, r"has no attribute 'pi:x'$"),
    (dict(scorer=3), TypeError, r"^scorer must be callable \(prompts, partial_solutions\) -> scores; got int$"),
    (dict(beam_size=3), TypeError, r"^step_search does not take beam_size \(its widths are n \(candidates per round\)"),
    (dict(scorer=lambda p, s: ["a"] * len(s)), TypeError, r"^scorer must return one real per candidate \(8\); got"),
    (dict(scorer=lambda p, s: [float("nan")] + [0.5] * (len(s) - 1)), ValueError,
     r"^scorer returned NaN for candidate 0$"),
    (dict(aggregation="prod", scorer=lambda p, s: [0.5, 0.0, -0.25] + [0.5] * (len(s) - 3)), ValueError,
     r"^aggregation 'prod' multiplies step scores, which must be in \[0, inf\) \(a verifier's probabilities\); "
     r"scorer returned -0\.25 for candidate 2$"),
    (dict(aggregation="prod", scorer=lambda p, s: [0.5, float("inf")] + [0.5] * (len(s) - 2)), ValueError,
     r"scorer returned inf for candidate 1$"),
    (dict(aggregation="mean", rounds=2,
          scorer=lambda p, s: [float("inf") if len(x) <= 3 else -float("inf") for x in s]),
     ValueError, r"^aggregation 'mean' of candidate \d+'s step scores \[inf, -inf\] is NaN \(infinities of both signs, "
                 r"or a product that overflows times 0\): scores must aggregate to a number$"),
    (dict(aggregation="prod", rounds=3, scorer=lambda p, s: [1e200 if len(x) <= 6 else 0.0 for x in s]), ValueError,
     r"^aggregation 'prod' of candidate \d+'s step scores \[1e\+200, 1e\+200, 0\.0\] is NaN"),
])
def test_errors_name_the_parameter_and_value(kw, error, message):
    with pytest.raises(error, match=message):
        search_with(**kw)


def _unread_lines():
    """Lines that fail the test when read: a refusal must come before any line is read."""
    raise AssertionError("a line was read before the options were checked")
    yield  # pragma: no cover


@pytest.mark.parametrize("kw, error, message", [
    (dict(sample_seed=-1), ValueError, r"^sample_seed must be >= 0; got -1$"),
    (dict(sample_seed=1.5), TypeError, r"^sample_seed must be an integer; got 1\.5 of type float$"),
    (dict(dvts=2), TypeError, r"^dvts must be a bool; got 2$"),
    (dict(token_budget=0), ValueError, r"^token_budget must be >= 1; got 0$"),
    (dict(scored_budget=0), ValueError, r"^scored_budget must be >= 1; got 0$"),
    (dict(token_budget=1.5), TypeError, r"^token_budget must be an integer; got 1\.5 of type float$"),
])
def test_decode_records_refuses_a_bad_step_option_before_reading_a_line(kw, error, message):
    """decode_records checks its options at the first next(), before any line is read (its
    documented contract): a bad seed, dvts flag or budget is the error naming it and its value,
    the message step_search gives for it."""
    from beamsearch import corpus
    from beamsearch.corpus import decode_records

    with pytest.raises(error, match=message):
        next(decode_records(corpus.toy_model(), _unread_lines(), mode="step", scorer=scorer, n=2, max_steps=3, **kw))


def test_the_step_modes_configure_refuses_rng_and_sample_seed_as_step_search_does():
    """Mode.configure, the check made once before any prompt, refuses an rng given with a
    sample_seed with step_search's own error for the same keywords (the oracle: step_search's
    message, with the same Generator object)."""
    from beamsearch.modes import registry

    rng = np.random.default_rng(0)
    with pytest.raises(ValueError) as searched:
        search_with(sample_seed=5, rng=rng)
    with pytest.raises(ValueError) as configured:
        registry.mode("step").configure(dict(scorer=scorer, n=2, eos_token_id=EOS, max_steps=3, sample_seed=5,
                                             rng=rng))
    assert str(configured.value) == str(searched.value)
    assert re.fullmatch(r"give rng or sample_seed, not both; got rng=Generator\(PCG64\) at \w+ and sample_seed=5",
                        str(configured.value))


@pytest.mark.parametrize("seeds", [[1, 2, 3], (4,), [-1]])
def test_the_step_modes_configure_leaves_a_list_of_seeds_to_the_prompts_check(seeds):
    """A list of seeds is one per prompt: its length and values are checked with the prompts
    (step_search refuses a list of the wrong length, or a negative seed, naming it), so configure,
    which sees no prompt, takes any list as given."""
    from beamsearch.modes import registry

    config = registry.mode("step").configure(dict(scorer=scorer, n=2, eos_token_id=EOS, max_steps=3,
                                                  sample_seed=seeds))
    assert config.options.sample_seed == seeds


def test_beam_segments_are_ranked_by_logprob_without_a_length_penalty():
    """One round, a beam of width 1 (n = m = 1) within a 2-token segment. Prompt [2]: eos first at
    log-probability -1.0 (p = e**-1); token 1 at p = 0.6, then eos at p = e**-1.05 / 0.6, so the
    segment [1, 0] has logprob -1.05. Both finish; by logprob [0] is the one segment kept (a length
    penalty with alpha 1 would prefer [1, 0]: -1.05 / (7 / 6) = -0.9 > -1.0)."""
    first = np.full(V, (1 - math.exp(-1.0) - 0.6) / 3)
    first[EOS], first[1] = math.exp(-1.0), 0.6
    second = np.full(V, (1 - math.exp(-1.05) / 0.6) / 4)
    second[EOS] = math.exp(-1.05) / 0.6
    probs = {(2,): first, (2, 1): second}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq), np.full(V, 1 / V))))
    got = step_search(model.step, model.init_state([[2]]), [[2]], scorer=scorer, n=1, expansion="beam",
                      eos_token_id=EOS, max_steps=2)
    assert [h.tokens for h in got[0]] == [[EOS]] and got[0][0].logprob == pytest.approx(-1.0, abs=1e-12)


def test_a_beam_segment_stops_once_no_open_row_can_beat_the_finished_by_logprob():
    """One round, a beam of width 1 within 3-token segments. Prompt [2]: eos at p = e**-1 (the
    segment [0], logprob -1.0); token 1 at p = 0.6, then token 1 again at p = e**-1.1 / 0.6, so the
    best open row [1, 1] has logprob -1.1 after the second call: nothing open can beat the finished
    [0] any more, and the segment search stops after 2 model calls of one row each (a length
    penalty on the finished and the bound, alpha 0.6: -1.1 / (8 / 6) ** 0.6 = -0.93 > -1.0, would
    search a third token)."""
    first = np.full(V, (1 - math.exp(-1.0) - 0.6) / 3)
    first[EOS], first[1] = math.exp(-1.0), 0.6
    second = np.full(V, (1 - math.exp(-1.1) / 0.6) / 4)
    second[1] = math.exp(-1.1) / 0.6
    probs = {(2,): first, (2, 1): second}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq), np.full(V, 1 / V))))
    got = step_search(model.step, model.init_state([[2]]), [[2]], scorer=scorer, n=1, expansion="beam",
                      eos_token_id=EOS, max_steps=3)
    assert [h.tokens for h in got[0]] == [[EOS]] and got[0][0].logprob == pytest.approx(-1.0, abs=1e-12)
    assert (got.info[0]["model_calls"], got.info[0]["generated_tokens"]) == (2, 2)


def test_dvts_subtrees_keep_their_number_after_one_of_them_ends():
    """eos likely (seed 0, table 2): every candidate of one DVTS subtree (not the last) finishes
    in an early round, so the kept partial solutions' places are no longer their subtree numbers;
    the plain loop gives the same solutions."""
    table = random_table(V, 2, eos=EOS, eos_shift=1.5)
    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1, 2]]), [[1, 2]], scorer=scorer, n=6, m=2, rounds=3,
                      dvts=True, sample_seed=0, eos_token_id=EOS, max_steps=2)
    want = sampled_reference(table, [1, 2], 0, n=6, m=2, rounds=3, limit=2, how="last", dvts=True)
    assert_solutions(as_tuples(got[0]), want)


def test_a_prompt_out_of_budget_stops_while_the_other_goes_on():
    """Token budget 14, sampling, n=2, m=1, max_steps 3. Prompt [1] never ends a segment early:
    rounds of 2 segments of min(3, left // 2) tokens: 3 (6 rows, 8 left), 3 (6 rows, 2 left), 1 (2
    rows, 0 left), then none: 3 rounds, 14 rows. Prompt [3] only ever draws the delimiter: 2 rows a
    round, all 5 rounds (10 rows); its partial solutions keep their own state rows after [1]'s
    stop: every one is the delimiter 5 times, logprob 0."""
    def table(seq):
        if seq[0] == 3:
            row = np.full(W7, -math.inf)
            row[DELIM7] = 0.0
            return row
        return no_end_table(seq)

    model = SequenceModel(table)
    got = step_search(model.step, model.init_state([[1], [3]]), [[1], [3]], scorer=scorer, n=2, rounds=5,
                      sample_seed=6, eos_token_id=EOS, max_steps=3, stop_sequences=[[DELIM7]], token_budget=14)
    assert [(x["rounds"], x["generated_tokens"], x["scored"]) for x in got.info] == [(3, 14, 6), (5, 10, 10)]
    assert all([len(s) for s in h.segments] == [3, 3, 1] and not h.finished for h in got[0]) and len(got[0]) == 2
    assert [(h.tokens, h.segments, h.logprob) for h in got[1]] == [([DELIM7] * 5, [[DELIM7]] * 5, 0.0)] * 2


@pytest.mark.parametrize("aggregation, scorer, message", [
    # round 2 gives candidate 0 alone -inf after round 1's +inf: its mean alone is NaN
    ("mean", lambda p, s: [-float("inf") if len(x) > 3 and j == 0 else float("inf") for j, x in enumerate(s)],
     r"^aggregation 'mean' of candidate 0's step scores \[inf, -inf\] is NaN"),
    # 1e200 * 1e200 overflows to inf, then times 0
    ("prod", lambda p, s: [1e200 if len(x) <= 6 else 0.0 for x in s], r"^aggregation 'prod' of candidate \d+'s step"),
])
def test_an_aggregation_that_is_nan_is_an_error_without_a_numpy_warning(aggregation, scorer, message):
    """The refusal is the error alone: numpy's overflow and invalid-value warnings of the
    aggregation are silenced (with warnings made errors, they would come first)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=message):
            search_with(aggregation=aggregation, rounds=3, scorer=scorer)


def _with_candidate(value, j=1):
    """A scorer answering ``value`` for candidate j, the test scorer's value for the others."""
    def answer(prompts, partials):
        out = list(scorer(prompts, partials))
        out[j] = value
        return out
    return answer


@pytest.mark.parametrize("answer, error, message", [
    (_with_candidate("0.5"), TypeError, r"^scorer must return one real per candidate \(8\); got '0\.5' of type str "
                                        r"for candidate 1$"),
    (_with_candidate(True), TypeError, r"got True of type bool for candidate 1$"),
    (_with_candidate(np.bool_(False)), TypeError, r"got (np\.)?False(_)?\)? of type bool_? for candidate 1$"),
    (_with_candidate(0.5 + 0j), TypeError, r"got \(0\.5\+0j\) of type complex for candidate 1$"),
    (_with_candidate(None), TypeError, r"got None of type NoneType for candidate 1$"),
    (_with_candidate([0.5]), TypeError, r"got \[0\.5\] of type list for candidate 1$"),
    (_with_candidate(np.array([0.5])), TypeError, r"got array\(\[0\.5\]\) of type ndarray for candidate 1$"),
    (_with_candidate(10**400), ValueError, r"^scorer returned an integer too large for a float64 "
                                           r"\(10000000000000000000\.\.\., 401 digits\) for candidate 1$"),
    (lambda p, s: None, TypeError, r"^scorer must return one real per candidate \(8\); got None of type NoneType$"),
    (lambda p, s: 0.5, TypeError, r"^scorer must return one real per candidate \(8\); got 0\.5 of type float$"),
    (lambda p, s: np.ones(len(s), bool), TypeError, r"^scorer must return one real per candidate \(8\); got an "
                                                    r"array of dtype bool$"),
    (lambda p, s: np.ones(len(s), complex), TypeError, r"got an array of dtype complex128$"),
    (lambda p, s: np.ones((len(s), 1)), ValueError, r"^scorer must return one real per candidate: shape \(8,\); "
                                                    r"got shape \(8, 1\)$"),
    (lambda p, s: iter([0.5] * len(s)), TypeError, r"^scorer must return one real per candidate \(8\); got "
                                                   r"<list_iterator object at 0x[0-9a-fA-F]+> of type list_iterator$"),
    (lambda p, s: "abcdefgh", TypeError, r"^scorer must return one real per candidate \(8\); got 'abcdefgh' of type "
                                         r"str$"),
    (lambda p, s: [0.5] * (len(s) + 1), ValueError, r"^scorer must return one real per candidate: shape \(8,\); "
                                                    r"got shape \(9,\)$"),
])
def test_a_scorer_answer_that_is_not_reals_is_named_with_its_candidate(answer, error, message):
    """Bools, complex numbers, strings, None and other objects were taken as numbers (True as 1,
    '0.5' as 0.5) or called NaN; 10**400 was numpy's OverflowError."""
    with pytest.raises(error, match=message):
        search_with(scorer=answer)


def test_a_scorer_may_answer_a_list_of_0d_arrays_or_tensors():
    """Each candidate's score as a 0-d array, a numpy scalar or a 0-d tensor (or a numpy array of
    dtype object holding numpy scalars): taken as the value it
    holds, the same search as the scorer answering those values as Python floats (the test
    scorer's values rounded to float32, so that every wrapper holds them exactly)."""
    def values(prompts, partials):
        return [float(np.float32(v)) for v in scorer(prompts, partials)]

    want = [as_tuples(x) for x in search_with(scorer=values, rounds=2)]
    objects = search_with(scorer=lambda p, s: np.array([np.float32(v) for v in values(p, s)], object), rounds=2)
    assert [as_tuples(x) for x in objects] == want  # an object array is a sequence of its elements
    wraps = [np.array, np.float32] + ([lambda v: torch.tensor(v, dtype=torch.float32)] if torch is not None else [])
    for wrap in wraps:
        got = search_with(scorer=lambda p, s, wrap=wrap: [wrap(v) for v in values(p, s)], rounds=2)
        assert [as_tuples(x) for x in got] == want


@pytest.mark.skipif(torch is None, reason="no torch")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int32"])
def test_a_scorer_may_answer_a_tensor_of_any_real_dtype(dtype):
    """A bfloat16 tensor was torch's 'Got unsupported ScalarType BFloat16'. The scores are the
    tensor's values (rounded to its dtype): the same as a scorer answering those values as floats."""
    dt = getattr(torch, dtype)

    def values(prompts, partials):
        return [v * 100 for v in scorer(prompts, partials)]

    got = search_with(scorer=lambda p, s: torch.tensor(values(p, s)).to(dt), rounds=2)
    want = search_with(scorer=lambda p, s: torch.tensor(values(p, s)).to(dt).double().tolist(), rounds=2)
    assert [as_tuples(x) for x in got] == [as_tuples(x) for x in want]


@pytest.mark.skipif(torch is None, reason="no torch")
@pytest.mark.parametrize("dtype", ["bool", "complex64"])
def test_a_tensor_answer_of_bools_or_complex_numbers_is_refused(dtype):
    with pytest.raises(TypeError, match=rf"^scorer must return one real per candidate \(8\); got a tensor of dtype "
                                        rf"torch\.{dtype}$"):
        search_with(scorer=lambda p, s: torch.ones(len(s), dtype=getattr(torch, dtype)))


def test_the_mean_of_huge_finite_scores_is_finite():
    """Step scores near the float64 limit: their sum overflows, so numpy's mean was inf and the
    solution ranked above every other. The mean of finite reals lies between them: here the
    exact mean (Python fractions) rounded to float64."""
    from fractions import Fraction

    big = lambda p, s: [1.7e308 - 1e306 * (len(x) % 7) for x in s]  # noqa: E731
    got = search_with(scorer=big, aggregation="mean", rounds=3)
    solutions = [h for hyps in got for h in hyps]
    assert any(len(h.step_scores) >= 2 for h in solutions)
    for h in solutions:
        exact = float(sum(Fraction(v) for v in h.step_scores) / len(h.step_scores))
        assert h.score == pytest.approx(exact, rel=1e-15) and math.isfinite(h.score)
    assert aggregate([1e308, 1.5e308], "mean") == pytest.approx(1.25e308, rel=1e-15)
    assert aggregate([1e308, math.inf], "mean") == math.inf and aggregate([-1e308, -1e308], "mean") == -1e308


def test_a_scorer_that_edits_its_arguments_changes_nothing():
    """A scorer that appends a step tag to each partial solution (and to each prompt) in place,
    as some reward-model recipes do before reading, then scores what it was given: the search
    gives what it gives with a scorer that only reads (each solution's tokens its segments
    joined, the next rounds' prompts unchanged)."""
    def editing(prompts, partials):
        for p, s in zip(prompts, partials, strict=True):
            s += [DELIM]
            p.append(DELIM)
        return scorer([p[:-1] for p in prompts], [s[:-1] for s in partials])

    for expansion in ("sample", "beam"):
        got = search_with(scorer=editing, rounds=3, expansion=expansion)
        want = search_with(rounds=3, expansion=expansion)
        assert [as_tuples(x) for x in got] == [as_tuples(x) for x in want]
        assert all(h.tokens == [t for seg in h.segments for t in seg] for hyps in got for h in hyps)


@pytest.mark.parametrize("limit", [1, 2])
@pytest.mark.parametrize("delimiter", [[3, 4], [1, 4], [2, 3, 4], [4, 4]])
def test_a_delimiter_longer_than_the_open_step_is_matched_from_its_start(limit, delimiter):
    """Segments of 1 or 2 tokens, delimiters of 2 and 3 tokens: the open step is often shorter
    than the delimiter when a segment is cut, so its whole tail (not a token less) is what the next
    segment matches on (a [2, 3] segment that opens a step, then 4, ends the step), and nothing
    before the open step's start counts as a token: right after a delimiter (or at the start) a 4
    alone never ends a step, also with the delimiter [1, 4] and the prompt [1]; with [4, 4], a 4
    right after a completed 4 4 opens a new step and does not end it. Oracle: ``expected_segments``
    from the tokens alone."""
    def likes_the_delimiter(seed):
        base = random_table(V, seed)

        def table(prefix):
            row = base(prefix)
            row[delimiter[0]] += 1.5
            row[4] += 1.0  # 4 alone too
            for a, b in zip(delimiter, delimiter[1:], strict=False):
                row[b] += 2.5 if prefix[-1] == a else 0.0
            row[EOS] = -math.inf
            return row
        return table

    lone_fours = across = 0
    for seed in range(6):
        model = SequenceModel(likes_the_delimiter(seed))
        got = step_search(model.step, model.init_state([[1]]), [[1]], scorer=scorer, n=4, m=2, rounds=6,
                          sample_seed=seed, eos_token_id=EOS, max_steps=limit, stop_sequences=[delimiter])
        for h in got[0]:
            assert h.segments == expected_segments(h.tokens, limit, delimiter), (seed, h.tokens, h.segments)
            ends = [0] + list(itertools.accumulate(len(s) for s in h.segments))
            across += sum(1 for i in ends[1:-1] if h.tokens[i - 1:i + 1] == delimiter[-2:])
            # a 4 that opens a step: at the start, or right after a completed delimiter
            lone_fours += sum(1 for i in ends[:-1] if h.tokens[i] == 4 and
                              (i == 0 or h.tokens[max(i - len(delimiter), 0):i] == delimiter))
    assert across and lone_fours
