"""decode_windows against openai/whisper's own ``decode`` (the ``openai-whisper`` package, its
tokenizer files shipped with it, nothing downloaded) on one random-weight tiny model: the same
mel inputs and options give the same tokens, and the same average log-probability to float32
rounding (whisper's kv-cache and ours round the decoder's products alike but not bit for bit).

whisper decodes beam search one window at a time here: its batched beam search fails (the
cross-attention cache keeps one row per window while the beam has B), which is the defect the
engine's state-carried cache does not have; ours decodes the windows of a case in one batch.

The model: ``whisper.model.Whisper(ModelDimensions(...))`` with seeded weights, its decoder's
positional embedding drawn (whisper leaves it ``torch.empty``: uninitialized memory), its blocks
scaled up so that the text varies, and eot and the timestamps pushed towards the final layer
norm's bias by ``eot_boost`` / ``ts_boost`` so that windows end early and carry timestamps.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import pytest

from beamsearch.whisper import OpenAIWhisperStep, WhisperOptions, WhisperTokens, decode_windows, initial_tokens
from tests.whisper import openai_package

whisper = openai_package.load()
torch = pytest.importorskip("torch")
whisper_decoding = whisper.decoding
ModelDimensions, Whisper = whisper.model.ModelDimensions, whisper.model.Whisper
get_tokenizer = whisper.tokenizer.get_tokenizer

N_AUDIO_CTX = 50  # mel frames = 2 * N_AUDIO_CTX; timestamp precision 30 / 50 = 0.6 s


@lru_cache(maxsize=6)
def build(seed: int = 0, eot_boost: float = 0.0, ts_boost: float = 0.0, audio_ctx: int = N_AUDIO_CTX
          ) -> tuple[Any, Any]:
    """A seeded tiny multilingual Whisper and its English transcribe tokenizer (``audio_ctx``
    1500: the encoder of 30-second windows of 3000 frames, for long-form audio)."""
    torch.manual_seed(seed)
    dims = ModelDimensions(n_mels=80, n_audio_ctx=audio_ctx, n_audio_state=64, n_audio_head=2, n_audio_layer=1,
                           n_vocab=51865, n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=2)
    model = Whisper(dims).eval()
    tok = get_tokenizer(True, num_languages=model.num_languages, language="en", task="transcribe")
    with torch.no_grad():
        for name, p in model.decoder.named_parameters():
            if "blocks" in name and p.ndim == 2:
                p.mul_(4)
        model.decoder.token_embedding.weight.mul_(0.5)
        model.decoder.positional_embedding.normal_(0, 0.5)
        u = torch.randn(64)
        u /= u.norm()
        model.decoder.ln.bias.copy_(2 * u)
        model.decoder.token_embedding.weight[tok.eot] += eot_boost * u
        model.decoder.token_embedding.weight[tok.timestamp_begin:] += ts_boost * u
    return model, tok


def mels(n: int, seed: int = 1) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 80, 2 * N_AUDIO_CTX, generator=g)


def ours(model: Any, tok: Any, mel: Any, options: WhisperOptions, prompt: list[int] | None = None,
         prefix: list[int] | None = None) -> list[Any]:
    wt = WhisperTokens.from_openai(tok)
    p = initial_tokens(wt, timestamps=options.timestamps, prompt=prompt or (), prefix=prefix or (),
                       sample_len=options.sample_len)
    step = OpenAIWhisperStep(model)
    state = step.start(mel, torch.tensor([p] * mel.shape[0]))
    return decode_windows(step, state, [p] * mel.shape[0], wt, options, n_audio_ctx=N_AUDIO_CTX,
                          detokenize=tok.decode)


def theirs(model: Any, mel: Any, **kw: Any) -> list[Any]:
    opts = whisper_decoding.DecodingOptions(language="en", fp16=False, **kw)
    return [whisper_decoding.decode(model, mel[i], opts) for i in range(mel.shape[0])]


CASES = [  # whisper's DecodingOptions
    {},
    {"beam_size": 5},
    {"beam_size": 5, "patience": 2.0},
    {"beam_size": 5, "without_timestamps": True},
    {"beam_size": 3, "length_penalty": 0.6, "max_initial_timestamp": None},
    {"beam_size": 5, "patience": 0.5, "suppress_blank": False, "suppress_tokens": ""},
]
MODELS = [(0, 0.0, 1.0), (0, 3.5, 1.0), (2, 4.0, 1.0)]  # long texts with timestamps; some end early


def _options(kw: dict[str, Any], sample_len: int) -> WhisperOptions:
    suppress = kw.get("suppress_tokens", "-1")
    return WhisperOptions(beam_size=kw.get("beam_size"), patience=kw.get("patience"),
                          length_penalty=kw.get("length_penalty"), sample_len=sample_len,
                          suppress_blank=kw.get("suppress_blank", True),
                          suppress_tokens=tuple(int(t) for t in suppress.split(",")) if suppress else (),
                          timestamps=not kw.get("without_timestamps", False),
                          max_initial_timestamp=kw.get("max_initial_timestamp", 1.0))


def assert_same(got: list[Any], want: list[Any]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens
        assert g.text == w.text
        assert math.isclose(g.avg_logprob, w.avg_logprob, rel_tol=1e-5, abs_tol=1e-5)
        assert math.isclose(g.compression_ratio, w.compression_ratio)


@pytest.mark.parametrize("model_args", MODELS)
@pytest.mark.parametrize("kw", CASES)
def test_the_tokens_of_openai_whisper_decode_greedy_and_beam(model_args: tuple, kw: dict[str, Any]) -> None:
    model, tok = build(*model_args)
    mel = mels(3)
    assert_same(ours(model, tok, mel, _options(kw, 20)), theirs(model, mel, sample_len=20, **kw))


def test_the_cases_reach_eot_and_timestamps() -> None:
    """The models above exercise what the rules act on: texts ending early and timestamp pairs."""
    lengths, stamps = [], []
    for args in MODELS:
        model, tok = build(*args)
        for r in theirs(model, mels(3), sample_len=20, beam_size=5):
            lengths.append(len(r.tokens))
            stamps.append(sum(t >= tok.timestamp_begin for t in r.tokens))
    assert min(lengths) < 20 and max(lengths) == 20
    assert max(stamps) >= 3


@pytest.mark.parametrize("kw", [{}, {"beam_size": 5}])
def test_a_prompt_and_a_prefix_as_whisper_takes_them(kw: dict[str, Any]) -> None:
    model, tok = build(0, 3.5, 1.0)
    mel = mels(2, seed=3)
    prompt, prefix = tok.encode(" the previous text"), tok.encode(" And so")
    got = ours(model, tok, mel, _options(kw, 16), prompt=prompt, prefix=prefix)
    assert_same(got, theirs(model, mel, sample_len=16, prompt=prompt, prefix=prefix, **kw))


def test_n_best_lists_whisper_ranked_candidates_best_first() -> None:
    model, tok = build(0, 3.5, 1.0)
    mel = mels(3)
    got = ours(model, tok, mel, WhisperOptions(beam_size=5, sample_len=20, n_best=5))
    for r, w in zip(got, theirs(model, mel, sample_len=20, beam_size=5), strict=True):
        assert r.n_best[0].tokens == w.tokens == r.tokens
        assert [h.score for h in r.n_best] == sorted((h.score for h in r.n_best), reverse=True)
        assert len(r.n_best) == 5


@pytest.mark.parametrize(("kw", "message"), [
    ({"beam_size": 2, "best_of": 2}, "beam_size and best_of can't be given together"),
    ({"beam_size": 2, "temperature": 0.5}, "beam_size decodes at temperature 0"),
    ({"best_of": 2}, "best_of samples at a temperature > 0"),
    ({"patience": 2.0}, "patience must be > 0 and needs beam_size"),
    ({"beam_size": 2, "patience": 0.0}, "patience must be > 0"),
    ({"length_penalty": 1.5}, "length_penalty (alpha) must be None or in [0, 1]; got 1.5"),
    ({"temperature": -1.0}, "temperature must be a finite number >= 0; got -1.0"),
    ({"beam_size": 0}, "beam_size must be None or an int >= 1; got 0"),
    ({"beam_size": 2, "n_best": 3}, "n_best must be <= the candidates per input (2); got n_best=3"),
])
def test_bad_options_name_the_option_and_value(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        WhisperOptions(**kw)
