"""Allowed-token constraints (issue 11, part 2): AllowedTokens, Catalogue, TokenDFA (+ regex).

Oracles, all written here from the definitions, not from the processors' code:
- constrained logprob: teacher-forced rescoring of a sequence where each step's logits are masked
  to the allowed set (computed by a plain walk over the catalogue / the automaton) and then
  log-softmaxed, i.e. renormalized over the allowed tokens, exactly what the search ranks;
- the catalogue's best: every entry + eos scored that way, ranked by GNMT score;
- the automaton's best: every token sequence of at most max_steps - 1 tokens enumerated, the
  accepted ones (plain table walk) + eos scored that way;
- the regex compiler: Python's ``re.fullmatch`` on the joined strings of every enumerated output;
- AllowedTokens: a plain per-row loop writing -inf, and the Catalogue / TokenDFA searches
  reproduced through a plain-Python callback.
"""

from __future__ import annotations

import itertools
import math
import re
import sys

import numpy as np
import pytest

from beamsearch import beam_search_batch
from beamsearch.backends import backend_of
from beamsearch.backends.numpy_backend import NumpyBackend
from beamsearch.processors import AllowedTokens, Catalogue, StepContext, TokenDFA
from models import SequenceModel, gnmt, log_softmax, random_table

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]
EOS = 0
ALPHA = 0.6


# ---- oracles ---------------------------------------------------------------------------------


def constrained_logprob(table, prompt, tokens, allowed_at):
    """Sum over positions j of log_softmax(table(prompt + tokens[:j]) masked to allowed_at(tokens[:j]))
    at tokens[j]: the model after the processor masks and log_softmax renormalizes."""
    total = 0.0
    for j, t in enumerate(tokens):
        allowed = allowed_at(tuple(tokens[:j]))
        if t not in allowed:
            return -math.inf
        row = list(table(tuple(prompt) + tuple(tokens[:j])))
        masked = [v if i in allowed else -math.inf for i, v in enumerate(row)]
        total += float(log_softmax(masked)[t])
    return total


def catalogue_allowed(entries):
    """The catalogue's allowed set after a generated prefix, by a plain scan of the entries."""

    def allowed(prefix):
        out = {e[len(prefix)] for e in entries if len(e) > len(prefix) and tuple(e[: len(prefix)]) == prefix}
        if prefix in {tuple(e) for e in entries}:
            out.add(EOS)
        return out

    return allowed


def dfa_walk(table, start, tokens):
    """The state after ``tokens`` (plain loop), or None when a token has no transition."""
    s = start
    for t in tokens:
        s = int(table[s][t])
        if s < 0:
            return None
    return s


def dfa_allowed(table, start, accepting):
    def allowed(prefix):
        s = dfa_walk(table, start, prefix)
        if s is None:
            return set()
        out = {v for v in range(len(table[s])) if table[s][v] >= 0}
        if s in accepting:
            out.add(EOS)
        return out

    return allowed


def ranked(table, prompt, outputs, allowed_at):
    """``(tokens, logprob, score)`` of each output (eos included), finite ones, best score first."""
    scored = []
    for out in outputs:
        lp = constrained_logprob(table, prompt, out, allowed_at)
        if math.isfinite(lp):
            scored.append((tuple(out), lp, lp / gnmt(len(out), ALPHA)))
    scored.sort(key=lambda h: -h[2])
    return scored


def search(table, prompts, processor, backend, *, beam, max_steps, n_best=1, dtype=np.float64, **kw):
    model = SequenceModel(table, backend=backend, dtype=dtype)
    return beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=max_steps,
                             beam_size=beam, n_best=n_best, alpha=ALPHA, logits_processors=[processor], **kw)


def random_catalogue(rng, vocab, n, longest):
    """n entries of 1..longest ids in [1, vocab) (no eos), repeats and prefixes likely."""
    return [list(rng.integers(1, vocab, size=int(rng.integers(1, longest + 1)))) for _ in range(n)]


def random_dfa(rng, n_states, vocab):
    """A random transition table (about a third of the entries -1), eos column -1."""
    table = rng.integers(0, n_states, size=(n_states, vocab))
    table[rng.random((n_states, vocab)) < 0.35] = -1
    table[:, EOS] = -1
    accepting = sorted(set(rng.choice(n_states, size=int(rng.integers(1, n_states + 1))).tolist()))
    return table, int(rng.integers(0, n_states)), accepting


# ---- Catalogue ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_catalogue_exhaustive_beam_is_the_catalogues_best(backend, seed):
    rng = np.random.default_rng(seed)
    vocab = 4 + seed % 2
    entries = random_catalogue(rng, vocab, 6, 3)
    unique = sorted({tuple(e) for e in entries})
    prompts = [[1], [2, 3, 1], [3, 3]]
    table = random_table(vocab, seed)
    # the beam holds every prefix of the catalogue at each depth: the search is exhaustive
    out = search(table, prompts, Catalogue(entries, EOS), backend, beam=len(unique), n_best=len(unique),
                 max_steps=4)
    for prompt, hyps in zip(prompts, out, strict=True):
        expected = ranked(table, prompt, [list(e) + [EOS] for e in unique], catalogue_allowed(unique))
        assert [tuple(h.tokens) for h in hyps] == [e[0] for e in expected]
        for h, (_, lp, score) in zip(hyps, expected, strict=True):
            assert h.finished
            assert h.logprob == pytest.approx(lp, abs=1e-9)
            assert h.score == pytest.approx(score, abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_catalogue_never_leaves_the_catalogue(backend):
    """Small beams (1 = greedy, 2, 3), 40 random catalogues and models, with n-gram blocking and
    top-k on too: every result is a catalogue entry followed by eos."""
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        vocab = 5
        entries = random_catalogue(rng, vocab, int(rng.integers(1, 8)), 4)
        allowed = {tuple(e) for e in entries}
        for beam in (1, 2, 3):
            extra = {"no_repeat_ngram_size": 2, "top_k": 3} if seed % 3 == 0 else {}
            out = search(random_table(vocab, seed), [[1], [4, 2]], Catalogue(entries, EOS), backend, beam=beam,
                         n_best=beam, max_steps=5, **extra)
            for hyps in out:
                assert extra or hyps, "without pruning processors every input finishes"
                for h in hyps:
                    assert h.finished and h.tokens[-1] == EOS and tuple(h.tokens[:-1]) in allowed


@pytest.mark.parametrize("backend", BACKENDS)
def test_catalogue_step_equals_a_per_row_loop(backend):
    """One step called directly, rows on and off the trie (an unknown token; a token id above
    every catalogue id, 4 >= width 3 of the trie of ids {1, 2}), against the plain scan."""
    entries = [[1, 1, 2], [1], [2, 1]]
    rule = catalogue_allowed({tuple(e) for e in entries})
    history = np.array([[-1, -1, 3, 1, 1], [-1, 2, 2, 2, 1], [-1, 4, 3, 1, 2], [3, 3, 3, 4, 2], [2, 2, 3, 2, 1]])
    logits = np.random.default_rng(1).normal(size=(5, 6))
    x = torch.from_numpy(logits.copy()) if backend == "torch" else logits.copy()
    ctx = StepContext(3, history, np.arange(5), backend_of(x))  # step 3: the last 2 columns are generated
    got = backend_of(x).to_numpy(Catalogue(entries, EOS)(x, ctx))
    for r in range(5):
        keep = rule(tuple(int(t) for t in history[r, -2:]))
        assert got[r].tolist() == [logits[r, v] if v in keep else -math.inf for v in range(6)]
    # (1, 2) and (4, 2) are off the trie; a lookup keyed node * 3 + token without the bound on
    # the token would read (root, 4) as (node of (1,), 1) and walk (4, 2) to the end of (1, 1, 2)
    assert np.isinf(got[2:4]).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_catalogue_prefix_entry_allows_both_eos_and_longer(backend):
    """Hand-made: entries (1,) and (1, 2) share a prefix; with a uniform model the allowed sets
    are {1} at step 1 and {eos, 2} after 1, so p(1, eos) = 1 * 1/2 and p(1, 2, eos) = 1/2 * 1."""
    out = search(lambda seq: [0.0] * 4, [[3]], Catalogue([[1], [1, 2]], EOS), backend, beam=2, n_best=2,
                 max_steps=4, early_stop=False)
    assert sorted((tuple(h.tokens), round(h.logprob, 12)) for h in out[0]) == [
        ((1, 0), round(math.log(0.5), 12)), ((1, 2, 0), round(math.log(0.5), 12))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_catalogue_several_eos_ids(backend):
    """Every eos id is allowed where an entry ends, and none elsewhere."""
    model = SequenceModel(random_table(5, 3), backend=backend)
    out = beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=[0, 4], max_steps=4,
                            beam_size=4, n_best=4, logits_processors=[Catalogue([[1, 2], [3]], [0, 4])])
    assert sorted(tuple(h.tokens) for h in out[0]) == [(1, 2, 0), (1, 2, 4), (3, 0), (3, 4)]


# ---- TokenDFA ----------------------------------------------------------------------------------


def all_sequences(vocab, longest):
    """Every sequence of non-eos tokens of length 0..longest."""
    ids = range(1, vocab)
    return [list(s) for n in range(longest + 1) for s in itertools.product(ids, repeat=n)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_dfa_exhaustive_beam_is_the_best_accepted_output(backend, seed):
    rng = np.random.default_rng(seed)
    vocab, max_steps = 4, 4
    table, start, accepting = random_dfa(rng, 3, vocab)
    dfa = TokenDFA(table, start, accepting, EOS)
    prompts = [[2], [1, 3]]
    tbl = random_table(vocab, 50 + seed)
    beam = (vocab - 1) ** (max_steps - 1)  # every live prefix fits: exhaustive
    out = search(tbl, prompts, dfa, backend, beam=beam, n_best=beam, max_steps=max_steps)
    accepted = [s + [EOS] for s in all_sequences(vocab, max_steps - 1) if dfa_walk(table, start, s) in accepting]
    for prompt, hyps in zip(prompts, out, strict=True):
        finished = [h for h in hyps if h.finished]
        expected = ranked(tbl, prompt, accepted, dfa_allowed(table, start, accepting))
        assert [tuple(h.tokens) for h in finished] == [e[0] for e in expected]
        for h, (_, lp, _) in zip(finished, expected, strict=True):
            assert h.logprob == pytest.approx(lp, abs=1e-9)
        for h in hyps:  # unfinished rows (out of steps) are prefixes the automaton could still walk
            assert dfa_walk(table, start, h.tokens[:-1] if h.finished else h.tokens) is not None


@pytest.mark.parametrize("backend", BACKENDS)
def test_dfa_outputs_always_accepted(backend):
    for seed in range(30):
        rng = np.random.default_rng(200 + seed)
        table, start, accepting = random_dfa(rng, 4, 5)
        dfa = TokenDFA(table, start, accepting, EOS)
        for beam in (1, 2, 3):
            out = search(random_table(5, seed), [[1], [2, 2, 4]], dfa, backend, beam=beam, n_best=beam, max_steps=5)
            for hyps in out:
                for h in hyps:
                    if h.finished:
                        assert h.tokens[-1] == EOS and dfa_walk(table, start, h.tokens[:-1]) in accepting
                        assert dfa.accepts(h.tokens[:-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dfa_step_equals_a_per_row_loop(backend):
    """One step called directly on every 2-token history (some leave the automaton: no token
    then), against the plain walk; the prompt columns are not read."""
    rng = np.random.default_rng(4)
    table, start, accepting = random_dfa(rng, 3, 4)
    rule = dfa_allowed(table, start, accepting)
    gen = np.array(list(itertools.product(range(1, 4), repeat=2)))  # --> [9, 2]
    history = np.hstack([rng.integers(0, 4, size=(9, 2)), gen])
    logits = rng.normal(size=(9, 4))
    x = torch.from_numpy(logits.copy()) if backend == "torch" else logits.copy()
    got = backend_of(x).to_numpy(TokenDFA(table, start, accepting, EOS)(x, StepContext(3, history, np.arange(9),
                                                                                       backend_of(x))))
    assert any(not rule(tuple(g)) for g in gen.tolist())  # some rows are off the automaton
    for r in range(9):
        keep = rule(tuple(int(t) for t in gen[r]))
        assert got[r].tolist() == [logits[r, v] if v in keep else -math.inf for v in range(4)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_dfa_float32_logits(backend):
    """float32 logits keep their dtype through the mask; the result is still accepted and is the
    float64 result (same tokens, logprob to float32 precision)."""
    rng = np.random.default_rng(7)
    table, start, accepting = random_dfa(rng, 3, 4)
    dfa = TokenDFA(table, start, accepting, EOS)
    a = search(random_table(4, 9), [[1]], dfa, backend, beam=3, n_best=3, max_steps=4, dtype=np.float32)
    b = search(random_table(4, 9), [[1]], dfa, backend, beam=3, n_best=3, max_steps=4)
    assert [h.tokens for h in a[0]] == [h.tokens for h in b[0]]
    assert [h.logprob for h in a[0]] == pytest.approx([h.logprob for h in b[0]], abs=1e-5)


# ---- regex -> TokenDFA -------------------------------------------------------------------------

VOCAB_STRINGS = ["<eos>", "a", "b", "ab", "ba", "c", "1", "a1", "", "B"]
PATTERNS = [r"(ab|c)+", r"a*b?", r"[ab]{2,3}", r"(a|b)*c", r"\d+", r"a.b", r"(?i)ab", r"[^a]+", r"b|a1c?",
            r"(ab)*(ba)*"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_agrees_with_re_fullmatch(pattern):
    pytest.importorskip("interegular")
    dfa = TokenDFA.from_regex(pattern, VOCAB_STRINGS, EOS)
    table, start = np.asarray(dfa.transitions), dfa.start
    ids = [v for v, text in enumerate(VOCAB_STRINGS) if v != EOS and text]
    for n in range(5):
        for seq in itertools.product(ids, repeat=n):
            text = "".join(VOCAB_STRINGS[t] for t in seq)
            expected = re.fullmatch(pattern, text) is not None
            assert (dfa_walk(table, start, seq) in dfa.accepting) == expected, (seq, text)
            assert dfa.accepts(list(seq)) == expected
    assert (table[:, [EOS, VOCAB_STRINGS.index("")]] == -1).all()  # eos and the empty token never move


def reachable(table, s):
    """The states reachable from s (s included), plain BFS."""
    seen, todo = {s}, [s]
    while todo:
        for nxt in table[todo.pop()]:
            if nxt >= 0 and int(nxt) not in seen:
                seen.add(int(nxt))
                todo.append(int(nxt))
    return seen


def test_regex_has_no_dead_or_unreachable_states():
    """Every state the compiled automaton keeps is reachable from start and can still reach an
    accepting state."""
    pytest.importorskip("interegular")
    # with only multi-character tokens, some character states are never at a token boundary
    for pattern, vocab in [(p, VOCAB_STRINGS) for p in PATTERNS] + [(r"(ab|c)+", ["<eos>", "ab", "abc", "cc"])]:
        dfa = TokenDFA.from_regex(pattern, vocab, EOS)
        table = np.asarray(dfa.transitions)
        assert reachable(table, dfa.start) == set(range(table.shape[0])), pattern
        for s in range(table.shape[0]):
            assert reachable(table, s) & set(dfa.accepting), (pattern, s)


@pytest.mark.parametrize("backend", BACKENDS)
def test_regex_search_outputs_match(backend):
    """End to end: every finished output's text fully matches; a token that leads into a dead end
    ('a' for 'ab|c' with no token 'b') is never taken."""
    pytest.importorskip("interegular")
    vocab = ["<eos>", "a", "c", "cc"]
    dfa = TokenDFA.from_regex(r"ab|c+", vocab, EOS)
    for seed in range(10):
        out = search(random_table(4, seed), [[1]], dfa, backend, beam=3, n_best=3, max_steps=4)
        for h in out[0]:
            assert 1 not in h.tokens
            if h.finished:
                assert re.fullmatch(r"ab|c+", "".join(vocab[t] for t in h.tokens[:-1]))


def test_regex_errors(monkeypatch):
    pytest.importorskip("interegular")
    with pytest.raises(ValueError, match="pattern 'x' matches no sequence"):
        TokenDFA.from_regex("x", ["<eos>", "a"], EOS)
    with pytest.raises(ValueError, match=r"pattern '\^a' is not supported"):
        TokenDFA.from_regex("^a", ["<eos>", "a"], EOS)
    with pytest.raises(TypeError, match=r"vocab\[1\] must be a str"):
        TokenDFA.from_regex("a", ["<eos>", 3], EOS)
    with pytest.raises(ValueError, match="eos_token_id must be in"):
        TokenDFA.from_regex("a", ["<eos>", "a"], 2)
    monkeypatch.setitem(sys.modules, "interegular", None)  # as if not installed
    with pytest.raises(ImportError, match="interegular"):
        TokenDFA.from_regex("a", ["<eos>", "a"], EOS)


# ---- AllowedTokens -----------------------------------------------------------------------------


def parity_rule(i, tokens):
    """A callback whose answer depends on the input and the whole history (prompt included)."""
    return [v for v in range(5) if (sum(tokens) + v + i) % 3 != 0] or [EOS]


@pytest.mark.parametrize("backend", BACKENDS)
def test_allowed_tokens_equals_a_per_row_loop(backend):
    rng = np.random.default_rng(0)
    history = np.array([[-1, 2, 1, 3], [4, 4, 1, 0], [-1, -1, 3, 2]])
    logits = rng.normal(size=(3, 5))
    x = torch.from_numpy(logits.copy()) if backend == "torch" else logits.copy()
    ctx = StepContext(2, history, np.array([0, 1, 1]), backend_of(x))
    got = backend_of(x).to_numpy(AllowedTokens(parity_rule)(x, ctx))
    for r in range(3):
        tokens = [int(t) for t in history[r] if t >= 0]
        keep = set(parity_rule(int(ctx.row_input[r]), tokens))
        assert got[r].tolist() == [logits[r, v] if v in keep else -math.inf for v in range(5)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_allowed_tokens_exhaustive_beam_is_brute_force(backend):
    prompts = [[1, 2], [3]]
    table = random_table(5, 11)
    beam = 4 ** 2  # every live prefix of at most 2 tokens fits
    out = search(table, prompts, AllowedTokens(parity_rule), backend, beam=beam, n_best=beam, max_steps=3)
    for i, (prompt, hyps) in enumerate(zip(prompts, out, strict=True)):
        def allowed(prefix, i=i, prompt=prompt):
            return set(parity_rule(i, list(prompt) + list(prefix)))

        outputs = [s + [EOS] for s in all_sequences(5, 2)]
        expected = ranked(table, prompt, outputs, allowed)
        finished = [h for h in hyps if h.finished]
        assert [tuple(h.tokens) for h in finished] == [e[0] for e in expected]
        assert [h.logprob for h in finished] == pytest.approx([e[1] for e in expected], abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_allowed_tokens_sees_prompt_then_generated(backend):
    seen = []

    def fn(i, tokens):
        seen.append((i, tokens))
        return range(5)

    prompts = [[4, 2], [], [3]]
    model = SequenceModel(random_table(5, 1), backend=backend)
    init = [[4, 2], [1], [3]]  # the empty prompt is [bos] = [1]
    out = beam_search_batch(model.step, model.init_state(init), prompts, eos_token_id=EOS, max_steps=3,
                            beam_size=2, bos_token_id=1, logits_processors=[AllowedTokens(fn)])
    assert all(type(i) is int and type(t) is tuple and all(type(v) is int for v in t) for i, t in seen)
    assert {t for i, t in seen if len(t) == len(init[i])} == {tuple(p) for p in init}  # step 1: the prompt
    assert all(t[: len(init[i])] == tuple(init[i]) for i, t in seen)
    gen = {(i, t[len(init[i]):]) for i, t in seen}
    for i, hyps in enumerate(out):  # each result's own prefixes were all shown to the callback
        for h in hyps:
            assert all((i, tuple(h.tokens[:j])) in gen for j in range(len(h.tokens)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_callback_reproduces_catalogue_and_dfa(backend):
    """The ready helpers equal AllowedTokens with a plain-Python callback of the same rule."""
    rng = np.random.default_rng(5)
    entries = random_catalogue(rng, 5, 6, 3)
    table, start, accepting = random_dfa(rng, 3, 5)
    prompts = [[1], [2, 2]]
    lengths = [len(p) for p in prompts]
    cat_rule, dfa_rule = catalogue_allowed({tuple(e) for e in entries}), dfa_allowed(table, start, accepting)
    for helper, rule in ((Catalogue(entries, EOS), cat_rule), (TokenDFA(table, start, accepting, EOS), dfa_rule)):
        plain = AllowedTokens(lambda i, tokens, rule=rule: sorted(rule(tuple(tokens[lengths[i]:]))))
        for beam in (1, 3):
            a = search(random_table(5, 2), prompts, helper, backend, beam=beam, n_best=beam, max_steps=4)
            b = search(random_table(5, 2), prompts, plain, backend, beam=beam, n_best=beam, max_steps=4)
            assert [[(h.tokens, h.logprob, h.finished) for h in r] for r in a] == \
                   [[(h.tokens, h.logprob, h.finished) for h in r] for r in b]


# ---- batch independence ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_independence(backend):
    rng = np.random.default_rng(3)
    table, start, accepting = random_dfa(rng, 3, 5)
    processors = [Catalogue(random_catalogue(rng, 5, 5, 3), EOS), TokenDFA(table, start, accepting, EOS),
                  AllowedTokens(parity_rule)]
    prompts = [[1], [2, 3, 4], [4, 4]]
    for processor in processors:
        together = search(random_table(5, 4), prompts, processor, backend, beam=3, n_best=2, max_steps=4)
        for i, p in enumerate(prompts):
            # alone, the input is input 0: AllowedTokens' rule depends on the index, so shift it back
            proc = processor if not isinstance(processor, AllowedTokens) else \
                AllowedTokens(lambda j, t, i=i: parity_rule(i, t))
            alone = search(random_table(5, 4), [p], proc, backend, beam=3, n_best=2, max_steps=4)
            # logprobs bit for bit: one backend, rows computed alone (tests/approx.py)
            assert [(h.tokens, h.logprob) for h in alone[0]] == [(h.tokens, h.logprob) for h in together[i]]


# ---- bad input ---------------------------------------------------------------------------------


def test_catalogue_errors():
    with pytest.raises(ValueError, match="outputs must hold at least one"):
        Catalogue([], EOS)
    with pytest.raises(ValueError, match=r"outputs\[1\] must be a non-empty"):
        Catalogue([[1], []], EOS)
    with pytest.raises(ValueError, match=r"outputs\[0\]\[1\] must be in \[0, V\); got -2"):
        Catalogue([[1, -2]], EOS)
    with pytest.raises(TypeError, match=r"outputs\[0\]\[0\] must be an integer; got 1.0"):
        Catalogue([[1.0]], EOS)
    with pytest.raises(ValueError, match=r"outputs\[1\] holds the eos id 0"):
        Catalogue([[1], [2, 0, 1]], EOS)
    with pytest.raises(TypeError, match="outputs must be a sequence"):
        Catalogue(5, EOS)
    with pytest.raises(ValueError, match="eos_token_id must be in"):
        Catalogue([[1]], -1)
    model = SequenceModel(random_table(4, 0))
    with pytest.raises(ValueError, match=r"Catalogue token ids must be in \[0, 4\).* up to 7"):
        beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=EOS, max_steps=3, beam_size=2,
                          logits_processors=[Catalogue([[1], [7]], EOS)])


def test_token_dfa_errors():
    ok = np.array([[1, -1, 0], [-1, 1, -1]])
    ok[:, EOS] = -1
    with pytest.raises(ValueError, match=r"transitions must be a 2-D table \[S, V\].*shape \(3,\)"):
        TokenDFA(np.array([0, 1, -1]), 0, [0], EOS)
    with pytest.raises(ValueError, match=r"shape \(0, 3\)"):
        TokenDFA(np.zeros((0, 3), int), 0, [0], EOS)
    with pytest.raises(TypeError, match="transitions must hold integers"):
        TokenDFA(ok.astype(float), 0, [0], EOS)
    with pytest.raises(ValueError, match=r"transitions\[0, 1\] is 2; entries must be -1"):
        TokenDFA(np.array([[-1, 2, 0], [-1, 1, -1]]), 0, [0], EOS)
    with pytest.raises(ValueError, match=r"transitions\[1, 2\] is -3"):
        TokenDFA(np.array([[-1, 1, 0], [-1, 1, -3]]), 0, [0], EOS)
    with pytest.raises(ValueError, match=r"start must be a state in \[0, 2\); got 2"):
        TokenDFA(ok, 2, [0], EOS)
    with pytest.raises(ValueError, match=r"start must be a state in \[0, 2\); got -1"):
        TokenDFA(ok, -1, [0], EOS)
    with pytest.raises(TypeError, match="start must be an integer"):
        TokenDFA(ok, 0.0, [0], EOS)
    with pytest.raises(ValueError, match=r"accepting must hold states in \[0, 2\); got 5"):
        TokenDFA(ok, 0, [0, 5], EOS)
    with pytest.raises(ValueError, match=r"eos_token_id must be in \[0, 3\)"):
        TokenDFA(ok, 0, [0], 3)
    with pytest.raises(ValueError, match="transition on eos id 0 from state 0"):
        TokenDFA(np.array([[1, -1, 0], [-1, 1, -1]]), 0, [0], EOS)
    model = SequenceModel(random_table(4, 0))
    with pytest.raises(ValueError, match="TokenDFA transitions have V=3 columns but the logits have 4"):
        beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=EOS, max_steps=3, beam_size=2,
                          logits_processors=[TokenDFA(ok, 0, [0], EOS)])


def test_allowed_tokens_errors():
    with pytest.raises(TypeError, match="AllowedTokens fn must be callable"):
        AllowedTokens([1, 2])
    model = SequenceModel(random_table(4, 0))
    for fn, error, message in [
        (lambda i, t: [1, 9], ValueError, r"returned token id 9 for input 0; ids must be in \[0, 4\)"),
        (lambda i, t: [-1], ValueError, "returned token id -1 for input 0"),
        (lambda i, t: [1.5], TypeError, "must return token ids"),
        (lambda i, t: 3, TypeError, "must return an iterable of token ids"),
    ]:
        with pytest.raises(error, match=message):
            beam_search_batch(model.step, model.init_state([[1]]), [[1]], eos_token_id=EOS, max_steps=3,
                              beam_size=2, logits_processors=[AllowedTokens(fn)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_allowed_set_ends_the_row(backend):
    """A callback that allows nothing leaves the input with no result (no error)."""
    out = search(random_table(4, 0), [[1], [2]], AllowedTokens(lambda i, t: [] if i == 0 else [EOS]), backend,
                 beam=2, max_steps=3)
    assert out[0] == [] and [h.tokens for h in out[1]] == [[EOS]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_constraints_read_generated_tokens_only(backend):
    """Catalogue and TokenDFA constrain the generated tokens, whether or not another processor
    makes the search keep the prompt in the history (AllowedTokens allowing every token is such
    a processor, and changes nothing else)."""
    rng = np.random.default_rng(8)
    table, start, accepting = random_dfa(rng, 3, 5)
    everything = AllowedTokens(lambda i, t: range(5))
    prompts = [[1, 2, 3], [4], [2, 2]]
    for helper in (Catalogue(random_catalogue(rng, 5, 6, 3), EOS), TokenDFA(table, start, accepting, EOS)):
        model = SequenceModel(random_table(5, 6), backend=backend)
        runs = [beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=EOS, max_steps=4,
                                  beam_size=3, n_best=3, logits_processors=procs)
                for procs in ([helper], [helper, everything], [everything, helper])]
        assert all(any(r) for r in runs[0])
        for other in runs[1:]:
            assert [[(h.tokens, h.logprob) for h in r] for r in other] == \
                   [[(h.tokens, h.logprob) for h in r] for r in runs[0]]


# ---- edges: sizes, bounds, off-trie rows -------------------------------------------------------


def direct_ctx(history, logits, step):
    """A StepContext for one direct call (one input per row)."""
    history = np.asarray(history, dtype=np.int64)
    return StepContext(step, history, np.arange(history.shape[0]), backend_of(logits))


def test_token_dfa_smallest_tables_and_empty_accepting():
    """One state (S = 1) and one token (V = 1, the eos alone) are valid automata; an empty
    ``accepting`` is allowed (nothing finishes)."""
    loop = TokenDFA(np.array([[-1, 0]]), 0, [0], EOS)  # S = 1: token 1 loops, the state accepts
    assert loop.n_states == 1 and loop.accepts([]) and loop.accepts([1, 1])
    only_eos = TokenDFA(np.array([[-1]]), 0, [0], EOS)  # V = 1: the empty output is accepted
    assert only_eos.accepts([])
    never = TokenDFA(np.array([[-1, 0]]), 0, [], EOS)
    assert not never.accepts([]) and not never.accepts([1])
    logits = np.zeros((1, 2))
    assert never(logits, direct_ctx([[1]], logits, 2)).tolist() == [[-math.inf, 0.0]]  # no eos, token 1 kept


def test_token_dfa_bounds_at_the_edge():
    """The bounds, each one value past the edge: an entry -2 (only -1 means none), an accepting
    state S, a transition on eos to state 0 (any transition on eos is refused)."""
    with pytest.raises(ValueError, match=r"transitions\[0, 2\] is -2"):
        TokenDFA(np.array([[-1, 1, -2], [-1, 1, -1]]), 0, [0], EOS)
    with pytest.raises(ValueError, match=r"accepting must hold states in \[0, 2\)"):
        TokenDFA(np.array([[-1, 1, 0], [-1, 1, -1]]), 0, [2], EOS)
    with pytest.raises(ValueError, match="transition on eos id 0 from state 1"):
        TokenDFA(np.array([[-1, 1, 0], [0, 1, -1]]), 0, [0], EOS)


def test_token_dfa_states_reports_dead_rows_as_minus_one():
    """``states``: -1 where a token had no transition (hand walk of the 2-state table: 2 -> state
    0, 1 -> state 1, 2 from state 1 has none), ``n_states`` the table's S."""
    dfa = TokenDFA(np.array([[-1, 1, 0], [-1, 1, -1]]), 0, [1], EOS)
    assert dfa.n_states == 2
    assert dfa.states(np.array([[2, 1], [1, 2], [2, 2]])).tolist() == [1, -1, 0]
    assert dfa.accepts([2, 1]) and not dfa.accepts([1, 2])


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_token_dfa_from_a_torch_table_on_both_backends():
    """A torch tensor as the table is read like the numpy one; the same processor then serves
    numpy and torch logits in turn (a mask kept per library, dtype and device)."""
    table = np.array([[-1, 1, 0], [-1, 1, -1]])
    dfa = TokenDFA(torch.tensor(table), 0, [1], EOS)
    assert dfa.states(np.array([[2, 1], [1, 2]])).tolist() == [1, -1]
    # after (1,): state 1, accepting (eos and 1 allowed); after (2,): state 0 (1 and 2 allowed)
    want = [[0.0, 0.0, -math.inf], [-math.inf, 0.0, 0.0]]
    for logits in (np.zeros((2, 3)), torch.zeros((2, 3)), np.zeros((2, 3), np.float32), torch.zeros((2, 3))):
        out = backend_of(logits).to_numpy(dfa(logits, direct_ctx([[1], [2]], logits, 2)))
        assert out.tolist() == want


def test_regex_small_automata_by_hand():
    """Hand-made cases: a* and (ab)* by hand, and a dead end removed ('ab' with tokens 'a' and
    'ab': after 'a' no token can finish, so 'a' is not allowed at the start)."""
    pytest.importorskip("interegular")
    star = TokenDFA.from_regex("a*", ["<eos>", "a"], EOS)
    assert star.accepts([]) and star.accepts([1, 1, 1])
    pairs = TokenDFA.from_regex("(ab)*", ["<eos>", "a", "b"], EOS)
    assert pairs.accepts([1, 2]) and pairs.accepts([1, 2, 1, 2]) and not pairs.accepts([1])
    assert pairs.states(np.array([[1, 2, 1]])).tolist() != [-1]
    dead = TokenDFA.from_regex("ab", ["<eos>", "a", "ab"], EOS)
    assert dead.states(np.array([[1], [2]])).tolist()[0] == -1 and dead.accepts([2]) and dead.n_states == 2


def test_regex_vocab_must_be_a_non_empty_sequence_of_strings():
    pytest.importorskip("interegular")
    with pytest.raises(TypeError, match="vocab must be a non-empty sequence"):
        TokenDFA.from_regex("ab", "ab", EOS)  # a str is not a vocabulary
    with pytest.raises(TypeError, match="vocab must be a non-empty sequence"):
        TokenDFA.from_regex("ab", [], EOS)


def test_catalogue_bounds_and_rows_off_the_trie():
    """eos = V is refused at the call; rows whose generated tokens left the trie get no token:
    (1, 1, 1) walks past the end of the entry (1, 1), and (3,) with 3 = the trie's width (ids
    {0, 1, 2}) must not be read as the edge (node of (1,), 0)."""
    with pytest.raises(ValueError, match=r"Catalogue token ids must be in \[0, 3\)"):
        logits = np.zeros((1, 3))
        Catalogue([[1]], 3)(logits, direct_ctx(np.zeros((1, 0)), logits, 1))
    logits = np.zeros((1, 4))
    out = Catalogue([[1, 1]], 3)(logits, direct_ctx([[1, 1, 1]], logits, 4))
    assert np.isinf(out).all()
    logits = np.zeros((2, 6))
    out = Catalogue([[1, 0], [2]], 5)(logits, direct_ctx([[3], [1]], logits, 2))
    assert np.isinf(out[0]).all() and out[1].tolist() == [0.0] + [-math.inf] * 5  # after (1,): only 0


def test_allowed_tokens_reads_the_whole_prompt_and_any_iterable():
    """The callback gets the prompt from its first token even when that token is 0 (only -1 pads);
    it may answer with a generator or a set; an id equal to V is refused."""
    seen = []

    def fn(i, tokens):
        seen.append(tokens)
        return (t for t in (1, 2)) if i == 0 else {0, 3}

    logits = np.arange(8, dtype=np.float64).reshape(2, 4)
    out = AllowedTokens(fn)(logits.copy(), direct_ctx([[-1, 0, 2], [3, 0, 1]], logits, 1))
    assert seen == [(0, 2), (3, 0, 1)]
    assert out.tolist() == [[-math.inf, 1.0, 2.0, -math.inf], [4.0, -math.inf, -math.inf, 7.0]]
    with pytest.raises(ValueError, match=r"returned token id 4 for input 0; ids must be in \[0, 4\)"):
        AllowedTokens(lambda i, t: [4])(logits.copy(), direct_ctx([[1]], logits[:1], 1))


# The processor called alone at its edges: an answer that is not a list of ids, no rows.


def _context(history: np.ndarray) -> StepContext:
    return StepContext(1, history, np.arange(history.shape[0]), NumpyBackend())


def test_allowed_tokens_refuses_a_zero_dimensional_answer_and_takes_no_rows():
    processor = AllowedTokens(lambda i, tokens: np.array(3))
    with pytest.raises(TypeError, match=r"^AllowedTokens fn must return token ids \(integers\); "
                                        r"got array\(3\) for input 0$"):
        processor(np.zeros((1, 4)), _context(np.array([[1]])))
    none = AllowedTokens(lambda i, tokens: [0])(np.zeros((0, 4)), _context(np.zeros((0, 1), np.int64)))
    assert none.shape == (0, 4)
    kept = AllowedTokens(lambda i, tokens: np.array([2, 0], np.int32))(np.ones((1, 4)), _context(np.array([[1]])))
    assert kept.tolist() == [[1.0, -np.inf, 1.0, -np.inf]]
