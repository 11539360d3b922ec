"""``hf.generate`` called as ``model.generate`` is called, and ``generate``'s outputs.

Oracles: ``model.generate`` itself on random-weight models built from configs, where the rules
coincide: ``mode="transformers"`` (generate's own beam search rule) and greedy decoding
(``num_beams=1``). ``sequences`` and ``beam_indices`` identical; ``sequences_scores``, ``scores``
and ``logits`` to 1e-5 (generate runs the prompt on N * num_beams rows, we on N: the same values
up to float32 rounding).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from beamsearch.hf import generate  # noqa: E402
from tests.hf.test_generation import tokenizer  # noqa: E402
from tests.hf.test_generation_models import EOS, PAD, PROMPTS, build, padded  # noqa: E402

BEAM = dict(num_beams=3, num_return_sequences=2, max_new_tokens=7)


def generates(model, ids, mask, **kw):
    """model.generate with every output."""
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, do_sample=False, return_dict_in_generate=True,
                              output_scores=True, output_logits=True, **kw)


def same_rows(ours, theirs, width, tol):
    """Our per-step tensors against generate's: every row we have (finite) equals generate's row,
    step by step; at step 1 generate holds each input's row num_beams times (we: once, row 0)."""
    assert len(theirs) >= len(ours) >= 1
    compared = 0
    for t, (o, g) in enumerate(zip(ours, theirs, strict=True)):
        assert o.shape == g.shape
        have = torch.isfinite(o).any(dim=1)
        if t == 0:
            assert have.tolist() == [r % width == 0 for r in range(o.shape[0])]
        torch.testing.assert_close(o[have], g[have].float(), atol=tol, rtol=0)
        compared += int(have.sum())
    assert compared > len(ours)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bart"])
def test_the_transformers_rule_gives_every_output_of_generate(name):
    model = build(name, 31, eos_bias=3.0)
    ids, mask = padded(model, PROMPTS)
    out = generates(model, ids, mask, **BEAM, no_repeat_ngram_size=2)
    ours = generate(model, input_ids=ids, attention_mask=mask, mode="transformers", **BEAM, no_repeat_ngram_size=2,
                    return_dict_in_generate=True, output_scores=True, output_logits=True)
    assert torch.equal(ours.sequences, out.sequences)
    torch.testing.assert_close(ours.sequences_scores, out.sequences_scores, atol=1e-5, rtol=0)
    assert torch.equal(ours.beam_indices, out.beam_indices.long())
    same_rows(ours.scores, out.scores, BEAM["num_beams"], 1e-5)
    same_rows(ours.logits, out.logits, BEAM["num_beams"], 1e-4)
    assert any(h.finished for hyps in ours.hypotheses for h in hyps)


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "t5"])
def test_greedy_gives_generates_sequences_and_its_scores_normalized(name):
    """generate's greedy ``scores`` are the processed logits; ours their log_softmax (the same
    argmax), documented on Generation.scores."""
    model = build(name, 32, eos_bias=3.0)
    ids, mask = padded(model, PROMPTS)
    out = generates(model, ids, mask, num_beams=1, max_new_tokens=7, repetition_penalty=1.5)
    ours = generate(model, ids, attention_mask=mask, num_beams=1, max_new_tokens=7, repetition_penalty=1.5,
                    output_scores=True, output_logits=True)
    assert ours.mode == "greedy" and ours.sequences_scores is None and ours.beam_indices is None
    assert torch.equal(ours.sequences, out.sequences)
    same_rows(ours.scores, [torch.log_softmax(s.float(), -1) for s in out.scores], 1, 1e-5)
    same_rows(ours.logits, out.logits, 1, 1e-4)


def test_sequences_without_output_flags_and_from_lists():
    """``sequences`` is always there: token lists are left-padded with the pad id, as a tokenizer
    pads for generate; the steps' tensors only when asked."""
    model = build("gpt2", 33, eos_bias=3.0)
    ids, mask = padded(model, PROMPTS)
    out = generates(model, ids, mask, **BEAM)
    ours = generate(model, PROMPTS, mode="transformers", **BEAM)
    assert torch.equal(ours.sequences, out.sequences)
    assert ours.scores is None and ours.logits is None and ours.beam_indices is None
    torch.testing.assert_close(ours.sequences_scores, out.sequences_scores, atol=1e-5, rtol=0)
    plain = generate(model, PROMPTS, **BEAM)  # the library's rule: sequences are its hypotheses
    for row, h in zip(plain.sequences.tolist(), [h for hyps in plain.hypotheses for h in hyps], strict=True):
        new = row[ids.shape[1]:]
        # generate's beam search fills with ``pad or eos[0]``: the pad id 0 counts as unset there
        assert new[:len(h.tokens)] == h.tokens and set(new[len(h.tokens):]) <= {EOS[0]}


def test_exact_search_has_no_steps_to_record():
    """Refused before the model runs (no forward call)."""
    model = build("gpt2")
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(1))
    with pytest.raises(ValueError, match="output_scores=True: mode 'exact' has no beam steps"):
        generate(model, PROMPTS, mode="exact", max_new_tokens=3, output_scores=True)
    assert calls == []


@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_every_calling_convention_gives_the_same_result(name):
    model = build(name, 34, eos_bias=2.0)
    ids, mask = padded(model, PROMPTS)
    base = generate(model, PROMPTS, **BEAM)
    calls = [generate(model, ids, attention_mask=mask, **BEAM),
             generate(model, input_ids=ids, attention_mask=mask, **BEAM),
             generate(model, **{"input_ids": ids, "attention_mask": mask}, **BEAM),
             generate(model, transformers.BatchEncoding({"input_ids": ids, "attention_mask": mask}), **BEAM),
             generate(model, {"input_ids": ids, "attention_mask": mask}, **BEAM)]
    for got in calls:
        assert [[h.tokens for h in hs] for hs in got.hypotheses] == [[h.tokens for h in hs] for hs in base.hypotheses]


def test_a_tokenizers_output_as_generate_takes_it():
    tok = tokenizer()
    tok.padding_side = "left"
    model = build("gpt2", 35, eos_bias=2.0)
    texts = ["w5 w17 w33", "w9", "w60 w11 w12"]
    batch = tok(texts, return_tensors="pt", padding=True)
    assert "token_type_ids" not in batch
    out = generates(model, batch["input_ids"], batch["attention_mask"], **BEAM)
    ours = generate(model, **batch, mode="transformers", **BEAM)
    same = generate(model, batch, tokenizer=tok, mode="transformers", **BEAM)
    assert torch.equal(ours.sequences, out.sequences) and torch.equal(same.sequences, out.sequences)
    assert same.texts == [[tok.decode(h.tokens, skip_special_tokens=True) for h in hs] for hs in ours.hypotheses]


def test_right_padding_is_read_by_its_mask():
    """generate warns on a right-padded decoder-only batch (its results change); ours are the same
    as the left-padded batch's."""
    model = build("gpt2", 36, eos_bias=2.0)
    width = max(map(len, PROMPTS))
    ids = torch.tensor([p + [PAD] * (width - len(p)) for p in PROMPTS])
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in PROMPTS])
    left = generate(model, PROMPTS, **BEAM)
    right = generate(model, input_ids=ids, attention_mask=mask, **BEAM)
    assert [[h.tokens for h in hs] for hs in right.hypotheses] == [[h.tokens for h in hs] for hs in left.hypotheses]
    assert torch.equal(right.sequences[:, :width], ids.repeat_interleave(2, dim=0))  # the prompt as given


def test_a_padded_batch_without_a_mask_is_read_as_generate_reads_it():
    """The pad id occurs and is not an eos id: the mask is ids != pad (generate's inference), the
    same results as with the mask."""
    model = build("gpt2", 37, eos_bias=2.0)
    ids, mask = padded(model, PROMPTS)
    with_mask = generate(model, ids, attention_mask=mask, **BEAM)
    inferred = generate(model, ids, **BEAM)
    assert [[h.tokens for h in hs] for hs in inferred.hypotheses] == \
        [[h.tokens for h in hs] for hs in with_mask.hypotheses]
    with torch.no_grad():
        theirs = model.generate(input_ids=ids, do_sample=False, num_beams=1, max_new_tokens=5)
    assert torch.equal(generate(model, ids, num_beams=1, max_new_tokens=5).sequences, theirs)


def test_a_pad_id_that_is_an_eos_id_cannot_be_inferred_and_says_so():
    """As generate: no mask is inferred, every position is a token, and the same warning."""
    model = build("gpt2", 38, eos_bias=2.0)
    model.generation_config.pad_token_id = EOS[0]
    ids = torch.tensor([[EOS[0], 5, 6], [9, 10, 11]])
    with pytest.warns(UserWarning, match="cannot be inferred from input because pad token is same as eos token"):
        ours = generate(model, ids, num_beams=1, max_new_tokens=5)
    with torch.no_grad():
        theirs = model.generate(input_ids=ids, do_sample=False, num_beams=1, max_new_tokens=5)
    assert torch.equal(ours.sequences, theirs)


@pytest.mark.parametrize("call, error, message", [
    (lambda m, ids, mask: generate(m, ids, input_ids=ids), TypeError, "given twice"),
    (lambda m, ids, mask: generate(m), TypeError, "needs the inputs"),
    (lambda m, ids, mask: generate(m, input_ids=ids, attention_mask=mask, token_type_ids=mask * 0), ValueError,
     "token_type_ids= is a model input"),
    (lambda m, ids, mask: generate(m, {"input_ids": ids, "offset_mapping": mask}), ValueError,
     "offset_mapping= is a model input"),
    (lambda m, ids, mask: generate(m, {"attention_mask": mask}), ValueError, "must hold input_ids"),
])
def test_inputs_given_wrong_are_clear_errors(call, error, message):
    model = build("gpt2")
    ids, mask = padded(model, PROMPTS)
    with pytest.raises(error, match=message):
        call(model, ids, mask)


CUSTOM = dict(num_beams=3, num_return_sequences=2, max_new_tokens=6, no_repeat_ngram_size=2)


@pytest.mark.parametrize("name", ["gpt2", "bart"])
@pytest.mark.parametrize("how", ["callable", "directory"])
def test_model_generate_with_custom_generate_runs_our_search(name, how):
    """``model.generate(custom_generate=...)`` called as a user calls it: with mode="transformers"
    its outputs are generate's own; with our rule, hf.generate's."""
    from beamsearch import hf

    model = build(name, 39, eos_bias=3.0)
    ids, mask = padded(model, PROMPTS)
    if how == "callable":
        extra = dict(custom_generate=hf.custom_generate)
    else:
        extra = dict(custom_generate=str(hf.CUSTOM_GENERATE_DIR), trust_remote_code=True)
    with torch.no_grad():
        plain = model.generate(input_ids=ids, attention_mask=mask, **CUSTOM)
        ours = model.generate(input_ids=ids, attention_mask=mask, mode="transformers", **CUSTOM, **extra)
        full = model.generate(input_ids=ids, attention_mask=mask, mode="transformers", **CUSTOM, **extra,
                              return_dict_in_generate=True, output_scores=True)
        rule = model.generate(input_ids=ids, attention_mask=mask, **CUSTOM, **extra)
    assert torch.equal(ours, plain)
    theirs = generates(model, ids, mask, **CUSTOM)
    assert torch.equal(full.sequences, theirs.sequences) and torch.equal(full.beam_indices, theirs.beam_indices.long())
    torch.testing.assert_close(full.sequences_scores, theirs.sequences_scores, atol=1e-5, rtol=0)
    assert type(full).__name__ == type(theirs).__name__
    assert torch.equal(rule, generate(model, ids, attention_mask=mask, **CUSTOM).sequences)


def test_custom_generate_refuses_a_hook_it_cannot_see_apart():
    from beamsearch import hf

    model = build("gpt2")
    ids, mask = padded(model, PROMPTS)
    extra = transformers.LogitsProcessorList([transformers.MinLengthLogitsProcessor(3, EOS)])
    with pytest.raises(ValueError, match="logits_processor= .* with custom_generate=hf.custom_generate"):
        model.generate(input_ids=ids, attention_mask=mask, num_beams=2, max_new_tokens=3, logits_processor=extra,
                       custom_generate=hf.custom_generate)
