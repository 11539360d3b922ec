"""Differential tests against ``transformers``' ``generate()`` on small random-weight models."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from beamsearch import beam_search_batch, beam_search_each, select_state  # noqa: E402
from beamsearch.hf import causal_lm, seq2seq_lm  # noqa: E402

VOCAB, EOS, PAD, BOS = 97, 3, 0, 1
PROMPTS = [[5, 17, 33, 8, 41], [9], [60, 2, 77], [11, 12, 13, 14, 15, 16, 17]]


def gpt2(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # sharper than the default init, so that outputs differ between searches
        model.lm_head.weight.mul_(8.0)
    return model


def bart(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                  decoder_ffn_dim=64, max_position_embeddings=64, bos_token_id=BOS,
                                  eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=EOS,
                                  forced_bos_token_id=None, forced_eos_token_id=None)
    model = transformers.BartForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def boost_eos(model, amount: float):
    """Add ``amount`` to the eos logit (a bias on the output layer)."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            model.final_logits_bias[0, EOS] += amount
        else:
            head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
            head.weight.copy_(model.lm_head.weight)
            head.bias.zero_()
            head.bias[EOS] = amount
            model.lm_head = head
    return model


def left_padded(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def right_padded(prompts):
    width = max(map(len, prompts))
    ids = torch.tensor([p + [PAD] * (width - len(p)) for p in prompts])
    mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prompts])
    return ids, mask


def generated(model, prompts, **kw):
    """generate() on the batch; per input, the new tokens (up to and including eos)."""
    if model.config.is_encoder_decoder:
        ids, mask = right_padded(prompts)
    else:
        ids, mask = left_padded(prompts)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, return_dict_in_generate=True,
                             output_scores=True, **kw)
    start = 1 if model.config.is_encoder_decoder else ids.shape[1]
    rows = []
    for seq in out.sequences[:, start:].tolist():
        row = []
        for t in seq:
            row.append(t)
            if t == kw.get("eos_token_id", EOS) and kw.get("eos_token_id", EOS) is not None:
                break
        rows.append(row)
    return rows, out


def rescore(model, prompt, tokens):
    """Teacher forcing: the sum of log p(token | prompt, previous tokens), one row, no cache."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            dec = torch.tensor([[model.config.decoder_start_token_id] + tokens[:-1]])
            logits = model(input_ids=torch.tensor([prompt]), decoder_input_ids=dec).logits[0]
            logp = torch.log_softmax(logits.float(), dim=-1)
            return sum(logp[i, t].item() for i, t in enumerate(tokens))
        ids = torch.tensor([prompt + tokens])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
        return sum(logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens))


def prepare(model, prompts, **kw):
    return (seq2seq_lm if model.config.is_encoder_decoder else causal_lm)(model, prompts, **kw)


MODELS = {"gpt2": gpt2, "bart": bart}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_equals_generate(name, seed):
    model = MODELS[name](seed)
    expected, _ = generated(model, PROMPTS, num_beams=1, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    dec = prepare(model, PROMPTS)
    # the first step's y_prev is already in the prefill (causal LM) or is the decoder start
    got = beam_search_each(dec.step, dec.init_state, len(PROMPTS), dec.prompts[0][-1], dec.eos_token_id,
                           beam_size=1, max_len=12, length_penalty=0.0)
    assert [hyps[0].tokens for hyps in got] == expected


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("beams", [2, 4])
def test_beam_search_equals_generate_where_the_rules_coincide(name, beams):
    """eos never produced, power length penalty, n-best = beams: same sequences, same scores."""
    model = MODELS[name](3)
    steps = 8
    expected, out = generated(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=steps,
                              eos_token_id=None, pad_token_id=PAD, length_penalty=1.0, early_stopping=False)
    dec = prepare(model, PROMPTS, eos_token_id=None)
    results = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                max_steps=steps, beam_size=beams, n_best=beams, alpha=1.0, length_penalty="power")
    for i, hyps in enumerate(results):
        assert [h.tokens for h in hyps] == expected[i * beams:(i + 1) * beams]
        for j, h in enumerate(hyps):
            # both divide the logprob by the number of generated tokens ** 1.0
            assert h.score == pytest.approx(out.sequences_scores[i * beams + j].item(), abs=1e-5)
            assert h.score == pytest.approx(h.logprob / steps, abs=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_with_eos_every_hypothesis_rescores_and_the_best_is_no_worse(name):
    """Our live beams are generate's running beams, and we keep every eos extension of them
    (generate keeps those among its top 2 * beams), so our best finished score is at least
    generate's best finished score under the same penalty."""
    model = boost_eos(MODELS[name](5), 5.0)  # eos likely enough that both searches finish hypotheses
    steps, beams = 12, 4
    dec = prepare(model, PROMPTS)
    results = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=EOS, max_steps=steps,
                                beam_size=beams, n_best=beams, alpha=1.0, length_penalty="power")
    theirs, _ = generated(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=steps,
                          eos_token_id=EOS, pad_token_id=PAD, length_penalty=1.0, early_stopping="never")
    compared = 0
    for i, (prompt, hyps) in enumerate(zip(PROMPTS, results, strict=True)):
        assert hyps
        for h in hyps:
            assert h.logprob == pytest.approx(rescore(model, prompt, h.tokens), abs=1e-4)
        their_finished = [t for t in theirs[i * beams:(i + 1) * beams] if t[-1] == EOS]
        if their_finished:
            compared += 1
            best_theirs = max(rescore(model, prompt, t) / len(t) for t in their_finished)
            assert max(h.score for h in hyps if h.finished) >= best_theirs - 1e-5
    assert compared >= 2


def test_stopped_inputs_leave_the_cache():
    model = gpt2(7)
    dec = causal_lm(model, PROMPTS)
    sizes = []
    inner = dec.step

    def step(state, y_prev):
        first = state.first is not None
        logits, new = inner(state, y_prev)
        if not first:  # the cache the model wrote this step's column into (a waiting reorder applied)
            sizes.append((new.cache.layers[0].keys.shape[0], len(y_prev)))
        return logits, new

    beam_search_batch(step, dec.init_state, dec.prompts, eos_token_id=EOS, max_steps=10, beam_size=3)
    assert sizes
    assert all(cache_rows == rows for cache_rows, rows in sizes)  # the cache has exactly the live rows


class Tracked:
    """Wraps the adapter's state so that the test sees every reorder the engine asks for."""

    selects = 0

    def __init__(self, inner):
        self.inner = inner


@select_state.register(Tracked)
def _select_tracked(state, idx):
    Tracked.selects += 1
    return Tracked(select_state(state.inner, idx))


def test_steps_that_keep_the_rows_in_order_do_not_reorder_the_cache():
    """beam_size=1 and one input, eos never possible: every step's parents are [0], the
    identity, so the engine must hand the step's own state object back without select_state."""
    model = gpt2(7)
    dec = prepare(model, PROMPTS[:1], eos_token_id=None)  # eos is an extra column that is always -inf
    returned, received = [], []

    def step(state, y_prev):
        received.append(state)
        # the engine finds no tensor inside Tracked, so y_prev and the logits are numpy here
        logits, inner = dec.step(state.inner, torch.as_tensor(y_prev))
        returned.append(Tracked(inner))
        return logits, returned[-1]

    steps = 6
    Tracked.selects = 0
    (hyps,) = beam_search_batch(step, Tracked(dec.init_state), dec.prompts, eos_token_id=dec.eos_token_id,
                                max_steps=steps, beam_size=1)
    assert len(hyps[0].tokens) == steps and not hyps[0].finished and len(received) == steps
    assert Tracked.selects == 0
    assert all(got is sent for got, sent in zip(received[1:], returned, strict=False))  # the very objects: no copy
    # the counter works: with two beams the first step goes from 1 row to 2, a real reorder
    dec = prepare(model, PROMPTS[:1], eos_token_id=None)
    beam_search_batch(step, Tracked(dec.init_state), dec.prompts, eos_token_id=dec.eos_token_id,
                      max_steps=3, beam_size=2)
    assert Tracked.selects >= 1


def test_select_state_with_the_identity_order_returns_an_equal_copy():
    cache = causal_lm(gpt2(7), PROMPTS).init_state.cache
    same = select_state(cache, torch.arange(len(PROMPTS)))
    assert same is not cache and len(same.layers) == len(cache.layers)
    for new, old in zip(same.layers, cache.layers, strict=True):
        assert new is not old
        assert torch.equal(new.keys, old.keys) and torch.equal(new.values, old.values)


def test_a_models_own_cache_reordered_by_select_state_still_takes_gradients():
    """select_state on a model's own ``EncoderDecoderCache`` (a user's step function, grad on) keeps
    ordinary tensors: the next forward can be differentiated, and the gradient through the
    reordered cross-attention keys equals the one through the cache not reordered (one row, so
    the reorder is the identity)."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    model = bart(3)
    source = torch.tensor([[5, 6, 7]])
    grads = []
    for reorder in (False, True):
        model.zero_grad()
        encoded = model.get_encoder()(input_ids=source)
        out = model(encoder_outputs=encoded, decoder_input_ids=torch.tensor([[EOS]]),
                    cache=EncoderDecoderCache(DynamicCache(), DynamicCache()))
        cache = select_state(out.past_key_values, torch.tensor([0])) if reorder else out.past_key_values
        assert not any(layer.keys.is_inference() for layer in cache.cross_attention_cache.layers)
        logits = model(encoder_outputs=encoded, decoder_input_ids=torch.tensor([[9]]), cache=cache).logits
        logits[0, -1, 11].backward()
        grads.append(model.model.encoder.layers[0].fc1.weight.grad.clone())
    assert torch.allclose(grads[0], grads[1])


def test_a_cache_layer_without_keys_is_a_clear_error():
    """Both reorders (a copy for a model's own cache, in place for the adapter's state) name a
    layer kind they do not know."""
    class Opaque:
        pass

    dec = causal_lm(gpt2(7), PROMPTS)
    for state in (dec.init_state.cache, dec.init_state):
        cache = dec.init_state.cache
        saved, cache.layers = cache.layers, [Opaque()]
        try:
            with pytest.raises(TypeError, match="cache layers of type Opaque"):
                select_state(state, torch.tensor([0, 0, 1, 2]))
        finally:
            cache.layers = saved


def test_string_prompts_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        causal_lm(gpt2(), ["hello"])


def test_several_eos_ids_from_the_generation_config_equal_generate():
    # a Llama 3 / Qwen2.5-style generation config with two eos ids: generate stops at either, and
    # so must we (greedy with the section 4 rule, and the batched search where the rules coincide)
    model = boost_eos(gpt2(2), 4.5)  # chosen so that one output ends with each id, two run on
    second = 7
    with torch.no_grad():
        model.lm_head.bias[second] += 4.5  # make the second eos id likely too
    model.generation_config.eos_token_id = [EOS, second]
    ids, mask = left_padded(PROMPTS)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, num_beams=1, max_new_tokens=12,
                             pad_token_id=PAD)
    expected = []
    for seq in out[:, ids.shape[1]:].tolist():
        row = []
        for t in seq:
            row.append(t)
            if t in (EOS, second):
                break
        expected.append(row)
    assert {row[-1] for row in expected} >= {EOS, second}  # both ids do end outputs here
    dec = causal_lm(model, PROMPTS)
    assert dec.eos_token_id == [EOS, second]
    got = beam_search_each(dec.step, dec.init_state, len(PROMPTS), dec.prompts[0][-1], dec.eos_token_id,
                           beam_size=1, max_len=12, length_penalty=0.0)
    assert [hyps[0].tokens for hyps in got] == expected
    for prompt, hyps in zip(PROMPTS, got, strict=True):  # and the logprobs are the model's own
        assert hyps[0].logprob == pytest.approx(rescore(model, prompt, hyps[0].tokens), abs=1e-4)
    dec = causal_lm(model, PROMPTS)
    batch = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=12,
                              beam_size=3, n_best=3, length_penalty="power", alpha=1.0)
    for prompt, hyps in zip(PROMPTS, batch, strict=True):
        for h in hyps:
            assert h.tokens[-1] in (EOS, second) if h.finished else not set(h.tokens) & {EOS, second}
            assert h.logprob == pytest.approx(rescore(model, prompt, h.tokens), abs=1e-4)


@pytest.mark.parametrize("call, message", [
    (lambda m: causal_lm(m, []), "prompts must hold at least one input"),
    (lambda m: causal_lm(m, [[5], []]), r"prompts\[1\] is empty"),
    (lambda m: causal_lm(m, [[5]], eos_token_id=[3, "x"]), r"eos_token_id\[1\] must be an integer"),
    (lambda m: causal_lm(m, [[5]], eos_token_id=2.5), "eos_token_id must be an integer"),
])
def test_bad_hf_input_is_a_clear_error(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(gpt2())


def test_seq2seq_empty_source_is_a_clear_error():
    with pytest.raises(ValueError, match=r"sources\[0\] is empty"):
        seq2seq_lm(bart(), [[]])


def test_a_model_in_training_mode_is_warned_about():
    model = gpt2().train()
    with pytest.warns(UserWarning, match="training mode"):
        causal_lm(model, [[5, 6]])
