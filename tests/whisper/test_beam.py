"""WhisperBeam against openai/whisper's ``BeamSearchDecoder`` itself, both driven by one toy model
on a tiny vocabulary (logits from a random table by last token and step: ties none, eot often),
for beam sizes, patiences and several inputs in one batch; then finalize and rank by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beamsearch.controls.shared import mode_options
from beamsearch.core.hypothesis import Hypothesis
from beamsearch.core.plan import Plan, run_plan
from beamsearch.whisper import WhisperBeam, finalize, rank, whisper_score
from tests.whisper import openai_package

whisper = openai_package.load()
torch = pytest.importorskip("torch")
V, EOT, STEPS = 7, 6, 6


def _table(seed: int, n: int) -> np.ndarray:
    """float32 ``[N, STEPS, V, V]``: input i's logits at step t after token y."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(n, STEPS, V, V)).astype(np.float32) * 2
    table[..., EOT] += 0.5
    return table


def _ours(table: np.ndarray, beam: int, patience: float) -> list[list[Hypothesis]]:
    n = table.shape[0]

    def step(state: tuple, y_prev: np.ndarray) -> tuple:
        item, t = state
        return table[item, t, y_prev], (item, t + 1)

    opts = mode_options("test", [[0]] * n, {"eos_token_id": EOT, "max_steps": STEPS})
    results = run_plan(step, (np.arange(n), np.zeros(n, np.int64)), Plan(opts, WhisperBeam(beam, patience), beam,
                                                                         n_best=None))
    return [finalize(hyps, beam) for hyps in results]


class _Inference:
    def rearrange_kv_cache(self, source_indices: list[int]) -> None:  # the toy model keeps no cache
        pass


def _theirs(table: np.ndarray, beam: int, patience: float) -> list[dict[tuple, float]]:
    """whisper's decoder loop (``_main_loop`` and ``finalize``) on the same model."""
    n = table.shape[0]
    decoder = whisper.decoding.BeamSearchDecoder(beam, EOT, _Inference(), patience)
    tokens = torch.zeros((n * beam, 1), dtype=torch.long)
    sum_logprobs = torch.zeros(n * beam)
    item = torch.arange(n).repeat_interleave(beam)
    for t in range(STEPS):
        logits = torch.from_numpy(table[item.numpy(), t, tokens[:, -1].numpy()])
        tokens, completed = decoder.update(tokens, logits, sum_logprobs)
        if completed:
            break
    decoder.finalize(tokens.reshape(n, beam, -1), sum_logprobs.reshape(n, beam))
    return decoder.finished_sequences


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("beam", "patience"), [(1, 1.0), (3, 1.0), (3, 2.0), (4, 0.5), (5, 1.5)])
def test_the_candidates_of_whisper_beam_search_decoder(seed: int, beam: int, patience: float) -> None:
    """Against whisper's batch of the 3 inputs, or each input alone where patience < 1: there
    whisper's batch is not independent (an input done with C < B candidates is filled with the live
    rows it has when the *last* input is done), ours takes them when the input itself is done."""
    table = _table(seed, 3)
    want_all = _theirs(table, beam, patience) if patience >= 1 else \
        [_theirs(table[i:i + 1], beam, patience)[0] for i in range(3)]
    for got, want in zip(_ours(table, beam, patience), want_all, strict=True):
        as_dict = {(0, *h.tokens, *([] if h.finished else [EOT])): h.logprob for h in got}
        assert as_dict.keys() == want.keys()
        for key, value in want.items():
            assert math.isclose(as_dict[key], value, rel_tol=1e-6, abs_tol=1e-6)


def test_an_input_decoded_alone_gets_what_it_gets_in_a_batch() -> None:
    table = _table(9, 4)
    batch = _ours(table, 3, 2.0)
    for i in range(4):
        alone = _ours(table[i:i + 1], 3, 2.0)[0]
        assert [(h.tokens, h.finished) for h in alone] == [(h.tokens, h.finished) for h in batch[i]]


def test_finalize_fills_with_the_live_rows_by_logprob() -> None:
    """By hand: one finished; B = 3 takes the two best unfinished by logprob, not by length."""
    hyps = [Hypothesis([1, 2], -3.0, 0.0, False), Hypothesis([4, EOT], -2.0, 0.0, True),
            Hypothesis([5, 5], -1.0, 0.0, False), Hypothesis([3, 3], -2.5, 0.0, False)]
    assert [h.tokens for h in finalize(hyps, 3)] == [[4, EOT], [5, 5], [3, 3]]
    assert [h.tokens for h in finalize(hyps, 1)] == [[4, EOT]]


def test_rank_by_logprob_per_token_or_by_the_gnmt_penalty() -> None:
    """By hand: -3 over 3 tokens (-1.0) beats -2 over 1 (-2.0) with length_penalty None; with
    alpha 1 the penalties are (5+3)/6 = 4/3 and (5+1)/6 = 1: -2.25 against -2.0, the short one."""
    long, short = Hypothesis([1, 2, 3, EOT], -3.0, 0.0, True), Hypothesis([1, EOT], -2.0, 0.0, True)
    assert rank([short, long], None)[0].tokens == long.tokens
    assert rank([long, short], 1.0)[0].tokens == short.tokens
    assert whisper_score(-3.0, 3, 1.0) == -3.0 / (8 / 6)
    assert whisper_score(-2.0, 0, None) == -2.0  # whisper divides by zero here; we by one


def test_where_whispers_beam_rule_and_generates_part() -> None:
    """transformers' rule (generate's num_beams, our mode="transformers") on the same toy input
    ends elsewhere: its best [4, eot] scores -1.351 / 2 (eot counted in the length), whisper's
    -1.351 / 1, below [4, 5, eot] at -2.483 / 2 = -1.241, whisper's best."""
    from beamsearch import transformers_beam_search

    table = _table(18, 1)

    def step(state: tuple, y_prev: np.ndarray) -> tuple:
        item, t = state
        return table[item, t, y_prev], (item, t + 1)

    theirs = transformers_beam_search(step, (np.zeros(1, np.int64), np.zeros(1, np.int64)), [[0]], beam_size=3,
                                      eos_token_id=EOT, max_steps=STEPS, early_stopping=True)[0][0]
    mine = rank(_ours(table, 3, 1.0)[0], None)
    assert theirs.tokens == [4, EOT] and mine[0].tokens == [4, 5, EOT]
    assert mine[0].score == pytest.approx(-2.4827 / 2, abs=1e-4)
    assert [h.score for h in mine if h.tokens == [4, EOT]] == [pytest.approx(-1.3512, abs=1e-4)]
