"""The catalogue trie (issue 24): CSR build, carried nodes, save / load, the input forms, the sparse
selection of the allowed entries, and wide beams (up to 4096 rows per input).

Oracles, written here from the definitions:
- a plain set of prefixes (``prefix -> next tokens``, a Python dict built entry by entry) for
  every mask and every node walk;
- teacher-forced rescoring of every catalogue entry under a Markov model (each step's logits
  masked to the plain set's allowed tokens, then log-softmaxed) ranked by score: the answer of
  an exhaustive beam (beam >= the catalogue's size);
- for the sparse selection: the dense path of ``best_per_input`` on the same random inputs (both
  of its branches), the reference the tie rule of SPEC sections 4 and 6 is tested against in
  tests/core/test_engine.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from beamsearch import (
    beam_search,
    beam_search_batch,
    constrained_beam_search,
    diverse_beam_search,
    exact_search,
    stochastic_beam_search,
)
from beamsearch.backends import NEG_INF, backend_of
from beamsearch.core import select
from beamsearch.core.beam import Beam
from beamsearch.core.select import StepScores, Terminals, best_of_support, best_per_input, sparse
from beamsearch.processors import Catalogue, catalogue
from beamsearch.processors.trie import FORMAT, Trie
from models import PrefixModel, brute_force, random_table
from tests.processors.test_catalogue_files import GOOD, saved  # the hand-written good trie and its file

try:
    import torch
except ImportError:
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]
EOS = 0
ALPHA = 0.6


# ---- oracles -----------------------------------------------------------------------------------


def prefix_sets(entries):
    """``prefix -> set of allowed next tokens`` (EOS where an entry ends), by a plain dict walk."""
    allowed = {}
    for e in entries:
        e = tuple(int(t) for t in e)
        for j in range(len(e)):
            allowed.setdefault(e[:j], set()).add(e[j])
        allowed.setdefault(e, set()).add(EOS)
    return allowed


def random_catalogue(rng, vocab, n, longest):
    """n entries of 1..longest ids in [1, vocab): with few ids, shared prefixes, entries that are
    prefixes of others and repeats are all likely; a few repeats forced."""
    entries = [rng.integers(1, vocab, size=int(rng.integers(1, longest + 1))).tolist() for _ in range(n)]
    return entries + [list(entries[0]), list(entries[-1][:1])]


class Markov:
    """A toy model: logits ``table[position, previous token]`` (float64 ``[T, V, V]``), vectorized
    over rows (the state holds each row's position)."""

    def __init__(self, vocab, steps, seed, backend="numpy", levels=None):
        rng = np.random.default_rng(seed)
        self.table = rng.normal(size=(steps, vocab, vocab)) * 2.0
        if levels is not None:  # rounded: ties occur
            self.table = np.round(self.table * levels) / levels
        self.backend = backend

    def step(self, state, y_prev):
        y = y_prev.cpu().numpy() if hasattr(y_prev, "cpu") else np.asarray(y_prev)
        logits = self.table[state, y]  # --> [k, V]
        if self.backend == "torch":
            logits = torch.from_numpy(logits)
        return logits, state + 1

    def init(self, n):
        return np.zeros(n, np.int64)

    def logprob(self, prompt_last, tokens, allowed):
        """Teacher-forced: the constrained log-softmax (masked to ``allowed[prefix]``) summed."""
        total, prev = 0.0, prompt_last
        for j, t in enumerate(tokens):
            keep = allowed.get(tuple(tokens[:j]), set())
            row = np.where(np.isin(np.arange(self.table.shape[1]), list(keep)), self.table[j, prev], -np.inf)
            total += float(row[t] - np.logaddexp.reduce(row))
            prev = t
        return total


def ranked_entries(model, prompt_last, entries, allowed):
    """Every distinct entry + eos, by GNMT score (ties: the lower token sequence, an order the
    test only uses where scores differ)."""
    scored = []
    for e in sorted({tuple(e) for e in entries}):
        out = e + (EOS,)
        lp = model.logprob(prompt_last, out, allowed)
        scored.append((out, lp, lp / (((5 + len(out)) / 6) ** ALPHA)))
    scored.sort(key=lambda h: -h[2])
    return scored


# ---- the trie ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_masks_equal_the_set_of_prefixes(seed):
    """Random walks on and off the trie: each row's allowed pairs equal the plain set's."""
    rng = np.random.default_rng(seed)
    vocab = 3 + seed
    entries = random_catalogue(rng, vocab, 5 + 10 * seed, 5)
    allowed = prefix_sets(entries)
    cat = Catalogue(entries, EOS)
    assert sorted(cat.trie.items()) == sorted({tuple(e) for e in entries})
    assert cat.trie.n_items == len({tuple(e) for e in entries})
    assert cat.trie.n_nodes == len(allowed)  # one node per distinct prefix, the empty one included
    for t in range(6):
        histories = rng.integers(0, vocab + 1, size=(50, t))
        on = list(allowed)  # half the rows follow a prefix of the catalogue, cut or extended
        for r in range(25):
            p = on[int(rng.integers(len(on)))][:t]
            histories[r, : len(p)] = p
        rows, cols = cat.allowed_pairs(cat.trie.walk(histories))
        got = [set(cols[rows == r].tolist()) for r in range(50)]
        assert got == [allowed.get(tuple(h), set()) for h in histories.tolist()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_masks_during_random_searches_equal_the_set_of_prefixes(backend):
    """Inside searches (nodes carried by the engine), a processor after the catalogue sees the
    masked logits: each row's finite entries are the plain set's allowed tokens of its tokens."""
    seen = []

    def record(logits, ctx):
        finite = np.isfinite(backend_of(logits).to_numpy(logits))
        generated = ctx.history[:, ctx.history.shape[1] - (ctx.step - 1):]  # --> [k, t - 1]
        seen.extend((tuple(h), set(np.flatnonzero(f).tolist()))
                    for h, f in zip(generated.tolist(), finite, strict=True))
        return logits

    for seed in range(6):
        rng = np.random.default_rng(50 + seed)
        vocab = 6
        entries = random_catalogue(rng, vocab, 30, 4)
        allowed = prefix_sets(entries)
        model = Markov(vocab, 6, seed, backend)
        seen.clear()
        beam_search_batch(model.step, model.init(2), [[1], [3]], eos_token_id=EOS, max_steps=6, beam_size=1 + seed * 3,
                          logits_processors=[Catalogue(entries, EOS), record])
        assert seen and all(keep == allowed[h] for h, keep in seen)


def test_build_by_hand():
    """Entries (2, 1), (1,), (2, 1, 3), (2, 1): nodes breadth-first by (parent, token): 0 root,
    1 = (1,), 2 = (2,), 3 = (2, 1), 4 = (2, 1, 3); edges of the root 0:2, of node 2 2:3, of node
    3 3:4; ends at nodes 1, 3 and 4."""
    trie = Catalogue([[2, 1], [1], [2, 1, 3], [2, 1]], EOS).trie
    assert trie.first.tolist() == [0, 2, 2, 3, 4, 4]
    assert trie.token.tolist() == [1, 2, 1, 3]
    assert trie.ends.tolist() == [False, True, False, True, True]
    assert trie.width == 4
    assert trie.step(np.array([0, 0, 2, 3, -1, 1]), np.array([2, 3, 1, 3, 1, 1])).tolist() == [2, -1, 3, 4, -1, -1]


def test_array_strings_and_lists_give_one_trie():
    """The same catalogue as lists, as an array [M, L] padded with -1 or with the eos id, as a
    torch array, and as strings through a tokenizer (one id per character: 'a' -> 1, ...)."""
    entries = [[1, 2, 3], [1, 2], [3], [1, 2]]
    padded = np.array([[1, 2, 3], [1, 2, -1], [3, -1, -1], [1, 2, -1]])

    def tokenizer(texts, add_special_tokens=True):
        assert add_special_tokens is False
        return {"input_ids": [[ord(c) - ord("a") + 1 for c in s] for s in texts]}

    want = sorted({tuple(e) for e in entries})
    forms = [Catalogue(entries, EOS), Catalogue(padded, EOS),
             Catalogue(np.where(padded < 0, EOS, padded), EOS, pad_id=EOS),
             Catalogue(["abc", "ab", "c", "ab"], EOS, tokenizer=tokenizer)]
    if torch is not None:
        forms.append(Catalogue(torch.from_numpy(padded), EOS))
    for cat in forms:
        assert sorted(cat.trie.items()) == want


def test_save_and_load(tmp_path):
    """A saved catalogue loads with the same arrays and eos ids, or with other eos ids."""
    rng = np.random.default_rng(3)
    cat = Catalogue(random_catalogue(rng, 50, 400, 6), EOS)
    cat.save(tmp_path / "c.safetensors")
    back = Catalogue.load(tmp_path / "c.safetensors")
    for name in ("first", "token", "ends", "key"):
        assert np.array_equal(getattr(back.trie, name), getattr(cat.trie, name))
    assert back.trie.width == cat.trie.width and back.eos_token_id == [EOS]
    assert Catalogue.load(tmp_path / "c.safetensors", eos_token_id=[0, 60]).eos_token_id == [0, 60]
    with pytest.raises(ValueError, match="eos id"):
        Catalogue.load(tmp_path / "c.safetensors", eos_token_id=cat.trie.items()[0][0])


def test_load_refuses_other_files(tmp_path):
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="is not a saved catalogue"):
        Catalogue.load(tmp_path / "other.safetensors")
    (tmp_path / "text.txt").write_text("1 2 3\n")
    with pytest.raises(ValueError, match="cannot be read as safetensors"):
        Catalogue.load(tmp_path / "text.txt")


def test_array_errors():
    with pytest.raises(ValueError, match=r"outputs\[1\] has an id after pad_id -1"):
        Catalogue(np.array([[1, 2], [-1, 3]]), EOS)
    with pytest.raises(ValueError, match=r"outputs\[0\] must be a non-empty.*starts with pad_id 5"):
        Catalogue(np.array([[5, 5], [1, 5]]), EOS, pad_id=5)
    with pytest.raises(ValueError, match=r"outputs\[1\]\[0\] must be in \[0, V\); got -3"):
        Catalogue(np.array([[1, 2], [-3, 1]]), EOS)
    with pytest.raises(ValueError, match=r"outputs\[1\] holds the eos id 0"):
        Catalogue(np.array([[1, 2], [1, 0]]), EOS)
    with pytest.raises(TypeError, match=r"outputs as an array must be integers \[M, L\]"):
        Catalogue(np.zeros((2, 2)), EOS)
    with pytest.raises(TypeError, match="a sequence of strings when a tokenizer is given"):
        Catalogue([[1]], EOS, tokenizer=lambda t, add_special_tokens: {"input_ids": [[1]]})
    with pytest.raises(ValueError, match=r"outputs\[0\] must be a non-empty"):
        Catalogue([""], EOS, tokenizer=lambda t, add_special_tokens: {"input_ids": [[]]})


# ---- searches ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(4))
def test_exhaustive_beam_is_the_catalogues_best(backend, seed):
    """beam = the catalogue's size: every prefix stays in the beam, so the n_best results are
    the catalogue's best entries by teacher-forced score (shared prefixes, prefix entries and
    repeats included), with their constrained logprobs. Widths of 100 to 700 rows per input."""
    rng = np.random.default_rng(10 + seed)
    vocab = 5 + 2 * seed
    entries = random_catalogue(rng, vocab, [100, 300, 500, 700][seed], 4)
    unique = {tuple(e) for e in entries}
    allowed = prefix_sets(entries)
    model = Markov(vocab, 5, seed, backend)
    prompts = [[2], [1]]
    out = beam_search_batch(model.step, model.init(2), prompts, eos_token_id=EOS, max_steps=5, beam_size=len(unique),
                            n_best=20, alpha=ALPHA, logits_processors=[Catalogue(entries, EOS)])
    for prompt, hyps in zip(prompts, out, strict=True):
        want = ranked_entries(model, prompt[-1], entries, allowed)[:20]
        assert [tuple(h.tokens) for h in hyps] == [w[0] for w in want]
        assert [h.logprob for h in hyps] == pytest.approx([w[1] for w in want], abs=1e-9)
        assert all(h.finished for h in hyps)


@pytest.mark.parametrize("beam, vocab", [(1400, 5), (4096, 6)])
def test_wide_dense_beam_equals_brute_force(beam, vocab):
    """No catalogue (the dense [k, V] ranking): ``beam_search`` (its beam narrows by one per
    finished hypothesis) with beams of 1400 and 4096, at least the 1365 and 3906 outputs of at
    most 5 tokens over 5 and 6 ids, is exhaustive: the results are every output, in the
    brute-force enumeration's order (tests/models.py), finished ones and unfinished ones."""
    table = random_table(vocab, beam, eos=0, eos_shift=0.5)
    expected = brute_force(table, vocab=vocab, eos=0, max_len=5, alpha=1.0)
    model = PrefixModel(table)
    out = beam_search(model.step, model.init_state(), 0, 0, beam_size=beam, max_len=5, length_penalty=1.0)
    assert len(out) == min(beam, len(expected))
    assert [tuple(h.tokens) for h in out] == [e[0] for e in expected[: len(out)]]
    assert [h.finished for h in out] == [e[3] for e in expected[: len(out)]]
    assert [h.logprob for h in out] == pytest.approx([e[1] for e in expected[: len(out)]], abs=1e-9)


@pytest.mark.parametrize("beam, backend", [(1024, "numpy"), (4096, "numpy"), *[pytest.param(
    4096, "torch", marks=pytest.mark.skipif(torch is None, reason="torch not installed"))]])
def test_wide_beams_through_the_engine(beam, backend, monkeypatch):
    """Beams of 1024 and 4096 rows per input, two inputs, a catalogue of 4000 entries: early stop
    loses nothing (the same results as without it), the results are catalogue entries, and with
    4096 >= the catalogue's size the search is exhaustive: the teacher-forced best entries."""
    rng = np.random.default_rng(7)
    vocab = 40
    entries = np.concatenate([rng.integers(1, vocab, size=(4000, 3)), np.full((4000, 1), -1)], axis=1)
    entries[:500, 2] = -1  # 500 entries of 2 tokens, some of them prefixes of 3-token ones
    cat = Catalogue(entries, EOS)
    unique = set(cat.trie.items())
    model = Markov(vocab, 5, 1, backend)
    sparse_steps = []
    monkeypatch.setattr(select, "best_of_support", lambda *a: sparse_steps.append(1) or best_of_support(*a))
    runs = [beam_search_batch(model.step, model.init(2), [[2], [5]], eos_token_id=EOS, max_steps=5, beam_size=beam,
                              n_best=50, alpha=ALPHA, logits_processors=[cat], early_stop=stop)
            for stop in (True, False)]
    assert ([[(h.tokens, h.logprob) for h in r] for r in runs[0]]
            == [[(h.tokens, h.logprob) for h in r] for r in runs[1]])
    assert len(sparse_steps) >= 4  # each search ranked the allowed entries alone (steps 2 and 3 at least)
    for prompt, hyps in zip([[2], [5]], runs[0], strict=True):
        assert len(hyps) == 50 and all(h.finished and tuple(h.tokens[:-1]) in unique for h in hyps)
        if beam >= len(unique):
            want = ranked_entries(model, prompt[-1], list(unique), prefix_sets(unique))[:50]
            assert [tuple(h.tokens) for h in hyps] == [w[0] for w in want]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_mode_and_width_stays_in_the_catalogue(backend):
    """Beam (width 1: greedy), diverse, stochastic, exact and constrained searches, widths 1 to 256: every
    finished output is a catalogue entry then eos (max_steps is one more than the longest entry)."""
    rng = np.random.default_rng(4)
    vocab = 12
    entries = random_catalogue(rng, vocab, 300, 4)
    unique = {tuple(e) for e in entries}
    model = Markov(vocab, 5, 2, backend)
    prompts = [[1], [4], [7]]
    common = {"eos_token_id": EOS, "max_steps": 5}
    word = list(entries[0][:1])  # a token every result must contain (constrained search)

    def cat():
        return [Catalogue(entries, EOS)]

    runs = []
    for width in (1, 4, 64, 256):
        runs.append(beam_search_batch(model.step, model.init(3), prompts, beam_size=width, n_best=min(width, 8),
                                      logits_processors=cat(), **common))
        runs.append(stochastic_beam_search(model.step, model.init(3), prompts, k=width, seed=width,
                                           logits_processors=cat(), **common))
        if width >= 4:
            runs.append(diverse_beam_search(model.step, model.init(3), prompts, beam_size=width, num_groups=2,
                                            diversity_penalty=0.5, n_best=4, logits_processors=cat(), **common))
            runs.append(constrained_beam_search(model.step, model.init(3), prompts, constraints=[[word]] * 3,
                                                beam_size=width, n_best=2, logits_processors=cat(), **common))
    runs.append(exact_search(model.step, model.init(3), prompts, n_best=3, logits_processors=cat(), **common))
    for out in runs:
        finished = [h for hyps in out for h in hyps if h.finished]
        assert finished
        assert all(h.tokens[-1] == EOS and tuple(h.tokens[:-1]) in unique for h in finished)


# ---- the sparse selection ----------------------------------------------------------------------


def sparse_case(rng, backend, dtype, k_per_input, vocab, n_inputs, per_row):
    """Random scores with few finite entries per row (rounded: ties), their support, and widths."""
    counts = rng.integers(1, k_per_input + 1, size=n_inputs)
    inputs = np.repeat(np.arange(n_inputs), counts)
    k = inputs.shape[0]
    logp = np.full((k, vocab), NEG_INF)
    rows = np.repeat(np.arange(k), per_row)
    cols = rng.integers(0, vocab, size=rows.shape[0])  # repeats among a row's pairs are fine
    logp[rows, cols] = np.round(rng.normal(size=rows.shape[0]) * 2) / 2 - 1
    logp[rng.random(k) < 0.1] = NEG_INF  # rows with nothing finite
    logprob = np.round(rng.normal(size=k) * 2) / 2 - 3
    logprob[rng.random(k) < 0.05] = -np.inf  # a teacher-forced path already at -inf
    x = logp.astype(dtype)
    if backend == "torch":
        x = torch.from_numpy(x)
    beam = Beam(inputs, logprob, np.zeros(k, np.int64), None, None)
    return x, beam, (rows, cols), rng.integers(0, 2 * k_per_input, size=n_inputs)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sparse_selection_equals_the_dense_one(backend, dtype):
    """Random inputs (uneven rows per input, ties, -inf rows and logprobs, widths 0 to 2x the
    rows): the support's ranking gives the dense path's candidates, values and order, on both of
    the dense path's branches (the grouped top-m for small [k, V], the per-row merge for large)."""
    rng = np.random.default_rng(0)
    branches = set()
    for case in range(40):
        big = case % 4 == 0
        vocab = 3000 if big else int(rng.integers(30, 60))
        x, beam, support, width = sparse_case(rng, backend, dtype, int(rng.integers(1, 300 if big else 20)), vocab,
                                              int(rng.integers(1, 5)), int(rng.integers(1, 4)))
        b = backend_of(x)
        terminals = Terminals(np.array([EOS]), np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert sparse(StepScores(b, x, beam, terminals, 1, support))  # the search would take the sparse path here
        branches.add(select.grouped(beam.size, len(set(beam.input.tolist())), vocab, int(width.max())))
        copy = lambda b=b, x=x: b.copy(x)  # noqa: E731 -- a selection may write into the scores
        dense = best_per_input(StepScores(b, (y := copy()), beam, terminals, 1), y, width)
        for choose in (best_per_input, best_of_support):
            got = choose(StepScores(b, (y := copy()), beam, terminals, 1, support), y, width)
            assert got.parent.tolist() == dense.parent.tolist()
            assert got.token.tolist() == dense.token.tolist()
            assert got.logprob.tolist() == dense.logprob.tolist()  # same additions in the same precision
    assert branches == {True, False}


def test_support_is_dropped_after_another_processor():
    """The support holds only when the catalogue is the last processor: a processor after it
    could give back a finite value anywhere (here it gives token 3, outside the catalogue, a
    value): the search must then rank densely, and it does (token 3 wins at step 1)."""

    def lift(logits, ctx):
        logits[:, 3] = 10.0
        return logits

    model = Markov(5, 3, 0)
    out = beam_search_batch(model.step, model.init(1), [[1]], eos_token_id=EOS, max_steps=2, beam_size=2,
                            logits_processors=[Catalogue([[1, 2], [2]], EOS), lift])
    assert out[0][0].tokens[0] == 3


def test_a_processor_declaring_masks_only_keeps_the_support(monkeypatch):
    """A caller's processor after the catalogue that declares ``masks_only = True`` (it only sets
    entries to -inf, here token 2 at every step: the outputs with a 2 are out): the support
    holds, so the search ranks the allowed pairs alone, and its results equal those of the same
    processing ranked densely (the same processor without the declaration)."""

    class Ban:
        masks_only = True

        def __call__(self, logits, ctx):
            logits[:, 2] = -np.inf
            return logits

    class BanDense(Ban):
        masks_only = False

    model = Markov(40, 4, 2)
    cat = Catalogue([[1, 2], [1, 3, 4], [2], [3, 1], [4, 4, 1], [2, 2, 5], [7], [7, 2, 9]], EOS)  # a handful per row
    out = {}
    for ban in (Ban(), BanDense()):
        sparse_steps = []
        monkeypatch.setattr(select, "best_of_support",
                            lambda *a, seen=sparse_steps: seen.append(1) or best_of_support(*a))
        out[ban.masks_only] = beam_search_batch(model.step, model.init(2), [[1], [3]], eos_token_id=EOS, max_steps=4,
                                                beam_size=3, n_best=3, logits_processors=[cat, ban])
        assert bool(sparse_steps) is ban.masks_only
    assert ([[(h.tokens, h.logprob) for h in r] for r in out[True]]
            == [[(h.tokens, h.logprob) for h in r] for r in out[False]])
    assert all(2 not in h.tokens for r in out[True] for h in r) and all(len(r) == 3 for r in out[True])


# ---- the trie on the logits' device ------------------------------------------------------------


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_device_pairs_equal_the_set_of_prefixes():
    """The pairs computed from the trie's arrays on a torch device (here the CPU's, the same
    operations as on a GPU) equal the plain set's, for nodes on and off the trie."""
    rng = np.random.default_rng(11)
    for seed in range(5):
        entries = random_catalogue(rng, 4 + seed, 20 + 30 * seed, 4)
        allowed = prefix_sets(entries)
        cat = Catalogue(entries, EOS)
        histories = rng.integers(0, 5 + seed, size=(60, int(rng.integers(0, 4))))
        node = cat.trie.walk(histories)
        rows, cols = cat.allowed_pairs_on(node, torch.zeros(1))
        rows, cols = rows.numpy(), cols.numpy()
        got = [set(cols[rows == r].tolist()) for r in range(60)]
        assert got == [allowed.get(tuple(h), set()) for h in histories.tolist()]
        assert cat.trie.on("cpu") is cat.trie.on(torch.device("cpu"))  # copied once per device


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_searches_with_the_trie_on_the_device_equal_those_on_the_host(monkeypatch):
    """Searches whose catalogue pairs are computed on the logits' device (forced for CPU tensors)
    give the host path's results, wide beams and the sparse ranking included."""
    rng = np.random.default_rng(12)
    vocab = 30
    entries = random_catalogue(rng, vocab, 2000, 3)
    model = Markov(vocab, 4, 3, "torch")

    def search(beam):
        return beam_search_batch(model.step, model.init(2), [[1], [2]], eos_token_id=EOS, max_steps=4, beam_size=beam,
                                 n_best=min(beam, 10), logits_processors=[Catalogue(entries, EOS)])

    host = [search(beam) for beam in (4, 64, 1024)]
    forced, real = [], Catalogue.allowed_pairs_on
    monkeypatch.setattr(catalogue, "on_accelerator", lambda x: isinstance(x, torch.Tensor))
    monkeypatch.setattr(Catalogue, "allowed_pairs_on", lambda *a: forced.append(1) or real(*a))
    device = [search(beam) for beam in (4, 64, 1024)]
    assert len(forced) >= 9  # every step of the three searches took the device path
    for a, b in zip(host, device, strict=True):
        assert [[(h.tokens, h.logprob) for h in r] for r in a] == [[(h.tokens, h.logprob) for h in r] for r in b]


# The trie's edges: a trie of nothing (its width, its steps), a single edge, tokens at and past the
# width, ids past 2**40 (kept exactly through the build, the lookups and a save), the padding after
# an item ignored, the saved file's dtypes, and the load messages in full.  Oracles, written here
# from the definitions: the entries themselves (``items()`` gives each back, ``step`` walks each), a
# plain dict of prefixes for the children, the format's documented dtypes.


def build(entries):
    """The trie of ``entries`` (lists of ids), padded with a large id that must be ignored."""
    longest = max(len(e) for e in entries)
    items = np.full((len(entries), longest + 1), 10**12, np.int64)
    for i, e in enumerate(entries):
        items[i, :len(e)] = e
    return Trie.build(items, np.array([len(e) for e in entries]))


def test_a_trie_of_nothing():
    """No item (zero rows, with or without columns): only the root, width 1, every step off."""
    for items in (np.zeros((0, 3), np.int64), np.zeros((0, 0), np.int64)):
        trie = Trie.build(items, np.zeros(0, np.int64))
        assert trie.width == 1 and trie.n_nodes == 1 and trie.n_items == 0 and trie.items() == []
        assert trie.first.tolist() == [0, 0] and trie.token.dtype == np.int64 and trie.token.shape == (0,)
        got = trie.step(np.array([0, -1, 0]), np.array([0, 1, 2]))
        assert got.dtype == np.int64 and got.tolist() == [-1, -1, -1]
        assert trie.ending(np.array([0, -1])).tolist() == [False, False]


def test_a_single_edge_and_tokens_at_the_width():
    """[[5]]: root -5-> node 1 (an end). [[1, 0], [2]]: width 3; token 3 from the root is past
    the width (its key 0 * 3 + 3 equals node 1's edge by 0, 1 * 3 + 0): no child."""
    one = build([[5]])
    assert one.width == 6 and one.step(np.array([0, 0, 1]), np.array([5, 4, 5])).tolist() == [1, -1, -1]
    assert one.ending(np.array([0, 1, -1])).tolist() == [False, True, False]
    two = build([[1, 0], [2]])
    assert two.width == 3
    assert two.step(np.array([0, 0, 1]), np.array([3, 1, 0])).tolist() == [-1, 1, 3]


def test_ids_past_2_to_the_40_are_exact():
    """9000 entries (first id i, then the largest id 2**40 - 1): a parent numbered in the
    thousands times the width 2**40 is past float64's exact integers, so the parents must come
    from integer division. Each entry walks to an end; the children of node 8999 are that id."""
    big = 2**40 - 1
    entries = [[i, big] for i in range(1, 9001)]
    trie = build(entries)
    assert trie.width == big + 1
    node = trie.walk(np.array(entries))
    assert trie.ending(node).all()
    rows, cols = trie.children(trie.walk(np.array([[8999]])))
    assert rows.tolist() == [0] and cols.tolist() == [big]
    assert sorted(trie.items())[-3:] == [(8998, big), (8999, big), (9000, big)]


def test_save_keeps_ids_and_writes_the_documented_dtypes(tmp_path):
    """ids fitting int32 are stored as int32, wider ones as int64; ends as uint8, first as int64;
    a trie with ids past 2**31 loads back exactly."""
    from safetensors import safe_open

    for entries, token_dtype in (([[1, 2], [3]], np.int32), ([[2**40, 1], [3]], np.int64)):
        trie = build(entries)
        trie.save(tmp_path / "t.safetensors", np.array([0]))
        with safe_open(str(tmp_path / "t.safetensors"), framework="numpy") as f:
            assert f.metadata()["format"] == FORMAT
            assert [f.get_tensor(n).dtype for n in ("first", "token", "ends")] == [np.int64, token_dtype, np.uint8]
        back, eos = Trie.load(tmp_path / "t.safetensors")
        assert sorted(back.items()) == sorted(tuple(e) for e in entries) and eos.tolist() == [0]


def test_load_messages(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "other.safetensors"
    save_file({"x": np.zeros(3)}, str(path), metadata={"format": "other/1"})
    with pytest.raises(ValueError, match=rf"^catalogue file {re.escape(repr(str(path)))} is not a saved catalogue "
                                         r"\(its safetensors metadata has format 'other/1', "
                                         rf"not {re.escape(repr(FORMAT))}\)$"):
        Trie.load(path)
    text = tmp_path / "t.txt"
    text.write_text("1 2\n")
    with pytest.raises(ValueError,
                       match=rf"^catalogue file {re.escape(repr(str(text)))} cannot be read as safetensors: "):
        Trie.load(text)


# A saved catalogue's arrays, checked on load: each case below is the good trie (GOOD) of the entries
# [3, 1], [3, 2], [5] (nodes 0 root, 1 '3', 2 '5', 3 '3 1', 4 '3 2'; first [0, 2, 4, 4, 4, 4], token
# [3, 5, 1, 2], ends [0, 0, 1, 1, 1]) or of the eight one-token entries [1] .. [8] (9 nodes: first
# [0, 8, 8, 8, 8, 8, 8, 8, 8, 8], token [1 .. 8], ends [0, 1 x 8]), with one field changed by hand;
# the messages are those checked_trie's docstring states, in full (the file, the field, the values).

NINE = {"first": np.array([0] + [8] * 9), "token": np.arange(1, 9, dtype=np.int32),
        "ends": np.array([0] + [1] * 8, np.uint8), "eos": np.array([0])}


def test_the_hand_written_tries_load_as_built():
    """The two good tries above are what ``Trie.build`` makes of their entries (so each damaged
    case below differs from a real file in its one changed field)."""
    for good, entries, width in ((GOOD, [[3, 1], [3, 2], [5]], 6), (NINE, [[i] for i in range(1, 9)], 9)):
        built = build(entries)
        assert [built.first.tolist(), built.token.tolist(), built.ends.tolist(), built.width] == [
            good["first"].tolist(), good["token"].tolist(), good["ends"].astype(bool).tolist(), width]


WIDE = 2**62  # a width whose keys overflow int64 from 2 nodes on: 5 x 2**62 >= 2**63
DAMAGED_IN_FULL = [
    # an item ending where no entry can: at the root
    ({"ends": np.array([1, 0, 1, 1, 1], np.uint8)}, "6", GOOD,
     "field 'ends' marks the root as an entry (entries are non-empty)"),
    # a value other than 0 and 1 among 9 nodes: the message shows the first 8 values
    ({"ends": np.array([0, 1, 1, 1, 2, 1, 1, 1, 1], np.uint8)}, "9", NINE,
     "field 'ends' must hold 0 or 1 for each node, the root first; got [0, 1, 1, 1, 2, 1, 1, 1]"),
    # no node at all (not even the root)
    ({"first": np.array([0]), "token": np.zeros(0, np.int32), "ends": np.zeros(0, np.uint8)}, "6", GOOD,
     "field 'ends' must hold 0 or 1 for each node, the root first; got []"),
    # one offset short: 5 offsets for 5 nodes
    ({"first": np.array([0, 2, 4, 4, 4])}, "6", GOOD,
     "field 'first' must hold one offset per node and one more (6), token one id per edge (4); got 5 offsets and 4 "
     "tokens for 5 nodes"),
    # the last offset past the edge count, among 10 offsets: the first 8 shown, then the last
    ({"first": np.array([0] + [8] * 8 + [9])}, "9", NINE,
     "field 'first' must rise from 0 to the edge count 8 and never decrease; got [0, 8, 8, 8, 8, 8, 8, 8] ... 9"),
    # node 2 given edges 1..3: its edge 1 leads to itself
    ({"first": np.array([0, 1, 1, 4, 4, 4])}, "6", GOOD,
     "field 'first' makes edge 1 of node 2 lead to node 2, not after it: every node's edges lead to later nodes "
     "(else a cycle, or nodes the root never reaches)"),
    # nodes 3 and 4 given one edge each, to themselves (loops the root never reaches): edges
    # root -> 1, 1 -> 2, 3 -> 3, 4 -> 4; every other check passes (keys 3, 11, 19, 26 ascending)
    ({"first": np.array([0, 1, 2, 2, 3, 4]), "ends": np.array([0, 0, 1, 0, 0], np.uint8)}, "6", GOOD,
     "field 'first' makes edge 2 of node 3 lead to node 3, not after it: every node's edges lead to later nodes "
     "(else a cycle, or nodes the root never reaches)"),
    # the largest id equal to the width (ids are < width)
    ({}, "5", GOOD, "field 'token' must hold ids in [0, width) = [0, 5); got ids from 1 to 5"),
    # the root alone (no edge, no entry) with width 1: a leaf without an entry
    ({"first": np.array([0, 0]), "token": np.zeros(0, np.int32), "ends": np.array([0], np.uint8)}, "1", GOOD,
     "field 'ends' leaves node 0 with no child and no entry ending there"),
    # a float ends, a bool eos: only ends may be bool, every field is integers
    ({"ends": np.array([0, 0, 1, 1, 1], np.float64)}, "6", GOOD,
     "field 'ends' must be a 1-D array of integers; got shape (5,) dtype float64"),
    ({"eos": np.array([True])}, "6", GOOD, "field 'eos' must be a 1-D array of integers; got shape (1,) dtype bool"),
    ({"token": np.array([True, True, False, True])}, "6", GOOD,
     "field 'token' must be a 1-D array of integers; got shape (4,) dtype bool"),
]


@pytest.mark.parametrize("fields, width, good, why", DAMAGED_IN_FULL)
def test_a_damaged_file_is_refused_with_the_whole_message(tmp_path, fields, width, good, why):
    path = saved(tmp_path, width, good, **fields)
    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))}: {re.escape(why)}$"):
        Trie.load(path)


def test_a_file_without_a_field_or_with_overflowing_keys_is_named_in_full(tmp_path):
    """A missing field: the message lists the four a saved catalogue has. A width of 2**62 over 5
    nodes: the keys node x width + token reach 5 x 2**62 >= 2**63; the message names the file."""
    path = saved(tmp_path, eos=None)
    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))} has no field 'eos' "
                                         r"\(a saved catalogue has first, token, ends and eos\)$"):
        Trie.load(path)
    path = saved(tmp_path, str(WIDE))
    with pytest.raises(ValueError, match=f"^catalogue file {re.escape(repr(str(path)))}: a trie of 5 nodes over token "
                                         rf"ids up to {WIDE - 1} does not fit its int64 keys \(nodes x \(largest "
                                         r"id \+ 1\) must be < 2\*\*63\); token ids are a vocabulary's, < V$"):
        Trie.load(path)


def test_ends_stored_as_bool_and_a_width_of_1_load(tmp_path):
    """ends may be stored as bool (1 byte per node, like save's uint8): the same trie loads. A
    catalogue whose only id is 0 (eos 1) has width 1: it saves and loads back, entries and eos."""
    back, eos = Trie.load(saved(tmp_path, ends=np.array([0, 0, 1, 1, 1], bool)))
    assert sorted(back.items()) == [(3, 1), (3, 2), (5,)] and eos.tolist() == [0]
    cat = Catalogue([[0], [0, 0, 0]], 1)
    assert cat.trie.width == 1
    cat.save(tmp_path / "zero.safetensors")
    back = Catalogue.load(tmp_path / "zero.safetensors")
    assert sorted(back.trie.items()) == [(0,), (0, 0, 0)] and back.eos_token_id == [1]


def test_built_and_loaded_tries_have_the_documented_dtypes(tmp_path):
    """first, token and key int64 and ends bool (the Trie's attributes), built, and loaded whatever
    the file's dtypes (int32 tokens, uint8 ends): ``ending`` gives a bool mask, usable to pick rows
    (of the walks '3', '5', '3 1', only '5' and '3 1' end an entry: nodes 2 and 3)."""
    built = build([[3, 1], [3, 2], [5]])
    built.save(tmp_path / "c.safetensors", np.array([0]))
    back, _ = Trie.load(tmp_path / "c.safetensors")
    for trie in (built, back):
        assert [a.dtype for a in (trie.first, trie.token, trie.ends, trie.key)] == [np.int64, np.int64, np.bool_,
                                                                                   np.int64]
        node = np.concatenate([trie.walk(np.array([[3], [5]])), trie.walk(np.array([[3, 1]]))])
        assert trie.ending(node).dtype == np.bool_ and node[trie.ending(node)].tolist() == [2, 3]


def test_save_stores_ids_up_to_2_to_the_31_minus_2_as_int32(tmp_path):
    """The largest id 2**31 - 2 (width 2**31 - 1) fits int32: stored as int32, loaded back exact."""
    from safetensors import safe_open

    big = 2**31 - 2
    build([[big, 1], [3]]).save(tmp_path / "t.safetensors", np.array([0]))
    with safe_open(str(tmp_path / "t.safetensors"), framework="numpy") as f:
        assert f.get_tensor("token").dtype == np.int32
    back, _ = Trie.load(tmp_path / "t.safetensors")
    assert sorted(back.items()) == [(3,), (big, 1)]


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_a_tries_device_copies_are_on_that_device():
    """``on(device)`` holds first, token and ends on that device (here torch's "meta" device, a
    device other than the CPU that needs no accelerator), same shapes and dtypes, one copy per
    device."""
    trie = build([[3, 1], [3, 2], [5]])
    on = trie.on("meta")
    for name in ("first", "token", "ends"):
        got, want = getattr(on, name), getattr(trie, name)
        assert (got.device.type, tuple(got.shape), str(got.dtype)) == ("meta", want.shape, f"torch.{want.dtype}")
    assert trie.on(torch.device("meta")) is on and trie.on("cpu").first.device.type == "cpu"
