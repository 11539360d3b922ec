"""Corpus decoding on a Ray cluster (``beamsearch decode --ray [ADDRESS]``; see docs/ray.md).

:func:`decode_ray` decodes :class:`~beamsearch.corpus.Line` values with Ray Data: the lines become
a dataset, ``map_batches`` sends batches of them to a fixed pool of actors, each of which loads the
model once (from its name, :func:`beamsearch.corpus.load_model`, also importable from here) and decodes its batches with
:func:`beamsearch.corpus.decode_records` (refill within a batch). The records come back in input
order, in the format of ``decode_records``, error records of bad lines included.

Importable with numpy alone: ``ray`` is imported by :func:`decode_ray` (the optional ``ray``
extra), torch only when a zoo model is loaded.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import numpy as np

from beamsearch.core import validate as check
from beamsearch.corpus import HF_MAX_STEPS, Line, corpus_search, decode_records, load_model
from beamsearch.corpus.output import create_temporary
from beamsearch.corpus.sidefile import encode
from beamsearch.extras import install_hint

__all__ = ["decode_ray", "load_model", "write_records"]


class _Decoder:
    """The actor of :func:`decode_ray`: loads the model once, then decodes batches.

    A batch is ``{"line": [n] JSON objects of Line fields}``; the answer is ``{"record": [n] JSON
    records}`` (JSON text on both sides: nested, optional fields survive Arrow unchanged, and
    ``json`` writes floats exactly, so records equal those of the single-process run).
    """

    def __init__(self, spec: str, options: dict[str, Any], search: dict[str, Any]) -> None:
        self.model = load_model(spec, **options)
        self.search = search

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        lines = [Line(**json.loads(text)) for text in batch["line"]]
        records = [json.dumps(r, ensure_ascii=False) for r in decode_records(self.model, lines, **self.search)]
        return {"record": np.array(records, dtype=object)}


def decode_ray(model: str, lines: Iterable[Line], *, address: str | None = None, num_workers: int = 2,
               batch_size: int = 256, calendar: bool = True, threads: int = 1, **search: Any) -> list[dict]:
    """Decode ``lines`` on Ray: records in input order, as :func:`~beamsearch.corpus.decode_records`
    gives them (the same records as the single-process run, error records of bad lines included).

    The lines are split into batches of ``batch_size``; ``num_workers`` actors (one CPU each) load
    the model once each and decode batches with refill (``decode_records``) as they come.

    Ray: an already initialized Ray session is used as it is; else ``address`` (a running
    cluster, ``ray start --head`` prints it) is joined; else a local cluster of ``num_workers``
    CPUs is started. A cluster joined or started here is shut down at the end.

    Args:
        model: what :func:`load_model` takes: a zoo name, a checkpoint folder or ``hf:DIR`` (a
            path every worker can read), or ``"_toy"``; an ``hf:`` model's limit is an integer
            ``max_steps``, else ``HF_MAX_STEPS``. It is also loaded here first, to check it and ``search``.
        lines: :class:`~beamsearch.corpus.Line` values (``read_lines``), unique indices.
        address: a Ray cluster address (``"HOST:6379"``, ``"auto"``), or None.
        num_workers: actors in the pool, >= 1.
        batch_size: lines per batch sent to an actor, >= 1.
        calendar, threads: for :func:`load_model` (in every worker).
        **search: the keywords of ``decode_records`` (``mode``, ``beam_size``, ``n_best``, ``alpha``,
            ``max_steps``, ``max_rows``, ``no_repeat_ngram_size``, ...), the same for every line.

    Returns:
        One record per line, in the order of ``lines``: ``{"index", "input", "nbest": [...]}`` or
        ``{"index", "input", "error"}``.

    Raises:
        ValueError, TypeError: a bad ``model``, ``address``, ``num_workers``, ``batch_size``, a
            bad search option, or two lines with the same index; before Ray is started.
        ModuleNotFoundError: ray is not installed (the ``ray`` extra: ``pip install -e '.[ray]'`` in
            the beamsearch checkout).
    """
    num_workers = check.at_least("num_workers", num_workers, 1)
    batch_size = check.at_least("batch_size", batch_size, 1)
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a string (HOST:PORT or 'auto') or None; got {address!r}")
    steps = search.get("max_steps")
    max_steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else HF_MAX_STEPS
    options: dict[str, Any] = {"calendar": calendar, "threads": threads, "hf_max_steps": max_steps}  # load_model's
    corpus_search(load_model(model, **options), **search)  # the model and search checked, before Ray starts
    lines = list(lines)
    order = {line.index: position for position, line in enumerate(lines)}
    if len(order) != len(lines):
        raise ValueError("lines must have unique indices (as read_lines gives them)")
    if not lines:
        return []
    try:
        import ray
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"decode_ray needs ray: {install_hint('ray')}", name="ray") from e

    started = not ray.is_initialized()
    if started and address is not None:
        ray.init(address=address)
    elif started:
        ray.init(num_cpus=num_workers, include_dashboard=False)
    try:
        rows = [{"line": json.dumps(asdict(line), ensure_ascii=False)} for line in lines]
        blocks = max(num_workers, -(-len(rows) // batch_size))
        dataset = ray.data.from_items(rows, override_num_blocks=blocks).map_batches(
            _Decoder, fn_constructor_args=(model, options, search), batch_size=batch_size,
            batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=num_workers), num_cpus=1)
        records = [json.loads(row["record"]) for row in dataset.iter_rows()]
    finally:
        if started:
            ray.shutdown()
    records.sort(key=lambda r: order[r["index"]])  # batches finish in any order
    return records


def write_records(records: list[dict], output: str | os.PathLike) -> tuple[int, int]:
    """Write ``records`` as JSON Lines to ``output`` (a new temporary file beside it, then an atomic
    rename), or
    to stdout when ``output`` is ``"-"``, as ``beamsearch decode`` writes them (a lone surrogate of
    a JSON input escaped, so the file is valid UTF-8).

    Returns:
        ``(records, errors)``: how many records, and how many of them have ``error``.
    """
    if str(output) == "-":
        for r in records:
            sys.stdout.buffer.write(encode(r))
        sys.stdout.buffer.flush()
    else:
        fd, temporary = create_temporary(output)  # a new file: never an existing one or a link's target
        try:
            with os.fdopen(fd, "wb") as f:
                for r in records:
                    f.write(encode(r))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, output)
        finally:
            temporary.unlink(missing_ok=True)
    return len(records), sum("error" in r for r in records)
