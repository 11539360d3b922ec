"""Training: a few seeded steps on synthesized audio lower both losses, are reproducible, and the
checkpoint written reads back (float16 on disk) to the same network."""

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from beamsearch.zoo.speech.model import SpeechConfig, SpeechNet  # noqa: E402
from beamsearch.zoo.speech.recognizer import load  # noqa: E402
from beamsearch.zoo.speech.synth import make_set  # noqa: E402
from beamsearch.zoo.speech.train import batches_by_length, collate, features_of, joint_loss, train, write_checkpoint  # noqa: E402

TINY = SpeechConfig(hidden=24, conv_blocks=1, lstm_hidden=16, pred_embed=8, pred_hidden=12, joint_hidden=10)


def test_batches_cover_every_utterance_once_within_the_frame_budget():
    import random

    lengths = [random.Random(i).randrange(50, 400) for i in range(300)]
    batches = batches_by_length(lengths, 2000, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(300))
    assert all(len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 2000 for b in batches)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_training_learns_is_seeded_and_its_checkpoint_reads_back(tmp_path):
    data = [(u.audio, u.text) for u in make_set(12, 5, "train")]
    torch.manual_seed(1)
    untrained = SpeechNet(TINY).eval()  # train's initial weights: the same seed before the same build
    model, meta = train(data, seed=1, steps=30, lr=5e-3, max_frames=3000, threads=1, cfg=TINY, log=lambda _: None)
    feats = features_of([a for a, _ in data])
    batch = collate(feats, [t for _, t in data], list(range(12)), None)  # no augmentation
    with torch.no_grad():
        before, after = joint_loss(untrained, *batch), joint_loss(model, *batch)
    assert after[0] < 0.8 * before[0] and after[1] < 0.8 * before[1]  # CTC and TDT both lower
    again, _ = train(data, seed=1, steps=30, lr=5e-3, max_frames=3000, threads=1, cfg=TINY, log=lambda _: None)
    for (k, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=k)
    write_checkpoint(model, meta, tmp_path)
    loaded = load(tmp_path)
    assert loaded.net.cfg == TINY
    for k, v in model.weights().items():
        np.testing.assert_allclose(loaded.net.state_dict()[k].numpy(), v.half().float().numpy())
