"""The cache layers of recurrent and hybrid models as rows the search moves
(:mod:`beamsearch.hf.recurrent`, :mod:`beamsearch.hf.carried`), built by hand, no model: each
tensor after a reorder, a copy or a join is compared with plain indexing and concatenation of the
tensors put in (the oracle), and the inputs are checked unchanged where the operation promises it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers import LlamaConfig  # noqa: E402
from transformers.cache_utils import (  # noqa: E402
    DummyLayer,
    DynamicCache,
    DynamicIndexedLayer,
    DynamicLayer,
    LinearAttentionAndFullAttentionLayer,
    LinearAttentionLayer,
    StaticCache,
    StaticLayer,
)

from beamsearch.core.state import concat_state, select_state, take_state  # noqa: E402
from beamsearch.hf.caches import reorder_in_place  # noqa: E402
from beamsearch.hf.carried import CarriedCache  # noqa: E402
from beamsearch.hf.recurrent import LAYER_RULES, LayerRule, held, register_layer, restore  # noqa: E402
from beamsearch.hf.states import CausalState  # noqa: E402


def linear(layer, k, seed):
    """``layer`` (a linear-attention kind) fed a prefill of ``k`` rows: conv ``[k, 3, 4]``,
    recurrent ``[k, 2, 2, 2]`` (and keys/values ``[k, 2, 5, 2]`` for a hybrid layer)."""
    g = torch.Generator().manual_seed(seed)
    layer.update_conv_state(torch.randn(k, 3, 4, generator=g))
    layer.update_recurrent_state(torch.randn(k, 2, 2, 2, generator=g))
    if isinstance(layer, DynamicLayer):
        layer.update(torch.randn(k, 2, 5, 2, generator=g), torch.randn(k, 2, 5, 2, generator=g))
    return layer


def kv(k, seed, t=5):
    layer = DynamicLayer()
    g = torch.Generator().manual_seed(seed)
    layer.update(torch.randn(k, 2, t, 2, generator=g), torch.randn(k, 2, t, 2, generator=g))
    return layer


def hybrid_cache(k, seed):
    """A cache with one layer of each kind: linear attention, linear + full attention, full
    attention, and a layer holding nothing (a Dummy: an MLP-only block)."""
    cache = DynamicCache()
    cache.layers = [linear(LinearAttentionLayer(), k, seed),
                    linear(LinearAttentionAndFullAttentionLayer(), k, seed + 1),
                    kv(k, seed + 2), DummyLayer()]
    return cache


def tensors(cache):
    """Every row tensor of the cache, by name (copies: the oracle's inputs)."""
    a, b, c, _ = cache.layers
    return {"conv0": a.conv_states[0].clone(), "rec0": a.recurrent_states[0].clone(),
            "conv1": b.conv_states[0].clone(), "rec1": b.recurrent_states[0].clone(),
            "keys1": b.keys.clone(), "values1": b.values.clone(), "keys2": c.keys.clone(), "values2": c.values.clone()}


def test_select_state_and_the_in_place_reorder_take_the_rows_of_every_layer_kind():
    cache = hybrid_cache(3, 0)
    before = tensors(cache)
    idx = torch.tensor([2, 0, 2, 1])
    new = select_state(cache, idx)
    for name, t in tensors(new).items():
        assert torch.equal(t, before[name][idx]), name
    for name, t in tensors(cache).items():  # select_state copies: the cache is as it was
        assert torch.equal(t, before[name]), name
    new.layers[0].recurrent_states[0].add_(1.0)  # the model writes into the new tensors in place
    assert torch.equal(cache.layers[0].recurrent_states[0], before["rec0"])
    assert isinstance(new.layers[3], DummyLayer)
    reorder_in_place(cache, idx)
    for name, t in tensors(cache).items():
        assert torch.equal(t, before[name][idx]), name


def state(cache, k, columns):
    """An adapter state over ``cache`` (``k`` rows, ``columns`` cache columns, every one real)."""
    return CausalState(cache, torch.ones(k, columns + 4, dtype=torch.long), torch.full((k,), columns), columns,
                       columns, None, None, torch.arange(k))


def test_concat_state_joins_fixed_size_states_and_left_pads_keys_and_take_state_copies():
    """Two searches at different lengths (5 and 7 columns) joined: the recurrent states are
    concatenated (a fixed size per row), the keys of the shorter left-padded with zero columns
    (masked); the linear layers count the joined length. A take then copies rows out."""
    small = hybrid_cache(2, 10)
    big = DynamicCache()
    big.layers = [linear(LinearAttentionLayer(), 3, 20), linear(LinearAttentionAndFullAttentionLayer(), 3, 21),
                  kv(3, 22), DummyLayer()]
    for layer in big.layers[1:3]:  # 7 columns: two more tokens
        layer.update(torch.ones(3, 2, 2, 2), torch.ones(3, 2, 2, 2))
    a, b = tensors(small), tensors(big)
    joined = concat_state([state(small, 2, 5), state(big, 3, 7)])
    got = tensors(joined.cache)
    for name in ("conv0", "rec0", "conv1", "rec1"):
        assert torch.equal(got[name], torch.cat([a[name], b[name]])), name
    for name in ("keys1", "values1", "keys2", "values2"):
        padded = torch.cat([torch.zeros(2, 2, 2, 2), a[name]], dim=2)  # two zero columns on the left
        assert torch.equal(got[name], torch.cat([padded, b[name]])), name
    assert joined.columns == 7 and joined.mask[:2, :2].sum() == 0 and joined.mask[2:, :7].all()
    assert int(joined.cache.layers[0].cumulative_length_linear) == 7
    rows = torch.tensor([4, 0])
    taken = take_state(joined, rows)
    for name, t in tensors(taken.cache).items():
        assert torch.equal(t, got[name][rows]), name  # row 0 is padded: no column dropped
    assert torch.equal(tensors(joined.cache)["rec0"], got["rec0"])  # take_state left the joined state as it was


def indexed(k, seed, t, positions=True):
    """A cache of one indexed-attention layer (``k`` rows, ``t`` columns): keys and values ``[k, 2,
    t, 2]``, indexer keys ``[k, t, 3]`` and (``positions``: a model's first indexed layer) column
    positions ``[3, k, t]``; and its tensors by name (copies: the oracle's inputs)."""
    g = torch.Generator().manual_seed(seed)
    layer = DynamicIndexedLayer()
    layer.update(torch.randn(k, 2, t, 2, generator=g), torch.randn(k, 2, t, 2, generator=g))
    layer.update_indexer(torch.randn(k, t, 3, generator=g))
    layer.indexer_position_ids = torch.randint(0, 99, (3, k, t), generator=g) if positions else None
    cache = DynamicCache()
    cache.layers = [layer]
    return cache


def indexed_tensors(cache):
    (layer,) = cache.layers
    names = ("keys", "values", "indexer_keys") + (("indexer_position_ids",) if layer.indexer_position_ids is not None
                                                  else ())
    return {name: getattr(layer, name).clone() for name in names}


@pytest.mark.parametrize("positions", [True, False])
def test_an_indexed_attention_layer_moves_its_indexer_keys_and_positions_with_its_rows(positions):
    """Rows: axis 0 of keys, values and indexer keys, axis 1 of the positions ``[3, k, t]``;
    columns: axis 2, 1 and 2. Each checked against plain indexing / zero-padding and concatenation."""
    rows_axis = {"keys": 0, "values": 0, "indexer_keys": 0, "indexer_position_ids": 1}
    cache, idx = indexed(3, 0, 5, positions), torch.tensor([2, 0, 2, 1])
    before = indexed_tensors(cache)
    new = select_state(cache, idx)
    for name, t in indexed_tensors(new).items():
        assert torch.equal(t, before[name].index_select(rows_axis[name], idx)), name
    assert all(torch.equal(t, before[name]) for name, t in indexed_tensors(cache).items())  # a copy
    reorder_in_place(cache, idx)
    for name, t in indexed_tensors(cache).items():
        assert torch.equal(t, before[name].index_select(rows_axis[name], idx)), name
    small, big = indexed(2, 1, 5, positions), indexed(3, 2, 7, positions)
    a, b = indexed_tensors(small), indexed_tensors(big)
    joined = concat_state([state(small, 2, 5), state(big, 3, 7)])
    for name, t in indexed_tensors(joined.cache).items():
        columns = 1 if name == "indexer_keys" else 2
        pad = list(a[name].shape)
        pad[columns] = 2  # two zero columns on the left of the shorter search's rows
        padded = torch.cat([torch.zeros(pad, dtype=a[name].dtype), a[name]], dim=columns)
        assert torch.equal(t, torch.cat([padded, b[name]], dim=rows_axis[name])), name
    got, first = indexed_tensors(joined.cache), torch.tensor([0, 1])
    taken = take_state(joined, first)  # the first two columns: padding for both rows kept, dropped
    assert taken.columns == 5
    for name, t in indexed_tensors(taken.cache).items():
        axis = 1 if name == "indexer_keys" else 2
        assert torch.equal(t, got[name].index_select(rows_axis[name], first).narrow(axis, 2, 5)), name


def test_held_and_restore_put_rows_back_as_they_were():
    """A row fed a dummy token has its recurrent states set back (a recurrence has no mask)."""
    cache = hybrid_cache(3, 5)
    before = tensors(cache)
    rows = torch.tensor([1])
    kept = held(cache, rows)
    for layer in cache.layers[:2]:
        layer.conv_states[0].add_(1.0)
        layer.recurrent_states[0].add_(1.0)
    restore(cache, rows, kept)
    after = tensors(cache)
    for name in ("conv0", "rec0", "conv1", "rec1"):
        assert torch.equal(after[name][1], before[name][1]) and torch.equal(after[name][0], before[name][0] + 1.0)


class MadeUpLayer:
    """A layer kind no rule is registered for: one row tensor, ``memory [k, 3]``."""

    def __init__(self, memory):
        self.memory = memory

    def get_seq_length(self):
        return 0


class MadeUpLinear(LinearAttentionLayer):
    """A subclass of a registered kind that may hold more state: not moved as its base."""


class MadeUpStatic(StaticLayer):
    """A subclass of a registered static kind (a model's own static layer, as transformers' model
    files define): not moved as its base."""


@pytest.mark.parametrize("kind", [MadeUpLayer, MadeUpLinear, MadeUpStatic])
@pytest.mark.parametrize("container", [DynamicCache, StaticCache])
def test_an_unknown_layer_kind_is_an_error_naming_it_and_how_to_register_it(kind, container):
    cache = DynamicCache() if container is DynamicCache else StaticCache(config=LlamaConfig(), max_cache_len=4)
    made = {MadeUpLayer: lambda: kind(torch.arange(6.0).reshape(2, 3)), MadeUpStatic: lambda: kind(8)}
    cache.layers = [made.get(kind, kind)(), kv(2, 0)]
    name = kind.__name__
    for move in (lambda: select_state(cache, torch.tensor([1, 0])),
                 lambda: take_state(cache, torch.tensor([1, 0])),
                 lambda: reorder_in_place(cache, torch.tensor([1, 0])),
                 lambda: concat_state([state(cache, 2, 5), state(cache, 2, 5)])):
        with pytest.raises(TypeError, match=rf"cache layers of type {name} .*register_layer\({name}, LayerRule"):
            move()


def test_a_registered_made_up_layer_kind_is_moved_by_its_rule():
    def reorder(layer, idx):
        layer.memory = layer.memory[idx]

    rule = LayerRule(reorder, lambda layer, idx: MadeUpLayer(layer.memory[idx]),
                     lambda layers, columns: MadeUpLayer(torch.cat([x.memory for x in layers])))
    register_layer(MadeUpLayer, rule)
    try:
        cache = DynamicCache()
        memory = torch.arange(6.0).reshape(2, 3)
        cache.layers = [kv(2, 0), MadeUpLayer(memory)]
        assert torch.equal(select_state(cache, torch.tensor([1, 1, 0])).layers[1].memory, memory[[1, 1, 0]])
        joined = concat_state([state(cache, 2, 5), state(cache, 2, 5)])
        assert torch.equal(joined.cache.layers[1].memory, torch.cat([memory, memory]))
    finally:
        del LAYER_RULES[MadeUpLayer]


class CacheWithRows(DynamicCache):
    """A cache kind holding a row tensor beside its layers, unregistered."""

    def __init__(self):
        super().__init__()
        self.beside = torch.zeros(2, 3)


def test_a_cache_holding_unregistered_tensors_beside_its_layers_is_an_error_naming_them():
    cache = CacheWithRows()
    cache.layers = [kv(2, 0)]
    with pytest.raises(TypeError, match=r"CacheWithRows holds \['beside'\] .*register_extras\(CacheWithRows"):
        select_state(cache, torch.tensor([1, 0]))


def test_a_carried_state_is_reordered_and_joined_with_its_cache():
    """RWKV-like state outside any layer: rows on axis 0 of each carried tensor."""
    g = torch.Generator().manual_seed(3)
    caches = []
    for k, tokens in ((2, 4), (3, 6)):
        cache = CarriedCache()
        cache.carried, cache.tokens = [torch.randn(k, 4, 2, generator=g), torch.randn(k, 5, generator=g)], tokens
        caches.append(cache)
    before = [[t.clone() for t in c.carried] for c in caches]
    idx = torch.tensor([1, 1, 0])
    new = select_state(caches[0], idx)
    assert all(torch.equal(t, b[idx]) for t, b in zip(new.carried, before[0], strict=True))
    assert all(torch.equal(t, b) for t, b in zip(caches[0].carried, before[0], strict=True))
    joined = concat_state([state(caches[0], 2, 4), state(caches[1], 3, 6)])
    assert all(torch.equal(t, torch.cat([a, b])) for t, a, b in zip(joined.cache.carried, *before, strict=True))
    assert joined.cache.tokens == 6 and joined.cache.get_seq_length() == 6
