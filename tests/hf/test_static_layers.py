"""Static caches carried through the search: ``cache_implementation="static"`` (in a generation
config, or ``causal_lm``'s argument) runs the prompt into a ``transformers`` ``StaticCache`` which
the search reorders, copies and joins (:mod:`beamsearch.hf.static_layers`).

Configs chosen so that every static layer kind ``transformers`` 5.25 builds a ``StaticCache`` of is
used by a model (the test below checks it): ``StaticLayer`` (Qwen3.5, beside linear attention),
``StaticSlidingWindowLayer`` (Mistral, window 4: shorter than the sequences), ``StaticIndexedLayer``
(Qwen4-Exp), ``LinearAttentionAndStaticFullAttentionLayer`` (Zamba2; Inkling2) and
``LinearAttentionAndStaticSlidingWindowAttentionLayer`` (Inkling2, window 4). Oracles: ``generate``
on its own static cache; teacher-forced rescoring; the same search over the adapter's dynamic cache
(refill); a step that recomputes each row's whole prefix (every mode, step search); plain indexing
and concatenation of the tensors put in (the layer rules, built by hand).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers.cache_utils import (  # noqa: E402
    Cache,
    DynamicCache,
    LinearAttentionAndStaticFullAttentionLayer,
    LinearAttentionAndStaticSlidingWindowAttentionLayer,
    LinearAttentionLayer,
    StaticCache,
    StaticIndexedLayer,
    StaticLayer,
    StaticSlidingWindowLayer,
)

from beamsearch import beam_search_batch, diverse_beam_search, step_search  # noqa: E402
from beamsearch.core.state import concat_state, select_state, take_state  # noqa: E402
from beamsearch.hf import causal_lm, generate  # noqa: E402
from beamsearch.hf.caches import reorder_in_place  # noqa: E402
from beamsearch.hf.recurrent import joined_layer  # noqa: E402
from tests.hf.test_recurrent import _BASE, CONFIGS, EOS, PROMPTS, build, inkling2, refilled, rescore, theirs  # noqa: E402
from tests.hf.test_reward import Recompute  # noqa: E402


def model_of(name, eos_bias=0.0, window=4):
    """The model ``name`` of :mod:`test_hf_recurrent` (``build``), or Mistral with a sliding window
    of ``window`` on every layer; Inkling2's window ``window`` too."""
    if name == "mistral":
        return build(f"mistral_w{window}", eos_bias, make=lambda: transformers.MistralForCausalLM(
            transformers.MistralConfig(**_BASE, sliding_window=window)))
    if name == "inkling2" and window != 4:
        return build(f"inkling2_w{window}", eos_bias, make=lambda: inkling2(window=window))
    return build(name, eos_bias)


def llama():
    """A full-attention model whose prompt cache can be shared (``share_prompt``)."""
    return build("llama", make=lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**_BASE)))


KINDS = {  # the static layer kinds each model's StaticCache holds
    "qwen3_5": {LinearAttentionLayer, StaticLayer},
    "mistral": {StaticSlidingWindowLayer},
    "qwen4_exp": {LinearAttentionLayer, StaticIndexedLayer},
    "zamba2": {LinearAttentionLayer, LinearAttentionAndStaticFullAttentionLayer},
    "inkling2": {LinearAttentionAndStaticSlidingWindowAttentionLayer, LinearAttentionAndStaticFullAttentionLayer},
}
NAMES = list(KINDS)
STATIC = dict(cache_implementation="static")


def caches_seen(model):
    """The types of cache the model's forwards are handed (a pre-hook) and the rows and tokens of
    each call's input, and the hook's handle."""
    seen = []

    def hook(module, args, kwargs):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        ids = kwargs.get("input_ids")
        seen.append((type(cache).__name__, None if ids is None else tuple(ids.shape)))

    return seen, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_every_static_layer_kind_is_used_by_a_model_here():
    kinds = {name: {type(layer) for layer in StaticCache(config=model_of(name).config, max_cache_len=8).layers}
             for name in NAMES}
    assert kinds == KINDS
    mapped = {kind for kind in transformers.cache_utils.STATIC_LAYER_TYPE_MAPPING.values()
              if kind.__module__ == "transformers.cache_utils"}  # not the model-specific kinds their files register
    assert set().union(*KINDS.values()) == mapped - {transformers.cache_utils.DummyLayer}


@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_generate_on_its_static_cache(name):
    model = model_of(name, eos_bias=2.0)
    seen, handle = caches_seen(model)
    try:
        expected, _ = theirs(model, PROMPTS, num_beams=1, max_new_tokens=8, **STATIC)
        assert {kind for kind, _ in seen} == {"StaticCache"}  # the oracle runs on its static cache
        seen.clear()
        got = generate(model, PROMPTS, num_beams=1, max_new_tokens=8, **STATIC)
        assert {kind for kind, _ in seen} == {"StaticCache"}  # and so do we
    finally:
        handle.remove()
    assert [hyps[0].tokens for hyps in got.hypotheses] == expected
    for prompt, hyps in zip(PROMPTS, got.hypotheses, strict=True):
        assert hyps[0].logprob == pytest.approx(rescore(model, prompt, hyps[0].tokens), abs=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_the_transformers_rule_gives_generates_static_beam_search(name):
    """``mode="transformers"`` on a static cache against ``generate`` on its own, eos likely: the
    same sequences in the same order, every score its ``sequences_scores`` to 1e-5; the prompt
    runs once, one row per input (``generate`` runs it once per beam), then one token per row."""
    model = model_of(name, eos_bias=3.0)
    kw = dict(num_beams=3, num_return_sequences=2, max_new_tokens=6)
    expected, scores = theirs(model, PROMPTS, **STATIC, **kw)
    config = transformers.GenerationConfig(**model.generation_config.to_dict())
    config.cache_implementation = "static"
    seen, handle = caches_seen(model)
    try:
        got = generate(model, PROMPTS, mode="transformers", generation_config=config, **kw)
    finally:
        handle.remove()
    assert [h.tokens for hyps in got.hypotheses for h in hyps] == expected
    assert [h.score for hyps in got.hypotheses for h in hyps] == pytest.approx(scores, abs=1e-5)
    assert seen[0] == ("StaticCache", (len(PROMPTS), max(map(len, PROMPTS))))
    assert all(kind == "StaticCache" and shape[1] == 1 for kind, shape in seen[1:])


@pytest.mark.parametrize("longer", [None, 40])
def test_the_static_cache_is_sized_as_generate_sizes_it(longer):
    """The padded prompt plus the new tokens but one, or the config's ``max_cache_len`` when longer.

    A model of its own per case: ``generate`` keeps the static cache it built on the model and
    reuses it at the next call when it is long enough, so after the case of 40 the shared model
    would size the next ``generate`` at 40 (the result then depends on the order of the tests)."""
    model = build(f"qwen3_5_cache_{longer}", make=CONFIGS["qwen3_5"])
    lengths = []

    def hook(module, args, kwargs):
        cache = kwargs.get("cache")
        lengths.append({layer.max_cache_len for layer in cache.layers if hasattr(layer, "max_cache_len")})

    kw = dict(num_beams=2, max_new_tokens=3, **STATIC, **({} if longer is None else {"max_cache_len": longer}))
    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        theirs(model, PROMPTS, **kw)
        expected = lengths[:]
        lengths.clear()
        generate(model, PROMPTS, **kw)
    finally:
        handle.remove()
    assert expected[0] == {7 + 3 - 1 if longer is None else longer}
    assert lengths == [expected[0]] * len(lengths)


@pytest.mark.parametrize("name", NAMES)
def test_every_hypothesis_scores_its_rescoring_and_decodes_alike_alone(name):
    model = model_of(name, eos_bias=2.0)
    kw = dict(num_beams=3, num_return_sequences=3, max_new_tokens=6, **STATIC)
    batch = generate(model, PROMPTS, **kw)
    for prompt, hyps in zip(PROMPTS, batch.hypotheses, strict=True):
        for h in hyps:
            assert h.logprob == pytest.approx(rescore(model, prompt, h.tokens), abs=1e-4)
    (alone,) = generate(model, [PROMPTS[1]], **kw).hypotheses  # the shortest prompt, the most padded in the batch
    assert [h.tokens for h in batch.hypotheses[1]] == [h.tokens for h in alone]
    assert [h.score for h in batch.hypotheses[1]] == pytest.approx([h.score for h in alone], abs=1e-4)


@pytest.mark.parametrize("name,window", [(n, 4) for n in NAMES] + [("mistral", 16), ("inkling2", 16)])
def test_refill_joins_static_caches_mid_search_as_a_dynamic_cache_decodes_them_together(name, window):
    """decode_stream with static caches of one ``max_cache_len``: inputs join a search in flight
    (rows aligned at their last token, their keys moved right), rows leave (leading padding
    columns dropped, freeing places), and each input gets what the adapter's dynamic cache gives
    it when every input starts at once. A window of 4 is full when rows join; one of 16 is not
    (the joined keys fill its first places)."""
    model = model_of(name, eos_bias=-20.0, window=window)  # eos unlikely: inputs run to their max_steps
    items = [{"prompt": p, "max_steps": s} for p, s in zip(PROMPTS + [[30, 31]], [2, 5, 3, 3], strict=True)]
    got, stats = refilled(model, items, 4, 5, **STATIC, max_cache_len=16)
    assert stats.mixed_calls > 0
    want, stats = refilled(model, items, 8, 5)
    assert stats.cohorts == 1
    for i in range(len(items)):
        assert got[i].error is None and want[i].error is None
        assert [h.tokens for h in got[i].hypotheses] == [h.tokens for h in want[i].hypotheses], i
        assert [h.logprob for h in got[i].hypotheses] == pytest.approx([h.logprob for h in want[i].hypotheses],
                                                                       rel=1e-5, abs=1e-4)


TWO = PROMPTS[:2]
COMMON = dict(eos_token_id=EOS, max_steps=3)
SEARCHES = {
    "beam": lambda s, st, p: beam_search_batch(s, st, p, beam_size=3, n_best=3, **COMMON),
    "diverse": lambda s, st, p: diverse_beam_search(s, st, p, num_groups=2, diversity_penalty=1.0, beam_size=4,
                                                    n_best=4, **COMMON),
    "step": lambda s, st, p: step_search(s, st, p, scorer=lambda prompts, sols: [float(sum(x) % 7) for x in sols],
                                         n=4, m=2, rounds=2, expansion="beam", eos_token_id=EOS, max_steps=3,
                                         stop_sequences=[[7]]),
}


def hypotheses(results):
    return [[(tuple(h.tokens), h.logprob) for h in getattr(r, "hypotheses", r)] for r in results]


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name", ["qwen3_5", "inkling2"])
def test_modes_and_step_search_carry_a_static_cache_as_full_recomputation_gives(name, search):
    """Step search copies rows out (``take_state``) and joins partial solutions at different
    token counts (``concat_state``)."""
    model = model_of(name, eos_bias=1.0)
    dec = causal_lm(model, TWO, **STATIC, max_cache_len=24)
    ref = Recompute(model)
    got = hypotheses(SEARCHES[search](dec.step, dec.init_state, dec.prompts))
    want = hypotheses(SEARCHES[search](ref.step, ref.init_state(TWO), TWO))
    assert [[t for t, _ in r] for r in got] == [[t for t, _ in r] for r in want]
    assert [lp for r in got for _, lp in r] == pytest.approx([lp for r in want for _, lp in r], abs=1e-4)


def prefilled(name="qwen3_5", rows=((5, 6), (7, 8)), max_cache_len=8):
    """The model ``name`` and its static cache after a prefill of ``rows`` (one length)."""
    model = model_of(name)
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        model(torch.tensor(rows), cache=cache)
    return model, cache


def row_tensors(cache):
    """Every row tensor of a static cache's layers, by layer and name (copies)."""
    out = {}
    for i, layer in enumerate(cache.layers):
        for name in ("keys", "values", "indexer_keys"):
            if isinstance(getattr(layer, name, None), torch.Tensor):
                out[i, name] = getattr(layer, name).clone()
        for j, t in getattr(layer, "conv_states", {}).items():
            if t is not None:
                out[i, f"conv{j}"] = t.clone()
        for j, t in getattr(layer, "recurrent_states", {}).items():
            if t is not None:
                out[i, f"rec{j}"] = t.clone()
        if isinstance(getattr(layer, "indexer_position_ids", None), torch.Tensor):  # [dims, k, t]: rows first here
            out[i, "positions"] = layer.indexer_position_ids.transpose(0, 1).clone()
    return out


@pytest.mark.parametrize("name", NAMES)
def test_a_static_cache_as_a_state_moves_its_rows_as_plain_indexing(name):
    """select_state, take_state and concat_state of a whole StaticCache (a prefill's), against the
    tensors put in: rows on axis 0, the fixed length kept, each copy counting its own tokens."""
    model, cache = prefilled(name)
    before, idx = row_tensors(cache), torch.tensor([1, 1, 0])
    for move in (select_state, take_state):
        new = move(cache, idx)
        assert type(new) is StaticCache and [type(x) for x in new.layers] == [type(x) for x in cache.layers]
        assert all(torch.equal(t, before[key][idx]) for key, t in row_tensors(new).items())
        assert row_tensors(cache).keys() == before.keys()
        assert all(torch.equal(t, before[key]) for key, t in row_tensors(cache).items())  # left as it was
        assert int(new.get_seq_length()) == 2
    with torch.no_grad():  # the copy takes a token; the original's counts do not move
        model(torch.tensor([[9], [9], [9]]), cache=new)
    assert int(new.get_seq_length()) == 3 and int(cache.get_seq_length()) == 2
    joined = concat_state([cache, select_state(cache, torch.tensor([0]))])
    assert all(torch.equal(t, torch.cat([before[key], before[key][[0]]])) for key, t in row_tensors(joined).items())


def test_static_caches_at_different_counts_or_lengths_are_not_joined_alone():
    _, a = prefilled()
    _, b = prefilled(rows=((5, 6, 7), (7, 8, 9)))
    with pytest.raises(ValueError, match=r"static caches at different token counts \(2 and 3\) cannot be joined"):
        concat_state([a, b])
    _, c = prefilled(max_cache_len=9)
    with pytest.raises(ValueError, match=r"StaticLayer layers can be joined only at one max_cache_len .*8 and 9"):
        concat_state([a, c])


def test_a_step_of_ones_own_carrying_a_static_cache_gives_what_a_dynamic_cache_gives():
    """beam_search_batch over a bare step whose state is the model's cache: a StaticCache moves
    with its rows as a DynamicCache does (it used to be refused)."""
    model = model_of("qwen3_5")

    def step(state, y_prev):
        with torch.no_grad():
            out = model(torch.as_tensor(y_prev)[:, None], cache=state)
        return out.logits[:, -1], out.cache

    results = []
    for cache in (StaticCache(config=model.config, max_cache_len=8), DynamicCache(config=model.config)):
        with torch.no_grad():
            model(torch.tensor([[5], [7]]), cache=cache)
        results.append(beam_search_batch(step, cache, [[5, 6], [7, 8]], beam_size=2, n_best=2, eos_token_id=EOS,
                                         max_steps=4))
    assert [[h.tokens for h in r] for r in results[0]] == [[h.tokens for h in r] for r in results[1]]
    assert [h.logprob for r in results[0] for h in r] == pytest.approx([h.logprob for r in results[1] for h in r],
                                                                       abs=1e-5)


class OtherCache(Cache):
    """A cache kind the search has no rule for."""

    def __init__(self):
        self.layers = []


def test_any_other_cache_kind_is_refused_naming_how_to_register_it():
    for move in (lambda: select_state(OtherCache(), [0]), lambda: concat_state([OtherCache()])):
        with pytest.raises(TypeError, match=r"an? OtherCache cannot be a search state: .*@select_state.register"
                                            r"\(OtherCache\) and @concat_state.register\(OtherCache\)"):
            move()


def test_what_a_static_cache_cannot_do_is_refused_saying_why():
    model = model_of("qwen3_5")
    for kw, what in ((dict(max_new_tokens=4, max_cache_len=8), r"max_cache_len sizes a static cache"),
                     (dict(cache_implementation="offloaded"), r"cache_implementation must be None, .*'offloaded'"),
                     (dict(**STATIC), r"needs max_new_tokens or max_cache_len"),
                     (dict(**STATIC, max_new_tokens=4, max_cache_len=9), r"max_cache_len=9 is shorter than a prompt of "
                                                                         r"7 tokens and 3 generated tokens fed back"),
                     (dict(**STATIC, max_new_tokens=4, share_prompt=True), r"share_prompt=True .* cannot be a static")):
        with pytest.raises(ValueError, match=what):
            causal_lm(llama() if "share_prompt" in kw else model, PROMPTS, **kw)
    with pytest.raises(ValueError, match=r"a rwkv model keeps its state partly outside a Cache"):
        causal_lm(build("rwkv"), PROMPTS, max_new_tokens=4, **STATIC)
    dec = causal_lm(model, PROMPTS, max_new_tokens=3, eos_token_id=None, **STATIC)  # 7 + 2 places: no fourth step
    with pytest.raises(ValueError, match=r"the static cache is full: its max_cache_len=9 places"):
        beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, beam_size=2,
                          max_steps=4)
    static = causal_lm(model, PROMPTS[:1], max_new_tokens=3, **STATIC).init_state
    dynamic = causal_lm(model, PROMPTS[:1], max_new_tokens=3).init_state
    with pytest.raises(TypeError, match=r"states with a static cache .* and states with a dynamic one"):
        concat_state([static, dynamic])
    longer = causal_lm(model, PROMPTS[:1], max_new_tokens=3, **STATIC, max_cache_len=12).init_state
    with pytest.raises(ValueError, match=r"max_cache_len 7 and 12: prepare every cohort with one max_cache_len"):
        concat_state([static, longer])


def static(kind, k, seed, tokens, max_cache_len=6):
    """A ``kind`` layer (window 4 for a sliding one) fed ``tokens`` tokens of ``k`` rows, one at a
    time: keys and values ``[k, 2, max_cache_len or 4, 2]``; a ``StaticIndexedLayer`` its indexer
    keys ``[k, max_cache_len, 3]`` too."""
    layer = kind(max_cache_len) if kind is not StaticSlidingWindowLayer else kind(max_cache_len, sliding_window=4)
    g = torch.Generator().manual_seed(seed)
    for _ in range(tokens):
        layer.update(torch.randn(k, 2, 1, 2, generator=g), torch.randn(k, 2, 1, 2, generator=g))
        if kind is StaticIndexedLayer:
            layer.update_indexer(torch.randn(k, 1, 3, generator=g))
    return layer


def in_cache(layer):
    cache = DynamicCache()
    cache.layers = [layer]
    return cache


KEY_KINDS = [StaticLayer, StaticSlidingWindowLayer, StaticIndexedLayer]


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_static_layers_move_their_rows_and_keep_their_length(kind):
    """Rows on axis 0 of keys, values (and indexer keys), checked against plain indexing; the fixed
    length and the token count kept; a copy counts its own tokens (the model adds in place)."""
    layer, idx = static(kind, 3, 0, 5), torch.tensor([2, 0, 2, 1])
    names = ["keys", "values"] + (["indexer_keys"] if kind is StaticIndexedLayer else [])
    before = {name: getattr(layer, name).clone() for name in names}
    (new,) = select_state(in_cache(layer), idx).layers
    assert all(torch.equal(getattr(new, name), before[name][idx]) for name in names)
    assert new.keys.shape[2] == before["keys"].shape[2] and int(new.get_seq_length()) == 5 and type(new) is kind
    new.update(torch.ones(4, 2, 1, 2), torch.ones(4, 2, 1, 2))  # the copy is written to, the original not
    assert int(layer.get_seq_length()) == 5 and torch.equal(layer.keys, before["keys"])
    reorder_in_place(in_cache(layer), idx)
    assert all(torch.equal(getattr(layer, name), before[name][idx]) for name in names)


def aligned(x, filled, end, width, axis=2):
    """``x``'s first ``filled`` places on ``axis`` moved to end at place ``end`` of ``width``, zeros elsewhere."""
    shape = list(x.shape)
    shape[axis] = width
    out = torch.zeros(shape)
    out.narrow(axis, end - filled, filled).copy_(x.narrow(axis, 0, filled))
    return out


@pytest.mark.parametrize("kind", KEY_KINDS)
@pytest.mark.parametrize("tokens", [2, 5])
def test_static_layers_at_different_counts_join_aligned_at_their_last_token(kind, tokens):
    """Layers that have seen ``tokens`` and 1 token joined at ``tokens``: the second's keys moved
    ``tokens - 1`` places right (a window of 4 that both fill (``tokens=5``): its place ``4 - 1``),
    zeros before them; the joined layer counts ``tokens`` and takes the next token at its end."""
    a, b = static(kind, 2, 0, tokens), static(kind, 1, 1, 1)
    joined = joined_layer([a, b], [torch.tensor([1, 0]), None], tokens)
    window = kind is StaticSlidingWindowLayer
    width, end = a.keys.shape[2], min(tokens, 4) if window else tokens
    for name in ("keys", "values") + (("indexer_keys",) if kind is StaticIndexedLayer else ()):
        axis = 1 if name == "indexer_keys" else 2
        x, y = getattr(a, name), getattr(b, name)
        want = torch.cat([aligned(x[[1, 0]], end, end, width, axis), aligned(y, 1, end, width, axis)])
        assert torch.equal(getattr(joined, name), want), name
    assert int(joined.get_seq_length()) == tokens and joined.max_cache_len == a.max_cache_len
    joined.update(torch.ones(3, 2, 1, 2), torch.ones(3, 2, 1, 2))
    assert int(joined.get_seq_length()) == tokens + 1
    assert torch.equal(joined.keys[:, :, -1 if window and tokens >= 4 else tokens], torch.ones(3, 2, 2))


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_static_layers_of_different_lengths_are_not_joined(kind):
    """One shared write position per layer, in a fixed number of places: different ``max_cache_len``
    are refused, naming both."""
    a, b = static(kind, 2, 0, 3), static(kind, 2, 1, 3, max_cache_len=3)
    with pytest.raises(ValueError, match=rf"{kind.__name__} layers can be joined only at one max_cache_len .*"
                                         rf"got max_cache_len 3 and (4|6)"):
        joined_layer([a, b], [None, None], 3)
