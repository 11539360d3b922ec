"""beamsearch.processors.Grammar (docs/grammar.md) against independent oracles: the languages of
finite grammars enumerated by brute force with an independent parser (``re.fullmatch``,
``json.loads`` + ``jsonschema``, a ``lark`` parser), the best constrained output by exhaustive
search over token sequences, the masked renormalized distribution recomputed by teacher forcing,
and a matcher replayed from scratch along each row's tokens."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("llguidance")

from approx import FLOAT32, FLOAT64, assert_same_hypotheses  # noqa: E402
from beamsearch import (  # noqa: E402
    beam_search_batch,
    constrained_beam_search,
    diverse_beam_search,
    exact_search,
    score_sequences,
    stochastic_beam_search,
)
from beamsearch.backends import backend_of  # noqa: E402
from beamsearch.processors import (  # noqa: E402
    Grammar,
    NoRepeatNGram,
    StepContext,  # noqa: E402
)
from beamsearch.processors.grammar import SUPPORT_SHARE  # noqa: E402
from beamsearch.processors.grammar_engine import PARALLEL_ROWS  # noqa: E402
from beamsearch.refill import decode_stream  # noqa: E402
from oracles.grammar import (  # noqa: E402
    EOS,
    all_outputs,
    allowed,
    constrained_logp,
    language,
    lark_parser,
    regex_parser,
    schema_parser,
    text,
)

torch = pytest.importorskip("torch")

# a character vocabulary with a few multi-character tokens: some strings have several tokenizations
VOCAB = ["</s>", "a", "b", "1", "2", "-", "{", "}", '"', ":", ",", "[", "]", "x", "xb", '":', "ab"]
V = len(VOCAB)

REGEX = r"[ab]{1,2}(-[12])?"
LARK = 'start: pair | "[" pair "]"\npair: KEY ":" VALUE\nKEY: "a" | "b"\nVALUE: "1" | "2" | "12"\n'
SCHEMA = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"enum": ["x", "xb"]}},
          "required": ["a"], "additionalProperties": False}


def schema_language(schema: dict) -> set[str]:
    """The compact JSON texts of a universe of candidate objects (keys "a", "b" in both orders,
    values among the schema's and some that are not) that json.loads + jsonschema accept, keys
    in the schema's order (what the engine emits: docs/grammar.md)."""
    values = [1, 2, 12, "x", "xb", "b", "a"]
    texts = {"{}"}
    for keys in (["a"], ["b"], ["a", "b"], ["b", "a"]):
        for combo in np.array(np.meshgrid(*[range(len(values))] * len(keys))).T.reshape(-1, len(keys)):
            texts.add(json.dumps({k: values[j] for k, j in zip(keys, combo, strict=True)}, separators=(",", ":")))
    order = list(schema["properties"])
    ok = schema_parser(schema)
    return {t for t in texts if ok(t) and list(json.loads(t)) == sorted(json.loads(t), key=order.index)}


def lark_language(grammar: str) -> set[str]:
    """The strings the lark parser accepts among every string of at most 4 characters over the
    grammar's alphabet and every bracketed or bare ``key:value`` of some keys and values."""
    short = language(lark_parser(grammar), "ab12:[]", 4)
    pieces = ["", "a", "b", "1", "ab", "[a"]
    ok = lark_parser(grammar)
    longer = {f"{o}{k}:{v}{c}" for o in ("", "[") for c in ("", "]") for k in pieces
              for v in ("1", "2", "12", "21", "a")}
    return short | {t for t in longer if ok(t)}


CASES = {
    "regex": (lambda: Grammar.regex(REGEX, VOCAB, eos_token_id=EOS), lambda: language(regex_parser(REGEX), "ab12-", 5)),
    "lark": (lambda: Grammar.lark(LARK, VOCAB, eos_token_id=EOS), lambda: lark_language(LARK)),
    "schema": (lambda: Grammar.json_schema(SCHEMA, VOCAB, eos_token_id=EOS), lambda: schema_language(SCHEMA)),
}


def bigram(seed: int, v: int = V) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=2.0, size=(v, v))


def step_of(table: np.ndarray, backend: str):
    t = torch.tensor(table) if backend == "torch" else table

    def step(state, y_prev):
        return t[y_prev], state

    return step


def init(n: int, backend: str):
    return torch.zeros((n, 1)) if backend == "torch" else np.zeros((n, 1))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("kind", sorted(CASES))
def test_an_exhaustive_beam_equals_the_brute_force_best_accepted_output(kind, backend):
    make, lang = CASES[kind]
    strings = lang()
    assert len(strings) >= 6
    table, prompt = bigram(1), [13]
    want = all_outputs(table, prompt[-1], strings, VOCAB, max_steps=20)
    assert {text(t, VOCAB) for t in want} == strings  # every string reachable, by every tokenization
    out = beam_search_batch(step_of(table, backend), init(1, backend), [prompt], eos_token_id=EOS, max_steps=20,
                            beam_size=200, n_best=len(want), alpha=0.0, logits_processors=[make()],
                            return_token_logprobs=True)[0]
    assert all(h.finished for h in out)
    assert {tuple(h.tokens): h.logprob for h in out}.keys() == want.keys()
    best = max(want, key=want.get)
    assert tuple(out[0].tokens) == best and out[0].logprob == pytest.approx(want[best], abs=1e-9)
    for h in out:  # each token's processed logprob: the masked, renormalized distribution (teacher forced)
        assert h.logprob == pytest.approx(want[tuple(h.tokens)], abs=1e-9)
        last, prefix = prompt[-1], ""
        for t, lp in zip(h.tokens, h.token_logprobs, strict=True):
            assert lp == pytest.approx(constrained_logp(table[last], allowed(prefix, strings, VOCAB))[t], abs=1e-9)
            last, prefix = t, prefix + (VOCAB[t] if t != EOS else "")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_scored_targets_are_the_teacher_forced_masked_distribution(kind):
    make, lang = CASES[kind]
    strings, table = lang(), bigram(2)
    targets = [[VOCAB.index(c) for c in s] + [EOS] for s in sorted(strings)[:4]]
    rejected = [VOCAB.index("}"), EOS]  # no string of the three languages starts with "}"
    got = score_sequences(step_of(table, "numpy"), np.zeros((5, 1)), [[13]] * 5, targets + [rejected],
                          eos_token_id=EOS, alpha=0.0, logits_processors=[make()])
    for target, h in zip(targets, got, strict=False):
        last, prefix, want = 13, "", 0.0
        for t in target:
            want += constrained_logp(table[last], allowed(prefix, strings, VOCAB))[t]
            last, prefix = t, prefix + (VOCAB[t] if t != EOS else "")
        assert h.logprob == pytest.approx(want, abs=1e-9)
    assert got[-1].logprob == -np.inf


class Replayed:
    """A processor placed after a Grammar: at every step, each row's carried (forked) matcher
    allows exactly what a matcher replayed from scratch along the row's tokens allows."""

    needs_history = False

    def __init__(self, grammar: Grammar) -> None:
        self.grammar, self.rows_checked, self.widest = grammar, 0, 0

    def __call__(self, logits, ctx):
        generated = ctx.history[:, ctx.history.shape[1] - (ctx.step - 1):]
        carried = ctx.row_states(self.grammar).allowed()
        for i, row in enumerate(generated.tolist()):
            assert (carried[i] == self.grammar.allowed_after(row)).all(), (ctx.step, row)
        self.rows_checked += len(generated)
        self.widest = max(self.widest, len(generated))
        return logits


INFINITE = {
    "regex": lambda: Grammar.regex(r"(a|b1|xb)+(-[12]+)*", VOCAB, eos_token_id=EOS),
    "schema": lambda: Grammar.json_schema({"type": "array", "items": {"enum": ["a", "xb", 12]}}, VOCAB,
                                          eos_token_id=EOS),
}

MODES = {
    "beam": lambda s, st, p, g: beam_search_batch(s, st, p, beam_size=5, n_best=5, logits_processors=g, **COMMON),
    # 6 x 40 rows: the masks are filled in parallel (grammar_engine.PARALLEL_ROWS)
    "wide beam": lambda s, st, p, g: beam_search_batch(s, st, p, beam_size=40, n_best=5, logits_processors=g,
                                                       **COMMON),
    "diverse": lambda s, st, p, g: diverse_beam_search(s, st, p, num_groups=2, diversity_penalty=1.0, beam_size=4,
                                                       n_best=4, logits_processors=g, **COMMON),
    "stochastic": lambda s, st, p, g: stochastic_beam_search(s, st, p, k=4, seed=3, logits_processors=g,
                                                             eos_token_id=EOS, max_steps=9),
    "exact": lambda s, st, p, g: exact_search(s, st, p, n_best=2, logits_processors=g, **COMMON),
    "constrained": lambda s, st, p, g: constrained_beam_search(s, st, p, constraints=[[[VOCAB.index("xb")]]] * len(p),
                                                               beam_size=4, n_best=4, logits_processors=g, **COMMON),
}
COMMON = dict(eos_token_id=EOS, max_steps=9, alpha=0.0)


def outputs(results):
    return [list(getattr(r, "hypotheses", r)) for r in results]


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", sorted(INFINITE))
def test_forked_matchers_equal_replayed_ones_and_every_output_is_accepted(kind, mode):
    grammar = INFINITE[kind]()
    check = Replayed(grammar)
    accepts = regex_parser(r"(a|b1|xb)+(-[12]+)*") if kind == "regex" else None
    prompts = [[13], [3, 4], [5]] * (2 if mode == "wide beam" else 1)
    results = MODES[mode](step_of(bigram(4), "numpy"), np.zeros((len(prompts), 1)), prompts, [grammar, check])
    assert check.rows_checked > 50
    if mode == "wide beam":
        assert check.widest >= PARALLEL_ROWS
    for hyps in outputs(results):
        assert hyps
        for h in hyps:
            body = text(h.tokens, VOCAB)
            if h.finished:
                assert grammar.accepts(h.tokens[:-1])
                assert accepts(body) if accepts else isinstance(json.loads(body), list)
            else:  # out of steps: a prefix the grammar can still complete
                assert grammar.allowed_after(h.tokens).any()


def test_exact_search_finds_the_brute_force_best_accepted_output():
    make, lang = CASES["schema"]
    strings, table = lang(), bigram(5)
    want = all_outputs(table, 13, strings, VOCAB, max_steps=20)
    best = max(want, key=want.get)
    got = exact_search(step_of(table, "numpy"), np.zeros((1, 1)), [[13]], eos_token_id=EOS, max_steps=20, alpha=0.0,
                       logits_processors=[make()])
    assert tuple(got[0][0].tokens) == best and got[0][0].logprob == pytest.approx(want[best], abs=1e-9)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_inputs_are_independent_and_refill_equals_the_batch(backend):
    grammar, table = INFINITE["regex"](), bigram(6)
    prompts = [[13], [3, 4], [5], [1, 1, 2]]
    kw = dict(eos_token_id=EOS, max_steps=8, beam_size=3, n_best=3, logits_processors=[grammar])
    batch = beam_search_batch(step_of(table, backend), init(4, backend), prompts, **kw)
    for i, p in enumerate(prompts):
        alone = beam_search_batch(step_of(table, backend), init(1, backend), [p], **kw)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch[i]]
        assert [h.logprob for h in alone] == pytest.approx([h.logprob for h in batch[i]], abs=1e-6)
    stream = decode_stream(step_of(table, backend), lambda items: init(len(items), backend), prompts, max_rows=6, **kw)
    got = {r.index: r.hypotheses for r in stream}
    for i in range(len(prompts)):
        assert [h.tokens for h in got[i]] == [h.tokens for h in batch[i]]


def test_controls_compose():
    grammar, table = INFINITE["regex"](), bigram(7)
    accepts = regex_parser(r"(a|b1|xb)+(-[12]+)*")
    step, prompts = step_of(table, "numpy"), [[13], [5]]
    kw = dict(eos_token_id=EOS, max_steps=10, beam_size=4, n_best=4, alpha=0.0)
    for hyps in beam_search_batch(step, np.zeros((2, 1)), prompts, min_new_tokens=5, logits_processors=[grammar], **kw):
        assert all(len(h.tokens) >= 6 and accepts(text(h.tokens, VOCAB)) for h in hyps if h.finished)
    forced = [[VOCAB.index("xb"), VOCAB.index("a")]] * 2
    for hyps in beam_search_batch(step, np.zeros((2, 1)), prompts, prefix=forced, logits_processors=[grammar], **kw):
        assert all(h.tokens[:2] == forced[0] and accepts(text(h.tokens, VOCAB)) for h in hyps if h.finished)
    bad_prefix = [[VOCAB.index("-")]] * 2  # the grammar cannot start with "-": the rows die, no result
    assert beam_search_batch(step, np.zeros((2, 1)), prompts, prefix=bad_prefix, logits_processors=[grammar],
                             **kw) == [[], []]
    stop = [VOCAB.index("-")]
    for hyps in beam_search_batch(step, np.zeros((2, 1)), prompts, stop_sequences=[stop], logits_processors=[grammar],
                                  **kw):
        for h in (h for h in hyps if h.finished):  # eos where the grammar ends, or the stop sequence
            assert accepts(text(h.tokens, VOCAB)) or (h.tokens[-1] == stop[0] and grammar.allowed_after(h.tokens).any())
    for hyps in beam_search_batch(step, np.zeros((2, 1)), prompts, logits_processors=[NoRepeatNGram(2), grammar], **kw):
        for h in (h for h in hyps if h.finished):
            pairs = list(zip(h.tokens, h.tokens[1:], strict=False))
            assert accepts(text(h.tokens, VOCAB)) and len(pairs) == len(set(pairs))


def test_a_grammar_is_compiled_once_per_tokenizer():
    a = Grammar.regex(REGEX, VOCAB, eos_token_id=EOS)
    b = Grammar.regex(REGEX, list(VOCAB), eos_token_id=EOS)
    assert a._compiled is b._compiled
    assert Grammar.regex(REGEX, VOCAB, eos_token_id=[EOS, 5])._compiled is not a._compiled


def test_a_row_with_nothing_allowed_dies_and_eos_only_where_the_grammar_ends():
    g = Grammar.regex("ab", VOCAB, eos_token_id=EOS)
    assert [VOCAB[t] for t in np.flatnonzero(g.allowed_after([]))] == ["a", "ab"]
    assert [VOCAB[t] for t in np.flatnonzero(g.allowed_after([VOCAB.index("a")]))] == ["b"]
    assert [VOCAB[t] for t in np.flatnonzero(g.allowed_after([VOCAB.index("ab")]))] == ["</s>"]
    assert not g.allowed_after([VOCAB.index("b")]).any()  # a rejected token: nothing more, not even eos
    assert g.accepts([1, 2]) and g.accepts([16]) and not g.accepts([1])


def test_bad_arguments_name_the_parameter():
    with pytest.raises(ValueError, match="kind must be one of"):
        Grammar("cfg", "x", VOCAB, EOS)
    with pytest.raises(TypeError, match="pattern must be a str"):
        Grammar.regex(3, VOCAB, eos_token_id=EOS)
    with pytest.raises(TypeError, match="json_schema must be a dict"):
        Grammar.json_schema(["a"], VOCAB, eos_token_id=EOS)
    with pytest.raises(TypeError, match=r"tokenizer\[1\] must be a str"):
        Grammar.regex("a", ["</s>", 3], eos_token_id=EOS)
    with pytest.raises(TypeError, match="tokenizer must be a fast Hugging Face tokenizer"):
        Grammar.regex("a", object(), eos_token_id=EOS)
    with pytest.raises(ValueError, match="eos_token_id is required"):
        Grammar.regex("a", VOCAB)
    with pytest.raises(ValueError, match="lark .* refused by the grammar engine"):
        Grammar.lark("start: (", VOCAB, eos_token_id=EOS)
    with pytest.raises(ValueError, match="options must be None or a dict, for json_schema only"):
        Grammar("regex", "a", VOCAB, EOS, {"whitespace_flexible": True})
    g = Grammar.regex("a", VOCAB, eos_token_id=EOS)
    with pytest.raises(ValueError, match="pass it in logits_processors="):
        from beamsearch.backends import backend_of
        from beamsearch.processors import StepContext
        x = np.zeros((1, V))
        g(x, StepContext(1, np.zeros((1, 0), np.int64), np.zeros(1, np.int64), backend_of(x)))
    with pytest.raises(ValueError, match=f"tokenizer has {V} tokens but the logits have V=5"):
        beam_search_batch(lambda s, y: (np.zeros((len(y), 5)), s), np.zeros((1, 1)), [[1]], eos_token_id=EOS,
                          max_steps=3, beam_size=2, logits_processors=[g])


def test_without_llguidance_the_error_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[grammar\]'"):
        Grammar.regex("a+b", VOCAB, eos_token_id=EOS)


# ---- every finished output of a search is accepted by the independent parser: generated grammars

JSON_VOCAB = ["</s>"] + list('{}[]":,-0123456789abtruefalsn') + ['":', '"a', "tr", "ue", "null", "12", '},{']
JSON_VOCAB = list(dict.fromkeys(JSON_VOCAB))  # repeated characters once
GENERATED = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

atoms = st.sampled_from(["a", "b", "1", "2"]).map(lambda c: ("lit", c))
expressions = st.recursive(atoms, lambda inner: st.one_of(
    st.tuples(st.just("seq"), inner, inner), st.tuples(st.just("alt"), inner, inner),
    st.tuples(st.sampled_from(["opt", "star", "plus"]), inner)), max_leaves=6)


def as_regex(e) -> str:
    op = e[0]
    if op == "lit":
        return e[1]
    if op in ("seq", "alt"):
        return f"({as_regex(e[1])}{'|' if op == 'alt' else ''}{as_regex(e[2])})"
    return f"({as_regex(e[1])}){ {'opt': '?', 'star': '*', 'plus': '+'}[op] }"


def as_lark(e) -> str:
    op = e[0]
    if op == "lit":
        return f'"{e[1]}"'
    if op in ("seq", "alt"):
        return f"({as_lark(e[1])}{' | ' if op == 'alt' else ' '}{as_lark(e[2])})"
    return f"({as_lark(e[1])}){ {'opt': '?', 'star': '*', 'plus': '+'}[op] }"


def run_search(grammar: Grammar, vocab, seed: int):
    table = np.random.default_rng(seed).normal(scale=2.0, size=(len(vocab), len(vocab)))
    return beam_search_batch(step_of(table, "numpy"), np.zeros((2, 1)), [[1], [2]], eos_token_id=EOS, max_steps=12,
                             beam_size=3, n_best=3, logits_processors=[grammar])


CHAR_VOCAB = ["</s>", "a", "b", "1", "2", "ab", "b1", "12"]


@GENERATED
@given(expressions, st.integers(0, 2**16))
def test_every_finished_output_matches_a_generated_regex(e, seed):
    pattern = as_regex(e)
    for hyps in run_search(Grammar.regex(pattern, CHAR_VOCAB, eos_token_id=EOS), CHAR_VOCAB, seed):
        for h in (h for h in hyps if h.finished):
            assert regex_parser(pattern)(text(h.tokens, CHAR_VOCAB)), (pattern, h.tokens)


@GENERATED
@given(expressions, expressions, st.integers(0, 2**16))
def test_every_finished_output_parses_under_a_generated_lark_grammar(e1, e2, seed):
    grammar = f'start: item ("," item)?\nitem: {as_lark(e1)} | "[" {as_lark(e2)} "]"\n'
    vocab = CHAR_VOCAB + [",", "[", "]", "],["]
    accepts = lark_parser(grammar)
    for hyps in run_search(Grammar.lark(grammar, vocab, eos_token_id=EOS), vocab, seed):
        for h in (h for h in hyps if h.finished):
            assert accepts(text(h.tokens, vocab)), (grammar, h.tokens)


leaf_schemas = st.one_of(
    st.builds(lambda lo, n: {"type": "integer", "minimum": lo, "maximum": lo + n}, st.integers(-20, 20),
              st.integers(0, 200)),
    st.just({"type": "boolean"}), st.just({"type": "null"}),
    st.lists(st.sampled_from([1, 12, "a", "ab", True, None]), min_size=1, max_size=3, unique=True).map(
        lambda values: {"enum": values}),
    st.just({"type": "string", "maxLength": 2, "pattern": "^[ab]*$"}))
schemas = st.recursive(leaf_schemas, lambda inner: st.one_of(
    st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n}, inner, st.integers(0, 3)),
    st.builds(lambda props, req: {"type": "object", "properties": props, "additionalProperties": False,
                                  "required": [k for k in props if k in req]},
              st.dictionaries(st.sampled_from(["a", "b", "ab"]), inner, min_size=1, max_size=2),
              st.sets(st.sampled_from(["a", "b", "ab"])))), max_leaves=4)


@GENERATED
@given(schemas, st.integers(0, 2**16))
def test_every_finished_output_is_valid_under_a_generated_json_schema(schema, seed):
    import jsonschema

    grammar = Grammar.json_schema(schema, JSON_VOCAB, eos_token_id=EOS)
    for hyps in run_search(grammar, JSON_VOCAB, seed):
        for h in (h for h in hyps if h.finished):
            jsonschema.validate(json.loads(text(h.tokens, JSON_VOCAB)), schema)


def test_a_grammar_the_vocabulary_cannot_spell_further_never_allows_eos():
    vocab = ["</s>", "{", "}", '"', "a", "b", ":", ",", "1", "2", '":']  # no "[": an array cannot start
    schema = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "array"}}, "required": ["a"],
              "additionalProperties": False}
    g = Grammar.json_schema(schema, vocab, eos_token_id=EOS)
    assert not g.allowed_after([vocab.index(c) for c in '{"a":2,"b":']).any()
    table = np.random.default_rng(0).normal(size=(len(vocab), len(vocab)))
    out = beam_search_batch(step_of(table, "numpy"), np.zeros((1, 1)), [[4]], eos_token_id=EOS, max_steps=16,
                            beam_size=4, n_best=4, logits_processors=[g])
    assert out[0] and all(json.loads(text(h.tokens, vocab))["a"] in (1, 2) for h in out[0] if h.finished)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_a_forked_process_searches_with_the_grammar_as_its_parent(tmp_path):
    """A process forked after a grammar search (multiprocessing's fork, a pre-forking server)
    gets its own grammar-engine threads: its search ends, with the parent's results. Both the
    parallel fill (3 x 30 rows) and the one-thread fill (3 x 2 rows) are run on each side."""
    grammar = INFINITE["regex"]()

    def search():
        return [[h.tokens for h in hyps] for beam in (30, 2) for hyps in beam_search_batch(
            step_of(bigram(4), "numpy"), np.zeros((3, 1)), [[13], [3, 4], [5]], beam_size=beam, n_best=2,
            logits_processors=[grammar], **COMMON)]

    want = search()
    out = tmp_path / "child.json"
    pid = os.fork()
    if pid == 0:  # the child: write its results, exit without running pytest's teardown
        try:
            out.write_text(json.dumps(search()))
        finally:
            os._exit(0)
    for _ in range(300):  # 30 s: a child waiting on its parent's threads never ends
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked process's grammar search did not end in 30 s")
    assert os.waitstatus_to_exitcode(status) == 0 and json.loads(out.read_text()) == want


class ReplayedMask:
    """The reference for a wide vocabulary: each row's allowed tokens from a matcher replayed
    along its generated tokens, applied as a plain boolean mask (no carried matcher, no packed
    bits, no support)."""

    needs_history = False

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar

    def __call__(self, logits, ctx):
        generated = ctx.history[:, ctx.history.shape[1] - (ctx.step - 1):]
        allowed = np.stack([self.grammar.allowed_after(row) for row in generated.tolist()])
        return np.where(allowed, logits, -np.inf)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_rows_the_grammar_mostly_masks_are_ranked_by_their_allowed_entries_alone(backend, monkeypatch):
    """On 1,500 tokens where every row allows a handful, the grammar hands the search its allowed
    (row, token) pairs and the selection ranks those alone (core.select.best_of_support): the
    same hypotheses as the grammar's mask replayed and applied densely."""
    import beamsearch.core.select as select

    rng = np.random.default_rng(5)
    others = list("cdefghijklmnopqrstuvwxyz")  # tokens the pattern never allows, then a few it does
    vocab = ["</s>", *("".join(rng.choice(others, size=rng.integers(1, 4))) for _ in range(1489))]
    for token in ["a", "b", "1", "2", "-", "ab", "b1", "-1", "-2", "12"]:
        vocab.insert(int(rng.integers(1, len(vocab))), token)
    table = rng.normal(size=(len(vocab), len(vocab))) * 3
    grammar = Grammar.regex(r"(ab|b1)+(-[12]+)*", vocab, eos_token_id=0)
    ranked = []
    monkeypatch.setattr(select, "best_of_support", lambda *a, _f=select.best_of_support: ranked.append(1) or _f(*a))
    search = dict(beam_size=6, n_best=6, eos_token_id=0, max_steps=7, alpha=0.0)
    prompts = [[3], [8], [20]]
    got = beam_search_batch(step_of(table, backend), np.zeros((3, 1)), prompts, logits_processors=[grammar], **search)
    assert ranked  # the sparse ranking ran
    monkeypatch.setattr(select, "best_of_support", lambda *a: pytest.fail("no support without the grammar"))
    want = beam_search_batch(step_of(table, "numpy"), np.zeros((3, 1)), prompts,
                             logits_processors=[ReplayedMask(grammar)], **search)
    assert_same_hypotheses(got, want, tol=FLOAT64 if backend == "numpy" else FLOAT32)
    assert all(re.fullmatch(r"(ab|b1)+(-[12]+)*", text(h.tokens[:-1], vocab)) for hyps in got for h in hyps
               if h.finished)


# The grammar processor's edges: logits wider than the tokenizer (by less than a byte, by several
# bytes, several rows), the support left exactly at its share, options reaching the engine, and
# every message in full.  Oracles, written here from the definitions: the allowed sets derived by
# hand from the regex or the schema (beside each case); the support rule ``SUPPORT_SHARE * pairs <=
# bits`` counted by hand.


# 0: eos, 1..26: 'a'..'z', 27: 'ab', 28: ' ', 29: '[', 30: ']', 31: ','  (n_vocab 32)
LETTERS = ["<eos>"] + [chr(ord("a") + i) for i in range(26)] + ["ab", " ", "[", "]", ","]


def step(grammar, logits, prefixes):
    """The processor's output and context for one row per prefix (lists of token ids, one length)."""
    rows = grammar.start_rows(len(prefixes))
    width = len(prefixes[0])
    for j in range(width):
        rows = rows.advance(np.array([p[j] for p in prefixes]))
    ctx = StepContext(width + 1, np.zeros((len(prefixes), width), np.int64), np.zeros(len(prefixes), np.int64),
                      backend_of(logits), {id(grammar): rows})
    return grammar(logits, ctx), ctx


@pytest.mark.parametrize("vocab", [32, 33, 36, 40, 50, 64, 65])
def test_logits_wider_than_the_tokenizer(vocab):
    """[a-z]*: the 26 letters, 'ab' and eos at every row; every id at or past 32 masked."""
    g = Grammar.regex("[a-z]*", LETTERS, eos_token_id=0)
    out, _ = step(g, np.zeros((3, vocab)), [[1, 1], [27, 2], [3, 4]])
    want = np.zeros(vocab, bool)
    want[:28] = True
    assert (np.isfinite(out) == want).all()


@pytest.mark.parametrize("vocab, left", [(256, True), (248, False)])
def test_the_support_at_its_share(vocab, left):
    """Regex "a", one row at the start: one allowed pair (token 1). Left for the selection when
    SUPPORT_SHARE * 1 <= 8 * 32 bytes = 256 (V = 256), not when the mask is 31 bytes (V = 248)."""
    assert SUPPORT_SHARE == 256
    g = Grammar.regex("a", LETTERS, eos_token_id=0)
    out, ctx = step(g, np.zeros((1, vocab)), [[]])
    assert np.flatnonzero(np.isfinite(out[0])).tolist() == [1]
    if left:
        assert [a.tolist() for a in ctx.support] == [[0], [1]]
    else:
        assert ctx.support is None


def test_options_reach_the_engine():
    """An array of booleans after '[': 'f', 't', ']' in compact JSON; a space too with
    whitespace_flexible."""
    schema = {"type": "array", "items": {"type": "boolean"}}
    compact = {6, 20, 30}
    assert set(np.flatnonzero(Grammar.json_schema(schema, LETTERS, eos_token_id=0).allowed_after([29]))) == compact
    flexible = Grammar.json_schema(schema, LETTERS, eos_token_id=0, options={"whitespace_flexible": True})
    assert set(np.flatnonzero(flexible.allowed_after([29]))) == compact | {28}
    direct = Grammar("json_schema", schema, LETTERS, 0, {"whitespace_flexible": True})
    assert set(np.flatnonzero(direct.allowed_after([29]))) == compact | {28}


def test_the_messages():
    with pytest.raises(TypeError, match=r"^grammar must be a str; got 5$"):
        Grammar.lark(5, LETTERS, eos_token_id=0)
    with pytest.raises(TypeError, match=r"^pattern must be a str; got 5$"):
        Grammar.regex(5, LETTERS, eos_token_id=0)
    with pytest.raises(ValueError, match=r"^tokenizer must not be an empty vocabulary$"):
        Grammar.regex("a", [], eos_token_id=0)
    with pytest.raises(TypeError, match=r"^tokenizer must be a fast Hugging Face tokenizer \(PreTrainedTokenizerFast\) "
                                        r"or a list of token strings; got object$"):
        Grammar.regex("a", object(), eos_token_id=0)
    with pytest.raises(ValueError, match=r"^eos_token_id is required: the tokenizer has no eos_token_id \(pass the "
                                         r"search's\)$"):
        Grammar.regex("a", LETTERS)
    with pytest.raises(TypeError, match=r"^eos_token_id must be an integer; got 'x' of type str$"):
        Grammar.regex("a", LETTERS, eos_token_id="x")
    with pytest.raises(ValueError, match=r"^kind must be one of json_schema, lark, regex; got 'nope'$"):
        Grammar("nope", "a", LETTERS, 0)
    with pytest.raises(ValueError, match=r"^options must be None or a dict, for json_schema only; got \{'a': 1\} "
                                         r"for kind 'regex'$"):
        Grammar("regex", "a", LETTERS, 0, {"a": 1})
    with pytest.raises(TypeError, match=r"^tokens must be a sequence of token ids; got 'x'$"):
        Grammar.regex("a", LETTERS, eos_token_id=0).allowed_after("x")
