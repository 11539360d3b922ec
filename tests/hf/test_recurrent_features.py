"""Every search mode, step search and ``beamsearch decode --model hf:DIR`` over recurrent and
hybrid models (tiny random-weight configs of ``tests/hf/test_recurrent.py``; grammars, catalogues and
exact search: ``tests/hf/test_recurrent_constraints.py``): a state-space model
(Mamba), a hybrid of linear and full attention (Qwen3.5) and a model whose state is outside a
``Cache`` (RWKV). Oracle: the same search over a step that runs each row's whole prefix through
the model at every call, no cache (so nothing is carried, reordered or joined)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")
pytest.importorskip("tokenizers")

from beamsearch import (  # noqa: E402
    beam_search_batch,
    constrained_beam_search,
    diverse_beam_search,
    step_search,
    stochastic_beam_search,
)
from beamsearch.cli import main  # noqa: E402
from beamsearch.hf import causal_lm, generate  # noqa: E402
from tests.corpus.test_hf_folder import LINES, SPECIAL, WORDS, alone, save_tokenizer  # noqa: E402
from tests.hf.test_recurrent import EOS, PROMPTS, build  # noqa: E402
from tests.hf.test_reward import Recompute  # noqa: E402

KINDS = ["mamba", "qwen3_5", "rwkv"]


COMMON = dict(eos_token_id=EOS, max_steps=3)
TWO = PROMPTS[:2]  # a long prompt and the shortest (padded)
SEARCHES = {
    "beam": lambda s, st, p: beam_search_batch(s, st, p, beam_size=3, n_best=3, **COMMON),
    "greedy": lambda s, st, p: beam_search_batch(s, st, p, beam_size=1, n_best=1, **COMMON),
    "diverse": lambda s, st, p: diverse_beam_search(s, st, p, num_groups=2, diversity_penalty=1.0, beam_size=4,
                                                    n_best=4, **COMMON),
    "stochastic": lambda s, st, p: stochastic_beam_search(s, st, p, k=3, seed=3, **COMMON),
    "constrained": lambda s, st, p: constrained_beam_search(s, st, p, constraints=[[[7, 8]]] * len(p), beam_size=3,
                                                            n_best=3, **COMMON),
}


def hypotheses(results):
    return [[(tuple(h.tokens), h.logprob) for h in getattr(r, "hypotheses", r)] for r in results]


def same(got, want):
    assert [[t for t, _ in r] for r in got] == [[t for t, _ in r] for r in want]
    assert [lp for r in got for _, lp in r] == pytest.approx([lp for r in want for _, lp in r], abs=1e-4)


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_mode_carries_the_state_as_full_recomputation_gives(kind, search):
    model = build(kind, eos_bias=2.0)
    dec = causal_lm(model, TWO, max_new_tokens=3)
    ref = Recompute(model)
    same(hypotheses(SEARCHES[search](dec.step, dec.init_state, dec.prompts)),
         hypotheses(SEARCHES[search](ref.step, ref.init_state(TWO), TWO)))


@pytest.mark.parametrize("kind", KINDS)
def test_step_search_copies_and_joins_partial_solutions_as_full_recomputation_gives(kind):
    """Step search keeps some rows of each round (``take_state``) and grows them again: the
    recurrent states copied out must be the rows' own."""
    model = build(kind, eos_bias=1.0)
    args = dict(scorer=lambda prompts, sols: [float(sum(s) % 7) for s in sols], n=4, m=2, rounds=2, expansion="beam",
                eos_token_id=EOS, max_steps=3, stop_sequences=[[7]])
    dec = causal_lm(model, TWO)
    got = step_search(dec.step, dec.init_state, dec.prompts, **args)
    ref = Recompute(model)
    want = step_search(ref.step, ref.init_state(TWO), TWO, **args)
    same(hypotheses(got), hypotheses(want))
    assert [[h.segments for h in r] for r in got] == [[h.segments for h in r] for r in want]


def saved(kind, folder):
    """A tiny model of ``kind`` with the words' vocabulary, saved with its tokenizer in ``folder``."""
    ids = dict(vocab_size=len(SPECIAL + WORDS), bos_token_id=2, eos_token_id=3, pad_token_id=0)
    torch.manual_seed(0)
    if kind == "mamba":
        model = transformers.MambaForCausalLM(transformers.MambaConfig(
            **ids, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=4))
    else:
        model = transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(
            **ids, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, linear_conv_kernel_dim=4, linear_key_head_dim=8,
            linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
            layer_types=["linear_attention", "full_attention"]))
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)  # searches disagree
    model.save_pretrained(folder)
    save_tokenizer(folder)
    return folder


@pytest.mark.parametrize("kind", ["mamba", "qwen3_5"])
def test_decode_hf_dir_refills_and_equals_each_line_alone(kind, tmp_path):
    """``beamsearch decode --model hf:DIR`` with two lines in flight at a time (refill: the later
    lines join the search mid-way), each line's hypotheses those of the line alone."""
    folder = saved(kind, tmp_path / kind)
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert main(["decode", "--model", f"hf:{folder}", "--input", str(src), "--output", str(out), "--beam-size", "2",
                 "--n-best", "2", "--max-steps", "5", "--max-rows", "4"]) == 0
    records = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert [r["index"] for r in records] == list(range(len(LINES)))
    for r in records:
        got = [(h["tokens"], h["logprob"]) for h in r["nbest"]]
        want = alone(folder, r["input"], beam_size=2, n_best=2, max_steps=5, length_penalty="power", alpha=1.0)
        assert [g[0] for g in got] == [w[1] for w in want]
        assert np.allclose([g[1] for g in got], [w[2] for w in want], atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_a_shared_prompt_cache_is_refused_with_the_reason(kind):
    """A recurrent state per row has no prompt part every beam could read: refused, saying so."""
    model = build(kind)
    with pytest.raises(ValueError, match=r"share_prompt_cache=True .* holds a recurrent state per row"):
        generate(model, PROMPTS, num_beams=2, max_new_tokens=2, share_prompt_cache=True)
