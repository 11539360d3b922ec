"""Temperature fallback in one refilled batch against a reference loop written from openai/whisper's
``decode_with_fallback`` (its ``transcribe``), window by window: the same temperatures tried and
the same result kept, on a toy model whose windows are built to cross each threshold (a confident
one that passes, flat ones below ``logprob_threshold``, a repetitive one above
``compression_ratio_threshold``, a flat one taken as silence by ``no_speech_threshold``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from beamsearch.whisper import (
    FallbackOptions,
    WhisperOptions,
    WhisperTokens,
    decode_windows,
    needs_fallback,
    transcribe_windows,
)
from beamsearch.whisper.decode import WhisperResult

V, STEPS = 16, 12
TOKENS = WhisperTokens(eot=5, sot=6, sot_prev=10, sot_lm=9, no_speech=11, no_timestamps=12, timestamp_begin=13,
                       transcribe=8, translate=7, blank=(0,), non_speech=(4,), sot_sequence=(6, 8))
PROMPT = [6, 8, 12]  # sot, transcribe, no timestamps
WORDS = {0: " ", 1: "hello ", 2: "mo", 3: "ri", 4: "!"}


def detokenize(ids: list[int]) -> str:
    return "".join(WORDS.get(i, "") for i in ids)


def _tables() -> np.ndarray:
    """float32 ``[6, STEPS, V, V]``: per window its logits by step and last token."""
    rng = np.random.default_rng(0)
    t = rng.normal(size=(6, STEPS, V, V)).astype(np.float32) * 0.1
    for s in range(STEPS):  # 0: confident, a varied text ending at step 8
        t[0, s, :, 1 + s % 3] += 9
    t[0, 8:, :, 5] += 30
    t[2, :, :, 1] += 9  # 2: "hello hello ...": confident and repetitive
    t[3, :, :, 2] += 2.5  # 3: a mild favourite: greedy repeats it, samples vary
    t[5, :, :, 1] += 9  # 5: confident but repetitive, and no-speech high: silence does not hide repetition
    return t  # 1 and 4: flat (below the logprob threshold at any temperature)


NO_SPEECH = [0.1, 0.1, 0.1, 0.1, 0.9, 0.9]  # 4: flat but silent


calls: list[np.ndarray] = []  # the windows of each model call's rows


def _tabled(state: tuple, y_prev: np.ndarray) -> tuple:
    """The toy decoder: the rows' logits from their window's table, by step and last token."""
    table, window, t = state
    calls.append(window.copy())
    return table[()][window, np.minimum(t, STEPS - 1), y_prev], (table, window, t + 1)


def make_state(windows: list[int]) -> tuple:
    """The rows of ``windows``: the tables (a 0-d object array: a leaf every row shares, passed
    through by select_state), each row's window and step."""
    return TABLE, np.asarray(windows, np.int64), np.zeros(len(windows), np.int64)


TABLE = np.empty((), object)
TABLE[()] = _tables()


def reference(i: int, options: WhisperOptions, fb: FallbackOptions) -> tuple[WhisperResult, list[float]]:
    """whisper's decode_with_fallback for window i alone, from its source: each temperature's
    options (beam_size and patience dropped above 0, best_of dropped at 0), then its three checks
    in its order."""
    tried = []
    for a, temp in enumerate(fb.temperatures):
        if temp > 0:
            o = dataclasses.replace(options, temperature=temp, beam_size=None, patience=None, best_of=fb.best_of)
        else:
            o = options
        r = decode_windows(_tabled, make_state([i]), [PROMPT], TOKENS, o, detokenize=detokenize, seeds=[100 + i],
                           salt=a, n_text_ctx=64)[0]
        tried.append(temp)
        needs = False
        if fb.compression_ratio_threshold is not None and r.compression_ratio > fb.compression_ratio_threshold:
            needs = True  # too repetitive
        if fb.logprob_threshold is not None and r.avg_logprob < fb.logprob_threshold:
            needs = True  # average log probability is too low
        if fb.no_speech_threshold is not None and NO_SPEECH[i] > fb.no_speech_threshold and \
                fb.logprob_threshold is not None and r.avg_logprob < fb.logprob_threshold:
            needs = False  # silence
        if not needs:
            break
    return r, tried


def _run(options: WhisperOptions, fb: FallbackOptions, max_rows: int, refill: bool = True) -> list:
    calls.clear()
    return transcribe_windows(_tabled, make_state, [PROMPT] * 6, TOKENS, options, fb, max_rows=max_rows,
                              no_speech_probs=NO_SPEECH, detokenize=detokenize, seeds=[100 + i for i in range(6)],
                              n_text_ctx=64, refill=refill)


@pytest.mark.parametrize(("beam_size", "best_of"), [(None, None), (2, 2), (3, 1)])
@pytest.mark.parametrize("max_rows", [3, 6, 18])
@pytest.mark.parametrize("refill", [True, False])
def test_the_decisions_and_results_of_whisper_fallback_loop(beam_size: int | None, best_of: int | None,
                                                            max_rows: int, refill: bool) -> None:
    options = WhisperOptions(beam_size=beam_size, sample_len=STEPS, timestamps=False)
    fb = FallbackOptions(best_of=best_of)
    got = _run(options, fb, max_rows, refill)
    for i, g in enumerate(got):
        want, tried = reference(i, options, fb)
        assert list(g.temperatures) == tried
        assert g.result.tokens == want.tokens and g.result.temperature == want.temperature
        assert math.isclose(g.result.avg_logprob, want.avg_logprob, rel_tol=1e-6)
        assert g.no_speech_prob == NO_SPEECH[i]
    assert max(len(c) for c in calls) <= max_rows


def test_the_cases_cross_each_threshold() -> None:
    """What the windows are built for, at temperature 0 (beam 2): 0 passes; 1 falls back on its
    log-probability; 2 on its compression ratio alone; 4 is as flat as 1 but silent; 5 is silent
    but repetitive (silence excuses a low log-probability only)."""
    got = _run(WhisperOptions(beam_size=2, sample_len=STEPS, timestamps=False), FallbackOptions(best_of=2), 18)
    first = [reference(i, WhisperOptions(beam_size=2, sample_len=STEPS, timestamps=False),
                       FallbackOptions(temperatures=(0.0,)))[0] for i in range(6)]
    assert first[0].avg_logprob > -1 and first[0].compression_ratio < 2.4 and got[0].temperatures == (0.0,)
    assert first[1].avg_logprob < -1 and len(got[1].temperatures) > 1
    assert first[2].avg_logprob > -1 and first[2].compression_ratio > 2.4 and len(got[2].temperatures) > 1
    assert first[4].avg_logprob < -1 and got[4].temperatures == (0.0,)
    assert first[5].avg_logprob > -1 and first[5].compression_ratio > 2.4 and len(got[5].temperatures) > 1
    assert got[1].temperatures == FallbackOptions().temperatures  # flat at every temperature: all tried


def test_a_window_decoded_again_joins_a_call_beside_other_windows() -> None:
    """Refill: some model call holds the rows of a window at its second attempt or later together
    with another window's (the batch is kept full while windows fall back)."""
    _run(WhisperOptions(beam_size=2, sample_len=STEPS, timestamps=False), FallbackOptions(best_of=2), 6)
    seen, mixed = set(), False
    for i, c in enumerate(calls):
        windows = set(c.tolist())
        if i and len(windows) > 1 and windows & seen - set(calls[i - 1].tolist()):
            mixed = True
        seen |= windows
    assert mixed


def test_needs_fallback_by_hand() -> None:
    fb = FallbackOptions()
    r = WhisperResult([1], -0.5, -1.5, 0.0, compression_ratio=1.0)
    assert needs_fallback(r, 0.1, fb) and not needs_fallback(r, 0.9, fb)
    r = WhisperResult([1], -0.5, -0.5, 0.0, compression_ratio=3.0)
    assert needs_fallback(r, 0.9, fb)
    assert not needs_fallback(r, 0.1, FallbackOptions(compression_ratio_threshold=None))


@pytest.mark.parametrize(("kw", "message"), [
    ({"temperatures": ()}, "temperatures must be a non-empty sequence of finite numbers >= 0; got ()"),
    ({"temperatures": (0.0, -0.2)}, "temperatures must be a non-empty sequence"),
    ({"best_of": 0}, "best_of must be None or an int >= 1; got 0"),
])
def test_bad_fallback_options_are_named(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FallbackOptions(**kw)


def test_bad_arguments_are_named() -> None:
    o = WhisperOptions(beam_size=2, sample_len=STEPS, timestamps=False)
    with pytest.raises(ValueError, match="compression_ratio_threshold needs detokenize"):
        transcribe_windows(_tabled, make_state, [PROMPT], TOKENS, o, max_rows=2)
    with pytest.raises(ValueError, match=r"max_rows=1 is smaller than the rows one window may need \(2\)"):
        transcribe_windows(_tabled, make_state, [PROMPT], TOKENS, o, max_rows=1, detokenize=detokenize)
    with pytest.raises(ValueError, match=r"no_speech_probs must hold one probability per prompt \(1\); got 2"):
        transcribe_windows(_tabled, make_state, [PROMPT], TOKENS, o, max_rows=2, detokenize=detokenize,
                           no_speech_probs=[0.1, 0.2])
    with pytest.raises(ValueError, match=r"n_best must be <= the candidates per input \(1\); got n_best=2"):
        transcribe_windows(_tabled, make_state, [PROMPT], TOKENS, WhisperOptions(beam_size=2, n_best=2),
                           max_rows=2, detokenize=detokenize)


def test_the_first_decisions_of_openai_whisper_on_its_own_model() -> None:
    """On the random-weight openai-whisper model of test_decode, in rounds (its decoder gives every
    row of a call one position): a window passes at temperature 0 exactly where whisper's own
    ``decode`` result passes whisper's checks, with whisper's tokens; the others fall back."""
    from tests.whisper import openai_package
    from tests.whisper.test_decode import N_AUDIO_CTX, build, mels, theirs

    openai_package.load()
    torch = pytest.importorskip("torch")
    from beamsearch.whisper import OpenAIWhisperStep, initial_tokens, no_speech_probs

    model, tok = build(0, 3.5, 1.0)
    mel = mels(6, seed=4)
    wt = WhisperTokens.from_openai(tok)
    prompt = initial_tokens(wt, sample_len=12)
    step = OpenAIWhisperStep(model)
    features = model.encoder(mel).detach()
    nsp = no_speech_probs(model, features, torch.tensor([prompt] * 6), 0, tok.no_speech)
    fb = FallbackOptions(best_of=2)  # whisper's thresholds: 2 of these 6 pass at 0 (avg_logprob -0.94, -0.68)
    got = transcribe_windows(step, lambda w: step.start(features[w], torch.tensor([prompt] * len(w))), [prompt] * 6,
                             wt, WhisperOptions(beam_size=3, sample_len=12), fb, max_rows=6, no_speech_probs=nsp,
                             detokenize=tok.decode, n_audio_ctx=N_AUDIO_CTX, refill=False)
    want = theirs(model, mel, sample_len=12, beam_size=3)
    passed = []
    for g, w, p in zip(got, want, nsp, strict=True):
        fails = (w.compression_ratio > 2.4 or w.avg_logprob < -1.0) and not (p > 0.6 and w.avg_logprob < -1.0)
        assert (g.temperatures == (0.0,)) == (not fails)
        assert abs(p - w.no_speech_prob) <= 1e-6 + 1e-4 * w.no_speech_prob
        if not fails:
            assert g.result.tokens == w.tokens
        passed.append(not fails)
    assert any(passed) and not all(passed)  # the threshold is crossed both ways
