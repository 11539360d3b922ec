"""`beamsearch decode --model hf:DIR` on a tiny random-weight GPT-2 and BART, saved with
save_pretrained together with a WordLevel tokenizer built here (nothing downloaded). Oracle: each
line alone through beamsearch.hf (causal_lm / seq2seq_lm) + beam_search_batch, the tokens read
by the tokenizer and the texts written by it."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

# after the importorskip lines above: the module is skipped, not failed, without the hf extra
from beamsearch import beam_search_batch, hf  # noqa: E402
from beamsearch.cli import main  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "and", "then", "slept", "by", "door"]
SPECIAL = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]  # ids 0..3


def save_tokenizer(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                                  eos_token="[EOS]")
    tok.save_pretrained(folder)
    return tok


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(SPECIAL + WORDS), n_positions=128, n_embd=16, n_layer=2, n_head=2,
                                     bos_token_id=2, eos_token_id=3, pad_token_id=0)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    save_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bart")
    torch.manual_seed(1)
    config = transformers.BartConfig(vocab_size=len(SPECIAL + WORDS), d_model=16, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                     decoder_ffn_dim=32, max_position_embeddings=32, pad_token_id=0, bos_token_id=2,
                                     eos_token_id=3, decoder_start_token_id=2, forced_eos_token_id=None)
    transformers.BartForConditionalGeneration(config).save_pretrained(folder)
    save_tokenizer(folder)
    return folder


LINES = ["the cat sat on a mat", "dog ran", "a", "then the dog slept by the door and the cat ran far away"]


def alone(folder, text, *, beam_size, n_best, max_steps, **controls):
    """One line through beamsearch.hf and beam_search_batch alone (a batch of one)."""
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else transformers.AutoModelForCausalLM
    model = auto.from_pretrained(folder, local_files_only=True).eval()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    dec = (hf.seq2seq_lm if config.is_encoder_decoder else hf.causal_lm)(model, [ids], max_new_tokens=max_steps)
    hyps = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, beam_size=beam_size,
                             n_best=n_best, max_steps=max_steps, **controls)[0]
    return [(tok.decode(h.tokens, skip_special_tokens=True), h.tokens, h.logprob, h.score, h.finished) for h in hyps]


@pytest.mark.parametrize("kind", ["gpt2", "bart"])
def test_hf_decode_equals_each_line_alone(kind, gpt2_dir, bart_dir, tmp_path):
    folder = gpt2_dir if kind == "gpt2" else bart_dir
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\r\n".join(LINES[:2] + ["", "the unicorn sat"] + LINES[2:]) + "\n", encoding="utf-8")
    code = main(["decode", "--model", f"hf:{folder}", "--input", str(src), "--output", str(out), "--beam-size", "3",
                 "--n-best", "2", "--max-steps", "6", "--max-rows", "6", "--no-repeat-ngram-size", "2"])
    assert code == 1  # the empty line and the unknown word
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["index"] for r in records] == list(range(6))
    assert records[2]["error"] == "empty text"
    assert records[3]["error"] == "words outside the tokenizer's vocabulary"
    for r in (records[0], records[1], records[4], records[5]):
        got = [(h["text"], h["tokens"], h["logprob"], h["score"], h["finished"]) for h in r["nbest"]]
        # no --alpha / --length-penalty: the model's generation config's, transformers' power 1.0
        want = alone(folder, r["input"], beam_size=3, n_best=2, max_steps=6, no_repeat_ngram_size=2,
                     length_penalty="power", alpha=1.0)
        assert [g[:2] + (g[4],) for g in got] == [w[:2] + (w[4],) for w in want]
        # logprobs: the batch of 2 (fixed batches of max_rows // beam lines, padded) against one line
        # alone; float sums of padded attention differ in the last bits
        assert all(abs(g[2] - w[2]) < 1e-4 and abs(g[3] - w[3]) < 1e-4 for g, w in zip(got, want, strict=True))


def test_hf_decode_max_steps_from_token_length(gpt2_dir, tmp_path):
    # "len" is the line's token count: floor(1 * len + 1): "dog ran" 2 -> 3, "a" 1 -> 2
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("dog ran\na\n")
    assert main(["decode", "--model", f"hf:{gpt2_dir}", "--input", str(src), "--output", str(out), "--beam-size", "2",
                 "--max-steps", "len+1", "--return-token-logprobs"]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    for r, steps in zip(records, [3, 2], strict=True):
        want = alone(gpt2_dir, r["input"], beam_size=2, n_best=1, max_steps=steps, length_penalty="power", alpha=1.0)
        assert r["nbest"][0]["tokens"] == want[0][1] and len(r["nbest"][0]["tokens"]) <= steps
        assert abs(sum(r["nbest"][0]["token_logprobs"]) - r["nbest"][0]["logprob"]) < 1e-6


def test_hf_missing_folder_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a\n")
    assert main(["decode", "--model", f"hf:{tmp_path / 'nope'}", "--input", str(src), "--output", "-"]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_hf_causal_model_decodes_with_refill(gpt2_dir, bart_dir):
    """A causal LM's lines join the search in flight (mixed calls: cohorts at different steps in
    one model call) and each still gets its result alone (encoder-decoders: tests/hf/test_states.py)."""
    from beamsearch.corpus import hf_model
    from beamsearch.refill import decode_stream

    model = hf_model(gpt2_dir, max_steps=6)
    assert model.refill and hf_model(bart_dir).refill
    steps = [2, 6, 3, 6]  # line 0 stops first: line 2 joins line 1 in flight, then line 3
    items = [{"prompt": model.prompt(t), "source": t, "max_steps": s} for t, s in zip(LINES, steps, strict=True)]
    # min_new_tokens: this random model gives eos first; outputs of 2 or more tokens use the joined cache
    stream = decode_stream(model.step, model.make_state, items, max_rows=4, beam_size=2, n_best=2,
                           eos_token_id=model.eos, max_steps=6, min_new_tokens=2)
    got = {d.index: d.hypotheses for d in stream}
    assert stream.stats.mixed_calls > 0
    for i, (text, s) in enumerate(zip(LINES, steps, strict=True)):
        want = alone(gpt2_dir, text, beam_size=2, n_best=2, max_steps=s, min_new_tokens=2)
        assert all(len(w[1]) >= 2 for w in want)
        assert [(h.tokens, h.finished) for h in got[i]] == [(w[1], w[4]) for w in want]
        assert all(abs(h.logprob - w[2]) < 1e-4 and abs(h.score - w[3]) < 1e-4
                   for h, w in zip(got[i], want, strict=True))


# ---- the folder's generation config: decode's defaults (flags override it) --------------------------------------


def save_with_generation(folder, **settings):
    """The tiny GPT-2 of ``gpt2_dir`` (same seed, so the same weights), its generation config set
    to ``settings``, saved with save_pretrained (generation_config.json) and the tokenizer."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(SPECIAL + WORDS), n_positions=128, n_embd=16, n_layer=2, n_head=2,
                                     bos_token_id=2, eos_token_id=3, pad_token_id=0)
    model = transformers.GPT2LMHeadModel(config)
    for name, value in settings.items():
        setattr(model.generation_config, name, value)
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return folder


GENERATION = {"num_beams": 3, "length_penalty": 1.0, "max_new_tokens": 12, "no_repeat_ngram_size": 2}


@pytest.fixture(scope="module")
def gpt2_generation_dir(tmp_path_factory):
    return save_with_generation(tmp_path_factory.mktemp("gpt2gen"), **GENERATION)


def generated(folder, text, **overrides):
    """Oracle: ``hf.generate`` on the line alone, the model loaded as from_pretrained loads it (its
    saved generation config), as (tokens, finished, logprob)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    out = hf.generate(model, [tok(text, add_special_tokens=False)["input_ids"]], **overrides)
    return [(h.tokens, h.finished, h.logprob) for h in out.hypotheses[0]], out.settings


def decoded(folder, tmp_path, *flags, lines=LINES):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = main(["decode", "--model", f"hf:{folder}", "--input", str(src), "--output", str(out), *flags])
    assert code == 0
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]


def same_as_generate(records, folder, **overrides):
    for r in records:
        want, settings = generated(folder, r["input"], **overrides)
        got = [(h["tokens"], h["finished"], h["logprob"]) for h in r["nbest"]]
        assert [g[:2] for g in got] == [w[:2] for w in want], r["input"]
        # lines decoded together, padded, against one line alone: float sums differ in the last bits
        assert all(abs(g[2] - w[2]) < 1e-4 for g, w in zip(got, want, strict=True))
    return settings


def test_hf_decode_defaults_are_the_saved_generation_config(gpt2_generation_dir, tmp_path):
    """num_beams 3, power length penalty 1.0, max_new_tokens 12, no_repeat_ngram_size 2 from
    generation_config.json, with no search flag: each line's outputs are hf.generate's."""
    records = decoded(gpt2_generation_dir, tmp_path)
    settings = same_as_generate(records, gpt2_generation_dir)
    assert settings["beam_size"] == 3 and settings["max_steps"] == [12] and settings["no_repeat_ngram_size"] == 2
    # the config's settings are in force: a longer output than eos alone, at most 12 tokens, no 2-gram twice
    assert any(len(h["tokens"]) > 1 for r in records for h in r["nbest"])
    for h in (h for r in records for h in r["nbest"]):
        assert len(h["tokens"]) <= 12
        grams = list(zip(h["tokens"], h["tokens"][1:], strict=False))
        assert len(grams) == len(set(grams))


def test_hf_decode_flags_override_the_generation_config(gpt2_generation_dir, tmp_path):
    records = decoded(gpt2_generation_dir, tmp_path, "--beam-size", "2", "--max-steps", "5",
                      "--no-repeat-ngram-size", "0")
    same_as_generate(records, gpt2_generation_dir, num_beams=2, max_new_tokens=5, no_repeat_ngram_size=0)
    assert all(len(h["tokens"]) <= 5 for r in records for h in r["nbest"])


def test_hf_decode_num_beams_1_is_greedy_as_generate(gpt2_dir, tmp_path):
    """The plain fixture's config leaves num_beams at transformers' 1: generate decodes greedily,
    and so does decode (a beam of one may return a finished candidate greedy never takes)."""
    records = decoded(gpt2_dir, tmp_path, "--max-steps", "8")
    same_as_generate(records, gpt2_dir, max_new_tokens=8)
    records = decoded(gpt2_dir, tmp_path, "--max-steps", "8", "--beam-size", "1", "--mode", "greedy")
    same_as_generate(records, gpt2_dir, max_new_tokens=8)


def test_hf_decode_names_the_settings_it_does_not_apply(tmp_path, capsys):
    folder = save_with_generation(tmp_path / "m", num_beams=2, repetition_penalty=1.3)
    decoded(folder, tmp_path, "--max-steps", "3", lines=["dog ran"])
    capsys.readouterr()
    decoded(folder, tmp_path, "--max-steps", "3", lines=["dog ran"])  # the folder saved: stderr is decode's alone
    err = capsys.readouterr().err
    assert err == (f"beamsearch: note: the generation config of hf:{folder} sets repetition_penalty=1.3, which "
                   "decode does not apply\n")


def test_hf_decode_resume_is_refused_after_the_generation_config_changed(tmp_path, monkeypatch, capsys):
    """A run interrupted after its first records; the folder's generation config is then changed:
    --resume is refused, naming the resolved option that differs."""
    from beamsearch import corpus

    folder = save_with_generation(tmp_path / "m", **GENERATION)
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    argv = ["decode", "--model", f"hf:{folder}", "--input", str(src), "--output", str(out), "--max-rows", "3"]
    step, calls = corpus.hf_folder.HFModel.step, []

    def interrupted(self, state, y_prev):
        calls.append(1)
        if len(calls) > 30:
            raise KeyboardInterrupt
        return step(self, state, y_prev)

    monkeypatch.setattr(corpus.hf_folder.HFModel, "step", interrupted)
    assert main(argv) == 130
    monkeypatch.setattr(corpus.hf_folder.HFModel, "step", step)
    assert corpus.partial_path(out).read_text().count("\n") >= 2  # the header and a record at least
    save_with_generation(folder, **dict(GENERATION, num_beams=2))
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert "was written with other options (" in err and "--beam-size=3 there, 2 here" in err, err
    save_with_generation(folder, **GENERATION)
    assert main(argv + ["--resume"]) == 0  # the same config resumes
    same_as_generate([json.loads(x) for x in out.read_text().splitlines()], folder)


def test_hf_decode_help_says_where_defaults_come_from(capsys):
    assert main(["decode", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag, setting in [("--beam-size", "num_beams"), ("--n-best", "num_return_sequences"),
                          ("--alpha", "length_penalty"),
                          ("--no-repeat-ngram-size", "no_repeat_ngram_size"), ("--min-new-tokens", "min_new_tokens"),
                          ("--max-steps", "max_new_tokens")]:
        assert flag in text and f"generation config's {setting}" in text, flag
