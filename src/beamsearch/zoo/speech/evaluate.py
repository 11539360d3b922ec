"""Word error rates of the speech model on its held-out sets: greedy, beam search, and beam search
with the shipped domain 3-gram, for the CTC and the TDT head.

    python -m beamsearch.zoo.speech.evaluate [--count 200] [--seed 0] [--beam-size 8] [--model DIR]

synthesizes the held-out sets (:func:`beamsearch.zoo.speech.synth.make_set`: voices and noises
never used in training; ``heldout`` clean, ``heldout-noisy`` at 10-20 dB SNR) from ``--seed``, decodes
them each way and prints a Markdown table of WER (:func:`beamsearch.speech.wer`, checked against
jiwer) with the decoding time.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Sequence
from typing import Any

from beamsearch.speech import NgramLM, wer

DOMAIN_LM = pathlib.Path(__file__).with_name("domain.3gram.arpa")
"""The shipped word 3-gram of the domain (docs/speech-model.md says how it is made)."""
SETS = ("heldout", "heldout-noisy")
HEADS = ("ctc", "tdt")
BATCH = 16


def transcripts(model: Any, audio: Sequence[Any], **options: Any) -> list[str]:
    """The best text of each audio, decoded ``BATCH`` at a time with ``model.transcribe(**options)``."""
    out: list[str] = []
    for i in range(0, len(audio), BATCH):
        out += [hyps[0].text or "" for hyps in model.transcribe(list(audio[i : i + BATCH]), **options)]
    return out


def searches(beam_size: int, lm: NgramLM) -> dict[str, dict[str, Any]]:
    """The compared decodings, by their column name: ``transcribe`` keywords."""
    return {"greedy": {"beam_size": None}, f"beam {beam_size}": {"beam_size": beam_size, "lm": None},
            f"beam {beam_size} + LM": {"beam_size": beam_size, "lm": lm}}


def evaluate(model: Any, sets: dict[str, tuple[list[Any], list[str]]], *, beam_size: int = 8,
             lm: NgramLM | None = None) -> tuple[str, dict[tuple[str, str, str], float]]:
    """The Markdown table of WER per (set, head, search), and the rates by that key.

    ``sets``: per name, the audio (float32 ``[S]`` each, at the model's rate) and their reference
    transcripts."""
    lm = NgramLM.from_arpa(str(DOMAIN_LM)) if lm is None else lm
    columns = searches(beam_size, lm)
    rates: dict[tuple[str, str, str], float] = {}
    seconds: dict[str, float] = dict.fromkeys(columns, 0.0)
    lines = ["| set | utterances | head | " + " | ".join(f"{c} WER" for c in columns) + " |",
             "|---|---:|---|" + "---:|" * len(columns)]
    for name, (audio, texts) in sets.items():
        for head in HEADS:
            cells = []
            for column, options in columns.items():
                start = time.perf_counter()
                got = transcripts(model, audio, head=head, **options)
                seconds[column] += time.perf_counter() - start
                rates[name, head, column] = wer(texts, got)
                cells.append(f"{100 * rates[name, head, column]:.1f}%")
            lines.append(f"| {name} | {len(texts)} | {head} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("decoding time, all sets and heads: " + ", ".join(f"{c} {s:.1f} s" for c, s in seconds.items()))
    return "\n".join(lines), rates


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m beamsearch.zoo.speech.evaluate``: the table on freshly synthesized held-out sets."""
    from beamsearch.zoo.speech import load
    from beamsearch.zoo.speech.synth import make_set

    parser = argparse.ArgumentParser(prog="python -m beamsearch.zoo.speech.evaluate",
                                     description="WER of greedy, beam and beam + LM on the held-out sets.")
    parser.add_argument("--count", type=int, default=200, help="utterances per set (default: 200)")
    parser.add_argument("--seed", type=int, default=0, help="the sets' seed (default: 0)")
    parser.add_argument("--beam-size", type=int, default=8, help="the beam (default: 8)")
    parser.add_argument("--model", default=None, help="a speech model folder (default: the shipped one)")
    args = parser.parse_args(argv)
    for flag in ("count", "beam_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1; got {getattr(args, flag)}")
    model = load(args.model)
    sets = {}
    for split in SETS:
        utterances = make_set(args.count, args.seed, split)
        sets[split] = ([u.audio for u in utterances], [u.text for u in utterances])
    table, _ = evaluate(model, sets, beam_size=args.beam_size)
    print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
