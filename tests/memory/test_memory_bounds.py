"""Memory in proportion to what a search holds, not to its limits (issue 20 item 4).

Each case runs in a fresh interpreter (numpy and beamsearch only: torch is never imported) under
a 1 GiB address-space limit, so a search that sizes a buffer by ``max_steps``, ``beam_size`` or
``n_best`` fails fast with a MemoryError instead of taking the machine's memory; the child
reports its peak resident set (``VmHWM``) and its results, and the test checks both: the
results against hand-enumerated outputs, the peak against the issue's bound of 200 MB (the
interpreter with numpy and beamsearch is about 30 MB of it).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from itertools import product

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")

LIMIT_BYTES = 1 << 30
PEAK_MB = 200

PRELUDE = f"""
import json, resource
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_BYTES}, {LIMIT_BYTES}))

def constant(probs):
    with np.errstate(divide="ignore"):
        row = np.log(np.array(probs, dtype=np.float64))
    return lambda state, y_prev: (np.tile(row, (len(y_prev), 1)), state)

def report(**values):
    import sys
    # VmHWM: this process's peak resident set since exec (ru_maxrss would keep the parent's at fork)
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    print(json.dumps(dict(values, peak_mb=peak, torch="torch" in sys.modules)))
"""


def run_child(code: str) -> dict:
    """Run ``code`` after :data:`PRELUDE` in a new interpreter; its last stdout line as JSON."""
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out.pop("torch") is False
    return out


def hyps(name: str) -> str:
    """The child's expression for the hypotheses of its results ``name``: lists of (tokens, logprob, finished)."""
    return f"[[(h.tokens, h.logprob, h.finished) for h in hs] for hs in {name}]"


# Outputs of the constant model [0.4, 0.15, 0.15, 0.15, 0.15] (eos = 0), max_steps = 3, by hand:
# finished: n non-eos tokens then eos, n = 0, 1, 2 (1 + 4 + 16 = 21), logprob n ln 0.15 + ln 0.4;
# unfinished: 3 non-eos tokens (64), logprob 3 ln 0.15. 85 outputs in all.
FINISHED = [(*body, 0) for n in range(3) for body in product(range(1, 5), repeat=n)]
UNFINISHED = list(product(range(1, 5), repeat=3))
ALL_OUTPUTS = {tuple(t): (len(t) - 1) * math.log(0.15) + math.log(0.4) for t in FINISHED}
ALL_OUTPUTS.update({t: 3 * math.log(0.15) for t in UNFINISHED})


def test_ngram_history_with_max_steps_1e8_and_one_token_outputs():
    # 8 inputs, beam 2, eos 0.9: every input ends at step 1 with [eos], logprob ln 0.9; alpha 0,
    # so no live row (ln 0.025) can beat it and the search stops there. The history must not be
    # max_steps wide (issue 20: an [8, 10**8 + 1] matrix, 6.1 GB, then MemoryError).
    out = run_child(f"""
        from beamsearch import beam_search_batch
        r = beam_search_batch(constant([0.9, 0.025, 0.025, 0.025, 0.025]), None, [[1]] * 8, eos_token_id=0,
                              max_steps=10**8, beam_size=2, no_repeat_ngram_size=2, alpha=0.0)
        report(results={hyps('r')})
    """)
    assert out["results"] == [[[[0], pytest.approx(math.log(0.9), abs=1e-12), True]]] * 8
    assert out["peak_mb"] < PEAK_MB


def test_ngram_history_grows_with_the_steps_taken():
    # Greedy, prompt [1], max_steps 10**8, bigram blocking. The model counts its steps in its state:
    # eos is impossible for two steps, then has p 0.9; the other tokens 1..4 have p .4 .3 .2 .1.
    # Step 1: token 1 (0.4). Step 2: the bigram (1, 1) is in [1, 1], so 1 is banned and 2 wins
    # (0.3 / 0.6 = 0.5). Step 3: eos (0.9); the live row (ln 0.4*0.5*0.04) cannot beat ln 0.18.
    out = run_child(f"""
        from beamsearch import beam_search_batch
        with np.errstate(divide="ignore"):
            early, late = np.log([0, .4, .3, .2, .1]), np.log([.9, .04, .03, .02, .01])
        def step(count, y_prev):
            return np.where(count[:, None] >= 2, late, early), count + 1
        r = beam_search_batch(step, np.zeros(3, np.int64), [[1]] * 3, eos_token_id=0, max_steps=10**8,
                              beam_size=1, no_repeat_ngram_size=2, alpha=0.0)
        report(results={hyps('r')})
    """)
    assert out["results"] == [[[[1, 2, 0], pytest.approx(math.log(0.4 * 0.5 * 0.9), abs=1e-12), True]]] * 3
    assert out["peak_mb"] < PEAK_MB


def test_beam_and_n_best_1e8_cost_what_the_outputs_cost():
    # beam = n_best = 10**8 on V = 5, max_steps 3: the beam is exhaustive, so every one of the 85
    # outputs comes back, the 21 finished first (issue 20: 3.08 GB for these 85 hypotheses).
    out = run_child(f"""
        from beamsearch import beam_search_batch
        r = beam_search_batch(constant([0.4, 0.15, 0.15, 0.15, 0.15]), None, [[1]], eos_token_id=0, max_steps=3,
                              beam_size=10**8, n_best=10**8, alpha=0.0)
        report(results={hyps('r')})
    """)
    (results,) = out["results"]
    assert len(results) == 85 and len({tuple(t) for t, _, _ in results}) == 85
    assert [f for _, _, f in results] == [True] * 21 + [False] * 64
    for tokens, logprob, _ in results:
        assert logprob == pytest.approx(ALL_OUTPUTS[tuple(tokens)], abs=1e-12)
    assert [lp for _, lp, _ in results[:21]] == sorted((lp for _, lp, _ in results[:21]), reverse=True)
    assert out["peak_mb"] < PEAK_MB


@pytest.mark.parametrize("mode", ["diverse", "constrained", "stochastic"])
def test_search_modes_with_beam_1e8(mode):
    # The same model and limits. Diverse, 2 groups of 5 * 10**7: each group is exhaustive, so
    # each output comes back twice. Constrained to contain token 2: its finished outputs are
    # [2, 0] and the 7 pairs [a, b, 0] with a 2 among a, b (16 - 9). Stochastic, k = 10**8:
    # more samples than outputs, so every output is sampled once.
    call = {
        "diverse": "diverse_beam_search(step, None, [[1]], num_groups=2, diversity_penalty=0.5, beam_size=10**8, "
                   "n_best=10**8, eos_token_id=0, max_steps=3, alpha=0.0)",
        "constrained": "constrained_beam_search(step, None, [[1]], constraints=[[[2]]], beam_size=10**8, "
                       "n_best=10**8, eos_token_id=0, max_steps=3, alpha=0.0)",
        "stochastic": "stochastic_beam_search(step, None, [[1]], k=10**8, eos_token_id=0, max_steps=3, seed=0)",
    }[mode]
    out = run_child(f"""
        from beamsearch import constrained_beam_search, diverse_beam_search, stochastic_beam_search
        step = constant([0.4, 0.15, 0.15, 0.15, 0.15])
        r = {call}
        report(results={hyps('r')})
    """)
    (results,) = out["results"]
    for tokens, logprob, _ in results:
        assert logprob == pytest.approx(ALL_OUTPUTS[tuple(tokens)], abs=1e-12)
    tokens = sorted(tuple(t) for t, _, _ in results)
    if mode == "diverse":
        assert tokens == sorted(list(ALL_OUTPUTS) * 2)
    elif mode == "constrained":
        assert sorted(tuple(t) for t, _, f in results if f) == sorted(t for t in FINISHED if 2 in t) and len(
            [t for t in FINISHED if 2 in t]) == 8
    else:
        assert tokens == sorted(ALL_OUTPUTS)
    assert out["peak_mb"] < PEAK_MB


@pytest.mark.parametrize("budget, vocab, ngram, seed_beam",
                         [(1000, 4, 0, 4), (50_000, 5, 50, 16), (20_000, 2000, 0, 4)])
def test_exact_search_on_a_model_that_never_ends(budget, vocab, ngram, seed_beam):
    # eos has probability 0, so the only outputs are unfinished ones of max_steps = 4096 tokens.
    # Below seed_beam * 4096 rows (the seed's rows a step, 4096 steps) none is reached: nothing is
    # found. Else the seed's best, the model's top token 4096 times, is the best output (the
    # logits are the same at every step). Nothing is proven, and the rows passed to the model (the
    # seed's included) stop at the budget. Issue 20: with a budget of 1000 the seed alone expanded
    # 16,381 prefixes; at 50,000 with n-gram blocking the histories were max_steps wide (1.2 GB
    # here); with V = 2000 every extension of a step was held (440 MB).
    out = run_child(f"""
        from beamsearch import exact_search
        logits = np.random.default_rng(0).normal(size={vocab}); logits[0] = -np.inf
        calls = []
        def step(state, y_prev):
            calls.append(len(y_prev))
            return np.tile(logits, (len(y_prev), 1)), state
        r = exact_search(step, None, [[1]], eos_token_id=0, max_steps=4096, node_budget={budget},
                         no_repeat_ngram_size={ngram}, seed_beam={seed_beam})
        report(results={hyps('r')}, expanded=int(r.expanded[0]), proven=bool(r.proven[0]), rows=sum(calls))
    """)
    if budget < seed_beam * 4096:
        assert out["results"] == [[]]
    else:  # the oracle: plain float64 log-softmax of the same logits (numpy's generator, seed 0)
        logits = np.random.default_rng(0).normal(size=vocab)
        logits[0] = -np.inf
        top = int(np.argmax(logits))
        logp = logits[top] - np.log(np.exp(logits[1:]).sum())
        assert out["results"] == [[[[top] * 4096, pytest.approx(4096 * logp, rel=1e-9), False]]]
    assert out["proven"] is False
    assert out["expanded"] == out["rows"] <= budget
    assert out["peak_mb"] < PEAK_MB
