"""Refill (continuous batching): :func:`decode_stream` decodes a stream of inputs with one model
call per step for the rows of every input in flight, and lets new inputs join as others stop.

Cohorts. Inputs that join at the same model call form a cohort: an ordinary engine search
(:class:`beamsearch.core.engine.Search` with its own :class:`~beamsearch.core.plan.Plan`: its own
controls and per-input arrays, strategy state, trail and step counter). Every step the runner
makes ONE model call: the state is the cohorts' row blocks one after the other (cohort order),
``y_prev`` their tokens; the logits are cut back into the cohorts' row ranges (slices: views on
numpy and torch), each cohort scores, selects and advances as a batch of its own would, and the
state is reordered once, by the cohorts' parents shifted by their block offsets. Joining inputs'
first rows (``make_state``) are appended with :func:`beamsearch.core.state.concat_state`. An input's
result is therefore, by construction, the one it gets when decoded alone; every strategy and
control runs unchanged.

Rows. An input reserves its beam size (the most rows it can hold at a step) from joining to
stopping, and joins only when that fits ``max_rows``, so no call passes more than ``max_rows``
rows. The input iterable is read one item at a time, only when there is room for it.

The package's modules, by concern:

- :mod:`beamsearch.refill.records`: what the stream passes around: an input read and validated
  (``Input``), a result (:class:`Decoded`), the counts (:class:`StreamStats`);
- :mod:`beamsearch.refill.flight`: the loop's state (``Flight``: the inputs waiting, the cohorts
  in flight, their joint state, the rows and tokens they hold) with the loop's phases as methods;
- :mod:`beamsearch.refill.stream`: :func:`decode_stream` (its argument checks and ``refill_modes``) and
  :class:`Stream`, which reads and validates each input, makes the cohorts' plans and runs the loop.
"""

from __future__ import annotations

from beamsearch.refill.records import Decoded, MakeState, StreamStats
from beamsearch.refill.stream import Stream, decode_stream, per_input, refill_modes

__all__ = ["Decoded", "MakeState", "Stream", "StreamStats", "decode_stream", "per_input", "refill_modes"]
