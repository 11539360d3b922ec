"""Corpus decoding in fixed batches (a mode without refill: exact, step), and what fails one batch:
an input the model refuses, or a scorer that fails (step search), is the error of the lines that
fail when decoded alone, never the end of the run."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from beamsearch.core.mode import Mode
from beamsearch.corpus.models import CorpusModel
from beamsearch.refill import Decoded, per_input

__all__ = ["ScorerFailure", "batch_results", "named_scorer"]


class ScorerFailure(Exception):
    """A search's scorer failed: it raised, or its answer was refused (NaN, the wrong length, not
    reals, an aggregation without a value) before the next model call.

    Attributes:
        scorer: how the scorer was given (``'my_verifier:score'``, a function's name).
        problem: the exception, as ``RuntimeError: verifier down``.
    """

    def __init__(self, scorer: str, problem: str) -> None:
        super().__init__(f"the scorer {scorer} failed: {problem}")
        self.scorer, self.problem = scorer, problem

    def on(self, line: str) -> str:
        """The error of ``line`` (how messages name it: ``line 4 (index 3)``)."""
        return f"the scorer {self.scorer} failed on {line}: {self.problem}"


def named_scorer(value: Any) -> Callable[..., Any]:
    """The scorer a search option names: ``value`` itself, or the function of a
    ``"module:function"`` text (the search has checked that it imports)."""
    if not isinstance(value, str):
        return value
    module, _, name = value.partition(":")
    return getattr(importlib.import_module(module), name)


class _Blame:
    """``step`` and ``scorer`` for one search, noting which of the two ran last: a search that
    raises after its scorer answered, and before the next model call, failed on the scorer's answer
    (the search checks and aggregates it there)."""

    def __init__(self, step: Callable[..., Any], scorer: Any) -> None:
        self._step, self._scorer, self.name = step, named_scorer(scorer), scorer
        self.scorer_last = False

    def step(self, state: Any, y_prev: Any) -> tuple[Any, Any]:
        self.scorer_last = False
        return self._step(state, y_prev)

    def scorer(self, prompts: list[list[int]], partials: list[list[int]]) -> Any:
        self.scorer_last = True
        return self._scorer(prompts, partials)

    def failure(self, error: Exception) -> ScorerFailure | None:
        """``error`` as a :class:`ScorerFailure` when the scorer (or its answer) caused it, else None."""
        if not self.scorer_last:
            return None
        name = self.name if isinstance(self.name, str) else getattr(self.name, "__name__", type(self.name).__name__)
        return ScorerFailure(repr(name), f"{type(error).__name__}: {error}")


def batch_results(model: CorpusModel, spec: Mode, items: Iterable[dict], search: dict[str, Any], lines: int,
                  rows: int) -> Iterator[Decoded]:
    """A mode without refill (exact, step): its batch runner over ``lines`` items at a time (their
    stream positions counted from 0), ``rows`` rows per model call, each input's ``info`` its
    report. A batch that raises a ``ValueError`` / ``TypeError`` (an input's token id outside the
    model's vocabulary, found at its first call), or whose scorer fails (any exception from the
    scorer, or a refusal of its answer: a :class:`ScorerFailure`), is decoded again one item at a
    time, so only the items that fail alone get the error. When every one of them fails alone with
    an error of the model (no scorer failure), that error is the model's, not theirs, and is
    raised."""

    batch_fn = spec.batch
    assert batch_fn is not None, "a mode without a plan has a batch runner (Mode checks it)"

    def run(batch: list[dict]) -> tuple[Any, Exception | None]:
        blame = _Blame(model.step, search["scorer"]) if "scorer" in search else None
        keywords = per_input(search, batch)
        step = model.step
        if blame is not None:
            keywords["scorer"], step = blame.scorer, blame.step
        try:
            return batch_fn(step, model.make_state(batch), [i["prompt"] for i in batch], rows, **keywords), None
        except Exception as error:
            failure = blame.failure(error) if blame is not None else None
            if failure is None and not isinstance(error, (ValueError, TypeError)):
                raise
            return None, failure or error

    def decoded(batch: list[dict], start: int) -> Iterator[Decoded]:
        found, error = run(batch)
        if error is not None and len(batch) == 1:
            yield Decoded(start, [], error)
        elif error is not None:
            alone = [d for j, item in enumerate(batch) for d in decoded([item], start + j)]
            model_errors = [d for d in alone if d.error is not None and not isinstance(d.error, ScorerFailure)]
            if not isinstance(error, ScorerFailure) and len(model_errors) == len(alone):
                raise error
            yield from alone
        else:
            for j, hyps in enumerate(found):
                yield Decoded(start + j, hyps, None, spec.report(found, j) if spec.report is not None else {})

    batch: list[dict] = []
    position = 0
    for item in items:
        batch.append(item)
        if len(batch) == lines:
            yield from decoded(batch, position)
            position, batch = position + len(batch), []
    if batch:
        yield from decoded(batch, position)
