"""`beamsearch decode --model hf:DIR` with every registered mode, on a tiny random-weight GPT-2 and
BART saved with save_pretrained (a WordLevel tokenizer built here that holds "\\n\\n", nothing
downloaded). Oracles: ``beamsearch.hf.generate`` with the same mode on the same lines (the mode's
defaults read from the same generation config), and ``model.generate`` itself for
``--mode transformers``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from beamsearch import hf  # noqa: E402
from beamsearch.cli import main  # noqa: E402
from beamsearch.modes.registry import MODES  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "and", "then", "slept", "by", "door",
         "\n\n"]
SPECIAL = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]  # ids 0..3
LINES = ["the cat sat on a mat", "dog ran"]
SCORER = '''def score(prompts, partial_solutions):
    """Each candidate's share of the token 4 ("the") in its partial solution."""
    return [sum(t == 4 for t in s) / len(s) for s in partial_solutions]
'''


def save_tokenizer(folder):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.WordLevel({w: i for i, w in enumerate(SPECIAL + WORDS)}, unk_token="[UNK]"))
    inner.pre_tokenizer = pre_tokenizers.Split(Regex(" "), behavior="removed")  # "\n\n" is a word
    PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                            eos_token="[EOS]").save_pretrained(folder)


def save_model(folder, kind, **generation):
    """The model with seeded random weights, its generation config the config class's own (no
    num_beams: generate decodes greedily) with ``generation`` set on it."""
    torch.manual_seed(3)
    ids = dict(vocab_size=len(SPECIAL + WORDS), pad_token_id=0, bos_token_id=2, eos_token_id=3)
    if kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_positions=320, n_embd=16, n_layer=2, n_head=2,
                                                                     **ids))
    else:  # forced_eos_token_id unset: decode does not apply it (it says so), hf.generate would
        model = transformers.BartForConditionalGeneration(transformers.BartConfig(
            d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=80, decoder_start_token_id=2,
            forced_eos_token_id=None, **ids))
    for name, value in generation.items():
        setattr(model.generation_config, name, value)
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return folder


@pytest.fixture(scope="module", params=["gpt2", "bart"])
def folder(request, tmp_path_factory):
    return save_model(tmp_path_factory.mktemp(request.param), request.param)


@pytest.fixture(scope="module")
def scorer_module(tmp_path_factory):
    where = tmp_path_factory.mktemp("scorer")
    (where / "share_of_the.py").write_text(SCORER)
    sys.path.insert(0, str(where))
    yield where
    sys.path.remove(str(where))
    sys.modules.pop("share_of_the", None)


def share_of_the(prompts, partial_solutions):
    return [sum(t == 4 for t in s) / len(s) for s in partial_solutions]


# each mode's own options (the ones it needs), as flags and as hf.generate's keywords ("cat" is id 5)
OWN = {
    "constrained": (["--constraints", "cat"], dict(constraints=[[[5]]] * len(LINES))),
    "diverse": (["--num-groups", "2", "--diversity-penalty", "0.5", "--beam-size", "4"],
                dict(num_groups=2, diversity_penalty=0.5, num_beams=4)),
    "stochastic": (["--k", "3", "--seed", "7"], dict(k=3, seed=7)),
    "exact": (["--node-budget", "60"], dict(node_budget=60)),
    "step": (["--scorer", "share_of_the:score", "--n", "4", "--m", "2", "--rounds", "2", "--sample-seed", "1"],
             dict(scorer=share_of_the, n=4, m=2, rounds=2, sample_seed=1)),
}


def load(folder):
    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else transformers.AutoModelForCausalLM
    return (auto.from_pretrained(folder, local_files_only=True).eval(),
            transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True))


def decoded(folder, tmp_path, *flags, lines=LINES):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if out.exists():
        out.unlink()
    assert main(["decode", "--model", f"hf:{folder}", "--input", str(src), "--output", str(out), *flags]) == 0
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_decodes_as_hf_generate_runs_it(mode, folder, scorer_module, tmp_path, capsys):
    """No shared flag but --max-steps: the mode's defaults from the folder's generation config
    (the config sets no num_beams, so its num_beams 1 and length_penalty 1.0 are generate's
    defaults) equal hf.generate's for the same mode on the same lines."""
    flags, own = OWN.get(mode, ([], {}))
    records = decoded(folder, tmp_path, "--mode", mode, "--max-steps", "5", *flags)
    assert "does not take" not in capsys.readouterr().err
    model, tok = load(folder)
    # the lines as hf.generate's inputs (stochastic: line i gets the noise of input i of a search of them all)
    out = hf.generate(model, [tok(r["input"], add_special_tokens=False)["input_ids"] for r in records], mode=mode,
                      max_new_tokens=5, **own)
    for r, hyps in zip(records, out.hypotheses, strict=True):
        want = [(h.tokens, h.finished, h.logprob, h.score) for h in hyps]
        got = [(h["tokens"], h["finished"], h["logprob"], h["score"]) for h in r["nbest"]]
        assert [g[:2] for g in got] == [w[:2] for w in want], (mode, r["input"])
        # float sums over other padding differ in the last bits
        assert all(abs(g[2] - w[2]) < 1e-4 and abs(g[3] - w[3]) < 1e-4 for g, w in zip(got, want, strict=True)), mode
    if mode == "transformers":
        assert out.mode == "greedy"  # the config's one beam: generate's greedy decoding


def generate_itself(folder, text, **settings):
    model, tok = load(folder)
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, **settings)
    start = 1 if model.config.is_encoder_decoder else ids.shape[1]  # the decoder start token, or the prompt
    tokens = out[0, start:].tolist()
    return tokens[: tokens.index(3) + 1] if 3 in tokens else tokens


@pytest.mark.parametrize("beams", [None, 3])
def test_transformers_mode_runs_what_generate_runs(beams, tmp_path_factory, tmp_path):
    """A folder that sets no num_beams: generate decodes greedily, and so does --mode transformers
    (not a beam of 5 without length penalty); num_beams 3 there: its beam search."""
    for kind in ("gpt2", "bart"):
        folder = save_model(tmp_path_factory.mktemp(kind), kind, **({} if beams is None else {"num_beams": beams}))
        for r in decoded(folder, tmp_path, "--mode", "transformers", "--max-steps", "5"):
            assert r["nbest"][0]["tokens"] == generate_itself(folder, r["input"]), (kind, beams)


def test_an_explicit_beam_mode_is_a_beam_search(tmp_path_factory, tmp_path):
    """--mode beam on a folder with one beam: a beam search (the config's power length penalty
    1.0 in its scores), not turned into greedy decoding (whose score is the logprob)."""
    folder = save_model(tmp_path_factory.mktemp("gpt2"), "gpt2")
    for r in decoded(folder, tmp_path, "--mode", "beam", "--max-steps", "5"):
        h = r["nbest"][0]
        assert abs(h["score"] - h["logprob"] / len(h["tokens"])) < 1e-9
    for r in decoded(folder, tmp_path, "--max-steps", "5"):  # no --mode: the config's greedy decoding
        h = r["nbest"][0]
        assert h["score"] == h["logprob"]


def test_the_step_search_command_of_the_docs_runs_as_written(tmp_path_factory, tmp_path):
    """docs/step_search.md's command, its hf:DIR a GPT-2 folder and my_verifier a module in the
    working directory; the scorer's solutions come back ranked."""
    text = (Path(__file__).parents[2] / "docs" / "step_search.md").read_text(encoding="utf-8")
    command = re.search(r"\n    (beamsearch decode --model hf:DIR .*?)\n\n", text, re.S).group(1)
    folder = save_model(tmp_path_factory.mktemp("gpt2"), "gpt2")
    (tmp_path / "my_verifier.py").write_text(SCORER)
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n")
    command = command.replace("hf:DIR", f"hf:{folder}").replace("beamsearch decode", f"{sys.executable} -m beamsearch "
                                                                 "decode", 1)
    src = Path(__file__).parents[2] / "src"
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert done.returncode == 0, done.stderr
    records = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["input"] for r in records] == LINES
    for r in records:
        scores = [h["score"] for h in r["nbest"]]
        assert scores == sorted(scores, reverse=True) and len(scores) >= 1 and r["rounds"] >= 1


def test_settings_the_mode_does_not_take_are_named_not_refused(tmp_path_factory, tmp_path, scorer_module, capsys):
    """num_beams 4 and length_penalty 2.0 in the folder's config: --mode step takes neither; it
    runs, and one line on stderr names them (the user gave neither flag)."""
    folder = save_model(tmp_path_factory.mktemp("gpt2"), "gpt2", num_beams=4, length_penalty=2.0)
    capsys.readouterr()  # save_pretrained's progress
    records = decoded(folder, tmp_path, "--mode", "step", "--max-steps", "4", *OWN["step"][0])
    assert capsys.readouterr().err == (f"beamsearch: note: the generation config of hf:{folder} sets num_beams=4, "
                                       "length_penalty=2.0, which --mode step does not take\n")
    assert all(r["nbest"] for r in records)


def test_transformers_options_with_one_beam_are_named(tmp_path_factory, tmp_path, capsys):
    """--early-stopping is generate's beam search's; with the folder's one beam, --mode
    transformers is its greedy decoding: the flag is named on stderr, the outputs are greedy's."""
    folder = save_model(tmp_path_factory.mktemp("gpt2"), "gpt2")
    capsys.readouterr()
    records = decoded(folder, tmp_path, "--mode", "transformers", "--early-stopping", "never", "--max-steps", "5")
    assert capsys.readouterr().err == ("beamsearch: note: --mode transformers with one beam is generate's greedy "
                                       "decoding, which takes no --early-stopping\n")
    assert [r["nbest"][0]["tokens"] for r in records] == [generate_itself(folder, text) for text in LINES]
