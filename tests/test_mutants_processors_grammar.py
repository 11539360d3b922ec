"""The grammar processor's edges: logits wider than the tokenizer (by less than a byte, by
several bytes, several rows), the support left exactly at its share, options reaching the
engine, and every message in full.

Oracles, written here from the definitions: the allowed sets derived by hand from the regex or
the schema (beside each case); the support rule ``SUPPORT_SHARE * pairs <= bits`` counted by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llguidance")

from beamsearch.backends import backend_of  # noqa: E402
from beamsearch.processors import Grammar, StepContext  # noqa: E402
from beamsearch.processors.grammar import SUPPORT_SHARE  # noqa: E402

# 0: eos, 1..26: 'a'..'z', 27: 'ab', 28: ' ', 29: '[', 30: ']', 31: ','  (n_vocab 32)
VOCAB = ["<eos>"] + [chr(ord("a") + i) for i in range(26)] + ["ab", " ", "[", "]", ","]


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
    g = Grammar.regex("[a-z]*", VOCAB, eos_token_id=0)
    out, _ = step(g, np.zeros((3, vocab)), [[1, 1], [27, 2], [3, 4]])
    want = np.zeros(vocab, bool)
    want[:28] = True
    assert (np.isfinite(out) == want).all()


@pytest.mark.parametrize("vocab, left", [(256, True), (248, False)])
def test_the_support_at_its_share(vocab, left):
    """Regex "a", one row at the start: one allowed pair (token 1). Left for the selection when
    SUPPORT_SHARE * 1 <= 8 * 32 bytes = 256 (V = 256), not when the mask is 31 bytes (V = 248)."""
    assert SUPPORT_SHARE == 256
    g = Grammar.regex("a", VOCAB, eos_token_id=0)
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
    assert set(np.flatnonzero(Grammar.json_schema(schema, VOCAB, eos_token_id=0).allowed_after([29]))) == compact
    flexible = Grammar.json_schema(schema, VOCAB, eos_token_id=0, options={"whitespace_flexible": True})
    assert set(np.flatnonzero(flexible.allowed_after([29]))) == compact | {28}
    direct = Grammar("json_schema", schema, VOCAB, 0, {"whitespace_flexible": True})
    assert set(np.flatnonzero(direct.allowed_after([29]))) == compact | {28}


def test_the_messages():
    with pytest.raises(TypeError, match=r"^grammar must be a str; got 5$"):
        Grammar.lark(5, VOCAB, eos_token_id=0)
    with pytest.raises(TypeError, match=r"^pattern must be a str; got 5$"):
        Grammar.regex(5, VOCAB, eos_token_id=0)
    with pytest.raises(ValueError, match=r"^tokenizer must not be an empty vocabulary$"):
        Grammar.regex("a", [], eos_token_id=0)
    with pytest.raises(TypeError, match=r"^tokenizer must be a fast Hugging Face tokenizer \(PreTrainedTokenizerFast\) "
                                        r"or a list of token strings; got object$"):
        Grammar.regex("a", object(), eos_token_id=0)
    with pytest.raises(ValueError, match=r"^eos_token_id is required: the tokenizer has no eos_token_id \(pass the "
                                         r"search's\)$"):
        Grammar.regex("a", VOCAB)
    with pytest.raises(TypeError, match=r"^eos_token_id must be an integer; got 'x' of type str$"):
        Grammar.regex("a", VOCAB, eos_token_id="x")
    with pytest.raises(ValueError, match=r"^kind must be one of json_schema, lark, regex; got 'nope'$"):
        Grammar("nope", "a", VOCAB, 0)
    with pytest.raises(ValueError, match=r"^options must be None or a dict, for json_schema only; got \{'a': 1\} "
                                         r"for kind 'regex'$"):
        Grammar("regex", "a", VOCAB, 0, {"a": 1})
    with pytest.raises(TypeError, match=r"^tokens must be a sequence of token ids; got 'x'$"):
        Grammar.regex("a", VOCAB, eos_token_id=0).allowed_after("x")
