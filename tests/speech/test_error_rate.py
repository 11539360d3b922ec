"""Word error rate (beamsearch.speech.error_rate) against jiwer 4.0.0 on random transcripts, and against
edits counted by hand."""

from __future__ import annotations

import random

import pytest

from beamsearch.speech.error_rate import WordErrors, wer, word_errors


def test_hand_counted_edits():
    # "a b c" -> "a x c d": b/x substituted, d inserted; 2 edits over 3 reference words
    assert word_errors("a b c", "a x c d") == WordErrors(substitutions=1, deletions=0, insertions=1, hits=2)
    # "one two three four" -> "two three": "one" and "four" deleted
    assert word_errors("one two three four", "two  three") == WordErrors(0, 2, 0, 2)
    assert word_errors("", "x y") == WordErrors(0, 0, 2, 0)
    assert word_errors("x y", "") == WordErrors(0, 2, 0, 0)
    assert wer(["a b c", "one two three four"], ["a x c d", "two three"]) == pytest.approx(4 / 7)
    assert wer(["a b", ""], ["a b", "extra"]) == pytest.approx(1 / 2)  # an empty reference adds its insertions


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
    assert word_errors(ref, hyp).errors == edits


@pytest.mark.parametrize("seed", range(5))
def test_equal_to_jiwer_on_random_transcripts(seed):
    jiwer = pytest.importorskip("jiwer")
    rng = random.Random(seed)
    refs, hyps = [], []
    for _ in range(60):
        refs.append(" ".join(rng.choices("abcd", k=rng.randint(1, 8))))
        hyps.append(" ".join(rng.choices("abcde", k=rng.randint(0, 8))))
    assert wer(refs, hyps) == pytest.approx(jiwer.wer(refs, hyps), abs=1e-12)
    for r, h in zip(refs, hyps, strict=True):
        theirs = jiwer.process_words(r, h)
        ours = word_errors(r, h)
        assert ours.errors == theirs.substitutions + theirs.deletions + theirs.insertions, (r, h)
        assert ours.reference_words == len(r.split())


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"^references and hypotheses must be as many; got 2 and 1$"):
        wer(["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"^the references hold no word: the word error rate is undefined$"):
        wer(["", " "], ["a", ""])
    with pytest.raises(TypeError, match=r"^references and hypotheses must be lists of str"):
        wer("a b", "a b")
    with pytest.raises(TypeError, match=r"^hypothesis must be a str; got NoneType$"):
        word_errors("a", None)  # type: ignore[arg-type]
