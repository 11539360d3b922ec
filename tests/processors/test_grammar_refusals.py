"""What a Grammar refuses, and the caches it is built from: a search whose eos ids are not the
grammar's, a grammar whose language is empty (or that no token can begin), a JSON Schema deeper
than the engine reads, an ``x-guidance`` that is not an object; a tokenizer that gained tokens
after a grammar was built on it (built anew), and the bounded cache of the engine's tokenizers.

Oracles: the allowed tokens derived by hand from the pattern (written beside each case); the
languages named empty are empty by their definition (a class of no character, a reference to
itself alone); the cache's bound counted directly.
"""

from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np
import pytest

pytest.importorskip("llguidance")

from beamsearch import beam_search_batch, step_search  # noqa: E402
from beamsearch.processors import Grammar  # noqa: E402
from beamsearch.processors import grammar_engine as ge  # noqa: E402

VOCAB = ["</s>", "a", "b", "{", "}", '"', ":", "1", "[", "]", ",", "<end>"]
V = len(VOCAB)


def step(state, y_prev):
    return np.zeros((len(y_prev), V)), state


def search(grammar, eos, **kwargs):
    return beam_search_batch(step, np.zeros((1, 1)), [[1]], eos_token_id=eos, max_steps=4, beam_size=2,
                             logits_processors=[grammar], **kwargs)


@pytest.mark.parametrize("grammar_eos, search_eos", [(0, 11), ([0, 11], 0), (0, [0, 11])])
def test_a_search_whose_eos_ids_are_not_the_grammars_is_refused(grammar_eos, search_eos):
    """With eos 0 for the grammar and 11 for the search, the search would end no row where the
    grammar ends (0 is then text to it) and end rows on 11 where the grammar may not: refused
    before any model call, naming the processor and both sets. Same sets in another order: taken."""
    g = Grammar.regex("a+", VOCAB, eos_token_id=grammar_eos)
    mine, theirs = sorted(np.atleast_1d(grammar_eos).tolist()), sorted(np.atleast_1d(search_eos).tolist())
    message = (re.escape("logits_processors[0] (") + ".*" +
               re.escape(f"): the Grammar's eos_token_id {mine} is not the search's eos_token_id {theirs}: build the "
                         "Grammar with the search's eos_token_id") + "$")
    with pytest.raises(ValueError, match=message):
        search(g, search_eos)
    with pytest.raises(ValueError, match=message):
        step_search(step, np.zeros((1, 1)), [[1]], scorer=lambda solutions: [0.0] * len(solutions), n=2, m=2,
                    rounds=2, max_steps=2, eos_token_id=search_eos, logits_processors=[g])
    both = Grammar.regex("a+", VOCAB, eos_token_id=[11, 0])
    out = search(both, [0, 11], n_best=2)[0]
    assert all(h.tokens[-1] in (0, 11) and set(h.tokens[:-1]) == {1} for h in out)  # 'a'... then an eos


@pytest.mark.parametrize("kind, source", [
    ("regex", r"[^\s\S]"),  # a class of no character
    ("regex", "z"),  # no token spells 'z'
    ("json_schema", {"$ref": "#"}),  # the schema is itself alone
    ("json_schema", {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}),
])
def test_a_grammar_that_allows_no_output_is_refused_when_built(kind, source):
    with pytest.raises(ValueError, match=rf"^{kind} .* allows no output: its language is empty .* or no token of the "
                                         "tokenizer can begin any of its texts$"):
        Grammar(kind, source, VOCAB, 0)
    assert Grammar.regex("(a|z)", VOCAB, eos_token_id=0).accepts([1])  # one text the tokens spell: taken


def test_the_no_output_message_of_a_corpus_line_names_the_grammar():
    """Regex 'a' with at least 3 tokens: after 'a' only eos is allowed, and eos is held back: no
    output. The line's error names the regex; without a grammar it is the plain message."""
    from beamsearch import corpus
    from beamsearch.corpus import Line, decode_records

    model = corpus.toy_model()
    got = next(decode_records(model, [Line(0, "hello")], regex="a", min_new_tokens=3, beam_size=2))
    assert got["error"] == corpus.NO_OUTPUT[:-1] + "; the output constraints regex='a')"
    assert corpus.NO_OUTPUT.endswith("(the prefix, constraints, no-repeat n-grams, minimum length)")


def nested(depth: int) -> dict:
    """A schema whose objects are nested ``depth`` levels (arrays of arrays ... of integers)."""
    schema = {"type": "integer"}
    for _ in range(depth - 1):
        schema = {"type": "array", "items": schema}
    return schema


def test_a_json_schema_deeper_than_the_engine_reads_names_the_limit():
    """127 levels: compiled; 128 (the engine's JSON reader stops there) and 3,000 (past Python's
    own stack, given as a dict or as text): a ValueError naming the limit, no RecursionError."""
    Grammar.json_schema(nested(127), VOCAB, eos_token_id=0)
    deep = nested(3000)
    text = '{"type":"array","items":' * 2999 + '{"type":"integer"}' + "}" * 2999
    for schema in (nested(128), deep, text):
        with pytest.raises(ValueError, match=r"^json_schema is nested more than 127 levels deep "
                                             r"\(objects and arrays\); "
                                             r"the grammar engine reads at most 127$"):
            Grammar.json_schema(schema, VOCAB, eos_token_id=0)
    assert ge.MAX_SCHEMA_DEPTH == 127


@pytest.mark.parametrize("guidance", [5, "flexible", [1]])
def test_an_x_guidance_that_is_not_an_object_is_named(guidance):
    with pytest.raises(ValueError, match="^" + re.escape(f"json_schema has an x-guidance that is not an object (the "
                                                         "grammar engine's JSON options, "
                                                         "e.g. {\"whitespace_flexible\": true}); "
                                                         f"got {guidance!r}") + "$"):
        Grammar.json_schema({"type": "integer", "x-guidance": guidance}, VOCAB, eos_token_id=0)


def test_tokens_added_to_a_tokenizer_after_a_grammar_was_built_on_it_are_allowed():
    """A grammar a+ on a BPE, then the token 'aaaa' added to it: a grammar built again spans the
    larger vocabulary and allows the new token at the start ('aaaa' is a text of a+), as one
    built on a fresh tokenizer that has the token from the beginning does."""
    pytest.importorskip("transformers")
    from tests.processors.test_grammar_tokenizers import bpe

    tok = bpe()
    before = Grammar.regex("a+", tok)
    assert before.n_vocab == len(tok)
    tok.add_tokens(["aaaa"])
    new = tok.convert_tokens_to_ids("aaaa")
    assert new == len(tok) - 1 == before.n_vocab
    after = Grammar.regex("a+", tok)
    assert after.n_vocab == len(tok) and after.allowed_after([])[new]
    fresh = bpe()
    fresh.add_tokens(["aaaa"])
    assert (Grammar.regex("a+", fresh).allowed_after([]) == after.allowed_after([])).all()


def test_the_engines_tokenizers_are_a_bounded_cache(monkeypatch):
    """Grammars over one vocabulary with 3 x the cache's size of distinct eos ids: at most
    ``TOKENIZER_CACHE_SIZE`` tokenizers kept, the least recently used dropped first with the
    compiled grammars built on it (they keep it alive), and a kept one served again (the same
    object)."""
    monkeypatch.setattr(ge, "_TOKENIZERS", OrderedDict())
    monkeypatch.setattr(ge, "_COMPILED", OrderedDict())
    vocab = [f"t{i}" for i in range(40)]
    size = ge.TOKENIZER_CACHE_SIZE
    for e in range(3 * size):
        Grammar.regex("t1+", vocab, eos_token_id=e + 2)
        assert len(ge._TOKENIZERS) == len(ge._COMPILED) == min(e + 1, size)
    kept = [(e + 2,) for e in range(2 * size, 3 * size)]
    assert [key[0] for key in ge._TOKENIZERS] == kept
    assert [key[-1][0] for key in ge._COMPILED] == kept  # each compiled grammar's tokenizer is a kept one
    oldest = ge._lltokenizer(ge.engine(), vocab, np.array([2 * size + 2]))[0]  # now the most recently used
    assert ge._lltokenizer(ge.engine(), vocab, np.array([2 * size + 2]))[0] is oldest
    ge._lltokenizer(ge.engine(), vocab, np.array([0]))  # drops 2 size + 3, and its grammar
    assert [key[0] for key in ge._TOKENIZERS][:1] == [(2 * size + 4,)]
    assert [key[0] for key in ge._TOKENIZERS][-2:] == [(2 * size + 2,), (0,)]
    assert (2 * size + 3,) not in [key[-1][0] for key in ge._COMPILED] and len(ge._COMPILED) == size - 1
