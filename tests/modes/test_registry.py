"""The mode registry's rules: ``mode`` names the registered modes, ``register`` refuses a taken
name or option and adds a new mode. Oracles: the contract's own words."""

from __future__ import annotations

import dataclasses

import pytest

from beamsearch.core.config import option
from beamsearch.modes import registry
from beamsearch.modes.beam import BEAM


def test_mode_names_the_registered_modes():
    with pytest.raises(ValueError, match=r"^mode must be one of beam, greedy, constrained, diverse, stochastic, exact, "
                                         r"transformers, step(, \w+)*; got 'nope'$"):
        registry.mode("nope")
    assert registry.mode("beam") is BEAM


def test_register_refuses_a_taken_name_or_option_and_adds_a_new_mode():
    @dataclasses.dataclass(frozen=True)
    class Shared:
        alpha: float = option(0.5, "clashes with the shared control")

    @dataclasses.dataclass(frozen=True)
    class Grouped:
        num_groups: int = option(2, "clashes with diverse's option")

    @dataclasses.dataclass(frozen=True)
    class Fresh:
        probe_width: int = option(2, "an option of its own")

    before = dict(registry.MODES)
    with pytest.raises(ValueError, match=r"^a mode named 'beam' is already registered$"):
        registry.register(dataclasses.replace(BEAM))
    with pytest.raises(ValueError, match=r"^mode 'probe': option 'alpha' is already one of the shared controls$"):
        registry.register(dataclasses.replace(BEAM, name="probe", options=Shared))
    with pytest.raises(ValueError, match=r"^mode 'probe': option 'num_groups' is already one of mode 'diverse'$"):
        registry.register(dataclasses.replace(BEAM, name="probe", options=Grouped))
    assert before == registry.MODES
    spec = dataclasses.replace(BEAM, name="probe", options=Fresh)
    try:
        assert registry.register(spec) is spec and registry.mode("probe") is spec
    finally:
        registry.MODES.pop("probe", None)
