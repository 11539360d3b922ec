"""Corpus decoding: reading a file of inputs, decoding it with refill, writing JSON Lines in input
order, and resuming a killed run (what ``beamsearch decode`` runs; see docs/corpus.md).

Importable with numpy alone: torch is imported when a zoo or hf model is loaded.

The pieces:

- :func:`read_lines` turns the bytes of a file into :class:`Line` values, one per line (LF or
  CRLF), text or JSON Lines; a line that cannot be read carries its ``error`` instead of failing
  the run.
- A :class:`CorpusModel` is what the corpus decoder needs of a model: a step function, a
  ``make_state`` for refill, its ids and limits, and its own text checks.
- :func:`decode_records` decodes lines with :func:`beamsearch.refill.decode_stream` and yields
  one JSON-ready record per line, in the order lines finish.
- :func:`decode_corpus` writes them, holding the output's lock: appended and flushed to a side
  file ``OUTPUT.partial`` as they finish (a killed run loses only the inputs in flight), then the
  ordered ``OUTPUT`` at the end, copied record by record, atomically (``os.replace``); with
  ``resume`` the side file's options and input are checked first, then the indices it holds are
  skipped.

The modules, one concern each: :mod:`~beamsearch.corpus.lines` (reading), :mod:`~beamsearch.corpus.models`
(the model protocol, its defaults, the toy model), :mod:`~beamsearch.corpus.hf_folder` (``hf:DIR``),
:mod:`~beamsearch.corpus.load` (a ``--model`` spec to a model; the zoo's models are
:mod:`beamsearch.zoo.corpus_model`), :mod:`~beamsearch.corpus.options` (a search's keywords from
options by name), :mod:`~beamsearch.corpus.records` (the records), :mod:`~beamsearch.corpus.batches`
(fixed batches, and the lines a failed batch or scorer call fails), :mod:`~beamsearch.corpus.files`
(the output, side file and resume), :mod:`~beamsearch.corpus.sidefile` (their formats),
:mod:`~beamsearch.corpus.output` (the output's lock and the files beside it, links never followed),
:mod:`~beamsearch.corpus.progress`, :mod:`~beamsearch.corpus.speech_lines` (the speech model, which
decodes whole lines: a :class:`LineSearch`).
"""

from beamsearch.corpus.files import decode_corpus, load_partial, partial_path
from beamsearch.corpus.hf_folder import hf_model
from beamsearch.corpus.lines import MAX_JSON_DEPTH, MAX_JSON_DIGITS, Line, read_lines
from beamsearch.corpus.load import HF_MAX_STEPS, ZOO_MODELS, ModelSpecError, load_model
from beamsearch.corpus.models import CorpusModel, CorpusModelBase, TokenLabels, toy_model
from beamsearch.corpus.options import LengthRule, corpus_options, line_max_steps, search_keywords
from beamsearch.corpus.output import OutputError, check_output, output_lock, sibling
from beamsearch.corpus.progress import Progress
from beamsearch.corpus.records import (
                                      NO_OUTPUT,
                                      CorpusSearch,
                                      LineSearch,
                                      RecordKeyWarning,
                                      corpus_search,
                                      decode_records,
                                      trace_line,
)
from beamsearch.corpus.sidefile import Interrupted, line_name

__all__ = ["HF_MAX_STEPS", "MAX_JSON_DEPTH", "MAX_JSON_DIGITS", "NO_OUTPUT", "ZOO_MODELS", "CorpusModel",
           "CorpusModelBase", "CorpusSearch", "Interrupted", "LengthRule", "Line", "LineSearch", "ModelSpecError",
           "OutputError",
           "Progress", "RecordKeyWarning", "TokenLabels", "check_output", "corpus_options", "corpus_search",
           "decode_corpus", "decode_records", "hf_model", "line_max_steps", "line_name", "load_model", "load_partial",
           "output_lock", "partial_path", "read_lines", "search_keywords", "sibling", "toy_model", "trace_line"]
