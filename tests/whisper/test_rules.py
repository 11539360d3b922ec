"""The rules as processors against openai/whisper's own ``LogitFilter`` classes on random logits
and random generated tokens (timestamps and text mixed), numpy and torch; then the
composition's edges by hand."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.backends import backend_of
from beamsearch.processors import StepContext
from beamsearch.whisper import TimestampRules, WhisperTokens, whisper_processors
from tests.whisper import openai_package

whisper = openai_package.load()
torch = pytest.importorskip("torch")
TOK = whisper.tokenizer.get_tokenizer(True, num_languages=99, language="en", task="transcribe")
WT = WhisperTokens.from_openai(TOK)
V = 51865


def _context(generated: np.ndarray, logits: object, prompt_columns: int = 0) -> StepContext:
    """A step t = generated + 1 context, the history optionally led by prompt columns."""
    k = generated.shape[0]
    history = np.concatenate([np.full((k, prompt_columns), 7, np.int64), generated], axis=1)
    return StepContext(generated.shape[1] + 1, history, np.arange(k, dtype=np.int64), backend_of(logits))


def _random_case(rng: np.random.Generator, k: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits with the timestamps near the text's top, and generated tokens mixing text and
    non-decreasing timestamps (pairs, lone ones, up to the end)."""
    logits = rng.normal(size=(k, V)).astype(np.float32) * 3
    logits[:, WT.timestamp_begin:] += rng.normal(size=(k, 1)).astype(np.float32) * 2 - 6
    gen = np.empty((k, t), np.int64)
    for r in range(k):
        ts = WT.timestamp_begin + np.sort(rng.integers(0, 40, size=t))
        text = rng.integers(0, WT.eot, size=t)
        gen[r] = np.where(rng.random(t) < 0.4, ts, text)
    return logits, gen


@pytest.mark.parametrize("t", [0, 1, 2, 5])
@pytest.mark.parametrize("max_index", [None, 3])
@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_timestamp_rules_ban_what_whisper_bans(t: int, max_index: int | None, library: str) -> None:
    rng = np.random.default_rng(t * 10 + (max_index or 0))
    logits, gen = _random_case(rng, 12, t)
    prompt = [*TOK.sot_sequence]
    want = torch.from_numpy(logits.copy())
    whisper.decoding.ApplyTimestampRules(TOK, len(prompt), max_index).apply(
        want, torch.cat([torch.tensor([prompt] * 12), torch.from_numpy(gen)], dim=1))
    x = logits.copy() if library == "numpy" else torch.from_numpy(logits.copy())
    got = TimestampRules(WT.timestamp_begin, WT.eot, WT.no_timestamps, max_index)(x, _context(gen, x, prompt_columns=3))
    got_np = got if library == "numpy" else got.numpy()
    np.testing.assert_array_equal(np.isinf(got_np), np.isinf(want.numpy()))  # the same entries banned
    kept = ~np.isinf(got_np)
    np.testing.assert_array_equal(got_np[kept], logits[kept])  # the others as they were


def test_the_rules_of_one_window_compose_as_whisper_filters() -> None:
    """suppress_blank, suppress_tokens and the timestamp rules in whisper's order, at steps 1 and 3."""
    rng = np.random.default_rng(5)
    prompt = [*TOK.sot_sequence]
    for t in (0, 2):
        logits, gen = _random_case(rng, 6, t)
        want = torch.from_numpy(logits.copy())
        tokens = torch.cat([torch.tensor([prompt] * 6), torch.from_numpy(gen)], dim=1)
        filters = [whisper.decoding.SuppressBlank(TOK, len(prompt)),
                   whisper.decoding.SuppressTokens(_whisper_suppressed()),
                   whisper.decoding.ApplyTimestampRules(TOK, len(prompt), 50)]
        for f in filters:
            f.apply(want, tokens)
        got = logits.copy()
        for p in whisper_processors(WT, max_initial_timestamp_index=50):
            got = p(got, _context(gen, got))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want.numpy()))


def _whisper_suppressed() -> list[int]:
    task = whisper.decoding.DecodingTask.__new__(whisper.decoding.DecodingTask)
    task.tokenizer, task.options = TOK, whisper.decoding.DecodingOptions()
    return list(task._get_suppress_tokens())


def test_the_first_step_allows_timestamps_up_to_the_max_initial_one_only() -> None:
    """By hand: step 1 bans all text and every timestamp after <|0.00|> + 2, and <|notimestamps|>."""
    logits = np.zeros((1, V), np.float32)
    out = TimestampRules(WT.timestamp_begin, WT.eot, WT.no_timestamps, 2)(logits, _context(np.zeros((1, 0), np.int64),
                                                                                          logits))
    assert np.flatnonzero(np.isfinite(out[0])).tolist() == [WT.timestamp_begin, WT.timestamp_begin + 1,
                                                             WT.timestamp_begin + 2]


def test_after_a_lone_timestamp_only_a_later_timestamp_or_eot() -> None:
    """By hand: <|0.00|>, text, then <|0.40|> (lone): the text below eot is banned (whisper bans
    ``[:eot]``, not the specials after it), eot stays, and the timestamps from <|0.40|> on. eot's
    logit 10 keeps the timestamps' total (1481 entries at 0: log 1481 = 7.3) below it."""
    ts = WT.timestamp_begin + 20
    gen = np.array([[WT.timestamp_begin, 100, ts]], np.int64)
    logits = np.zeros((1, V), np.float32)
    logits[0, WT.eot] = 10
    out = TimestampRules(WT.timestamp_begin, WT.eot, WT.no_timestamps)(logits, _context(gen, logits))
    want = [WT.eot, *[i for i in range(WT.eot + 1, WT.timestamp_begin) if i != WT.no_timestamps], *range(ts, V)]
    assert np.flatnonzero(np.isfinite(out[0])).tolist() == want
    logits[0, WT.eot] = 7  # now the timestamps' total wins: only they are left
    out = TimestampRules(WT.timestamp_begin, WT.eot, WT.no_timestamps)(logits, _context(gen, logits))
    assert np.flatnonzero(np.isfinite(out[0])).tolist() == list(range(ts, V))


def test_a_bad_max_initial_timestamp_index_is_named() -> None:
    with pytest.raises(ValueError, match="max_initial_timestamp_index must be None or an int >= 0; got -1"):
        TimestampRules(WT.timestamp_begin, WT.eot, WT.no_timestamps, -1)


def test_no_suppression_at_all_for_an_empty_suppress_tokens() -> None:
    kinds = [type(p).__name__ for p in whisper_processors(WT, suppress_blank=False, suppress_tokens=(),
                                                           timestamps=False)]
    assert kinds == []
