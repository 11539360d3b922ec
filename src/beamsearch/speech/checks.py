"""Argument checks of the CTC decoder: clear errors naming the parameter and the value."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import backend_of
from beamsearch.core import validate
from beamsearch.speech.vocabulary import Vocabulary


@dataclass(frozen=True)
class CTCOptions:
    """The validated keywords of :func:`beamsearch.speech.ctc_beam_search`."""

    blank: int
    beam_size: int
    n_best: int
    token_min_logp: float | None
    token_top_k: int | None
    beam_threshold: float | None
    blank_skip_threshold: float | None
    vocabulary: Vocabulary | None
    frame_duration: float | None


def emissions_shape(emissions: Any) -> tuple[Any, tuple[int, int, int]]:
    """``emissions`` as an array of its library (a list becomes numpy) and its ``(N, T, V)``."""
    if not hasattr(emissions, "shape"):
        try:
            emissions = np.asarray(emissions)
        except (ValueError, TypeError):
            raise TypeError(f"emissions must be an array [N, T, V]; got {emissions!r:.80}") from None
    if not backend_of(emissions).numeric(emissions):
        raise TypeError(f"emissions must hold real numbers; got dtype {emissions.dtype}")
    shape = tuple(int(s) for s in emissions.shape)
    if len(shape) != 3:
        raise ValueError(f"emissions must be 3-D [N, T, V]; got shape {shape}")
    if shape[2] < 1:
        raise ValueError(f"emissions must have at least one label (V >= 1); got shape {shape}")
    return emissions, shape


def lengths_of(lengths: Any, n: int, frames: int) -> np.ndarray:
    """int64 ``[N]``: every utterance's number of frames, each in ``[0, T]`` (None: all ``T``)."""
    if lengths is None:
        return np.full(n, frames, dtype=np.int64)
    host = backend_of(lengths).to_numpy(lengths) if hasattr(lengths, "shape") else np.asarray(lengths)
    if host.dtype.kind not in "iu":
        raise TypeError(f"lengths must hold integers; got {lengths!r:.80} (dtype {host.dtype})")
    if host.shape != (n,):
        raise ValueError(f"lengths must have shape [N] = ({n},); got shape {tuple(host.shape)}")
    bad = np.flatnonzero((host < 0) | (host > frames))
    if bad.size:
        raise ValueError(f"lengths[{bad[0]}] must be in [0, T={frames}]; got {int(host[bad[0]])}")
    return host.astype(np.int64)


def optional_real(name: str, value: Any, check: Any) -> float | None:
    return None if value is None else check(name, value)


def log_threshold(name: str, value: Any) -> float:
    """A log-probability threshold: a real number <= 0 (-inf allowed), not NaN."""
    v = validate.finite(name, value) if value != -math.inf else -math.inf
    if v > 0:
        raise ValueError(f"{name} must be a log-probability (<= 0); got {value!r}")
    return v


def probability(name: str, value: Any) -> float:
    """A probability in [0, 1]."""
    v = validate.real(name, value)
    if v > 1:
        raise ValueError(f"{name} must be a probability in [0, 1]; got {value!r}")
    return v


def vocabulary_of(value: Any, vocab: int) -> Vocabulary | None:
    """None, a :class:`Vocabulary`, or a sequence of V token strings; its size must be V."""
    if value is None:
        return None
    voc = value if isinstance(value, Vocabulary) else Vocabulary(value)
    if len(voc) != vocab:
        raise ValueError(f"vocabulary must have one token per label (V={vocab}); got {len(voc)} tokens")
    return voc


def ctc_options(vocab: int, blank: Any, beam_size: Any, n_best: Any, token_min_logp: Any,
                token_top_k: Any, beam_threshold: Any, blank_skip_threshold: Any,
                vocabulary: Any, frame_duration: Any) -> CTCOptions:
    """Every keyword checked against the emissions' vocabulary size ``vocab`` (V)."""
    b = validate.integer("blank", blank)
    if not 0 <= b < vocab:
        raise ValueError(f"blank must be a label id in [0, V={vocab}); got {b}")
    beam, best = validate.search_sizes(beam_size, n_best)
    return CTCOptions(
        blank=b, beam_size=beam, n_best=best,
        token_min_logp=optional_real("token_min_logp", token_min_logp, log_threshold),
        token_top_k=None if token_top_k is None else validate.at_least("token_top_k", token_top_k, 1),
        beam_threshold=optional_real("beam_threshold", beam_threshold, validate.real),
        blank_skip_threshold=optional_real("blank_skip_threshold", blank_skip_threshold, probability),
        vocabulary=vocabulary_of(vocabulary, vocab),
        frame_duration=optional_real("frame_duration", frame_duration,
                                     lambda n, v: validate.real(n, v, positive=True, finite=True)),
    )
