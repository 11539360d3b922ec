"""Static caches (``cache_implementation="static"``): ``hf.generate`` with the setting gives what
``transformers``' ``generate`` gives with its static cache (the adapter carries its own dynamic
cache: the setting changes no result), on a hybrid of linear and full attention (Qwen3.5, whose
static cache has ``StaticLayer`` layers) and a sliding-window model (Mistral, window 4, shorter
than the sequences: ``StaticSlidingWindowLayer``); and a static cache (or any ``Cache`` the search
cannot move) as the state of a step of one's own is refused, naming the setting, where it used to
pass through select_state unchanged (every row would have kept its own keys whatever the beam
picked)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers.cache_utils import Cache, DynamicCache, StaticCache, StaticSlidingWindowLayer  # noqa: E402

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.core.state import concat_state, select_state, take_state  # noqa: E402
from beamsearch.hf import generate  # noqa: E402
from test_hf_recurrent import _BASE, EOS, PAD, PROMPTS, build, theirs  # noqa: E402

STATIC = r'cache_implementation="static"'


def mistral():
    torch.manual_seed(0)
    model = transformers.MistralForCausalLM(transformers.MistralConfig(**_BASE, sliding_window=4)).eval()
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = EOS, PAD
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: out * 8.0)
    return model


def caches_seen(model):
    """The types of cache the model's forwards are handed (a pre-hook), and the hook's handle."""
    seen = []

    def hook(module, args, kwargs):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        seen.append(type(cache).__name__)

    return seen, model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("name", ["qwen3_5", "mistral"])
def test_the_static_cache_setting_gives_generates_static_beam_search(name):
    model = build(name, eos_bias=1.0) if name == "qwen3_5" else mistral()
    kw = dict(num_beams=3, num_return_sequences=2, max_new_tokens=6)
    seen, handle = caches_seen(model)
    expected, scores = theirs(model, PROMPTS, cache_implementation="static", **kw)
    assert "StaticCache" in seen  # the oracle does run on its static cache
    seen.clear()
    config = transformers.GenerationConfig(**model.generation_config.to_dict())
    config.cache_implementation = "static"
    got = generate(model, PROMPTS, mode="transformers", generation_config=config, **kw)
    handle.remove()
    assert "StaticCache" not in seen
    assert [h.tokens for hyps in got.hypotheses for h in hyps] == expected
    assert [h.score for hyps in got.hypotheses for h in hyps] == pytest.approx(scores, abs=1e-5)


def static_cache():
    """Qwen3.5's static cache (a linear-attention layer and a ``StaticLayer``) after a two-row prefill."""
    model = build("qwen3_5")
    cache = StaticCache(config=model.config, max_cache_len=8)
    with torch.no_grad():
        model(torch.tensor([[5, 6], [7, 8]]), cache=cache)
    return model, cache


def test_a_static_cache_as_a_search_state_is_refused_naming_the_setting():
    model, cache = static_cache()
    idx = torch.tensor([1, 1])
    for move in (lambda: select_state(cache, idx), lambda: take_state(cache, idx),
                 lambda: concat_state([cache, cache]), lambda: select_state({"cache": cache}, idx)):
        with pytest.raises(TypeError, match=rf"a StaticCache cannot be a search state: .*{STATIC}.*DynamicCache"):
            move()
    mixed = DynamicCache()
    mixed.layers = [StaticSlidingWindowLayer(max_cache_len=8, sliding_window=4)]
    with pytest.raises(TypeError, match=rf"cache layers of type StaticSlidingWindowLayer are not supported: .*{STATIC}"):
        select_state(mixed, idx)

    def step(state, y_prev):  # a step of one's own carrying the static cache
        with torch.no_grad():
            out = model(torch.as_tensor(y_prev)[:, None], cache=state)
        return out.logits[:, -1], state

    with pytest.raises(TypeError, match=STATIC):
        beam_search_batch(step, cache, [[5, 6], [7, 8]], beam_size=2, eos_token_id=EOS, max_steps=3)


class OtherCache(Cache):
    """A cache kind the search has no rule for."""

    def __init__(self):
        self.layers = []


def test_any_other_cache_kind_is_refused_naming_how_to_register_it():
    for move in (lambda: select_state(OtherCache(), [0]), lambda: concat_state([OtherCache()])):
        with pytest.raises(TypeError, match=r"an? OtherCache cannot be a search state: .*@select_state.register"
                                            r"\(OtherCache\) and @concat_state.register\(OtherCache\)"):
            move()
