"""Grammar over tokenizers as they are: a byte-level BPE trained here with ``tokenizers`` (nothing
downloaded), whose merges cross the grammar's tokens (``{"``, ``":``, ``},``), with special
tokens and a model vocabulary larger than the tokenizer's. Oracles: the language of a finite
JSON Schema (json.loads + jsonschema), each token's decoded text, brute force over token
sequences."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llguidance")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.processors import Grammar  # noqa: E402
from oracles.grammar import all_outputs, allowed, schema_parser  # noqa: E402

SCHEMA = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"enum": ["x", "xb"]}},
          "required": ["a"], "additionalProperties": False}
LANGUAGE = {'{"a":1}', '{"a":2}', '{"a":1,"b":"x"}', '{"a":2,"b":"x"}', '{"a":1,"b":"xb"}', '{"a":2,"b":"xb"}'}
SPECIALS = ["<|endoftext|>", "<pad>", "<tool>"]


def bpe(vocab_size: int = 300):
    """A byte-level BPE trained on JSON snippets: its merges join quotes, braces and colons."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sorted(LANGUAGE) * 50 + ['{"b":"xb"},{"a":12}', '"x":"a"'] * 20, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<pad>",
                                                additional_special_tokens=["<tool>"])


@pytest.fixture(scope="module")
def tokenizer():
    return bpe()


def texts(tok) -> list[str]:
    """Each id's decoded text; special ids have none (they are never text)."""
    special = set(tok.all_special_ids)
    return ["" if i in special else tok.decode([i]) for i in range(len(tok))]


def test_the_trained_merges_cross_the_grammar_tokens(tokenizer):
    vocab = texts(tokenizer)
    assert {'{"', '":', '"a":'} & set(vocab) and len(tokenizer.encode('{"a":1,"b":"xb"}')) < 10
    assert all(schema_parser(SCHEMA)(s) for s in LANGUAGE)


@pytest.mark.parametrize("extra", [0, 13])  # a model vocabulary 13 ids larger than the tokenizer's
def test_an_exhaustive_beam_over_a_bpe_equals_brute_force(tokenizer, extra):
    vocab, eos = texts(tokenizer) + [""] * extra, tokenizer.eos_token_id
    table = np.random.default_rng(8).normal(scale=2.0, size=(len(vocab), len(vocab)))
    want = all_outputs(table, 5, LANGUAGE, vocab, 20, eos=eos)
    assert {tokenizer.decode(list(t[:-1])) for t in want} == LANGUAGE and len(want) > len(LANGUAGE)
    width = max(len({t[:d] for t in want if len(t) > d}) for d in range(20))  # the most prefixes at a depth
    grammar = Grammar.json_schema(SCHEMA, tokenizer)
    out = beam_search_batch(lambda s, y: (table[y], s), np.zeros((1, 1)), [[5]], eos_token_id=eos, max_steps=20,
                            beam_size=max(width, len(want)), n_best=len(want), alpha=0.0,
                            logits_processors=[grammar])[0]
    assert {tuple(h.tokens) for h in out} == set(want)
    for h in out:
        assert h.logprob == pytest.approx(want[tuple(h.tokens)], abs=1e-9)
        assert json.loads(tokenizer.decode(h.tokens[:-1])) is not None


def test_every_step_masks_what_the_language_allows(tokenizer):
    vocab, eos = texts(tokenizer), tokenizer.eos_token_id
    grammar = Grammar.json_schema(SCHEMA, tokenizer)
    seen = []

    def check(logits, ctx):
        generated = ctx.history[:, ctx.history.shape[1] - (ctx.step - 1):]
        carried = ctx.row_states(grammar).allowed()
        for i, row in enumerate(generated.tolist()):
            want = allowed(tokenizer.decode(row), LANGUAGE, vocab, eos=(eos,))
            assert (carried[i] == want).all()
            assert not carried[i, [tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids("<tool>")]].any()
            seen.append(i)
        return logits

    table = np.random.default_rng(9).normal(size=(len(vocab), len(vocab)))
    beam_search_batch(lambda s, y: (table[y], s), np.zeros((2, 1)), [[5], [7]], eos_token_id=eos, max_steps=20,
                      beam_size=6, logits_processors=[grammar, check])
    assert len(seen) > 30


def test_a_cached_grammar_keeps_its_tokenizer_so_no_later_tokenizer_is_served_it():
    import gc
    import weakref

    from beamsearch.processors import grammar_engine

    tok = bpe(290)
    alive = weakref.ref(tok)
    Grammar.json_schema(SCHEMA, tok)
    del tok
    gc.collect()
    # while its compiled grammar is cached, the tokenizer lives: its id cannot be given to another
    # tokenizer, whose vocabulary would then be served masks built for this one
    assert alive() is not None
    assert any(alive() in key[-1] for key in grammar_engine._COMPILED)


def test_a_tokenizer_the_engine_cannot_read_is_named():
    """A fast tokenizer without a decoder (its tokens' bytes cannot be told): a ValueError that says
    the grammar engine cannot read the tokenizer, with the engine's reason."""
    tok = bpe(280)
    tok.backend_tokenizer.decoder = None
    with pytest.raises(ValueError, match=r"^tokenizer \w+ cannot be read by the grammar engine \(it needs each token's "
                                         r"bytes, from the tokenizer's model and decoder\): .*decoder"):
        Grammar.regex("x+", tok)
