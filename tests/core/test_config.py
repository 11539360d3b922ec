"""The option fields called directly (``option``, ``DecodingConfig``), against hand-written
values."""

from __future__ import annotations

import dataclasses

import pytest

from beamsearch.core.config import DecodingConfig, OptionInfo, option, options_of

# --- option fields ---------------------------------------------------------------------------------


def test_control_makes_a_field_with_its_default_and_control():
    @dataclasses.dataclass(frozen=True)
    class Options:
        width: int = option(3, "how wide", metavar="W", aliases=("--wide",))
        name: str = option("a", "a name", cli=False)

    assert options_of(Options) == {"width": (3, OptionInfo("how wide", metavar="W", aliases=("--wide",))),
                                    "name": ("a", OptionInfo("a name", cli=False))}
    assert Options().width == 3
    with pytest.raises(TypeError, match=r"^an option's default must be immutable$"):
        option([1], "a list")


def test_decoding_config_keywords_and_replace():
    config = DecodingConfig(eos_token_id=2, max_steps=5)
    every = config.keywords()
    assert list(every) == [f.name for f in dataclasses.fields(DecodingConfig)]
    assert every["eos_token_id"] == 2 and every["max_steps"] == 5 and every["beam_size"] == 5
    assert config.keywords(["alpha", "beam_size"]) == {"alpha": 0.6, "beam_size": 5}
    wider = config.replace(beam_size=8, alpha=0.0)
    assert (wider.beam_size, wider.alpha, wider.max_steps) == (8, 0.0, 5) and config.beam_size == 5
