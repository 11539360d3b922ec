"""The speech network: shapes, padding that changes nothing, and the decoders' predictor and joint
equal to the teacher-forced computation the training loss sees."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from beamsearch.zoo.speech.model import BLANK, TOKENS, SpeechConfig, SpeechNet, encode_text  # noqa: E402


def small():
    torch.manual_seed(0)
    return SpeechNet(SpeechConfig(hidden=32, lstm_hidden=16, pred_embed=8, pred_hidden=12, joint_hidden=10)).eval()


def test_vocabulary_and_text_ids():
    assert TOKENS[BLANK] == "<blank>" and TOKENS[1] == " " and len(TOKENS) == 29
    assert encode_text("o'clock at") == [16, 28, 4, 13, 16, 4, 12, 1, 2, 21]
    with pytest.raises(ValueError, match="'7'"):
        encode_text("at 7")


def test_encoder_frames_and_padding_invariance():
    net = small()
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(50, 80, generator=gen), torch.randn(31, 80, generator=gen)
    batch = torch.zeros(2, 50, 80)
    batch[0], batch[1, :31] = a, b
    with torch.no_grad():
        enc, lengths = net.encode(batch, torch.tensor([50, 31]))
        alone, alone_len = net.encode(b[None], torch.tensor([31]))
    assert enc.shape == (2, 17, 32) and lengths.tolist() == [17, 11]  # ceil(F / 3)
    assert alone_len.tolist() == [11]
    np.testing.assert_allclose(enc[1, :11].numpy(), alone[0].numpy(), atol=1e-5)
    assert net.cfg.frame_duration == pytest.approx(0.03)


def test_decoder_functions_equal_the_teacher_forced_joint():
    net = small()
    gen = torch.Generator().manual_seed(2)
    enc = torch.randn(2, 5, 32, generator=gen)
    labels = torch.tensor([[3, 4, 1], [7, 7, 2]])
    with torch.no_grad():
        pred, _ = net.predict(torch.cat([torch.full((2, 1), BLANK), labels], 1))
        full = net.joint(enc[:, :, None], pred[:, None])  # [2, 5, 4, V + D], as the loss sees it
        predictor, joint = net.transducer_functions()
        state = net.initial_state(2)
        y = torch.full((2,), BLANK)
        for u in range(4):
            out, state = predictor(state, y)
            for t in range(5):
                np.testing.assert_allclose(joint(enc[:, t], out).numpy(), full[:, t, u].numpy(), atol=1e-5)
            if u < 3:
                y = labels[:, u]
    assert full.shape[-1] == len(TOKENS) + len(net.cfg.durations)
