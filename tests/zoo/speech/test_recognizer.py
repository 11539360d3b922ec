"""The shipped speech model: its files validated on load (each bad file named in one line), and
transcription of held-out voices it never heard (espeak-ng speaks them in the test) within a
stated word error rate, by both heads, greedy and beam."""

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from safetensors.torch import load_file, save_file  # noqa: E402

from beamsearch.speech import CTCHypothesis, TransducerHypothesis  # noqa: E402
from beamsearch.speech import wer as word_error_rate  # noqa: E402
from beamsearch.zoo.speech import SpeechModel, load  # noqa: E402
from beamsearch.zoo.speech.recognizer import SHIPPED  # noqa: E402
from beamsearch.zoo.speech.synth import make_set  # noqa: E402

espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@pytest.fixture(scope="module")
def model():
    return load()


@pytest.fixture
def copy(tmp_path):
    for name in ("speech.json", "speech.safetensors"):
        shutil.copy(SHIPPED / name, tmp_path / name)
    return tmp_path


def test_shipped_model_is_small_and_says_its_frames(model):
    assert isinstance(model, SpeechModel)
    assert model.sample_rate == 16000 and model.frame_duration == pytest.approx(0.03)
    assert model.vocabulary.tokens[1] == " " and model.vocabulary.word_delimiter == " "
    assert (SHIPPED / "speech.safetensors").stat().st_size < 5_000_000


def edit_config(folder, change):
    raw = json.loads((folder / "speech.json").read_text())
    change(raw["config"])
    (folder / "speech.json").write_text(json.dumps(raw))


@pytest.mark.parametrize(("change", "what"), [
    (lambda c: c.pop("hidden"), "lacks hidden"),
    (lambda c: c.update(extra=1), "unknown fields 'extra'"),
    (lambda c: c.update(lstm_hidden=0), "lstm_hidden must be an integer >= 1"),
    (lambda c: c.update(lstm_hidden=True), "lstm_hidden must be an integer >= 1"),
    (lambda c: c.update(durations=[0]), "durations must be"),
    (lambda c: c.update(tokens=["a", "b"]), "tokens must be"),
    (lambda c: c.update(sample_rate=8000), "sample_rate must be 16000"),
    (lambda c: c.update(mels=40), "mels must be 80"),
])
def test_bad_config_is_one_line_naming_the_file(copy, change, what):
    edit_config(copy, change)
    with pytest.raises(ValueError, match=what) as info:
        load(copy)
    message = str(info.value)
    assert str(copy / "speech.json") in message and "\n" not in message


def test_unreadable_config_and_missing_files_name_the_file(copy):
    (copy / "speech.json").write_text("{not json")
    with pytest.raises(ValueError, match="speech.json is not a model config"):
        load(copy)
    (copy / "speech.json").unlink()
    with pytest.raises(ValueError, match="speech.json does not exist"):
        load(copy)
    with pytest.raises(ValueError, match="does not exist"):
        load(copy / "nowhere")


def edit_weights(folder, change):
    tensors = load_file(str(folder / "speech.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "speech.safetensors"))


@pytest.mark.parametrize(("change", "what"), [
    (lambda t: t["ctc_head.weight"].view(-1).__setitem__(3, float("nan")), "ctc_head.weight holds 1 NaN"),
    (lambda t: t["joint_out.bias"].__setitem__(0, float("inf")), "joint_out.bias holds 1 NaN or infinite"),
    (lambda t: t.pop("embed.weight"), "tensors missing for its config: embed.weight"),
    (lambda t: t.update(extra=torch.zeros(2)), "no use for: extra"),
    (lambda t: t.update({"ctc_head.bias": torch.zeros(3)}), r"ctc_head.bias has shape \(3,\)"),
    (lambda t: t.update({"ctc_head.bias": torch.zeros(29, dtype=torch.int32)}), "not a floating-point dtype"),
])
def test_bad_weights_are_one_line_naming_the_file(copy, change, what):
    edit_weights(copy, change)
    with pytest.raises(ValueError, match=what) as info:
        load(copy)
    assert str(copy / "speech.safetensors") in str(info.value) and "\n" not in str(info.value)


def test_not_a_safetensors_file_names_it(copy):
    (copy / "speech.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="speech.safetensors cannot be loaded"):
        load(copy)


def test_bad_arguments_name_the_parameter(model):
    audio = [np.zeros(8000, np.float32)]
    with pytest.raises(ValueError, match="head must be one of ctc, tdt"):
        model.transcribe(audio, head="rnnt")
    with pytest.raises(ValueError, match="greedy"):
        model.transcribe(audio, beam_size=None, hotwords=["five"])
    with pytest.raises(ValueError, match=r"audio\[1\] must be a non-empty 1-D"):
        model.transcribe([np.zeros(10, np.float32), np.zeros((2, 5), np.float32)])
    with pytest.raises(ValueError, match=r"audio\[0\] holds NaN"):
        model.transcribe([np.full(100, np.nan, np.float32)])
    with pytest.raises(ValueError, match="non-empty list"):
        model.transcribe(np.zeros(100, np.float32))


@pytest.fixture(scope="module")
def heldout():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    return make_set(12, 7, "heldout")  # held-out voices and variants, sentences of another seed


# the shipped weights on these 12 (44 words): CTC greedy 0.09, beam 0.11; TDT greedy 0.07, beam 0.05 (an
# untrained network: about 1.0); the bound leaves room for float differences across machines
WER_BOUND = 0.25


@espeak
@pytest.mark.parametrize("head", ["ctc", "tdt"])
@pytest.mark.parametrize("beam_size", [None, 8])
def test_held_out_voices_are_transcribed(model, heldout, head, beam_size):
    out = model.transcribe([u.audio for u in heldout], head=head, beam_size=beam_size)
    assert len(out) == len(heldout) and all(len(hyps) == 1 for hyps in out)
    kind = CTCHypothesis if head == "ctc" else TransducerHypothesis
    assert all(isinstance(hyps[0], kind) for hyps in out)
    wer = word_error_rate([u.text for u in heldout], [hyps[0].text for hyps in out])
    assert wer < WER_BOUND
    for u, hyps in zip(heldout, out, strict=True):  # word times inside the audio, in order
        words = hyps[0].words
        ends = [w.end for w in words]
        assert all(0 <= w.start < w.end <= len(u.audio) / 16000 + 0.03 for w in words)
        assert ends == sorted(ends)


@espeak
def test_n_best_are_ranked_and_distinct(model, heldout):
    for head in ("ctc", "tdt"):
        hyps = model.transcribe([heldout[0].audio], head=head, beam_size=8, n_best=4)[0]
        assert 1 < len(hyps) <= 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True) and len({tuple(h.tokens) for h in hyps}) == len(hyps)


@espeak
def test_ctc_greedy_is_the_best_path_of_a_plain_loop_over_the_models_frames(model, heldout):
    """Greedy on the CTC head: per frame the most probable character (a plain loop here over the
    model's own log-probs), repeats merged, blanks dropped, spaces between words."""
    audio = [u.audio for u in heldout[:6]]
    got = [hyps[0] for hyps in model.transcribe(audio, beam_size=None)]
    for a, h in zip(audio, got, strict=True):  # one at a time: no padding
        enc, lengths = model.encode([a])
        lp = model.net.ctc_log_probs(enc)[0, : int(lengths[0])].detach().numpy()
        chars, prev = [], None
        for frame in lp:
            best = max(range(len(frame)), key=lambda v: (frame[v], -v))  # the first of equals
            if best != 0 and best != prev:  # 0: the blank
                chars.append(model.vocabulary.tokens[best])
            prev = best
        assert h.text == " ".join("".join(chars).split())
        assert h.acoustic_score == pytest.approx(float(lp.max(axis=1).sum()), rel=1e-5)
    assert [h.text for h in got] != [""] * len(got)


@espeak
@pytest.mark.parametrize("beam_size", [1, 8])
def test_a_trace_records_the_ctc_search_that_gave_the_result(model, heldout, beam_size):
    from beamsearch.speech.trace import CTCTrace

    trace = CTCTrace()
    audio = [heldout[1].audio]
    traced = model.transcribe(audio, beam_size=beam_size, trace=trace)[0]
    assert [h.text for h in traced] == [h.text for h in model.transcribe(audio, beam_size=beam_size)[0]]
    best = trace.path(trace.best(0))  # the start node, then one node per frame
    assert trace.text(best[-1].labels) == traced[0].text
    with pytest.raises(ValueError, match=r"trace records a beam search; beam_size=None \(greedy\) has none"):
        model.transcribe(audio, beam_size=None, trace=CTCTrace())
    with pytest.raises(TypeError, match="trace must be a TransducerTrace or None; got <"):
        model.transcribe(audio, head="tdt", beam_size=4, trace=CTCTrace())


@espeak
def test_a_trace_records_the_tdt_search_that_gave_the_result(model, heldout):
    from beamsearch.speech.transducer_trace import TransducerTrace

    trace = TransducerTrace()
    audio = [heldout[2].audio, heldout[3].audio]
    traced = model.transcribe(audio, head="tdt", beam_size=4, n_best=2, trace=trace)
    plain = model.transcribe(audio, head="tdt", beam_size=4, n_best=2)
    assert [[(h.text, h.score) for h in hyps] for hyps in traced] == [[(h.text, h.score) for h in hyps]
                                                                      for hyps in plain]
    for u, hyps in enumerate(traced):
        ends = sorted((n for n in trace.nodes if n.utterance == u and n.rank >= 0), key=lambda n: n.rank)
        assert [" ".join(trace.text(n.labels).split()) for n in ends] == [h.text for h in hyps]
        assert [n.total for n in ends] == pytest.approx([h.score for h in hyps])
        assert trace.path(trace.best(u))[0].kind == "start"
