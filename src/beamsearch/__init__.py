"""beamsearch: beam search decoding of any sequence model given as a step function.

``step_fn(state, y_prev) -> (logits, new_state)``; see SPEC sections 1-10 and README.
"""

from beamsearch._constrained import AnyOf, constrained_beam_search
from beamsearch._diverse import diverse_beam_search
from beamsearch._exact import ExactResults, exact_search
from beamsearch._hypothesis import BatchArrays, BatchResults, Hypothesis, TokenLogprobHypothesis
from beamsearch._penalties import length_power, length_wu
from beamsearch._score import score_sequences
from beamsearch._search import beam_search, beam_search_batch, beam_search_each, greedy_decode
from beamsearch._state import select_state
from beamsearch._stochastic import StochasticResults, stochastic_beam_search
from beamsearch._trace import StepRecord, Trace

__all__ = [
    "AnyOf",
    "BatchArrays",
    "BatchResults",
    "ExactResults",
    "Hypothesis",
    "StepRecord",
    "StochasticResults",
    "TokenLogprobHypothesis",
    "Trace",
    "beam_search",
    "beam_search_batch",
    "beam_search_each",
    "constrained_beam_search",
    "diverse_beam_search",
    "exact_search",
    "greedy_decode",
    "length_power",
    "length_wu",
    "score_sequences",
    "select_state",
    "stochastic_beam_search",
]

__version__ = "0.3.0"
