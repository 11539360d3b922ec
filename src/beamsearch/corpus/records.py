"""Corpus decoding's records: :func:`decode_records` decodes lines with a registered mode (refill
where the mode has a plan, fixed batches where not) and yields one JSON-ready record per line, in
the order lines finish; :func:`trace_line` draws one line's search."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from beamsearch.core import validate as check
from beamsearch.core.config import SearchConfig
from beamsearch.core.mode import Mode
from beamsearch.corpus.batches import ScorerFailure, batch_results
from beamsearch.corpus.grammar import with_constraints
from beamsearch.corpus.lines import Line
from beamsearch.corpus.models import CorpusModel, MediaModel, check_model
from beamsearch.corpus.options import LengthRule, line_max_steps, line_options, line_problem, search_keywords, texts_ids
from beamsearch.corpus.sidefile import line_name
from beamsearch.modes import registry
from beamsearch.refill import Decoded
from beamsearch.refill.stream import Stream, rows_within, stream_search

__all__ = ["NO_OUTPUT", "RECORD_KEYS", "CorpusSearch", "LineSearch", "RecordKeyWarning", "corpus_search",
           "decode_records", "record", "run_records", "trace_line"]


NO_OUTPUT = ("no output could be produced: every continuation has probability 0 under the model and the "
             "search's rules (the prefix, constraints, no-repeat n-grams, minimum length)")
"""The error of a line whose search ends with no output at all."""


def decode_records(model: CorpusModel, lines: Iterable[Line], *, mode: str = "beam", max_rows: int = 320,
                   max_tokens: int | None = None, skip: Callable[[int], bool] = lambda index: False,
                   **options: Any) -> Iterator[dict]:
    """Decode ``lines`` with a registered search mode; one record per line, in the order lines finish.

    Args:
        model: a :class:`CorpusModel`, or a model that decodes whole lines, whose ``line_search``
            takes the keywords (the speech model: :class:`beamsearch.corpus.speech_lines.SpeechLines`).
        lines: :class:`Line` values (read lazily, as there is room in the batch).
        mode: a registered mode (:mod:`beamsearch.modes.registry`): ``"beam"``
            (:func:`~beamsearch.beam_search_batch`), ``"greedy"`` (one row per line, what
            ``generate`` does for ``num_beams=1``; its ``alpha`` defaults to 0: the score is the
            logprob), ``"constrained"`` (``constraints``, or each line's own, and ``ordered``),
            ``"diverse"`` (``num_groups``, ``diversity_penalty``), ``"stochastic"`` (``k``,
            ``seed``: a record holds the ``k`` samples; line i of the stream gets the noise of
            ``stochastic_beam_search(all lines, seed=seed)``'s input i), ``"exact"``
            (:func:`~beamsearch.exact_search`: ``node_budget``, ``seed_beam``; the lines are
            decoded in fixed batches of ``max_rows // rows``, ``max_rows`` rows per model call;
            each record also has ``proven`` and ``expanded``). Modes with a plan decode with
            refill (:func:`beamsearch.refill.decode_stream`), the others in fixed batches.
        max_rows: the most rows (hypotheses) per model call, >= the rows of one line (the mode's:
            ``beam_size``, ``k``, ...).
        max_tokens: None, or the most decoder tokens the rows of one call may hold, padding
            included: lines join only when (rows in flight + theirs) x (the widest prompt +
            max_steps among them) fits (:func:`beamsearch.refill.decode_stream`); a line whose
            own rows need more gets an error record. Not for a mode without refill (exact).
        skip: lines whose index it accepts are not decoded and get no record (``--resume``).
        **options: the search's options by their library names: the fields of
            :class:`~beamsearch.core.config.DecodingConfig` that ``beamsearch decode`` offers
            (``beam_size``, ``n_best``, ``length_penalty``, ``alpha``, ``no_repeat_ngram_size``,
            ``min_new_tokens``, ``temperature``, ``top_k``, ``stop_sequences``,
            ``return_token_logprobs``, ``max_steps``) and the mode's own options (its options
            dataclass); one not given takes its default there (the mode's own default where it has
            one). The model gives the rest (eos, processors, the prompt). ``stop_sequences`` and
            ``constraints`` are target texts, each through ``model.tokens`` (a constraint that is
            a list of texts: one of them). ``max_steps``: the most tokens per output (default and
            upper bound: ``model.max_steps``), or a :class:`LengthRule` (or its text, ``A*len+B``):
            per line ``floor(a * source length + b)`` capped at ``model.max_steps`` (the source
            length is ``model.source_length(text)``; a line where it is < 1
            gets an error record); a line's own ``max_steps`` overrides both. An option of
            another mode, or one this mode does not take, is an error naming it.

    Yields:
        ``{"index", "input", "nbest": [{"text", "tokens", "logprob", "score", "finished"[,
        "token_logprobs"]}]}`` per decoded line (best first; ``tokens`` without the start token,
        the end token included iff ``finished``), or ``{"index", "input", "error"}`` for a line
        that cannot be decoded; a JSON line's other keys (:attr:`Line.extra`, an ``"id"``) come
        after ``input`` (see :func:`record`).

    Raises:
        ValueError / TypeError: a bad keyword (named, with its value), raised by the first
            ``next()``, before any model call.
    """
    run = corpus_search(model, mode=mode, max_rows=max_rows, max_tokens=max_tokens, **options)
    yield from run_records(model, lines, run, skip)


@dataclass(frozen=True)
class CorpusSearch:
    """A corpus run's search, built and checked once (:func:`corpus_search`) before any line is
    read, and passed down as it is (:func:`beamsearch.corpus.decode_corpus`, ``beamsearch decode``).

    Attributes:
        spec: the mode; options: the options as given by name (the side file's header reads them).
        search: the search's keywords (the model's eos and processors among them).
        max_steps: the run's ``max_steps`` (an int, or a :class:`LengthRule`); line_options: the
            options a line may give for itself, at the run's values.
        max_rows, max_tokens, rows, min_join: how lines join (rows: one line's).
        stream: refill's ``(mode, configuration, stream options)`` (:func:`beamsearch.refill.stream_search`);
            None for a mode decoded in fixed batches.
    """

    spec: Mode
    options: Mapping[str, Any]
    search: Mapping[str, Any]
    max_steps: Any
    line_options: Mapping[str, Any]
    max_rows: int
    max_tokens: int | None
    rows: int
    min_join: int
    stream: tuple[Mode, SearchConfig, dict[str, Any]] | None


class LineSearch(Protocol):
    """The search of a model that decodes whole lines itself, not by a step function (the speech
    model, whose searches run over an utterance's frames): a model with ``line_search(**keywords)
    -> LineSearch`` is decoded by it, and the corpus machinery writes, resumes and distributes its
    records as a :class:`CorpusModel`'s.

    Attributes:
        options: JSON values of what a record depends on (the side file's header: a resume with
            others is refused).
    """

    options: Mapping[str, Any]

    def records(self, lines: Iterable[Line]) -> Iterator[dict]:
        """One record per line (:func:`record`: ``index``, ``input``, the line's other keys, then
        its outputs or ``error``), in any order."""


def corpus_search(model: CorpusModel, *, mode: str = "beam", max_rows: int = 320, max_tokens: int | None = None,
                  **options: Any) -> CorpusSearch | LineSearch:
    """The search of :func:`decode_records` (same keywords), checked at once: a bad keyword is a
    ValueError / TypeError naming it, with its value; no line is read, no model call made. A model
    that decodes whole lines (its ``line_search``) gives its own :class:`LineSearch`."""
    if hasattr(model, "line_search"):
        return cast(LineSearch, model.line_search(mode=mode, max_rows=max_rows, max_tokens=max_tokens, **options))
    check_model(model)
    spec = registry.mode(mode)
    search = search_keywords(model, spec, options)
    max_steps = search.pop("length_rule", None) or search["max_steps"]
    own = {name: search.pop(name) for name in line_options(spec)}
    rows = spec.rows(search)  # the search checks it (a bad beam size is its error): 1 until then
    rows = rows if isinstance(rows, int) and not isinstance(rows, bool) and rows >= 1 else 1
    max_rows = check.at_least("max_rows", max_rows, 1)
    stream = None
    if spec.plan is None:
        if max_tokens is not None:
            raise ValueError(f"max_tokens does not apply to mode {spec.name!r} (it decodes in fixed batches of "
                             f"max_rows rows per call); got max_tokens={max_tokens!r}")
        spec.configure(search)  # checks the keywords; no model call
        if max_rows < rows:
            raise ValueError(f"max_rows={max_rows} is smaller than the rows of one line ({rows}); raise max_rows")
        min_join = max(1, max_rows // rows)
    else:
        if max_tokens is not None:
            max_tokens = check.at_least("max_tokens", max_tokens, 1)
        stream = stream_search(spec.name, dict(search))
        rows = rows_within(stream[0], stream[1], max_rows)
        min_join = _min_join(max_rows, rows) if model.refill else max(1, max_rows // rows)
    return CorpusSearch(spec, dict(options), search, max_steps, own, max_rows, max_tokens, rows, min_join, stream)


def run_records(model: CorpusModel, lines: Iterable[Line], run: CorpusSearch | LineSearch,
                skip: Callable[[int], bool] = lambda index: False) -> Iterator[dict]:
    """:func:`decode_records` of a search already built (:func:`corpus_search`)."""
    if not isinstance(run, CorpusSearch):
        yield from run.records(line for line in lines if not skip(line.index))
        return
    spec, search = run.spec, run.search
    feed = _Feed(model, spec, search["max_steps"], run.max_steps, dict(run.line_options))
    token_logprobs = bool(search.get("return_token_logprobs", False))
    reported = spec.report is not None  # a mode whose records carry its report (exact: proven, expanded)
    judged = max(1, run.max_rows // run.rows) if model.verdicts is not None else 1  # finished lines judged together
    results = _results(model, run, feed.items(lines, skip))
    no_output = with_constraints(NO_OUTPUT, run.options)
    finished: list[Decoded] = []
    for result in results:
        yield from feed.early
        feed.early.clear()
        finished.append(result)
        if len(finished) == judged:
            yield from _records(model, finished, feed.take(finished), token_logprobs, reported, no_output)
            finished = []
    yield from _records(model, finished, feed.take(finished), token_logprobs, reported, no_output)
    yield from feed.early


class _Feed:
    """The lines of one :func:`decode_records` call as stream items: a readable line's fields
    (its prompt, source, own ``max_steps``, prefix and options), its index and text kept by stream
    position until its record is made (:meth:`take`); a line refused before the stream gets its
    error record in :attr:`early`."""

    def __init__(self, model: CorpusModel, spec: Mode, steps: int, max_steps: int | LengthRule,
                 line_options: dict[str, Any]) -> None:
        self.model, self.spec, self.steps, self.max_steps = model, spec, steps, max_steps
        self.line_options = line_options  # for lines without their own
        self.lines: dict[int, Line] = {}  # stream position -> line, for inputs in flight
        self.limits: dict[int, int] = {}  # stream position -> the line's max_steps
        self.early: list[dict] = []  # error records of lines refused before the stream

    def item(self, line: Line) -> dict | str:
        """The stream item of ``line``, or why it cannot be decoded."""
        model = self.model
        files = None if line.error is not None or line.media is None else _files(model, line)
        if isinstance(files, str):
            return files
        error = line.error or (model.problem(line.text) if files is None else None) or \
            line_problem(model, line, model.max_steps, self.spec)
        if error is not None:
            return error
        steps = line_max_steps(model, line, self.max_steps)
        if isinstance(steps, str):
            return steps
        fields: dict[str, Any] = dict(files) if files is not None else \
            {"prompt": model.prompt(line.text), "source": line.text}
        if steps != self.steps:
            fields["max_steps"] = steps
        if line.prefix is not None:
            fields["prefix"] = model.tokens(line.prefix)
        for name, every_line in self.line_options.items():
            own = line.own(name)
            fields[name] = every_line if own is None else texts_ids(model, own, name)
        return fields

    def items(self, lines: Iterable[Line], skip: Callable[[int], bool]) -> Iterator[dict]:
        """The stream items of ``lines`` but those ``skip`` accepts, lazily."""
        position = 0
        for line in lines:
            if skip(line.index):
                continue
            try:
                fields = self.item(line)
            except Exception as e:  # the model's own checks (problem, tokens, prompt) raised: this line alone fails
                fields = f"the model cannot read this line: {type(e).__name__}: {e}"
            if isinstance(fields, str):
                self.early.append(record(line, {"error": fields}))
                continue
            self.lines[position] = line
            self.limits[position] = fields.get("max_steps", self.steps)
            position += 1
            yield fields

    def take(self, results: list[Decoded]) -> list[tuple[Line, int]]:
        """The line and max_steps of each of ``results``, no longer kept."""
        return [(self.lines.pop(r.index), self.limits.pop(r.index)) for r in results]


def _files(model: CorpusModel, line: Line) -> dict | str:
    """The stream fields of a line naming files (``model.media_item``: its prompt and inputs), or
    why it cannot be decoded: a kind of file the model does not read, a file it cannot read."""
    kinds = getattr(model, "media", ())
    for kind, _ in line.media or ():
        if kind not in kinds:
            return f"the model reads no {kind} files" + (f" (it reads {' and '.join(kinds)} files)" if kinds else "")
    media_model = cast(MediaModel, model)  # a model that reads each kind the line names has media_item
    return media_model.media_item(line.text, dict(line.media or ()))


def _results(model: CorpusModel, run: CorpusSearch, items: Iterator[dict]) -> Iterable[Decoded]:
    """The decoded ``items``: with refill (:class:`beamsearch.refill.Stream`) for a mode with a
    plan, else in fixed batches of its batch runner. A model without refill (its states cannot be
    joined) decodes in fixed batches too: inputs join only when nothing is in flight."""
    if run.stream is None:
        return batch_results(model, run.spec, items, dict(run.search), run.min_join, run.max_rows)
    kind, config, stream = run.stream
    return Stream(model.step, model.make_state, items, run.max_rows, run.min_join, kind, config, stream,
                  run.max_tokens)


def _records(model: CorpusModel, results: list[Decoded], lines: list[tuple[Line, int]], token_logprobs: bool,
             reported: bool, no_output: str = NO_OUTPUT) -> list[dict]:
    """The records of ``results``, ``lines`` their (line, max_steps); a decoded line that the
    model's ``verdicts`` gives a reason gets an error record with it, one with no output
    ``no_output``."""
    decoded = [i for i, r in enumerate(results) if r.error is None and r.hypotheses]
    reasons = {}
    if model.verdicts is not None and decoded:
        steps = [[lines[i][1] for i in decoded]] if _takes_max_steps(model.verdicts) else []  # (an older hook: two)
        reasons = dict(zip(decoded, model.verdicts([lines[i][0].text for i in decoded],
                                                   [results[i].hypotheses for i in decoded], *steps), strict=True))
    records = []
    for i, ((line, _), result) in enumerate(zip(lines, results, strict=True)):
        error = str(result.error) if result.error is not None else reasons.get(i)
        if isinstance(result.error, ScorerFailure):
            error = result.error.on(line_name(line.index))
        if error is None and not result.hypotheses:
            error = no_output
        if error is not None:
            records.append(record(line, {"error": error}))
            continue
        records.append(record(line, {"nbest": [_output(model, h, token_logprobs) for h in result.hypotheses],
                                     **(result.info if reported else {})}))
    return records


RECORD_KEYS = ("index", "input", "nbest", "error")
"""The fields of every record (a mode's report adds its own: exact's ``proven``, ...)."""


class RecordKeyWarning(UserWarning):
    """A JSON line has a key that its record writes itself (:data:`RECORD_KEYS`, a mode's report):
    the record's own value is written, the line's is not copied."""


def record(line: Line, body: dict) -> dict:
    """The record of ``line``: its ``index`` and ``input``, the JSON line's other keys
    (:attr:`Line.extra`, in their order) but those the record writes itself (a
    :class:`RecordKeyWarning` names them), then ``body`` (``nbest`` and a mode's report, or
    ``error``)."""
    extra = line.extra or {}
    clash = [key for key in extra if key in RECORD_KEYS or key in body]
    if clash:
        warnings.warn(f"input JSON keys that are fields of the output records are not copied, the records' own "
                      f"values are written: {', '.join(map(repr, clash))} (rename such keys to keep them)",
                      RecordKeyWarning, stacklevel=2)
    return {"index": line.index, "input": line.text, **{k: v for k, v in extra.items() if k not in clash}, **body}


def _output(model: CorpusModel, h: Any, token_logprobs: bool) -> dict:
    out = {"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob, "score": h.score,
           "finished": h.finished}
    if token_logprobs:
        out["token_logprobs"] = h.token_logprobs
    return out


def _min_join(max_rows: int, rows: int) -> int:
    """Inputs that join together: new inputs wait until half the budget is free. Every cohort
    costs its own scoring and selection per step, and rows that join together share a length (a
    causal LM's cache is padded to its oldest row), so joining in larger waves is cheaper per
    input (one thread, bench_corpus.py's models, refill over fixed batches: GPT-2 via hf: 0.72x
    joining an eighth at a time, 0.83x half; the dates models about the same either way,
    1.01-1.07x)."""
    return max(1, max_rows // rows // 2)


def trace_line(model: CorpusModel, text: str, *, max_steps: int | None = None, trace_width: int = 1,
               **options: Any) -> tuple[Any, Any]:
    """The search tree of one line, as :func:`decode_records` searches it in mode ``beam``:
    ``(trace, greedy)``, the beam search's :class:`~beamsearch.Trace` and greedy's (one live row,
    the same processors) for the overlay of :func:`beamsearch.viz.to_html`. ``options``: as for
    :func:`decode_records` (mode beam's). ValueError if the model cannot read ``text``."""
    from beamsearch import Trace, beam_search_batch

    problem = model.problem(text)
    if problem is not None:
        raise ValueError(f"cannot read {text[:40]!r}: {problem}")
    search = search_keywords(model, registry.mode("beam"), {**options, "max_steps": max_steps})
    search.pop("length_rule", None)
    beam, n_best = search.pop("beam_size"), search.pop("n_best")
    trees = []
    for width in (beam, 1):
        tree = Trace()
        beam_search_batch(model.step, model.make_state([{"source": text}]), [model.prompt(text)],
                          beam_size=width, n_best=min(n_best, width), trace=tree, trace_width=trace_width, **search)
        trees.append(tree)
    return trees[0], trees[1]


def _takes_max_steps(verdicts: Callable[..., Any]) -> bool:
    """Whether a ``verdicts`` hook takes the third argument, ``max_steps`` (one written for
    ``verdicts(texts, hypotheses)`` is called so)."""
    try:
        params = inspect.signature(verdicts).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: as documented
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params)
