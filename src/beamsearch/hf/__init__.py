"""Decode Hugging Face ``transformers`` models with beamsearch (the ``hf`` extra: ``pip install -e '.[hf]'``
in the beamsearch checkout).

Importing this package registers ``select_state`` for the library's cache classes
(``DynamicCache``, ``StaticCache``, ``EncoderDecoderCache``), so the search reorders a model's KV
cache row by row like any other state, and rows of inputs that have stopped simply leave the cache.

Two layers:

- :func:`generate` takes a model and its generation config (or the model's own) and decodes with
  the same settings: token ids or text in, :class:`Generation` (hypotheses, and text) out.
- :func:`causal_lm` and :func:`seq2seq_lm` return a :class:`Prepared`: the ``init_state``,
  ``step`` and ``prompts`` that :func:`beamsearch.beam_search_batch` takes, and the
  ``eos_token_id`` to search with::

    dec = causal_lm(model, [[5, 6, 7], [8]])
    results = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                max_steps=32, beam_size=4)

The prompt (all of it) is run through the model once, in ``causal_lm``, one row per input (not
one per beam, as ``generate`` does), keeping only the last position's logits: the first ``step``
returns them, and every later step feeds one token per row with the attention mask and the
positions of a buffer allocated once.

The package's modules, by concern (each importing only those above it):

- :mod:`beamsearch.hf.caches`: the adapters' KV cache layers (the prompt kept in place, or a
  reorder deferred into the next write), a cache's rows reordered, and ``inference``;
- :mod:`beamsearch.hf.recurrent`: the rules moving the rows of each other kind of cache layer
  (recurrent, hybrid, indexed attention); :mod:`beamsearch.hf.static_layers`: those of static
  layers, and a whole ``StaticCache`` (``cache_implementation="static"``);
- :mod:`beamsearch.hf.shared`: the prompt cache shared by every beam (``causal_lm(...,
  share_prompt=True)``): the prompts once per input, the rows' own columns, and the attention
  function that reads both;
- :mod:`beamsearch.hf.states`: :class:`Prepared`, the two states (``CausalState``,
  ``Seq2SeqState``) with their row selection and joining, and what a joined state needs
  (:func:`joinable`, the decoder's position table, whether a step may pass a ready 4-D mask);
- :mod:`beamsearch.hf.inputs`: the inputs read and checked before the model runs
  (:func:`position_limit`), padded, and the eos and pad ids;
- :mod:`beamsearch.hf.adapters`: :func:`causal_lm` and :func:`seq2seq_lm`, their step objects
  and the model calls' helpers;
- :mod:`beamsearch.hf.forced`: ``generate``'s forced BOS / EOS tokens as a processor;
- :mod:`beamsearch.hf.streaming`: the step callback of ``generate``'s stopping criteria and
  streamer;
- :mod:`beamsearch.hf.hooks`: ``model.generate``'s hooks (``logits_processor``,
  ``prefix_allowed_tokens_fn``, ``stopping_criteria``, ``streamer``) on the search's seams;
- :mod:`beamsearch.hf.generation`: :func:`generate` and :class:`Generation`;
  :mod:`beamsearch.hf.settings`: a generation config's mapping to the search
  (:func:`search_settings`, :data:`SEARCH_SETTINGS`, :func:`other_settings`,
  :func:`saved_generation_config`); :mod:`beamsearch.hf.keywords`: what ``generate`` does with
  each of ``model.generate``'s keywords; :mod:`beamsearch.hf.calls` and
  :mod:`beamsearch.hf.outputs`: ``generate``'s calling conventions and outputs;
- :mod:`beamsearch.hf.reward`: a reward model (sequence or token classification) as step search's
  scorer (:class:`RewardScorer`);
- :mod:`beamsearch.hf.custom`: the search behind ``model.generate(custom_generate=...)``
  (:func:`custom_generate`, :data:`CUSTOM_GENERATE_DIR`).
- :mod:`beamsearch.hf.ctc`: CTC models (``AutoModelForCTC``) as emissions and lengths
  (:func:`ctc_emissions`) and a drop-in for ``Wav2Vec2ProcessorWithLM``'s decoding
  (:class:`CTCDecoder`).
"""

from __future__ import annotations

import importlib

from beamsearch.extras import missing_package

try:  # the hf extra's packages first: a missing one says which extra brings it, not only its name
    for _package in ("torch", "transformers"):
        importlib.import_module(_package)
except ModuleNotFoundError as e:
    raise ModuleNotFoundError(f"beamsearch.hf: {missing_package(e.name, 'hf')}", name=e.name) from None

from beamsearch.hf.adapters import causal_lm
from beamsearch.hf.ctc import CTCDecoder, ctc_emissions
from beamsearch.hf.custom import CUSTOM_GENERATE_DIR, custom_generate
from beamsearch.hf.generation import Generation, generate
from beamsearch.hf.inputs import position_limit
from beamsearch.hf.positions import joinable
from beamsearch.hf.reward import RewardScorer
from beamsearch.hf.seq2seq import seq2seq_lm
from beamsearch.hf.settings import SEARCH_SETTINGS, other_settings, saved_generation_config, search_settings
from beamsearch.hf.states import Prepared

importlib.import_module("beamsearch.hf.static_layers")  # registers the static key/value layers' rules

__all__ = ["CUSTOM_GENERATE_DIR", "SEARCH_SETTINGS", "Generation", "custom_generate", "Prepared", "RewardScorer",
           "causal_lm", "generate", "joinable", "other_settings", "position_limit", "saved_generation_config",
           "search_settings", "seq2seq_lm"]
__all__ += ["CTCDecoder", "ctc_emissions"]
