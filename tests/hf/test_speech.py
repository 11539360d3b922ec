"""beamsearch.hf.transcribe on transformers' speech encoder-decoders built here with random weights
(tests/hf_speech_zoo.py, nothing downloaded). Oracles:

- the features: openai/whisper's ``log_mel_spectrogram(audio, padding=N_SAMPLES)`` (80 bins);
- Whisper, one window: ``model.generate`` on the processor's features with whisper's suppressed
  ids, greedy and beam, without timestamps (the same tokens: the rules coincide);
- Whisper, long-form: openai/whisper's ``transcribe`` loop (:func:`beamsearch.whisper.transcribe_long`)
  over a plain reference step that runs the whole decoder on the whole prefix at every step (no
  cache, no prefill), its no-speech probability read from that full pass: the same segments;
- Moonshine and Speech2Text: ``model.generate`` with the same settings, greedy and beam with
  n-best (the same sequences where the rules coincide; where they part, the case below).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from beamsearch.hf.speech import is_whisper, transcribe, whisper_features  # noqa: E402
from beamsearch.whisper import (  # noqa: E402
    FallbackOptions,
    WhisperOptions,
    WhisperTokens,
    initial_tokens,
    suppressed_ids,
    transcribe_long,
)
from hf_speech_zoo import moonshine, noise, speech2text, whisper_model, whisper_processor  # noqa: E402

NO_FALLBACK = FallbackOptions(temperatures=(0.0,), compression_ratio_threshold=None, logprob_threshold=None,
                              no_speech_threshold=None)
PROCESSOR = whisper_processor()
WT = WhisperTokens.from_transformers(PROCESSOR.tokenizer)


def test_whisper_tokens_are_read_by_name() -> None:
    vocab = PROCESSOR.tokenizer.get_vocab()
    assert (WT.eot, WT.sot, WT.no_timestamps, WT.timestamp_begin) == (256, 257, 264, 265)
    assert WT.sot_sequence == (257, vocab["<|en|>"], vocab["<|transcribe|>"])
    assert WT.blank == (vocab["Ġ"],)  # " " is one byte-level token
    quote = vocab['"']  # a symbol whisper suppresses (one token alone)
    assert quote in WT.non_speech and vocab["a"] not in WT.non_speech


def test_non_speech_ids_are_openai_whispers() -> None:
    from tests.whisper import openai_package

    whisper = openai_package.load()
    from beamsearch.whisper.tokens import non_speech_ids

    tok = whisper.tokenizer.get_tokenizer(True, language="en", task="transcribe")
    assert non_speech_ids(tok.encoding.encode) == tuple(tok.non_speech_tokens)


def test_features_are_openai_whispers_log_mel() -> None:
    from tests.whisper import openai_package

    whisper = openai_package.load()
    audio = noise(3.3, 0)
    got = whisper_features(whisper_processor(n_mels=80), audio)
    want = whisper.audio.log_mel_spectrogram(audio, 80, padding=whisper.audio.N_SAMPLES)
    assert got.shape == want.shape == (80, 330 + 3000)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-3)


def generated(model: Any, clip: np.ndarray, **kw: Any) -> list[list[int]]:
    """generate on one 30-second window, whisper's suppressed ids given it, eot and padding dropped."""
    gc = model.generation_config
    gc.no_timestamps_token_id = WT.no_timestamps
    gc.suppress_tokens = list(suppressed_ids(WT, (-1,)))
    gc.begin_suppress_tokens = [*WT.blank, WT.eot]
    frames = len(clip) // 160  # the content, then zeros (whisper's pad_or_trim of a window's mel)
    feats = torch.nn.functional.pad(whisper_features(PROCESSOR, clip)[None, :, :frames], (0, 3000 - frames))
    out = model.generate(input_features=feats, decoder_input_ids=torch.tensor([initial_tokens(WT, timestamps=False)]),
                         do_sample=False, return_timestamps=False, **kw)
    return [[t for t in row if t != WT.eot] for row in out.tolist()]  # generate returns the new tokens only


@pytest.mark.parametrize("seed, boost, beam_size", [(0, 0.0, None), (1, 1.0, None), (2, 0.5, None), (0, 0.0, 3),
                                                    (1, 1.0, 3)])
def test_whisper_one_window_is_generates(seed: int, boost: float, beam_size: int | None) -> None:
    """(Beam search parts from generate's where a finished candidate's length decides, as
    tests/whisper/test_decode_transformers.py shows: not on these models.)"""
    model = whisper_model(seed, boost)
    clips = [noise(2, 10 + seed), noise(5, 20 + seed)]
    got = transcribe(model, PROCESSOR, clips, WhisperOptions(beam_size=beam_size, sample_len=10, timestamps=False),
                     NO_FALLBACK)
    for clip, t in zip(clips, got, strict=True):
        [window] = t.windows  # text tokens may hold timestamps (not suppressed without timestamps), cut there
        tokens = [x for s in t.segments for x in s.tokens]
        assert tokens == window.candidates[0].tokens == \
            generated(model, clip, num_beams=beam_size or 1, max_new_tokens=10)[0]
        assert t.text == PROCESSOR.tokenizer.decode([x for x in tokens if x < WT.eot]).strip()


class ReferenceStep:
    """The decoder over the whole prefix at each call (the state: the window's features and the
    tokens so far), the plain loop the adapter's cache and prefill must agree with."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def make_state(self, segments: list, prompts: list) -> Any:
        return torch.stack(segments), torch.tensor(prompts)[:, :-1]

    def __call__(self, state: Any, y_prev: Any) -> Any:
        feats, prefix = state
        tokens = torch.cat([prefix, y_prev.reshape(-1, 1)], dim=1)
        with torch.no_grad():
            logits = self.model(input_features=feats, decoder_input_ids=tokens).logits[:, -1]
        return logits.float(), (feats, tokens)

    def no_speech_probs(self, segments: list, prompts: list) -> list[float]:
        out = []
        for s, p in zip(segments, prompts, strict=True):
            with torch.no_grad():
                logits = self.model(input_features=s[None], decoder_input_ids=torch.tensor([p])).logits[0]
            out.append(float(logits[p.index(WT.sot)].float().softmax(-1)[WT.no_speech]))
        return out


@pytest.mark.parametrize("beam_size, condition", [(None, True), (2, False)])
def test_whisper_long_form_is_the_reference_loops(beam_size: int | None, condition: bool) -> None:
    model = whisper_model(3, 0.5, n_text_ctx=32)
    clips = [noise(40, 1), noise(7, 2)]
    options = WhisperOptions(beam_size=beam_size, sample_len=8)
    checks = FallbackOptions(temperatures=(0.0,), compression_ratio_threshold=None, logprob_threshold=-3.0,
                             no_speech_threshold=0.01)  # some windows skipped as silence (no-speech p ~ 1/1766)
    got = transcribe(model, PROCESSOR, clips, options, checks, condition_on_previous_text=condition)
    ref = ReferenceStep(model)
    want = transcribe_long(ref, ref.make_state, [whisper_features(PROCESSOR, c) for c in clips], WT, options, checks,
                           max_rows=64, detokenize=lambda ids: PROCESSOR.tokenizer.decode([t for t in ids if t < 256]),
                           no_speech_probs=ref.no_speech_probs, condition_on_previous_text=condition, n_audio_ctx=1500,
                           n_text_ctx=32)
    assert sum(len(w) for w in want) >= 3
    for t, segments in zip(got, want, strict=True):
        assert [(s.tokens, s.start, s.end) for s in t.segments] == [(s.tokens, s.start, s.end) for s in segments]
        assert t.windows[t.segments[-1].window].candidates[0].tokens == segments[-1].result.tokens


def test_whisper_n_best_per_window() -> None:
    model = whisper_model(1, 1.0)
    [t] = transcribe(model, PROCESSOR, [noise(3, 5)], WhisperOptions(beam_size=4, n_best=3, sample_len=6),
                     FallbackOptions(temperatures=(0.0,), best_of=3))
    [w] = t.windows
    assert len(w.candidates) == len(w.texts) == 3
    assert [h.score for h in w.candidates] == sorted((h.score for h in w.candidates), reverse=True)
    cut = [x for s in t.segments for x in s.tokens]  # the segments: the best up to its last timestamp pair
    assert cut and w.candidates[0].tokens[: len(cut)] == cut


SPEECH = {"moonshine": moonshine, "speech2text": speech2text}


def generate_speech(model: Any, processor: Any, clips: list, **kw: Any) -> list[list[int]]:
    inputs = processor(clips, sampling_rate=16000, return_tensors="pt", padding=True)
    out = model.generate(**inputs, max_new_tokens=7, do_sample=False, **kw)
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    return [[t for t in row[1:] if t not in (eos, pad)] for row in out.tolist()]


@pytest.mark.parametrize("name", sorted(SPEECH))
@pytest.mark.parametrize("seed", [0, 1])
def test_other_speech_models_greedy_is_generates(name: str, seed: int) -> None:
    """No Whisper tokens: the engine's greedy search, the recordings of other lengths padded
    together in one call (Moonshine's mask carried in its encoder output): generate's tokens."""
    model, processor = SPEECH[name](seed)
    assert not is_whisper(model)
    clips = [noise(1.0, seed), noise(0.6, seed + 7)]
    got = transcribe(model, processor, clips, WhisperOptions(sample_len=7))
    assert [t.windows[0].candidates[0].tokens for t in got] == generate_speech(model, processor, clips)
    assert all(t.text == processor.tokenizer.decode(t.segments[0].tokens, skip_special_tokens=True) for t in got)


@pytest.mark.parametrize("name", sorted(SPEECH))
def test_other_speech_models_beam_ranks_finished_first(name: str) -> None:
    """Where the rules part: generate's beams end unfinished at max_new_tokens here, while the
    library's rule ranks finished candidates first (README: how results differ from generate).
    Each candidate's logprob is its teacher-forced log-probability under the model."""
    model, processor = SPEECH[name](0)
    clips = [noise(1.0, 0)]
    [t] = transcribe(model, processor, clips, WhisperOptions(beam_size=3, n_best=2, sample_len=7))
    theirs = generate_speech(model, processor, clips, num_beams=3, num_return_sequences=2)
    assert all(len(x) == 7 for x in theirs)  # unfinished: 7 tokens, no eos
    inputs = processor(clips, sampling_rate=16000, return_tensors="pt")
    start, eos = model.config.decoder_start_token_id, model.config.eos_token_id
    for h in t.windows[0].candidates:
        assert h.finished and eos not in h.tokens
        with torch.no_grad():
            logits = model(**inputs, decoder_input_ids=torch.tensor([[start, *h.tokens]])).logits[0]
        forced = logits.float().log_softmax(-1).gather(1, torch.tensor([*h.tokens, eos])[:, None]).sum()
        assert float(forced) == pytest.approx(h.logprob, abs=1e-3)


@pytest.mark.parametrize("given", [{"fallback": FallbackOptions()}, {"language": "en"}, {"initial_prompt": "w1"},
                                   {"condition_on_previous_text": False}])
def test_whisper_only_arguments_are_refused_for_other_models(given: dict[str, Any]) -> None:
    model, processor = moonshine()
    name = next(iter(given))
    with pytest.raises(ValueError, match=f"{name} applies to Whisper only"):
        transcribe(model, processor, [noise(0.5, 0)], **given)


@pytest.mark.parametrize("options, name", [(WhisperOptions(beam_size=2, patience=2.0), "patience"),
                                           (WhisperOptions(length_penalty=0.5), "length_penalty")])
def test_whisper_rules_are_refused_for_other_models(options: WhisperOptions, name: str) -> None:
    model, processor = speech2text()
    with pytest.raises(ValueError, match=f"{name} is whisper's rule"):
        transcribe(model, processor, [noise(0.5, 0)], options)


def test_bad_audio_and_a_whisper_of_other_windows_are_refused() -> None:
    model = whisper_model(0)
    with pytest.raises(ValueError, match=r"audio\[1\] must be finite mono"):
        transcribe(model, PROCESSOR, [noise(1, 0), np.zeros((2, 5), np.float32)])
    small = T.WhisperForConditionalGeneration(T.WhisperConfig(
        vocab_size=1766, num_mel_bins=8, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_source_positions=16,
        max_target_positions=16, pad_token_id=256, bos_token_id=256, eos_token_id=256,
        decoder_start_token_id=257)).eval()
    with pytest.raises(ValueError, match="max_source_positions must be 1500; got 16"):
        transcribe(small, PROCESSOR, [noise(1, 0)])
