"""A real decoder: a GRU seq2seq with Luong attention and input feeding (torch, seeded weights)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

torch = pytest.importorskip("torch")

from beamsearch import beam_search, beam_search_batch, greedy_decode  # noqa: E402


class DecoderState(NamedTuple):
    h: torch.Tensor  # [k, H]
    feed: torch.Tensor  # [k, H], the attentional vector fed back (input feeding)
    memory: torch.Tensor  # [k, S, H], encoder outputs


class LuongSeq2Seq(torch.nn.Module):
    def __init__(self, vocab: int = 7, hidden: int = 16, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.encoder = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.cell = torch.nn.GRUCell(2 * hidden, hidden)
        self.attn = torch.nn.Linear(hidden, hidden, bias=False)  # Luong "general"
        self.combine = torch.nn.Linear(2 * hidden, hidden)
        self.out = torch.nn.Linear(hidden, vocab)
        for p in self.parameters():
            p.data.mul_(3.0)  # sharper distributions: beam and greedy differ more often

    @torch.no_grad()
    def init_state(self, sources: list[list[int]]) -> DecoderState:
        src = torch.tensor(sources)
        memory, last = self.encoder(self.emb(src))  # [N, S, H], [1, N, H]
        return DecoderState(last[0], torch.zeros_like(last[0]), memory)

    @torch.no_grad()
    def step(self, state: DecoderState, y_prev: torch.Tensor):
        h = self.cell(torch.cat([self.emb(y_prev), state.feed], dim=1), state.h)  # [k, H]
        weights = torch.softmax(torch.einsum("ksh,kh->ks", state.memory, self.attn(h)), dim=1)
        context = torch.einsum("ks,ksh->kh", weights, state.memory)
        feed = torch.tanh(self.combine(torch.cat([context, h], dim=1)))
        return self.out(feed).double(), DecoderState(h, feed, state.memory)

    def rescore(self, source: list[int], tokens: list[int], bos: int) -> float:
        """Teacher forcing: the sum of log p(token | prefix), one row, no search involved."""
        state = self.init_state([source])
        total, prev = 0.0, bos
        for t in tokens:
            logits, state = self.step(state, torch.tensor([prev]))
            total += torch.log_softmax(logits[0], dim=0)[t].item()
            prev = t
        return total


SOURCES = [[1, 2, 3, 4], [4, 4, 2, 1], [6, 5, 1, 3], [2, 2, 2, 2]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_decodes_a_seq2seq(seed):
    model = LuongSeq2Seq(seed=seed)
    for source in SOURCES:
        state = model.init_state([source])
        (one,) = beam_search(model.step, state, bos=0, eos=1, beam_size=1, max_len=8)
        g = greedy_decode(model.step, state, bos=0, eos=1, max_len=8)
        assert one.tokens == g.tokens and one.logprob == pytest.approx(g.logprob, abs=1e-9)
        for h in beam_search(model.step, state, bos=0, eos=1, beam_size=4, max_len=8):
            # float32 model: a k-row call and a 1-row call round differently (float32 tolerance)
            assert h.logprob == pytest.approx(model.rescore(source, h.tokens, bos=0), abs=1e-5)


def test_batched_seq2seq_equals_each_source_alone():
    model = LuongSeq2Seq(seed=3)
    kw = dict(eos_token_id=1, max_steps=8, beam_size=3, n_best=2, alpha=0.6, bos_token_id=0)
    prompts = [[]] * len(SOURCES)
    together = beam_search_batch(model.step, model.init_state(SOURCES), prompts, **kw)
    for source, hyps in zip(SOURCES, together, strict=True):
        alone = beam_search_batch(model.step, model.init_state([source]), [[]], **kw)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in hyps]
        assert [h.logprob for h in alone] == pytest.approx([h.logprob for h in hyps], abs=1e-6)
        for h in hyps:
            assert h.logprob == pytest.approx(model.rescore(source, h.tokens, bos=0), abs=1e-6)
