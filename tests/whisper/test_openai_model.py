"""The step over an openai-whisper model: its cached logits equal the decoder run on the whole
sequence at every step, with rows reordered between steps as a beam search reorders them."""

from __future__ import annotations

import pytest

from beamsearch import select_state
from beamsearch.whisper import OpenAIWhisperStep, no_speech_probs
from tests.whisper import openai_package
from tests.whisper.test_decode import build, mels

whisper = openai_package.load()
torch = pytest.importorskip("torch")


def test_the_cached_step_equals_the_decoder_on_the_whole_sequence() -> None:
    model, tok = build(0, 0.0, 1.0)
    mel = mels(2)
    prompt = torch.tensor([list(tok.sot_sequence)] * 2)
    step = OpenAIWhisperStep(model)
    state = step.start(mel, prompt)
    features = model.encoder(mel).detach()
    seqs = prompt.clone()
    y = prompt[:, -1]
    orders = [[1, 0, 0], [0, 1, 2], [2, 0], [1, 1]]  # rows forked, kept, dropped, as a beam moves them
    for t, kept in enumerate(orders):
        logits, state = step(state, y)
        with torch.no_grad():
            full = model.decoder(seqs, features)[:, -1]
        torch.testing.assert_close(logits, full, rtol=1e-4, atol=1e-4)
        order = torch.tensor(kept)
        features = features[order]
        state = select_state(state, order)
        y = torch.argsort(logits, dim=1, descending=True)[order, t % 3]
        seqs = torch.cat([seqs[order], y[:, None]], dim=1)


def test_no_speech_probs_read_the_logits_at_sot() -> None:
    model, tok = build(0, 0.0, 1.0)
    mel = mels(2)
    result = [whisper.decoding.decode(model, mel[i], whisper.decoding.DecodingOptions(language="en", fp16=False,
                                                                                      sample_len=2)) for i in range(2)]
    features = model.encoder(mel).detach()
    got = no_speech_probs(model, features, torch.tensor([list(tok.sot_sequence)] * 2), 0, tok.no_speech)
    for g, r in zip(got, result, strict=True):
        assert abs(g - r.no_speech_prob) <= 1e-6 + 1e-4 * r.no_speech_prob


def test_the_audio_keys_are_gathered_only_when_the_rows_windows_change() -> None:
    """Rows reordered within their windows keep the same cross-attention tensors (no copy); rows
    of a window that left are gathered out."""
    from beamsearch.whisper import CrossCache

    keys = torch.arange(4.0).repeat_interleave(6).reshape(4, 3, 2)  # row r holds r everywhere
    cache = CrossCache({"k": keys}, torch.tensor([0, 0, 1, 1]))
    same = select_state(cache, torch.tensor([1, 1, 3, 2]))
    assert same is cache
    fewer = select_state(cache, torch.tensor([2, 3]))
    assert fewer.windows.tolist() == [1, 1] and fewer.tensors["k"][:, 0, 0].tolist() == [2.0, 3.0]
