"""``hf.generate(json_schema=, grammar=, regex=)`` with the model's tokenizer (a byte-level BPE
trained here): every finished text is accepted by an independent parser (json.loads +
jsonschema, re.fullmatch, lark), and the result is the library search with the Grammar processor
over the same model (a plain reference of the same rule)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("llguidance")

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.hf import causal_lm, generate  # noqa: E402
from beamsearch.processors import Grammar  # noqa: E402
from oracles.grammar import lark_parser  # noqa: E402
from tests.processors.test_grammar_tokenizers import SCHEMA, bpe  # noqa: E402

LARK = 'start: "{" PAIR ("," PAIR)* "}"\nPAIR: /"[ab]":[12]/\n'
REGEX = r'\{"a":[12](,"b":"xb?")?\}'


@pytest.fixture(scope="module")
def setup():
    tok = bpe()
    torch.manual_seed(3)
    config = transformers.GPT2Config(vocab_size=len(tok) + 4, n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def valid(kind):
    import jsonschema

    if kind == "json_schema":
        return lambda s: jsonschema.Draft202012Validator(SCHEMA).is_valid(json.loads(s))
    if kind == "regex":
        return lambda s: re.fullmatch(REGEX, s) is not None
    return lark_parser(LARK)


@pytest.mark.parametrize("kind,source", [("json_schema", SCHEMA), ("regex", REGEX), ("grammar", LARK)])
def test_generate_with_a_grammar_gives_accepted_texts_and_the_library_search(setup, kind, source):
    model, tok = setup
    prompts = ['{"a":1}', '{"b"']
    got = generate(model, prompts, tokenizer=tok, num_beams=4, num_return_sequences=3, max_new_tokens=16,
                   length_penalty=0.0, **{kind: source})
    accepts = valid(kind)
    for hyps, texts in zip(got.hypotheses, got.texts, strict=True):
        assert hyps and all(h.finished for h in hyps)
        assert all(accepts(t) for t in texts)
    grammar = Grammar({"json_schema": "json_schema", "regex": "regex", "grammar": "lark"}[kind], source, tok)
    rows = [tok(p)["input_ids"] for p in prompts]
    dec = causal_lm(model, rows, eos_token_id=tok.eos_token_id, max_new_tokens=16)
    want = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=16,
                             beam_size=4, n_best=3, alpha=0.0, length_penalty="power", logits_processors=[grammar])
    for hyps, ref in zip(got.hypotheses, want, strict=True):
        assert [h.tokens for h in hyps] == [h.tokens for h in ref]
        assert [h.logprob for h in hyps] == pytest.approx([h.logprob for h in ref], abs=1e-4)


def test_grammar_settings_are_checked_before_the_model_runs(setup):
    model, tok = setup
    with pytest.raises(ValueError, match="exclude each other"):
        generate(model, ['{'], tokenizer=tok, json_schema=SCHEMA, regex=REGEX, max_new_tokens=4)
    with pytest.raises(ValueError, match="json_schema= needs the model's tokenizer"):
        generate(model, [[5, 6]], json_schema=SCHEMA, max_new_tokens=4)
    with pytest.raises(ValueError, match="refused by the grammar engine"):
        generate(model, ['{'], tokenizer=tok, grammar="start: (", max_new_tokens=4)
    assert np.isfinite(generate(model, ['{'], tokenizer=tok, regex="a+", max_new_tokens=4).hypotheses[0][0].logprob)
