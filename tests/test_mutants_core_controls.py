"""The shared controls' pieces called directly: option fields (control, DecodingConfig),
length penalties, teacher-forced scoring's arguments and stop sequences, stop-sequence matching
and allowed tokens. Oracles: hand-computed values (derivations in comments) and the
plain-Python log-softmax of tests/models.py."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from beamsearch import score_sequences
from beamsearch.backends.numpy_backend import NumpyBackend
from beamsearch.controls.stop_sequences import StopSequences
from beamsearch.core.config import Control, DecodingConfig, control, controls_of
from beamsearch.core.penalties import LengthPenalty
from beamsearch.processors import AllowedTokens, StepContext
from models import SequenceModel, log_softmax, random_table


# --- option fields ---------------------------------------------------------------------------------


def test_control_makes_a_field_with_its_default_and_control():
    @dataclasses.dataclass(frozen=True)
    class Options:
        width: int = control(3, "how wide", metavar="W", aliases=("--wide",))
        name: str = control("a", "a name", cli=False)

    assert controls_of(Options) == {"width": (3, Control("how wide", metavar="W", aliases=("--wide",))),
                                    "name": ("a", Control("a name", cli=False))}
    assert Options().width == 3
    with pytest.raises(TypeError, match=r"^an option's default must be immutable$"):
        control([1], "a list")


def test_decoding_config_keywords_and_replace():
    config = DecodingConfig(eos_token_id=2, max_steps=5)
    every = config.keywords()
    assert list(every) == [f.name for f in dataclasses.fields(DecodingConfig)]
    assert every["eos_token_id"] == 2 and every["max_steps"] == 5 and every["beam_size"] == 5
    assert config.keywords(["alpha", "beam_size"]) == {"alpha": 0.6, "beam_size": 5}
    wider = config.replace(beam_size=8, alpha=0.0)
    assert (wider.beam_size, wider.alpha, wider.max_steps) == (8, 0.0, 5) and config.beam_size == 5


def test_length_penalty_values_by_hand():
    """gnmt: ((5 + len) / 6) ** alpha: len 1 gives 1, len 7 gives 2 ** alpha; power: len ** alpha,
    float64 even for an integer alpha (3 ** 2 = 9.0)."""
    gnmt = LengthPenalty("gnmt", 0.5)
    got = gnmt(np.array([1, 7]))
    assert got.dtype == np.float64 and got.tolist() == [1.0, math.sqrt(2.0)]
    power = LengthPenalty("power", 2)
    assert power(np.array([3])).dtype == np.float64 and power(np.array([3])).tolist() == [9.0]
    # score = logprob / lp: -6 / 3 ** 1 = -2; -3 / sqrt(2) under gnmt 0.5 at len 7
    assert LengthPenalty("power", 1.0).score(np.array([-6.0]), np.array([3])).tolist() == [-2.0]
    assert gnmt.score(np.array([-3.0, -1.0]), np.array([7, 1])).tolist() == [-3.0 / math.sqrt(2.0), -1.0]


# --- teacher-forced scoring ----------------------------------------------------------------------------

V, EOS = 5, 4
TABLE = random_table(V, 11)


def _by_hand(prompt, target):
    """Sum of the plain log-softmax of the table at each teacher-forced prefix."""
    return sum(float(log_softmax(TABLE(tuple(prompt) + tuple(target[:j])))[t]) for j, t in enumerate(target))


def test_score_sequences_of_targets_that_end_with_a_stop_sequence():
    """A target ending with a stop sequence is finished and scored as any other (the stop
    sequence changes the flag, not the sum); one that holds it before its end is scored to its
    end and is not finished, as one without it."""
    prompts, targets = [[1, 2], [3], [0]], [[0, 1, 2], [2, 1, 0], [1, 2, 0, 3]]
    model = SequenceModel(TABLE)
    got = score_sequences(model.step, model.init_state(prompts), prompts, targets, eos_token_id=EOS, alpha=0.0,
                          stop_sequences=[[1, 2]])
    assert [h.finished for h in got] == [True, False, False]
    for h, p, t in zip(got, prompts, targets):
        assert h.tokens == t and h.logprob == pytest.approx(_by_hand(p, t), abs=1e-9)


def test_score_sequences_refuses_prompts_without_a_length_by_name():
    prompts = [[1, 2], [3]]
    model = SequenceModel(TABLE)
    with pytest.raises(TypeError, match=r"^prompts must be a list of token-id lists"):
        score_sequences(model.step, model.init_state(prompts), iter(prompts), [[0], [2]], eos_token_id=EOS)


def test_score_sequences_names_its_bad_arguments():
    model = SequenceModel(TABLE)
    with pytest.raises(ValueError, match=r"^targets\[0\]\[1\] must be in \[0, V\) with V=5; got 9$"):
        score_sequences(model.step, model.init_state([[1]]), [[1]], [[0, 9]], eos_token_id=EOS)
    with pytest.raises((TypeError, ValueError), match=r"^eos_token_id"):
        score_sequences(model.step, model.init_state([[1]]), [[1]], [[0]], eos_token_id=-1)


# --- stop sequences and allowed tokens -------------------------------------------------------------


def test_stop_sequence_pairs_by_hand():
    """Rows' last generated tokens [3, 1] and [-1, 7]: (3, 1, 2) completes with 2 on row 0,
    (1, 5) with 5 on row 0, the one-token (6,) with 6 on every row; int64, by row then token."""
    stops = StopSequences(((3, 1, 2), (6,), (1, 5)))
    rows, tokens = stops.pairs(np.array([[3, 1], [-1, 7]]), 1)
    assert rows.dtype == np.int64 and tokens.dtype == np.int64
    assert list(zip(rows.tolist(), tokens.tolist())) == [(0, 2), (0, 5), (0, 6), (1, 6)]
    one = StopSequences(((1, 5),))
    rows, tokens = one.pairs(np.array([[1], [2]]), 1)
    assert rows.dtype == np.int64 and tokens.dtype == np.int64 and (rows.tolist(), tokens.tolist()) == ([0], [5])
    rows, tokens = StopSequences(((4,),), min_new_tokens=2).pairs(np.array([[1]]), 2)
    assert rows.size == 0 and tokens.size == 0  # no stop at steps t <= min_new_tokens


def _context(history: np.ndarray) -> StepContext:
    return StepContext(1, history, np.arange(history.shape[0]), NumpyBackend())


def test_allowed_tokens_refuses_a_zero_dimensional_answer_and_takes_no_rows():
    processor = AllowedTokens(lambda i, tokens: np.array(3))
    with pytest.raises(TypeError, match=r"^AllowedTokens fn must return token ids \(integers\); "
                                        r"got array\(3\) for input 0$"):
        processor(np.zeros((1, 4)), _context(np.array([[1]])))
    none = AllowedTokens(lambda i, tokens: [0])(np.zeros((0, 4)), _context(np.zeros((0, 1), np.int64)))
    assert none.shape == (0, 4)
    kept = AllowedTokens(lambda i, tokens: np.array([2, 0], np.int32))(np.ones((1, 4)), _context(np.array([[1]])))
    assert kept.tolist() == [[1.0, -np.inf, 1.0, -np.inf]]
