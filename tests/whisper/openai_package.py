"""The ``openai-whisper`` package (import name ``whisper``), the oracle of these tests.

tests/conftest.py puts tests/ on ``sys.path`` (for ``models``, ``approx``, ...), where this
folder, tests/whisper, would shadow that package's name: :func:`load` imports it from the other
entries of ``sys.path`` and registers it as ``whisper``, so that its own modules and
:mod:`beamsearch.whisper.openai_model` find it by that name."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load() -> ModuleType:
    """The ``whisper`` package of openai-whisper, or skip the calling test when it is absent."""
    pytest.importorskip("torch")
    here = sys.modules.get("whisper")
    if here is not None and hasattr(here, "decoding"):
        return here
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != TESTS]
    spec = importlib.machinery.PathFinder.find_spec("whisper", path)
    if spec is None or spec.loader is None:
        pytest.skip("openai-whisper is not installed (pip install openai-whisper==20250625 --no-deps)")
    for name in [n for n in sys.modules if n == "whisper" or n.startswith("whisper.")]:
        del sys.modules[name]
    module = importlib.util.module_from_spec(spec)
    sys.modules["whisper"] = module
    spec.loader.exec_module(module)
    for sub in ("decoding", "model", "tokenizer", "transcribe"):
        importlib.import_module(f"whisper.{sub}")
    return module
