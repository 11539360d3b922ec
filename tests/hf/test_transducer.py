"""transformers' ParakeetForRNNT / ParakeetForTDT / Nemotron3_5AsrForRNNT (small random weights) through
``beamsearch.hf.transducer``: greedy equals ``model.generate`` token for token and frame for
frame; beam search runs through the wrapped functions and its scores are the model's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")
if not hasattr(transformers, "ParakeetForTDT"):
    pytest.skip("this transformers has no Parakeet transducers", allow_module_level=True)

from beamsearch.hf.transducer import lstm_call, lstm_step, transducer_functions, transducer_generate  # noqa: E402

BLANK, VOCAB, M = 10, 11, 3
ENCODER = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               subsampling_conv_channels=8, num_mel_bins=16, subsampling_factor=4, dropout=0.0, layerdrop=0.0,
               activation_dropout=0.0, attention_dropout=0.0)


CLASSES = {"rnnt": ("ParakeetForRNNT", "ParakeetRNNTConfig", {}), "tdt": ("ParakeetForTDT", "ParakeetTDTConfig", {}),
           "nemotron": ("Nemotron3_5AsrForRNNT", "Nemotron3_5AsrConfig",
                        dict(num_prompts=4, prompt_intermediate_size=16, default_prompt_id=1))}


def make(kind: str, seed: int):
    torch.manual_seed(seed)
    name, cfg_name, extra = CLASSES[kind]
    if not hasattr(transformers, name):
        pytest.skip(f"this transformers has no {name}")
    cls, cfg = getattr(transformers, name), getattr(transformers, cfg_name)
    model = cls(cfg(encoder_config=ENCODER, vocab_size=VOCAB, blank_token_id=BLANK, pad_token_id=BLANK,
                    decoder_hidden_size=24, num_decoder_layers=2, max_symbols_per_step=M, **extra)).eval()
    with torch.no_grad():
        model.joint.head.weight.mul_(4)  # peaky enough to emit labels
        if kind == "tdt":
            # generate's greedy takes the argmax over tokens and durations together, so keep the
            # durations' logits below the tokens' (a constant shift: their softmax is unchanged);
            # and make duration 0 rarer, so that few frames hold more than M labels
            model.joint.head.bias[VOCAB:] -= 100
            model.joint.head.bias[VOCAB] -= 1
    return model


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 40, 16, generator=g)
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[1, 25:] = 0
    return x, mask


def generated(model, x, mask):
    """Per utterance, generate's labels with their frames (the cumulative durations), cut at the
    utterance's frames (generate keeps stepping rows that finished before the others)."""
    out = model.generate(x, attention_mask=mask, decoder_start_token_id=BLANK, max_new_tokens=400)
    lengths = transducer_functions(model, x, mask).lengths.tolist()
    rows = []
    for seq, dur, length in zip(out.sequences.tolist(), out.durations.tolist(), lengths, strict=True):
        frames = np.cumsum(dur)
        rows.append([(s, int(frames[p - 1])) for p, s in enumerate(seq) if p > 0 and s != BLANK
                     and frames[p - 1] < length])
    return rows


@pytest.mark.parametrize("kind", ["rnnt", "tdt", "nemotron"])
def test_greedy_equals_generate(kind):
    compared = 0
    for seed in range(3):
        model = make(kind, seed)
        x, mask = inputs(seed)
        ours = transducer_generate(model, x, mask)
        for want, got in zip(generated(model, x, mask), ours, strict=True):
            frames = [f for _, f in want]
            if max(np.bincount(frames).max(initial=0), 0) >= M and kind == "tdt":
                continue  # generate's TDT greedy has no cap on labels per frame; ours stops at M
            assert got[0].tokens == [s for s, _ in want]
            assert got[0].token_frames.tolist() == frames
            compared += 1
    assert compared >= 6


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_step_is_the_lstm(layers):
    """The step with looked-up first-layer input gates equals torch's LSTM run on one time step
    (the reference: nn.LSTM itself), on rows whose labels repeat within and across calls (the
    looked-up gates reused), on a non-contiguous state, to float rounding; an LSTM it does not
    cover (projections) is run as the LSTM itself."""
    torch.manual_seed(layers)
    emb, lstm = torch.nn.Embedding(VOCAB, 12), torch.nn.LSTM(12, 16, layers, batch_first=True).eval()
    step = lstm_step(emb, lstm)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for rows in (1, 5, 9, 5):
            y = torch.randint(0, VOCAB, (rows,), generator=g)
            h, c = (torch.randn(layers, rows, 16, generator=g).transpose(0, 1) for _ in range(2))
            out, (h2, c2) = lstm(emb(y)[:, None, :], (h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous()))
            got = step(y, h, c)
            for a, b in zip(got, (out[:, 0], h2.transpose(0, 1), c2.transpose(0, 1)), strict=True):
                assert a.shape == b.shape
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        proj = torch.nn.LSTM(12, 16, layers, batch_first=True, proj_size=8).eval()
        assert lstm_step(emb, proj).func is lstm_call
        y, h, c = torch.tensor([1, 2]), torch.randn(2, layers, 8), torch.randn(2, layers, 16)
        out = lstm_step(emb, proj)(y, h, c)
        assert out[0].shape == (2, 8) and out[1].shape == (2, layers, 8) and out[2].shape == (2, layers, 16)


@pytest.mark.parametrize("kind", ["rnnt", "tdt"])
def test_beam_through_hf(kind):
    """num_beams / num_return_sequences: n-best lists, best first; the best is at least as
    probable as greedy's alignment; the beam of one with one label per frame is greedy."""
    model = make(kind, 0)
    x, mask = inputs(0)
    beams = transducer_generate(model, x, mask, num_beams=4, num_return_sequences=3, method="alsd",
                                max_symbols_per_frame=M)
    greedy = transducer_generate(model, x, mask)
    for hyps, g in zip(beams, greedy, strict=True):
        assert 1 <= len(hyps) <= 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
        assert hyps[0].acoustic_score >= g[0].acoustic_score - 1e-4
    if kind == "rnnt":
        one = transducer_generate(model, x, mask, num_beams=1, num_return_sequences=1, method="modified",
                                  max_symbols_per_frame=1, hotwords=[[1, 2]], hotword_weight=0.0)
        g1 = transducer_generate(model, x, mask, max_symbols_per_frame=1)
        assert [h[0].tokens for h in one] == [h[0].tokens for h in g1]


def test_an_lm_through_hf_is_fused_with_one_beam_too():
    """With ``lm`` given, ``num_beams=1`` runs the beam search of one (greedy has no LM): the
    results equal transducer_beam_search on the wrapped functions, LM terms included."""
    from beamsearch.speech import NgramLM, transducer_beam_search
    from oracles.ctc import random_arpa

    model = make("rnnt", 0)
    x, mask = inputs(0)
    tokens = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "|", "<blk>"]
    text = random_arpa(np.random.default_rng(0), 2, ["a", "b", "ab", "ca", "d", "e"], 8)
    lm = NgramLM.from_lines(text.splitlines())
    kw = dict(vocabulary=tokens, lm=lm, alpha=0.5, beta=1.0)
    ours = transducer_generate(model, x, mask, **kw)
    want = transducer_beam_search(**transducer_functions(model, x, mask).options(), beam_size=1, **kw)
    for got, exp in zip(ours, want, strict=True):
        assert got[0].tokens == exp[0].tokens
        assert got[0].lm_score == pytest.approx(exp[0].lm_score) and got[0].score == pytest.approx(exp[0].score)
        assert got[0].lm_score < 0.0  # </s> at least was scored
