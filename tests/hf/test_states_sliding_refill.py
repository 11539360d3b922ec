"""Refill on models with a sliding-window attention layer shorter than the sequences: inputs that
join a search mid-way feed a masked dummy token at the join, whose column must not take a place
in their window (they would see one token fewer than alone until it slid out). Models: Mistral
(every layer a window of 4) and RecurrentGemma (recurrent blocks and a window of 4), tiny random
weights, eos unlikely so every input runs to its max_steps (prompts of up to 7 tokens and 8 new
ones: three windows). Oracles: each input decoded alone (no join, no padding), and the model's
teacher-forced logprob of each hypothesis (the whole sequence in one call, no cache)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.hf import causal_lm  # noqa: E402
from tests.hf.test_recurrent import _BASE, _IDS, EOS, PROMPTS, V, refilled, rescore  # noqa: E402

T = transformers
MODELS = {
    "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**_BASE, sliding_window=4)),
    "recurrent_gemma": lambda: T.RecurrentGemmaForCausalLM(T.RecurrentGemmaConfig(
        **_IDS, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, lru_width=16, attention_window_size=4, conv1d_width=4,
        block_types=["recurrent", "attention"])),
}
ITEMS = [{"prompt": p, "max_steps": s} for p, s in zip(PROMPTS + [[30, 31], [44, 6, 7]], [2, 8, 3, 8, 6], strict=True)]


def windowed(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    bias = torch.zeros(V)
    bias[EOS] = -20.0
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: out * 8.0 + bias)
    return model


@pytest.mark.parametrize("name", list(MODELS))
def test_inputs_joining_mid_search_get_what_they_get_alone_once_past_the_window(name):
    model = windowed(name)
    got, stats = refilled(model, ITEMS, 4, 8)
    assert stats.mixed_calls > 0  # inputs did join a search in flight
    for i, item in enumerate(ITEMS):
        dec = causal_lm(model, [item["prompt"]], max_new_tokens=8)
        (alone,) = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=EOS, beam_size=2, n_best=2,
                                     max_steps=item["max_steps"])
        assert got[i].error is None
        assert [h.tokens for h in got[i].hypotheses] == [h.tokens for h in alone], i
        assert [h.logprob for h in got[i].hypotheses] == pytest.approx([h.logprob for h in alone], abs=1e-4)
        for h in got[i].hypotheses:
            assert h.logprob == pytest.approx(rescore(model, item["prompt"], h.tokens), abs=1e-4)
