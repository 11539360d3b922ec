"""transformers' Parakeet transducers (``ParakeetForRNNT``, ``ParakeetForTDT``; ``Nemotron3_5AsrForRNNT``
has the same decoder and joint) as the functions of
:mod:`beamsearch.speech.transducer` (docs/transducer.md).

The encoder's projected frames (``get_audio_features(...).pooler_output``, ``[N, T, H]``) are the
encoder output; the prediction network is the model's LSTM decoder run one label at a time with
its ``(h, c)`` carried rows first (``[K, layers, H]``); the joint is the model's joint network.
The first predictor call is on the blank from a zero state, as the model's own greedy decoding.
The LSTM step is :func:`lstm_step`: the first layer's input gates are looked up per label.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from beamsearch.speech.transducer import TransducerHypothesis, transducer_beam_search, transducer_greedy


@dataclass(frozen=True)
class TransducerFunctions:
    """A transducer as functions: ``encoder_out`` ``[N, T, H]``, ``lengths`` ``[N]``, the
    predictor, the joint, the blank, the durations (None for RNN-T) and the predictor's start
    state (``(h, c)``, each ``[N, layers, H]`` of zeros)."""

    encoder_out: Any
    lengths: Any
    predictor: Any
    joint: Any
    blank: int
    durations: list[int] | None
    state: Any

    def options(self) -> dict:
        """The keyword arguments of :func:`~beamsearch.speech.transducer_beam_search` they fill."""
        return dict(encoder_out=self.encoder_out, lengths=self.lengths, predictor=self.predictor,
                    joint=self.joint, blank=self.blank, durations=self.durations, state=self.state)


def is_transducer(model: Any) -> bool:
    """Whether ``model`` has the parts this module wraps (an LSTM decoder with an embedding and
    a projector, a joint network, an encoder projector)."""
    dec = getattr(model, "decoder", None)
    return all(hasattr(dec, a) for a in ("embedding", "lstm", "decoder_projector")) and hasattr(model, "joint") \
        and hasattr(model, "get_audio_features") and hasattr(getattr(model, "config", None), "blank_token_id")


@torch.no_grad()
def transducer_functions(model: Any, input_features: Any, attention_mask: Any = None,
                         **audio_kwargs: Any) -> TransducerFunctions:
    """Wrap a Parakeet RNN-T or TDT model (or ``Nemotron3_5AsrForRNNT``, whose decoder and joint
    have the same shape) and encode ``input_features`` ``[N, frames, mels]``; ``audio_kwargs``
    go to the model's ``get_audio_features`` (e.g. Nemotron's ``prompt_ids``)."""
    if not is_transducer(model):
        raise TypeError(f"model must be a transformers transducer such as ParakeetForRNNT or ParakeetForTDT; "
                        f"got {type(model).__name__}")
    out = model.get_audio_features(input_features=input_features, attention_mask=attention_mask,
                                   output_attention_mask=True, **audio_kwargs)
    enc = out.pooler_output
    n, frames = int(enc.shape[0]), int(enc.shape[1])
    mask = getattr(out, "attention_mask", None)
    lengths = torch.full((n,), frames, dtype=torch.long) if mask is None else mask.sum(-1).long().cpu()
    dec, cfg = model.decoder, model.config
    layers, hidden = dec.lstm.num_layers, dec.lstm.hidden_size
    zeros = enc.new_zeros((n, layers, hidden))

    step = lstm_step(dec.embedding, dec.lstm)

    @torch.no_grad()
    def predictor(state: Any, y: Any) -> tuple[Any, Any]:
        out, h, c = step(y, *state)
        return dec.decoder_projector(out), (h, c)

    @torch.no_grad()
    def joint(enc_frames: Any, pred_out: Any) -> Any:
        return model.joint(decoder_hidden_states=pred_out, encoder_hidden_states=enc_frames)

    durations = getattr(cfg, "durations", None)
    return TransducerFunctions(enc, lengths, predictor, joint, int(cfg.blank_token_id),
                               None if durations is None else [int(d) for d in durations], (zeros, zeros.clone()))


def lstm_step(embedding: Any, lstm: Any) -> Any:
    """One step of ``lstm`` (a ``torch.nn.LSTM``) on embedded labels, as a function
    ``(y [K], h [K, layers, H], c [K, layers, H]) -> (out [K, H], h', c')`` (rows first).

    The first layer's input gates, ``W_ih0 embedding(y) + b_ih0 + b_hh0``, depend on the label
    alone: they are computed once per label id, when it is first seen, and looked up after, so
    a step costs one matrix product per layer on the hidden state (and, above the first layer,
    one on the layer below's output) instead of two; the same function as ``lstm`` up to float
    rounding (tests/hf/test_transducer.py). The looked-up gates are those of the weights when a
    label is first seen: rewrap the model after changing its weights. An LSTM with projections,
    two directions, no biases, or dropout in training mode is run as ``lstm`` itself."""
    if lstm.bidirectional or lstm.proj_size or not lstm.bias or (lstm.training and lstm.dropout > 0):
        return partial(lstm_call, embedding, lstm)
    weight = lstm.weight_ih_l0
    table = weight.new_zeros((embedding.num_embeddings, weight.shape[0]))
    known = torch.zeros(embedding.num_embeddings, dtype=torch.bool, device=weight.device)

    def step(y: Any, h: Any, c: Any) -> tuple[Any, Any, Any]:
        new = y[~known[y]]
        if new.numel():
            ids = torch.unique(new)
            table[ids] = F.linear(embedding(ids), weight, lstm.bias_ih_l0) + lstm.bias_hh_l0
            known[ids] = True
        x, hs, cs = None, [], []
        for layer in range(lstm.num_layers):
            w_hh = getattr(lstm, f"weight_hh_l{layer}")
            if x is None:
                gates = torch.addmm(table[y], h[:, 0], w_hh.t())
            else:
                gates = F.linear(x, getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"bias_ih_l{layer}")) \
                    + F.linear(h[:, layer], w_hh, getattr(lstm, f"bias_hh_l{layer}"))
            i, f, g, o = gates.chunk(4, 1)  # torch's gate order
            cs.append(torch.sigmoid(f) * c[:, layer] + torch.sigmoid(i) * torch.tanh(g))
            x = torch.sigmoid(o) * torch.tanh(cs[-1])
            hs.append(x)
        return x, torch.stack(hs, 1), torch.stack(cs, 1)

    return step


def lstm_call(embedding: Any, lstm: Any, y: Any, h: Any, c: Any) -> tuple[Any, Any, Any]:
    """:func:`lstm_step`'s function by calling ``lstm`` on one time step."""
    out, (h2, c2) = lstm(embedding(y)[:, None, :], (h.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous()))
    return out[:, 0], h2.transpose(0, 1), c2.transpose(0, 1)


def transducer_generate(model: Any, input_features: Any, attention_mask: Any = None, *, num_beams: int = 1,
                        num_return_sequences: int = 1, method: str = "modified",
                        max_symbols_per_frame: int | None = None, audio_kwargs: dict | None = None,
                        **options: Any) -> list[list[TransducerHypothesis]]:
    """Decode with a transformers transducer: greedy with ``num_beams=1`` (the model's own rule:
    at most ``config.max_symbols_per_step`` labels per frame), else
    :func:`~beamsearch.speech.transducer_beam_search` with ``beam_size=num_beams`` and
    ``n_best=num_return_sequences`` (also with one beam when ``hotwords`` or ``lm`` are given);
    ``options`` are that function's other keywords (``vocabulary``, ``frame_duration``,
    ``hotwords``, ``lm``, ``alpha``, ``beta``, ...); ``audio_kwargs`` go to the model's
    ``get_audio_features``. Per utterance, a list of hypotheses."""
    fns = transducer_functions(model, input_features, attention_mask, **(audio_kwargs or {}))
    if num_beams == 1 and num_return_sequences == 1 and not options.get("hotwords") and options.get("lm") is None:
        m = max_symbols_per_frame if max_symbols_per_frame is not None else int(model.config.max_symbols_per_step)
        keep = {k: v for k, v in options.items() if k in ("vocabulary", "frame_duration")}
        return [[h] for h in transducer_greedy(**fns.options(), max_symbols_per_frame=m, **keep)]
    return transducer_beam_search(**fns.options(), beam_size=num_beams, n_best=num_return_sequences, method=method,
                                  max_symbols_per_frame=max_symbols_per_frame, **options)
