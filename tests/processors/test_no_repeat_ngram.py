"""n-gram blocking (NoRepeatNGram): its carried index against a plain loop over the whole history, in
every search that carries it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import beamsearch
from beamsearch import processors as P
from beamsearch.backends import backend_of
from models import SequenceModel, random_table, reference_batch
from oracles.processors import BACKENDS


def test_banned_ngram_tokens_of_a_history_shorter_than_n_is_empty():
    """No n-gram fits in a history of fewer than n columns: two empty int64 arrays (the documented
    return), and NoRepeatNGram leaves the logits as they are."""
    history = np.array([[5, 6], [-1, 7]])
    rows, tokens = P.banned_ngram_tokens(history, 3)
    assert rows.shape == (0,) and tokens.shape == (0,)
    assert rows.dtype == np.int64 and tokens.dtype == np.int64
    logits = np.arange(16, dtype=np.float64).reshape(2, 8)
    ctx = P.StepContext(3, history, np.zeros(2, np.int64), backend_of(logits))
    assert P.NoRepeatNGram(3)(logits.copy(), ctx).tolist() == logits.tolist()


# ---- n-gram blocking's carried index against a plain loop over the whole history ---------------

def plain_banned(sequence: Sequence[int], n: int) -> set[int]:
    """The tokens that would repeat an n-gram of ``sequence`` (prompt + generated): a loop over
    every position, written from SPEC section 6."""
    if len(sequence) < n - 1:
        return set()
    tail = tuple(sequence[len(sequence) - (n - 1):]) if n > 1 else ()
    return {sequence[i + n - 1] for i in range(len(sequence) - n + 1) if tuple(sequence[i:i + n - 1]) == tail}


class NGramSpy:
    """Placed beside a :class:`NoRepeatNGram` in a search: at every step, each row's banned tokens
    from the index the search carries for it equal :func:`plain_banned` over the row's whole
    history (it reads the history, so the engine keeps it); it changes no logit."""

    needs_history = True
    last_step = None

    def __init__(self, ngram: P.NoRepeatNGram) -> None:
        self.ngram, self.checked, self.widest = ngram, 0, 0

    def __call__(self, logits, ctx):
        state = ctx.row_states(self.ngram)
        rows, tokens = state.banned()
        got: list[set[int]] = [set() for _ in range(ctx.history.shape[0])]
        for r, t in zip(rows.tolist(), tokens.tolist(), strict=True):
            got[r].add(t)
        for r, row in enumerate(ctx.history.tolist()):
            assert got[r] == plain_banned([t for t in row if t >= 0], self.ngram.n), (ctx.step, r, row)
        self.checked += len(got)
        self.widest = max(self.widest, state.window.shape[1])
        return logits


def ngram_case(seed: int):
    rng = np.random.default_rng(seed)
    vocab, n = int(rng.integers(4, 8)), int(rng.integers(1, 5))
    prompts = [rng.integers(1, vocab, size=int(rng.integers(0, 7))).tolist() for _ in range(int(rng.integers(1, 4)))]
    return vocab, n, [p or [1] for p in prompts], int(rng.integers(1, 5))


@pytest.mark.parametrize("seed", range(3))
def test_ngram_table_lookups_equal_a_dict_through_its_merges(seed):
    """The search's table of shared n-grams against a Python dict of sets: 4,000 random entries
    (3 inputs, contexts of 2 tokens out of 6, so many repeat) added in batches of 1 to 60, past
    several merges of its latest part into the older one; after each batch, lookups of random
    (input, context) pairs find exactly the dict's tokens."""
    from beamsearch.processors.no_repeat_ngram import NGramTable

    rng = np.random.default_rng(seed)
    table, want, added = NGramTable(2), {}, 0
    while added < 4000:
        m = int(rng.integers(1, 61))
        owner, context, token = rng.integers(0, 3, m), rng.integers(0, 6, (m, 2)), rng.integers(0, 50, m)
        table.add(owner, context, token)
        for o, c, t in zip(owner.tolist(), context.tolist(), token.tolist(), strict=True):
            want.setdefault((o, *c), set()).add(t)
        added += m
        q_owner, q_context = rng.integers(0, 4, 20), rng.integers(0, 7, (20, 2))
        query, tokens = table.lookup(q_owner, q_context)
        got: list[set[int]] = [set() for _ in range(20)]
        for i, t in zip(query.tolist(), tokens.tolist(), strict=True):
            got[i].add(t)
        assert got == [want.get((o, *c), set()) for o, c in zip(q_owner.tolist(), q_context.tolist(), strict=True)]
    assert len(table) == added and table.old[0].size > 0  # the latest part was merged at least once


def banned_sets(rows: Any) -> list[set[int]]:
    """Each row's banned tokens from a :class:`~beamsearch.processors.no_repeat_ngram.NGramRows`."""
    got: list[set[int]] = [set() for _ in range(len(rows))]
    for r, t in zip(*(a.tolist() for a in rows.banned()), strict=True):
        got[r].add(t)
    return got


def test_start_rows_are_rows_with_empty_prompts():
    """``start_rows(k)`` (the :class:`~beamsearch.processors.RowCarrier` entry a caller without
    prompts uses; the search itself calls ``start_prompts``): k rows that ban nothing yet, then
    ban what the plain loop bans over the tokens they were advanced by. n = 2, rows advanced by
    (1, 2, 1), (3, 3, 3) and (1, 2, 3): row 0 ends in 1, after which 2 came (banned {2}); row 1 in
    3, after which 3 came (banned {3}); row 2's last token 3 never came before (banned none)."""
    rows = P.NoRepeatNGram(2).start_rows(3)
    assert len(rows) == 3 and banned_sets(rows) == [set(), set(), set()]
    seqs = [[1, 2, 1], [3, 3, 3], [1, 2, 3]]
    for j in range(3):
        rows = rows.advance(np.array([s[j] for s in seqs]))
    assert banned_sets(rows) == [plain_banned(s, 2) for s in seqs] == [{2}, {3}, set()]


@pytest.mark.parametrize("seed", range(24))
def test_ngram_rows_under_random_reorders_equal_the_plain_loop(seed):
    """The row states alone, driven as a search drives them: 1 to 3 inputs with random prompts
    (some empty or shorter than n - 1), n from 1 to 4, a vocabulary of 2 to 4 tokens (n-grams
    repeat often); each step the rows are taken by random parents (shuffled, forked, an input's
    rows often all children of one row so that they agree and their tokens move to the table,
    sometimes an input dropped) and advanced by random tokens. At every step each row's banned
    tokens equal the plain loop over its whole sequence, kept here as Python lists."""
    from beamsearch.core.state import select_state

    rng = np.random.default_rng(seed)
    n, vocab, inputs = int(rng.integers(1, 5)), int(rng.integers(2, 5)), int(rng.integers(1, 4))
    prompts = [rng.integers(0, vocab, size=int(rng.integers(0, 6))).tolist() for _ in range(inputs)]
    rows = P.NoRepeatNGram(n).start_prompts(prompts)
    seqs, owner = [list(p) for p in prompts], list(range(inputs))
    before = settled = len(rows.table)  # the prompts' n-grams
    for step in range(80):
        assert banned_sets(rows) == [plain_banned(s, n) for s in seqs], (seed, step)
        parent = []
        for i in sorted(set(owner)):
            mine = [r for r, o in enumerate(owner) if o == i]
            if rng.random() < 0.05 and len(set(owner)) > 1:
                continue  # the input ends
            source = [mine[int(rng.integers(len(mine)))]] if rng.random() < 0.4 else mine
            parent += rng.choice(source, size=int(rng.integers(1, 5))).tolist()
        parent = rng.permutation(parent)
        rows = select_state(rows, parent)
        seqs, owner = [list(seqs[p]) for p in parent], [owner[p] for p in parent]
        tokens = rng.integers(0, vocab, size=len(parent))
        if rng.random() < 0.3:
            tokens[:] = tokens[0]
        rows = rows.advance(tokens)
        for s, t in zip(seqs, tokens.tolist(), strict=True):
            s.append(t)
        settled = max(settled, len(rows.table))
    assert banned_sets(rows) == [plain_banned(s, n) for s in seqs]
    assert settled > before  # generated n-grams moved to the table, not only kept in the windows


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(12))
def test_carried_ngram_index_equals_a_plain_loop_over_the_history(seed, backend):
    """Beam search over random models, batches of prompts of random lengths (some shorter than
    n - 1), n from 1 to 4: at every step each row's banned tokens from its carried index (rows
    reordered by their parents, forked for their children, the tokens all rows of an input share
    moved to the search's table) equal the plain loop's, and the results equal the plain
    reference search's (one hypothesis at a time, n-gram blocking by a loop)."""
    vocab, n, prompts, beam = ngram_case(seed)
    table = random_table(vocab, 400 + seed, eos=0, eos_shift=-1.0)
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    model = SequenceModel(table, backend=backend)
    got = beamsearch.beam_search_batch(model.step, model.init_state(prompts), prompts, eos_token_id=0, max_steps=14,
                                       beam_size=beam, n_best=beam, logits_processors=[ngram, spy], early_stop=False)
    assert spy.checked > 0
    want = reference_batch(table, prompts, eos=0, max_steps=14, beam=beam, n_best=beam, ngram=n, early_stop=False)
    for hyps, ref in zip(got, want, strict=True):
        assert [tuple(h.tokens) for h in hyps] == [r[0] for r in ref]


@pytest.mark.parametrize("seed", range(4))
def test_carried_ngram_index_in_exact_search(seed):
    """The same check where a step's rows are passed in several calls (exact search, 2 rows per
    call, every prefix within the budget expanded: rows of one input apart for long)."""
    vocab, n, prompts, _ = ngram_case(100 + seed)
    table = random_table(vocab, 500 + seed, eos=0, eos_shift=-0.5)
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    model = SequenceModel(table)
    beamsearch.exact_search(model.step, model.init_state(prompts), prompts, eos_token_id=0, max_steps=5,
                            batch_rows=2, node_budget=300, logits_processors=[ngram, spy])
    assert spy.checked > 0


@pytest.mark.parametrize("seed", range(4))
def test_carried_ngram_index_in_refill(seed):
    """The same check where inputs join a running search (refill: cohorts started at different
    steps share the model calls), and the results equal the plain reference search's."""
    from beamsearch.refill import decode_stream

    rng = np.random.default_rng(600 + seed)
    vocab, n = int(rng.integers(4, 8)), int(rng.integers(1, 5))
    many = [rng.integers(1, vocab, size=int(rng.integers(1, 7))).tolist() for _ in range(8)]
    table = random_table(vocab, 500 + seed, eos=0, eos_shift=0.5)
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    model = SequenceModel(table)
    stream = decode_stream(model.step, lambda items: model.init_state(items), many, max_rows=7, eos_token_id=0,
                           max_steps=10, beam_size=3, logits_processors=[ngram, spy])
    got = {r.index: r.hypotheses for r in stream}
    assert spy.checked > 0 and stream.stats.mixed_calls > 0
    want = reference_batch(table, many, eos=0, max_steps=10, beam=3, ngram=n)
    for i, ref in enumerate(want):
        assert [tuple(h.tokens) for h in got[i]] == [r[0] for r in ref]


@pytest.mark.parametrize("expansion", ["beam", "sample"])
def test_step_search_blocks_ngrams_across_rounds(expansion):
    """Step search gives a round's segments whole prompts (the prompt and the solution so far)
    when n-gram blocking is on, so an n-gram is blocked against every earlier round too: no
    generated token of any solution completes an n-gram that was already in its prompt and the
    tokens before it (checked by the plain loop over the whole sequence)."""
    vocab, delim, n = 6, 5, 2
    model = SequenceModel(random_table(vocab, 77, eos=0, eos_shift=-2.0))
    prompts = [[1, 2, 1], [3]]
    kw = dict(scorer=lambda p, s: [0.5] * len(s), n=4, m=2, rounds=4, eos_token_id=0, max_steps=3,
              stop_sequences=[[delim]], no_repeat_ngram_size=n, expansion=expansion)
    if expansion == "sample":
        kw["sample_seed"] = 1
    got = beamsearch.step_search(model.step, model.init_state(prompts), prompts, **kw)
    rounds_seen = 0
    for prompt, solutions in zip(prompts, got, strict=True):
        for s in solutions:
            rounds_seen = max(rounds_seen, len(s.segments))
            seq = prompt + s.tokens
            for j in range(len(prompt), len(seq)):
                assert seq[j] not in plain_banned(seq[:j], n), (prompt, s.tokens, j)
    assert rounds_seen >= 2
    # the same search with the spy beside the blocker: at every step of every round each row's
    # carried index (started from the whole prompt, forked for the round's expansions) equals
    # the plain loop over the prompt, the earlier rounds' tokens and this round's
    ngram = P.NoRepeatNGram(n)
    spy = NGramSpy(ngram)
    del kw["no_repeat_ngram_size"]
    again = beamsearch.step_search(model.step, model.init_state(prompts), prompts, logits_processors=[ngram, spy], **kw)
    assert spy.checked > 0
    assert [[s.tokens for s in x] for x in again] == [[s.tokens for s in x] for x in got]


def test_the_carried_ngram_window_stays_short_while_rows_agree():
    """The rows of a beam agree a few steps back, so what each row keeps beside the table (its
    window) stays short however long the output: after 200 steps of beam 4 it is far narrower
    than the 204 tokens each row holds (the whole history, before)."""
    table = random_table(30, 3, eos=0, eos_shift=-50.0)
    ngram = P.NoRepeatNGram(3)
    spy = NGramSpy(ngram)
    model = SequenceModel(table)
    beamsearch.beam_search_batch(model.step, model.init_state([[1, 2, 3, 4]]), [[1, 2, 3, 4]], eos_token_id=0,
                                 max_steps=200, beam_size=4, logits_processors=[ngram, spy], early_stop=False)
    assert spy.checked == 4 * 199 + 1 and spy.widest < 60
