"""Word error rate of the speech model on a set made by :mod:`beamsearch.zoo.speech.synth`, for each
head, greedy and beam search (no LM)::

    python -m beamsearch.zoo.speech.evaluate --data DIR [--data DIR ...] [--model FOLDER] [--beam-size 8]
"""

from __future__ import annotations

import argparse
import pathlib
from collections.abc import Sequence

__all__ = ["edit_distance", "word_error_rate"]


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Levenshtein distance between two word lists: the fewest substitutions, deletions and
    insertions turning ``reference`` into ``hypothesis``."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1]


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """The corpus WER: the summed word edit distances over the summed reference words.

    Raises:
        ValueError: the lists differ in length, or the references hold no word.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"references and hypotheses must be as many; got {len(references)} and {len(hypotheses)}")
    words = sum(len(r.split()) for r in references)
    if words == 0:
        raise ValueError("references must hold at least one word")
    return sum(edit_distance(r.split(), h.split()) for r, h in zip(references, hypotheses, strict=True)) / words


def main(argv: list[str] | None = None) -> None:
    from beamsearch.zoo.speech.recognizer import HEADS, load
    from beamsearch.zoo.speech.train import load_set

    parser = argparse.ArgumentParser(prog="python -m beamsearch.zoo.speech.evaluate",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=pathlib.Path, action="append", required=True)
    parser.add_argument("--model", type=pathlib.Path, default=None, help="a folder with speech.json (default: shipped)")
    parser.add_argument("--beam-size", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    model = load(args.model)
    print("| set | head | greedy WER | beam WER |\n|---|---|---|---|")
    for folder in args.data:
        data = load_set(folder)
        refs = [t for _, t in data]
        for head in HEADS:
            row = []
            for beam in (None, args.beam_size):
                hyps = []
                for k in range(0, len(data), args.batch):
                    out = model.transcribe([a for a, _ in data[k : k + args.batch]], head=head, beam_size=beam)
                    hyps += [h[0].text or "" for h in out]
                row.append(word_error_rate(refs, hyps))
            print(f"| {folder.name} ({len(data)}) | {head} | {row[0]:.3f} | {row[1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
