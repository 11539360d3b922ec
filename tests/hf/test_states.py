"""Refill with a Hugging Face causal LM: ``CausalState``s of searches at different steps joined by
``concat_state`` (caches left-padded, masked, positions per row). Oracle: each prompt decoded alone
through ``causal_lm`` + ``beam_search_batch`` (a batch of one), and each state's own next logits.
The adapter is torch-only (the model returns torch logits), so there is no numpy variant."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.core.state import concat_state, select_state  # noqa: E402
from beamsearch.hf import causal_lm  # noqa: E402
from beamsearch.refill import decode_stream  # noqa: E402

VOCAB, EOS, PAD, BOS = 41, 3, 0, 1
PROMPTS = [[5, 17, 33, 8, 11], [9], [20, 2, 37], [11, 12, 13, 14, 15, 16, 17], [30, 31], [7, 7, 7, 7]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=40, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # sharper than the default init, so that beams differ and some finish early
        m.lm_head.weight.mul_(8.0)
    return m


def alone(model, prompt, max_steps, **search):
    dec = causal_lm(model, [prompt], eos_token_id=EOS, max_new_tokens=max_steps)
    return beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=EOS, max_steps=max_steps,
                             **search)[0]


def streamed(model, items, *, max_rows, allocate, **search):
    """decode_stream over ``causal_lm`` states: one adapter per cohort (``allocate`` generated-token
    columns each), every call run by the latest adapter's step."""
    latest = {}

    def make_state(batch):
        latest["dec"] = causal_lm(model, [i["prompt"] for i in batch], eos_token_id=EOS, max_new_tokens=allocate)
        return latest["dec"].init_state

    def step(state, y_prev):
        return latest["dec"].step(state, y_prev)

    stream = decode_stream(step, make_state, items, max_rows=max_rows, eos_token_id=EOS, **search)
    return {d.index: d for d in stream}, stream.stats


@pytest.mark.parametrize("allocate", [8, 2])  # 2: the mask grows past its allocated columns mid-search
def test_refill_equals_each_prompt_alone(model, allocate, layout):
    steps = [6, 4, 8, 5, 7, 3]
    items = [{"prompt": p, "max_steps": s} for p, s in zip(PROMPTS, steps, strict=True)]
    got, stats = streamed(model, items, max_rows=5, allocate=allocate, beam_size=2, n_best=2, max_steps=8)
    assert stats.mixed_calls > 0 and stats.cohorts > 2  # inputs did join a search in flight
    for i, (prompt, s) in enumerate(zip(PROMPTS, steps, strict=True)):
        want = alone(model, prompt, s, beam_size=2, n_best=2)
        have = got[i].hypotheses
        assert got[i].error is None
        assert [h.tokens for h in have] == [h.tokens for h in want], i
        assert [h.finished for h in have] == [h.finished for h in want], i
        # the joined call pads the cache with masked columns: float sums differ in the last bits only
        assert all(abs(a.logprob - b.logprob) < 1e-4 and abs(a.score - b.score) < 1e-4
                   for a, b in zip(have, want, strict=True))


def test_joined_state_steps_like_each_state_alone(model):
    """A state 3 steps in (cache 7 + 3 columns) joined with a fresh one (prefill logits pending,
    cache 3 columns): the joined step's logits are each state's own next logits, row for row, and
    the step after that too (the pending row's dummy column stays masked)."""
    a_dec = causal_lm(model, [PROMPTS[3], PROMPTS[1]], eos_token_id=EOS, max_new_tokens=6)
    a = a_dec.init_state
    for token in (4, 5, 6):  # the first call returns the prefill logits; the next two feed tokens
        _, a = a_dec.step(a, torch.tensor([token, token + 1]))
    a = select_state(a, [1, 0, 0])  # three rows, reordered
    b_dec = causal_lm(model, [PROMPTS[2]], eos_token_id=EOS, max_new_tokens=6)
    b = b_dec.init_state
    joined = concat_state([a, b])
    assert joined.columns == a.columns == 9 and b.columns == 3
    assert joined.cache.layers[0].keys.shape[2] == 9 and joined.pending.tolist() == [False, False, False, True]
    assert joined.mask[3, :6].tolist() == [0] * 6  # b's left padding of the join
    ya, yb = torch.tensor([8, 9, 10]), torch.tensor([12])
    want_a, a2 = a_dec.step(a, ya)
    want_b, b2 = b_dec.step(b, yb)
    got, j2 = b_dec.step(joined, torch.cat([ya, yb]))
    torch.testing.assert_close(got, torch.cat([want_a, want_b]), atol=1e-5, rtol=0)
    assert j2.positions.tolist() == a2.positions.tolist() + b2.positions.tolist()
    ya, yb = torch.tensor([13, 14, 15]), torch.tensor([16])
    want_a, _ = a_dec.step(a2, ya)
    want_b, _ = b_dec.step(b2, yb)
    got, _ = b_dec.step(j2, torch.cat([ya, yb]))
    torch.testing.assert_close(got, torch.cat([want_a, want_b]), atol=1e-5, rtol=0)


def test_columns_padding_every_row_left_are_dropped(model):
    """After a join, once only the younger state's rows are left (the older input stopped), the
    leading columns that were padding for all of them are dropped: the cache is the younger
    state's own length again (plus the one masked column its pending step took), and the next
    logits are still its own."""
    a_dec = causal_lm(model, [PROMPTS[3]], eos_token_id=EOS, max_new_tokens=6)
    a = a_dec.init_state
    for token in (4, 5, 6):
        _, a = a_dec.step(a, torch.tensor([token]))
    b_dec = causal_lm(model, [PROMPTS[2]], eos_token_id=EOS, max_new_tokens=6)
    b = b_dec.init_state
    want_first, b1 = b_dec.step(b, torch.tensor([12]))  # b alone: its prefill logits, then a token
    want_b, _ = b_dec.step(b1, torch.tensor([13]))
    fresh = causal_lm(model, [PROMPTS[2]], eos_token_id=EOS, max_new_tokens=6).init_state  # b's used one grew
    joined = concat_state([a, fresh])
    first, j1 = b_dec.step(joined, torch.tensor([8, 12]))
    torch.testing.assert_close(first[1:], want_first, atol=1e-5, rtol=0)
    assert j1.columns == a.columns + 1 > b1.columns
    only_b = select_state(j1, [1])  # input a stopped: b's row alone
    assert only_b.columns == b1.columns + 1 == only_b.cache.layers[0].keys.shape[2]  # was a's length + 1
    assert only_b.mask[0, : only_b.columns].tolist() == [1, 1, 1, 0]  # b's prompt, then the dummy column
    got, _ = b_dec.step(only_b, torch.tensor([13]))
    torch.testing.assert_close(got, want_b, atol=1e-5, rtol=0)


def test_joined_state_still_refuses_positions_beyond_the_model(model):
    dec = causal_lm(model, [[5] * 38], eos_token_id=EOS)  # next position 38 of 40
    state = dec.init_state
    _, state = dec.step(state, torch.tensor([4]))  # prefill logits
    _, state = dec.step(state, torch.tensor([4]))  # position 38
    _, state = dec.step(state, torch.tensor([4]))  # position 39
    joined = concat_state([state, causal_lm(model, [[6]], eos_token_id=EOS).init_state])
    with pytest.raises(ValueError, match="position 40, beyond the model's 40 positions"):
        dec.step(joined, torch.tensor([4, 4]))


SOURCES = [[5, 17, 33, 8, 11], [9], [20, 2, 37], [11, 12, 13, 14, 15, 16, 17, 18, 19], [30, 31], [7, 7, 7, 7],
           [40, 41, 42, 43, 44, 45]]


def seq2seq_streamed(model, items, *, max_rows, eos, **search):
    """decode_stream over ``seq2seq_lm`` states, one adapter per cohort (each source's encoder
    output and its decoder rows join the rows in flight), every call run by the latest adapter."""
    from beamsearch.hf import seq2seq_lm

    latest = {}

    def make_state(batch):
        latest["dec"] = seq2seq_lm(model, [i["source"] for i in batch], eos_token_id=eos, max_new_tokens=9)
        return latest["dec"].init_state

    def step(state, y_prev):
        return latest["dec"].step(state, y_prev)

    stream = decode_stream(step, make_state, items, max_rows=max_rows, eos_token_id=eos, **search)
    return {d.index: d for d in stream}, stream.stats


@pytest.mark.parametrize("name", ["bart", "t5", "marian"])
def test_encoder_decoder_refill_equals_each_source_alone(name):
    """BART (a learned position table, offset 2), Marian (a sinusoidal table) and T5 (relative
    positions): sources of different lengths join a search in flight (encoder side right-padded,
    decoder cache left-padded, positions per row, cross-attention recomputed for every row at the
    join), and each source's hypotheses are those of the source decoded alone."""
    from beamsearch.hf import joinable, seq2seq_lm
    from tests.hf.test_generation_models import EOS as TWO_EOS
    from tests.hf.test_generation_models import START, build

    model = build(name, 8, eos_bias=1.5)
    assert joinable(model)
    steps = [6, 4, 9, 5, 7, 3, 8]
    items = [{"prompt": [START], "source": src, "max_steps": s} for src, s in zip(SOURCES, steps, strict=True)]
    got, stats = seq2seq_streamed(model, items, max_rows=5, eos=TWO_EOS, beam_size=2, n_best=2, max_steps=9,
                                  no_repeat_ngram_size=2)
    assert stats.mixed_calls > 0 and stats.cohorts > 2
    for i, (src, s) in enumerate(zip(SOURCES, steps, strict=True)):
        dec = seq2seq_lm(model, [src], eos_token_id=TWO_EOS, max_new_tokens=s)
        want = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=TWO_EOS, max_steps=s,
                                 beam_size=2, n_best=2, no_repeat_ngram_size=2)[0]
        have = got[i].hypotheses
        assert got[i].error is None
        assert [h.tokens for h in have] == [h.tokens for h in want], i
        assert [h.finished for h in have] == [h.finished for h in want], i
        # padded attention sums differ from the unpadded ones in the last bits only
        assert all(abs(a.logprob - b.logprob) < 1e-4 and abs(a.score - b.score) < 1e-4
                   for a, b in zip(have, want, strict=True))


def test_joined_encoder_decoder_states_step_like_each_state_alone():
    """Two BART states at different steps (one has fed 3 decoder tokens, the other none), joined:
    the joined call's logits are each state's own next logits, row for row."""
    from beamsearch.hf import seq2seq_lm
    from tests.hf.test_generation_models import START, build

    model = build("bart", 9)
    a = seq2seq_lm(model, [[5, 6, 7, 8, 9, 10], [11, 12]], eos_token_id=3)
    b = seq2seq_lm(model, [[13, 14, 15, 16, 17, 18, 19, 20, 21]], eos_token_id=3)
    sa, y = a.init_state, torch.tensor([START, START])
    for token in (20, 21, 22):
        _, sa = a.step(sa, y)
        y = torch.tensor([token, token + 1])
    joined = concat_state([sa, b.init_state])
    # each state numbers its sources from 0: joined, they are told apart (a reorder that keeps
    # every row with its source leaves the encoder side in place, so equal numbers would lie)
    assert joined.source.tolist() == [0, 1, 2]
    logits, _ = a.step(joined, torch.cat([y, torch.tensor([START])]))
    alone_a, _ = a.step(sa, y)
    alone_b, _ = b.step(b.init_state, torch.tensor([START]))
    torch.testing.assert_close(logits, torch.cat([alone_a, alone_b]), atol=1e-4, rtol=1e-4)


def test_a_model_whose_positions_cannot_be_given_per_row_refuses_a_joined_state(monkeypatch):
    from beamsearch import hf
    from tests.hf.test_generation_models import START, build

    model = build("bart", 9)
    monkeypatch.setattr(hf.seq2seq, "joinable", lambda model: False)  # read once, when the adapter is made
    a = hf.seq2seq_lm(model, [[5, 6, 7]], eos_token_id=3)
    _, sa = a.step(a.init_state, torch.tensor([START]))
    joined = concat_state([sa, a.init_state])
    with pytest.raises(TypeError, match="rows of BartForConditionalGeneration at different steps cannot share a call"):
        a.step(joined, torch.tensor([4, START]))


def _tiny(name):
    """Small random-weight encoder-decoders beyond the eight of test_hf_models (vocabulary 61,
    the same special ids)."""
    from tests.hf.test_generation_models import _SEQ2SEQ

    torch.manual_seed(3)
    if name == "mbart":
        model = transformers.MBartForConditionalGeneration(transformers.MBartConfig(**_SEQ2SEQ))
    elif name == "pegasus":
        model = transformers.PegasusForConditionalGeneration(transformers.PegasusConfig(**_SEQ2SEQ))
    elif name == "m2m100":
        model = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**_SEQ2SEQ))
    else:  # fsmt: its own sinusoidal table, positions from padding_idx + 1
        cfg = transformers.FSMTConfig(langs=["en", "de"], src_vocab_size=61, tgt_vocab_size=61, d_model=32,
                                      encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                      decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                      max_position_embeddings=40, pad_token_id=0, bos_token_id=1, eos_token_id=3,
                                      decoder_start_token_id=2, forced_eos_token_id=None)
        model = transformers.FSMTForConditionalGeneration(cfg)
    model.eval()
    model.generation_config.decoder_start_token_id = 2
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


@pytest.mark.parametrize("name", ["mbart", "pegasus"])
def test_more_position_tables_refill_equal_each_source_alone(name):
    """mBART (a learned table offset by 2, like BART) and Pegasus (a sinusoidal table, like
    Marian) under refill: each source as decoded alone."""
    from beamsearch.hf import joinable, seq2seq_lm

    model = _tiny(name)
    assert joinable(model)
    steps = [6, 4, 9, 5, 7, 3, 8]
    items = [{"prompt": [2], "source": src, "max_steps": s} for src, s in zip(SOURCES, steps, strict=True)]
    got, stats = seq2seq_streamed(model, items, max_rows=5, eos=3, beam_size=2, n_best=2, max_steps=9)
    assert stats.mixed_calls > 0
    for i, (src, s) in enumerate(zip(SOURCES, steps, strict=True)):
        dec = seq2seq_lm(model, [src], eos_token_id=3, max_new_tokens=s)
        want = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=3, max_steps=s,
                                 beam_size=2, n_best=2)[0]
        assert [(h.tokens, h.finished) for h in got[i].hypotheses] == [(h.tokens, h.finished) for h in want], i
        assert all(abs(a.score - b.score) < 1e-4 for a, b in zip(got[i].hypotheses, want, strict=True))


@pytest.mark.parametrize("name", ["mbart", "pegasus", "m2m100", "fsmt"])
def test_more_encoder_decoders_step_alike_with_a_ready_mask(name, monkeypatch):
    """mBART and Pegasus take the ready 4-D masks (sdpa, listed); M2M100 and FSMT build their own."""
    from tests.hf.test_generation_models import ready_mask_against_own_mask

    ready_mask_against_own_mask(_tiny(name), monkeypatch, ready=name in ("mbart", "pegasus"), eos=3)


@pytest.mark.parametrize("name", ["fsmt", "m2m100"])
def test_decoders_of_unknown_positions_are_not_joined_and_exact_search_still_works(name):
    """FSMT (its table's row for position p is p + padding_idx + 1) and M2M100 (positions made on
    the fly) are not joinable: decoded in fixed batches. exact_search copies their state (a join
    of one state at one step, which stays plain) and equals an exhaustive beam for two steps
    (beam = V keeps every first token, so every output of at most two tokens is ranked)."""
    from beamsearch import exact_search
    from beamsearch.hf import joinable, seq2seq_lm

    model = _tiny(name)
    assert not joinable(model)
    sources = [[5, 17, 33, 8], [9, 10]]
    dec = seq2seq_lm(model, sources, eos_token_id=3, max_new_tokens=2)
    got = exact_search(dec.step, dec.init_state, dec.prompts, eos_token_id=3, max_steps=2, n_best=2, batch_rows=7)
    dec = seq2seq_lm(model, sources, eos_token_id=3, max_new_tokens=2)
    want = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=3, max_steps=2, beam_size=61,
                             n_best=2)
    assert got.proven.all()
    for g, w in zip(got, want, strict=True):
        assert [(h.tokens, h.finished) for h in g] == [(h.tokens, h.finished) for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-4)
