"""``beamsearch transcribe --model hf:DIR FILE ...``: a saved ``transformers`` speech encoder-decoder
(Whisper by whisper's rules, long files in 30-second windows; Moonshine, Speech2Text by
``generate``'s rule) through :class:`beamsearch.corpus.hf_speech.HFSpeech`.

The flags that apply: ``--beam-size`` (default 5), ``--greedy``, ``--n-best``, ``--json``,
``--timestamps`` (each segment's start and end), ``--progress``. The speech model's own
(``--head``, ``--lm``, ``--alpha``, ``--beta``, ``--hotwords``, ``--hotword-weight``,
``--max-chunk-seconds``, ``--trace``) are refused, one line naming the flag (exit 2).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from beamsearch.cli.common import CliError, each_file
from beamsearch.corpus.speech_lines import MAX_CHUNK_SECONDS
from beamsearch.speech.audio import read_audio

__all__ = ["REFUSED", "hf_transcribe"]

REFUSED = (("head", "ctc"), ("lm", None), ("alpha", None), ("beta", None), ("hotwords", None),
           ("hotword_weight", None), ("max_chunk_seconds", MAX_CHUNK_SECONDS), ("trace", None))
"""The speech model's flags (destination, default) that an hf: model refuses away from their default."""


def _checked(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``HFSpeech.transcribe`` the flags give (usage errors exit 2)."""
    for name, default in REFUSED:
        if getattr(args, name) != default:
            raise CliError(f"beamsearch: error: --{name.replace('_', '-')} applies to the speech model trained "
                           f"here, not to --model {args.model}", 2)
    if args.n_best < 1:
        raise CliError(f"beamsearch: error: --n-best must be >= 1; got {args.n_best}", 2)
    if args.greedy:
        if args.beam_size is not None or args.n_best > 1:
            raise CliError(f"beamsearch: error: --greedy takes no {'--beam-size' if args.beam_size else '--n-best'} "
                           "(greedy decoding keeps one candidate)", 2)
        return {"beam_size": None, "n_best": 1}
    beam = 5 if args.beam_size is None else args.beam_size
    if beam < 1:
        raise CliError(f"beamsearch: error: --beam-size must be >= 1; got {beam}", 2)
    if args.n_best > beam:
        raise CliError(f"beamsearch: error: --n-best must be <= --beam-size={beam}; got {args.n_best}", 2)
    return {"beam_size": beam, "n_best": args.n_best}


def load(spec: str) -> Any:
    """The folder of ``hf:DIR`` as an :class:`~beamsearch.corpus.hf_speech.HFSpeech` (exit 1 when
    it is missing or holds no speech encoder-decoder)."""
    folder = spec[3:]
    if not pathlib.Path(folder).is_dir():
        raise CliError(f"beamsearch: error: --model {spec}: {folder!r} is not a folder", 1)
    from beamsearch.corpus.hf_speech import HFSpeech

    try:
        return HFSpeech(folder)
    except (ValueError, OSError) as e:
        raise CliError(f"beamsearch: error: --model {spec}: {e}", 1) from None


def write(path: str, out: dict[str, Any], args: argparse.Namespace, several: bool) -> None:
    """One file's result on stdout: a JSON object, or its text lines (n-best ranked with scores;
    each segment's times with ``--timestamps``)."""
    if args.json:
        print(json.dumps({"file": path, **out}, ensure_ascii=False))
        return
    prefix = f"{path}\t" if several else ""
    if args.n_best > 1:
        for rank, h in enumerate(out["nbest"], 1):
            print(f"{prefix}{rank}\t{h['score']:.4f}\t{h['text']}")
    else:
        print(prefix + out["text"])
    if args.timestamps:
        for s in out["segments"]:
            print(f"{prefix}  {s['start']:8.2f} {s['end']:8.2f}  {s['text']}")


def hf_transcribe(args: argparse.Namespace) -> int:
    """``beamsearch transcribe --model hf:DIR``: each file's transcript; exit 1 when some file
    could not be read."""
    options = _checked(args)
    model = load(args.model)

    def one(path: str) -> int:
        [out] = model.transcribe([read_audio(path, model.sample_rate)], **options)
        write(path, out, args, len(args.files) > 1)
        return out["nbest"][0]["labels"]

    return each_file(args, one)
