"""The shared prompt cache (``causal_lm(..., share_prompt=True)``, ``generate(...,
share_prompt_cache=True)``). Oracles: a plain per-row softmax attention over the concatenated
prompt and own columns (written out below), and the ordinary copying cache (one prompt copy per
row, itself tested against ``model.generate`` in tests/hf/test_generation_models.py): the same logits at
every step, the same searches, the same refill joins; and the cache's bytes counted by hand."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from approx import FLOAT32, assert_same_hypotheses  # noqa: E402
from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.core.state import concat_state, select_state  # noqa: E402
from beamsearch.hf import causal_lm, generate  # noqa: E402
from beamsearch.hf.shared import SharedPrompt, SharedPromptCache, shared_prompt_attention  # noqa: E402
from beamsearch.refill import decode_stream  # noqa: E402
from tests.hf.test_generation_models import EOS, PROMPTS, build  # noqa: E402

SHARED = ("gpt2", "llama", "qwen2", "qwen3")


def reference_attention(query, prompt_keys, prompt_values, prompt_mask, rows, keys, values, mask, scale):
    """Row by row, head by head: softmax(q . [prompt of the row's input ; own columns]) over the
    unmasked columns, times the values (a key/value head serves ``H / Hkv`` query heads)."""
    k, heads, q, dh = query.shape
    rep = heads // keys.shape[1]
    out = torch.zeros(k, q, heads, dh, dtype=torch.float64)
    for r in range(k):
        i = int(rows[r])
        for h in range(heads):
            kv = h // rep
            for j in range(q):
                cols = [(prompt_keys[i, kv, c], prompt_values[i, kv, c]) for c in range(prompt_keys.shape[2])
                        if prompt_mask[i, c]]
                cols += [(keys[r, kv, c], values[r, kv, c]) for c in range(keys.shape[2]) if mask[r, 0, j, c]]
                scores = torch.stack([query[r, h, j].double() @ key.double() * scale for key, _ in cols])
                weights = torch.softmax(scores, 0)
                out[r, j, h] = sum(w * value.double() for w, (_, value) in zip(weights, cols, strict=True))
    return out


@pytest.mark.parametrize("rows", [[2, 0, 0, 1, 2, 2, 0], [0, 0, 1, 1, 2, 2]])  # scrambled / uneven, and dense
@pytest.mark.parametrize("q", [1, 2])  # one query token per row (the steps), or two (a strided query)
def test_the_attention_equals_softmax_over_the_prompt_and_the_own_columns(rows, q):
    torch.manual_seed(0)
    n, p, s, heads, hkv, dh = 3, 5, 3, 4, 2, 8
    lengths = [5, 2, 4]
    prompt_mask = torch.tensor([[c >= p - n_ for c in range(p)] for n_ in lengths])  # left-padded
    pk, pv = torch.randn(n, hkv, p, dh), torch.randn(n, hkv, p, dh)
    rows = torch.tensor(rows)
    k = len(rows)
    query = torch.randn(k, q, heads, dh).transpose(1, 2)  # --> [k, H, q, dh], as the models hand it
    keys, values = torch.randn(k, hkv, s, dh), torch.randn(k, hkv, s, dh)
    mask = torch.rand(k, 1, q, s) > 0.3
    mask[:, :, :, -1] = True
    mask[1] = False  # a row whose own columns are all masked (a row that joined a refill search)
    shared = SharedPrompt([pk], [pv], prompt_mask, rows)
    got, _ = shared_prompt_attention(types.SimpleNamespace(layer_idx=0), query, keys, values, mask, scaling=0.3,
                                     shared_prompt=shared)
    want = reference_attention(query, pk, pv, prompt_mask, rows, keys, values, mask, 0.3)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


def both(name, prompts, **kw):
    model = build(name, eos_bias=kw.pop("eos_bias", 0.0))
    return model, [causal_lm(model, prompts, eos_token_id=EOS, share_prompt=share, **kw) for share in (False, True)]


@pytest.mark.parametrize("name", SHARED)
def test_every_steps_logits_equal_the_copying_caches(name):
    """Rows expanded unevenly and out of order, reordered within inputs, and shrunk so that an
    input loses its last row (its prompt is dropped, the inputs renumbered): each step's logits
    equal the copying cache's, and the shared cache holds each live prompt once."""
    model, (plain, shared) = both(name, PROMPTS, max_new_tokens=6)
    a, b = plain.init_state, shared.init_state
    moves = [([0, 0, 1, 1, 1, 2, 3, 3], [4, 5, 6, 7, 8, 9, 10, 11]),  # expand: 2, 3, 1, 2 rows per input
             ([1, 0, 4, 3, 2, 7, 6, 5], [12, 13, 14, 15, 16, 17, 18, 19]),  # reorder within inputs
             ([7, 0, 6, 1, 6], [20, 21, 22, 23, 24]),  # input 1 (rows 2-4) leaves; uneven, out of order
             ([4, 3, 2, 1, 0], [25, 26, 27, 28, 29])]
    la, a = plain.step(a, torch.tensor([0] * 4))
    lb, b = shared.step(b, torch.tensor([0] * 4))
    torch.testing.assert_close(lb, la, atol=1e-5, rtol=0)
    for idx, tokens in moves:
        a, b = select_state(a, idx), select_state(b, idx)
        la, a = plain.step(a, torch.tensor(tokens))
        lb, b = shared.step(b, torch.tensor(tokens))
        torch.testing.assert_close(lb, la, atol=1e-5, rtol=0)
    assert isinstance(b.cache, SharedPromptCache)
    assert b.cache.shared.keys[0].shape[0] == 3  # inputs 0, 2 and 3 read; input 1's prompt dropped
    assert b.cache.layers[0].keys.shape[:3] == (5, b.cache.shared.keys[0].shape[1], 4)  # 5 rows, 4 own columns


@pytest.mark.parametrize("name", SHARED)
@pytest.mark.parametrize("beam", [1, 4, 64])
def test_a_search_equals_the_copying_caches(name, beam):
    """Prompts of different lengths (left padding), eos likely enough that inputs finish at
    different steps (their prompts leave the shared cache)."""
    _, (plain, shared) = both(name, PROMPTS, max_new_tokens=6, eos_bias=-30.0)
    search = dict(max_steps=6, beam_size=beam, n_best=min(beam, 4))
    want = beam_search_batch(plain.step, plain.init_state, plain.prompts, eos_token_id=plain.eos_token_id, **search)
    got = beam_search_batch(shared.step, shared.init_state, shared.prompts, eos_token_id=shared.eos_token_id,
                            **search)
    assert any(h.finished for hyps in want for h in hyps)
    assert len({len(h.tokens) for hyps in want for h in hyps}) > 1  # hypotheses end at different steps
    assert_same_hypotheses(got, want, tol=FLOAT32)  # tokens, finished flags; scores, logprobs to 1e-5


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_steps_agree_to_the_dtypes_rounding(dtype):
    """The attention computes in float32 and casts back (sdpa rounds its own way): each step's
    logits within two units in the last place of the largest logit of the copying cache's."""
    dt = getattr(torch, dtype)
    model = build("llama", dtype=dt)
    found = []
    for share in (False, True):
        dec = causal_lm(model, PROMPTS, eos_token_id=EOS, max_new_tokens=6, share_prompt=share)
        first, state = dec.step(dec.init_state, torch.zeros(4, dtype=torch.int64))
        state = select_state(state, [0, 0, 1, 2, 3, 3])
        found.append((first, dec.step(state, torch.arange(6) + 5)[0]))
    for want, got in zip(*found, strict=True):
        ulp = torch.finfo(dt).eps * float(want.abs().max())
        torch.testing.assert_close(got, want, atol=2 * ulp, rtol=0)


def test_gpt2_scaled_by_layer_index_reads_its_own_scaling():
    """GPT-2 with ``scale_attn_by_inverse_layer_idx`` (layer l's scores divided by l + 1, the
    scaling the layer hands the attention function): the same search both ways."""
    torch.manual_seed(3)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=61, n_positions=40, n_embd=32, n_layer=3, n_head=4, bos_token_id=1, eos_token_id=3,
        pad_token_id=0, scale_attn_by_inverse_layer_idx=True)).eval()
    found = []
    for share in (False, True):
        dec = causal_lm(model, PROMPTS, eos_token_id=3, max_new_tokens=5, share_prompt=share)
        found.append(beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=3, max_steps=5,
                                       beam_size=4, n_best=4))
    assert_same_hypotheses(found[1], found[0], tol=FLOAT32)


def streamed(model, items, share, **search):
    """decode_stream over ``causal_lm`` states, one adapter per cohort, each call run by the latest."""
    latest = {}

    def make_state(batch):
        latest["dec"] = causal_lm(model, [i["prompt"] for i in batch], eos_token_id=EOS, max_new_tokens=8,
                                  share_prompt=share)
        return latest["dec"].init_state

    def step(state, y_prev):
        return latest["dec"].step(state, y_prev)

    stream = decode_stream(step, make_state, items, max_rows=7, eos_token_id=EOS, **search)
    return {d.index: d for d in stream}, stream.stats


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_refill_joins_equal_the_copying_caches(name):
    model = build(name, eos_bias=-30.0)
    prompts = PROMPTS + [[30, 31], [7, 7, 7, 7], [12]]
    items = [{"prompt": p, "max_steps": s} for p, s in zip(prompts, [6, 4, 8, 5, 7, 3, 6], strict=True)]
    want, _ = streamed(model, items, False, beam_size=2, n_best=2, max_steps=8)
    got, stats = streamed(model, items, True, beam_size=2, n_best=2, max_steps=8)
    assert stats.mixed_calls > 0 and stats.cohorts > 2  # inputs did join searches in flight
    assert all(got[i].error is None for i in range(len(items)))
    assert_same_hypotheses([got[i].hypotheses for i in range(len(items))],
                           [want[i].hypotheses for i in range(len(items))], tol=FLOAT32)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_joined_state_steps_like_each_state_alone(name):
    """A state 3 steps in (reordered, one input dropped) joined with a fresh one (its prefill
    logits pending): the joined steps' logits are the copying cache's for each state alone."""
    model = build(name)
    steps = [causal_lm(model, [PROMPTS[2], PROMPTS[1], PROMPTS[0]], eos_token_id=EOS, max_new_tokens=6,
                       share_prompt=True)]
    steps.append(causal_lm(model, [PROMPTS[3]], eos_token_id=EOS, max_new_tokens=6, share_prompt=True))
    plain = [causal_lm(model, [PROMPTS[2], PROMPTS[1], PROMPTS[0]], eos_token_id=EOS, max_new_tokens=6),
             causal_lm(model, [PROMPTS[3]], eos_token_id=EOS, max_new_tokens=6)]
    a, pa = steps[0].init_state, plain[0].init_state
    for token in (4, 5, 6):
        _, a = steps[0].step(a, torch.full((3,), token))
        _, pa = plain[0].step(pa, torch.full((3,), token))
    a, pa = select_state(a, [2, 0, 0]), select_state(pa, [2, 0, 0])  # input 1 leaves
    joined = concat_state([a, steps[1].init_state])
    assert joined.cache.shared.keys[0].shape[0] == 3 and joined.source.tolist() == [1, 0, 0, 2]
    pb = plain[1].init_state
    for tokens in ([8, 9, 10, 12], [13, 14, 15, 16]):
        want_a, pa = plain[0].step(pa, torch.tensor(tokens[:3]))
        want_b, pb = plain[1].step(pb, torch.tensor(tokens[3:]))
        got, joined = steps[1].step(joined, torch.tensor(tokens))
        torch.testing.assert_close(got, torch.cat([want_a, want_b]), atol=1e-5, rtol=0)


def test_generate_with_a_shared_prompt_cache_equals_generate_without():
    model = build("qwen2", eos_bias=1.0)
    kw = dict(num_beams=8, num_return_sequences=3, max_new_tokens=5)
    want = generate(model, PROMPTS, **kw)
    got = generate(model, PROMPTS, share_prompt_cache=True, **kw)
    assert torch.equal(got.sequences, want.sequences)
    torch.testing.assert_close(got.sequences_scores, want.sequences_scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kw", [dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0),
                                dict(num_beams=4, force_words_ids=[[40, 41]]),
                                dict(mode="exact", node_budget=20_000, max_new_tokens=3),
                                dict(mode="transformers", num_beams=4), dict(num_beams=1),
                                dict(mode="stochastic", k=4, seed=3)], ids=lambda kw: kw.get("mode", str(kw)))
def test_every_mode_gives_the_same_hypotheses_with_a_shared_prompt_cache(kw):
    model = build("llama", eos_bias=-30.0)
    kw = {"max_new_tokens": 5, **kw}
    want = generate(model, PROMPTS, **kw).hypotheses
    got = generate(model, PROMPTS, share_prompt_cache=True, **kw).hypotheses
    assert_same_hypotheses(got, want, tol=FLOAT32)


def test_a_catalogue_over_a_shared_prompt_cache_equals_the_copying_caches():
    """Generative retrieval as issue 24 puts it together: a catalogue (items sharing prefixes, one
    a prefix of another) over the shared prompt cache gives the copying caches' hypotheses, each a
    catalogue item then eos."""
    model = build("gpt2", eos_bias=-30.0)
    items = [[40, 41, 42], [40, 41], [40, 43, 44, 45], [50, 51], [52, 53, 54]]
    kw = dict(num_beams=6, num_return_sequences=4, max_new_tokens=6, catalogue=items)
    want = generate(model, PROMPTS, **kw).hypotheses
    got = generate(model, PROMPTS, share_prompt_cache=True, **kw).hypotheses
    assert_same_hypotheses(got, want, tol=FLOAT32)
    assert all(h.tokens[:-1] in items and h.tokens[-1] in EOS for hyps in got for h in hyps)


def test_the_cache_holds_each_prompt_once_and_each_rows_own_columns():
    """GPT-2 of 2 layers, 4 heads of 8 (d=32), float32, 4 prompts (the widest 7 tokens), beam 8,
    ``max_new_tokens=6``: after 2 fed tokens each layer holds keys and values of the 4 prompts,
    4 x 4 heads x 7 columns x 8 floats each, and of the 32 rows' own columns, allocated at the
    first write for the 5 tokens a 6-step search feeds (the first step's logits are the
    prefill's): 32 x 4 x 5 x 8 floats each."""
    _, (plain, shared) = both("gpt2", PROMPTS, max_new_tokens=6)
    state = shared.init_state
    _, state = shared.step(state, torch.zeros(4, dtype=torch.int64))  # the prefill's logits
    state = select_state(state, torch.arange(4).repeat_interleave(8))
    for _ in range(2):
        _, state = shared.step(state, torch.zeros(32, dtype=torch.int64))
    prompts = 2 * 2 * (4 * 4 * 7 * 8) * 4  # layers x (keys, values) x floats x bytes per float
    own = 2 * 2 * (32 * 4 * 5 * 8) * 4
    assert state.cache.bytes() == prompts + own
    assert state.cache.layers[0].keys.shape == (32, 4, 2, 8)


def test_a_shared_cache_selected_alone_holds_the_rows_it_was_given():
    """``select_state`` on the cache itself (not the adapter's state): each new row's own columns
    and the prompt it reads are those of the old row it was taken from (a plain gather), and the
    model's attention setting is back to its own after the steps."""
    model, (_, shared) = both("llama", PROMPTS, max_new_tokens=6)
    before = model.config._attn_implementation
    state = shared.init_state
    _, state = shared.step(state, torch.zeros(4, dtype=torch.int64))
    state = select_state(state, [0, 0, 1, 2, 2, 3])
    for token in (5, 6):
        _, state = shared.step(state, torch.full((6,), token) + torch.arange(6))
    assert model.config._attn_implementation == before
    old, idx = state.cache, [5, 1, 1, 4]  # input 1 (row 2) is not taken: its prompt is dropped
    new = select_state(old, idx)
    assert new.shared.keys[0].shape[0] == 3 and old.shared.keys[0].shape[0] == 4
    for layer in range(2):
        torch.testing.assert_close(new.layers[layer].keys, old.layers[layer].keys[idx], atol=0, rtol=0)
        torch.testing.assert_close(new.layers[layer].values, old.layers[layer].values[idx], atol=0, rtol=0)
        for r, i in enumerate(idx):
            was, now = int(old.shared.rows[i]), int(new.shared.rows[r])
            assert torch.equal(new.shared.keys[layer][now], old.shared.keys[layer][was])
            assert torch.equal(new.shared.mask[now], old.shared.mask[was])


def test_refusals_name_the_parameter():
    with pytest.raises(ValueError, match="share_prompt=True is implemented for .* got model type 'mistral'"):
        causal_lm(build("mistral"), PROMPTS, eos_token_id=EOS, share_prompt=True)
    windowed = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=0)).eval()
    with pytest.raises(ValueError, match="share_prompt=True needs full-attention layers"):
        causal_lm(windowed, PROMPTS, eos_token_id=EOS, share_prompt=True)
    with pytest.raises(ValueError, match="share_prompt_cache=True is implemented for decoder-only models"):
        generate(build("bart"), PROMPTS, num_beams=2, max_new_tokens=2, share_prompt_cache=True)
    with pytest.raises(TypeError, match="share_prompt must be True or False; got 'yes'"):
        causal_lm(build("gpt2"), PROMPTS, eos_token_id=EOS, share_prompt="yes")
    model = build("gpt2")
    plain = causal_lm(model, PROMPTS[:1], eos_token_id=EOS).init_state
    shared = causal_lm(model, PROMPTS[1:2], eos_token_id=EOS, share_prompt=True).init_state
    with pytest.raises(TypeError, match="shared prompt cache"):
        concat_state([plain, shared])
