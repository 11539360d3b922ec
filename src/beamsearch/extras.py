"""The optional extras (``pyproject.toml``'s optional dependencies) and how a message names one.

beamsearch is installed from its checkout (it is not on the package index), so an extra is
installed with ``pip install -e '.[EXTRA]'`` run in that folder; a message about a missing
package says which extra brings it and that command (:func:`install_hint`)."""

from __future__ import annotations

__all__ = ["EXTRAS", "install_hint", "missing_package"]

EXTRAS = {"torch": ("zoo", "hf"), "safetensors": ("zoo",), "tqdm": ("zoo",), "transformers": ("hf",),
          "llguidance": ("grammar",), "interegular": ("regex",), "ray": ("ray",)}
"""Each optional package (its import name) -> the extras that install it."""


def install_hint(*extras: str) -> str:
    """How to install ``extras``: ``install the zoo extra (in the beamsearch checkout: pip install
    -e '.[zoo]')``; two or more are alternatives (``the zoo or the hf extra``)."""
    named = " or the ".join(extras)
    commands = " or ".join(f"pip install -e '.[{extra}]'" for extra in extras)
    return f"install the {named} extra (in the beamsearch checkout: {commands})"


def missing_package(name: str | None, *extras: str) -> str:
    """The message for a package that is not installed: ``torch is not installed: install the zoo
    extra (...)``. ``extras``: the extras to name (default: those of :data:`EXTRAS` for the
    package's top-level name; ``zoo`` for a package it does not list)."""
    top = (name or "a package").split(".")[0]
    return f"{top} is not installed: {install_hint(*(extras or EXTRAS.get(top, ('zoo',))))}"
