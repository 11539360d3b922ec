"""A local ``transformers`` folder as a :class:`~beamsearch.corpus.CorpusModel`
(``beamsearch decode --model hf:DIR``), through :mod:`beamsearch.hf`; needs the ``hf`` extra,
imported when a model is made."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from beamsearch.core import validate as check
from beamsearch.corpus.hf_media import batched, line_inputs, media_kinds
from beamsearch.corpus.models import CorpusModel, CorpusModelBase

__all__ = ["HFModel", "hf_model"]


class HFModel(CorpusModelBase):
    """A local ``transformers`` directory (model and tokenizer) as a :class:`CorpusModel`, through
    :mod:`beamsearch.hf`: a causal LM's prompt is the line's tokens, an encoder-decoder's source is.
    Both decode with refill (their states join with ``concat_state``: decoder caches left-padded,
    positions per row; an encoder-decoder's encoder side right-padded), an encoder-decoder whose
    decoder positions cannot be given per row in fixed batches (``refill = False``,
    :func:`beamsearch.hf.joinable`). A line is refused when empty, when a word is not in the tokenizer's
    vocabulary (its unknown token), or when its tokens plus ``max_steps`` pass the model's positions."""

    def __init__(self, directory: str | os.PathLike, max_steps: int) -> None:
        import torch
        from transformers import AutoConfig, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from beamsearch import hf

        self._hf, self._torch = hf, torch
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        self.encoder_decoder = bool(config.is_encoder_decoder)
        self.processor = _processor(directory)
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # decode's stderr holds its own lines (progress, notes, errors)
        try:
            self.model = _load(directory, self.encoder_decoder, self.processor is not None).eval()
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        self.media = media_kinds(self.processor) if hf.multimodal.is_multimodal(self.model) else ()
        self.reads_text = getattr(self.model, "main_input_name", "input_ids") == "input_ids"
        self.refill = hf.joinable(self.model)
        self.tokenizer = getattr(self.processor, "tokenizer", None) or \
            AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.max_steps = check.at_least("max_steps", max_steps, 1)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"{directory}: neither the generation config nor the tokenizer has an eos token")
        self.eos = eos
        start = self.model.generation_config.decoder_start_token_id if self.encoder_decoder else None
        self.bos = start if start is not None else self.tokenizer.bos_token_id
        self._limit = hf.position_limit(self.model)
        self._prepared: Any = None

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def problem(self, text: str) -> str | None:
        if not self.reads_text:  # Whisper, a vision encoder-decoder: a file per line
            kind = self.media[0] if self.media else "image"
            return f"the model reads {' or '.join(self.media) or 'files'}: name the line's file (\"{kind}\": path)"
        if not text.strip():
            return "empty text"
        ids = self._ids(text)
        unk = self.tokenizer.unk_token_id
        if unk is not None and unk in ids:
            return "words outside the tokenizer's vocabulary"
        if not ids:
            return "no tokens"
        need = len(ids) + (0 if self.encoder_decoder else self.max_steps)
        if self._limit is not None and need > self._limit:
            return f"{len(ids)} tokens; the model has {self._limit} positions (max_steps {self.max_steps})"
        return None

    def source_length(self, text: str) -> int:
        return len(self._ids(text))

    def prompt(self, text: str) -> list[int]:
        return [self.bos] if self.encoder_decoder else self._ids(text)

    def media_item(self, text: str, files: dict[str, str]) -> dict | str:
        """A line naming ``files`` (kind -> path): its stream fields ``{"prompt", "source"}`` (the
        source: ``{"inputs": the processor's output for the line alone}``), or why it cannot be
        decoded (a file that cannot be read)."""
        try:
            inputs = line_inputs(self.processor, text, files, reads_text=self.reads_text)
        except ValueError as e:
            return str(e)
        if self.encoder_decoder:
            return {"prompt": [self.bos], "source": {"inputs": inputs}}
        if "input_ids" not in inputs:
            return "no text: the model's prompt is the line's text (with the processor's placeholder of the file)"
        ids = inputs["input_ids"][0].tolist()
        if self._limit is not None and len(ids) + self.max_steps > self._limit:
            return (f"{len(ids)} tokens with the files; the model has {self._limit} positions "
                    f"(max_steps {self.max_steps})")
        return {"prompt": ids, "source": {"inputs": inputs}}

    def make_state(self, items: list[dict]) -> Any:
        with_files = [isinstance(i["source"], dict) for i in items]  # a line naming files: media_item's source
        if any(with_files) and not all(with_files):  # lines with files beside lines without: two states, joined
            from beamsearch.core.state import concat_state, select_state

            order = sorted(range(len(items)), key=lambda j: not with_files[j])  # those with files first
            joined = concat_state([self.make_state([items[j] for j in order if with_files[j] == want])
                                   for want in (True, False)])
            return select_state(joined, self._torch.argsort(self._torch.tensor(order)))  # back in items' order
        adapter = self._hf.seq2seq_lm if self.encoder_decoder else self._hf.causal_lm
        if all(with_files):
            inputs = batched([i["source"]["inputs"] for i in items], self.tokenizer.pad_token_id or 0,
                             left=not self.encoder_decoder)
            sources, mask = inputs.pop("input_ids", None), inputs.pop("attention_mask", None)
            self._prepared = adapter(self.model, sources, attention_mask=mask, eos_token_id=self.eos,
                                     max_new_tokens=self.max_steps, **inputs)
            return self._prepared.init_state
        sources = [self._ids(i["source"]) for i in items]
        self._prepared = adapter(self.model, sources, eos_token_id=self.eos, max_new_tokens=self.max_steps)
        return self._prepared.init_state

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        # the last adapter made: its step reads all it needs per row from the state, so it runs the
        # rows of every input in flight (inputs prepared by earlier adapters of the same model too)
        return self._prepared.step(state, y_prev)

    def tokens(self, text: str) -> list[int]:
        ids = self._ids(text)
        if not ids or self.tokenizer.unk_token_id in ids:
            raise ValueError(f"{text!r} is not in the tokenizer's vocabulary")
        return ids

    def text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)


def _processor(directory: str | os.PathLike) -> Any:
    """The folder's processor, when it has one (a saved image processor or feature extractor, with
    its tokenizer or alone), else None."""
    if not any(os.path.exists(os.path.join(directory, name)) for name in ("preprocessor_config.json",
                                                                           "processor_config.json")):
        return None
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoProcessor

    processor = AutoProcessor.from_pretrained(directory, local_files_only=True)
    if media_kinds(processor):
        return processor
    for auto in (AutoImageProcessor, AutoFeatureExtractor):  # AutoProcessor gave the tokenizer: the bare one
        try:
            return auto.from_pretrained(directory, local_files_only=True)
        except (ValueError, OSError):
            continue
    return None


def _load(directory: str | os.PathLike, encoder_decoder: bool, multimodal: bool) -> Any:
    """The folder's model: a text model by the auto class of its kind; with a processor, the
    first auto class of the multimodal ones (image-text-to-text, speech, vision-to-text) that
    knows its config, then the text ones."""
    import transformers

    text = ["AutoModelForSeq2SeqLM" if encoder_decoder else "AutoModelForCausalLM"]
    names = ["AutoModelForImageTextToText", "AutoModelForSpeechSeq2Seq", "AutoModelForVision2Seq", *text] \
        if multimodal else text
    autos = [getattr(transformers, n) for n in names if hasattr(transformers, n)]
    for auto in autos[:-1]:
        try:
            return auto.from_pretrained(directory, local_files_only=True)
        except ValueError:  # "Unrecognized configuration class": the next one
            continue
    return autos[-1].from_pretrained(directory, local_files_only=True)


def hf_model(directory: str | os.PathLike, *, max_steps: int = 64) -> CorpusModel:
    """A local ``transformers`` directory (``save_pretrained`` model and tokenizer; nothing is
    downloaded) as a :class:`CorpusModel` (``beamsearch decode --model hf:DIR``); needs the ``hf``
    extra. A causal LM continues each line; an encoder-decoder reads it as its source.

    Args:
        directory: the folder.
        max_steps: the most tokens per output (the model's limit for ``--max-steps``).
    """
    return HFModel(directory, max_steps)
