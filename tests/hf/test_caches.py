"""The causal adapter's rows kept in place and the reward model's kept rows, against full recomputation.

- When rows only leave (or are reordered without a copy), a cache whose layers hold their rows in
  place moves only the rows that fill the places of those that left (``CausalState.order`` says
  where each row is); every row's logits must still be those of its own whole prefix run alone
  through the model, through random selections, takes and joins.
- :class:`RewardScorer` with ``keep_cache`` reads only what a candidate adds to a row the previous
  call read; its scores must be those of each row run alone (read by hand), and the tokens it feeds
  are counted by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from approx import FLOAT32  # noqa: E402
from beamsearch import step_search  # noqa: E402
from beamsearch.core.state import concat_state, select_state, take_state  # noqa: E402
from beamsearch.hf import RewardScorer, causal_lm  # noqa: E402
from beamsearch.hf.caches import PromptLayer  # noqa: E402
from tests.hf.test_reward import DELIM, EOS, PAD, PROMPTS, VOCAB, Recompute, by_hand, lm, reward_model  # noqa: E402


def alone(model, rows):
    """float64 ``[k, V]``: each row's next-token logits, the row run alone through the model."""
    with torch.no_grad():
        return torch.stack([model(torch.tensor([r])).logits[0, -1] for r in rows]).double()


class Moves:
    """Counts the rows :meth:`PromptLayer.move_rows` copies (a spy around the real method)."""

    def __init__(self, monkeypatch):
        self.calls = self.rows = 0
        real = PromptLayer.move_rows

        def spy(layer, holes, movers, rows):
            self.calls += 1
            self.rows += int(holes.numel())
            return real(layer, holes, movers, rows)

        monkeypatch.setattr(PromptLayer, "move_rows", spy)


def check(dec, model, state, hist, rng, steps):
    """``steps`` steps of random tokens from ``state``; each step's logits against each row alone."""
    for _ in range(steps):
        y = rng.integers(3, VOCAB, len(hist))
        logits, state = dec.step(state, torch.tensor(y))
        hist = [h + [int(t)] for h, t in zip(hist, y, strict=True)]
        want = alone(model, hist)
        np.testing.assert_allclose(logits.double().numpy(), want.numpy(), atol=FLOAT32, rtol=0)
    return state, hist


@pytest.mark.parametrize("room", [None, 2])  # DeferredLayer caches until a join; PromptLayer from the prefill
def test_rows_kept_in_place_read_their_own_prefix_through_selections_takes_and_joins(monkeypatch, room):
    model, rng, moves = lm(), np.random.default_rng(3), Moves(monkeypatch)
    dec = causal_lm(model, PROMPTS, max_new_tokens=room)
    logits, state = dec.step(dec.init_state, torch.zeros(3, dtype=torch.long))  # the prefill's logits
    np.testing.assert_allclose(logits.double().numpy(), alone(model, PROMPTS).numpy(), atol=FLOAT32, rtol=0)
    idx = [0, 0, 1, 1, 1, 2, 2, 2, 0]
    state, hist = select_state(state, idx), [list(PROMPTS[i]) for i in idx]
    state, hist = check(dec, model, state, hist, rng, 1)
    state, hist = select_state(state, [8, 8, 0, 3, 2, 5, 7, 1, 6]), [hist[i] for i in [8, 8, 0, 3, 2, 5, 7, 1, 6]]
    early = take_state(state, [4, 0])  # taken while a reorder may still wait in the layers: composed with it
    check(dec, model, early, [hist[4], hist[0]], np.random.default_rng(5), 1)
    state, hist = check(dec, model, state, hist, rng, 1)
    # a join (as refill and step search make): two takes of the rows, in another order
    a, b = [5, 1, 7, 0], [3, 8, 2, 6, 4]
    state = concat_state([take_state(state, a), take_state(state, b)])
    hist = [hist[i] for i in a + b]
    assert all(isinstance(layer, PromptLayer) for layer in state.cache.layers)
    seen_order = False
    for kind in ["leave", "shuffle", "leave", "copy", "leave", "shuffle", "leave"]:
        k = len(hist)
        if kind == "leave":  # rows leave, the others keep their order
            idx = np.sort(rng.choice(k, size=k - 2, replace=False))
        elif kind == "shuffle":  # no row leaves, none copied: only a new order
            idx = rng.permutation(k)
        else:  # a row copied twice: the cache is gathered
            idx = np.sort(rng.choice(k, size=k, replace=True))
        state, hist = select_state(state, idx), [hist[i] for i in idx.tolist()]
        seen_order |= state.order is not None
        assert (state.order is None) == (kind == "copy")
        state, hist = check(dec, model, state, hist, rng, 2)
        taken = take_state(state, [len(hist) - 1, 0])  # rows taken out of a state in another order
        _, mine = check(dec, model, taken, [hist[-1], hist[0]], np.random.default_rng(9), 1)
    assert seen_order and moves.calls > 0
    assert moves.rows <= moves.calls * 2  # only the rows beyond the new width move (at most 2 leave a step)


def test_step_search_over_rows_kept_in_place_equals_full_recomputation(monkeypatch):
    """Round 2 on: the joined rows of ended segments hold their rows in place; segments end at every
    step, so rows leave at every step."""
    model, moves = lm(), Moves(monkeypatch)
    scorer = RewardScorer(reward_model())
    args = dict(n=6, m=2, rounds=3, sample_seed=4, eos_token_id=EOS, max_steps=4, stop_sequences=[[DELIM]])
    dec = causal_lm(model, PROMPTS)
    got = step_search(dec.step, dec.init_state, dec.prompts, scorer=scorer, **args)
    ref = Recompute(model)
    want = step_search(ref.step, ref.init_state(PROMPTS), PROMPTS, scorer=scorer, **args)
    assert [[h.segments for h in r] for r in got] == [[h.segments for h in r] for r in want]
    for r, w in zip(got, want, strict=True):
        for h, x in zip(r, w, strict=True):
            assert h.step_scores == pytest.approx(x.step_scores, abs=FLOAT32)
            assert h.logprob == pytest.approx(x.logprob, abs=FLOAT32 * len(h.tokens))
    assert moves.calls > 0


def random_rounds(rng, prompts, rounds, per_prompt):
    """Calls like step search's: each round's candidates extend one of the previous round's by a
    random segment of 1-4 tokens."""
    parts = [[[]] for _ in prompts]
    for _ in range(rounds):
        heads, tails = [], []
        for i, p in enumerate(prompts):
            for c in range(per_prompt):
                seg = rng.integers(4, VOCAB, int(rng.integers(1, 5))).tolist()
                heads.append(p)
                tails.append(parts[i][c % len(parts[i])] + seg)
        yield heads, tails
        parts = [[t for h, t in zip(heads, tails, strict=True) if h == p][:2] for p in prompts]


@pytest.mark.parametrize("kind, labels, kw", [("sequence", 1, {}), ("token", 2, dict(step_tag=[DELIM, 12])),
                                              ("sequence", 3, dict(step_tag=[DELIM], batch_rows=2, label=0))])
def test_kept_rows_give_the_scores_of_each_row_alone_and_feed_each_token_once(kind, labels, kw):
    model = reward_model(kind, labels)
    fed = []
    model.register_forward_pre_hook(lambda mod, args, kwargs: fed.append(kwargs), with_kwargs=True)
    scorer = RewardScorer(model, **kw)
    assert scorer.keep_cache
    tag = kw.get("step_tag", [])
    transform = "sigmoid" if labels == 1 else "softmax"
    prompts = [[5, 17, 33], [9], [40, 2, 11, 4, 4]]
    previous = None
    for heads, tails in random_rounds(np.random.default_rng(1), prompts, 4, 3):
        fed.clear()
        got = scorer(heads, tails)
        calls = list(fed)
        want = [by_hand(model, h + t + tag, kw.get("label", labels - 1), transform, kind == "sequence")
                for h, t in zip(heads, tails, strict=True)]
        assert got.tolist() == pytest.approx(want, abs=FLOAT32)
        tokens = sum(int(torch.count_nonzero(x["attention_mask"][:, -x["position_ids"].shape[1]:])) for x in calls)
        if previous is None:  # the first call: each prompt once, then each row's partial solution and tag
            assert tokens == sum(map(len, prompts)) + sum(len(t) + len(tag) for t in tails)
        else:  # later: what each row adds to the longest row the previous call read
            assert tokens == sum(len(t) - max(len(p) for p in previous if t[: len(p)] == p) + len(tag)
                                 for t in tails)
        previous = [[]] + tails


def test_kept_rows_handle_empty_prompts_repeats_and_rows_the_last_call_did_not_read():
    model = reward_model()
    scorer, plain = RewardScorer(model), RewardScorer(model, keep_cache=False)
    calls = [([[], [5], [5]], [[6, 7], [8], [8]]),  # an empty prompt: the whole row; a repeated row
             ([[], [5], [9, 9]], [[6, 7, 1], [8], [2]]),  # a row read before, fed again: its last token only
             ([[5], [5]], [[8, 1, 1], [4]])]  # one row extends a kept one, one only the prompt, not kept now
    for heads, tails in calls:
        want = [by_hand(model, h + t, 0, "sigmoid", True) for h, t in zip(heads, tails, strict=True)]
        assert scorer(heads, tails).tolist() == pytest.approx(want, abs=FLOAT32)
        assert plain(heads, tails).tolist() == pytest.approx(want, abs=FLOAT32)
    assert scorer([], []).shape == (0,)


def test_keep_cache_only_for_causal_full_attention_models():
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        pad_token_id=PAD, num_labels=1)).eval()
    assert not RewardScorer(bert).keep_cache  # bidirectional: a row's keys depend on the tokens after them
    with pytest.raises(ValueError, match="keep_cache=True needs .* bert"):
        RewardScorer(bert, keep_cache=True)
    mistral = transformers.MistralForSequenceClassification(transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, sliding_window=4, pad_token_id=PAD, num_labels=1)).eval()
    assert not RewardScorer(mistral).keep_cache  # a sliding window keeps its own cache
    with pytest.raises(TypeError, match="keep_cache"):
        RewardScorer(reward_model(), keep_cache="yes")


def test_kept_rows_stay_within_keep_bytes_and_rows_past_it_are_read_whole():
    model = reward_model()
    # GPT-2 2 layers x 32 wide, float32: a column's keys and values cost 2 layers x 2 x 32 x 4 = 512 bytes
    per_column = 512
    prompts = [[5, 17, 33], [9], [40, 2, 11, 4, 4]]
    fed = []
    model.register_forward_pre_hook(lambda mod, args, kwargs: fed.append(kwargs), with_kwargs=True)
    for budget, some in ((0, False), (20 * per_column, True)):
        scorer = RewardScorer(model, keep_bytes=budget)
        counts = []
        for heads, tails in random_rounds(np.random.default_rng(2), prompts, 3, 3):
            fed.clear()
            got = scorer(heads, tails)
            counts.append(sum(int(torch.count_nonzero(x["attention_mask"][:, -x["position_ids"].shape[1]:]))
                              for x in fed))
            want = [by_hand(model, h + t, 0, "sigmoid", True) for h, t in zip(heads, tails, strict=True)]
            assert got.tolist() == pytest.approx(want, abs=FLOAT32)
            assert scorer.kept.bytes <= budget and (scorer.kept.bytes > 0) == some
        whole = [sum(len(h) + len(t) for h, t in zip(heads, tails, strict=True))
                 for heads, tails in random_rounds(np.random.default_rng(2), prompts, 3, 3)]
        if some:  # some rows' extensions fed only their new tokens
            assert any(c < w for c, w in zip(counts[1:], whole[1:], strict=True))
        else:  # nothing kept: every row read whole, no prompt read apart
            assert counts == whole
    with pytest.raises(ValueError, match="keep_bytes"):
        RewardScorer(model, keep_bytes=-1)
