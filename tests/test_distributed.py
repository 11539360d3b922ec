"""beamsearch.distributed: corpus decoding on a local Ray cluster of 2 workers equals the
single-process run (beamsearch.corpus.decode_records), records in input order, errors included.

The Ray tests share one local cluster (2 CPUs, small object store, no dashboard) started once for
the module; they are skipped, with the reason, when ray is not installed (the ``ray`` extra).
The checks of bad arguments need no ray: they are raised before Ray is started.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from beamsearch import beam_search_batch
from beamsearch.corpus import Line, decode_records, read_lines, toy_model
from beamsearch.distributed import decode_ray, load_model, write_records

try:
    import torch
except ImportError:  # pragma: no cover - numpy-only installs
    torch = None

# good lines, an empty one, CRLF, an emoji (outside the toy vocabulary), an over-long line (> 40
# characters), a line that is not UTF-8, and repeats so that batches of 3 mix good and bad lines
TOY_FILE = (b"hello\r\n\nworld \xf0\x9f\x98\x80\nbeam search\r\n" + b"x" * 41 + b"\n\xff\xfe bytes\n"
            + b"".join(b"line %d\n" % i for i in range(14)) + b"last, no newline")
DATE_TEXTS = ["march 3 '87", "03/03/87", "7 DEC '53", "june 14 '13", "3rd of March 1987", "not a date at all",
              "2001-12-31", "Tuesday, the 4th of July 1776", "", "12.10.1999", "31 feb 2003", "aug 9 \U0001F600",
              "the nineteenth of november, two thousand and four", "1999", "Sept 30 1950", "05-06-2007"]


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def by_index(records):
    return sorted(records, key=lambda r: r["index"])


def test_toy_corpus_on_two_workers_equals_the_single_process_run(cluster):
    model = toy_model()
    search = dict(beam_size=3, n_best=2, max_rows=6)
    got = decode_ray("_toy", read_lines(io.BytesIO(TOY_FILE)), num_workers=2, batch_size=3, **search)
    assert cluster.is_initialized()  # the module's cluster was used, not shut down
    want = by_index(decode_records(model, read_lines(io.BytesIO(TOY_FILE)), **search))
    # the same records, in input order; floats bit for bit: the toy model computes each row alone
    # (tests/approx.py), the workers run on this machine's numpy, and JSON round-trips floats
    assert got == want
    assert [r["index"] for r in got] == list(range(21))
    assert [r.get("error") for r in got[:6]] == [
        None, "empty text", "characters outside the vocabulary: '😀'", None,
        "41 characters; the model reads at most 40", "line is not UTF-8 (byte 0)"]
    assert got[0]["input"] == "hello" and got[3]["input"] == "beam search"  # CRLF removed
    # the oracle independent of refill and Ray: each good line decoded alone by beam_search_batch
    for r in got:
        if "error" in r:
            continue
        alone = beam_search_batch(model.step, model.make_state([{"source": r["input"]}]), [[model.bos]], beam_size=3,
                                  n_best=2, eos_token_id=model.eos, max_steps=model.max_steps)[0]
        assert [h["tokens"] for h in r["nbest"]] == [h.tokens for h in alone], r["input"]
        np.testing.assert_allclose([h["logprob"] for h in r["nbest"]], [h.logprob for h in alone], rtol=0, atol=1e-12)


def test_decode_ray_command_writes_what_the_single_process_command_writes(cluster, tmp_path):
    # `beamsearch decode --ray` on the running local cluster: the same file, byte for byte, and the
    # same exit status (1: the file has bad lines)
    from beamsearch.cli import main

    src = tmp_path / "in.txt"
    src.write_bytes(TOY_FILE)
    alone, spread = tmp_path / "alone.jsonl", tmp_path / "ray.jsonl"
    common = ["decode", "--model", "_toy", "--input", str(src), "--beam-size", "3", "--n-best", "2"]
    assert main([*common, "--output", str(alone)]) == 1
    assert main([*common, "--output", str(spread), "--ray", "--ray-workers", "2", "--ray-batch", "4"]) == 1
    assert spread.read_bytes() == alone.read_bytes()
    assert cluster.is_initialized()


def test_order_follows_the_lines_given_not_their_batches(cluster):
    # lines given out of index order come back in the order given (batches of 1 finish in any order)
    lines = [Line(5, "five"), Line(2, "two"), Line(9, ""), Line(0, "zero")]
    got = decode_ray("_toy", lines, num_workers=2, batch_size=1, beam_size=2, max_rows=4)
    assert [r["index"] for r in got] == [5, 2, 9, 0]
    assert got == [r for i in [5, 2, 9, 0] for r in decode_records(toy_model(), lines, beam_size=2, max_rows=4)
                   if r["index"] == i]


def test_a_grammar_reaches_every_worker(cluster):
    """decode_ray(regex=...): every worker builds the grammar over its own copy of the model's
    tokenizer; the records are the single-process run's, and every output matches the pattern."""
    pytest.importorskip("llguidance")
    import re

    pattern = r"(ab|c)+d?"
    lines = [Line(i, t) for i, t in enumerate(["hello", "beam search", "x", "a longer line", "zz"])]
    search = dict(beam_size=3, n_best=2, max_steps=10, regex=pattern)
    got = decode_ray("_toy", lines, num_workers=2, batch_size=2, **search)
    assert got == by_index(decode_records(toy_model(), lines, **search))
    assert all(re.fullmatch(pattern, h["text"]) for r in got for h in r["nbest"] if h["finished"])
    assert all(r["nbest"][0]["finished"] for r in got)


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_dates_model_on_two_workers_equals_the_single_process_run(cluster):
    pytest.importorskip("safetensors")
    lines = [Line(i, t) for i, t in enumerate(DATE_TEXTS)]
    search = dict(beam_size=3, n_best=2, max_rows=9)
    got = decode_ray("seq2seq", lines, num_workers=2, batch_size=5, threads=1, **search)
    torch.set_num_threads(1)
    want = by_index(decode_records(load_model("seq2seq", threads=1), lines, **search))
    assert [r["index"] for r in got] == list(range(len(DATE_TEXTS)))
    # the unreadable lines fail, and so do those translate answers with no date (the zoo's verdict)
    assert all("error" in r for r in got if r["input"] in ("", "aug 9 \U0001F600"))
    assert sum("nbest" in r for r in got) >= 8  # 03/03/87 is refused: the model cannot tell its century
    assert [r.get("error") for r in got] == [r.get("error") for r in want]
    for g, w in zip(got, want, strict=True):
        if "error" in g:
            continue
        assert [h["tokens"] for h in g["nbest"]] == [h["tokens"] for h in w["nbest"]], g["input"]
        assert [(h["text"], h["finished"]) for h in g["nbest"]] == [(h["text"], h["finished"]) for h in w["nbest"]]
        # a batch pads its encoder memory to its own longest source: float sums differ in the last
        # bits between batch compositions (docs/corpus.md), so scores agree to 1e-4, not bit for bit
        np.testing.assert_allclose([h["logprob"] for h in g["nbest"]], [h["logprob"] for h in w["nbest"]], atol=1e-4)
        np.testing.assert_allclose([h["score"] for h in g["nbest"]], [h["score"] for h in w["nbest"]], atol=1e-4)


HF_WORDS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]
HF_LINES = ["the cat sat on a mat", "dog ran", "", "a zebra", "the dog ran far away", "cat", "mat on the cat", "a a a"]


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A random-weight GPT-2 (2 layers, width 16) and a WordLevel tokenizer, saved locally."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(HF_WORDS), n_positions=64, n_embd=16, n_layer=2, n_head=2,
                                     bos_token_id=2, eos_token_id=3, pad_token_id=0)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    inner = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(HF_WORDS)}, unk_token="[UNK]"))
    inner.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token="[UNK]",
                                         bos_token="[BOS]", eos_token="[EOS]").save_pretrained(folder)
    return folder


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_hf_gpt2_on_two_workers_equals_the_single_process_run(cluster, gpt2_dir):
    lines = [Line(i, t) for i, t in enumerate(HF_LINES)]
    search = dict(beam_size=2, n_best=2, max_steps=5, max_rows=4)
    got = decode_ray(f"hf:{gpt2_dir}", lines, num_workers=2, batch_size=3, **search)
    want = by_index(decode_records(load_model(f"hf:{gpt2_dir}", hf_max_steps=5), lines, **search))
    assert [r["index"] for r in got] == list(range(len(HF_LINES)))
    assert [r.get("error") is not None for r in got] == [t in ("", "a zebra") for t in HF_LINES]  # empty, OOV
    assert [r.get("error") for r in got] == [r.get("error") for r in want]
    for g, w in zip(got, want, strict=True):
        if "error" not in g:  # fixed batches of other companions: left padding moves float sums' last bits
            assert [(h["tokens"], h["text"]) for h in g["nbest"]] == [(h["tokens"], h["text"]) for h in w["nbest"]]
            np.testing.assert_allclose([h["logprob"] for h in g["nbest"]], [h["logprob"] for h in w["nbest"]],
                                       atol=1e-4)


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_decode_ray_with_image_lines_writes_what_the_single_process_command_writes(cluster, tmp_path):
    """`beamsearch decode --jsonl --ray` on lines naming image files (absolute paths: each worker
    opens them itself), one unreadable and one without an image among them: the records of the
    single-process command, errors included, in input order; each worker's batches have other
    companions (left padding moves float sums' last bits), so scores agree to 1e-4."""
    for name in ("transformers", "tokenizers", "PIL.Image"):
        pytest.importorskip(name)
    from beamsearch.cli import main
    from tests.corpus.test_hf_media import FLAGS, images, save_llava

    model_dir = tmp_path / "llava"
    model_dir.mkdir()
    save_llava(model_dir)
    images(tmp_path)
    lines = [{"text": "<image> the cat", "image": str(tmp_path / "img0.png")}, {"text": "the cat sat"},
             {"text": "<image> a dog ran far", "image": str(tmp_path / "img1.png")},
             {"text": "<image> a", "image": str(tmp_path / "bad.png")},
             {"text": "<image> on a mat", "image": str(tmp_path / "img2.png")}]
    src, alone, spread = tmp_path / "in.jsonl", tmp_path / "alone.jsonl", tmp_path / "ray.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    common = ["decode", "--model", f"hf:{model_dir}", "--input", str(src), "--jsonl", *FLAGS]
    assert main([*common, "--output", str(alone)]) == 1  # the unreadable file's line
    assert main([*common, "--output", str(spread), "--ray", "--ray-workers", "2", "--ray-batch", "2"]) == 1
    got, want = ([json.loads(x) for x in f.read_text(encoding="utf-8").splitlines()] for f in (spread, alone))
    assert [r["index"] for r in got] == list(range(len(lines)))
    assert [r.get("error") for r in got] == [r.get("error") for r in want]
    assert got[3]["error"].startswith("cannot read image") and sum("nbest" in r for r in got) == 4
    for g, w in zip(got, want, strict=True):
        if "error" not in g:
            assert [(h["tokens"], h["text"], h["finished"]) for h in g["nbest"]] == \
                [(h["tokens"], h["text"], h["finished"]) for h in w["nbest"]]
            np.testing.assert_allclose([h["logprob"] for h in g["nbest"]], [h["logprob"] for h in w["nbest"]],
                                       atol=1e-4)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(num_workers=0), ValueError, "num_workers must be >= 1; got 0"),
    (dict(batch_size=1.5), TypeError, "batch_size"),
    (dict(address=6379), TypeError, "address must be a string"),
    (dict(beam_size=2, n_best=3), ValueError, "n_best must be <= beam_size=2; got 3"),
    (dict(max_steps=13), ValueError, "max_steps must be an integer in [1, 12]"),
    (dict(beam_size=3, max_rows=2), ValueError, "max_rows=2"),
    (dict(bogus=1), TypeError, "bogus"),
    (dict(model="nope"), ValueError, "model must be one of seq2seq, transformer, speech, a checkpoint folder or "
                                     "hf:DIR; got 'nope'"),
    (dict(model="hf:/no/such/folder"), ValueError, "model hf:/no/such/folder: '/no/such/folder' is not a folder"),
    (dict(model=None), TypeError, "model must be a string"),
    (dict(model="_toy:slow"), ValueError, "_toy:DELAY needs a number of seconds; got '_toy:slow'"),
    (dict(threads=0), ValueError, "threads must be >= 1; got 0"),
])
def test_bad_arguments_are_refused_before_ray_starts(kwargs, error, message, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # reaching Ray would raise ModuleNotFoundError instead
    kwargs = dict(kwargs)
    model = kwargs.pop("model", "_toy")
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        decode_ray(model, [Line(0, "hello")], **kwargs)


def test_duplicate_indices_are_refused():
    with pytest.raises(ValueError, match="unique indices"):
        decode_ray("_toy", [Line(0, "a"), Line(0, "b")])


def test_no_lines_need_no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert decode_ray("_toy", []) == []


def test_without_ray_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ModuleNotFoundError,
                       match=r"install the ray extra \(in the beamsearch checkout: pip install -e '\.\[ray\]'\)"):
        decode_ray("_toy", [Line(0, "hello")])


def test_checkpoint_folder_must_hold_one_model(tmp_path):
    message = r"the folder holds no checkpoint \(seq2seq.json, transformer.json\); it must hold exactly one"
    with pytest.raises(ValueError, match=message):
        load_model(str(tmp_path))


def test_write_records_in_the_order_given(tmp_path):
    records = [{"index": 1, "input": "b", "error": "empty text"},
               {"index": 0, "input": "é", "nbest": [{"text": "ab", "tokens": [3, 4, 2], "logprob": -0.1, "score": -0.2,
                                                      "finished": True}]}]
    out = tmp_path / "out.jsonl"
    assert write_records(records, out) == (2, 1)
    assert out.read_text("utf-8").splitlines() == [json.dumps(r, ensure_ascii=False) for r in records]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no temporary file left


def test_importable_without_ray_or_torch():
    code = "import sys, beamsearch.distributed; assert 'ray' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
