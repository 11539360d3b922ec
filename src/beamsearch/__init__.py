"""beamsearch: beam search decoding of any sequence model given as a step function.

``step_fn(state, y_prev) -> (logits, new_state)``; see SPEC sections 1-10 and README.
"""

from beamsearch.core.hypothesis import BatchArrays, BatchResults, Hypothesis, TokenLogprobHypothesis
from beamsearch.core.penalties import length_power, length_wu
from beamsearch.core.state import concat_state, pad_axis, select_state
from beamsearch.core.trace import StepRecord
from beamsearch.modes.beam import beam_search, beam_search_batch, beam_search_each, greedy_decode
from beamsearch.modes.constrained import AnyOf, constrained_beam_search
from beamsearch.modes.diverse import diverse_beam_search
from beamsearch.modes.exact import ExactResults, exact_search
from beamsearch.modes.score import score_sequences
from beamsearch.modes.step import StepResults, StepSolution, step_search
from beamsearch.modes.stochastic import StochasticResults, stochastic_beam_search
from beamsearch.modes.transformers_beam import transformers_beam_search
from beamsearch.viz import Trace

__all__ = [
    "AnyOf",
    "BatchArrays",
    "BatchResults",
    "ExactResults",
    "Hypothesis",
    "StepRecord",
    "StepResults",
    "StepSolution",
    "StochasticResults",
    "TokenLogprobHypothesis",
    "Trace",
    "beam_search",
    "beam_search_batch",
    "beam_search_each",
    "concat_state",
    "constrained_beam_search",
    "diverse_beam_search",
    "exact_search",
    "greedy_decode",
    "length_power",
    "length_wu",
    "pad_axis",
    "score_sequences",
    "select_state",
    "step_search",
    "stochastic_beam_search",
    "transformers_beam_search",
]

__version__ = "0.3.0"
