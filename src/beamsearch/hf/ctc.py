"""transformers' CTC models decoded by :func:`beamsearch.speech.ctc_beam_search` (docs/speech.md).

- :func:`ctc_emissions` runs an ``AutoModelForCTC`` (wav2vec2, HuBERT, WavLM, Data2VecAudio,
  Parakeet, LASR, OmniASR CTC, ...) and returns its per-frame log-probabilities with each
  utterance's number of frames, computed from the attention mask by the model's own rule.
- :class:`CTCDecoder` is a drop-in for ``Wav2Vec2ProcessorWithLM.batch_decode`` / ``decode``:
  pyctcdecode's argument names, transformers' ``Wav2Vec2DecoderWithLMOutput`` fields.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

import numpy as np
import torch

from beamsearch.core import validate
from beamsearch.speech import NgramLM, TokenLM, Vocabulary, ctc_beam_search

LENGTH_RULES = ("_get_feat_extract_output_lengths", "_get_subsampling_output_length")
"""The models' own input-to-output length functions: the wav2vec2 family's feature encoder
(wav2vec2, HuBERT, WavLM, Data2VecAudio, UniSpeech, SEW, wav2vec2-BERT, ...) and the
subsampling of the Conformer-style models (Parakeet, LASR, OmniASR CTC)."""
PADDING = -100.0
"""transformers' pipelines pad logits with this value: a frame all of it is padding."""
REFUSED = {
    "pool": "the batch is decoded as arrays in one process; there is no pool to give",
    "num_processes": "the batch is decoded as arrays in one process; there are no processes to count",
    "prune_history": "prefixes are kept whole; there is no history to prune",
    "lm_start_state": "carry a decode across chunks with beamsearch.speech.CTCStream instead",
}
"""pyctcdecode's arguments with no counterpart here, and why (a value other than None is refused)."""


@torch.no_grad()
def ctc_emissions(model: Any, inputs: Any, attention_mask: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a CTC model: ``(emissions, lengths)``, float32 ``[N, T, V]`` per-frame log-probabilities
    (log-softmax of its logits) and int64 ``[N]`` each utterance's number of frames, both on the
    model's device.

    Args:
        model: an ``AutoModelForCTC`` (anything whose output has ``logits`` ``[N, T, V]``).
        inputs: the model's main input (``input_values`` for wav2vec2-style models,
            ``input_features`` for Parakeet-style ones), or a processor's output (a mapping
            holding it and maybe ``attention_mask``).
        attention_mask: int or bool ``[N, S]``, 1 on the samples/features of each utterance (None:
            the mapping's, else every utterance is ``T`` frames). The lengths are the model's own
            output lengths of ``attention_mask.sum(-1)`` (``_get_feat_extract_output_lengths``
            or ``_get_subsampling_output_length``, whichever the model has).
    """
    kwargs = dict(inputs) if hasattr(inputs, "keys") else {getattr(model, "main_input_name", "input_values"): inputs}
    if attention_mask is None:
        attention_mask = kwargs.get("attention_mask")
    elif "attention_mask" in kwargs:
        raise ValueError("attention_mask was given twice: as attention_mask= and in inputs; give one")
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    logits = model(**kwargs).logits
    if logits.dim() != 3:
        raise ValueError(f"the model's logits must be [N, T, V]; got shape {tuple(logits.shape)}")
    emissions = torch.log_softmax(logits.float(), dim=-1)
    n, frames = logits.shape[:2]
    if attention_mask is None:
        return emissions, torch.full((n,), frames, dtype=torch.long, device=logits.device)
    return emissions, output_lengths(model, attention_mask, frames).to(logits.device)


def output_lengths(model: Any, attention_mask: Any, frames: int) -> torch.Tensor:
    """int64 ``[N]``: the model's output lengths of the mask's input lengths, at most ``frames``."""
    given = torch.as_tensor(attention_mask).long().sum(-1)
    for name in LENGTH_RULES:
        rule = getattr(model, name, None)
        if rule is not None:
            return torch.clamp(torch.as_tensor(rule(given)).long(), max=frames)
    raise TypeError(f"{type(model).__name__} has no output-length rule ({' or '.join(LENGTH_RULES)}): "
                    "decode its logits with ctc_beam_search(..., lengths=...) giving the frame counts")


class CTCDecoder:
    """A drop-in for ``Wav2Vec2ProcessorWithLM``'s ``batch_decode`` and ``decode``.

    ``processor.batch_decode(logits, ...)`` becomes ``CTCDecoder(processor, lm=...).batch_decode(
    logits, ...)`` with the same arguments and output fields (docs/speech.md maps each).

    Args:
        tokenizer: a transformers tokenizer or a processor holding one (``.tokenizer``).
        lm: None, a word n-gram LM (:class:`~beamsearch.speech.NgramLM`, an ARPA path,
            :class:`~beamsearch.speech.KenLMModel`) or a :class:`~beamsearch.speech.TokenLM`.
        alpha, beta: the LM weight and word bonus when a call gives none (pyctcdecode's
            defaults, 0.5 and 1.5).
        unk_score_offset: when a call gives none, pyctcdecode's offset (log10 units, its
            default -10.0) for a completed word not in a word n-gram LM's vocabulary: added to
            that word's log10 LM probability before ``alpha`` weighs it, as pyctcdecode does
            (``ctc_beam_search`` gets it times ln 10). Unused without a word n-gram LM.
        blank: the blank label's id; None: the tokenizer's pad token (transformers' CTC models
            train with ``blank = pad_token_id``).
        frame_duration: seconds per frame, for :meth:`hypotheses`' word times (optional).
    """

    def __init__(self, tokenizer: Any, lm: Any = None, *, alpha: float = 0.5, beta: float = 1.5,
                 blank: int | None = None, frame_duration: float | None = None,
                 unk_score_offset: float = -10.0) -> None:
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.vocabulary = Vocabulary.from_tokenizer(self.tokenizer)
        if blank is None:
            blank = getattr(self.tokenizer, "pad_token_id", None)
            if blank is None:
                raise ValueError("blank is None and the tokenizer has no pad token: give blank= (the CTC blank's id)")
        self.blank = blank
        if isinstance(lm, (str, os.PathLike)):
            lm = NgramLM.from_arpa(os.fspath(lm))  # read once, not per call
        self.lm, self.alpha, self.beta, self.frame_duration = lm, alpha, beta, frame_duration
        self.unk_score_offset = validate.finite("unk_score_offset", unk_score_offset)

    def hypotheses(self, logits: Any, lengths: Any = None, *, beam_width: int | None = None,
                   beam_prune_logp: float | None = None, token_min_logp: float | None = None,
                   hotwords: Any = None, hotword_weight: float | None = None, alpha: float | None = None,
                   beta: float | None = None, unk_score_offset: float | None = None, n_best: int = 1,
                   **refused: Any) -> list[list[Any]]:
        """The search behind :meth:`batch_decode`: per utterance, its
        :class:`~beamsearch.speech.CTCHypothesis` list, best first. ``logits`` float ``[N, T, V]``
        (numpy or torch); ``lengths`` int ``[N]`` (None: each utterance ends before its trailing
        frames that are all -100, transformers' padding)."""
        check_refused(refused)
        unk = self.unk_score_offset if unk_score_offset is None else validate.finite(
            "unk_score_offset", unk_score_offset)
        logits = logits if hasattr(logits, "shape") else np.asarray(logits)
        if len(logits.shape) != 3:
            raise ValueError(f"logits must be [N, T, V]; got shape {tuple(logits.shape)}")
        beam = 100 if beam_width is None else beam_width
        prune = -10.0 if beam_prune_logp is None else beam_prune_logp
        min_logp = -5.0 if token_min_logp is None else token_min_logp
        if isinstance(prune, bool) or not isinstance(prune, numbers.Real) or math.isnan(prune) or prune > 0:
            raise ValueError(f"beam_prune_logp must be a log-probability difference (<= 0); got {prune!r}")
        return ctc_beam_search(
            logits, padding_lengths(logits) if lengths is None else lengths, blank=self.blank, beam_size=beam,
            n_best=min(n_best, beam) if isinstance(n_best, int) and isinstance(beam, int) else n_best,
            token_min_logp=None if min_logp == -math.inf else min_logp,
            beam_threshold=None if prune == -math.inf else -float(prune), vocabulary=self.vocabulary,
            frame_duration=self.frame_duration, hotwords=self.hotword_ids(hotwords),
            hotword_weight=10.0 if hotword_weight is None else hotword_weight, lm=self.lm,
            alpha=self.alpha if alpha is None else alpha, beta=self.beta if beta is None else beta,
            unk_score_offset=None if self.lm is None or isinstance(self.lm, TokenLM) else unk * math.log(10.0))

    def batch_decode(self, logits: Any, pool: Any = None, num_processes: Any = None, beam_width: int | None = None,
                     beam_prune_logp: float | None = None, token_min_logp: float | None = None,
                     hotwords: Any = None, hotword_weight: float | None = None, alpha: float | None = None,
                     beta: float | None = None, unk_score_offset: Any = None, lm_score_boundary: bool | None = None,
                     output_word_offsets: bool = False, n_best: int = 1, *, lengths: Any = None,
                     **refused: Any) -> Any:
        """``Wav2Vec2ProcessorWithLM.batch_decode``: ``logits`` float ``[N, T, V]``; returns a
        ``Wav2Vec2DecoderWithLMOutput`` whose ``text``, ``logit_score``, ``lm_score`` (and
        ``word_offsets`` when asked) hold one value per utterance (``n_best`` 1) or one list each.

        ``logit_score`` is the CTC log-probability of the text's labels (``acoustic_score``);
        ``lm_score`` is, as pyctcdecode's, the total score the results are ranked by (acoustic +
        LM + word bonus + hotwords); ``word_offsets`` ``{"word", "start_offset", "end_offset"}``
        in frames, the end exclusive. ``lengths`` (int ``[N]``, optional) gives the frame counts.
        pyctcdecode's arguments with no counterpart (:data:`REFUSED`) are refused saying why."""
        boundary(lm_score_boundary)
        hyps = self.hypotheses(logits, lengths, beam_width=beam_width, beam_prune_logp=beam_prune_logp,
                               token_min_logp=token_min_logp, hotwords=hotwords, hotword_weight=hotword_weight,
                               alpha=alpha, beta=beta, unk_score_offset=unk_score_offset, n_best=n_best,
                               pool=pool, num_processes=num_processes, **refused)
        fields = [decoder_fields(h, output_word_offsets) for h in hyps]
        pick = (lambda xs: xs[0] if xs else None) if n_best == 1 else (lambda xs: xs)  # noqa: E731
        return decoder_output([pick(f[0]) for f in fields], [pick(f[1]) for f in fields],
                              [pick(f[2]) for f in fields],
                              [pick(f[3]) for f in fields] if output_word_offsets else None)

    def decode(self, logits: Any, beam_width: int | None = None, beam_prune_logp: float | None = None,
               token_min_logp: float | None = None, hotwords: Any = None, hotword_weight: float | None = None,
               alpha: float | None = None, beta: float | None = None, unk_score_offset: Any = None,
               lm_score_boundary: bool | None = None, output_word_offsets: bool = False, n_best: int = 1,
               **refused: Any) -> Any:
        """``Wav2Vec2ProcessorWithLM.decode``: one utterance's ``logits`` float ``[T, V]``; the
        fields of :meth:`batch_decode` for it alone."""
        logits = logits if hasattr(logits, "shape") else np.asarray(logits)
        if len(logits.shape) != 2:
            raise ValueError(f"logits must be [T, V] (one utterance; batch_decode takes [N, T, V]); "
                             f"got shape {tuple(logits.shape)}")
        out = self.batch_decode(logits[None], beam_width=beam_width, beam_prune_logp=beam_prune_logp,
                                token_min_logp=token_min_logp, hotwords=hotwords, hotword_weight=hotword_weight,
                                alpha=alpha, beta=beta, unk_score_offset=unk_score_offset,
                                lm_score_boundary=lm_score_boundary, output_word_offsets=output_word_offsets,
                                n_best=n_best, **refused)
        offsets = None if out.word_offsets is None else out.word_offsets[0]
        return decoder_output(out.text[0], out.logit_score[0], out.lm_score[0], offsets)

    def hotword_ids(self, hotwords: Any) -> Any:
        """``hotwords`` with each text phrase as the tokenizer's ids (one list or one per utterance)."""
        if hotwords is None or isinstance(hotwords, (str, bytes)) or not hasattr(hotwords, "__len__"):
            return hotwords  # ctc_beam_search names the bad value
        return [self.phrase_ids(i, p) if isinstance(p, str) else
                ([self.phrase_ids(i, q, j) if isinstance(q, str) else q for j, q in enumerate(p)]
                 if hasattr(p, "__len__") else p) for i, p in enumerate(hotwords)]

    def phrase_ids(self, i: int, phrase: str, j: int | None = None) -> list[int]:
        """One text phrase tokenized; a phrase the tokenizer can only write with its unknown
        token is a ValueError."""
        ids = list(self.tokenizer(phrase, add_special_tokens=False)["input_ids"])
        unk = getattr(self.tokenizer, "unk_token_id", None)
        if unk is not None and unk in ids:
            name = f"hotwords[{i}]" + ("" if j is None else f"[{j}]")
            raise ValueError(f"{name} = {phrase!r} has characters the tokenizer writes as its unknown token")
        return ids


def check_refused(refused: dict[str, Any]) -> None:
    """Each pyctcdecode argument given a value that has no counterpart here is a ValueError saying why."""
    for name, value in refused.items():
        if name not in REFUSED:
            raise TypeError(f"unexpected keyword argument {name!r}")
        if value is not None:
            raise ValueError(f"{name}={value!r} is not supported: {REFUSED[name]}")


def boundary(value: Any) -> None:
    """``lm_score_boundary``: the LM always scores ``<s>`` and ``</s>`` (pyctcdecode's True)."""
    if value is not None and value is not True:
        raise ValueError(f"lm_score_boundary={value!r} is not supported: the LM always scores the sentence "
                         "from <s> and ends it with </s> (pyctcdecode's lm_score_boundary=True)")


def padding_lengths(logits: Any) -> np.ndarray:
    """int64 ``[N]``: each utterance's frames before its trailing frames that are all -100."""
    host = logits.detach().cpu().numpy() if isinstance(logits, torch.Tensor) else np.asarray(logits)
    pad = (host == PADDING).all(-1)  # --> [N, T]
    real = ~pad
    last = np.where(real.any(1), host.shape[1] - np.argmax(real[:, ::-1], 1), 0)
    return last.astype(np.int64)


def decoder_fields(hyps: list[Any], offsets: bool) -> tuple[list, list, list, list]:
    """One utterance's n-best as ``(texts, logit_scores, lm_scores, word_offsets)``."""
    words = [[{"word": w.text, "start_offset": w.start_frame, "end_offset": w.end_frame + 1} for w in h.words]
             for h in hyps] if offsets else []
    return [h.text for h in hyps], [h.acoustic_score for h in hyps], [h.score for h in hyps], words


def decoder_output(text: Any, logit_score: Any, lm_score: Any, word_offsets: Any) -> Any:
    """transformers' ``Wav2Vec2DecoderWithLMOutput`` holding these fields."""
    from transformers.models.wav2vec2_with_lm.processing_wav2vec2_with_lm import Wav2Vec2DecoderWithLMOutput

    return Wav2Vec2DecoderWithLMOutput(text=text, logit_score=logit_score, lm_score=lm_score,
                                       word_offsets=word_offsets)
