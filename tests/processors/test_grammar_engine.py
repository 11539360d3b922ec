"""The grammar engine's edges: the packed mask at the vocabulary's end (a width that is a multiple
of 32, one that is not, eos ids at or past it), the eos ids of a compiled grammar cleared where the
matcher cannot end, no rows at all, the cache (keyed on the schema's text in its key order, options
part of the key in any order, least recently used dropped), the executors (one per thread count, one thread below
``PARALLEL_ROWS`` rows), the options' order, the tokenizers (a vocabulary of strings: greedy
longest match; a Hugging Face one: its added tokens counted, its id in the key), and the messages.

Oracles, written here from the definitions: the allowed set of each case derived by hand from
the regex or the schema (written beside it); a plain greedy longest-match tokenizer for the
vocabulary of strings.
"""

from __future__ import annotations

import json
import re
import sys
from collections import OrderedDict

import numpy as np
import pytest

pytest.importorskip("llguidance")

from beamsearch.processors import grammar_engine as ge  # noqa: E402

# 0: eos, 1..26: 'a'..'z', 27: 'ab', 28: ' ', 29: '[', 30: ']', 31: ','  (32 ids: one int32 word)
VOCAB = ["<eos>"] + [chr(ord("a") + i) for i in range(26)] + ["ab", " ", "[", "]", ","]
EOS = np.array([0])


def ids(text):
    return [VOCAB.index(t) for t in text]


def allowed_after(compiled, *prefixes, n_vocab=32):
    """The allowed ids (a set per row) of one matcher per prefix (a list of token texts)."""
    matchers = []
    for p in prefixes:
        m = compiled.root.deep_copy()
        for t in ids(p):
            assert m.consume_token(t)
        matchers.append(m)
    bits = ge.unpack_bits(compiled.fill(matchers), n_vocab)
    return [set(np.flatnonzero(b).tolist()) for b in bits]


LETTERS = set(range(1, 27)) | {27}  # every token of [a-z]* : the 26 letters and 'ab'


def test_the_mask_ends_at_n_vocab():
    """[a-z]* over 32 ids: the letters, 'ab' and eos (the empty string is accepted). The same
    matcher read as a grammar of 21 ids: ids 0..20 only (the last byte cut inside, the next
    bytes zeroed); of 32 ids with an eos id 32 (past the vocabulary): nothing breaks."""
    c = ge.compile_grammar("regex", "[a-z]*", VOCAB, EOS, None)
    assert c.n_vocab == 32
    assert allowed_after(c, []) == [LETTERS | {0}]
    assert allowed_after(ge.Compiled(c.root, 21, EOS), [], n_vocab=32) == [set(range(21))]
    assert allowed_after(ge.Compiled(c.root, 32, np.array([0, 32])), []) == [LETTERS | {0}]
    assert c.fill([]).shape == (0, 4) and c.fill([]).dtype == np.uint8
    assert c.consume([], np.zeros(0, np.int64)).shape == (0,)


def test_eos_ids_only_where_the_matcher_can_end():
    """Regex "ab" with eos ids 0 and 31: at the start 'a' and 'ab'; after 'a' only 'b'; after
    'ab' both eos ids. Read with eos ids 0 and 27 instead (27, 'ab', a token the engine allows at
    the start): 27 is cleared where the matcher cannot end, kept nowhere else."""
    c = ge.compile_grammar("regex", "ab", VOCAB, np.array([0, 31]), None)
    assert allowed_after(c, [], ["a"], ["a", "b"], ["ab"]) == [{1, 27}, {2}, {0, 31}, {0, 31}]
    as_eos = ge.Compiled(c.root, 32, np.array([0, 27]))
    assert allowed_after(as_eos, [], ["a"], ["ab"]) == [{1}, {2}, {0, 31}]
    m = c.root.deep_copy()
    assert c.consume([m], np.array([5])).tolist() == [False]  # 'e' refused: an error state, nothing allowed
    assert ge.unpack_bits(c.fill([m]), 32).sum() == 0


BOOLEANS = {"type": "array", "items": {"type": "boolean"}}


def test_options_and_x_guidance_in_their_order():
    """An array of booleans, after '[': 'f', 't' (false, true) and ']' in compact JSON; a space
    too with whitespace_flexible, set by options or by the schema's x-guidance (options last)."""
    compact = {ids("f")[0], ids("t")[0], ids("]")[0]}
    space = ids(" ")[0]
    flexible = {"whitespace_flexible": True}
    assert allowed_after(ge.compile_grammar("json_schema", BOOLEANS, VOCAB, EOS, None), ["["]) == [compact]
    assert (allowed_after(ge.compile_grammar("json_schema", BOOLEANS, VOCAB, EOS, flexible), ["["])
            == [compact | {space}])
    own = {**BOOLEANS, "x-guidance": flexible}
    assert allowed_after(ge.compile_grammar("json_schema", own, VOCAB, EOS, None), ["["]) == [compact | {space}]
    overridden = ge.compile_grammar("json_schema", own, VOCAB, EOS, {"whitespace_flexible": False})
    assert allowed_after(overridden, ["["]) == [compact]


# 0: eos, then the characters of compact JSON objects of two booleans
JSON_VOCAB = ["<eos>", "{", "}", '"', ":", ",", "a", "b", "t", "r", "u", "e", "f", "l", "s"]


def json_allowed_after(compiled, text):
    """The allowed ids after ``text`` (one character per token)."""
    m = compiled.root.deep_copy()
    for ch in text:
        assert m.consume_token(JSON_VOCAB.index(ch)), text
    return set(np.flatnonzero(ge.unpack_bits(compiled.fill([m]), len(JSON_VOCAB))[0]).tolist())


def test_the_cache_keys_on_the_schema_as_given_and_drops_the_least_recently_used(monkeypatch):
    """Two schemas that differ only in the order of ``properties``: each gets its own grammar,
    whichever was compiled first (the engine writes keys in the schema's order: after '{"' the
    first key's letter alone, 'a' = 6 for a, b and 'b' = 7 for b, a; after '{"a":true,"' only
    'b'). The options' order is not part of the key (the engine reads them by name)."""
    monkeypatch.setattr(ge, "_COMPILED", OrderedDict())
    ab = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}}, "required": ["a", "b"]}
    ba = {"type": "object", "properties": {"b": {"type": "boolean"}, "a": {"type": "boolean"}}, "required": ["a", "b"]}
    eos = np.array([0])
    for first, second in ((ab, ba), (ba, ab)):
        ge._COMPILED.clear()
        one, two = (ge.compile_grammar("json_schema", s, JSON_VOCAB, eos, None) for s in (first, second))
        assert one is not two
        for schema, compiled in ((first, one), (second, two)):
            keys = list(schema["properties"])
            assert json_allowed_after(compiled, '{"') == {JSON_VOCAB.index(keys[0])}
            assert json_allowed_after(compiled, '{"' + keys[0] + '":true,"') == {JSON_VOCAB.index(keys[1])}
        assert ge.compile_grammar("json_schema", json.dumps(second), JSON_VOCAB, eos, None) is two  # its text: the same
    a = ge.compile_grammar("json_schema", BOOLEANS, VOCAB, EOS, {"whitespace_flexible": True, "coerce_one_of": False})
    b = ge.compile_grammar("json_schema", BOOLEANS, VOCAB, EOS, {"coerce_one_of": False, "whitespace_flexible": True})
    assert a is b
    monkeypatch.setattr(ge, "CACHE_SIZE", 3)
    monkeypatch.setattr(ge, "_COMPILED", OrderedDict())
    first = [ge.compile_grammar("regex", p, VOCAB, EOS, None) for p in ("a", "b", "c")]  # full: 3
    assert ge.compile_grammar("regex", "a", VOCAB, EOS, None) is first[0]  # "a" used last: "b" is the oldest
    ge.compile_grammar("regex", "d", VOCAB, EOS, None)  # drops "b"
    assert ge.compile_grammar("regex", "a", VOCAB, EOS, None) is first[0]
    assert ge.compile_grammar("regex", "c", VOCAB, EOS, None) is first[2]
    assert ge.compile_grammar("regex", "b", VOCAB, EOS, None) is not first[1]


def test_executors_one_per_thread_count_and_one_thread_for_few_rows(monkeypatch):
    made, asked = [], []

    class Pool:
        def __init__(self, threads):
            made.append(threads)

    monkeypatch.setattr(ge, "_EXECUTORS", {})
    monkeypatch.setattr(ge.engine(), "LLExecutor", Pool)
    assert ge.executor(3) is ge.executor(3) and ge.executor(None) is not ge.executor(3)
    assert made == [3, None]
    monkeypatch.undo()
    c = ge.compile_grammar("regex", "[a-z]*", VOCAB, EOS, None)
    pool = ge.executor
    monkeypatch.setattr(ge, "executor", lambda threads: asked.append(threads) or pool(threads))
    for k in (1, ge.PARALLEL_ROWS - 1, ge.PARALLEL_ROWS):
        assert allowed_after(c, *([[]] * k)) == [LETTERS | {0}] * k
    assert asked == [1, 1, None]


def greedy(vocab, eos, text):
    """Longest token first at each position (the lowest id among equally long ones); a byte no
    token starts with is skipped."""
    by_text = {}
    for v, t in enumerate(vocab):
        if t and v not in eos:
            by_text.setdefault(t.encode(), v)
    data, out, i = text.encode(), [], 0
    while i < len(data):
        for n in range(len(data) - i, 0, -1):
            if data[i:i + n] in by_text:
                out.append(by_text[data[i:i + n]])
                i += n
                break
        else:
            i += 1
    return out


def test_a_vocabulary_of_strings_tokenizes_by_greedy_longest_match():
    vocab = ["<eos>", "a", "b", "ab", "abc", "", "c", "é", "bc", "ab"]
    tok, _ = ge._lltokenizer(ge.engine(), vocab, np.array([0]))
    for text in ("abcab", "xabcx", "bcab", "ééa", "", "<eos>", "cab"):
        assert tok.tokenize_str(text) == greedy(vocab, {0}, text), text
    assert tok.tokenize_str("abcab") == [4, 3]
    assert tok.tokenize_bytes(b"ab\xffc") == [3, 6]


def bpe(extra):
    """A tiny byte-level BPE with ``extra`` added tokens, its eos and pad special."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=["<eos>", "<pad>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["abab", "ba"] * 5, trainer)
    out = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    out.add_tokens([f"<x{i}>" for i in range(extra)])
    return out


def test_a_hugging_face_tokenizer_counts_its_added_tokens_and_has_its_own_key():
    """Two tokenizers, 3 and 11 added tokens: each compiled grammar is as wide as its tokenizer
    (added tokens included), the same grammar compiled for each. The eos ids are the search's
    (here the pad id), not the tokenizer's."""
    small, large = bpe(3), bpe(11)
    assert len(large) == len(small) + 8
    for tok in (small, large):
        pad = tok.pad_token_id
        c = ge.compile_grammar("regex", "a", tok, np.array([pad]), None)
        assert c.n_vocab == len(tok)
        m = c.root.deep_copy()
        assert m.consume_token(tok.convert_tokens_to_ids("a"))
        assert set(np.flatnonzero(ge.unpack_bits(c.fill([m]), c.n_vocab)[0]).tolist()) == {pad}


def test_the_messages():
    with pytest.raises(ValueError,
                       match="^lark " + re.escape(repr("start: foo")) + " is refused by the grammar engine: "):
        ge.compile_grammar("lark", "start: foo", VOCAB, EOS, None)
    schema = {"type": "nonsense", "minimum": 1}  # shown as given, its keys in their order
    with pytest.raises(ValueError, match="^json_schema " + re.escape(repr('{"type": "nonsense", "minimum": 1}'))):
        ge.compile_grammar("json_schema", schema, VOCAB, EOS, None)


def test_without_llguidance_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(ImportError, match=r"^beamsearch\.processors\.Grammar needs the llguidance package: install the "
                                          r"grammar extra \(in the beamsearch checkout: pip install -e "
                                          r"'\.\[grammar\]'\), or pip install llguidance==1\.9\.1$"):
        ge.engine()
