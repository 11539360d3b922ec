"""The milestone table (beamsearch.zoo.speech.evaluate): each cell is the WER of what the model
returned for that head and search, counted here by hand; the shipped LM is what beam + LM gets."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from beamsearch.speech import NgramLM
from beamsearch.zoo.speech import evaluate as ev


class StandIn:
    """Answers by the search: greedy drops the last word, beam without LM changes the first, beam
    with an LM is right; the TDT head also adds a word "uh" in front (one insertion more)."""

    def __init__(self, texts):
        self.texts, self.calls = texts, []

    def transcribe(self, audio, *, head, beam_size, lm=None):
        self.calls.append((len(audio), head, beam_size, lm))
        out = []
        for a in audio:
            words = self.texts[int(a[0])].split()
            if beam_size is None:
                words = words[:-1]
            elif lm is None:
                words = ["x", *words[1:]]
            if head == "tdt":
                words = ["uh", *words]
            out.append([SimpleNamespace(text=" ".join(words))])
        return out


def test_each_cell_is_the_wer_of_that_search_and_head():
    texts = [f"w{i} two three four" for i in range(20)]  # 20 utterances, 80 reference words
    model = StandIn(texts)
    audio = [np.full(4, i, np.float32) for i in range(20)]
    lm = NgramLM.from_arpa(str(ev.DOMAIN_LM))
    table, rates = ev.evaluate(model, {"clean": (audio, texts)}, beam_size=4, lm=lm, batch=16)
    # greedy: 1 deletion per utterance -> 20 / 80; beam: 1 substitution -> 20 / 80; beam + LM: 0.
    # tdt: 1 insertion more per utterance -> 40 / 80, 40 / 80, 20 / 80
    assert rates == pytest.approx({("clean", "ctc", "greedy"): .25, ("clean", "ctc", "beam 4"): .25,
                                   ("clean", "ctc", "beam 4 + LM"): 0.0, ("clean", "tdt", "greedy"): .5,
                                   ("clean", "tdt", "beam 4"): .5, ("clean", "tdt", "beam 4 + LM"): .25})
    assert table.splitlines()[:4] == [
        "| set | head | greedy WER | beam 4 WER | beam 4 + LM WER |", "|---|---|---:|---:|---:|",
        "| clean (20) | ctc | 25.0% | 25.0% | 0.0% |", "| clean (20) | tdt | 50.0% | 50.0% | 25.0% |"]
    # batches of 16: 20 utterances are two calls per head and search
    assert [(n, head, beam) for n, head, beam, _ in model.calls[:6]] == [
        (16, "ctc", None), (4, "ctc", None), (16, "ctc", 4), (4, "ctc", 4), (16, "ctc", 4), (4, "ctc", 4)]
    assert model.calls[4][3] is lm and model.calls[2][3] is None


def test_the_shipped_lm_is_the_domain_3gram():
    lm = NgramLM.from_arpa(str(ev.DOMAIN_LM))
    assert lm.max_order == 3 and {"march", "o'clock", "hundred", "thousand"} <= set(lm.words)
