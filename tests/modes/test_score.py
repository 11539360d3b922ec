"""Teacher-forced scoring's arguments (``score_sequences``): targets that end with a stop sequence,
and bad arguments named. Oracle: the plain-Python log-softmax of tests/models.py summed along each
target by hand."""

from __future__ import annotations

import pytest

from beamsearch import score_sequences
from models import SequenceModel, log_softmax, random_table

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
    for h, p, t in zip(got, prompts, targets, strict=True):
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
