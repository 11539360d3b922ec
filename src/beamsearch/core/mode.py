"""What a search mode declares about itself: :class:`Mode`, one value per mode, in its own module.

:mod:`beamsearch.modes.registry` lists them (one line each), and every layer that offers a choice
of modes reads that list: refill (:func:`beamsearch.refill.decode_stream`), corpus decoding
(:func:`beamsearch.corpus.decode_records`), the command line (``decode --mode``, its flags and
``--help``). A mode's own options are a dataclass whose fields carry a
:class:`~beamsearch.core.config.OptionInfo` (as :class:`~beamsearch.core.config.DecodingConfig`'s do),
so their flags and help come from the mode's module too.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.core.config import (
    REQUIRED_CONTROLS,
    SEARCH_SIZES,
    SHARED_CONTROLS,
    DecodingConfig,
    SearchConfig,
    options_of,
)

__all__ = ["Mode", "NoOptions"]


_REQUIRED = object()
"""The default of a keyword-only parameter that has none."""


@functools.cache
def _keyword_only(function: Callable[..., Any]) -> tuple[tuple[str, Any], ...]:
    """``(name, default)`` of each keyword-only parameter of ``function`` (``_REQUIRED``: none),
    read once per function (a signature costs more than the rest of a configuration)."""
    parameters = inspect.signature(function).parameters.values()
    return tuple((p.name, _REQUIRED if p.default is p.empty else p.default)
                 for p in parameters if p.kind is p.KEYWORD_ONLY)


@functools.cache
def _field_names(options: type) -> frozenset[str]:
    """The field names of an options dataclass."""
    return frozenset(f.name for f in dataclasses.fields(options))


@dataclass(frozen=True)
class NoOptions:
    """The options of a mode that has none beyond the shared controls."""


@dataclass(frozen=True)
class Mode:
    """One search mode, as the layers above the engine see it.

    Attributes:
        name: what ``mode=`` and ``--mode`` call it.
        summary: one line for ``--help`` and the docs.
        function: the public batch function (``function(step_fn, init_state, prompts, **keywords)``).
        options: the dataclass of the mode's own options (each field with an ``OptionInfo``).
        sizes: the fields of :data:`~beamsearch.core.config.SEARCH_SIZES` it takes (``beam_size``,
            ``n_best``, ...); every shared control not in ``refused`` it takes too.
        refused: shared control or size -> why the mode does not take it.
        rows: ``rows(keywords) -> int``: the most rows one input holds at a step, from the
            keywords it is given (its beam size).
        plan: ``plan(prompts, config, **batch) -> Plan``: the mode over a batch of ``prompts``
            with its configuration (a :class:`~beamsearch.core.config.SearchConfig` made by
            :meth:`configure`, with the batch's own ``max_steps``, ``prefix`` and per-input options
            replaced in it), built without checking the configuration again; ``batch``: what a
            batch gives that is no option (stochastic's ``positions``). Its public function and
            refill run it. None for a mode that runs only whole batches through ``function``
            (``batch``).
        batch: for a mode without a plan: ``batch(step_fn, init_state, prompts, max_rows,
            **keywords) -> results``, one fixed batch of at most ``max_rows`` rows per call.
        report: ``report(results, i) -> dict``: what input i's result reports beside its
            hypotheses (a mode without a plan; a plan reports through ``Plan.info``).
        per_input: option -> its value for an input that gives none, for the options an input
            may give for itself (in refill's input dicts, a corpus line's own field); the
            ``prefix`` is per input in every mode that takes it.
        cohort: refill: ``cohort(fields, positions, stream) -> keywords`` for a cohort of
            inputs (their dicts, their positions in the stream) and what ``start`` made of the
            stream's options; None: each ``per_input`` option as a list, one per input.
        start: refill: ``start(given) -> stream`` of the ``stream_only`` options given to the
            stream (stochastic: its one seed), before any input is read.
        stream_only: the options the stream consumes itself (not passed to each plan).
        defaults: a shared control's default in this mode where it differs (greedy: ``alpha`` 0).
        check: ``check(keywords) -> {name: value}``: the checks of the mode's sizes and own options
            that no prompt changes (:meth:`configure`), each error naming the keyword, and the
            values as checked (an int for a numpy integer, ...), which the configuration holds;
            ``keywords`` holds the function's defaults for those not given. A batch mode's
            function makes them too (what it returns, if not a mapping, is not used).
        check_input: ``check_input(config, inputs) -> ((name, ids), ...)``, the checks of the
            options each input gives for itself (constrained's ``constraints``, stochastic's
            ``seed``): ``config`` is the configuration with the inputs' own values in it,
            ``inputs`` their checked :class:`~beamsearch.controls.shared.Inputs`; returns the
            token ids those options name, for the ``[0, V)`` check. An input of a stream is
            checked alone this way, not by a plan of its own (None: the mode has no such option).
    """

    name: str
    summary: str
    function: Callable[..., Any]
    rows: Callable[[Mapping[str, Any]], int]
    options: type = NoOptions
    sizes: tuple[str, ...] = ()
    refused: Mapping[str, str] = field(default_factory=dict)
    plan: Callable[..., Any] | None = None
    batch: Callable[..., Any] | None = None
    report: Callable[[Any, int], dict[str, Any]] | None = None
    per_input: Mapping[str, Any] = field(default_factory=dict)
    cohort: Callable[[list[dict[str, Any]], np.ndarray, Mapping[str, Any]], dict[str, Any]] | None = None
    start: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    stream_only: frozenset[str] = frozenset()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Mapping[str, Any]], object] | None = None
    check_input: Callable[[SearchConfig, Any], tuple[tuple[str, Any], ...]] | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sizes) - set(SEARCH_SIZES))
        if unknown:
            raise ValueError(f"mode {self.name!r}: sizes must be among {SEARCH_SIZES}; got {unknown}")
        if (self.plan is None) == (self.batch is None):
            raise ValueError(f"mode {self.name!r} needs a plan or a batch runner (one of them)")

    @property
    def own(self) -> dict[str, Any]:
        """The mode's own options: name -> (default, OptionInfo)."""
        return options_of(self.options)

    def takes(self, name: str) -> bool:
        """Whether a shared control, size or own option applies to this mode."""
        if name in self.refused:
            return False
        return name in SHARED_CONTROLS or name in self.sizes or name in self.own

    @property
    def input_keys(self) -> frozenset[str]:
        """The keys an input of a stream may carry for this mode (besides ``prompt``,
        ``max_steps`` and ``source``)."""
        keys = set(self.per_input)
        if self.takes("prefix"):
            keys.add("prefix")
        return frozenset(keys)

    def configure(self, keywords: Mapping[str, Any]) -> SearchConfig:
        """The configuration of this mode for ``keywords`` (its function's keywords but the model,
        the state, the prompts and the callback/trace ones), checked once, before any prompt: the
        mode's sizes and own options (``check``), the names (one the mode refuses, or unknown, is
        a TypeError naming the mode's function and the keyword; ``eos_token_id`` and
        ``max_steps`` are required) and the shared controls
        (:func:`beamsearch.core.plan.check_controls`)."""
        from beamsearch.core.plan import check_controls, pad_id

        keyword_only = _keyword_only(self.function)
        missing = [name for name, default in keyword_only
                   if default is _REQUIRED and name not in keywords and name not in SHARED_CONTROLS
                   and name not in self.per_input]  # a per-input option: given with each batch
        if missing:  # as Python says it of the function
            raise TypeError(f"{self.function.__name__}() missing 1 required keyword-only argument: {missing[0]!r}")
        defaults = {name: default if default is not _REQUIRED else self.per_input.get(name)
                    for name, default in keyword_only}
        normal = self.check({**defaults, **keywords}) if self.check is not None else None
        values = {**defaults, **keywords, **(normal if isinstance(normal, Mapping) else {})}
        if "pad_token_id" in self.sizes:
            values["pad_token_id"] = pad_id(values.get("pad_token_id"))
        own_names = _field_names(self.options)
        shared = {k: v for k, v in keywords.items() if k not in own_names and k not in self.sizes}
        check.keywords(self.function.__name__, shared, SHARED_CONTROLS, REQUIRED_CONTROLS, dict(self.refused))
        fields = _field_names(DecodingConfig)
        controls = DecodingConfig(**{k: v for k, v in values.items() if k in fields})
        checked = check_controls(controls)
        options = self.options(**{k: v for k, v in values.items() if k in own_names})
        return SearchConfig(self.name, controls, options, frozenset(keywords), checked)

    def run(self, step_fn: Any, init_state: Any, prompts: Any, config: SearchConfig, *, callback: Any = None,
            trace: Any = None, trace_width: int = 3) -> Any:
        """The mode's search over ``prompts`` with a configuration already made (:meth:`configure`):
        its plan (``plan``), run over the batch (:func:`beamsearch.core.plan.run_plan`); what its
        public function returns for the same keywords. For a mode with a plan."""
        from beamsearch.core.plan import run_plan

        assert self.plan is not None, f"mode {self.name!r} runs whole batches through its function"
        return run_plan(step_fn, init_state, self.plan(prompts, config), callback=callback, trace=trace,
                        trace_width=trace_width)

    def default(self, name: str) -> Any:
        """The default of a shared control, size or own option ``name`` in this mode: its entry in
        ``defaults`` (greedy's ``alpha``), else the field's. The one place a mode's default is read."""
        if name in self.defaults:
            return self.defaults[name]
        return {**options_of(DecodingConfig), **self.own}[name][0]

    def option_defaults(self) -> dict[str, Any]:
        """The mode's own options at their defaults."""
        return {f.name: f.default for f in dataclasses.fields(self.options)}

    def cohort_keywords(self, fields: list[dict[str, Any]], positions: np.ndarray,
                        stream: Mapping[str, Any]) -> dict[str, Any]:
        """The per-input keywords of a cohort (see ``cohort``)."""
        if self.cohort is not None:
            return self.cohort(fields, positions, stream)
        return {name: [f.get(name, default) for f in fields] for name, default in self.per_input.items()}

    def start_stream(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """What ``start`` makes of the stream's own options (nothing without ``start``)."""
        return {} if self.start is None else self.start(given)
