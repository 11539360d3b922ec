"""Argument checks at the public entry: clear errors naming the parameter and the value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from beamsearch.core.model_checks import CheckedProcessor

MAX_SIZE = 2**62
"""The largest size, count or length taken (``beam_size``, ``max_steps``, ``top_k``, ...): the
search counts in int64, and a sum of two of them (a prompt's length and ``max_steps``, a beam and
its eos ids) must stay exact."""

MAX_ID = int(np.iinfo(np.intp).max)
"""No token id reaches this: an array has at most ``2**63 - 1`` columns, so no V is larger."""


def integer(name: str, value: Any) -> int:
    """``value`` as an int; TypeError unless a Python int or numpy integer (bool refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer; got {value!r} of type {type(value).__name__}")
    return int(value)


def at_least(name: str, value: Any, low: int) -> int:
    """A size or count: an integer ``>= low`` and ``<= MAX_SIZE``."""
    v = integer(name, value)
    if v < low:
        raise ValueError(f"{name} must be >= {low}; got {v}")
    if v > MAX_SIZE:
        raise ValueError(f"{name} must be <= 2**62 (sizes are counted in int64); got {v}")
    return v


def int64(name: str, value: Any) -> int:
    """An integer that fits in int64 (a padding id, which may be negative)."""
    v = integer(name, value)
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"{name} must fit in int64, in [-2**63, 2**63); got {v}")
    return v


def real(name: str, value: Any, *, positive: bool = False, finite: bool = False) -> float:
    """A float that is not NaN and is ``>= 0`` (``> 0`` when ``positive``; not inf when ``finite``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number; got {value!r} of type {type(value).__name__}")
    v = float(value)
    if math.isnan(v) or v < 0 or (positive and v == 0) or (finite and math.isinf(v)):
        bound = ("> 0" if positive else ">= 0") + (" and finite" if finite else "")
        raise ValueError(f"{name} must be {bound}; got {value!r}")
    return v


def finite(name: str, value: Any) -> float:
    """A finite real number of either sign (a bias)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number; got {value!r} of type {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite; got {value!r}")
    return v


def penalty_strength(name: str, value: Any, penalty: Any, longest: int) -> float:
    """A length-penalty strength: finite, >= 0, and small enough that ``lp(longest)`` is a finite
    positive float (else every score would round to -0.0 and rank the worse hypothesis first)."""
    v = real(name, value, finite=True)
    with np.errstate(over="ignore"):
        lp = float(penalty(np.asarray(longest), v))
    if not (math.isfinite(lp) and lp > 0):
        raise ValueError(f"{name}={value!r} is too large: the length penalty of {longest} tokens overflows ({lp})")
    return v


def token_list(name: str, value: Any, *, allow_empty: bool = False) -> list[int]:
    """A sequence of token ids (ints >= 0) as a list; a str, a scalar or (unless allowed) an empty
    sequence is refused."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of token ids; got {value!r:.80}")
    ids = list(value) if _plain_ids(value) else [token(f"{name}[{j}]", t) for j, t in enumerate(value)]
    if not ids and not allow_empty:
        raise ValueError(f"{name} must be a non-empty sequence of token ids; got {value!r}")
    return ids


def _plain_ids(value: Any) -> bool:
    """Whether ``value`` is a list or tuple of Python ints in ``[0, MAX_ID)`` (not bools): the
    common case, checked without a call per id (any other value goes through :func:`token` one by
    one, which names the bad one)."""
    return (isinstance(value, (list, tuple)) and all(type(t) is int for t in value)
            and (not value or (min(value) >= 0 and max(value) < MAX_ID)))


def token(name: str, value: Any) -> int:
    """A token id: an integer ``>= 0`` (the upper bound V is checked after the first call; an id
    that no V can exceed is refused here)."""
    v = integer(name, value)
    if v < 0:
        raise ValueError(f"{name} must be in [0, V); got {v}")
    if v >= MAX_ID:
        raise ValueError(f"{name} must be in [0, V); got {v}, and no V is larger than 2**63 - 1")
    return v


def prompts(value: Any) -> list[list[int]]:
    """Each prompt as a list of token ids, as given (an empty prompt stays empty: see
    :func:`with_bos`)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"prompts must be a list of token-id lists; got {value!r:.80}")
    out = []
    for i, prompt in enumerate(value):
        if isinstance(prompt, (str, bytes)) or not hasattr(prompt, "__len__"):
            raise TypeError(f"prompts[{i}] must be a list of token ids; got {prompt!r:.80}")
        out.append(list(prompt) if _plain_ids(prompt)
                   else [token(f"prompts[{i}][{j}]", t) for j, t in enumerate(prompt)])
    return out


def with_bos(prompts: list[list[int]], bos: int | None) -> list[list[int]]:
    """The prompts the search starts from: an empty prompt becomes ``[bos]`` (a ValueError when
    ``bos`` is None). The ids' ``[0, V)`` check names the prompts as given and ``bos_token_id``
    apart, so a bad bos is never blamed on a prompt."""
    for i, ids in enumerate(prompts):
        if not ids and bos is None:
            raise ValueError(f"prompts[{i}] is empty and bos_token_id is None")
    return [ids or [bos] for ids in prompts]  # type: ignore[list-item]


def keywords(mode: str, given: Any, takes: Sequence[str], required: Sequence[str],
             refused: dict[str, str]) -> None:
    """A search mode's ``**controls``: every name in ``takes``, those in ``required`` present.

    A keyword the mode refuses is a TypeError ``"<mode> does not take <name> (<why>)"``; any other
    unknown one is Python's ``"<mode>() got an unexpected keyword argument '<name>'"``, so the
    message names the function the caller called, never an internal one."""
    for name in given:
        if name in refused:
            raise TypeError(f"{mode} does not take {name} ({refused[name]}); got {name}={given[name]!r:.60}")
        if name not in takes:
            raise TypeError(f"{mode}() got an unexpected keyword argument {name!r}")
    missing = [name for name in required if name not in given]
    if missing:
        raise TypeError(f"{mode}() missing required keyword argument {missing[0]!r}")


# ---- what the model returns (checked at each call) and the state it starts from ----------------


# ---- the decoding controls (SPEC section 10) --------------------------------------------------


def eos_ids(name: str, value: Any) -> np.ndarray:
    """An int or a non-empty sequence of ints >= 0 as int64 ``[E]`` (sorted, unique)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):  # one id (or not an id at all)
        return np.array([token(name, value)], dtype=np.int64)
    return np.unique(np.asarray(token_list(name, value), dtype=np.int64))


def ids_as_given(value: Any) -> int | list[int]:
    """A validated eos argument as the caller wrote it (an int, or a list), for messages that
    name ``eos[j]`` only when a sequence was given."""
    return int(value) if isinstance(value, (int, np.integer)) else [int(e) for e in value]


def max_steps(value: Any, n_inputs: int) -> np.ndarray:
    """int64 ``[N]``: an int >= 1 for every input, or one per input."""
    if isinstance(value, (int, np.integer, bool, np.bool_)):
        return np.full(n_inputs, at_least("max_steps", value, 1), dtype=np.int64)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"max_steps must be an int or a sequence of ints; got {value!r:.80}")
    if len(value) != n_inputs:
        raise ValueError(f"max_steps must have one entry per prompt ({n_inputs}); got {len(value)} entries")
    return np.array([at_least(f"max_steps[{i}]", v, 1) for i, v in enumerate(value)], dtype=np.int64)


def prefix(value: Any, n_inputs: int, eos: np.ndarray, limits: np.ndarray) -> list[list[int]] | None:
    """None, or one token-id sequence per input: no eos id, none longer than its input's limit."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"prefix must be None or one token-id sequence per prompt; got {value!r:.80}")
    if len(value) != n_inputs:
        raise ValueError(f"prefix must have one sequence per prompt ({n_inputs}); got {len(value)}")
    rows = [token_list(f"prefix[{i}]", p, allow_empty=True) for i, p in enumerate(value)]
    for i, p in enumerate(rows):
        bad = [t for t in p if t in set(eos.tolist())]
        if bad:
            raise ValueError(f"prefix[{i}] must not hold an eos id; got {list(p)} (eos {bad[0]})")
        if len(p) > limits[i]:
            raise ValueError(f"prefix[{i}] is longer ({len(p)}) than max_steps for input {i} ({limits[i]})")
    return rows


def stop_sequences(value: Any, eos: np.ndarray) -> list[tuple[int, ...]]:
    """Non-empty token-id sequences, none holding an eos id."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"stop_sequences must be a sequence of token-id sequences; got {value!r:.80}")
    seqs = []
    for i, s in enumerate(value):
        ids = tuple(token_list(f"stop_sequences[{i}]", s))
        bad = sorted(set(ids) & set(eos.tolist()))
        if bad:
            raise ValueError(f"stop_sequences[{i}] must not hold an eos id; got {list(ids)} (eos {bad[0]})")
        seqs.append(ids)
    return seqs


def targets(value: Any, n_prompts: int | None, eos: np.ndarray) -> list[list[int]]:
    """``score_sequences``' targets: one non-empty sequence per prompt, eos only as the last token."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"targets must be one token-id sequence per prompt; got {value!r:.80}")
    rows = [token_list(f"targets[{i}]", t) for i, t in enumerate(value)]
    if n_prompts is not None and len(rows) != n_prompts:
        raise ValueError(f"targets must have one sequence per prompt ({n_prompts}); got {len(rows)}")
    for i, t in enumerate(rows):
        inner = [j for j, v in enumerate(t[:-1]) if v in set(eos.tolist())]
        if inner:
            raise ValueError(f"targets[{i}] holds eos id {t[inner[0]]} at position {inner[0]}; "
                             "an eos id may only be a target's last token")
    return rows


def search_sizes(beam_size: Any, n_best: Any) -> tuple[int, int]:
    """beam_size >= 1 and 1 <= n_best <= beam_size."""
    beam = at_least("beam_size", beam_size, 1)
    best = at_least("n_best", n_best, 1)
    if best > beam:
        raise ValueError(f"n_best must be <= beam_size={beam}; got {best}")
    return beam, best


def flag(name: str, value: Any) -> bool:
    """A bool (numpy bools too); anything else is a TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool; got {value!r}")
    return bool(value)


def length_penalty(value: Any, known: Any) -> Any:
    """The name of a length penalty in ``known`` (a dict name -> function); returns the function."""
    if not isinstance(value, str) or value not in known:
        raise ValueError(f"length_penalty must be one of {sorted(known)}; got {value!r}")
    return known[value]


def processors(value: Any) -> list[CheckedProcessor]:
    """A sequence of callables, each as the search runs it (:class:`CheckedProcessor`)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"logits_processors must be a sequence of callables; got {value!r:.80}")
    out = list(value)
    for i, processor in enumerate(out):
        if not callable(processor):
            raise TypeError(f"logits_processors[{i}] must be callable; got {processor!r}")
    return [CheckedProcessor(i, processor) for i, processor in enumerate(out)]


# ---- the ready processors' arguments -----------------------------------------------------------


def top_p(value: Any) -> float:
    """0 < p <= 1."""
    p = real("p", value, positive=True)
    if p > 1:
        raise ValueError(f"p must be in (0, 1]; got {value!r}")
    return p


def repetition_penalty(value: Any) -> float:
    """A finite penalty > 0."""
    return real("penalty", value, positive=True, finite=True)


def temperature(name: str, value: Any) -> float:
    """A temperature: finite and > 0."""
    return real(name, value, positive=True, finite=True)


def suppressed(token_ids: Any, first_steps: Any) -> list[int]:
    """The ids to suppress (a non-empty list, as given) and ``first_steps`` None or >= 1."""
    ids = token_list("token_ids", token_ids)
    if first_steps is not None:
        at_least("first_steps", first_steps, 1)
    return ids


def _sequence(name: str, seq: Any) -> tuple[int, ...]:
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"{name} must be a sequence of token ids; got {seq!r:.80}")
    return tuple(token_list(name, seq))


def sequence_bias(value: Any) -> tuple[tuple[tuple[int, ...], ...], tuple[float, ...]]:
    """A non-empty mapping from non-empty token-id tuples to finite floats, as (sequences, biases)."""
    from collections.abc import Mapping

    if not isinstance(value, Mapping):
        raise TypeError(f"bias must be a mapping from token-id tuples to floats; got {value!r:.80}")
    if not value:
        raise ValueError(f"bias must map at least one token-id sequence to a bias; got {value!r}")
    seqs, biases = [], []
    for seq, bias in value.items():
        seqs.append(_sequence(f"bias key {seq!r}", seq))
        biases.append(finite(f"bias[{seq!r}]", bias))
    return tuple(seqs), tuple(biases)


def bad_words(value: Any) -> tuple[tuple[int, ...], ...]:
    """A non-empty list of non-empty token-id sequences."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"sequences must be a list of token-id sequences; got {value!r:.80}")
    if len(value) == 0:
        raise ValueError(f"sequences must hold at least one token-id sequence; got {value!r}")
    return tuple(_sequence(f"sequences[{i}]", s) for i, s in enumerate(value))
