"""transcribe_long against openai/whisper's own ``transcribe`` on its random-weight tiny model
(30-second windows of 3000 frames; the audio seeded noise of 40 to 75 s): the same segments (start,
end, tokens), each recording decoded in a batch with the others, with and without
``condition_on_previous_text``, greedy and beam 3. The fallback's checks are off here (its samples
above temperature 0 are whisper's torch draws, not ours: tests/whisper/test_fallback.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from beamsearch.whisper import FallbackOptions, OpenAIWhisperStep, WhisperOptions, WhisperTokens, transcribe_long
from tests.whisper import openai_package
from tests.whisper.test_decode import build

whisper = openai_package.load()
torch = pytest.importorskip("torch")
SECONDS = [40, 75, 52]
SAMPLE_LEN = 40
NO_CHECKS = FallbackOptions(temperatures=(0.0,), compression_ratio_threshold=None, logprob_threshold=None,
                            no_speech_threshold=None)


def audio(seconds: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=seconds * 16000) * 0.1).astype(np.float32)


def ours(model: Any, tok: Any, clips: list[np.ndarray], options: WhisperOptions, condition: bool) -> list[list]:
    step = OpenAIWhisperStep(model)

    def make_state(segments: list, prompts: list) -> Any:
        with torch.no_grad():
            features = model.encoder(torch.stack(segments))
        return step.start(features, torch.tensor(prompts))

    mels = [whisper.audio.log_mel_spectrogram(a, 80, padding=whisper.audio.N_SAMPLES) for a in clips]
    return transcribe_long(step, make_state, mels, WhisperTokens.from_openai(tok), options, NO_CHECKS,
                           max_rows=12, detokenize=tok.decode, condition_on_previous_text=condition)


@pytest.mark.parametrize("beam_size", [None, 3])
@pytest.mark.parametrize("condition", [True, False])
def test_the_segments_of_openai_whisper_transcribe(beam_size: int | None, condition: bool) -> None:
    model, tok = build(0, 2.5, 1.5, audio_ctx=1500)
    clips = [audio(s, i) for i, s in enumerate(SECONDS)]
    got = ours(model, tok, clips, WhisperOptions(beam_size=beam_size, sample_len=SAMPLE_LEN), condition)
    assert sum(len(s) for s in got) > 12  # several segments per recording, and windows seeking by timestamps
    for clip, segments in zip(clips, got, strict=True):
        want = whisper.transcribe(model, clip, temperature=0.0, compression_ratio_threshold=None,
                                  logprob_threshold=None, no_speech_threshold=None,
                                  condition_on_previous_text=condition, fp16=False, language="en",
                                  beam_size=beam_size, sample_len=SAMPLE_LEN, verbose=None)["segments"]
        assert [(s.tokens, round(s.start, 3), round(s.end, 3)) for s in segments] == \
            [(w["tokens"], round(w["start"], 3), round(w["end"], 3)) for w in want]
