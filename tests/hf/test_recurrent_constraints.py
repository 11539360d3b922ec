"""Grammars (regex and JSON Schema), catalogues and exact search over recurrent and hybrid models
(tiny random-weight configs of ``tests/hf/test_recurrent.py``): a state-space model (Mamba), a hybrid
of linear and full attention (Qwen3.5) and a model whose state is outside a ``Cache`` (RWKV).
Oracles: the same search over a step that runs each row's whole prefix through the model at
every call, no cache (:class:`test_hf_step.Recompute`: nothing is carried, reordered or joined);
and an independent checker of every finished output (``re.fullmatch``, ``json.loads`` with
``jsonschema``, the catalogue's entries)."""

from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from beamsearch import beam_search_batch, exact_search  # noqa: E402
from beamsearch.hf import causal_lm, generate  # noqa: E402
from beamsearch.processors import Catalogue, Grammar  # noqa: E402
from tests.hf.test_recurrent import EOS, PROMPTS, V, build  # noqa: E402
from tests.hf.test_recurrent_features import KINDS, TWO, hypotheses, same  # noqa: E402
from tests.hf.test_reward import Recompute  # noqa: E402
from tests.processors.test_grammar_tokenizers import SCHEMA, bpe  # noqa: E402

# the models' 50 ids as text: 0 pad, 1 bos, 2 unused, 3 eos (no text), then JSON pieces, then filler
PIECES = ['{', '}', '"', ':', ',', '1', '2', 'a', 'b', 'x', '{"a":', '"b":"', 'xb', '"}', ',"b":"x', '":']
VOCAB = ["", "", "", ""] + PIECES + [f"q{i}" for i in range(V - 4 - len(PIECES))]
REGEX = r'\{"a":[12](,"b":"xb?")?\}'
ENTRIES = [[7, 8, 9], [7, 8], [20, 21, 22, 23], [20, 5], [30]]
STEPS = 9  # the longest accepted text takes 5 tokens here ('{"a":', '2', ',"b":"x', 'b', '"}'), then eos


def text(tokens):
    return "".join(VOCAB[t] for t in tokens if t != EOS)


def in_schema(s):
    try:
        return jsonschema.Draft202012Validator(SCHEMA).is_valid(json.loads(s))
    except ValueError:
        return False


CHECKS = {"regex": lambda tokens: re.fullmatch(REGEX, text(tokens)) is not None,
          "json_schema": lambda tokens: in_schema(text(tokens)),
          "catalogue": lambda tokens: list(tokens[:-1]) in ENTRIES}


def processor(kind):
    if kind == "regex":
        return Grammar.regex(REGEX, VOCAB, eos_token_id=EOS)
    if kind == "json_schema":
        return Grammar.json_schema(SCHEMA, VOCAB, eos_token_id=EOS)
    return Catalogue(ENTRIES, EOS)


def both(model, prompts, run):
    """``run(step, state, prompts)`` over the adapter and over full recomputation."""
    dec = causal_lm(model, prompts, max_new_tokens=STEPS)
    ref = Recompute(model)
    return run(dec.step, dec.init_state, dec.prompts), run(ref.step, ref.init_state(prompts), prompts)


@pytest.mark.parametrize("constraint", list(CHECKS))
@pytest.mark.parametrize("kind", KINDS)
def test_grammars_and_catalogues_carry_the_state_as_full_recomputation_gives(kind, constraint):
    """Beam search with the processor: the hypotheses of full recomputation, and every finished
    one accepted by the independent checker (and at least one finished per input)."""
    model = build(kind, eos_bias=2.0)

    def run(step, state, prompts):
        return beam_search_batch(step, state, prompts, beam_size=3, n_best=3, eos_token_id=EOS, max_steps=STEPS,
                                 logits_processors=[processor(constraint)])

    got, want = both(model, TWO, run)
    same(hypotheses(got), hypotheses(want))
    for hyps in got:
        finished = [h for h in hyps if h.finished]
        assert finished and all(CHECKS[constraint](h.tokens) for h in finished)


@pytest.mark.parametrize("kind", KINDS)
def test_exact_search_carries_the_state_as_full_recomputation_gives(kind):
    """Exact search (``mode="exact"``) with a small node budget: its outputs, proof flags and row counts those of
    full recomputation (its prefixes are joined from several model calls and selected per step)."""
    model = build(kind, eos_bias=1.0)

    def run(step, state, prompts):
        return exact_search(step, state, prompts, eos_token_id=EOS, max_steps=3, n_best=2, seed_beam=2,
                      node_budget=24, batch_rows=5)

    got, want = both(model, TWO, run)
    same(hypotheses(got), hypotheses(want))
    assert got.proven.tolist() == want.proven.tolist()
    assert got.expanded.tolist() == want.expanded.tolist() and max(got.expanded.tolist()) > 5


@pytest.mark.parametrize("kind", KINDS)
def test_a_catalogue_with_exact_search_gives_only_entries(kind):
    """A catalogue bounds the outputs: exact search proves its best entries, as recomputation."""
    model = build(kind)

    def run(step, state, prompts):
        return exact_search(step, state, prompts, eos_token_id=EOS, max_steps=5, n_best=3,
                      logits_processors=[Catalogue(ENTRIES, EOS)])

    got, want = both(model, PROMPTS, run)
    same(hypotheses(got), hypotheses(want))
    assert got.proven.all()
    assert all(len(hyps) == 3 and all(CHECKS["catalogue"](h.tokens) for h in hyps) for hyps in got)


def test_generate_with_a_json_schema_on_a_state_space_model():
    """``hf.generate(json_schema=)`` on Mamba with a byte-level BPE: every text valid JSON under
    the schema, and the hypotheses those of the library search with the Grammar processor over
    full recomputation."""
    tok = bpe()
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, hidden_size=16,
        state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=4)).eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    prompts = ['{"a":1}', '{"b"']
    got = generate(model, prompts, tokenizer=tok, num_beams=3, num_return_sequences=2, max_new_tokens=12,
                   length_penalty=0.0, json_schema=SCHEMA)
    for hyps, texts in zip(got.hypotheses, got.texts, strict=True):
        assert hyps and all(h.finished for h in hyps)
        assert all(jsonschema.Draft202012Validator(SCHEMA).is_valid(json.loads(t)) for t in texts)
    rows = [tok(p)["input_ids"] for p in prompts]
    ref = Recompute(model)
    want = beam_search_batch(ref.step, ref.init_state(rows), rows, eos_token_id=tok.eos_token_id, max_steps=12,
                             beam_size=3, n_best=2, alpha=0.0, length_penalty="power",
                             logits_processors=[Grammar.json_schema(SCHEMA, tok)])
    same(hypotheses(got.hypotheses), hypotheses(want))
