"""Hotwords on words the speech model never heard: rare words (names, weekdays: none of them in the
training text) inside domain sentences ("meet alice at half past five", "friday march third"),
spoken by synth's held-out voices, decoded by the shipped model with and without ``hotwords=``::

    python -m beamsearch.zoo.speech.hotword_eval --count N --seed S [--hotword-weight W] [--beam-size 8]

prints, per head and search (beam, beam + the shipped LM), how often the rare word is recognized
(it appears as a word of the output) without and with hotwords, and the false-alarm rate: how often
one of the hotwords appears in the output of the same sentences spoken without the rare word.
The hotword list is every rare word (:data:`RARE_WORDS`), for every utterance.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.speech import NgramLM
from beamsearch.zoo.speech.evaluate import DOMAIN_LM, transcripts
from beamsearch.zoo.speech.synth import HELDOUT_VARIANTS, HELDOUT_VOICES, speak
from beamsearch.zoo.speech.text import clock_time, date

__all__ = ["RARE_WORDS", "Prompt", "hotword_table", "main", "prompts"]

NAMES = ("alice", "oscar", "maria", "peter", "linda", "jacob")
WEEKDAYS = ("monday", "tuesday", "wednesday", "friday", "saturday", "sunday")
RARE_WORDS = NAMES + WEEKDAYS
"""The hotwords: words absent from the training text (the shipped LM's vocabulary; a test checks)."""
TEMPLATES = ((NAMES, "meet {w} at {time}"), (NAMES, "call {w} on {date}"), (WEEKDAYS, "{w} {date}"),
             (WEEKDAYS, "{w} at {time}"))


@dataclass(frozen=True)
class Prompt:
    """One sentence with its rare ``word`` (``said``) and without it (``unsaid``), and the voice."""

    word: str
    said: str
    unsaid: str
    voice: str
    speed: int
    pitch: int


def prompts(count: int, seed: int) -> list[Prompt]:
    """``count`` prompts drawn from ``random.Random(seed)``: a template, a rare word of its kind, a
    clock time and a date of the domain, and a held-out voice (synth's held-out bases and variants)."""
    if count < 1:
        raise ValueError(f"count must be >= 1; got {count}")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words, template = rng.choice(TEMPLATES)
        word = rng.choice(words)
        minute = rng.choice([0, 15, 30, 45]) if rng.random() < 0.5 else rng.randrange(60)
        time = clock_time(rng.randrange(1, 13), minute, rng)
        month = rng.randrange(1, 13)
        when = date(month, rng.randrange(1, 29), None, rng)
        said = template.format(w=word, time=time, date=when)
        unsaid = " ".join(template.format(w="", time=time, date=when).split())
        voice = f"{rng.choice(HELDOUT_VOICES)}+{rng.choice(HELDOUT_VARIANTS)}"
        out.append(Prompt(word, said, unsaid, voice, rng.randrange(140, 201), rng.randrange(30, 71)))
    return out


def _rate(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / max(total, 1):.0f}%)"


def hotword_table(model: Any, rare: Sequence[str], said: Sequence[np.ndarray], unsaid: Sequence[np.ndarray],
                  *, beam_size: int = 8, lm: NgramLM | None = None, hotword_weight: float = 10.0,
                  batch: int = 32) -> tuple[str, dict[tuple[str, str, str], list[str]]]:
    """The Markdown table of recognition and false-alarm rates, and the outputs it counts.

    ``rare``: per utterance of ``said`` (float32 ``[S]`` each), its rare word; ``unsaid``: the same
    sentences without it. The hotwords are :data:`RARE_WORDS`. The outputs are by ``(head, search,
    "said" | "unsaid" + " hotwords" when decoded with them)``: one text per utterance."""
    if not len(rare) == len(said) == len(unsaid):
        raise ValueError(f"rare, said and unsaid must be as long; got {len(rare)}, {len(said)}, {len(unsaid)}")
    lm = NgramLM.from_arpa(str(DOMAIN_LM)) if lm is None else lm
    outputs: dict[tuple[str, str, str], list[str]] = {}
    lines = ["| head | search | recognized | recognized with hotwords | false alarms | false alarms with hotwords |",
             "|---|---|---:|---:|---:|---:|"]
    for head in ("ctc", "tdt"):
        for search, with_lm in ((f"beam {beam_size}", None), (f"beam {beam_size} + LM", lm)):
            cells = []
            for name, audio in (("said", said), ("unsaid", unsaid)):
                for hot in (None, list(RARE_WORDS)):
                    key = (head, search, name + (" hotwords" if hot else ""))
                    outputs[key] = transcripts(model, audio, batch, head=head, beam_size=beam_size, lm=with_lm,
                                               hotwords=hot, hotword_weight=hotword_weight)
                    words = [set(text.split()) for text in outputs[key]]
                    hits = (sum(w in ws for w, ws in zip(rare, words, strict=True)) if name == "said"
                            else sum(bool(ws & set(RARE_WORDS)) for ws in words))
                    cells.append(_rate(hits, len(audio)))
            lines.append(f"| {head} | {search} | " + " | ".join(cells) + " |")
    return "\n".join(lines), outputs


def main(argv: list[str] | None = None) -> None:
    from beamsearch.zoo.speech.flite import study_args, study_parser
    from beamsearch.zoo.speech.recognizer import load

    parser = study_parser("python -m beamsearch.zoo.speech.hotword_eval", __doc__, 40)
    parser.add_argument("--hotword-weight", type=float, default=10.0)
    args = study_args(parser, argv)
    if not args.hotword_weight >= 0:
        parser.error(f"--hotword-weight must be >= 0; got {args.hotword_weight}")
    chosen = prompts(args.count, args.seed)
    said = [speak(p.said, p.voice, p.speed, p.pitch) for p in chosen]
    unsaid = [speak(p.unsaid, p.voice, p.speed, p.pitch) for p in chosen]
    table, _ = hotword_table(load(), [p.word for p in chosen], said, unsaid, beam_size=args.beam_size,
                             hotword_weight=args.hotword_weight)
    print(table, flush=True)


if __name__ == "__main__":
    main()
