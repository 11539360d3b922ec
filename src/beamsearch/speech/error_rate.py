"""Word error rate: the word-level edit distance between reference and hypothesis transcripts.

``word_errors(reference, hypothesis)`` is the Levenshtein alignment of their words (split on
whitespace): the fewest substitutions + deletions + insertions that turn the reference into the
hypothesis, each costing 1, with a count of each kind on one optimal alignment (among alignments of
equal cost it prefers, walking back from the ends, a match or substitution, then a deletion, then an
insertion). ``wer(references, hypotheses)`` is the corpus rate: the total edits over all pairs
divided by the total number of reference words (as ``jiwer.wer`` computes it for lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WordErrors:
    """The edits of one optimal alignment: ``substitutions``, ``deletions`` (reference words
    missing), ``insertions`` (extra hypothesis words), and ``hits`` (words equal)."""

    substitutions: int
    deletions: int
    insertions: int
    hits: int

    @property
    def errors(self) -> int:
        """The edit distance: substitutions + deletions + insertions."""
        return self.substitutions + self.deletions + self.insertions

    @property
    def reference_words(self) -> int:
        return self.substitutions + self.deletions + self.hits


def word_errors(reference: str, hypothesis: str) -> WordErrors:
    """The word edits turning ``reference`` into ``hypothesis`` (see the module docstring)."""
    for name, text in (("reference", reference), ("hypothesis", hypothesis)):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str; got {type(text).__name__}")
    ref, hyp = reference.split(), hypothesis.split()
    # cost[i][j]: the edit distance between ref[:i] and hyp[:j]
    cost = [list(range(len(hyp) + 1))]
    for i, r in enumerate(ref, 1):
        row = [i]
        for j, h in enumerate(hyp, 1):
            row.append(min(cost[i - 1][j - 1] + (r != h), cost[i - 1][j] + 1, row[j - 1] + 1))
        cost.append(row)
    sub = dele = ins = hits = 0
    i, j = len(ref), len(hyp)
    while i or j:
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            hits += ref[i - 1] == hyp[j - 1]
            sub += ref[i - 1] != hyp[j - 1]
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            dele, i = dele + 1, i - 1
        else:
            ins, j = ins + 1, j - 1
    return WordErrors(sub, dele, ins, hits)


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """The corpus word error rate: total edits / total reference words over the pairs.

    Raises:
        ValueError: the lists differ in length, or the references hold no word.
    """
    if isinstance(references, str) or isinstance(hypotheses, str):
        raise TypeError("references and hypotheses must be lists of str (one transcript each), not a str")
    if len(references) != len(hypotheses):
        raise ValueError(f"references and hypotheses must be as many; got {len(references)} and {len(hypotheses)}")
    counts = [word_errors(r, h) for r, h in zip(references, hypotheses, strict=True)]
    words = sum(c.reference_words for c in counts)
    if words == 0:
        raise ValueError("the references hold no word: the word error rate is undefined")
    return sum(c.errors for c in counts) / words
