"""Speech recognition decoding: CTC prefix beam search, vocabularies and word timestamps.

``ctc_beam_search(emissions [N, T, V], lengths [N], *, blank, beam_size, ...)`` returns, per
utterance, the best label sequences with their text, scores and timestamps (docs/speech.md).
This package uses only :mod:`beamsearch.core` and :mod:`beamsearch.backends`; numpy alone is
enough, torch emissions are taken as they are.
"""

from beamsearch.speech.ctc import ctc_beam_search
from beamsearch.speech.ctc import CTCStream
from beamsearch.speech.kenlm_model import KenLMModel
from beamsearch.speech.ngram import NgramLM
from beamsearch.speech.results import CTCHypothesis, Word
from beamsearch.speech.tokenlm import TokenLM
from beamsearch.speech.vocabulary import Vocabulary

__all__ = ["CTCHypothesis", "KenLMModel", "NgramLM", "TokenLM", "Vocabulary", "Word", "ctc_beam_search"]
__all__ += ["CTCStream"]
