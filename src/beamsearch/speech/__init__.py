"""Speech recognition decoding: CTC prefix beam search, vocabularies and word timestamps.

``ctc_beam_search(emissions [N, T, V], lengths [N], *, blank, beam_size, ...)`` returns, per
utterance, the best label sequences with their text, scores and timestamps (docs/speech.md);
``ctc_greedy`` the best path (the most probable label per frame, repeats merged, blanks dropped).
This package uses only :mod:`beamsearch.core` and :mod:`beamsearch.backends`; numpy alone is
enough, torch emissions are taken as they are. ``transducer_greedy`` and ``transducer_beam_search``
decode RNN-T and TDT models given as functions (docs/transducer.md). ``to_mono`` and ``resample``
(:mod:`beamsearch.speech.audio`) mix samples to one channel and change their rate (soxr, imported
when called).
"""

from beamsearch.speech.audio import resample, to_mono
from beamsearch.speech.best_path import ctc_greedy
from beamsearch.speech.ctc import CTCStream, ctc_beam_search
from beamsearch.speech.error_rate import WordErrors, wer, word_errors
from beamsearch.speech.kenlm_model import KenLMModel
from beamsearch.speech.lexicon import Lexicon
from beamsearch.speech.ngram import NgramLM
from beamsearch.speech.results import CTCHypothesis, Word
from beamsearch.speech.tokenlm import TokenLM
from beamsearch.speech.transducer import TransducerHypothesis, transducer_beam_search, transducer_greedy
from beamsearch.speech.vocabulary import Vocabulary

__all__ = ["CTCHypothesis", "CTCStream", "KenLMModel", "Lexicon", "NgramLM", "TokenLM", "TransducerHypothesis",
           "Vocabulary", "Word", "WordErrors", "ctc_beam_search", "ctc_greedy", "resample", "to_mono",
           "transducer_beam_search", "transducer_greedy", "wer", "word_errors"]
