"""The stream: :func:`decode_stream` checks its arguments and returns a :class:`Stream`, which reads
and validates each input alone, makes each cohort's plan and first rows, and runs the loop
(:class:`~beamsearch.refill.flight.Flight`) one model call per step (the package's docstring,
:mod:`beamsearch.refill`, tells how)."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from typing import Any

import numpy as np

from beamsearch.controls.shared import checked_inputs
from beamsearch.core import model_checks
from beamsearch.core import validate as check
from beamsearch.core.config import SearchConfig
from beamsearch.core.engine import StepFn
from beamsearch.core.mode import Mode
from beamsearch.core.plan import Plan
from beamsearch.modes import registry
from beamsearch.refill.flight import Cohort, Flight
from beamsearch.refill.records import Decoded, Input, MakeState, StreamStats

__all__ = ["Stream", "decode_stream", "per_input", "refill_modes", "stream_search"]


def refill_modes() -> dict[str, Mode]:
    """The registered modes that run with refill (those with a plan), read from the registry
    when asked, so a mode registered later is one of them."""
    return {name: spec for name, spec in registry.MODES.items() if spec.plan is not None}
"""``mode`` name -> its :class:`~beamsearch.core.mode.Mode`: the registered modes that have a
plan (:mod:`beamsearch.modes.registry`; exact search runs only in whole batches)."""


class Stream(Iterator[Decoded]):
    """The iterator :func:`decode_stream` returns: :class:`Decoded` results as inputs stop.

    Attributes:
        stats: a :class:`StreamStats`, updated as the stream runs (rows per call, utilisation).
    """

    def __init__(self, step_fn: StepFn, make_state: MakeState, inputs: Iterable[Any], max_rows: int,
                 min_join: int, mode: Mode, config: SearchConfig, stream: dict[str, Any],
                 max_tokens: int | None = None) -> None:
        assert mode.plan is not None, f"mode {mode.name!r} has no plan: only refill_modes() run in a stream"
        self._step_fn, self._make_state, self._mode, self._plan_of = step_fn, make_state, mode, mode.plan
        self._max_tokens, self._search_config, self._stream = max_tokens, config, stream
        self._rows = rows_within(mode, config, max_rows)
        self._join_rows = min_join * self._rows  # the room a join waits for (over max_rows: none in flight)
        self.stats = StreamStats(max_rows, max_tokens=max_tokens)
        self._run = self._decode(iter(inputs))

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Decoded:
        return next(self._run)

    def close(self) -> None:
        """Stop decoding (nothing more is read from the inputs)."""
        self._run.close()

    def _config(self, fields: list[dict[str, Any]], index: np.ndarray) -> tuple[SearchConfig, dict[str, Any]]:
        """The configuration of inputs ``fields`` (at stream positions ``index``): the stream's,
        with each input's own ``max_steps``, ``prefix`` and the mode's per-input options
        (:meth:`~beamsearch.core.mode.Mode.cohort_keywords`: constrained's ``constraints``,
        stochastic's ``seed``); and what the batch gives that is no option (stochastic's
        ``positions``)."""
        values = per_input({"max_steps": self._search_config.controls.max_steps}, fields)
        values.update(self._mode.cohort_keywords(fields, index, self._stream))
        batch = {name: values.pop(name) for name in sorted(set(values) - self._search_config.names)}
        return self._search_config.replace(**values), batch

    def _plan(self, fields: list[dict[str, Any]], index: np.ndarray) -> Plan:
        """The plan of a cohort, inputs ``fields`` at stream positions ``index``."""
        config, batch = self._config(fields, index)
        return self._plan_of([f["prompt"] for f in fields], config, **batch)

    def _read(self, index: int, item: Any, vocab: int | None) -> Input | Decoded:
        """Validate one item alone (and its token ids, once V is known): an input, or an error.
        It is checked against the stream's configuration, not made a plan of its own: its prompt,
        ``max_steps`` and ``prefix`` (:func:`~beamsearch.controls.shared.checked_inputs`) and the
        mode's options it gives for itself (:attr:`~beamsearch.core.mode.Mode.check_input`)."""
        try:
            fields = _fields(item, self._mode.input_keys)
            config, _ = self._config([fields], np.array([index]))
            inputs = checked_inputs([fields["prompt"]], config.controls, config.checked)
            own = () if self._mode.check_input is None else self._mode.check_input(config, inputs)
            checks = inputs.vocab_checks + tuple(own)
            if vocab is not None:
                model_checks.token_ids_below(checks, vocab)
            width = self._width(len(inputs.prompts[0]), int(inputs.max_steps[0]))
        except (TypeError, ValueError) as error:
            return Decoded(index, [], error)
        return Input(index, fields, item, checks, width)

    def _width(self, prompt: int, steps: int) -> int:
        """The most positions one row of an input can hold, ``prompt`` + ``steps`` (its
        max_steps). Raises when its rows alone (rows x that) are over ``max_tokens``."""
        if self._max_tokens is not None and self._rows * (prompt + steps) > self._max_tokens:
            raise ValueError(f"the input needs {self._rows * (prompt + steps)} tokens ({self._rows} rows x (prompt "
                             f"{prompt} + max_steps {steps})), more than max_tokens={self._max_tokens}")
        return prompt + steps

    def _decode(self, inputs: Iterator[Any]) -> Generator[Decoded, None, None]:
        """The loop: each step, the inputs that fit join, then one model call for every row in
        flight (:class:`~beamsearch.refill.flight.Flight` holds its state and does its phases)."""
        flight = Flight(self.stats, self._rows, self._join_rows, self._max_tokens)
        while True:
            joining = yield from flight.admit(inputs, self._read)
            flight.join(joining, self._join)
            if not flight.cohorts:
                flight.end()
                return
            x, new_state = yield from flight.call(self._step_fn)
            yield from flight.retire(x, new_state)

    def _join(self, group: list[Input]) -> tuple[Cohort, Any]:
        """A cohort for the inputs ``group`` and their first rows, from ``make_state``."""
        plan = self._plan([i.fields for i in group], np.array([i.index for i in group]))
        init = self._make_state([i.item for i in group])
        model_checks.state_rows(init, len(group), "make_state(items)")
        self.stats.cohorts += 1
        return Cohort(group, plan), init


def rows_within(mode: Mode, config: SearchConfig, max_rows: int) -> int:
    """The rows one input of ``config`` may need (its beam size); a ValueError when over ``max_rows``."""
    rows = mode.rows(config.keywords())
    if rows > max_rows:
        raise ValueError(f"max_rows={max_rows} is smaller than the rows one input may need "
                         f"({rows}, its beam size); raise max_rows or lower the beam")
    return rows


def per_input(search: dict[str, Any], fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch function's keywords for inputs ``fields``: ``search`` with each input's own
    ``max_steps`` (``search["max_steps"]`` where it gives none) and, where any gives one, each
    input's ``prefix`` (none: ``[]``)."""
    kwargs = dict(search, max_steps=[f.get("max_steps", search["max_steps"]) for f in fields])
    if any("prefix" in f for f in fields):
        kwargs["prefix"] = [f.get("prefix", []) for f in fields]
    return kwargs


_COMMON = frozenset({"prompt", "max_steps", "source"})
"""The keys every input dict may have; ``source`` is anything, for ``make_state`` only."""


def _fields(item: Any, keys: frozenset[str]) -> dict[str, Any]:
    """An item's fields: a prompt (a sequence of token ids), or a dict with ``prompt`` and the
    per-input keys ``max_steps``, ``source`` and ``keys``."""
    if isinstance(item, dict):
        unknown = sorted(set(item) - _COMMON - keys)
        if unknown:
            allowed = ", ".join(sorted(_COMMON | keys))
            raise ValueError(f"input has the key {unknown[0]!r}; an input dict takes {allowed}")
        if "prompt" not in item:
            raise ValueError(f"input dict needs a 'prompt' (token ids); got the keys {sorted(item)}")
        return dict(item)
    return {"prompt": item}


def decode_stream(step_fn: StepFn, make_state: MakeState, inputs: Iterable[Any], *, max_rows: int,
                  max_tokens: int | None = None, min_join: int = 1, mode: str = "beam", **search: Any) -> Stream:
    """Decode a stream of inputs with refill (continuous batching); results come as inputs stop.

    One model call per step for the live rows of every input in flight (at most ``max_rows``);
    when inputs stop, new ones join the running search at the next call. Each input's result is
    the one the mode's batch function gives it decoded alone (or in any batch: inputs are
    independent), for every mode and control.

    Args:
        step_fn: ``step_fn(state, y_prev [k]) -> (logits [k, V], new_state)``; the state holds
            the rows of inputs that joined at different calls, one block per cohort.
        make_state: ``make_state(items) -> state`` with one row per item (axis 0 of every array
            leaf), called once per cohort with the items joining (as the stream gave them). The
            states of cohorts are joined by :func:`~beamsearch.concat_state`: a state whose leaves
            differ beyond axis 0 between cohorts (a cache or memory of another length) needs a
            registered concatenation that pads (``concat_state.register``, ``pad_axis``).
        inputs: an iterable, read lazily (one item when there is room for it): each item is a
            prompt (token ids), or a dict with ``prompt`` and per-input ``max_steps``, ``prefix``
            (not for stochastic), ``constraints`` (constrained) or ``seed`` (stochastic), and
            ``source``: anything, left to ``make_state`` (the text or ids an encoder reads).
        max_rows: the most rows per model call, >= the beam size: an input joins only when its
            beam size fits beside the beam sizes of the inputs in flight.
        max_tokens: None, or the most decoder tokens the rows of one call may hold, padding
            included (what a KV cache shared by rows of different lengths holds: every row as wide
            as the widest). A row of an input holds at most ``len(prompt) + its max_steps``
            positions; an input joins, in stream order, only when ``(rows in flight + its beam
            size) x (the widest such width in flight, its own included)`` fits; an input whose
            own rows need more is an error result (the stream goes on). An encoder's side (its
            output, a cross-attention cache) is not counted.
        min_join: >= 1; new inputs join only when at least this many fit at once (or nothing is
            in flight). Each cohort costs the search a fixed overhead per step (its own scoring and
            selection), so joining a few at a time can be faster than keeping every call full;
            1 joins each input as soon as it fits. Results never depend on it.
        mode: ``"beam"`` (:func:`~beamsearch.beam_search_batch`), ``"greedy"`` (one row per
            input, :func:`beamsearch.modes.beam.greedy_plan`), ``"constrained"``,
            ``"diverse"`` or ``"stochastic"`` (the ``*_beam_search`` functions).
        **search: the mode function's keywords (``max_steps`` is required: the default of the
            inputs that give none), except ``callback``/``trace``/``trace_width`` and the per-input
            ``prefix`` and ``constraints``. Stochastic: ``seed`` (an int) or ``rng`` gives one
            seed s (fresh entropy with neither), and the input at position i of the stream gets
            the noise it gets from ``stochastic_beam_search(all inputs, seed=s)``; an input
            dict's own ``seed`` gives it the noise of ``seed=[its seed]`` alone. Either way its
            noise does not depend on when it joined.

    Returns:
        A :class:`Stream`: an iterator of :class:`Decoded` (``index``, ``hypotheses``, ``error``,
        ``info``), one per input, in the order inputs stop; ``stream.stats`` counts calls and
        rows (``utilisation`` = mean rows per call / ``max_rows``).

    Raises:
        ValueError / TypeError, here, before any model call: a bad ``max_rows`` or one input's
        beam larger than it, an unknown mode, a bad keyword. An input whose own arguments are bad
        (a bad item, ``max_steps``, ``prefix``, ``constraints``, ``seed``, a token id outside
        ``[0, V)``) is not an exception: its :class:`Decoded` carries the ``error`` and the stream
        goes on. An error of the model (``step_fn``, ``make_state``, the logits) ends the stream.
    """
    max_rows = check.at_least("max_rows", max_rows, 1)
    if max_tokens is not None:
        max_tokens = check.at_least("max_tokens", max_tokens, 1)
    min_join = check.at_least("min_join", min_join, 1)
    kind, config, stream = stream_search(mode, search)
    return Stream(step_fn, make_state, inputs, max_rows, min_join, kind, config, stream, max_tokens)


def stream_search(mode: str, search: dict[str, Any]) -> tuple[Mode, SearchConfig, dict[str, Any]]:
    """:func:`decode_stream`'s ``mode`` and ``**search`` checked once, before any input is read:
    the mode, its configuration (one value, :meth:`~beamsearch.core.mode.Mode.configure`) and
    what the mode makes of the stream's own options (stochastic: its one seed)."""
    search = dict(search)
    modes = refill_modes()
    if mode not in modes:
        raise ValueError(f"mode must be one of {', '.join(modes)}; got {mode!r}")
    kind = modes[mode]
    for name in ("callback", "trace", "trace_width"):
        if name in search:
            raise TypeError(f"decode_stream does not take {name} (a step record covers one batch); got {name}=")
    for name in sorted((kind.input_keys - kind.stream_only) & set(search)):
        raise ValueError(f"{name} is per input: give it in each input's dict ({{'prompt': ..., '{name}': ...}}), "
                         f"not to decode_stream; got {name}={search[name]!r:.60}")
    if "positions" in search:
        raise TypeError("decode_stream does not take positions (each input's position in the stream is used)")
    stream = kind.start_stream({name: search.pop(name) for name in sorted(kind.stream_only & set(search))})
    if "max_steps" not in search:
        raise TypeError("decode_stream needs max_steps (an int: the default of inputs that give none)")
    steps = search["max_steps"]
    if hasattr(steps, "__len__") and not isinstance(steps, (str, bytes)):  # one per input: not for a stream
        check.max_steps(steps, 0)
    return kind, kind.configure(search), stream
