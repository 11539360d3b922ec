"""``beamsearch.hf.generate`` against ``model.generate`` on ten architectures (small random weights).

GPT-2, Llama, Qwen2, Qwen3, Mistral (sliding window of 4, shorter than the prompts and the
outputs), BART, T5, Marian, mBART and Pegasus, each built from its config with seeded random weights, tiny
sizes. Every generation config holds two eos ids (Llama 3 / Qwen2.5 style). The oracles are
``generate`` itself where its rules and ours coincide, and a teacher-forced rescoring of the
model (one row, no cache, a plain loop) where they do not.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.core.state import select_state  # noqa: E402
from beamsearch.hf import causal_lm, generate, position_limit, seq2seq_lm  # noqa: E402

VOCAB, PAD, BOS, START = 61, 0, 1, 2
EOS = [3, 7]  # two eos ids, as the generation configs of Llama 3 and Qwen2.5 hold
PROMPTS = [[5, 17, 33, 8, 41], [9], [60, 2, 11, 12, 13, 14, 15], [22, 23]]

_DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=40, bos_token_id=BOS, eos_token_id=EOS,
                pad_token_id=PAD)
_SEQ2SEQ = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=40,
                bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=START,
                forced_bos_token_id=None, forced_eos_token_id=None)
CONFIGS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=40, n_embd=32, n_layer=2, n_head=4, bos_token_id=BOS, eos_token_id=EOS,
        pad_token_id=PAD)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**_DECODER)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_DECODER)),
    "qwen3": lambda: transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**_DECODER, head_dim=8)),
    "mistral": lambda: transformers.MistralForCausalLM(transformers.MistralConfig(**_DECODER, sliding_window=4)),
    "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(**_SEQ2SEQ)),
    "t5": lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, eos_token_id=EOS,
        pad_token_id=PAD, decoder_start_token_id=START)),
    "marian": lambda: transformers.MarianMTModel(transformers.MarianConfig(**_SEQ2SEQ)),
    "mbart": lambda: transformers.MBartForConditionalGeneration(transformers.MBartConfig(**_SEQ2SEQ)),
    "pegasus": lambda: transformers.PegasusForConditionalGeneration(transformers.PegasusConfig(**_SEQ2SEQ)),
}
SEQ2SEQ = ("bart", "t5", "marian", "mbart", "pegasus")
NAMES = list(CONFIGS)
SHARPEN = {"t5": 1.0}  # T5's tied head is already sharp at random init (x 8 makes it repeat one token)


def build(name: str, seed: int = 0, *, eos_bias: float = 0.0, dtype=torch.float32):
    """The model ``name`` with seeded random weights, in eval mode, its logits sharpened (x 8, so
    that searches disagree; see SHARPEN) and the eos ids' logits raised by ``eos_bias`` (a hook on the output
    layer, so tied and untied heads alike)."""
    torch.manual_seed(seed)
    model = CONFIGS[name]().to(dtype).eval()
    model.generation_config.eos_token_id = list(EOS)
    model.generation_config.pad_token_id = PAD
    bias = torch.zeros(VOCAB)
    bias[EOS] = eos_bias

    def sharpen(module, args, out):
        return out * SHARPEN.get(name, 8.0) + bias.to(out.dtype)

    model.get_output_embeddings().register_forward_hook(sharpen)
    return model


def padded(model, prompts):
    """generate's input: left padding for a causal LM, right padding for an encoder."""
    width = max(map(len, prompts))
    left = not model.config.is_encoder_decoder
    ids = [([PAD] * (width - len(p)) + p) if left else (p + [PAD] * (width - len(p))) for p in prompts]
    mask = [([0] * (width - len(p)) + [1] * len(p)) if left else ([1] * len(p) + [0] * (width - len(p)))
            for p in prompts]
    return torch.tensor(ids), torch.tensor(mask)


def theirs(model, prompts, **kw):
    """model.generate on the batch -> (per returned sequence, its new tokens up to and including
    the first eos; the output object)."""
    ids, mask = padded(model, prompts)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, return_dict_in_generate=True,
                             output_scores=True, **kw)
    start = 1 if model.config.is_encoder_decoder else ids.shape[1]
    eos = kw.get("eos_token_id", EOS)
    eos = set([] if eos is None else eos)
    rows = []
    for seq in out.sequences[:, start:].tolist():
        row = []
        for t in seq:
            row.append(t)
            if t in eos:
                break
        rows.append(row)
    return rows, out


def rescore(model, prompt, tokens):
    """Teacher forcing, written from the definition: the sum over the tokens of
    log_softmax(model logits) at that token, one row, the whole sequence at once, no cache."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            dec = torch.tensor([[model.generation_config.decoder_start_token_id] + tokens[:-1]])
            logits = model(input_ids=torch.tensor([prompt]), decoder_input_ids=dec).logits[0]
            rows = range(len(tokens))
        else:
            logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0]
            rows = range(len(prompt) - 1, len(prompt) - 1 + len(tokens))
        logp = torch.log_softmax(logits.float(), dim=-1)
        return sum(logp[r, t].item() for r, t in zip(rows, tokens, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_every_config_class_exists_and_builds(name):
    model = build(name)
    assert model.config.is_encoder_decoder == (name in SEQ2SEQ)
    assert position_limit(model) == (None if name == "t5" else 40)


@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_generate_with_two_eos_ids(name):
    model = build(name, 1, eos_bias=2.0)
    expected, _ = theirs(model, PROMPTS, num_beams=1, max_new_tokens=10)
    got = generate(model, PROMPTS, num_beams=1, max_new_tokens=10)
    assert [hyps[0].tokens for hyps in got.hypotheses] == expected
    for prompt, hyps in zip(PROMPTS, got.hypotheses, strict=True):
        h = hyps[0]
        assert h.finished == (h.tokens[-1] in EOS)
        assert h.score == h.logprob  # greedy: no length penalty
        assert h.logprob == pytest.approx(rescore(model, prompt, h.tokens), abs=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_beam_search_equals_generate_where_the_rules_coincide(name):
    """No eos (eos_token_id=None on both sides), the power penalty, n_best = num_beams: the same
    sequences in the same order, and our score is generate's ``sequences_scores``."""
    model, beams, new = build(name, 2), 3, 6
    expected, out = theirs(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=new,
                           eos_token_id=None, length_penalty=1.0, early_stopping=False)
    got = generate(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=new,
                   eos_token_id=None, length_penalty=1.0)
    for i, hyps in enumerate(got.hypotheses):
        assert [h.tokens for h in hyps] == expected[i * beams:(i + 1) * beams]
        for j, h in enumerate(hyps):
            assert h.score == pytest.approx(out.sequences_scores[i * beams + j].item(), abs=1e-5)
            assert h.score == pytest.approx(h.logprob / new, abs=1e-12)  # length_penalty 1: / len ** 1


@pytest.mark.parametrize("name", NAMES)
def test_with_eos_and_no_processors_our_best_finished_is_at_least_generates(name):
    """Without processors our live beams are generate's running beams and we keep every eos
    extension of them (generate keeps those among its top 2 * beams), so our best finished score
    is at least generate's, both scored by our rule: logprob / len (eos counted)."""
    model, beams, new = build(name, 3, eos_bias=4.0), 3, 8
    got = generate(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=new,
                   length_penalty=1.0)
    rows, _ = theirs(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=new,
                     length_penalty=1.0, early_stopping="never")
    compared = 0
    for i, (prompt, hyps) in enumerate(zip(PROMPTS, got.hypotheses, strict=True)):
        for h in hyps:
            assert h.logprob == pytest.approx(rescore(model, prompt, h.tokens), abs=1e-4)
            assert h.score == pytest.approx(h.logprob / len(h.tokens), abs=1e-12)
        finished = [t for t in rows[i * beams:(i + 1) * beams] if t[-1] in EOS]
        if finished:
            compared += 1
            best = max(rescore(model, prompt, t) / len(t) for t in finished)
            assert max(h.score for h in hyps if h.finished) >= best - 1e-5
    assert compared >= 2


# generate's own settings that change its beam search: n-gram blocking, each early_stopping, the
# length penalty's exponent (0: the canonical search; 2: long ones), one eos id in place of two,
# num_return_sequences = num_beams
RULE_SETTINGS = {
    "defaults": dict(),
    "ngram": dict(no_repeat_ngram_size=2),
    "early_true": dict(early_stopping=True),
    "never": dict(early_stopping="never"),
    "never_lp0": dict(early_stopping="never", length_penalty=0.0),
    "lp2_ngram": dict(length_penalty=2.0, no_repeat_ngram_size=3),
    "one_eos": dict(eos_token_id=[7], num_return_sequences=4),
}


@pytest.mark.parametrize("setting", list(RULE_SETTINGS))
@pytest.mark.parametrize("name", NAMES)
def test_the_transformers_rule_gives_generates_sequences_and_scores(name, setting):
    """``mode="transformers"`` against ``model.generate`` itself, on a left- or right-padded batch
    of four prompts of different lengths, eos likely (eos_bias): every returned sequence the same
    tokens (each of generate's rows cut after its first eos), in the same order, and every score
    its ``sequences_scores`` to 1e-5. Our own rule (``mode="beam"``, the default, with generate's
    length penalty) fails this test in 36 of its 70 cases (measured)."""
    kw = dict(num_beams=4, num_return_sequences=2, max_new_tokens=12)
    kw.update(RULE_SETTINGS[setting])
    model = build(name, 10 + list(RULE_SETTINGS).index(setting), eos_bias=4.0)
    expected, out = theirs(model, PROMPTS, **kw)
    ids, mask = padded(model, PROMPTS)
    got = generate(model, ids, attention_mask=mask, mode="transformers", **kw)
    n = kw["num_return_sequences"]
    assert [len(hyps) for hyps in got.hypotheses] == [n] * len(PROMPTS)
    assert [h.tokens for hyps in got.hypotheses for h in hyps] == expected
    scores = [h.score for hyps in got.hypotheses for h in hyps]
    assert scores == pytest.approx(out.sequences_scores.tolist(), abs=1e-5)
    eos = kw.get("eos_token_id", EOS)
    assert [h.finished for hyps in got.hypotheses for h in hyps] == [t[-1] in eos for t in expected]
    assert any(h.finished for hyps in got.hypotheses for h in hyps)


@pytest.mark.parametrize("name", NAMES)
def test_an_input_decodes_the_same_alone_and_in_a_batch(name):
    model = build(name, 4, eos_bias=2.0)
    batch = generate(model, PROMPTS, num_beams=3, num_return_sequences=2, max_new_tokens=6)
    for prompt, hyps in zip(PROMPTS, batch.hypotheses, strict=True):
        (alone,) = generate(model, [prompt], num_beams=3, num_return_sequences=2, max_new_tokens=6).hypotheses
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.finished for h in hyps] == [h.finished for h in alone]
        # padding changes the floating-point order of the attention sums: equal to rounding
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_greedy_equals_generate(name, dtype):
    """Greedy in half precision: both take the argmax of the same float32 copy of the same
    half-precision logits (the prefill runs the same padded batch), ties to the lowest id."""
    model = build(name, 5, eos_bias=2.0, dtype=getattr(torch, dtype))
    expected, _ = theirs(model, PROMPTS, num_beams=1, max_new_tokens=8)
    got = generate(model, PROMPTS, num_beams=1, max_new_tokens=8)
    assert [hyps[0].tokens for hyps in got.hypotheses] == expected


@pytest.mark.parametrize("name", ["gpt2", "llama", "bart", "t5"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_beam_search_agrees_with_generate_up_to_rounding(name, dtype):
    """Where the rules coincide, in half precision: generate runs the prefill on N * beams rows
    and we on N rows, so the same hypothesis's logits can round differently (a half-precision
    ulp), and near-ties may rank differently. Every hypothesis of ours scores within that
    rounding of the hypothesis generate ranks in the same place, and the best agree."""
    model, beams, new = build(name, 6, dtype=getattr(torch, dtype)), 3, 5
    _, out = theirs(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=new,
                    eos_token_id=None, length_penalty=1.0, early_stopping=False)
    got = generate(model, PROMPTS, num_beams=beams, num_return_sequences=beams, max_new_tokens=new,
                   eos_token_id=None, length_penalty=1.0)
    tolerance = 0.05  # in score units (logprob / length): a few half-precision roundings of 8x logits
    for i, hyps in enumerate(got.hypotheses):
        their_scores = out.sequences_scores[i * beams:(i + 1) * beams].tolist()
        assert [h.score for h in hyps] == pytest.approx(their_scores, abs=tolerance)


# not Mistral (sliding window), not T5
MASK_READY = {"gpt2", "llama", "qwen2", "qwen3", "bart", "marian", "mbart", "pegasus"}


def ready_mask_against_own_mask(model, monkeypatch, *, ready: bool, eos=EOS) -> None:
    """The steps of the sdpa models pass the model the boolean [k, 1, 1, t+1] mask itself (the
    model builds none); the oracle is the same search with the model building its own mask from
    the 2-D one. Every token, and every score to float32 rounding (where no column is padding,
    the model passes sdpa no mask and we an all-True one)."""
    from beamsearch import hf

    prepare = seq2seq_lm if model.config.is_encoder_decoder else causal_lm
    seen = []
    real = hf.positions.mask_ready

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(hf.adapters, "mask_ready", spy)
    monkeypatch.setattr(hf.seq2seq, "mask_ready", spy)
    runs = []
    for own_mask in (False, True):
        if own_mask:
            monkeypatch.setattr(hf.adapters, "mask_ready", lambda *args: False)
            monkeypatch.setattr(hf.seq2seq, "mask_ready", lambda *args: False)
        dec = prepare(model, PROMPTS, eos_token_id=eos)
        runs.append(beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                      max_steps=7, beam_size=3, n_best=3, length_penalty="power", alpha=1.0,
                                      return_token_logprobs=True))
    assert seen == [ready]
    ours, theirs_ = runs
    assert [[h.tokens for h in hyps] for hyps in ours] == [[h.tokens for h in hyps] for hyps in theirs_]
    for a, b in zip(ours, theirs_, strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
        for x, y in zip(a, b, strict=True):
            assert list(x.token_logprobs) == pytest.approx(list(y.token_logprobs), abs=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_a_ready_4d_mask_steps_like_the_models_own_mask(name, monkeypatch):
    ready_mask_against_own_mask(build(name, 8, eos_bias=1.0), monkeypatch, ready=name in MASK_READY)


def test_a_model_with_eager_attention_builds_its_own_mask():
    """The ready mask is sdpa's (boolean); eager attention adds a float mask: left to the model, as
    on an accelerator."""
    from beamsearch import hf

    model = build("gpt2")
    model.set_attn_implementation("eager")
    dec = causal_lm(model, PROMPTS)
    assert not hf.positions.mask_ready(model, dec.init_state.cache)
    cpu = build("gpt2")
    cache = causal_lm(cpu, PROMPTS).init_state.cache
    assert hf.positions.mask_ready(cpu, cache)
    assert not hf.positions.mask_ready(cpu.to("meta"), cache)  # off the CPU: the model's own mask (see mask_ready)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_logits_give_the_same_search_as_torch_logits(name):
    """The engine on the adapter's torch logits, and on the same logits handed over as numpy."""
    model = build(name, 7, eos_bias=2.0)
    prepare = seq2seq_lm if model.config.is_encoder_decoder else causal_lm
    results = []
    for to_numpy in (False, True):
        dec = prepare(model, PROMPTS)

        def step(state, y_prev, dec=dec, to_numpy=to_numpy):
            logits, state = dec.step(state, y_prev)
            return (logits.numpy() if to_numpy else logits), state

        results.append(beam_search_batch(step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                         max_steps=6, beam_size=3, n_best=3, length_penalty="power", alpha=1.0))
    torch_run, numpy_run = results
    assert [[h.tokens for h in hyps] for hyps in torch_run] == [[h.tokens for h in hyps] for hyps in numpy_run]
    for a, b in zip(torch_run, numpy_run, strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)


@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral", "bart", "marian"])
def test_an_input_beyond_the_models_positions_is_refused_before_the_model_runs(name):
    model = build(name)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    if model.config.is_encoder_decoder:
        model.get_encoder().register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="longer than the model's 40 positions"):
        generate(model, [[5] * 41], max_new_tokens=2)
    # the prompt fits, but the tokens fed back would not: 39 + 3 - 1 = 41 > 40 (decoder-only);
    # an encoder-decoder's decoder is fed its start token and 40 generated tokens: 41 > 40
    with pytest.raises(ValueError, match="max_new_tokens=.* positions"):
        generate(model, [[5] * 39], max_new_tokens=41 if model.config.is_encoder_decoder else 3)
    assert calls == []


def test_a_sliding_window_is_not_a_position_limit():
    """Mistral's window (4 here) is shorter than the prompt and the output: accepted, and the
    sliding-window cache is reordered like any other (greedy and beam equal generate's)."""
    model = build("mistral", 8)
    prompt = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14]]
    expected, out = theirs(model, prompt, num_beams=2, num_return_sequences=2, max_new_tokens=12,
                           eos_token_id=None, length_penalty=1.0, early_stopping=False)
    got = generate(model, prompt, num_beams=2, num_return_sequences=2, max_new_tokens=12, eos_token_id=None,
                   length_penalty=1.0)
    assert [h.tokens for h in got.hypotheses[0]] == expected
    assert [h.score for h in got.hypotheses[0]] == pytest.approx(out.sequences_scores.tolist(), abs=1e-5)


def test_t5_has_no_position_limit():
    model = build("t5")
    assert position_limit(model) is None
    got = generate(model, [[5] * 60], max_new_tokens=3, eos_token_id=None)
    assert len(got.hypotheses[0][0].tokens) == 3


CAUSAL = [n for n in NAMES if n not in SEQ2SEQ]


@pytest.mark.parametrize("name", CAUSAL)
@pytest.mark.parametrize("new", [6, None])  # None: no max_new_tokens to the adapter, buffers grow mid-search
def test_both_cache_layouts_equal_generate_where_the_rules_coincide(name, new, layout):
    """The two layouts against ``generate`` (no eos, power penalty 1, n_best = beams), a long
    prompt beside short ones so rows of one input share many prompt columns; and the layer type
    actually used."""
    from beamsearch import hf

    model, beams, steps = build(name, 6), 3, 6
    prompts = PROMPTS + [[(7 * i) % (VOCAB - 10) + 10 for i in range(20)]]
    expected, out = theirs(model, prompts, num_beams=beams, num_return_sequences=beams, max_new_tokens=steps,
                           eos_token_id=None, length_penalty=1.0, early_stopping=False)
    dec = causal_lm(model, prompts, eos_token_id=None, max_new_tokens=new)
    kinds = {type(layer) for layer in dec.init_state.cache.layers}
    if name == "mistral":  # sliding-window layers keep the model's own layer
        assert hf.caches.PromptLayer not in kinds
    else:
        assert (hf.caches.PromptLayer in kinds) == layout
    got = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=steps,
                            beam_size=beams, n_best=beams, length_penalty="power", alpha=1.0)
    for i, hyps in enumerate(got):
        assert [h.tokens for h in hyps] == expected[i * beams:(i + 1) * beams]
        for j, h in enumerate(hyps):
            assert h.score == pytest.approx(out.sequences_scores[i * beams + j].item(), abs=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_adapters_cache_layers_equal_a_plain_gather(name, layout):
    """After any sequence of reorders (within inputs, and rows leaving), the adapter's layers
    (the prompt kept in place, or each reorder deferred into the next write) hold the keys and
    values of the model's own ``DynamicCache`` gathered by the same indices with ``index_select``
    (every column, at once), step by step; and the next logits are the same."""
    from beamsearch import hf

    model = build(name, 7)
    prompts = [[11, 12, 13, 14, 15, 16, 17, 18], [20, 21, 22]]
    ours = causal_lm(model, prompts, eos_token_id=None, max_new_tokens=8)  # layout as the fixture says
    kinds = {type(layer) for layer in ours.init_state.cache.layers}
    assert kinds == ({hf.caches.PromptLayer} if layout else {hf.caches.DeferredLayer})
    with pytest.MonkeyPatch.context() as m:  # the oracle: the model's own cache, reordered at once
        m.setattr(hf.adapters, "adapter_cache", lambda model, layer: transformers.DynamicCache(config=model.config))
        plain = causal_lm(model, prompts, eos_token_id=None, max_new_tokens=8)
    assert {type(layer) for layer in plain.init_state.cache.layers} == {transformers.cache_utils.DynamicLayer}
    gen = torch.Generator().manual_seed(0)
    a, b = ours.init_state, plain.init_state
    orders = [torch.tensor([0, 0, 0, 1, 1, 1]), torch.tensor([2, 0, 1, 5, 5, 3]), torch.tensor([1, 1, 0, 4, 3, 5]),
              torch.tensor([3, 4, 5]), torch.tensor([2, 2, 0]), torch.tensor([1, 0, 2])]
    # expand, two reorders within inputs, the first (longest) input leaves: its prompt's leading
    # columns, padding for the rest, are dropped; then reorders within the input left
    y = torch.tensor([1, 2])
    for order in orders:
        la, a = ours.step(a, y)
        lb, b = plain.step(b, y)
        torch.testing.assert_close(la, lb)
        a, b = select_state(a, order), select_state(b, order)
        y = torch.randint(4, VOCAB, (len(order),), generator=gen)
        for x, z in zip(a.cache.layers, b.cache.layers, strict=True):  # a waiting reorder read without applying it,
            pending = getattr(x, "pending", None)  # so the next write takes the fused path
            keys, values = (x.keys, x.values) if pending is None else (x.keys[pending], x.values[pending])
            torch.testing.assert_close(keys, z.keys)
            torch.testing.assert_close(values, z.values)
        if not layout:
            assert all(layer.pending is not None for layer in a.cache.layers)


def _brute_force_two_steps(model, prompt, eos, alpha):
    """Every output of at most 2 tokens of a causal LM, by teacher forcing written from the
    definition (no cache, one forward over all first tokens): finished ones end with an eos id
    (at step 1 or 2), unfinished ones have exactly 2 tokens; score = logprob / ((5 + len) / 6) **
    alpha (GNMT). Sorted as the search ranks: finished first, then by score."""
    with torch.no_grad():
        first = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)
        rows = torch.tensor([prompt + [t] for t in range(VOCAB)])
        second = torch.log_softmax(model(input_ids=rows).logits[:, -1].float(), -1)  # --> [V, V]
    lp = lambda n: ((5 + n) / 6) ** alpha  # noqa: E731
    outs = []
    for a in range(VOCAB):
        if a in eos:
            outs.append(((a,), first[a].item(), True))
            continue
        for b in range(VOCAB):
            outs.append(((a, b), first[a].item() + second[a, b].item(), b in eos))
    ranked = sorted(((t, s, f, s / lp(len(t))) for t, s, f in outs), key=lambda o: (not o[2], -o[3]))
    return ranked


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("rows", [64, 3, 1])  # 3 and 1: several model calls per step, each from the same state
def test_exact_search_on_a_transformers_model_equals_brute_force(name, rows, layout):
    """exact_search through the causal adapter (whose cache the search and the model change in
    place) against every output of at most 2 tokens enumerated by teacher forcing."""
    from beamsearch import exact_search

    model = build(name, 11, eos_bias=2.5)
    prompts = [[5, 17, 33], [9, 10]]
    dec = causal_lm(model, prompts, eos_token_id=EOS, max_new_tokens=2)
    got = exact_search(dec.step, dec.init_state, dec.prompts, eos_token_id=EOS, max_steps=2, n_best=3,
                       batch_rows=rows, seed_beam=1, alpha=0.6)
    assert got.proven.all()
    for prompt, hyps in zip(prompts, got, strict=True):
        want = _brute_force_two_steps(model, prompt, set(EOS), 0.6)[:3]
        assert [tuple(h.tokens) for h in hyps] == [w[0] for w in want]
        assert [h.finished for h in hyps] == [w[2] for w in want]
        assert [h.score for h in hyps] == pytest.approx([w[3] for w in want], abs=1e-4)
