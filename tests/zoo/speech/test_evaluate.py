"""Word error rate on examples counted by hand."""

import pytest

from beamsearch.zoo.speech.evaluate import edit_distance, word_error_rate


@pytest.mark.parametrize(("ref", "hyp", "edits"), [
    ("half past five", "half past five", 0),
    ("half past five", "half past nine", 1),  # one substitution
    ("half past five", "past five", 1),  # one deletion
    ("half past five", "a half past five", 1),  # one insertion
    ("half past five", "", 3),  # three deletions
    ("", "five", 1),
    ("seven hundred and five", "seven hundred five and", 2),  # delete "and", insert "and" (no swap move)
    ("one two three", "three two one", 2),  # two substitutions
])
def test_edit_distance_by_hand(ref, hyp, edits):
    assert edit_distance(ref.split(), hyp.split()) == edits


def test_corpus_wer_sums_edits_over_reference_words():
    # 1 edit of 3 words + 2 edits of 4 words = 3 / 7
    refs = ["half past five", "seven hundred and five"]
    hyps = ["half past nine", "seven hundred five"]
    assert word_error_rate(refs, hyps) == pytest.approx(2 / 7)
    assert word_error_rate(refs, ["half past nine", "seven hundred and"]) == pytest.approx(2 / 7)
    assert word_error_rate(refs, ["half past nine", "seven hundred"]) == pytest.approx(3 / 7)


def test_wer_refuses_unmatched_lists_and_empty_references():
    with pytest.raises(ValueError, match="as many"):
        word_error_rate(["a"], [])
    with pytest.raises(ValueError, match="at least one word"):
        word_error_rate([""], ["a"])
