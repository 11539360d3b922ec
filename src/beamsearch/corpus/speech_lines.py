"""The speech model (:mod:`beamsearch.zoo.speech`, loaded when asked for) over a corpus of audio
files (``beamsearch decode --model speech``), and the per-file transcription that ``beamsearch transcribe`` prints.

A file is read (:func:`beamsearch.speech.audio.read_audio`: mono, resampled to the model's rate),
cut into chunks of at most ``max_chunk_seconds`` at its quietest points, and each chunk decoded as
an utterance of its own; the file's text is the chunks' texts joined, its word times shifted by
each chunk's start, and its n-best list the ``n`` best joins of one hypothesis per chunk.

The speech searches run over an utterance's frames, not token by token over a decoder state: a
speech model is not a :class:`~beamsearch.corpus.CorpusModel` (no ``step`` for refill), but decodes
whole lines itself (:meth:`SpeechLines.line_search`); the corpus machinery writes, resumes and
distributes its records as it does a text model's.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import pathlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.corpus.lines import Line
from beamsearch.corpus.records import record
from beamsearch.speech.audio import SEARCH_SECONDS, AudioError, chunks, read_audio

__all__ = ["SpeechLines", "SpeechSearch", "as_record", "join", "join_chunks", "speech_lines", "speech_lm",
           "transcribe_audio", "transcribe_file"]

MAX_CHUNK_SECONDS = 20.0
"""Longer files are cut into chunks of at most this many seconds (``--max-chunk-seconds``)."""


def as_record(h: Any, offset: float) -> dict[str, Any]:
    """A chunk's hypothesis as a JSON-ready dict, its word times shifted by ``offset`` seconds."""
    words = [{"word": w.text, "start": None if w.start is None else round(w.start + offset, 3),
              "end": None if w.end is None else round(w.end + offset, 3),
              "confidence": None if w.confidence is None else round(float(w.confidence), 4)} for w in h.words or []]
    return {"text": h.text or "", "score": float(h.score), "acoustic_score": float(h.acoustic_score),
            "lm_score": float(h.lm_score), "word_score": float(h.word_score), "hotword_bonus": float(h.hotword_bonus),
            "labels": len(h.tokens), "words": words}


def join_chunks(per_chunk: Sequence[Sequence[dict[str, Any]]], n_best: int) -> list[dict[str, Any]]:
    """The ``n_best`` best joins of one hypothesis per chunk (each list best first), by the sum of
    their scores, best first: pairwise, keeping the ``n_best`` best sums of the chunks so far, which
    is exact since a join's score is the sum of its parts'."""
    best: list[dict[str, Any]] = list(per_chunk[0][:n_best])
    for hyps in per_chunk[1:]:
        pairs = heapq.nlargest(n_best, ((a["score"] + b["score"], i, j) for i, a in enumerate(best)
                                        for j, b in enumerate(hyps)))
        best = [join(best[i], hyps[j]) for _, i, j in pairs]
    return best


def join(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two consecutive chunks' hypotheses as one: texts joined by a space, scores summed."""
    sums = {k: a[k] + b[k] for k in ("score", "acoustic_score", "lm_score", "word_score", "hotword_bonus", "labels")}
    return {"text": " ".join(t for t in (a["text"], b["text"]) if t), **sums, "words": a["words"] + b["words"]}


def transcribe_audio(model: Any, audio: Sequence[np.ndarray], options: dict[str, Any],
                     max_seconds: float = MAX_CHUNK_SECONDS) -> list[list[dict[str, Any]]]:
    """The n-best records of several recordings (float32 ``[S_i]`` at ``model.sample_rate``), their
    chunks decoded together in one ``model.transcribe(chunks, **options)`` call."""
    rate = model.sample_rate
    pieces = [chunks(a, rate, max_seconds=max_seconds) for a in audio]
    results = iter(model.transcribe([c.audio for p in pieces for c in p], **options))
    return [join_chunks([[as_record(h, c.start_seconds(rate)) for h in next(results)] for c in p],
                        options.get("n_best", 1)) for p in pieces]


def transcribe_file(model: Any, path: str, options: dict[str, Any],
                    max_seconds: float = MAX_CHUNK_SECONDS) -> list[dict[str, Any]]:
    """One file's n-best records (see the module docstring). AudioError: the file cannot be used."""
    return transcribe_audio(model, [read_audio(path, model.sample_rate)], options, max_seconds)[0]


def speech_lm(lm: str | None) -> Any:
    """A word LM as ``transcribe`` takes it (an :class:`beamsearch.speech.NgramLM`): ``None`` the
    shipped 3-gram of the domain, ``"none"`` no LM (None), else an ARPA file's path.

    Raises:
        OSError: the file cannot be read; ValueError, UnicodeDecodeError: it is no ARPA file.
    """
    from beamsearch.speech import NgramLM
    from beamsearch.zoo.speech.evaluate import DOMAIN_LM

    if lm is not None and lm.lower() == "none":
        return None
    return NgramLM.from_arpa(str(DOMAIN_LM) if lm is None else lm)


class SpeechLines:
    """The speech model as a corpus model that decodes whole lines (``beamsearch decode --model
    speech``): each JSON line names its audio file, ``{"audio": PATH}`` (relative to the current
    directory); see :meth:`line_search` for the search and the records.

    Attributes:
        model: the :class:`beamsearch.zoo.speech.SpeechModel`.
        media: the kinds of files a line names (``"audio"``).
    """

    media = ("audio",)

    def __init__(self, model: Any) -> None:
        self.model = model

    def line_search(self, *, mode: str = "beam", max_rows: int = 320, max_tokens: int | None = None,
                    head: str = "ctc", beam_size: int | None = None, n_best: int = 1, lm: str | None = None,
                    alpha: float | None = None, beta: float | None = None, hotwords: Sequence[str] | None = None,
                    hotword_weight: float | None = None,
                    max_chunk_seconds: float = MAX_CHUNK_SECONDS) -> SpeechSearch:
        """The search of a corpus run, checked (a bad keyword is a ValueError / TypeError naming it).

        Args:
            mode: ``"beam"`` or ``"greedy"`` (``SpeechModel.transcribe``'s ``beam_size=None``: no
                LM, hotwords or n-best).
            max_rows: the most utterances (audio chunks) per model call: lines join a call while
                their chunks fit (a line of more chunks is decoded alone).
            max_tokens: not for speech (None).
            head, beam_size, n_best, alpha, beta, hotwords, hotword_weight: as
                ``SpeechModel.transcribe`` takes them (None: the model's default).
            lm: an ARPA file's path, ``"none"``, or None for the shipped domain 3-gram (beam only).
            max_chunk_seconds: longer files are cut into chunks of at most this many seconds.

        Records: ``{"index", "input", ...the line's other keys, "audio", "text", "nbest"}``, each
        n-best entry ``{"text", "score", "acoustic_score", "lm_score", "word_score",
        "hotword_bonus", "labels", "words": [{"word", "start", "end", "confidence"}]}`` (times in
        seconds), as ``beamsearch transcribe --json`` prints a file; or ``{"index", "input",
        "error"}`` for a line that names no audio or whose file cannot be transcribed.
        """
        if mode not in ("beam", "greedy"):
            raise ValueError(f"mode must be 'beam' or 'greedy' for the speech model; got {mode!r}")
        if max_tokens is not None:
            raise ValueError(f"max_tokens does not apply to the speech model; got max_tokens={max_tokens!r}")
        if head not in ("ctc", "tdt"):
            raise ValueError(f"head must be 'ctc' or 'tdt'; got {head!r}")
        max_rows, n_best = check.at_least("max_rows", max_rows, 1), check.at_least("n_best", n_best, 1)
        if beam_size is not None and n_best > check.at_least("beam_size", beam_size, 1):
            raise ValueError(f"n_best must be <= beam_size={beam_size}; got {n_best}")
        if not isinstance(max_chunk_seconds, (int, float)) or not max_chunk_seconds > SEARCH_SECONDS:
            raise ValueError(f"max_chunk_seconds must be > {SEARCH_SECONDS:g}; got {max_chunk_seconds!r}")
        keywords = {"head": head, "n_best": n_best, "beam_size": beam_size, "alpha": alpha, "beta": beta,
                    "hotwords": list(hotwords) if hotwords is not None else None, "hotword_weight": hotword_weight}
        options = {k: v for k, v in keywords.items() if v is not None}
        if mode == "greedy":
            given = [k for k, v in (*keywords.items(), ("lm", lm)) if k not in ("head", "n_best") and v is not None]
            if given or n_best != 1:
                raise ValueError(f"mode 'greedy' keeps one hypothesis, without LM or hotwords: it takes no "
                                 f"{(given or ['n_best > 1'])[0]}")
            options["beam_size"] = None
        else:
            options["lm"] = speech_lm(lm)
        header = {"mode": mode, **keywords, "lm": lm, "lm_sha256": _sha256(lm), "max_chunk_seconds": max_chunk_seconds}
        return SpeechSearch(self.model, options, max_rows, float(max_chunk_seconds), header)


def _sha256(lm: str | None) -> str | None:
    """The SHA-256 of an LM file's bytes (a resume with another LM under the same name is refused)."""
    if lm is None or lm.lower() == "none" or not os.path.isfile(lm):
        return None
    return hashlib.sha256(pathlib.Path(lm).read_bytes()).hexdigest()


class SpeechSearch:
    """A corpus run of the speech model (:meth:`SpeechLines.line_search`).

    Attributes:
        options: JSON values of what a record depends on (the side file's header; a resume with
            others is refused).
    """

    def __init__(self, model: Any, keywords: dict[str, Any], max_rows: int, max_seconds: float,
                 options: dict[str, Any]) -> None:
        self.model, self.keywords, self.max_rows, self.max_seconds = model, keywords, max_rows, max_seconds
        self.options = options

    def records(self, lines: Iterable[Line]) -> Iterator[dict]:
        """One record per line (see :meth:`SpeechLines.line_search`), batch by batch in input order."""
        batch: list[tuple[Line, str, np.ndarray]] = []
        rows = 0
        for line in lines:
            audio = self._audio(line)
            if isinstance(audio, str):
                yield record(line, {"error": audio})
                continue
            found = self.rows_of(audio[1])
            if batch and rows + found > self.max_rows:
                yield from self._decoded(batch)
                batch, rows = [], 0
            batch.append((line, *audio))
            rows += found
        if batch:
            yield from self._decoded(batch)

    def _audio(self, line: Line) -> tuple[str, np.ndarray] | str:
        """The line's audio path and samples, or why it cannot be transcribed."""
        if line.error is not None:
            return line.error
        media = dict(line.media or ())
        other = [kind for kind in media if kind != "audio"]
        if other or "audio" not in media:
            return (f"the speech model reads no {other[0]} files" if other else
                    "the line names no audio file: give it as {\"audio\": PATH} (JSON Lines)")
        if line.text:
            return f"the speech model reads no text beside the audio: leave it out; got {line.text!r:.60}"
        try:
            return media["audio"], read_audio(media["audio"], self.model.sample_rate)
        except AudioError as e:
            return str(e)

    def rows_of(self, audio: np.ndarray) -> int:
        """The rows one recording (float32 ``[S]``) takes of ``max_rows``: its chunks."""
        return len(chunks(audio, self.model.sample_rate, max_seconds=self.max_seconds))

    def decode_batch(self, audio: list[np.ndarray]) -> list[dict[str, Any]]:
        """Each recording's outputs, ``{"text", "nbest"}``, decoded together (a ValueError: the
        model refuses the batch)."""
        found = transcribe_audio(self.model, audio, self.keywords, self.max_seconds)
        return [{"text": nbest[0]["text"], "nbest": nbest} for nbest in found]

    def _decoded(self, batch: list[tuple[Line, str, np.ndarray]]) -> list[dict]:
        """The records of a batch decoded together; a batch the model refuses (ValueError) is
        decoded line by line, so that only the lines that fail alone get the error."""
        try:
            found = self.decode_batch([a for _, _, a in batch])
        except ValueError as e:
            if len(batch) == 1:
                return [record(batch[0][0], {"error": f"the model cannot transcribe it: {e}"})]
            return [r for item in batch for r in self._decoded([item])]
        return [record(line, {"audio": path, **out}) for (line, path, _), out in zip(batch, found, strict=True)]


def speech_lines(folder: str | os.PathLike | None = None) -> SpeechLines:
    """The speech model of ``folder`` (None: the shipped one) as :class:`SpeechLines`
    (:func:`beamsearch.zoo.speech.load` validates its files: ValueError)."""
    from beamsearch.zoo import speech

    return SpeechLines(speech.load(folder))
