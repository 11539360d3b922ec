"""exact_search: brute-force enumeration on tiny models, never worse than any beam, the node
budget, batch independence, processors and controls, numpy and torch, errors.

The oracle (:func:`enumerate_outputs`) is written from the definition in ``beamsearch.modes.exact``'s
docstring with the plain per-row processing of ``tests/oracles/controls.py``: every finished output
of at most max_steps tokens and every unfinished output of exactly max_steps tokens, ranked
finished first, then by score.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from beamsearch import Hypothesis, beam_search_batch, select_state
from beamsearch.core.state import concat_state
from beamsearch.modes.exact import EXACT, ExactResults, exact_search
from models import SequenceModel, random_table, row_cache_type
from oracles.controls import PENALTIES, ends_with_stop, eos_ids, process_row, reference_score

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]


def enumerate_outputs(table, prompt, vocab, *, eos, max_steps, alpha=0.6, penalty="gnmt", ngram=0,
                      temperature=1.0, top_k=None, min_new_tokens=0, stop_sequences=(), prefix=()):
    """Every output with a finite processed logprob, as ``(tokens, logprob, score, finished)``,
    ranked finished first, then by score (highest first)."""
    eos_t, lp, stops = eos_ids(eos), PENALTIES[penalty], [tuple(s) for s in stop_sequences]
    out = []

    def walk(tokens, logprob):
        t = len(tokens) + 1
        history = tuple(prompt) + tokens
        row = process_row(table(history), history, t, eos=eos_t, min_new_tokens=min_new_tokens,
                          temperature=temperature, top_k=top_k, ngram=ngram,
                          forced=prefix[t - 1] if t <= len(prefix) else None)
        for v in range(vocab):
            if not math.isfinite(row[v]):
                continue
            new, s = tokens + (v,), logprob + row[v]
            if v in eos_t or (t > min_new_tokens and ends_with_stop(new, stops)):
                out.append((new, s, s / lp(len(new), alpha), True))
            elif t == max_steps:
                out.append((new, s, s / lp(len(new), alpha), False))
            else:
                walk(new, s)

    walk((), 0.0)
    out.sort(key=lambda o: (not o[3], -o[2]))
    return out


def assert_exact(hyps, ranked, n_best, tol=1e-10):
    """``hyps`` are the first ``n_best`` of ``ranked`` up to ties: the same finished flags and
    scores in order, distinct outputs, each one an output of that score; where a score is not
    tied (clear by 1e-9 of every other output of its kind) the very same tokens."""
    expect = ranked[:n_best]
    assert len(hyps) == len(expect)
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
    truth = {o[0]: o for o in ranked}
    for h, e in zip(hyps, expect, strict=True):
        assert type(h) is Hypothesis
        assert (h.finished, h.score) == (e[3], pytest.approx(e[2], abs=tol))
        mine = truth[tuple(h.tokens)]  # it is an output, with that logprob and score
        assert (h.logprob, h.score, h.finished) == (pytest.approx(mine[1], abs=tol), pytest.approx(mine[2], abs=tol),
                                                    mine[3])
        if all(abs(o[2] - e[2]) > 1e-9 for o in ranked if o is not e and o[3] == e[3]):
            assert tuple(h.tokens) == e[0]


def run_exact(table, prompts, backend="numpy", dtype=np.float64, **kw):
    model = SequenceModel(table, backend=backend, dtype=dtype)
    return exact_search(model.step, model.init_state(prompts), prompts, **kw), model


# ---- brute force on tiny random models -----------------------------------------------------------

CASES = [  # (seed, V, max_steps, alpha, penalty, levels (ties), n_best, eos_shift)
    (seed, 3 + seed % 3, 3 + (seed // 3) % 3, (0.0, 0.6, 1.0)[seed % 3], ("gnmt", "power")[seed % 2],
     (None, 2)[(seed // 2) % 2], (1, 1, 3)[seed % 3], (-1.0, 0.0, 1.5)[(seed // 5) % 3])
    for seed in range(30)
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=[f"seed{c[0]}" for c in CASES])
def test_equals_brute_force(case, backend):
    seed, vocab, steps, alpha, penalty, levels, n_best, shift = case
    eos = vocab - 1
    table = random_table(vocab, seed, levels=levels, eos=eos, eos_shift=shift)
    prompts = [[0], [1, 0]]
    # seed_beam=1: a greedy seed, often not the optimum, so that the branch and bound has work to do
    results, _ = run_exact(table, prompts, backend, eos_token_id=eos, max_steps=steps, alpha=alpha,
                           length_penalty=penalty, n_best=n_best, seed_beam=1)
    assert isinstance(results, ExactResults) and results.proven.all()
    for prompt, hyps in zip(prompts, results, strict=True):
        ranked = enumerate_outputs(table, prompt, vocab, eos=eos, max_steps=steps, alpha=alpha, penalty=penalty)
        assert_exact(hyps, ranked, n_best)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unfinished_outputs_fill_up_when_too_few_finish(backend):
    # eos is masked (min_new_tokens = max_steps), so no output finishes: the best unfinished
    # outputs of max_steps tokens are returned, as beam_search_batch's fill-up returns its rows.
    table = random_table(4, 7, eos=3)
    results, _ = run_exact(table, [[0]], backend, eos_token_id=3, max_steps=3, min_new_tokens=3, n_best=2)
    ranked = enumerate_outputs(table, [0], 4, eos=3, max_steps=3, min_new_tokens=3)
    assert not any(o[3] for o in ranked)
    assert_exact(results[0], ranked, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hand_computed_search_error_of_greedy(backend):
    # V=6: 0 bos, 1 '1', 2 '2', 3 '8', 4 '0', 5 eos; probabilities by the previous token:
    # bos -> '1' 0.6, '2' 0.4; '1' -> '8' 0.5, '0' 0.5; '2' -> '0' 1.0; '8', '0' -> eos 1.0.
    # Outputs: "1 8 eos" and "1 0 eos" have p = 0.3 each, "2 0 eos" has p = 0.4: the exact best,
    # which greedy (beam 1) misses by committing to '1'. With alpha = 0 its score is ln 0.4.
    probs = {0: [0, .6, .4, 0, 0, 0], 1: [0, 0, 0, .5, .5, 0], 2: [0, 0, 0, 0, 1, 0],
             3: [0, 0, 0, 0, 0, 1], 4: [0, 0, 0, 0, 0, 1], 5: [1 / 6] * 6}
    with np.errstate(divide="ignore"):
        table = {t: np.log(np.array(p)) for t, p in probs.items()}
    model = SequenceModel(lambda seq: table[seq[-1]], backend=backend)
    greedy = beam_search_batch(model.step, model.init_state([[0]]), [[0]], eos_token_id=5, max_steps=4,
                               beam_size=1, alpha=0.0)[0][0]
    assert greedy.tokens == [1, 3, 5] and greedy.score == pytest.approx(math.log(0.3), abs=1e-12)
    model = SequenceModel(lambda seq: table[seq[-1]], backend=backend)
    best = exact_search(model.step, model.init_state([[0]]), [[0]], eos_token_id=5, max_steps=4, alpha=0.0,
                        seed_beam=1)
    assert best[0][0].tokens == [2, 4, 5] and best[0][0].score == pytest.approx(math.log(0.4), abs=1e-12)
    assert best.proven[0]


# ---- never worse than a beam -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_never_worse_than_any_beam(seed, backend, dtype):
    vocab, eos = 5, 4
    table = random_table(vocab, 100 + seed, levels=(None, 3)[seed % 2], eos=eos, eos_shift=-0.5)
    prompts = [[0], [2], [1, 3]]
    kw = dict(eos_token_id=eos, max_steps=5, alpha=(0.0, 0.6, 1.0, 2.0)[seed % 4],
              length_penalty=("gnmt", "power")[seed // 4])
    exact, _ = run_exact(table, prompts, backend, dtype, **kw)
    assert exact.proven.all()
    for beam in range(1, 7):
        model = SequenceModel(table, backend=backend, dtype=dtype)
        beams = beam_search_batch(model.step, model.init_state(prompts), prompts, beam_size=beam, **kw)
        for e, b in zip(exact, beams, strict=True):
            assert (e[0].finished, e[0].score) >= (b[0].finished, b[0].score)


# ---- the budget ------------------------------------------------------------------------------------

def seed_rows(table, prompts, **kw):
    """The seed beam's result (beam_search_batch, beam 4) and the rows it passes to the model,
    counted by the model."""
    model = SequenceModel(table)
    result = beam_search_batch(model.step, model.init_state(prompts), prompts, beam_size=4, **kw)
    return sum(len(c) for c in model.calls), result


def rescored(table, prompt, h, **kw):
    """Teacher-forced rescoring by the plain oracle: (logprob, score, finished)."""
    return reference_score(table, [prompt], [h.tokens], **kw)[0][1:]


@pytest.mark.parametrize("seed", range(6))
def test_tiny_budget_gives_the_best_so_far_not_proven(seed):
    vocab, eos = 5, 4
    table = random_table(vocab, 200 + seed, eos=eos, eos_shift=-1.0)
    kw = dict(eos_token_id=eos, max_steps=5, alpha=0.6)
    ranked = enumerate_outputs(table, [0], vocab, eos=eos, max_steps=5, alpha=0.6)
    rows, seed_result = seed_rows(table, [[0]], **kw)
    # a budget the seed alone spends: the branch and bound cannot expand the root
    tight, _ = run_exact(table, [[0]], node_budget=rows, **kw)
    assert not tight.proven[0] and tight.expanded[0] == rows
    assert tight[0][0].tokens == seed_result[0][0].tokens and tight[0][0].score == seed_result[0][0].score
    full, _ = run_exact(table, [[0]], **kw)
    assert full.proven[0] and full.expanded[0] > rows + 1
    assert_exact(full[0], ranked, 1)
    # half way between: still not proven, never worse than the seed, a valid output
    budget = (rows + int(full.expanded[0])) // 2
    some, model = run_exact(table, [[0]], node_budget=budget, **kw)
    assert not some.proven[0] and some.expanded[0] == budget == sum(len(c) for c in model.calls)
    assert (some[0][0].finished, some[0][0].score) >= (tight[0][0].finished, tight[0][0].score)
    for results in (tight, some):
        h = results[0][0]
        logprob, score, finished = rescored(table, [0], h, eos=eos, alpha=0.6)
        assert (h.logprob, h.score, h.finished) == (pytest.approx(logprob, abs=1e-12), pytest.approx(score, abs=1e-12),
                                                    finished)


def _rank_key(h):
    return (h.finished, h.score)


def test_a_budget_result_is_never_worse_than_the_seed_beam_only_when_the_budget_covers_the_seed():
    """docs/exact.md: a result cut by the budget is never worse than the seed beam search's
    (``beam_search_batch`` with beam ``max(seed_beam, n_best)``, its outputs: finished, or of
    ``max_steps`` tokens) when ``node_budget`` covers the rows that search passes; a smaller
    budget cuts the seed too, and the result can then be worse than that beam's (or empty),
    though every result is still an output with its true score and the rows stay in the budget."""
    vocab, eos, n_best, steps = 5, 4, 2, 5
    worse = 0
    for seed in range(12):
        table = random_table(vocab, 300 + seed, eos=eos, eos_shift=-0.5)
        kw = dict(eos_token_id=eos, max_steps=steps, alpha=0.6)
        model = SequenceModel(table)
        beam = beam_search_batch(model.step, model.init_state([[0]]), [[0]], beam_size=4, n_best=n_best, **kw)[0]
        rows = sum(len(c) for c in model.calls)  # the seed beam's rows (seed_beam 4 >= n_best)
        outputs = [h for h in beam if h.finished or len(h.tokens) == steps]
        for budget in (1, rows // 2, rows - 1, rows, rows + 1, rows + 7):
            got, _ = run_exact(table, [[0]], node_budget=budget, n_best=n_best, **kw)
            assert got.expanded[0] <= budget
            for h in got[0]:  # an output, with its true logprob, score and flag
                logprob, score, finished = rescored(table, [0], h, eos=eos, alpha=0.6)
                assert (h.logprob, h.score, h.finished) == (pytest.approx(logprob, abs=1e-12),
                                                            pytest.approx(score, abs=1e-12), finished)
            if budget >= rows:
                assert len(got[0]) >= len(outputs)
                for e, b in zip(got[0], outputs, strict=True):
                    assert _rank_key(e) >= (b.finished, b.score - 1e-12)
            elif len(got[0]) < len(outputs) or any(_rank_key(e) < _rank_key(b)
                                                   for e, b in zip(got[0], outputs, strict=True)):
                worse += 1
    assert worse > 0  # a budget below the seed's rows does cut it: "never worse" holds only above


def test_budget_is_per_input_and_counts_match_the_model():
    table = random_table(4, 5, eos=3, eos_shift=-1.0)
    prompts = [[0], [1], [2]]
    kw = dict(eos_token_id=3, max_steps=4, alpha=0.6)
    free, model = run_exact(table, prompts, **kw)
    assert free.proven.all()
    # every row of every call is counted once, for its input (a row's prompt tells its input)
    per_input = [sum(1 for call in model.calls for row in call if row[: len(p)] == tuple(p)) for p in prompts]
    assert free.expanded.tolist() == per_input
    assert free.model_calls.tolist() == [sum(1 for call in model.calls if any(r[: len(p)] == tuple(p) for r in call))
                                         for p in prompts]
    # the budget of the input that needed the most, less one: it alone loses its proof
    budget = int(free.expanded.max()) - 1
    capped, _ = run_exact(table, prompts, node_budget=budget, **kw)
    assert capped.proven.tolist() == (free.expanded <= budget).tolist()
    assert (capped.expanded <= budget).all()


@pytest.mark.parametrize("seed", range(4))
def test_every_budget_bounds_the_rows_passed_and_a_proof_is_exact(seed, monkeypatch):
    # Every budget from 1 row to what the full search needs: the rows passed to the model (the
    # seed beam's included; the model counts them) never exceed it, every result is an output
    # (finished, or unfinished of max_steps tokens) with the oracle's logprob and score, and a
    # proven result is the brute-force n_best. batch_rows=1 makes many calls per step, so each
    # step's extensions are cut back to what the budget can still expand (``_shortlist``) again
    # and again; the same search without that cut is the plain reference: it must change nothing.
    from beamsearch.strategies.branch_and_bound import BranchAndBound

    vocab, eos, steps = 4, 3, 4
    table = random_table(vocab, 300 + seed, eos=eos, eos_shift=-1.0)
    kw = dict(eos_token_id=eos, max_steps=steps, alpha=0.6, n_best=2, batch_rows=1)
    ranked = enumerate_outputs(table, [0], vocab, eos=eos, max_steps=steps, alpha=0.6)
    full, _ = run_exact(table, [[0]], **kw)
    assert full.proven[0]
    cut = BranchAndBound._shortlist
    cuts = []
    monkeypatch.setattr(BranchAndBound, "_shortlist", lambda self, *a: cuts.append(1) or cut(self, *a))
    for budget in range(1, int(full.expanded[0]) + 1):
        results, model = run_exact(table, [[0]], node_budget=budget, **kw)
        assert results.expanded[0] == sum(len(c) for c in model.calls) <= budget
        assert results.model_calls[0] == len(model.calls)
        for h in results[0]:
            assert h.finished or len(h.tokens) == steps
            logprob, score, finished = rescored(table, [0], h, eos=eos, alpha=0.6)
            assert (h.logprob, h.score, h.finished) == (pytest.approx(logprob, abs=1e-12),
                                                        pytest.approx(score, abs=1e-12), finished)
        if results.proven[0]:
            assert_exact(results[0], ranked, 2)
        with monkeypatch.context() as uncut:
            uncut.setattr(BranchAndBound, "_shortlist", lambda self, children, *a: children)
            reference, _ = run_exact(table, [[0]], node_budget=budget, **kw)
        assert (results[0], results.proven[0], results.expanded[0]) == (reference[0], reference.proven[0],
                                                                         reference.expanded[0])
    assert results.proven[0] and results.expanded[0] == full.expanded[0]  # the full search's own budget
    assert cuts


def test_decode_exact_mode_expanded_never_passes_the_node_budget(tmp_path):
    # issue 19: `--mode exact --node-budget 5` reported "expanded": 51 (the seed beam ran whole).
    # Through the command line, in a subprocess: each record's expanded is at most 5, and the
    # record is exact_search's on the line alone with that budget.
    from beamsearch import corpus

    texts = ["hello", "a much longer line of text", "x"]
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n")
    r = subprocess.run([sys.executable, "-m", "beamsearch", "decode", "--model", "_toy", "--input", str(src),
                        "--output", str(out), "--mode", "exact", "--node-budget", "5", "--seed-beam", "4",
                        "--max-rows", "8", "--max-steps", "6", "--alpha", "0.6"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [rec["input"] for rec in records] == texts
    model = corpus.toy_model()
    for rec in records:
        assert 0 < rec["expanded"] <= 5 and rec["proven"] is False
        alone = exact_search(model.step, model.make_state([{"source": rec["input"]}]), [[model.bos]],
                             eos_token_id=model.eos, max_steps=6, alpha=0.6, seed_beam=4, batch_rows=8,
                             node_budget=5)
        assert rec["expanded"] == alone.expanded[0]
        assert [h["tokens"] for h in rec["nbest"]] == [h.tokens for h in alone[0]]


# ---- pruning, batching, counts ----------------------------------------------------------------------

def test_pruning_expands_far_fewer_prefixes_than_there_are():
    # A peaky model (logits scaled by 4): the bound prunes almost everything.
    vocab, eos, steps = 5, 4, 5
    base = random_table(vocab, 11, eos=eos, eos_shift=1.0)

    def table(seq):
        return 4.0 * np.asarray(base(seq))

    results, _ = run_exact(table, [[0]], eos_token_id=eos, max_steps=steps, alpha=0.6)
    prefixes = sum((vocab - 1) ** t for t in range(steps))  # non-eos prefixes of 0 .. steps-1 tokens
    assert results.proven[0] and results.expanded[0] < prefixes / 10
    assert_exact(results[0], enumerate_outputs(table, [0], vocab, eos=eos, max_steps=steps, alpha=0.6), 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_independence(backend):
    table = random_table(4, 21, levels=2, eos=3)
    prompts = [[0], [1, 2], [2], [0, 0, 1]]
    kw = dict(eos_token_id=3, max_steps=[4, 3, 5, 4], alpha=0.6, n_best=2, batch_rows=3, node_budget=40)
    together, _ = run_exact(table, prompts, backend, **kw)
    for i, prompt in enumerate(prompts):  # bit for bit: one backend, rows computed alone (tests/approx.py)
        alone, _ = run_exact(table, [prompt], backend, **{**kw, "max_steps": [kw["max_steps"][i]]})
        assert alone[0] == together[i]
        assert (alone.proven[0], alone.model_calls[0], alone.expanded[0]) == (
            together.proven[i], together.model_calls[i], together.expanded[i])


def test_calls_hold_at_most_batch_rows_rows_all_at_one_step():
    base = random_table(4, 3, eos=3, eos_shift=-1.0)

    def table(seq):  # flat: many prefixes to expand
        return 0.3 * np.asarray(base(seq))

    results, model = run_exact(table, [[0]], eos_token_id=3, max_steps=5, alpha=1.0, batch_rows=2, seed_beam=1)
    assert max(len(c) for c in model.calls) == 2  # the seed's calls hold one row, the rest at most 2
    assert all(len({len(p) for p in call}) == 1 for call in model.calls)  # one prefix length per call
    assert results.proven[0]
    assert_exact(results[0], enumerate_outputs(table, [0], 4, eos=3, max_steps=5, alpha=1.0), 1)


# ---- processors and controls -------------------------------------------------------------------------

PROCESSING = [
    dict(temperature=0.5),
    dict(temperature=2.0, no_repeat_ngram_size=2),
    dict(top_k=2),
    dict(no_repeat_ngram_size=1),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [64, 1])  # 1: every call one row, a processor's history read through an offset
@pytest.mark.parametrize("processing", PROCESSING, ids=[str(p) for p in PROCESSING])
def test_processors_are_applied(processing, rows, backend):
    table = random_table(4, 31, eos=3)
    prompts = [[0, 1], [2]]
    results, _ = run_exact(table, prompts, backend, eos_token_id=3, max_steps=4, alpha=0.6, n_best=2,
                           batch_rows=rows, **processing)
    oracle = dict(temperature=processing.get("temperature", 1.0), top_k=processing.get("top_k"),
                  ngram=processing.get("no_repeat_ngram_size", 0))
    for prompt, hyps in zip(prompts, results, strict=True):
        assert_exact(hyps, enumerate_outputs(table, prompt, 4, eos=3, max_steps=4, alpha=0.6, **oracle), 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoding_controls(backend):
    # several eos ids, min_new_tokens, a stop sequence, a forced prefix and per-input max_steps
    table = random_table(5, 41, eos=4, eos_shift=0.5)
    prompts = [[0], [1]]
    kw = dict(eos_token_id=[3, 4], max_steps=[5, 4], min_new_tokens=1, stop_sequences=[[1, 2]],
              prefix=[[2], []], length_penalty="power", alpha=1.0, n_best=3)
    results, _ = run_exact(table, prompts, backend, **kw)
    for i, prompt in enumerate(prompts):
        ranked = enumerate_outputs(table, prompt, 5, eos=[3, 4], max_steps=kw["max_steps"][i], alpha=1.0,
                                   penalty="power", min_new_tokens=1, stop_sequences=[[1, 2]],
                                   prefix=tuple(kw["prefix"][i]))
        assert_exact(results[i], ranked, 3)


# ---- model states: joined rows of several calls --------------------------------------------------------

class GrowingCacheModel:
    """A torch (or numpy) model whose state has a cache growing by one column per step (as a KV
    cache does) and a hidden vector: the logits are ``table(prompt + tokens fed)``, read back from
    the cache, so a row gathered or joined wrongly gives wrong logits."""

    def __init__(self, table, lib):
        self.table, self.lib = table, lib

    def init_state(self, prompts):
        n, width = len(prompts), max(len(p) for p in prompts) - 1
        cache = np.full((n, width), -1.0)
        for i, p in enumerate(prompts):
            cache[i, width - (len(p) - 1):] = p[:-1]
        hidden = np.arange(n, dtype=np.float64)[:, None] * np.ones((1, 3))
        return {"cache": self._array(cache), "h": self._array(hidden)}

    def _array(self, a):
        return torch.from_numpy(a) if self.lib == "torch" else a

    def step(self, state, y_prev):
        y = self._array(np.asarray(y_prev, dtype=np.float64)[:, None])
        cache = torch.cat([state["cache"], y], 1) if self.lib == "torch" else np.concatenate([state["cache"], y], 1)
        rows = np.asarray(cache)
        logits = np.stack([self.table(tuple(int(v) for v in r if v >= 0)) for r in rows])
        return self._array(logits), {"cache": cache, "h": state["h"] + 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_growing_cache_state_rows_are_joined_and_gathered(backend):
    table = random_table(4, 51, eos=3, eos_shift=-0.5)
    prompts = [[0], [1, 2], [2, 2, 1]]
    model = GrowingCacheModel(table, backend)
    results = exact_search(model.step, model.init_state(prompts), prompts, eos_token_id=3, max_steps=4,
                           alpha=0.6, n_best=2, batch_rows=2)
    for prompt, hyps in zip(prompts, results, strict=True):
        assert_exact(hyps, enumerate_outputs(table, prompt, 4, eos=3, max_steps=4, alpha=0.6), 2)


class InPlace:
    """A state object that the search reorders, and the model extends, in place (as a Hugging
    Face KV cache is): ``select_state`` gathers its rows into the same object and returns it, and
    the step writes the new rows into the object it was given."""

    def __init__(self, inner):
        self.inner = inner


@select_state.register(InPlace)
def _select_in_place(state, idx):
    state.inner = select_state(state.inner, idx)
    return state


def _concat_in_place(states):
    return InPlace(concat_state([s.inner for s in states]))


@pytest.mark.parametrize("rows", [64, 2, 1])
def test_a_state_changed_in_place_is_copied_where_it_is_read_twice(rows):
    """The seed search and every call of a step but the last read a copy; otherwise the seed's
    reorders and each call's extension would corrupt the rows the next reader expects."""
    concat_state.register(InPlace)(_concat_in_place)
    table = random_table(4, 71, eos=3, eos_shift=-0.5)
    prompts = [[0], [1, 2]]
    model = SequenceModel(table)

    def step(state, y_prev):
        logits, state.inner = model.step(state.inner, y_prev)
        return logits, state

    results = exact_search(step, InPlace(model.init_state(prompts)), prompts, eos_token_id=3, max_steps=4,
                           alpha=0.6, n_best=2, batch_rows=rows, seed_beam=1)
    assert results.proven.all()
    for prompt, hyps in zip(prompts, results, strict=True):
        assert_exact(hyps, enumerate_outputs(table, prompt, 4, eos=3, max_steps=4, alpha=0.6), 2)


@pytest.mark.parametrize("seed", range(6))
def test_finished_before_unfinished_when_too_few_finish(seed):
    """eos is possible only right after token 0 and max_steps is 2, so an input has one or two
    finished outputs (``[0, eos]``, and ``[eos]`` after a prompt ending in 0): its n_best are
    those, then the best unfinished ones (whose own scores may be higher); the seed beam holds
    fewer than n_best finished, so it sets no bound and the branch and bound searches on."""
    vocab, eos = 8, 7
    base = random_table(vocab, 80 + seed, eos=eos)

    def table(seq):
        row = 2.0 * np.array(base(seq), dtype=np.float64)
        if seq[-1] != 0:
            row[eos] = -np.inf
        return row

    prompts = [[1], [2, 0]]
    results, _ = run_exact(table, prompts, eos_token_id=eos, max_steps=2, alpha=0.6, n_best=4, seed_beam=1)
    for prompt, hyps in zip(prompts, results, strict=True):
        ranked = enumerate_outputs(table, prompt, vocab, eos=eos, max_steps=2, alpha=0.6)
        assert [o[3] for o in ranked[:4]].count(True) == (2 if prompt[-1] == 0 else 1)
        assert_exact(hyps, ranked, 4)


class NoImmediateRepeat:
    """A user processor reading ``ctx.history`` (generated tokens only: no ``needs_history``):
    the last generated token may not come again right away."""

    def __call__(self, logits, ctx):
        history = ctx.history() if callable(ctx.history) else ctx.history
        if history.shape[1]:
            last = history[:, -1]
            rows = np.flatnonzero(last >= 0)
            logits[rows, last[rows]] = -np.inf
        return logits


@pytest.mark.parametrize("rows", [64, 1])  # 1: each call's rows read their history through an offset
def test_a_processor_reading_generated_history(rows):
    base = random_table(4, 91, eos=3, eos_shift=-0.5)
    prompts = [[0], [1, 2]]

    def oracle_table(prompt):
        def table(seq):
            row = np.array(base(seq), dtype=np.float64)
            if len(seq) > len(prompt):
                row[seq[-1]] = -np.inf
            return row
        return table

    results, _ = run_exact(base, prompts, eos_token_id=3, max_steps=4, alpha=0.6, n_best=2, batch_rows=rows,
                           seed_beam=1, logits_processors=[NoImmediateRepeat()])
    for prompt, hyps in zip(prompts, results, strict=True):
        assert_exact(hyps, enumerate_outputs(oracle_table(prompt), prompt, 4, eos=3, max_steps=4, alpha=0.6), 2)


def test_a_registered_cache_type_cannot_be_joined():
    Cache = row_cache_type()
    table = random_table(4, 61, eos=3, eos_shift=-2.0)

    def step(state, y_prev):
        return np.stack([table((int(t),)) for t in y_prev]), Cache(state.rows)

    with pytest.raises(TypeError, match="Cache.*cannot be joined"):
        exact_search(step, Cache(np.zeros(1)), [[0]], eos_token_id=3, max_steps=4, batch_rows=1)


# ---- arrays and errors ----------------------------------------------------------------------------------

def test_arrays_pad_like_beam_search_batch():
    table = random_table(4, 71, eos=3)
    results, _ = run_exact(table, [[0], [1]], eos_token_id=3, max_steps=4, n_best=2, pad_token_id=0)
    arrays = results.arrays()
    assert arrays.tokens.shape[:2] == (2, 2)
    for i, hyps in enumerate(results):
        for j, h in enumerate(hyps):
            assert arrays.tokens[i, j, : len(h.tokens)].tolist() == h.tokens
            assert arrays.scores[i, j] == h.score


def test_no_prompts():
    results = exact_search(lambda s, y: None, None, [], eos_token_id=1, max_steps=2)
    assert results == [] and results.proven.shape == (0,)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(node_budget=0), ValueError, "node_budget must be >= 1; got 0"),
    (dict(node_budget=2.5), TypeError, "node_budget must be an integer; got 2.5"),
    (dict(batch_rows=0), ValueError, "batch_rows must be >= 1; got 0"),
    (dict(n_best=0), ValueError, "n_best must be >= 1; got 0"),
    (dict(seed_beam=True), TypeError, "seed_beam must be an integer; got True"),
    (dict(pad_token_id="x"), TypeError, "pad_token_id must be an integer"),
    (dict(max_steps=0), ValueError, "max_steps"),
    (dict(alpha=-1.0), ValueError, "alpha"),
    (dict(temperature=0.0), ValueError, "temperature"),
    (dict(early_stop=False), TypeError, "early_stop"),
])
def test_errors_before_any_model_call(kwargs, error, match):
    model = SequenceModel(random_table(4, 0, eos=3))
    args = {"eos_token_id": 3, "max_steps": 3, **kwargs}
    with pytest.raises(error, match=match):
        exact_search(model.step, model.init_state([[0]]), [[0]], **args)
    assert model.calls == []


def test_init_state_rows_checked_before_any_model_call():
    model = SequenceModel(random_table(4, 0, eos=3))
    with pytest.raises(ValueError, match="init_state must have 2 rows"):
        exact_search(model.step, model.init_state([[0]]), [[0], [1]], eos_token_id=3, max_steps=3)
    assert model.calls == []


@pytest.mark.parametrize("kind", ["causal", "seq2seq"])
def test_each_call_of_a_step_copies_its_own_rows_of_a_hugging_face_cache(kind, monkeypatch):
    """Every call of a step but the last takes its rows beside the step's joined state
    (``take_state``); before, each copied the whole joined state first, so a step of R rows in
    calls of b rows copied about R * R / b rows, and a node's cost grew with the budget. Counted
    here: the rows every join of adapter states holds (the joins of the step's calls' states, and
    any copy of a state) are at most the rows the search passed to the model, and the result
    equals the one of calls that hold a whole step each (no take at all)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from beamsearch import hf
    from beamsearch.hf import states as hf_states

    torch.manual_seed(0)
    if kind == "causal":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=30, n_positions=16, n_embd=16, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)).eval()
        prepare = hf.causal_lm
    else:
        model = transformers.BartForConditionalGeneration(transformers.BartConfig(
            vocab_size=30, d_model=16, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=16,
            bos_token_id=1, eos_token_id=2, pad_token_id=0, decoder_start_token_id=2, forced_bos_token_id=None,
            forced_eos_token_id=None)).eval()
        prepare = hf.seq2seq_lm
    prompts = [[5, 17, 13], [9]]
    joined = []
    plain = hf_states._joined_sources
    monkeypatch.setattr(hf_states, "_joined_sources", lambda sources: joined.append(
        sum(int(s.shape[0]) for s in sources)) or plain(sources))

    def search(rows):
        dec = prepare(model, prompts, eos_token_id=2, max_new_tokens=3)
        return exact_search(dec.step, dec.init_state, dec.prompts, eos_token_id=2, max_steps=3, n_best=2,
                            node_budget=120, batch_rows=rows, seed_beam=2)

    whole = search(10_000)
    joined.clear()
    got = search(4)
    assert sum(joined) <= int(got.expanded.sum()) + len(prompts)  # the state copied once, then each step's rows
    assert got.expanded.tolist() == whole.expanded.tolist()
    for a, b in zip(got, whole, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


# exact_search's bookkeeping worked by hand: the rows a hand-made model needs with and without the
# seed's incumbent, the results object's defaults, the mode's report and fixed batches.


PROBS = {(): [0.1, 0.8, 0.1], (1,): [0.1, 0.8, 0.1], (1, 1): [0.9, 0.05, 0.05]}  # by generated tokens; eos = 0


def table(seq):
    """Prompt [2]; the generated tokens' row from PROBS, uniform elsewhere."""
    return np.log(PROBS.get(tuple(seq[1:]), [1 / 3] * 3))


def run(**kw):
    model = SequenceModel(table)
    args = dict(eos_token_id=0, max_steps=4, alpha=0.0, seed_beam=1, n_best=1)
    args.update(kw)
    return exact_search(model.step, model.init_state([[2]]), [[2]], **args), model


def test_the_seeds_incumbent_prunes_by_hand():
    """alpha 0: scores are logprobs, a prefix's bound its logprob. The seed (beam 1) feeds the root,
    [1] and [1, 1] (3 rows) and finishes [1, 1, 0], log .576 = -0.552, its one finished output:
    the incumbent. Branch and bound feeds the root (its children [1] at log .8 kept, [2] at log .1
    pruned), [1] ([1, 1] at log .64 kept), [1, 1] ([1, 1, 0] reached, the rest below): 3 rows, 6
    in all. Without the seed's incumbent [2] (log .1, equal to the best finished [0] so far) would
    be fed too: 7."""
    results, model = run()
    assert results[0][0].tokens == [1, 1, 0] and results[0][0].logprob == pytest.approx(math.log(0.576), abs=1e-12)
    assert results.proven[0] and results.expanded[0] == 6 == sum(len(c) for c in model.calls)
    assert results.model_calls[0] == 6
    assert results.proven.dtype == bool and results.model_calls.dtype == results.expanded.dtype == np.int64


def test_exact_results_start_empty_with_their_types():
    fresh = ExactResults()
    assert fresh.proven.shape == (0,) and fresh.proven.dtype == bool
    two = ExactResults([[], []])
    assert two.proven.tolist() == [True, True] and two.proven.dtype == bool
    assert two.model_calls.tolist() == [0, 0] and two.model_calls.dtype == np.int64
    assert two.expanded.tolist() == [0, 0] and two.expanded.dtype == np.int64
    model = SequenceModel(table)
    empty = exact_search(model.step, model.init_state([]), [], eos_token_id=0, max_steps=3, pad_token_id=5)
    assert list(empty) == [] and empty.pad_token_id == 5


def test_the_modes_report_and_fixed_batch():
    model = SequenceModel(table)
    results = EXACT.batch(model.step, model.init_state([[2], [2]]), [[2], [2]], 1, eos_token_id=0, max_steps=4,
                          alpha=0.0, seed_beam=1)
    # the seed (beam 1) runs both inputs in its 3 calls; then branch and bound's 3 rows per input
    # (see above) go one per call: max_rows is its batch_rows
    assert [len(call) for call in model.calls] == [2, 2, 2] + [1] * 6
    assert EXACT.report(results, 1) == {"proven": True, "expanded": 6}
    tight, _ = run(node_budget=4)
    assert EXACT.report(tight, 0) == {"proven": False, "expanded": 4}


def test_the_seed_returns_n_best_outputs_for_the_incumbent_by_hand():
    """n_best 2, seed beam 2, root row [0.12, 0.8, 0.08]. The seed feeds the root, [1], [2], [1, 1],
    [1, 2] (5 rows; it stops when its best live row, log .8 + log .8 + log .05 = -3.44, is below
    its second finished output [0] at log .12 = -2.12); its two outputs [1, 1, 0] and [0] make the
    incumbent -2.12. Branch and bound feeds the root ([2] at log .08 is below it), [1] ([1, 2] at
    log .08 too), [1, 1]: 3 rows, 8 in all. With one seed output there would be no incumbent and
    [2] would be fed as well."""
    probs = {(): [0.12, 0.8, 0.08], (1,): [0.1, 0.8, 0.1], (1, 1): [0.9, 0.05, 0.05]}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq[1:]), [1 / 3] * 3)))
    results = exact_search(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, max_steps=4, alpha=0.0,
                           seed_beam=2, n_best=2)
    assert [h.tokens for h in results[0]] == [[1, 1, 0], [0]]
    assert results.proven[0] and results.expanded[0] == 8 == sum(len(c) for c in model.calls)


def test_defaults_seed_beam_four_and_the_state_rows_checked():
    """A uniform row over 6 tokens (eos 0): the seed's second call holds its 4 live rows."""
    model = SequenceModel(lambda seq: np.zeros(6))
    exact_search(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, max_steps=3)
    assert [len(c) for c in model.calls[:2]] == [1, 4]
    model = SequenceModel(table)
    with pytest.raises(ValueError, match=r"^init_state must have 2 rows \(one per input\) on axis 0"):
        exact_search(model.step, model.init_state([[2], [2], [2]]), [[2], [2]], eos_token_id=0, max_steps=3)
    assert model.calls == []


def test_an_output_found_by_branch_and_bound_becomes_the_incumbent_by_hand():
    """Seed beam 1 follows token 1 ([1] at .5 beats [2] at .45; then [1, 1] at .25): its only
    finished outputs are [0] (.05, log -3.0), [1, 0] and [1, 1, 0], so its incumbent is -3.0 (3 rows).
    Branch and bound feeds the root, then [1] and [2]; [2, 0] (log .45 * .99 = -0.81) finishes and
    is the incumbent, so [1, 1] (-1.39) and [1, 2] (-1.50) are not fed: 3 rows, 6 in all (8 if the
    seed's incumbent stayed)."""
    probs = {(): [0.05, 0.5, 0.45], (1,): [0.05, 0.5, 0.45], (2,): [0.99, 0.005, 0.005],
             (1, 1): [0.05, 0.5, 0.45]}
    model = SequenceModel(lambda seq: np.log(probs.get(tuple(seq[1:]), [1 / 3] * 3)))
    results = exact_search(model.step, model.init_state([[2]]), [[2]], eos_token_id=0, max_steps=3, alpha=0.0,
                           seed_beam=1, n_best=1)
    assert [h.tokens for h in results[0]] == [[2, 0]] and results[0][0].logprob == pytest.approx(
        math.log(0.45 * 0.99), abs=1e-12)
    assert results.proven[0] and results.expanded[0] == 6 == sum(len(c) for c in model.calls)


def test_the_seed_keeps_an_early_stop_beside_an_input_out_of_budget():
    """Node budget 2, seed beam 2. Prompt [2] (uniform over eos, 1, 2) would hold 1 + 2 rows after
    the seed's first step: it stops there (over budget) and its branch and bound feeds the root
    only, its children [1] and [2] being left out by the budget: not proven. Prompt [1] (eos at
    .9, token 1 at .1, token 2 impossible) stops early at the same step (its one live row, log .1,
    cannot beat [0] at log .9): 1 seed row, then its root, whose child [1] is below the incumbent:
    2 rows, proven."""
    rows = {(1,): [0.9, 0.1, 0.0]}

    def table(seq):
        with np.errstate(divide="ignore"):
            return np.log(rows.get(tuple(seq), [1 / 3] * 3))

    model = SequenceModel(table)
    results = exact_search(model.step, model.init_state([[2], [1]]), [[2], [1]], eos_token_id=0, max_steps=3,
                           alpha=0.0, seed_beam=2, node_budget=2)
    assert results.proven.tolist() == [False, True] and results.expanded.tolist() == [2, 2]
    assert results[1][0].tokens == [0]
