"""Tiny random-weight multimodal models built from their configs (nothing downloaded), and each
one's inputs as its processor would give them: one input at a time (:meth:`Case.item`) and a
batch padded as the processor pads it (:meth:`Case.batch`). Used by tests/hf/test_multimodal.py
and benchmarks/bench_hf_multimodal.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers as T

VOCAB, PAD, BOS, START, EOS = 64, 0, 1, 2, 3
IMAGE, VIDEO, VSTART, VEND = 60, 61, 62, 63  # the image placeholder and vision delimiters
_TEXT = [[5, 7, 8], [9, 11, 12, 13, 14]]  # each input's text, different lengths


def _vision(**k: Any) -> dict:
    return {**dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=16,
                   patch_size=8), **k}


def _llama(**k: Any) -> dict:
    return dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, bos_token_id=BOS, eos_token_id=EOS,
                pad_token_id=PAD, **k)


def _bart(**k: Any) -> dict:
    return dict(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, decoder_start_token_id=START,
                forced_bos_token_id=None, forced_eos_token_id=None, **k)


def _left(items: list[dict], names: tuple[str, ...] = ("input_ids", "attention_mask")) -> dict:
    """The items' token rows left-padded (a chat VLM's processor pads on the left)."""
    width = max(i["input_ids"].shape[1] for i in items)
    out = {}
    for name in names:
        fill = PAD if name == "input_ids" else 0
        out[name] = torch.cat([torch.cat([torch.full((1, width - i[name].shape[1]), fill, dtype=i[name].dtype),
                                          i[name]], dim=1) for i in items])
    return out


def _stack(items: list[dict], name: str) -> torch.Tensor:
    return torch.cat([i[name] for i in items])


def _causal_item(tokens: list[int], images: int = 1, *, before: list[int] = (), after: list[int] = ()) -> dict:
    ids = torch.tensor([[*before, *[IMAGE] * images, *after, *tokens]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@dataclass
class Case:
    """One model class: ``build()`` the model, ``item(i)`` input i alone, ``batch(items)`` a batch."""

    build: Callable[[], Any]
    item: Callable[[int], dict]
    batch: Callable[[list[dict]], dict]
    causal: bool = True
    varied: bool = False  # the inputs' images / audio differ in size
    suffix_type: bool = False  # generated tokens have token_type_ids 1 (PaliGemma's causal suffix), else 0
    drops_last: bool = False  # the model's generate drops the prompt's last token (BLIP's [SEP])


def llava(vocab: int = VOCAB, image: int = IMAGE, **text: Any) -> Any:
    """A tiny LLaVA (CLIP 16x16 images of 4 patches, a 2-layer Llama) of ``vocab`` tokens, whose
    image placeholder is ``image``."""
    return T.LlavaForConditionalGeneration(T.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", **_vision()),
        text_config=dict(model_type="llama", **{**_llama(), "vocab_size": vocab, **text}),
        image_token_index=image, vision_feature_layer=-1))


def _llava() -> Case:
    def build():
        return llava()

    def item(i):
        return {**_causal_item(_TEXT[i], 4, before=[BOS]), "pixel_values": torch.randn(1, 3, 16, 16)}
    return Case(build, item, lambda items: {**_left(items), "pixel_values": _stack(items, "pixel_values")})


def _gemma3() -> Case:
    def build():
        return T.Gemma3ForConditionalGeneration(T.Gemma3Config(
            vision_config=dict(model_type="siglip_vision_model", **_vision()),
            text_config=dict(model_type="gemma3_text", **_llama(head_dim=8, sliding_window=4)), mm_tokens_per_image=4,
            image_token_index=IMAGE, boi_token_index=VSTART, eoi_token_index=VEND))

    def item(i):
        out = _causal_item(_TEXT[i], 4, before=[BOS, VSTART], after=[VEND])
        return {**out, "token_type_ids": (out["input_ids"] == IMAGE).long(), "pixel_values": torch.randn(1, 3, 16, 16)}
    return Case(build, item, lambda items: {**_left(items, ("input_ids", "attention_mask", "token_type_ids")),
                                            "pixel_values": _stack(items, "pixel_values")})


def _paligemma() -> Case:
    def build():
        return T.PaliGemmaForConditionalGeneration(T.PaliGemmaConfig(
            vision_config=dict(model_type="siglip_vision_model", **_vision(), projection_dim=32),
            text_config=dict(model_type="gemma", **_llama(head_dim=8)), image_token_index=IMAGE, projection_dim=32))

    def item(i):
        out = _causal_item(_TEXT[i], 4, after=[BOS])
        return {**out, "token_type_ids": torch.zeros_like(out["input_ids"]), "pixel_values": torch.randn(1, 3, 16, 16)}
    return Case(build, item, lambda items: {**_left(items, ("input_ids", "attention_mask", "token_type_ids")),
                                            "pixel_values": _stack(items, "pixel_values")}, suffix_type=True)


def _qwen(version: str) -> Case:
    rope = dict(rope_type="default", mrope_section=[1, 1, 2], rope_theta=10000.0)
    ids = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VSTART, vision_end_token_id=VEND)

    def build():
        if version == "2":
            vision = dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, patch_size=4, spatial_merge_size=2,
                          temporal_patch_size=2)
            return T.Qwen2VLForConditionalGeneration(T.Qwen2VLConfig(
                vision_config=vision, text_config=dict(**_llama(), rope_parameters=rope), **ids))
        vision = dict(depth=1, hidden_size=16, intermediate_size=32, out_hidden_size=32, num_heads=2, patch_size=4,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=8, fullatt_block_indexes=[0])
        return T.Qwen2_5_VLForConditionalGeneration(T.Qwen2_5_VLConfig(
            vision_config=vision, text_config=dict(**_llama(), rope_parameters=rope), **ids))

    def item(i):
        h, w = (4, 4) if i == 0 else (4, 8)  # 16x16 and 16x32 images: 4 and 8 tokens after the 2x2 merge
        out = _causal_item(_TEXT[i], h * w // 4, before=[BOS, VSTART], after=[VEND])
        return {**out, "mm_token_type_ids": (out["input_ids"] == IMAGE).long(),
                "pixel_values": torch.randn(h * w, 3 * 2 * 4 * 4), "image_grid_thw": torch.tensor([[1, h, w]])}
    return Case(build, item, lambda items: {**_left(items, ("input_ids", "attention_mask", "mm_token_type_ids")),
                                            "pixel_values": _stack(items, "pixel_values"),
                                            "image_grid_thw": _stack(items, "image_grid_thw")}, varied=True)


def _idefics(smol: bool) -> Case:
    def build():
        config, model = (T.SmolVLMConfig, T.SmolVLMForConditionalGeneration) if smol else \
            (T.Idefics3Config, T.Idefics3ForConditionalGeneration)
        return model(config(vision_config=_vision(patch_size=4), text_config=dict(model_type="llama", **_llama()),
                            image_token_id=IMAGE, scale_factor=2))

    def item(i):
        # input 1: a 16x8 image, padded to 16x16 with its pixel_attention_mask (as the processor pads)
        pixels, valid = torch.randn(1, 1, 3, 16, 16), torch.ones(1, 1, 16, 16, dtype=torch.bool)
        if i == 1:
            pixels[..., 8:] = 0
            valid[..., 8:] = False
        return {**_causal_item(_TEXT[i], 4, before=[BOS]), "pixel_values": pixels, "pixel_attention_mask": valid}
    return Case(build, item, lambda items: {**_left(items), "pixel_values": _stack(items, "pixel_values"),
                                            "pixel_attention_mask": _stack(items, "pixel_attention_mask")}, varied=True)


def _blip2() -> Case:
    def build():
        return T.Blip2ForConditionalGeneration(T.Blip2Config(
            vision_config=_vision(), qformer_config=dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
                                                         num_attention_heads=2, intermediate_size=32,
                                                         encoder_hidden_size=16),
            text_config=dict(model_type="opt", vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=1,
                             num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=32,
                             bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD),
            num_query_tokens=3, image_token_index=IMAGE))

    def item(i):
        return {**_causal_item(_TEXT[i], 3, after=[BOS]), "pixel_values": torch.randn(1, 3, 16, 16)}
    return Case(build, item, lambda items: {**_left(items), "pixel_values": _stack(items, "pixel_values")})


def _blip() -> Case:
    def build():
        return T.BlipForConditionalGeneration(T.BlipConfig(
            vision_config=_vision(), text_config=dict(
                vocab_size=VOCAB, hidden_size=32, encoder_hidden_size=16, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64, bos_token_id=BOS, sep_token_id=EOS,
                eos_token_id=EOS, pad_token_id=PAD)))

    def item(i):  # the processor's [CLS] text [SEP]: BLIP's generate makes the first its bos, drops the last
        ids = torch.tensor([[START, *_TEXT[i][-3:], EOS]])  # one length: its rule reads column 0, padding or not
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": torch.randn(1, 3, 16, 16)}
    return Case(build, item, lambda items: {**_left(items), "pixel_values": _stack(items, "pixel_values")},
                drops_last=True)


def _git() -> Case:
    def build():
        return T.GitForCausalLM(T.GitConfig(
            vision_config=_vision(), vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64, bos_token_id=BOS, eos_token_id=EOS,
            pad_token_id=PAD))

    def item(i):  # GIT prepends the image's 5 embeddings itself: no placeholders in the text
        return {**_causal_item(_TEXT[i], 0, before=[BOS]), "pixel_values": torch.randn(1, 3, 16, 16)}
    return Case(build, item, lambda items: {**_left(items), "pixel_values": _stack(items, "pixel_values")})


def _right(items: list[dict], name: str, fill: float = 0) -> torch.Tensor:
    """The items' ``name`` tensors right-padded along axis 1 (a feature extractor pads so)."""
    width = max(i[name].shape[1] for i in items)
    return torch.cat([torch.cat([i[name], i[name].new_full((1, width - i[name].shape[1], *i[name].shape[2:]), fill)],
                                dim=1) for i in items])


def _features(name: str) -> Callable[[list[dict]], dict]:
    return lambda items: {name: _right(items, name), "attention_mask": _right(items, "attention_mask")}


def _whisper() -> Case:
    def build():
        return T.WhisperForConditionalGeneration(T.WhisperConfig(
            vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16,
            max_target_positions=64, decoder_start_token_id=START, eos_token_id=EOS, pad_token_id=PAD,
            bos_token_id=BOS, suppress_tokens=None, begin_suppress_tokens=None))
    # Whisper's features have one length (30 s of audio, here 32 frames): no mask
    return Case(build, lambda i: {"input_features": torch.randn(1, 8, 32)},
                lambda items: {"input_features": _stack(items, "input_features")}, causal=False)


def _speech2text() -> Case:
    def build():
        return T.Speech2TextForConditionalGeneration(T.Speech2TextConfig(
            **_bart(), input_feat_per_channel=8, input_channels=1, conv_channels=16, conv_kernel_sizes=[5, 5],
            num_conv_layers=2, max_source_positions=64, max_target_positions=64))

    def item(i):
        frames = 24 if i == 0 else 16  # two audio lengths
        return {"input_features": torch.randn(1, frames, 8), "attention_mask": torch.ones(1, frames, dtype=torch.long)}
    return Case(build, item, _features("input_features"), causal=False, varied=True)


def _pix2struct() -> Case:
    def build():
        return T.Pix2StructForConditionalGeneration(T.Pix2StructConfig(
            text_config=dict(vocab_size=VOCAB, hidden_size=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                             pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD),
            vision_config=dict(hidden_size=32, patch_embed_hidden_size=48, d_ff=64, d_kv=8, num_hidden_layers=1,
                               num_attention_heads=4, seq_len=16, patch_size=4)))

    def item(i):
        rows, cols = (4, 4) if i == 0 else (2, 4)  # 16x16 and 8x16 images: 16 and 8 patches
        patches = torch.randn(1, rows * cols, 50)
        patches[0, :, 0] = torch.arange(rows * cols) // cols + 1  # each patch's row and column (from 1)
        patches[0, :, 1] = torch.arange(rows * cols) % cols + 1
        return {"flattened_patches": patches, "attention_mask": torch.ones(1, rows * cols, dtype=torch.long)}
    return Case(build, item, _features("flattened_patches"), causal=False, varied=True)


def _vision_encoder_decoder() -> Case:
    def build():
        encoder = T.ViTConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                              image_size=16, patch_size=8)
        decoder = T.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=1, n_head=4, bos_token_id=BOS,
                               eos_token_id=EOS, add_cross_attention=True, is_decoder=True)
        model = T.VisionEncoderDecoderModel(T.VisionEncoderDecoderConfig(
            encoder=encoder.to_dict(), decoder=decoder.to_dict(), decoder_start_token_id=BOS, pad_token_id=PAD,
            eos_token_id=EOS))
        model.generation_config.decoder_start_token_id = BOS
        return model
    return Case(build, lambda i: {"pixel_values": torch.randn(1, 3, 16, 16)},
                lambda items: {"pixel_values": _stack(items, "pixel_values")}, causal=False)


def _florence2() -> Case:
    def build():
        vision = dict(embed_dim=[16, 16], depths=[1, 1], num_heads=[2, 2], num_groups=[2, 2], patch_size=[7, 3],
                      patch_stride=[4, 2], patch_padding=[3, 1], patch_prenorm=[False, True], projection_dim=32,
                      window_size=2)
        return T.Florence2ForConditionalGeneration(T.Florence2Config(vision_config=vision, text_config=_bart(),
                                                                     image_token_id=IMAGE))

    def item(i):
        ids = torch.tensor([[*[IMAGE] * 5, BOS, *_TEXT[i], EOS]])  # a 16x16 image: 5 tokens
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": torch.randn(1, 3, 16, 16)}

    def batch(items):
        width = max(i["input_ids"].shape[1] for i in items)
        ids = torch.cat([torch.cat([i["input_ids"], torch.full((1, width - i["input_ids"].shape[1]), PAD)], 1)
                         for i in items])
        return {"input_ids": ids, "attention_mask": (ids != PAD).long(), "pixel_values": _stack(items, "pixel_values")}
    return Case(build, item, batch, causal=False)


CASES: dict[str, Callable[[], Case]] = {
    "llava": _llava, "qwen2_vl": lambda: _qwen("2"), "qwen2_5_vl": lambda: _qwen("2.5"), "paligemma": _paligemma,
    "idefics3": lambda: _idefics(False), "smolvlm": lambda: _idefics(True), "gemma3": _gemma3, "blip2": _blip2,
    "blip": _blip, "git": _git,
    "florence2": _florence2, "pix2struct": _pix2struct, "vision_encoder_decoder": _vision_encoder_decoder,
    "whisper": _whisper, "speech2text": _speech2text,
}


def build(name: str, seed: int = 0) -> tuple[Any, Case]:
    """Model ``name`` with seeded random weights in eval mode, its logits sharpened (x 8, so
    that searches disagree), eos and pad set in its generation config; and its :class:`Case`."""
    case = CASES[name]()
    torch.manual_seed(seed)
    model = case.build().eval()
    model.generation_config.eos_token_id = EOS
    model.generation_config.pad_token_id = PAD
    head = model.get_output_embeddings() or model.text_decoder.get_output_embeddings()  # BLIP: its decoder's
    head.register_forward_hook(lambda module, args, out: out * 8)
    return model, case
