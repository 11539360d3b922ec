"""``hf.generate(catalogue=...)``: every output is an entry of a catalogue (a
:class:`beamsearch.processors.Catalogue` ending with the search's eos ids), appended to the
generation config's logits processors (README: "Generative retrieval")."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import numpy as np

from beamsearch.processors import Catalogue

__all__ = ["CATALOGUE_SETTING", "catalogues", "check_catalogue"]

CATALOGUE_SETTING = "catalogue"
"""generate's keyword for a catalogue."""


def catalogues(constraints: Any, cfg: Any, tokenizer: Any, eos: np.ndarray | None,
               steps: Sequence[int] = ()) -> list[Catalogue]:
    """The catalogue the call asks for (``constraints.catalogue``, ``constraints`` a
    :class:`~beamsearch.core.config.GrammarOptions`; ``cfg``: its ``GenerationConfig``), ending
    with the search's eos ids ``eos`` (int64 ``[E]``); ``[]`` when none is set. It is a
    :class:`~beamsearch.processors.Catalogue` (rebuilt on its trie when its eos ids are not the
    search's), a path (``str`` or ``Path``: :meth:`Catalogue.from_file`), token-id sequences or an
    array ``[M, L]`` padded with -1, or strings (encoded by ``tokenizer``). ``steps``: the most
    new tokens of each input; a catalogue whose longest entry and eos need more is a warning
    (once per call, :meth:`Catalogue.cut_warning`).

    Raises:
        ValueError, TypeError: no eos id, strings without a tokenizer, or a bad catalogue (named
            ``catalogue``).
    """
    value = constraints.catalogue
    if value is None:
        return []
    if eos is None:
        raise ValueError("catalogue= needs an eos_token_id (where an entry ends); the generation config has none")
    try:
        catalogue = _catalogue(value, tokenizer, eos.tolist())
    except (ValueError, TypeError) as e:  # the Catalogue's own message names its argument outputs
        message = str(e)
        raise type(e)(f"catalogue{message[len('outputs'):]}" if message.startswith("outputs") else message) from None
    name = "max_new_tokens" if getattr(cfg, "max_new_tokens", None) is not None else "the new tokens max_length leaves"
    warning = catalogue.cut_warning(min(steps), name) if len(steps) else None
    if warning is not None:
        warnings.warn(warning, stacklevel=2)
    return [catalogue]


def _catalogue(value: Any, tokenizer: Any, ids: list[int]) -> Catalogue:
    """``value`` (see :func:`catalogues`) as a catalogue ending with eos ids ``ids``."""
    if isinstance(value, Catalogue):
        same = sorted(np.atleast_1d(value.eos_token_id).tolist()) == ids
        return value if same else Catalogue(value.trie, ids)
    if isinstance(value, (str, Path)):
        return Catalogue.from_file(value, ids)
    check_catalogue(value)
    if not hasattr(value, "ndim") and len(value) and all(isinstance(v, str) for v in value):
        if tokenizer is None:
            raise ValueError("catalogue= given as strings needs the model's tokenizer: pass tokenizer=")
        return Catalogue(value, ids, tokenizer=tokenizer)
    return Catalogue(value, ids)


def check_catalogue(value: Any) -> None:
    """Refuse a ``catalogue=`` that is not one of the forms :func:`catalogues` takes (a generator,
    a dict, a set: read before the generation config is copied, which cannot copy a generator).

    Raises:
        TypeError: naming ``catalogue=`` and the value.
    """
    if value is None or isinstance(value, (Catalogue, str, Path)):
        return
    if isinstance(value, (Mapping, AbstractSet)) or not (hasattr(value, "ndim") or hasattr(value, "__len__")):
        raise TypeError(f"catalogue= must be a Catalogue, a file path, token-id sequences, an integer array [M, L] or "
                        f"strings (in a list or tuple); got {type(value).__name__} {value!r:.80}")
