"""beamsearch: beam search decoding of any sequence model given as a step function.

``step_fn(state, y_prev) -> (logits, new_state)``; see SPEC sections 1-10 and README.
"""

from beamsearch._hypothesis import BatchArrays, BatchResults, Hypothesis, TokenLogprobHypothesis
from beamsearch._penalties import length_power, length_wu
from beamsearch._score import score_sequences
from beamsearch._search import beam_search, beam_search_batch, beam_search_each, greedy_decode
from beamsearch._state import select_state

__all__ = [
    "BatchArrays",
    "BatchResults",
    "Hypothesis",
    "TokenLogprobHypothesis",
    "beam_search",
    "beam_search_batch",
    "beam_search_each",
    "greedy_decode",
    "length_power",
    "length_wu",
    "score_sequences",
    "select_state",
]

__version__ = "0.2.0"
