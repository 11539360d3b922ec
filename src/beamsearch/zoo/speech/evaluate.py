"""Word error rates of the speech model on sets made by :mod:`beamsearch.zoo.speech.synth`: greedy,
beam search, and beam search with the shipped domain 3-gram, for the CTC and the TDT head::

    python -m beamsearch.zoo.speech.evaluate --data DIR [--data DIR ...] [--model FOLDER] [--beam-size 8]

prints a Markdown table of WER (:func:`beamsearch.speech.wer`, checked against jiwer) per set and
head, and the decoding time of each search. The milestone's sets are the held-out ones (voices and
noises never used in training)::

    python -m beamsearch.zoo.speech.synth --out /tmp/heldout --count 200 --seed 0 --split heldout
    python -m beamsearch.zoo.speech.synth --out /tmp/heldout-noisy --count 200 --seed 0 --split heldout-noisy
"""

from __future__ import annotations

import argparse
import pathlib
import time
from collections.abc import Sequence
from typing import Any

from beamsearch.speech import NgramLM, wer

__all__ = ["DOMAIN_LM", "evaluate", "main"]

DOMAIN_LM = pathlib.Path(__file__).with_name("domain.3gram.arpa")
"""The shipped word 3-gram of the domain (docs/speech-model.md says how it is made)."""
HEADS = ("ctc", "tdt")


def transcripts(model: Any, audio: Sequence[Any], batch: int, **options: Any) -> list[str]:
    """The best text of each audio, decoded ``batch`` at a time with ``model.transcribe(**options)``."""
    out: list[str] = []
    for i in range(0, len(audio), batch):
        out += [hyps[0].text or "" for hyps in model.transcribe(list(audio[i : i + batch]), **options)]
    return out


def searches(beam_size: int, lm: NgramLM) -> dict[str, dict[str, Any]]:
    """The compared decodings, by their column name: ``transcribe`` keywords."""
    return {"greedy": {"beam_size": None}, f"beam {beam_size}": {"beam_size": beam_size, "lm": None},
            f"beam {beam_size} + LM": {"beam_size": beam_size, "lm": lm}}


def evaluate(model: Any, sets: dict[str, tuple[list[Any], list[str]]], *, beam_size: int = 8,
             lm: NgramLM | None = None, batch: int = 32) -> tuple[str, dict[tuple[str, str, str], float]]:
    """The Markdown table of WER per set and head (a column per search), and the rates by
    ``(set, head, search)``.

    ``sets``: per name, the audio (float32 ``[S]`` each, at the model's rate) and their reference
    transcripts; ``lm``: the LM of the ``+ LM`` column (default: the shipped domain 3-gram)."""
    lm = NgramLM.from_arpa(str(DOMAIN_LM)) if lm is None else lm
    columns = searches(beam_size, lm)
    rates: dict[tuple[str, str, str], float] = {}
    seconds: dict[str, float] = dict.fromkeys(columns, 0.0)
    lines = ["| set | head | " + " | ".join(f"{c} WER" for c in columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for name, (audio, texts) in sets.items():
        for head in HEADS:
            cells = []
            for column, options in columns.items():
                start = time.perf_counter()
                got = transcripts(model, audio, batch, head=head, **options)
                seconds[column] += time.perf_counter() - start
                rates[name, head, column] = wer(texts, got)
                cells.append(f"{100 * rates[name, head, column]:.1f}%")
            lines.append(f"| {name} ({len(texts)}) | {head} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("decoding time, all sets and heads: " + ", ".join(f"{c} {s:.1f} s" for c, s in seconds.items()))
    return "\n".join(lines), rates


def main(argv: list[str] | None = None) -> None:
    from beamsearch.zoo.speech.recognizer import load
    from beamsearch.zoo.speech.train import load_set

    parser = argparse.ArgumentParser(prog="python -m beamsearch.zoo.speech.evaluate",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=pathlib.Path, action="append", required=True,
                        help="a set folder made by synth (its manifest.jsonl); repeat for several")
    parser.add_argument("--model", type=pathlib.Path, default=None, help="a folder with speech.json (default: shipped)")
    parser.add_argument("--beam-size", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    for flag in ("beam_size", "batch"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1; got {getattr(args, flag)}")
    model = load(args.model)
    sets = {}
    for folder in args.data:
        data = load_set(folder)
        sets[folder.name] = ([a for a, _ in data], [t for _, t in data])
    table, _ = evaluate(model, sets, beam_size=args.beam_size, batch=args.batch)
    print(table, flush=True)


if __name__ == "__main__":
    main()
