"""``hf.generate(catalogue=...)`` and ``beamsearch decode --catalogue FILE`` (issue 24).

Oracles: ``transformers``' own ``model.generate(num_beams=B, prefix_allowed_tokens_fn=...)`` with a
plain Python dict of prefixes (the way users constrain it), which ``mode="transformers"`` (its rule)
must reproduce; the library search with the :class:`Catalogue` processor on each line alone, which
every ``decode`` record must equal; and membership in the catalogue for every output.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from beamsearch import beam_search_batch, corpus
from beamsearch.cli import main
from beamsearch.processors import Catalogue

EOS_TOY = 2  # the toy corpus model: 0 pad, 1 bos, 2 eos, 3.. the letters a-f


def python_trie(entries, eos):
    """generated prefix -> allowed next tokens, by a plain walk of every entry."""
    trie = {}
    for e in map(tuple, entries):
        for j in range(len(e)):
            trie.setdefault(e[:j], set()).add(e[j])
        trie.setdefault(e, set()).add(eos)
    return {k: sorted(v) for k, v in trie.items()}


# ---- hf.generate ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=65, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=64,
                                  eos_token_id=64, pad_token_id=64)
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("beam", [4, 32])
def test_generate_rule_equals_transformers_generate(gpt2, beam, tmp_path):
    """mode="transformers" with catalogue= gives generate's sequences with a Python trie, for the
    catalogue as an array [M, L] with padding, as a saved file, as a text file and as lists."""
    import torch

    rng = np.random.default_rng(beam)
    items = rng.integers(0, 64, size=(300, 3))
    items[:40, 2] = -1  # 2-token entries, some of them prefixes of 3-token ones
    entries = [[int(t) for t in row if t >= 0] for row in items]
    trie = python_trie(entries, 64)
    prompts = torch.from_numpy(rng.integers(0, 64, size=(3, 10)))
    mask = torch.ones_like(prompts)
    ref = gpt2.generate(prompts, attention_mask=mask, num_beams=beam, num_return_sequences=2, max_new_tokens=4,
                        prefix_allowed_tokens_fn=lambda b, ids: trie.get(tuple(ids[10:].tolist()), [64]),
                        do_sample=False, early_stopping=True)
    Catalogue(items, 64).save(tmp_path / "c.safetensors")
    (tmp_path / "c.txt").write_text("\n".join(" ".join(map(str, e)) for e in entries) + "\n")
    for given in (items, tmp_path / "c.safetensors", str(tmp_path / "c.txt"), entries):
        out = gpt2_generate(gpt2, prompts, mask, beam, given, "transformers")
        assert out.sequences.tolist() == ref.tolist()
    for hyps in gpt2_generate(gpt2, prompts, mask, beam, entries, "beam").hypotheses:
        assert len(hyps) == 2 and all(h.finished and tuple(h.tokens[:-1]) in trie and h.tokens[-1] == 64 for h in hyps)


def gpt2_generate(model, prompts, mask, beam, catalogue, mode):
    from beamsearch import hf

    return hf.generate(model, prompts, attention_mask=mask, num_beams=beam, num_return_sequences=2, max_new_tokens=4,
                       catalogue=catalogue, mode=mode, early_stopping=True)


def test_generate_catalogue_other_eos_and_errors(gpt2, tmp_path):
    """A Catalogue built with other eos ids is rebuilt on its trie with the search's; strings
    need the tokenizer; a file that is not a catalogue is refused."""
    import torch

    from beamsearch import hf

    prompts = torch.tensor([[1, 2, 3]])
    out = hf.generate(gpt2, prompts, num_beams=3, num_return_sequences=3, max_new_tokens=3,
                      catalogue=Catalogue([[5, 6], [7], [5, 8]], 0))
    assert sorted(tuple(h.tokens) for h in out.hypotheses[0]) == [(5, 6, 64), (5, 8, 64), (7, 64)]
    with pytest.raises(ValueError, match="catalogue= given as strings needs the model's tokenizer"):
        hf.generate(gpt2, prompts, num_beams=2, max_new_tokens=3, catalogue=["ab"])
    (tmp_path / "bad.txt").write_text("1 2\nx y\n")
    with pytest.raises(ValueError, match=r"line 2 is not token ids"):
        hf.generate(gpt2, prompts, num_beams=2, max_new_tokens=3, catalogue=str(tmp_path / "bad.txt"))


# ---- beamsearch decode --catalogue -----------------------------------------------------------


TEXTS = ["hello", "a much longer line of text", "x", "beam search", "zz"]
ENTRIES = [[3, 4, 5], [3, 4], [6], [7, 8, 3, 3], [5, 5], [3, 4, 5]]  # a prefix entry, a repeat


def run(tmp_path, *argv):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    code = main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), *argv])
    return code, [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else None


@pytest.mark.parametrize("form", ["text", "safetensors"])
def test_decode_records_equal_the_search_alone(tmp_path, form):
    path = tmp_path / ("c.txt" if form == "text" else "c.safetensors")
    if form == "text":
        path.write_text("\n".join(" ".join(map(str, e)) for e in ENTRIES) + "\n\n")
    else:
        Catalogue(ENTRIES, 0).save(path)  # saved with another eos id: decode uses the model's
    code, records = run(tmp_path, "--catalogue", str(path), "--beam-size", "4", "--n-best", "3", "--max-rows", "8")
    assert code == 0 and [r["index"] for r in records] == list(range(len(TEXTS)))
    model = corpus.toy_model()
    allowed = {tuple(e) for e in ENTRIES}
    for r in records:
        assert r["nbest"] and all(h["finished"] and tuple(h["tokens"][:-1]) in allowed for h in r["nbest"])
        want = beam_search_batch(model.step, model.make_state([{"source": r["input"]}]), [[model.bos]],
                                 eos_token_id=EOS_TOY, beam_size=4, n_best=3, max_steps=model.max_steps,
                                 logits_processors=[Catalogue(ENTRIES, EOS_TOY)])[0]
        assert [h["tokens"] for h in r["nbest"]] == [h.tokens for h in want]
        assert [h["logprob"] for h in r["nbest"]] == pytest.approx([h.logprob for h in want], abs=1e-9)


def test_decode_catalogue_usage_errors(tmp_path, capsys):
    code, _ = run(tmp_path, "--catalogue", str(tmp_path / "missing.txt"))
    err = capsys.readouterr().err
    assert code != 0 and "catalogue" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    (tmp_path / "bad.txt").write_text("3 4\n2 3\n")  # the toy model's eos inside an entry
    code, _ = run(tmp_path, "--catalogue", str(tmp_path / "bad.txt"))
    err = capsys.readouterr().err
    assert code != 0 and "holds the eos id 2" in err and len(err.strip().splitlines()) == 1


def test_resume_refuses_a_changed_catalogue_file(tmp_path):
    """A run stopped by Ctrl-C resumes with the same catalogue file (equal to a clean run) and is
    refused once the file's bytes changed (the side file's header holds their CRC-32)."""
    from beamsearch.corpus import Line, decode_corpus, partial_path

    path = tmp_path / "c.txt"
    path.write_text("\n".join(" ".join(map(str, e)) for e in ENTRIES) + "\n")
    lines = [Line(i, t) for i, t in enumerate(TEXTS)]
    model = corpus.toy_model()
    step, calls = model.step, []

    def interrupted(state, y_prev):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return step(state, y_prev)

    model.step = interrupted
    out, clean = tmp_path / "out.jsonl", tmp_path / "clean.jsonl"
    with pytest.raises(corpus.Interrupted):
        decode_corpus(model, lines, str(out), beam_size=3, max_rows=6, catalogue=str(path))
    before = partial_path(out).read_bytes()
    path.write_text(path.read_text() + "8 8\n")
    with pytest.raises(corpus.OutputError, match=r"other options \(catalogue_crc32=\d+ there, \d+ here\)"):
        decode_corpus(corpus.toy_model(), lines, str(out), resume=True, beam_size=3, max_rows=6, catalogue=str(path))
    assert partial_path(out).read_bytes() == before
    path.write_text("\n".join(" ".join(map(str, e)) for e in ENTRIES) + "\n")
    decode_corpus(corpus.toy_model(), lines, str(out), resume=True, beam_size=3, max_rows=6, catalogue=str(path))
    decode_corpus(corpus.toy_model(), lines, str(clean), beam_size=3, max_rows=6, catalogue=str(path))
    assert out.read_bytes() == clean.read_bytes()


def test_generate_with_strings_and_the_models_tokenizer():
    """Strings encoded by the model's tokenizer (a byte-level BPE trained in
    tests/processors/test_grammar_tokenizers.py): a beam at least as wide as the catalogue returns every
    item, each decoded back to its string."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("llguidance")
    from beamsearch import hf
    from tests.processors.test_grammar_tokenizers import bpe

    tok = bpe()
    torch.manual_seed(1)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id)).eval()
    items = ['{"a":1}', '{"a":2}', '{"b":"xb"}', '"x":"a"', '{"a":12}', '{"a":1}']
    out = hf.generate(model, ['{"a', '"x'], tokenizer=tok, num_beams=8, num_return_sequences=5, max_new_tokens=16,
                      catalogue=items)
    for texts, hyps in zip(out.texts, out.hypotheses, strict=True):
        assert sorted(texts) == sorted(set(items)) and all(h.finished for h in hyps)


def test_generate_names_a_catalogue_that_is_not_one_and_warns_once_when_it_does_not_fit(gpt2):
    """catalogue= a generator, a dict, a set: a TypeError naming catalogue= and the value; the
    Catalogue's own refusals name catalogue (not its argument outputs). A catalogue whose longest
    entry (4 tokens, 5 with eos) does not fit max_new_tokens=3: one warning naming both numbers,
    and the outputs along that entry are its unfinished prefix (what the warning says)."""
    import warnings

    import torch

    from beamsearch import hf

    prompts = torch.tensor([[1, 2, 3]])
    for value, shown in (((e for e in [[1]]), "generator"), ({1: [2]}, "dict {1: [2]}"), ({(1, 2)}, "set {(1, 2)}")):
        with pytest.raises(TypeError, match=r"^catalogue= must be a Catalogue, a file path, token-id sequences, an "
                                            r"integer array \[M, L\] or strings \(in a list or tuple\); got "
                                            + re.escape(shown)):
            hf.generate(gpt2, prompts, num_beams=2, max_new_tokens=3, catalogue=value)
    with pytest.raises(TypeError, match=r"^catalogue\[0\]\[1\] must be an integer; got True of type bool$"):
        hf.generate(gpt2, prompts, num_beams=2, max_new_tokens=3, catalogue=[[3, True]])
    with pytest.raises(ValueError, match=r"^catalogue as an array \[M, L\] must have L >= 1 .*got shape \(3, 0\)$"):
        hf.generate(gpt2, prompts, num_beams=2, max_new_tokens=3, catalogue=np.zeros((3, 0), int))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = hf.generate(gpt2, prompts, num_beams=3, num_return_sequences=2, max_new_tokens=3,
                          catalogue=[[5, 6, 7, 8], [9]])
    assert [str(w.message) for w in seen] == [
        "the catalogue's longest entry has 4 tokens, 5 with its eos, but max_new_tokens is 3: an output that follows "
        "an entry of 3 tokens or more ends unfinished, cut to a prefix of it (not an entry); set max_new_tokens to at "
        "least 5"]
    assert sorted(tuple(h.tokens) for h in out.hypotheses[0]) == [(5, 6, 7), (9, 64)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        hf.generate(gpt2, prompts, num_beams=3, max_new_tokens=5, catalogue=[[5, 6, 7, 8], [9]])
    assert seen == []
