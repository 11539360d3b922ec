"""The search modes: one line each. Every layer that offers a choice of modes reads this list:
refill (:func:`beamsearch.refill.decode_stream`), corpus decoding
(:func:`beamsearch.corpus.decode_records`) and the command line (``beamsearch decode --mode``,
its flags and ``--help``).

A new mode is one module (its :class:`~beamsearch.core.mode.Mode`, its options dataclass, its
plan or batch function, its public function; its selection rule in :mod:`beamsearch.strategies`
when it has one) and one line here (CONTRIBUTING.md).
"""

from __future__ import annotations

from beamsearch.core.mode import Mode
from beamsearch.modes.beam import BEAM, GREEDY
from beamsearch.modes.constrained import CONSTRAINED
from beamsearch.modes.diverse import DIVERSE
from beamsearch.modes.exact import EXACT
from beamsearch.modes.step import STEP
from beamsearch.modes.stochastic import STOCHASTIC
from beamsearch.modes.transformers_beam import TRANSFORMERS

__all__ = ["MODES", "mode", "register"]

MODES: dict[str, Mode] = {}
"""name -> :class:`Mode`, in the order ``--help`` lists them."""


def register(spec: Mode) -> Mode:
    """Add a mode (its name must be new, and its own options must not reuse another mode's
    option names or a shared control's: one name, one meaning, one flag)."""
    if spec.name in MODES:
        raise ValueError(f"a mode named {spec.name!r} is already registered")
    from beamsearch.core.config import DecodingConfig, options_of

    taken = {name: "the shared controls" for name in options_of(DecodingConfig)}
    for other in MODES.values():
        taken.update({name: f"mode {other.name!r}" for name in other.own})
    for name in spec.own:
        if name in taken:
            raise ValueError(f"mode {spec.name!r}: option {name!r} is already one of {taken[name]}")
    MODES[spec.name] = spec
    return spec


def mode(name: str) -> Mode:
    """The registered mode ``name``; a ValueError naming the registered ones otherwise."""
    if name not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {name!r}")
    return MODES[name]


register(BEAM)
register(GREEDY)
register(CONSTRAINED)
register(DIVERSE)
register(STOCHASTIC)
register(EXACT)
register(TRANSFORMERS)
register(STEP)
