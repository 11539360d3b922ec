"""Static caches (``cache_implementation="static"``): ``hf.generate`` with the setting gives what
``transformers``' ``generate`` gives with its static cache (the adapter carries its own dynamic
cache: the setting changes no result), on a hybrid of linear and full attention (Qwen3.5, whose
static cache has ``StaticLayer`` layers) and a sliding-window model (Mistral, window 4, shorter
than the sequences: ``StaticSlidingWindowLayer``); and a static cache (or any ``Cache`` the search
cannot move) as the state of a step of one's own is refused, naming the setting, where it used to
pass through select_state unchanged (every row would have kept its own keys whatever the beam
picked). Static layers inside a ``DynamicCache`` one carries are moved by their rules
(:mod:`beamsearch.hf.static_layers`), checked against plain indexing and concatenation."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers.cache_utils import (Cache, DynamicCache, StaticCache, StaticIndexedLayer, StaticLayer,  # noqa: E402
                                      StaticSlidingWindowLayer)

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.core.state import concat_state, select_state, take_state  # noqa: E402
from beamsearch.hf import generate  # noqa: E402
from beamsearch.hf.caches import reorder_in_place  # noqa: E402
from beamsearch.hf.recurrent import joined_layer  # noqa: E402
from tests.hf.test_recurrent import _BASE, EOS, PAD, PROMPTS, build, theirs  # noqa: E402

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
    mixed.layers = [StaticIndexedLayer(max_cache_len=8)]  # a static kind with no rule
    with pytest.raises(TypeError, match=rf"cache layers of type StaticIndexedLayer are not supported: .*{STATIC}"):
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


def static(kind, k, seed, tokens, max_cache_len=6):
    """A ``kind`` layer (window 4 for a sliding one) fed ``tokens`` tokens of ``k`` rows, one at a
    time, in a ``DynamicCache``: keys and values ``[k, 2, max_cache_len or 4, 2]``."""
    layer = StaticLayer(max_cache_len) if kind is StaticLayer else kind(max_cache_len, sliding_window=4)
    g = torch.Generator().manual_seed(seed)
    for _ in range(tokens):
        layer.update(torch.randn(k, 2, 1, 2, generator=g), torch.randn(k, 2, 1, 2, generator=g))
    cache = DynamicCache()
    cache.layers = [layer]
    return cache


@pytest.mark.parametrize("kind", [StaticLayer, StaticSlidingWindowLayer])
def test_static_layers_in_a_carried_cache_move_their_rows_and_keep_their_length(kind):
    """Rows on axis 0 of keys and values, checked against plain indexing and concatenation; the
    fixed length and the token count kept; a copy counts its own tokens (the model adds in place)."""
    cache, idx = static(kind, 3, 0, 5), torch.tensor([2, 0, 2, 1])
    (layer,) = cache.layers
    keys, values, width = layer.keys.clone(), layer.values.clone(), layer.keys.shape[2]
    (new,) = select_state(cache, idx).layers
    assert torch.equal(new.keys, keys[idx]) and torch.equal(new.values, values[idx])
    assert new.keys.shape[2] == width and int(new.get_seq_length()) == 5 and type(new) is kind
    new.update(torch.ones(4, 2, 1, 2), torch.ones(4, 2, 1, 2))  # the copy is written to, the original not
    assert int(layer.get_seq_length()) == 5 and torch.equal(layer.keys, keys)
    reorder_in_place(cache, idx)
    assert torch.equal(layer.keys, keys[idx]) and torch.equal(layer.values, values[idx])
    other = static(kind, 2, 1, 5).layers[0]
    joined = joined_layer([layer, other], [torch.tensor([3, 1]), None], 5)
    assert torch.equal(joined.keys, torch.cat([keys[idx][[3, 1]], other.keys]))
    assert torch.equal(joined.values, torch.cat([values[idx][[3, 1]], other.values]))
    assert joined.keys.shape[2] == width and int(joined.get_seq_length()) == 5
    joined.update(torch.ones(4, 2, 1, 2), torch.ones(4, 2, 1, 2))  # the joined layer takes the next token
    assert int(joined.get_seq_length()) == 6 and int(layer.get_seq_length()) == 5


@pytest.mark.parametrize("kind", [StaticLayer, StaticSlidingWindowLayer])
def test_static_layers_at_different_counts_or_lengths_are_not_joined(kind):
    """One shared write position per layer: searches at different steps cannot share one."""
    a = static(kind, 2, 0, 3).layers[0]
    for b, what in ((static(kind, 2, 1, 4).layers[0], r"token counts \[3, 4\]"),  # a window: min(4, 3) columns
                    (static(kind, 2, 1, 3, max_cache_len=3).layers[0], r"max_cache_len \[3, (4|6)\]")):
        with pytest.raises(ValueError, match=rf"{kind.__name__} layers can be joined only .*{what}"):
            joined_layer([a, b], [None, None], 4)
