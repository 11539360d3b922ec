"""transformers' CTC models through beamsearch.hf: emissions and lengths from the model's own
output-length rule, and the drop-in for Wav2Vec2ProcessorWithLM.batch_decode / decode, on models
built from configs with random weights (nothing downloaded)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from beamsearch.hf import CTCDecoder, ctc_emissions  # noqa: E402
from beamsearch.speech import NgramLM, Vocabulary, ctc_beam_search  # noqa: E402
from oracles.ctc import brute_force, log_softmax  # noqa: E402
from tests.speech.test_ngram import lm_objective, random_case, words_of  # noqa: E402

NO_PRUNING = dict(beam_width=4096, beam_prune_logp=-math.inf, token_min_logp=-math.inf)
CHARS = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4, "a": 5, "b": 6, "c": 7}
PIECES = ["<unk>", "\u2581he", "llo", "\u2581w", "orld", "\u2581", "a", "b", "<pad>"]


def char_tokenizer(tmp_path, vocab=None):
    (tmp_path / "vocab.json").write_text(json.dumps(vocab or CHARS))
    kw = {} if vocab is None else dict(unk_token="<pad>", bos_token=None, eos_token=None)
    return transformers.Wav2Vec2CTCTokenizer(str(tmp_path / "vocab.json"), **kw)


def piece_tokenizer():
    """A Unigram tokenizer with ▁ word starts (Parakeet's convention), pad (the blank) last."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.Unigram([(p, -1.0) for p in PIECES], unk_id=0, byte_fallback=False))
    tok.pre_tokenizer, tok.decoder = tokenizers.pre_tokenizers.Metaspace(), tokenizers.decoders.Metaspace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")


def wav2vec2_like(cls_name):
    torch.manual_seed(0)
    config = getattr(transformers, cls_name.replace("ForCTC", "Config"))(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, conv_dim=(8, 8),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        vocab_size=len(CHARS), pad_token_id=0, feat_extract_norm="layer", do_stable_layer_norm=True)
    return getattr(transformers, cls_name)(config).eval()


def parakeet():
    if not hasattr(transformers, "ParakeetForCTC"):
        pytest.skip("this transformers has no ParakeetForCTC")
    torch.manual_seed(0)
    enc = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
               subsampling_conv_channels=8, num_mel_bins=16)
    config = transformers.ParakeetCTCConfig(vocab_size=len(PIECES), pad_token_id=len(PIECES) - 1, encoder_config=enc)
    return transformers.ParakeetForCTC(config).eval()


def model_case(name, tmp_path):
    """A model, a padded batch of 3 (its inputs and the per-utterance sizes) and its tokenizer."""
    gen = torch.Generator().manual_seed(1)
    if name == "ParakeetForCTC":
        model, sizes, tok = parakeet(), [120, 70, 95], piece_tokenizer()
        inputs = torch.randn(3, 120, 16, generator=gen)
    else:
        model, sizes, tok = wav2vec2_like(name), [800, 430, 610], char_tokenizer(tmp_path)
        inputs = torch.randn(3, 800, generator=gen)
    mask = torch.zeros(inputs.shape[:2], dtype=torch.long)
    for i, s in enumerate(sizes):
        mask[i, :s] = 1
        inputs[i, s:] = 0.0
    return model, inputs, mask, sizes, tok


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # WavLM's own attention call
@pytest.mark.parametrize("name", ["Wav2Vec2ForCTC", "HubertForCTC", "WavLMForCTC", "ParakeetForCTC"])
def test_emissions_lengths_are_the_frames_of_each_utterance_run_alone(name, tmp_path):
    """Each padded utterance's length equals the frames the model gives it alone, its emissions
    there equal its own (log-softmax of the logits), and it decodes as it does alone."""
    model, inputs, mask, sizes, tok = model_case(name, tmp_path)
    emissions, lengths = ctc_emissions(model, inputs, mask)
    with torch.no_grad():
        logits = model(inputs, attention_mask=mask).logits
    torch.testing.assert_close(emissions, torch.log_softmax(logits, -1))
    decoder = CTCDecoder(tok, beta=0.0)
    batch = decoder.batch_decode(emissions, lengths=lengths, beam_width=8, n_best=2)
    for i, s in enumerate(sizes):
        with torch.no_grad():
            alone = model(inputs[i : i + 1, :s]).logits
        assert int(lengths[i]) == alone.shape[1] > 0
        torch.testing.assert_close(emissions[i, : alone.shape[1]], torch.log_softmax(alone[0], -1), atol=1e-4, rtol=0)
        one = decoder.decode(alone[0], beam_width=8, n_best=2)
        assert one.text == batch.text[i]
        np.testing.assert_allclose(one.logit_score, batch.logit_score[i], rtol=1e-4, atol=1e-4)
    # a processor's output (a mapping with the mask) gives the same
    key = model.main_input_name
    again, lens = ctc_emissions(model, {key: inputs, "attention_mask": mask})
    assert torch.equal(lens, lengths) and torch.allclose(again, emissions)


def test_lengths_without_a_mask_are_all_frames_and_a_model_without_a_rule_is_refused():
    model = wav2vec2_like("Wav2Vec2ForCTC")
    emissions, lengths = ctc_emissions(model, torch.zeros(2, 300))
    assert lengths.tolist() == [emissions.shape[1]] * 2

    class Bare(torch.nn.Module):
        def forward(self, input_values, attention_mask=None):
            return transformers.modeling_outputs.CausalLMOutput(logits=torch.zeros(1, 3, 4))

    with pytest.raises(TypeError, match="Bare has no output-length rule"):
        ctc_emissions(Bare(), torch.zeros(1, 10), torch.ones(1, 10))
    with pytest.raises(ValueError, match="attention_mask was given twice"):
        ctc_emissions(model, {"input_values": torch.zeros(1, 300), "attention_mask": torch.ones(1, 300)},
                      torch.ones(1, 300))


@pytest.mark.parametrize("seed", range(25))
def test_nothing_pruned_the_drop_in_equals_brute_force_with_the_lm(seed, tmp_path):
    """pyctcdecode's fields from the brute-force objective: text the words of the labels,
    logit_score the summed CTC probability, lm_score the total (acoustic + LM + words), each
    unknown word paying pyctcdecode's default ``unk_score_offset`` -10 (log10, weighed by alpha)."""
    _, lp, text, alpha, beta = random_case(seed)
    (tmp_path / "lm.arpa").write_text(text)
    tok = char_tokenizer(tmp_path, {"<pad>": 0, "a": 1, "b": 2, "|": 3})
    out = CTCDecoder(tok, lm=tmp_path / "lm.arpa", alpha=alpha, beta=beta).batch_decode(
        torch.tensor(lp[None]), n_best=3, **NO_PRUNING)
    ranked = lm_objective(lp, text, alpha, beta, unk=-10.0 * math.log(10.0))
    acoustic = dict(brute_force(lp, 0))
    assert len(out.text[0]) == min(3, len(ranked))
    for text_i, logit, total in zip(out.text[0], out.logit_score[0], out.lm_score[0], strict=True):
        tied = [lab for lab, s in ranked if abs(s - total) < 1e-9]
        assert tied and text_i in {" ".join(words_of(lab)) for lab in tied}
        assert any(np.isclose(acoustic[lab], logit) for lab in tied)
    np.testing.assert_allclose(out.lm_score[0], [s for _, s in ranked[:3]], rtol=1e-9, atol=1e-9)
    ours = ctc_beam_search(lp[None], blank=0, beam_size=4096, n_best=3, vocabulary=Vocabulary.from_tokenizer(tok),
                           lm=NgramLM.from_arpa(str(tmp_path / "lm.arpa")), alpha=alpha, beta=beta,
                           unk_score_offset=-10.0 * math.log(10.0))[0]
    assert [h.text for h in ours] == out.text[0]


@pytest.mark.parametrize("made, called, log10", [(-10.0, None, -10.0), (-3.0, None, -3.0), (-10.0, 0.0, 0.0),
                                                 (0.0, -1.5, -1.5)])
def test_the_drop_in_passes_unk_score_offset_on_as_pyctcdecode_weighs_it(made, called, log10, tmp_path):
    """pyctcdecode's ``unk_score_offset`` (log10; the decoder's unless the call gives one) adds
    alpha x offset x ln 10 per unknown word: the brute-force objective with that offset (on a
    case whose 3-best scores differ for each of these offsets)."""
    _, lp, text, alpha, beta = random_case(20, frames=5)
    (tmp_path / "lm.arpa").write_text(text)
    tok = char_tokenizer(tmp_path, {"<pad>": 0, "a": 1, "b": 2, "|": 3})
    dec = CTCDecoder(tok, lm=tmp_path / "lm.arpa", alpha=alpha, beta=beta, unk_score_offset=made)
    out = dec.batch_decode(lp[None], n_best=3, unk_score_offset=called, **NO_PRUNING)
    ranked = lm_objective(lp, text, alpha, beta, unk=log10 * math.log(10.0))
    np.testing.assert_allclose(out.lm_score[0], [s for _, s in ranked[:3]], rtol=1e-9, atol=1e-9)
    one = dec.decode(lp, n_best=3, unk_score_offset=called, **NO_PRUNING)
    np.testing.assert_allclose(one.lm_score, out.lm_score[0], rtol=1e-12)


def test_the_drop_in_without_a_word_lm_leaves_unk_score_offset_unused(tmp_path):
    """As pyctcdecode without a language model: the offset changes nothing."""
    _, lp, _, _, _ = random_case(2, frames=5)
    dec = CTCDecoder(char_tokenizer(tmp_path, {"<pad>": 0, "a": 1, "b": 2, "|": 3}))
    a, b = dec.batch_decode(lp[None], n_best=3), dec.batch_decode(lp[None], n_best=3, unk_score_offset=-4.0)
    assert a.text == b.text and a.lm_score == b.lm_score
    with pytest.raises(ValueError, match="unk_score_offset must be finite; got nan"):
        CTCDecoder(char_tokenizer(tmp_path, {"<pad>": 0, "a": 1, "b": 2, "|": 3}), unk_score_offset=math.nan)


def test_fields_of_a_hand_made_case(tmp_path):
    """Frames a, |, b, b, pad(-100) x2 at probability 0.9 each (0.1/3 elsewhere): the text "a b";
    word offsets in frames with the end exclusive, as pyctcdecode's: a [0, 1), b [2, 4); no LM, so
    lm_score (the total) equals logit_score, the log of the sum over the alignments of [a, |, b]."""
    tok = char_tokenizer(tmp_path, {"<pad>": 0, "a": 1, "b": 2, "|": 3})
    hi, lo = math.log(0.9), math.log(0.1 / 3)
    frames = [[lo, hi, lo, lo], [lo, lo, lo, hi], [lo, lo, hi, lo], [lo, lo, hi, lo]]
    logits = np.array([frames + [[-100.0] * 4] * 2])
    out = CTCDecoder(tok).batch_decode(logits, output_word_offsets=True, **NO_PRUNING)
    assert out.text == ["a b"]
    assert out.word_offsets == [[{"word": "a", "start_offset": 0, "end_offset": 1},
                                 {"word": "b", "start_offset": 2, "end_offset": 4}]]
    # the alignments of [a, |, b] over 4 frames (labels 1, 3, 2 in order, blanks 0 between):
    total = sum(math.exp(sum(np.array(frames)[t, k] for t, k in enumerate(al)))
                for al in [(1, 3, 2, 2), (1, 3, 2, 0), (1, 3, 0, 2), (1, 0, 3, 2), (0, 1, 3, 2), (1, 1, 3, 2),
                           (1, 3, 3, 2)])
    assert np.isclose(out.logit_score[0], math.log(total)) and out.lm_score == out.logit_score
    single = CTCDecoder(tok).decode(logits[0, :4], output_word_offsets=True, **NO_PRUNING)
    assert single.text == "a b" and single.word_offsets == out.word_offsets[0]
    assert np.isclose(single.logit_score, out.logit_score[0])


def test_beam_one_equals_the_processors_argmax_decode_on_peaked_frames(tmp_path):
    """Each frame of a wav2vec2 model's output made peaked at its argmax (0 there, -30 elsewhere;
    specials other than the blank kept out, as the tokenizer writes them): the best path holds
    nearly all the mass, and beam 1 gives the processor's argmax text (single spaces)."""
    model, inputs, mask, sizes, tok = model_case("Wav2Vec2ForCTC", tmp_path)
    emissions, lengths = ctc_emissions(model, inputs, mask)
    emissions[..., 1:4] = -1e4
    logits = torch.where(emissions == emissions.max(-1, keepdim=True).values, 0.0, -30.0)
    ours = CTCDecoder(tok).batch_decode(logits, lengths=lengths, beam_width=1)
    for i in range(len(sizes)):
        ids = logits[i, : int(lengths[i])].argmax(-1)
        assert ours.text[i] == " ".join(tok.decode(ids).split())
    assert any(ours.text)


def test_beam_one_is_not_the_best_path_in_general():
    """Frames (blank, a, b): (.4, .6, 0), (.5, .3, .2), (.1, .5, .4). Beam 1 keeps "a" after
    frame 0 (.6), and after frame 1 (.48 against "ab" .12), ending there .3 in blank and .18 in
    a; at frame 2 "ab" (.48 x .4 = .192) beats "aa" (.3 x .5 = .15) and "a" (.48 x .1 + .18 x .5 =
    .138). The best path is a, blank, a: "aa"."""
    lp = np.log(np.array([[[0.4, 0.6, 1e-12], [0.5, 0.3, 0.2], [0.1, 0.5, 0.4]]]))
    assert [h.tokens for h in ctc_beam_search(lp, blank=0, beam_size=1)[0]] == [[1, 2]]
    assert lp[0].argmax(-1).tolist() == [1, 0, 1]  # collapsed: [1, 1]


def test_pieces_and_text_hotwords(tmp_path):
    """A SentencePiece-style tokenizer's words, and hotwords given as text tokenized by it equal
    the same phrases given as label ids."""
    tok = piece_tokenizer()
    rng = np.random.default_rng(3)
    lp = log_softmax(rng.normal(size=(2, 9, len(PIECES))) * 2)
    dec = CTCDecoder(tok, beta=0.0)
    out = dec.batch_decode(lp, hotwords=["hello", "world"], hotword_weight=2.0, beam_width=16, n_best=2)
    ids = [tok("hello", add_special_tokens=False)["input_ids"], tok("world", add_special_tokens=False)["input_ids"]]
    assert ids == [[1, 2], [3, 4]]
    ref = ctc_beam_search(lp, blank=8, beam_size=16, n_best=2, vocabulary=Vocabulary.from_tokenizer(tok),
                          hotwords=ids, hotword_weight=2.0, token_min_logp=-5.0, beam_threshold=10.0)
    assert out.text == [[h.text for h in r] for r in ref]
    np.testing.assert_allclose(out.lm_score, [[h.score for h in r] for r in ref])
    per_utt = dec.batch_decode(lp, hotwords=[["hello"], ["a b"]], beam_width=4)
    assert len(per_utt.text) == 2
    with pytest.raises(ValueError, match=r"hotwords\[0\] = 'xyz' has characters the tokenizer writes as its unknown"):
        dec.batch_decode(lp, hotwords=["xyz"])


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(pool=object()), ValueError, "pool=.* is not supported: the batch is decoded as arrays in one process"),
    (dict(num_processes=4), ValueError, "num_processes=4 is not supported"),
    (dict(unk_score_offset=float("nan")), ValueError, "unk_score_offset must be finite; got nan"),
    (dict(unk_score_offset=-math.inf), ValueError, "unk_score_offset must be finite; got -inf"),
    (dict(unk_score_offset="x"), TypeError, "unk_score_offset must be a real number; got 'x'"),
    (dict(lm_score_boundary=False), ValueError, "lm_score_boundary=False is not supported"),
    (dict(beam_prune_logp=3.0), ValueError, "beam_prune_logp must be a log-probability difference"),
    (dict(beam_width=0), ValueError, "beam_size must be"),
    (dict(prune_history=True), ValueError, "prune_history=True is not supported: prefixes are kept whole"),
    (dict(lm_start_state=object()), ValueError, "lm_start_state=.* is not supported: carry a decode across"),
    (dict(beam_size=4), TypeError, "unexpected keyword argument 'beam_size'"),
])
def test_refused_arguments_say_why(kwargs, error, needle, tmp_path):
    dec = CTCDecoder(char_tokenizer(tmp_path, {"<pad>": 0, "a": 1, "b": 2, "|": 3}))
    with pytest.raises(error, match=needle):
        dec.batch_decode(np.zeros((1, 3, 4)), **kwargs)
    blanks = np.zeros((1, 3, 4))
    blanks[..., 0] = 10.0
    assert dec.batch_decode(blanks, lm_score_boundary=True, pool=None).text == [""]
    with pytest.raises(ValueError, match=r"logits must be \[T, V\]"):
        dec.decode(np.zeros((1, 3, 4)))


def test_the_same_call_on_wav2vec2_processor_with_lm_gives_the_same_text_and_offsets(tmp_path):
    """transformers' own Wav2Vec2ProcessorWithLM (pyctcdecode, no LM) and the drop-in, called
    with the same arguments on peaked frames (where pyctcdecode's max-style merging and ours
    agree): the same texts and word offsets."""
    import logging
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyctcdecode = pytest.importorskip("pyctcdecode")
    logging.getLogger("pyctcdecode").setLevel(logging.ERROR)
    tok = char_tokenizer(tmp_path)
    labels = ["" if t == "<pad>" else " " if t == "|" else t for t in tok.convert_ids_to_tokens(list(range(len(tok))))]
    processor = transformers.Wav2Vec2ProcessorWithLM(
        feature_extractor=transformers.Wav2Vec2FeatureExtractor(), tokenizer=tok,
        decoder=pyctcdecode.build_ctcdecoder(labels))
    rng = np.random.default_rng(0)
    ids = rng.choice([0, 0, 0, 4, 5, 6, 7], size=(3, 40))
    logits = np.where(np.arange(len(CHARS)) == ids[..., None], 0.0, -8.0).astype(np.float32)
    logits[1, 30:] = -100.0  # transformers' padding
    kw = dict(beam_width=8, output_word_offsets=True)
    theirs = processor.batch_decode(logits, **kw)
    ours = CTCDecoder(processor).batch_decode(logits, **kw)
    assert ours.text == theirs.text and ours.word_offsets == theirs.word_offsets
    assert sum(len(w) for w in ours.word_offsets) > 6
    one = CTCDecoder(processor).decode(logits[0], **kw)
    assert one.text == processor.decode(logits[0], **kw).text
