"""The decoding controls of SPEC section 10, one module each, and their assembly into the bundle
the engine reads (:class:`~beamsearch.core.protocols.Controls`, named here too).

This layer sits above the processors and strategies: :mod:`.shared` validates the shared controls
once and puts the built-in processors, the caller's and the controls listed below in their
documented order.

- several eos ids: :class:`beamsearch.core.select.Terminals` (every id is terminal for every row; the
  strategy finishes them);
- per-input length limits: ``max_steps [N]``, read by the engine's ``apply_selection`` and by the
  batch strategy's early-stop bound;
- :mod:`.min_new_tokens`: no eos and no stop sequence at steps ``t <= m`` (a processor placed first);
- :mod:`.stop_sequences`: token sequences that finish a hypothesis like eos;
- :mod:`.prefix`: forced, scored first tokens (a mask after log_softmax).
"""

from __future__ import annotations

from beamsearch.core.protocols import Controls as Controls

__all__ = ["Controls"]
