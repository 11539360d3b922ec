"""``hf.generate(catalogue=...)``: every output is an entry of a catalogue (a
:class:`beamsearch.processors.Catalogue` ending with the search's eos ids), appended to the
generation config's logits processors (README: "Generative retrieval")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from beamsearch.processors import Catalogue

__all__ = ["CATALOGUE_SETTING", "catalogues"]

CATALOGUE_SETTING = "catalogue"
"""generate's keyword for a catalogue."""


def catalogues(cfg: Any, tokenizer: Any, eos: np.ndarray | None) -> list[Catalogue]:
    """The catalogue the call asks for (``cfg.catalogue``), ending with the search's eos ids
    ``eos`` (int64 ``[E]``); ``[]`` when none is set. ``cfg.catalogue`` is a
    :class:`~beamsearch.processors.Catalogue` (rebuilt on its trie when its eos ids are not the
    search's), a path (``str`` or ``Path``: :meth:`Catalogue.from_file`), token-id sequences or an
    array ``[M, L]`` padded with -1, or strings (encoded by ``tokenizer``).

    Raises:
        ValueError, TypeError: no eos id, strings without a tokenizer, or a bad catalogue.
    """
    value = getattr(cfg, CATALOGUE_SETTING, None)
    if value is None:
        return []
    if eos is None:
        raise ValueError("catalogue= needs an eos_token_id (where an entry ends); the generation config has none")
    ids = eos.tolist()
    if isinstance(value, Catalogue):
        same = sorted(np.atleast_1d(value.eos_token_id).tolist()) == ids
        return [value if same else Catalogue(value.trie, ids)]
    if isinstance(value, (str, Path)):
        return [Catalogue.from_file(value, ids)]
    if not hasattr(value, "ndim") and len(value) and all(isinstance(v, str) for v in value):
        if tokenizer is None:
            raise ValueError("catalogue= given as strings needs the model's tokenizer: pass tokenizer=")
        return [Catalogue(value, ids, tokenizer=tokenizer)]
    return [Catalogue(value, ids)]
