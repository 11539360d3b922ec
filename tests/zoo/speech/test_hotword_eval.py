"""The hotwords table (beamsearch.zoo.speech.hotword_eval): its rare words are absent from the
training text, its prompts say and leave out the word, and each cell is a count of the outputs,
recounted here from what the model returned (a stand-in with hand-computed counts, and the shipped
model on a few espeak-ng utterances)."""

import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from beamsearch.speech import NgramLM
from beamsearch.zoo.speech import hotword_eval as hw
from beamsearch.zoo.speech.evaluate import DOMAIN_LM
from beamsearch.zoo.speech.synth import HELDOUT_VARIANTS, HELDOUT_VOICES
from beamsearch.zoo.speech.text import spoken_sentences

espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


def test_rare_words_are_absent_from_the_training_text():
    seen = {w for s in spoken_sentences(20000, 0) for w in s.split()}
    assert not set(hw.RARE_WORDS) & seen
    assert not set(hw.RARE_WORDS) & set(NgramLM.from_arpa(str(DOMAIN_LM)).words)


def test_prompts_say_the_word_and_leave_it_out_with_held_out_voices():
    chosen = hw.prompts(50, 3)
    assert chosen == hw.prompts(50, 3)
    for p in chosen:
        words = p.said.split()
        assert words.count(p.word) == 1 and p.word in hw.RARE_WORDS
        words.remove(p.word)
        assert p.unsaid == " ".join(words)
        base, variant = p.voice.split("+")
        assert base in HELDOUT_VOICES and variant in HELDOUT_VARIANTS
    with pytest.raises(ValueError, match="count must be >= 1; got 0"):
        hw.prompts(0, 0)


class StandIn:
    """Audio i "says" texts[i]. Without hotwords the rare words are dropped; with them, the CTC head
    hears every rare word and adds "oscar" to unsaid sentences that start with "meet"; the LM keeps
    only the first half of the rare words."""

    def __init__(self, texts):
        self.texts = texts

    def transcribe(self, audio, *, head, beam_size, lm, hotwords, hotword_weight):
        out = []
        for a in audio:
            words = self.texts[int(a[0])].split()
            if hotwords is None:
                words = [w for w in words if w not in hw.RARE_WORDS]
            elif lm is not None:
                words = [w for w in words if w not in hw.RARE_WORDS[6:]]
            if hotwords is not None and head == "ctc" and words[0] == "meet":
                words.insert(1, "oscar")
            out.append([SimpleNamespace(text=" ".join(words))])
        return out


def test_counts_of_a_stand_in_by_hand():
    said = ["meet alice at five", "friday march third", "monday march third", "call peter on may first"]
    unsaid = ["meet at five", "march third", "march third", "call on may first"]
    model = StandIn(said + unsaid)
    audio = [np.full(3, i, np.float32) for i in range(8)]
    lm = NgramLM.from_arpa(str(DOMAIN_LM))
    table, _ = hw.hotword_table(model, ["alice", "friday", "monday", "peter"], audio[:4], audio[4:], beam_size=4, lm=lm)
    # without hotwords: nothing recognized, nothing falsely. CTC with hotwords: all 4 said ("meet
    # alice" gets "oscar" too, still counted as alice); with LM the weekdays are lost: 2 of 4. False
    # alarms: "meet at five" becomes "meet oscar at five" on the CTC head only: 1 of 4.
    assert table.splitlines() == [
        "| head | search | recognized | recognized with hotwords | false alarms | false alarms with hotwords |",
        "|---|---|---:|---:|---:|---:|",
        "| ctc | beam 4 | 0/4 (0%) | 4/4 (100%) | 0/4 (0%) | 1/4 (25%) |",
        "| ctc | beam 4 + LM | 0/4 (0%) | 2/4 (50%) | 0/4 (0%) | 1/4 (25%) |",
        "| tdt | beam 4 | 0/4 (0%) | 4/4 (100%) | 0/4 (0%) | 0/4 (0%) |",
        "| tdt | beam 4 + LM | 0/4 (0%) | 2/4 (50%) | 0/4 (0%) | 0/4 (0%) |"]

    with pytest.raises(ValueError, match="rare, said and unsaid must be as long; got 3, 4, 4"):
        hw.hotword_table(model, ["alice", "friday", "monday"], audio[:4], audio[4:], lm=lm)


class Recorder:
    """The shipped model, its outputs kept by (head, with LM, with hotwords, the audio's ids)."""

    def __init__(self, model):
        self.model, self.seen = model, []

    def transcribe(self, audio, **options):
        found = self.model.transcribe(audio, **options)
        self.seen.append((options["head"], options["lm"] is not None, options["hotwords"], [id(a) for a in audio],
                          [h[0].text or "" for h in found]))
        return found


@espeak
def test_the_shipped_models_table_recounted():
    import torch

    from beamsearch.zoo.speech.recognizer import load
    from beamsearch.zoo.speech.synth import speak

    torch.set_num_threads(1)
    chosen = hw.prompts(3, 0)
    said = [speak(p.said, p.voice, p.speed, p.pitch) for p in chosen]
    unsaid = [speak(p.unsaid, p.voice, p.speed, p.pitch) for p in chosen]
    model = Recorder(load())
    table, _ = hw.hotword_table(model, [p.word for p in chosen], said, unsaid, beam_size=4, hotword_weight=3.0)
    assert len(model.seen) == 16  # 2 heads x (no LM, LM) x (said, unsaid) x (without, with hotwords), one batch each
    rows = {}
    for head, with_lm, hot, ids, texts in model.seen:
        assert hot is None or hot == list(hw.RARE_WORDS)
        is_said = ids == [id(a) for a in said]
        assert is_said or ids == [id(a) for a in unsaid]
        if is_said:
            hits = sum(p.word in t.split() for p, t in zip(chosen, texts, strict=True))
        else:
            hits = sum(any(w in t.split() for w in hw.RARE_WORDS) for t in texts)
        rows.setdefault((head, with_lm), []).append((not is_said, hot is not None, hits))
    for line in table.splitlines()[2:]:
        _, head, search, *cells, _ = line.split("|")
        counts = [int(c.strip().split("/")[0]) for c in cells]
        assert [n for *_, n in sorted(rows[head.strip(), "LM" in search])] == counts
