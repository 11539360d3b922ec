"""Every registered search mode under every kind of output constraint, on numpy and torch logits:
every finished output is accepted and every unfinished one is a prefix of the language, by
checkers that share nothing with the library: Python's ``re`` and ``json`` + ``jsonschema`` over
the (finite) languages enumerated by brute force for the grammars, set membership for the
catalogue, and a plain walk of the automaton's table for the token DFA. A tiny bigram model
(V = 17) keeps every case at a fraction of a second; ``max_steps`` 3 for one prompt and 7 for the
other gives outputs cut unfinished as well as finished ones (step search: 2-token segments, 4
rounds)."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from beamsearch.modes.registry import MODES
from beamsearch.processors import Catalogue, TokenDFA
from oracles.grammar import EOS, language, regex_parser, schema_parser, text

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

VOCAB = ["</s>", "a", "b", "1", "2", "-", "{", "}", '"', ":", ",", "[", "]", "x", "xb", '":', "ab"]
V = len(VOCAB)
PROMPTS = [[1], [5, 2]]

REGEX = r"[ab]{1,3}(-[12]{1,2})?"
SCHEMA = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"enum": ["x", "xb"]}},
          "required": ["a"], "additionalProperties": False}
ITEMS = [[1, 2], [1, 3, 4], [16], [2, 2, 2, 1], [1, 3, 5, 3]]

# A token automaton: 1 (2 1)* then optionally 3 3; accepting after a 1 or after the 3 3.
DFA_TABLE = np.full((4, V), -1)
DFA_TABLE[0, 1] = 1  # start --1--> 1 (accepting)
DFA_TABLE[1, 2] = 2  # 1 --2--> 2
DFA_TABLE[2, 1] = 1  # 2 --1--> 1
DFA_TABLE[1, 3] = 3  # 1 --3--> 3
DFA_TABLE[3, 3] = 1  # 3 --3--> 1
DFA_ACCEPTING = [1]

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="no torch"))]


@functools.cache
def regex_language():
    return frozenset(language(regex_parser(REGEX), "ab12-", 6))


@functools.cache
def schema_language():
    """The compact JSON texts of objects with keys among "a", "b" (both orders) and values among
    the schema's and some others, that json.loads + jsonschema accept."""
    accepts = schema_parser(SCHEMA)
    texts = set()
    for a in (1, 2, 3, "x"):
        texts.add(json.dumps({"a": a}, separators=(",", ":")))
        for b in ("x", "xb", "b", 1):
            texts.add(json.dumps({"a": a, "b": b}, separators=(",", ":")))
            texts.add(json.dumps({"b": b, "a": a}, separators=(",", ":")))
    return frozenset(t for t in texts if accepts(t))


def text_checker(strings):
    """(finished body accepted, unfinished tokens a prefix) over a finite language of texts."""
    return (lambda body: text(body, VOCAB) in strings,
            lambda tokens: any(s.startswith(text(tokens, VOCAB)) for s in strings))


def dfa_walk(tokens):
    """The automaton's state after ``tokens``, walking its table one token at a time (None: no
    transition)."""
    state = 0
    for t in tokens:
        state = int(DFA_TABLE[state, t])
        if state < 0:
            return None
    return state


def dfa_can_accept(state):
    """Whether an accepting state is reachable from ``state`` (a plain search over the table)."""
    seen, todo = set(), [state]
    while todo:
        s = todo.pop()
        if s in DFA_ACCEPTING:
            return True
        seen.add(s)
        todo += [int(n) for n in DFA_TABLE[s] if n >= 0 and int(n) not in seen]
    return False


def constraint(kind):
    """(processor, accepts(body without eos), is_prefix(tokens)) for one kind of constraint."""
    if kind in ("regex", "json_schema"):
        pytest.importorskip("llguidance")
        from beamsearch.processors import Grammar

        if kind == "regex":
            return (Grammar.regex(REGEX, VOCAB, eos_token_id=EOS),
                    *text_checker(regex_language()))
        pytest.importorskip("jsonschema")
        return (Grammar.json_schema(SCHEMA, VOCAB, eos_token_id=EOS), *text_checker(schema_language()))
    if kind == "catalogue":
        items = {tuple(x) for x in ITEMS}
        return (Catalogue(ITEMS, EOS), lambda body: tuple(body) in items,
                lambda tokens: any(item[: len(tokens)] == tuple(tokens) for item in items))
    dfa = TokenDFA(DFA_TABLE, 0, DFA_ACCEPTING, EOS)
    return (dfa, lambda body: dfa_walk(body) in DFA_ACCEPTING,
            lambda tokens: dfa_walk(tokens) is not None and dfa_can_accept(dfa_walk(tokens)))


def bigram(backend):
    """A bigram model: logits ``T[y_prev]`` of a fixed random table, eos made rarer."""
    table = np.random.default_rng(7).normal(size=(V, V)) * 2.0
    table[:, EOS] -= 1.0
    if backend == "torch":
        table = torch.from_numpy(table)
        return lambda state, y: (table[torch.as_tensor(np.asarray(y), dtype=torch.long)], state)
    return lambda state, y: (table[np.asarray(y)], state)


def step_scorer(prompts, partials):
    return [((sum((i + 3) * t for i, t in enumerate(p + s)) * 7919) % 1009 + 1) / 1011
            for p, s in zip(prompts, partials, strict=True)]


MODE_KEYWORDS = {
    "beam": dict(beam_size=3, n_best=3),
    "greedy": dict(),
    "constrained": dict(constraints=[[[1]]] * len(PROMPTS), beam_size=4, n_best=3),
    "diverse": dict(num_groups=2, diversity_penalty=0.5, beam_size=4, n_best=4),
    "stochastic": dict(k=3, seed=0),
    "exact": dict(n_best=3, node_budget=3000),
    "transformers": dict(beam_size=3, n_best=3),
    "step": dict(scorer=step_scorer, n=4, m=2, rounds=4, sample_seed=0, max_steps=2),
}
"""Each registered mode's own keywords (a mode added to the registry needs its line here)."""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["regex", "json_schema", "catalogue", "token_dfa"])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_keeps_every_constraint(mode, kind, backend):
    processor, accepts, is_prefix = constraint(kind)
    keywords = {"eos_token_id": EOS, "max_steps": [3, 7], "logits_processors": [processor], **MODE_KEYWORDS[mode]}
    results = MODES[mode].function(bigram(backend), None, PROMPTS, **keywords)
    outputs = [h for hyps in results for h in hyps]
    assert outputs, (mode, kind)
    for h in outputs:
        assert h.finished == (bool(h.tokens) and h.tokens[-1] == EOS)
        if h.finished:
            assert EOS not in h.tokens[:-1] and accepts(h.tokens[:-1]), (mode, kind, h.tokens)
        else:
            assert is_prefix(h.tokens), (mode, kind, h.tokens)
