"""HotwordBias: each next token's logit change is the change of the plain rule's bonus (the
positions in completed occurrences or the match in progress, counted by brute force over the
text: tests/speech/test_hotwords.py's ``decoding_positions``), on random phrase lists and random
texts; in a search, a phrase the model would not say comes out once its weight is high enough."""

from __future__ import annotations

import numpy as np
import pytest

from beamsearch.whisper import WhisperOptions, WhisperTokens, decode_windows, initial_tokens
from beamsearch.whisper.hotwords import HotwordBias
from tests.speech.test_hotwords import decoding_positions, random_phrases

V = 9


@pytest.mark.parametrize("seed", range(8))
def test_every_tokens_change_is_the_plain_rules(seed: int) -> None:
    rng = np.random.default_rng(seed)
    phrases = random_phrases(rng, 4, 5)
    bias = HotwordBias(phrases, 1.5, V)
    for _ in range(6):
        text = [int(t) for t in rng.integers(0, 6, size=int(rng.integers(0, 9)))]
        rows = bias.start_rows(1)
        for t in text:
            rows = rows.advance(np.array([t]))
        want = [1.5 * (decoding_positions([*text, v], phrases) - decoding_positions(text, phrases)) for v in range(V)]
        np.testing.assert_allclose(bias.deltas(rows)[0], want)


def test_phrases_per_input() -> None:
    bias = HotwordBias([[(1, 2)], [(3,)]], 2.0, V, per_input=True)
    rows = bias.start_rows(2)
    d = bias.deltas(rows)
    assert d[0, 1] == 2.0 and d[0, 3] == 0.0 and d[1, 3] == 2.0 and d[1, 1] == 0.0
    with pytest.raises(ValueError, match="HotwordBias has phrases for 2 inputs; the search has 3"):
        bias.start_rows(3)


def test_a_bad_phrase_is_named() -> None:
    with pytest.raises(ValueError, match=r"phrases\[1\] must hold 1 to 62 token ids in \[0, 9\); got \[9\]"):
        HotwordBias([(1,), (9,)], 1.0, V)


TOKENS = WhisperTokens(eot=5, sot=6, sot_prev=10, sot_lm=9, no_speech=11, no_timestamps=12, timestamp_begin=13,
                       transcribe=8, translate=7, blank=(0,), non_speech=(), sot_sequence=(6, 8))


def test_a_phrase_comes_out_in_a_search_once_weighted() -> None:
    """A model that prefers token 1 then eot; the phrase (3, 4) earns 2 x weight: at weight 0 the
    text is [1], at weight 4 it holds the phrase."""
    table = np.full((16, 16), -2.0, np.float32)
    table[:, 1] = 2.0
    table[1, 5] = 3.0

    def step(state: np.ndarray, y_prev: np.ndarray) -> tuple:
        return table[y_prev], state

    prompt = initial_tokens(TOKENS, timestamps=False)
    texts = []
    for weight in (0.0, 4.0):
        o = WhisperOptions(beam_size=3, sample_len=6, timestamps=False, suppress_tokens=None,
                           logits_processors=(HotwordBias([(3, 4)], weight, 16),))
        texts.append(decode_windows(step, np.zeros(1), [prompt], TOKENS, o)[0].tokens)
    assert texts[0] == [1] and any(texts[1][i:i + 2] == [3, 4] for i in range(len(texts[1])))
