"""`beamsearch decode --regex PATTERN / --grammar FILE / --json-schema FILE` and
``decode_records(regex=, grammar=, json_schema=)``: the toy model (its letters), an hf: GPT-2
folder with a byte-level BPE trained here (nothing downloaded), and a zoo model. Oracles: every
finished output is accepted by an independent parser (re.fullmatch, a lark parser, json.loads +
jsonschema), and every record equals the library search with the Grammar processor on that line
alone (beam_search_batch and the other modes' functions)."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("llguidance")

from beamsearch import (  # noqa: E402
    beam_search_batch,
    corpus,  # noqa: E402
    diverse_beam_search,
    exact_search,
)
from beamsearch.cli import main  # noqa: E402
from beamsearch.corpus import Line, decode_records  # noqa: E402
from beamsearch.processors import Grammar  # noqa: E402
from oracles.grammar import lark_parser  # noqa: E402

TEXTS = ["hello", "a much longer line of text", "x", "beam search", "zz", "fine"]
REGEX = r"(ab|c)+d?"
LARK = 'start: "ab" ("c" | "de")* "f"?\n'


def read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def run(tmp_path, *argv, model="_toy", texts=TEXTS):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    code = main(["decode", "--model", model, "--input", str(src), "--output", str(out), *argv])
    return code, read(out) if out.exists() else None


def toy_alone(fn, text, grammar, **kwargs):
    """One line through the library search alone, with the Grammar processor."""
    model = corpus.toy_model()
    hyps = fn(model.step, model.make_state([{"source": text}]), [[model.bos]], eos_token_id=model.eos,
              logits_processors=[grammar], **kwargs)[0]
    return [{"text": model.text(h.tokens), "tokens": h.tokens, "logprob": h.logprob, "score": h.score,
             "finished": h.finished} for h in hyps]


def toy_grammar(kind, source):
    return Grammar(kind, source, list(corpus.toy_model().tokenizer), eos_token_id=corpus.toy_model().eos)


@pytest.mark.parametrize("flag, kind, accepts", [("--regex", "regex", lambda t: re.fullmatch(REGEX, t) is not None),
                                                 ("--grammar", "lark", lark_parser(LARK))])
@pytest.mark.parametrize("mode", ["beam", "diverse", "exact"])
def test_toy_records_are_accepted_and_equal_the_search_alone(tmp_path, flag, kind, accepts, mode):
    source = REGEX if kind == "regex" else LARK
    value = source
    if flag == "--grammar":
        value = str(tmp_path / "g.lark")
        (tmp_path / "g.lark").write_text(source, encoding="utf-8")
    sizes = {"beam": ["--beam-size", "3", "--n-best", "2", "--max-rows", "6"],  # two lines at a time: refill
             "diverse": ["--beam-size", "4", "--n-best", "2", "--num-groups", "2", "--diversity-penalty", "1"],
             "exact": ["--n-best", "2", "--node-budget", "2000"]}[mode]
    code, records = run(tmp_path, "--mode", mode, flag, value, "--max-steps", "10", *sizes)
    assert code == 0 and [r["index"] for r in records] == list(range(len(TEXTS)))
    fn, kw = {"beam": (beam_search_batch, {"beam_size": 3}),
              "diverse": (diverse_beam_search, {"beam_size": 4, "num_groups": 2, "diversity_penalty": 1.0}),
              "exact": (exact_search, {"node_budget": 2000})}[mode]
    grammar = toy_grammar(kind, source)
    plain = [toy_alone(beam_search_batch, t, toy_grammar("regex", "[a-f]*"), beam_size=3, max_steps=10)[0]["text"]
             for t in TEXTS]
    assert not all(accepts(t) for t in plain)  # the grammar changes the outputs
    for r in records:
        assert r["nbest"] and all(h["finished"] and accepts(h["text"]) for h in r["nbest"])
        want = toy_alone(fn, r["input"], grammar, n_best=2, max_steps=10, **kw)
        assert [(h["tokens"], h["finished"]) for h in r["nbest"]] == [(h["tokens"], h["finished"]) for h in want]
        for g, w in zip(r["nbest"], want, strict=True):
            assert g["logprob"] == pytest.approx(w["logprob"], abs=1e-9)
            assert g["score"] == pytest.approx(w["score"], abs=1e-9)


def test_decode_records_takes_the_grammar_by_name_and_refuses_a_model_without_tokenizer():
    model = corpus.toy_model()
    got = next(decode_records(model, [Line(0, "hello")], regex=REGEX, beam_size=3, n_best=3))["nbest"]
    assert got == toy_alone(beam_search_batch, "hello", toy_grammar("regex", REGEX), beam_size=3, n_best=3,
                            max_steps=model.max_steps)

    class NoTokenizer(corpus.CorpusModelBase):
        bos, eos, max_steps = 1, 2, 4
        problem, make_state, step, tokens, text = model.problem, model.make_state, model.step, model.tokens, model.text

    with pytest.raises(ValueError, match="regex needs a model with a tokenizer the grammar can read"):
        next(decode_records(NoTokenizer(), [Line(0, "hello")], regex=REGEX))


@pytest.mark.parametrize("argv, message", [
    (["--grammar", "/nonexistent/g.lark"], "--grammar /nonexistent/g.lark: cannot read it: No such file or directory"),
    (["--json-schema", "BAD_JSON"], "--json-schema is not valid JSON text: Expecting value"),
    (["--json-schema", "LIST_JSON"], "--json-schema must be a JSON object"),
    (["--json-schema", "BAD_SCHEMA"], "--json-schema is refused by the grammar engine: "),
    (["--json-schema", "NOT_UTF8"], "--json-schema NOT_UTF8: not UTF-8 (byte 1)"),
    (["--grammar", "BAD_LARK"], "--grammar is refused by the grammar engine: 1(9): Expected token ')'"),
    (["--regex", "a("], "--regex is refused by the grammar engine: at 1(8): invalid regex \"a(\" (in regex): "
                        "unclosed group"),
    (["--regex", r"[^\s\S]"], "--regex '[^\\\\s\\\\S]' allows no output: its language is empty"),
    (["--json-schema", "DEEP"], "--json-schema is nested more than 127 levels deep (objects and arrays); the grammar "
                                "engine reads at most 127"),
    (["--json-schema", "X_GUIDANCE"],
     "--json-schema has an x-guidance that is not an object (the grammar engine's JSON options"),
    (["--regex", "a", "--grammar", "GOOD_LARK"], "--json-schema, --grammar and --regex exclude each other: give "
                                                 "one; given: --grammar, --regex"),
])
def test_grammar_usage_errors_exit_2_on_one_line(tmp_path, capsys, argv, message):
    files = {"BAD_JSON": b'{"type": ', "LIST_JSON": b"[1]", "BAD_SCHEMA": b'{"type": "bogus"}', "NOT_UTF8": b"{\xff}",
             "BAD_LARK": b"start: (\n", "GOOD_LARK": LARK.encode(), "X_GUIDANCE": b'{"x-guidance": 5}',
             "DEEP": b'{"type":"array","items":' * 2999 + b'{"type":"integer"}' + b"}" * 2999}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    argv = [str(tmp_path / a) if a in files else a for a in argv]
    code, records = run(tmp_path, *argv)
    err = capsys.readouterr().err
    assert code == 2 and records is None
    assert message.replace("NOT_UTF8", str(tmp_path / "NOT_UTF8")) in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_resume_compares_the_grammar(tmp_path, capsys, monkeypatch):
    """A run interrupted after its first lines keeps a side file whose header holds the regex: a
    resume with another regex or none is refused, one with the same gives the uninterrupted output."""
    argv = ["--beam-size", "2", "--max-rows", "2", "--regex", REGEX]
    (tmp_path / "whole").mkdir()
    code, whole = run(tmp_path / "whole", *argv)
    assert code == 0
    read_lines = corpus.read_lines

    def interrupted(*args, **kwargs):
        for line in read_lines(*args, **kwargs):
            if line.index == 3:
                raise KeyboardInterrupt
            yield line

    monkeypatch.setattr(corpus, "read_lines", interrupted)
    assert run(tmp_path, *argv)[0] == 130
    monkeypatch.setattr(corpus, "read_lines", read_lines)
    assert corpus.partial_path(tmp_path / "out.jsonl").exists()
    capsys.readouterr()
    for other, shown in [(["--regex", "c+"], "--regex='(ab|c)+d?' there, 'c+' here"),
                         ([], "--regex='(ab|c)+d?' there, None here")]:
        assert run(tmp_path, "--resume", "--beam-size", "2", "--max-rows", "2", *other)[0] == 2
        err = capsys.readouterr().err
        assert "was written with other options" in err and shown in err, err
    code, resumed = run(tmp_path, "--resume", *argv)
    assert code == 0 and resumed == whole


@pytest.fixture(scope="module")
def gpt2_bpe_dir(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tests.processors.test_grammar_tokenizers import bpe

    folder = tmp_path_factory.mktemp("gpt2bpe")
    tok = bpe()
    torch.manual_seed(3)
    config = transformers.GPT2Config(vocab_size=len(tok) + 4, n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                     bos_token_id=tok.eos_token_id)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_hf_json_schema_records_are_valid_json_and_equal_the_search_alone(tmp_path, gpt2_bpe_dir):
    import jsonschema
    import transformers

    from beamsearch import hf
    from tests.processors.test_grammar_tokenizers import SCHEMA

    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    lines = ['{"a":1}', '{"b"', "x", '{"a":2,"b":"xb"}']
    code, records = run(tmp_path, "--json-schema", str(tmp_path / "schema.json"), "--beam-size", "4", "--n-best",
                        "3", "--max-steps", "16", "--max-rows", "8", "--length-penalty", "gnmt", "--alpha", "0.6",
                        model=f"hf:{gpt2_bpe_dir}", texts=lines)
    assert code == 0 and [r["input"] for r in records] == lines
    tok = transformers.AutoTokenizer.from_pretrained(gpt2_bpe_dir, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(gpt2_bpe_dir, local_files_only=True).eval()
    grammar = Grammar.json_schema(SCHEMA, tok)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for r in records:
        assert r["nbest"] and all(h["finished"] and validator.is_valid(json.loads(h["text"])) for h in r["nbest"])
        dec = hf.causal_lm(model, [tok(r["input"], add_special_tokens=False)["input_ids"]], max_new_tokens=16)
        want = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, beam_size=4,
                                 n_best=3, max_steps=16, logits_processors=[grammar])[0]
        assert [h["tokens"] for h in r["nbest"]] == [h.tokens for h in want]
        assert [h["text"] for h in r["nbest"]] == [tok.decode(h.tokens, skip_special_tokens=True) for h in want]
        # a batch of two lines against one alone: padded attention rounds in the last bits
        assert [h["logprob"] for h in r["nbest"]] == pytest.approx([h.logprob for h in want], abs=1e-4)


def test_zoo_model_with_a_regex_over_its_characters(tmp_path):
    pytest.importorskip("torch")
    from beamsearch.zoo.corpus_model import zoo_model

    pattern = r"19[0-9]{2}-0[1-9]-[0-2][0-9]"
    texts = ["march 3, 1987", "the fourth of july 1999"]  # dates the pattern allows: the verdict keeps them
    code, records = run(tmp_path, "--regex", pattern, "--beam-size", "3", "--n-best", "2", model="seq2seq",
                        texts=texts)
    assert code == 0
    model = zoo_model("seq2seq")
    grammar = Grammar.regex(pattern, model.tokenizer, eos_token_id=model.eos)
    for r in records:
        assert all(h["finished"] and re.fullmatch(pattern, h["text"]) for h in r["nbest"])
        want = beam_search_batch(model.step, model.make_state([{"source": r["input"]}]), [[model.bos]],
                                 eos_token_id=model.eos, beam_size=3, n_best=2, max_steps=model.max_steps,
                                 logits_processors=[*model.processors, grammar])[0]
        assert [h["tokens"] for h in r["nbest"]] == [h.tokens for h in want]
        assert [h["logprob"] for h in r["nbest"]] == pytest.approx([h.logprob for h in want], abs=1e-5)


def test_trace_draws_the_grammar_constrained_search(tmp_path):
    """``decode --regex ... --trace``: the page is the search the record came from (its best node
    is the record's best output, accepted by the pattern), not an unconstrained one."""
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    out, page = tmp_path / "out.jsonl", tmp_path / "tree.html"
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--regex", REGEX,
                 "--max-steps", "10", "--beam-size", "3", "--trace", str(page), "--trace-input", "1"]) == 0
    record = [json.loads(x) for x in out.read_text().splitlines()][1]
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    tree, greedy = corpus.trace_line(corpus.toy_model(), TEXTS[1], beam_size=3, max_steps=10, regex=REGEX)
    assert tree.tokens(tree.best(0)) == record["nbest"][0]["tokens"]
    assert re.fullmatch(REGEX, record["nbest"][0]["text"])
    plain, _ = corpus.trace_line(corpus.toy_model(), TEXTS[1], beam_size=3, max_steps=10)
    assert plain.tokens(plain.best(0)) != record["nbest"][0]["tokens"]  # the grammar changed the drawn search
