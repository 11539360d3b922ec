"""The prompt and the suppressed ids against openai/whisper's ``DecodingTask`` methods."""

from __future__ import annotations

from typing import Any

import pytest

from beamsearch.whisper import WhisperTokens, initial_tokens, suppressed_ids
from tests.whisper import openai_package

whisper = openai_package.load()
TOK = whisper.tokenizer.get_tokenizer(True, num_languages=99, language="fr", task="translate")
WT = WhisperTokens.from_openai(TOK)


def _task(**kw: Any) -> Any:
    """A DecodingTask with the options and the sizes its methods read, without a model."""
    task = whisper.decoding.DecodingTask.__new__(whisper.decoding.DecodingTask)
    task.tokenizer, task.options = TOK, whisper.decoding.DecodingOptions(**kw)
    task.n_ctx, task.sample_len = 448, kw.get("sample_len") or 224
    task.sot_sequence = TOK.sot_sequence_including_notimestamps if kw.get("without_timestamps") else \
        TOK.sot_sequence
    return task


@pytest.mark.parametrize("kw", [
    {}, {"without_timestamps": True}, {"prompt": list(range(300))}, {"prefix": list(range(5, 40)), "sample_len": 200},
    {"prompt": [1, 2, 3], "prefix": [4, 5], "without_timestamps": True},
])
def test_initial_tokens_as_whisper_builds_them(kw: dict[str, Any]) -> None:
    want = list(_task(**kw)._get_initial_tokens())
    got = initial_tokens(WT, timestamps=not kw.get("without_timestamps", False), prompt=kw.get("prompt", ()),
                         prefix=kw.get("prefix", ()), sample_len=kw.get("sample_len") or 224)
    assert got == want


@pytest.mark.parametrize("given", ["-1", "", "5,9,5", "-1,3"])
def test_suppressed_ids_as_whisper_lists_them(given: str) -> None:
    ids = tuple(int(t) for t in given.split(",")) if given else ()
    theirs = given if given else []  # whisper's "" never reaches this method (its filter is skipped)
    assert suppressed_ids(WT, ids) == _task(suppress_tokens=theirs)._get_suppress_tokens()


def test_the_ids_of_the_tokenizer() -> None:
    assert WT.sot_sequence == (TOK.sot, TOK.to_language_token("fr"), TOK.translate)
    assert WT.blank == (220,) and WT.timestamp_begin == TOK.timestamp_begin == 50364


def test_an_id_below_minus_one_is_named() -> None:
    with pytest.raises(ValueError, match="suppress_tokens holds -2: ids are >= 0, or -1 for the non-speech symbols"):
        suppressed_ids(WT, (-2,))
