"""decode_windows on transformers' ``WhisperForConditionalGeneration`` (random weights, a tiny
config with Whisper's special tokens laid out in an 80-token vocabulary) through
:func:`beamsearch.hf.seq2seq_lm`, against ``model.generate``: the same sequences where the rules
coincide (greedy, with and without timestamps, given generate the same suppressed ids and
``max_initial_timestamp_index``), and each difference shown on a case:

- with timestamps, generate's short-form output stops after the last timestamp pair (its
  segment split); openai/whisper and decode_windows keep the text decoded after it;
- beam search: generate keeps its own beam rule (that of ``mode="transformers"``), not whisper's:
  they agree here, and part on the toy case of tests/whisper/test_beam.py (a finished
  candidate's length counts its eot in generate's score, not in whisper's).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest

from beamsearch.whisper import WhisperOptions, WhisperTokens, decode_windows, initial_tokens, suppressed_ids

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
hf = pytest.importorskip("beamsearch.hf")

V, N_AUDIO_CTX, N_TEXT_CTX = 80, 16, 64
# text 0..49 (" " = 10), then eot, sot, translate, transcribe, sot_lm, sot_prev, no_speech, no_timestamps, timestamps
WT = WhisperTokens(eot=50, sot=51, sot_prev=55, sot_lm=54, no_speech=56, no_timestamps=57, timestamp_begin=58,
                   transcribe=53, translate=52, blank=(10,), non_speech=(3, 4), sot_sequence=(51,))


@lru_cache(maxsize=4)
def build(seed: int, eot_boost: float = 0.0) -> Any:
    """A seeded tiny Whisper; its layers scaled up so that texts vary with the audio, eot pushed
    towards the final layer norm's bias by ``eot_boost``; generate given whisper's suppressed ids."""
    T.logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = T.WhisperConfig(vocab_size=V, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=2,
                             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                             decoder_ffn_dim=64, max_source_positions=N_AUDIO_CTX, max_target_positions=N_TEXT_CTX,
                             decoder_start_token_id=WT.sot, eos_token_id=WT.eot, pad_token_id=WT.eot,
                             bos_token_id=WT.eot, suppress_tokens=None, begin_suppress_tokens=None)
    model = T.WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.model.encoder.conv1.weight.mul_(10)
        for name, p in [*model.model.decoder.layers.named_parameters(), *model.model.encoder.layers.named_parameters()]:
            if p.ndim == 2:
                p.mul_(6 if "encoder_attn" in name else 3)
        u = torch.randn(32)
        u /= u.norm()
        model.model.decoder.layer_norm.bias.copy_(2 * u)
        model.model.decoder.embed_tokens.weight[WT.eot] += eot_boost * u
    gc = model.generation_config
    gc.no_timestamps_token_id = WT.no_timestamps
    gc.suppress_tokens = list(suppressed_ids(WT, (-1,)))
    gc.begin_suppress_tokens = [*WT.blank, WT.eot]
    gc.max_initial_timestamp_index = 1  # ours: round(1.0 s / (30 / 16) s)
    return model


def features(n: int, seed: int) -> Any:
    return torch.randn(n, 8, 2 * N_AUDIO_CTX, generator=torch.Generator().manual_seed(seed)) * 5


def ours(model: Any, feats: Any, options: WhisperOptions) -> list[list[int]]:
    dec = hf.seq2seq_lm(model, None, input_features=feats,
                        decoder_input_ids=[initial_tokens(WT, timestamps=options.timestamps)] * feats.shape[0])
    return [r.tokens for r in decode_windows(dec.step, dec.init_state, dec.prompts, WT, options,
                                             n_audio_ctx=N_AUDIO_CTX, n_text_ctx=N_TEXT_CTX)]


def theirs(model: Any, feats: Any, **kw: Any) -> list[list[int]]:
    out = model.generate(input_features=feats, max_new_tokens=12, do_sample=False, **kw)
    return [[t for t in row if t != WT.eot] for row in out.tolist()]  # eos and the padding after it


MODELS = [(0, 0.0), (1, 3.0), (3, 2.0), (4, 1.5)]


@pytest.mark.parametrize("model_args", MODELS)
def test_greedy_without_timestamps_is_generates(model_args: tuple) -> None:
    model, feats = build(*model_args), features(4, 7)
    assert ours(model, feats, WhisperOptions(sample_len=12, timestamps=False)) == \
        theirs(model, feats, num_beams=1, return_timestamps=False)


@pytest.mark.parametrize("model_args", MODELS)
def test_greedy_with_timestamps_is_generates_up_to_its_last_timestamp_pair(model_args: tuple) -> None:
    model, feats = build(*model_args), features(4, 7)
    got = ours(model, feats, WhisperOptions(sample_len=12))
    want = theirs(model, feats, num_beams=1, return_timestamps=True)
    for g, w in zip(got, want, strict=True):
        assert g[: len(w)] == w
        if len(g) > len(w):  # generate cut ours after a pair of timestamps
            assert w[-1] >= WT.timestamp_begin and w[-2] >= WT.timestamp_begin


@pytest.mark.parametrize("model_args", MODELS)
@pytest.mark.parametrize("beam_size", [3, 5])
def test_beam_is_generates_where_the_rules_coincide(model_args: tuple, beam_size: int) -> None:
    """On these models eot is never a close call (it ends a text at once or not at all), where
    whisper's and generate's beam rules agree; they part where a finished candidate's length
    decides (whisper does not count eot in it, generate does):
    tests/whisper/test_beam.py::test_where_whispers_beam_rule_and_generates_part."""
    model, feats = build(*model_args), features(4, 7)
    assert ours(model, feats, WhisperOptions(sample_len=12, beam_size=beam_size, timestamps=False)) == \
        theirs(model, feats, num_beams=beam_size, return_timestamps=False)
