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

from beamsearch import beam_search_batch  # noqa: E402
from beamsearch import hf  # noqa: E402
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


def alone(folder, text, *, beam, n_best, max_steps, **controls):
    """One line through beamsearch.hf and beam_search_batch alone (a batch of one)."""
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else transformers.AutoModelForCausalLM
    model = auto.from_pretrained(folder, local_files_only=True).eval()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    dec = (hf.seq2seq_lm if config.is_encoder_decoder else hf.causal_lm)(model, [ids], max_new_tokens=max_steps)
    hyps = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, beam_size=beam,
                             n_best=n_best, max_steps=max_steps, **controls)[0]
    return [(tok.decode(h.tokens, skip_special_tokens=True), h.tokens, h.logprob, h.score, h.finished) for h in hyps]


@pytest.mark.parametrize("kind", ["gpt2", "bart"])
def test_hf_decode_equals_each_line_alone(kind, gpt2_dir, bart_dir, tmp_path):
    folder = gpt2_dir if kind == "gpt2" else bart_dir
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\r\n".join(LINES[:2] + ["", "the unicorn sat"] + LINES[2:]) + "\n", encoding="utf-8")
    code = main(["decode", "--model", f"hf:{folder}", "--input", str(src), "--output", str(out), "--beam", "3",
                 "--n-best", "2", "--max-steps", "6", "--max-rows", "6", "--no-repeat-ngram", "2"])
    assert code == 1  # the empty line and the unknown word
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["index"] for r in records] == list(range(6))
    assert records[2]["error"] == "empty text"
    assert records[3]["error"] == "words outside the tokenizer's vocabulary"
    for r in (records[0], records[1], records[4], records[5]):
        got = [(h["text"], h["tokens"], h["logprob"], h["score"], h["finished"]) for h in r["nbest"]]
        want = alone(folder, r["input"], beam=3, n_best=2, max_steps=6, no_repeat_ngram_size=2)
        assert [g[:2] + (g[4],) for g in got] == [w[:2] + (w[4],) for w in want]
        # logprobs: the batch of 2 (fixed batches of max_rows // beam lines, padded) against one line
        # alone; float sums of padded attention differ in the last bits
        assert all(abs(g[2] - w[2]) < 1e-4 and abs(g[3] - w[3]) < 1e-4 for g, w in zip(got, want))


def test_hf_decode_max_steps_from_token_length(gpt2_dir, tmp_path):
    # "len" is the line's token count: floor(1 * len + 1): "dog ran" 2 -> 3, "a" 1 -> 2
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("dog ran\na\n")
    assert main(["decode", "--model", f"hf:{gpt2_dir}", "--input", str(src), "--output", str(out), "--beam", "2",
                 "--max-steps", "len+1", "--token-logprobs"]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    for r, steps in zip(records, [3, 2]):
        want = alone(gpt2_dir, r["input"], beam=2, n_best=1, max_steps=steps)
        assert r["nbest"][0]["tokens"] == want[0][1] and len(r["nbest"][0]["tokens"]) <= steps
        assert abs(sum(r["nbest"][0]["token_logprobs"]) - r["nbest"][0]["logprob"]) < 1e-6


def test_hf_missing_folder_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a\n")
    assert main(["decode", "--model", f"hf:{tmp_path / 'nope'}", "--input", str(src), "--output", "-"]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_hf_causal_model_decodes_with_refill(gpt2_dir, bart_dir):
    """A causal LM's lines join the search in flight (mixed calls: cohorts at different steps in
    one model call) and each still gets its result alone (encoder-decoders: tests/test_hf_refill.py)."""
    from beamsearch.refill import decode_stream
    from beamsearch.corpus import hf_model

    model = hf_model(gpt2_dir, max_steps=6)
    assert model.refill and hf_model(bart_dir).refill
    steps = [2, 6, 3, 6]  # line 0 stops first: line 2 joins line 1 in flight, then line 3
    items = [{"prompt": model.prompt(t), "source": t, "max_steps": s} for t, s in zip(LINES, steps)]
    # min_new_tokens: this random model gives eos first; outputs of 2 or more tokens use the joined cache
    stream = decode_stream(model.step, model.make_state, items, max_rows=4, beam_size=2, n_best=2,
                           eos_token_id=model.eos, max_steps=6, min_new_tokens=2)
    got = {d.index: d.hypotheses for d in stream}
    assert stream.stats.mixed_calls > 0
    for i, (text, s) in enumerate(zip(LINES, steps)):
        want = alone(gpt2_dir, text, beam=2, n_best=2, max_steps=s, min_new_tokens=2)
        assert all(len(w[1]) >= 2 for w in want)
        assert [(h.tokens, h.finished) for h in got[i]] == [(w[1], w[4]) for w in want]
        assert all(abs(h.logprob - w[2]) < 1e-4 and abs(h.score - w[3]) < 1e-4 for h, w in zip(got[i], want))
