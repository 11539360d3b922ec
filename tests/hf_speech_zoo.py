"""Tiny random-weight speech encoder-decoders of ``transformers`` with their processors, built
here (nothing downloaded), for tests/hf/test_speech.py and the CLI's tests:

- Whisper: a byte-level Whisper tokenizer (the 256 bytes, ``<|endoftext|>``, the start, language,
  task, no-speech and no-timestamps tokens, then the 1501 timestamps ``<|0.00|>`` ..
  ``<|30.00|>``: 1766 ids) and 8 mel bins over 30-second windows (3000 frames, 1500 encoder
  positions); its layers scaled up so that texts vary with the audio;
- Moonshine (raw samples) and Speech2Text (8 filterbank bins) with a word-level tokenizer.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import torch
import transformers as T
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers.convert_slow_tokenizer import bytes_to_unicode

SPECIAL = ["<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
           "<|nospeech|>", "<|notimestamps|>"]
WORDS = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(60)]


def whisper_processor(n_mels: int = 8) -> Any:
    """A WhisperProcessor: 16 kHz, hop 160, 30-second windows, ``n_mels`` bins; the tokenizer above."""
    vocab = {c: i for i, c in enumerate(sorted(bytes_to_unicode().values()))}
    vocab["<|endoftext|>"] = len(vocab)
    tok = T.WhisperTokenizer(vocab=vocab, merges=[])
    tok.add_special_tokens({"additional_special_tokens": SPECIAL})
    tok.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", lstrip=False, rstrip=False, normalized=False)
                    for i in range(1501)])
    return T.WhisperProcessor(feature_extractor=T.WhisperFeatureExtractor(feature_size=n_mels), tokenizer=tok)


def whisper_model(seed: int = 0, eot_boost: float = 0.0, n_text_ctx: int = 64, ts_boost: float = -1.5) -> Any:
    """A seeded tiny Whisper for :func:`whisper_processor`'s ids (eot 256, sot 257); eot pushed up
    by ``eot_boost``, the timestamps (1501 of its 1766 ids) by ``ts_boost``."""
    T.logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = T.WhisperConfig(vocab_size=1766, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=2,
                             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                             decoder_ffn_dim=64, max_source_positions=1500, max_target_positions=n_text_ctx,
                             decoder_start_token_id=257, eos_token_id=256, pad_token_id=256, bos_token_id=256,
                             suppress_tokens=None, begin_suppress_tokens=None)
    model = T.WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.model.encoder.conv1.weight.mul_(10)
        for name, p in [*model.model.decoder.layers.named_parameters(), *model.model.encoder.layers.named_parameters()]:
            if p.ndim == 2:
                p.mul_(6 if "encoder_attn" in name else 3)
        u = torch.randn(32)
        u /= u.norm()
        model.model.decoder.layer_norm.bias.copy_(2 * u)
        model.model.decoder.embed_tokens.weight[256] += eot_boost * u
        model.model.decoder.embed_tokens.weight[265:] += ts_boost * u
    return model


def save_whisper(folder: pathlib.Path, seed: int = 0, eot_boost: float = 0.5, n_text_ctx: int = 64) -> pathlib.Path:
    """:func:`whisper_model` and :func:`whisper_processor` saved in ``folder``."""
    whisper_model(seed, eot_boost, n_text_ctx).save_pretrained(folder)
    whisper_processor().save_pretrained(folder)
    return folder


def word_tokenizer() -> Any:
    inner = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return T.PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                     eos_token="</s>")


def moonshine(seed: int = 0) -> tuple[Any, Any]:
    """A tiny Moonshine (raw 16 kHz samples, start token <s>, eos </s>) and its processor."""
    torch.manual_seed(seed)
    model = T.MoonshineForConditionalGeneration(T.MoonshineConfig(
        vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=1,
        decoder_num_hidden_layers=1, encoder_num_attention_heads=4, decoder_num_attention_heads=4,
        max_position_embeddings=64, decoder_start_token_id=2, bos_token_id=2, eos_token_id=3, pad_token_id=0)).eval()
    _scale(model)
    extractor = T.Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                           do_normalize=False, return_attention_mask=True)
    return model, T.Wav2Vec2Processor(feature_extractor=extractor, tokenizer=word_tokenizer())


def speech2text(seed: int = 0) -> tuple[Any, Any]:
    """A tiny Speech2Text (8 filterbank bins) and its processor."""
    torch.manual_seed(seed)
    model = T.Speech2TextForConditionalGeneration(T.Speech2TextConfig(
        vocab_size=len(WORDS), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, input_feat_per_channel=8,
        conv_channels=16, max_source_positions=600, max_target_positions=64, decoder_start_token_id=3,
        eos_token_id=3, pad_token_id=0, bos_token_id=2)).eval()
    _scale(model)
    extractor = T.Speech2TextFeatureExtractor(feature_size=8, num_mel_bins=8)
    return model, T.Speech2TextProcessor(feature_extractor=extractor, tokenizer=word_tokenizer())


def _scale(model: Any) -> None:
    """The decoder's matrices scaled up: texts that vary with the audio, eos a close call at times."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2 and "decoder" in name and "embed" not in name:
                p.mul_(3)
        model.get_output_embeddings().weight.mul_(4)  # peaked: eos is no close call at every step


def noise(seconds: float, seed: int, level: float = 0.1) -> np.ndarray:
    """Seeded Gaussian noise, float32 at 16 kHz."""
    return (np.random.default_rng(seed).normal(size=int(seconds * 16000)) * level).astype(np.float32)
