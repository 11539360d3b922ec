"""Recurrent and hybrid ``transformers`` models through the adapter (small random weights, one core).

Twenty-nine causal LMs built from tiny configs: state-space (Mamba, Mamba2, FalconMamba), RNNs whose
state is outside a ``Cache`` (RWKV, xLSTM, RecurrentGemma), and hybrids of attention with
state-space, convolution or linear-attention layers (Jamba, Bamba, Zamba, Zamba2, Falcon-H1,
GraniteMoeHybrid, Nemotron-H, Qwen3-Next, Qwen3.5, Qwen3.5-MoE, LFM2, LFM2-MoE, LFM3, Kimi Linear,
MiniMax, Qwen4-Exp (indexed attention), Inkling, Inkling2 and Inkling2-Loop (windows of 4, shorter
than the sequences), LaraMini, OLMo-Hybrid, Zaya, Bailing-Hybrid): every recurrent or hybrid
``...ForCausalLM`` class ``transformers`` exports (the test below finds them). Oracles: ``generate``
itself, and a teacher-forced rescoring (one row, the whole sequence at once, no cache).

Where ``generate`` is not an oracle (transformers 5.25), it is run where it is right:
- RWKV's and xLSTM's beam search with a cache refuses ("the cache cannot be reordered");
  MiniMax's skips its ``linear_cache`` and RecurrentGemma's its recurrent blocks' states (they are
  not in the reordered layers): their beam searches run with ``use_cache=False`` (recomputed);
- RWKV, xLSTM and RecurrentGemma read no mask in their recurrence and MiniMax's decoding mask
  covers no padding (:data:`beamsearch.hf.recurrent.UNPADDED_TYPES`): ``generate`` runs each prompt
  alone for them;
- RWKV's one-token step broadcasts rows against each other when there are several: run alone.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")
T = transformers

from beamsearch.hf import causal_lm, generate  # noqa: E402
from beamsearch.hf.recurrent import UNPADDED_TYPES  # noqa: E402
from beamsearch.refill import decode_stream  # noqa: E402

V, PAD, BOS, EOS = 50, 0, 1, 3
PROMPTS = [[5, 17, 33, 8, 41], [9], [20, 2, 11, 12, 13, 14, 15]]
_IDS = dict(vocab_size=V, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
_BASE = dict(_IDS, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, tie_word_embeddings=False)
_MAMBA = dict(_IDS, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4, time_step_rank=4,
              intermediate_size=32)
_LINEAR = dict(head_dim=8, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
               linear_num_key_heads=2, linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"])
_MOE = dict(moe_intermediate_size=16, shared_expert_intermediate_size=16, num_experts_per_tok=1, num_experts=2)
_SSM = dict(mamba_n_heads=4, mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)
_ZAMBA = dict(layers_block_type=["linear_attention", "hybrid"], attention_hidden_size=64, attention_head_dim=16,
              mamba_d_state=4, mamba_d_conv=4, mamba_expand=2)
CONFIGS = {
    "mamba": lambda: T.MambaForCausalLM(T.MambaConfig(**_MAMBA)),
    "mamba2": lambda: T.Mamba2ForCausalLM(T.Mamba2Config(
        **_IDS, hidden_size=16, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4, num_heads=4, head_dim=8,
        n_groups=1, time_step_rank=4, chunk_size=8)),
    "falcon_mamba": lambda: T.FalconMambaForCausalLM(T.FalconMambaConfig(**_MAMBA)),
    "rwkv": lambda: T.RwkvForCausalLM(T.RwkvConfig(
        **_IDS, hidden_size=16, num_hidden_layers=2, attention_hidden_size=16, intermediate_size=32,
        context_length=64)),
    "xlstm": lambda: T.xLSTMForCausalLM(T.xLSTMConfig(  # the smallest: head sizes are rounded up to 64 in all
        **_IDS, hidden_size=128, embedding_dim=128, num_hidden_layers=1, num_blocks=1, num_heads=2, chunk_size=4)),
    # its attention window longer than any sequence here (a window shorter than the sequences:
    # tests/hf/test_states_sliding_refill.py)
    "recurrent_gemma": lambda: T.RecurrentGemmaForCausalLM(T.RecurrentGemmaConfig(
        **_IDS, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, lru_width=16, attention_window_size=32, conv1d_width=4,
        block_types=["recurrent", "attention"])),
    "jamba": lambda: T.JambaForCausalLM(T.JambaConfig(
        **_BASE, num_experts=2, num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=1,
        attn_layer_period=2, attn_layer_offset=1, mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4)),
    "bamba": lambda: T.BambaForCausalLM(T.BambaConfig(**_BASE, attn_layer_indices=[1], mamba_d_head=16, **_SSM)),
    "zamba": lambda: T.ZambaForCausalLM(T.ZambaConfig(**_BASE, **_ZAMBA, n_mamba_heads=2, attn_layer_period=2,
                                                      attn_layer_offset=1, mamba_dt_rank=4)),
    "zamba2": lambda: T.Zamba2ForCausalLM(T.Zamba2Config(
        **_BASE, **_ZAMBA, hybrid_layer_ids=[1], mamba_ngroups=1, n_mamba_heads=4, chunk_size=8, adapter_rank=4,
        mamba_headdim=16)),
    "falcon_h1": lambda: T.FalconH1ForCausalLM(T.FalconH1Config(**_BASE, mamba_d_ssm=32, mamba_d_head=8, **_SSM)),
    "granitemoehybrid": lambda: T.GraniteMoeHybridForCausalLM(T.GraniteMoeHybridConfig(
        **_BASE, num_local_experts=2, num_experts_per_tok=1, shared_intermediate_size=32,
        layer_types=["linear_attention", "full_attention"], mamba_d_head=16, **_SSM)),
    "nemotron_h": lambda: T.NemotronHForCausalLM(T.NemotronHConfig(
        **dict(_BASE, num_hidden_layers=3), layers_block_type=["linear_attention", "full_attention", "mlp"],
        head_dim=8, ssm_state_size=8, mamba_num_heads=4, mamba_head_dim=16, conv_kernel=4, expand=2, chunk_size=8,
        n_groups=1)),
    "qwen3_next": lambda: T.Qwen3NextForCausalLM(T.Qwen3NextConfig(**_BASE, **_LINEAR, **_MOE)),
    "qwen3_5": lambda: T.Qwen3_5ForCausalLM(T.Qwen3_5TextConfig(**_BASE, **_LINEAR)),
    "qwen3_5_moe": lambda: T.Qwen3_5MoeForCausalLM(T.Qwen3_5MoeTextConfig(
        **{k: v for k, v in _BASE.items() if k != "intermediate_size"}, **_LINEAR, **_MOE)),
    "lfm2": lambda: T.Lfm2ForCausalLM(T.Lfm2Config(**_BASE, conv_L_cache=3, layer_types=["conv", "full_attention"],
                                                   block_auto_adjust_ff_dim=False)),
    "kimi_linear": lambda: T.KimiLinearForCausalLM(T.KimiLinearConfig(
        **dict(_BASE, num_key_value_heads=4), moe_intermediate_size=16, num_experts=2, num_experts_per_token=1,
        kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=4,
        layer_types=["linear_attention", "full_attention"], mlp_layer_types=["dense", "sparse"], linear_head_dim=8,
        linear_num_heads=2, linear_conv_kernel_dim=4, num_shared_experts=1)),
    "minimax": lambda: T.MiniMaxForCausalLM(T.MiniMaxConfig(
        **_BASE, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
        layer_types=["linear_attention", "full_attention"], block_size=4)),
    # linear attention and indexed attention: each query attends to the 2 columns its indexer
    # scores best among those the mask shows, and the last (a budget of 2 blocks of 1 column)
    "qwen4_exp": lambda: T.Qwen4ExpForCausalLM(T.Qwen4ExpTextConfig(
        **_BASE, **dict(_LINEAR, layer_types=["linear_attention", "indexed_attention"]), **_MOE, indexer_n_heads=2,
        indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=2, indexer_compress_ratio=1)),
}


def _small(name: str, **extra):
    """``{name}ForCausalLM`` from its config's defaults with the sizes of ``_BASE`` (those it has) and
    two experts, one per token, where it has experts."""
    cls = getattr(T, f"{name}ForCausalLM")
    defaults = cls.config_class()
    kw = {k: v for k, v in _BASE.items() if hasattr(defaults, k)}
    kw.update({k: 16 for k in ("moe_intermediate_size", "shared_expert_intermediate_size") if hasattr(defaults, k)})
    kw.update({k: 2 for k in ("num_experts", "n_routed_experts", "num_local_experts") if hasattr(defaults, k)})
    kw.update({k: 1 for k in ("num_experts_per_tok",) if hasattr(defaults, k)})
    return cls(cls.config_class(**kw, **({"head_dim": 8} if hasattr(defaults, "head_dim") else {}), **extra))


def _bailing_hybrid():
    """Bailing-Hybrid: its layer pattern put a full-attention layer at every 6th place (two layers:
    linear attention alone, and the mask needs an attention layer) and its MLA attention takes as
    many key/value heads as query heads."""
    return T.BailingHybridForCausalLM(T.BailingHybridConfig(
        **dict(_BASE, num_key_value_heads=4), head_dim=8, layer_types=["linear_attention", "full_attention"],
        kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4, v_head_dim=8, qk_nope_head_dim=4,
        linear_head_dim=8, linear_num_heads=4, moe_intermediate_size=16, num_experts=2, num_experts_per_token=1,
        num_shared_experts=1, num_expert_group=1, topk_group=1, first_k_dense_replace=1))


def inkling2(loop: bool = False, window: int = 4):
    """Inkling2 (or Inkling2-Loop): a hybrid layer with a sliding window of ``window`` and a hybrid
    full-attention layer; its logits cover ``unpadded_vocab_size`` ids, set to the vocabulary's."""
    return _small("Inkling2Loop" if loop else "Inkling2", unpadded_vocab_size=V, sliding_window_size=window,
                  layer_types=["hybrid_sliding", "hybrid"])


CONFIGS.update({  # later families, built from their defaults made small
    "bailing_hybrid": _bailing_hybrid,
    "inkling": lambda: _small("Inkling"),
    "inkling2": inkling2,
    "inkling2_loop": lambda: inkling2(loop=True),
    "lara_mini": lambda: _small("LaraMini"),
    "lfm2_moe": lambda: _small("Lfm2Moe", layer_types=["conv", "full_attention"], num_dense_layers=1),
    "lfm3": lambda: _small("Lfm3"),
    "olmo_hybrid": lambda: _small("OlmoHybrid"),
    "zaya": lambda: _small("Zaya"),
})
NAMES = list(CONFIGS)
CLASSES = {  # the class each config builds (checked where it is built)
    "mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM", "falcon_mamba": "FalconMambaForCausalLM",
    "rwkv": "RwkvForCausalLM", "xlstm": "xLSTMForCausalLM", "recurrent_gemma": "RecurrentGemmaForCausalLM",
    "jamba": "JambaForCausalLM", "bamba": "BambaForCausalLM", "zamba": "ZambaForCausalLM",
    "zamba2": "Zamba2ForCausalLM", "falcon_h1": "FalconH1ForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "nemotron_h": "NemotronHForCausalLM", "qwen3_next": "Qwen3NextForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM",
    "qwen3_5_moe": "Qwen3_5MoeForCausalLM", "lfm2": "Lfm2ForCausalLM", "kimi_linear": "KimiLinearForCausalLM",
    "minimax": "MiniMaxForCausalLM", "qwen4_exp": "Qwen4ExpForCausalLM", "bailing_hybrid": "BailingHybridForCausalLM",
    "inkling": "InklingForCausalLM", "inkling2": "Inkling2ForCausalLM", "inkling2_loop": "Inkling2LoopForCausalLM",
    "lara_mini": "LaraMiniForCausalLM", "lfm2_moe": "Lfm2MoeForCausalLM", "lfm3": "Lfm3ForCausalLM",
    "olmo_hybrid": "OlmoHybridForCausalLM", "zaya": "ZayaForCausalLM",
}
NO_CACHED_BEAMS = {"rwkv", "xlstm", "minimax", "recurrent_gemma"}  # generate's beam search with a cache: see above
_BUILT: dict = {}


def build(name: str, eos_bias: float = 0.0, make=None):
    """The model ``name`` (``make()``, default ``CONFIGS[name]()``), seeded random weights, eval
    mode, logits x 8 (searches disagree) and the eos logit raised by ``eos_bias`` (a hook on the
    output layer); built once per name and bias."""
    if (name, eos_bias) not in _BUILT:
        torch.manual_seed(0)
        model = (make or CONFIGS[name])().eval()
        model.generation_config.eos_token_id = EOS
        model.generation_config.pad_token_id = PAD
        bias = torch.zeros(V)
        bias[EOS] = eos_bias
        model.get_output_embeddings().register_forward_hook(lambda module, args, out: out * 8.0 + bias)
        _BUILT[(name, eos_bias)] = model
    return _BUILT[(name, eos_bias)]


def theirs(model, prompts, **kw):
    """model.generate: the new tokens of each returned sequence (cut after the first eos) and its
    ``sequences_scores`` (None for greedy). A padded batch, or each prompt alone for the models
    that cannot be padded."""
    batches = [[p] for p in prompts] if model.config.model_type in UNPADDED_TYPES else [prompts]
    rows, scores = [], []
    for batch in batches:
        width = max(map(len, batch))
        ids = torch.tensor([[PAD] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, return_dict_in_generate=True,
                                 output_scores=True,
                                 **kw)
        for seq in out.sequences[:, width:].tolist():
            rows.append(seq[: seq.index(EOS) + 1] if EOS in seq else seq)
        if getattr(out, "sequences_scores", None) is not None:
            scores += out.sequences_scores.tolist()
    return rows, scores


def rescore(model, prompt, tokens):
    """Teacher forcing from the definition: the sum of log_softmax(logits) at each token, the whole
    sequence in one call, no cache."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens]), use_cache=False).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return sum(logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens))


_STATE_CALLS = ("update_conv_state", "update_recurrent_state", "get_conv_state", "get_recurrent_state")


def recurrent_classes() -> set[str]:
    """The ``...ForCausalLM`` classes ``transformers`` exports whose modeling file reads or writes a
    cache's convolution or recurrent states, or whose model keeps its state beside or outside a
    ``Cache`` (RWKV, xLSTM, RecurrentGemma, MiniMax): read from the files, nothing imported."""
    from pathlib import Path

    root = Path(transformers.__file__).parent
    out = set()
    for name, module in transformers._class_to_module.items():
        if not name.endswith("ForCausalLM") or name.startswith("Auto"):
            continue
        folder = module.split(".")[1] if module.startswith("models.") else None
        path = root.joinpath(*module.split(".")).with_suffix(".py")
        source = path.read_text(encoding="utf-8") if path.exists() else ""
        if folder in UNPADDED_TYPES or any(call in source for call in _STATE_CALLS):
            out.add(name)
    return out


def test_every_recurrent_or_hybrid_class_transformers_exports_is_tested_here():
    assert recurrent_classes() == set(CLASSES.values())
    assert set(CLASSES) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_greedy_equals_generate(name):
    model = build(name, eos_bias=2.0)
    assert type(model).__name__ == CLASSES[name]
    expected, _ = theirs(model, PROMPTS, num_beams=1, max_new_tokens=8)
    got = generate(model, PROMPTS, num_beams=1, max_new_tokens=8)
    assert [hyps[0].tokens for hyps in got.hypotheses] == expected
    for prompt, hyps in zip(PROMPTS, got.hypotheses, strict=True):
        assert hyps[0].logprob == pytest.approx(rescore(model, prompt, hyps[0].tokens), abs=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_the_transformers_rule_gives_generates_sequences_and_scores(name):
    """``mode="transformers"`` against ``generate``'s beam search (recomputed without a cache where
    its cache reorder is missing or skips a state: see the module docstring), eos likely: every
    sequence the same, in the same order, every score its ``sequences_scores`` to 1e-5."""
    kw = dict(num_beams=3, num_return_sequences=2, max_new_tokens=6)
    model = build(name, eos_bias=3.0)
    cached = {"use_cache": False} if name in NO_CACHED_BEAMS else {}
    expected, scores = theirs(model, PROMPTS, **kw, **cached)
    got = generate(model, PROMPTS, mode="transformers", **kw)
    assert [h.tokens for hyps in got.hypotheses for h in hyps] == expected
    assert [h.score for hyps in got.hypotheses for h in hyps] == pytest.approx(scores, abs=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_every_hypothesis_scores_its_rescoring_and_decodes_alike_alone(name):
    """Our own rule: each hypothesis's logprob is the model's teacher-forced logprob of its tokens;
    and each input decodes the same alone as in the batch (tokens; scores to rounding)."""
    model = build(name, eos_bias=2.0)
    batch = generate(model, PROMPTS, num_beams=3, num_return_sequences=3, max_new_tokens=6)
    for prompt, hyps in zip(PROMPTS, batch.hypotheses, strict=True):
        for h in hyps:
            assert h.logprob == pytest.approx(rescore(model, prompt, h.tokens), abs=1e-4)
    (alone,) = generate(model, [PROMPTS[1]], num_beams=3, num_return_sequences=3, max_new_tokens=6).hypotheses
    # the shortest prompt, the most padded in the batch
    assert [h.tokens for h in batch.hypotheses[1]] == [h.tokens for h in alone]
    assert [h.score for h in batch.hypotheses[1]] == pytest.approx([h.score for h in alone], abs=1e-4)


def refilled(model, items, max_rows, max_steps, **prepare):
    """``decode_stream`` of ``items`` (dicts of ``prompt`` and ``max_steps``) through the adapter
    (``causal_lm(..., **prepare)``), ``max_rows`` rows at a time (beam 2, two best): each input's
    result by index, and the stats."""
    latest = {}

    def make_state(batch):
        latest["dec"] = causal_lm(model, [i["prompt"] for i in batch], max_new_tokens=max_steps, **prepare)
        return latest["dec"].init_state

    def step(state, y_prev):
        return latest["dec"].step(state, y_prev)

    stream = decode_stream(step, make_state, items, max_rows=max_rows, eos_token_id=EOS, beam_size=2, n_best=2,
                           max_steps=max_steps)
    return {d.index: d for d in stream}, stream.stats


@pytest.mark.parametrize("name", NAMES)
def test_refill_joins_mid_search_and_equals_the_inputs_decoded_together(name):
    """decode_stream: inputs join a search in flight (their states joined by ``concat_state``;
    the rows that join feed a masked dummy token, which a recurrent state must not see), and
    each input's hypotheses are those it gets when every input starts at once (no join; each
    input's batch result equals its result alone: the test above)."""
    model = build(name, eos_bias=-20.0)  # eos unlikely: inputs run to their max_steps, so they join mid-search
    items = [{"prompt": p, "max_steps": s} for p, s in zip(PROMPTS + [[30, 31]], [2, 5, 3, 3], strict=True)]
    got, stats = refilled(model, items, 4, 5)
    assert stats.mixed_calls > 0  # inputs did join a search in flight
    want, stats = refilled(model, items, 8, 5)
    assert stats.cohorts == 1
    for i in range(len(items)):
        assert got[i].error is None and want[i].error is None
        assert [h.tokens for h in got[i].hypotheses] == [h.tokens for h in want[i].hypotheses], i
        assert [h.logprob for h in got[i].hypotheses] == pytest.approx([h.logprob for h in want[i].hypotheses],
                                                                       rel=1e-5, abs=1e-4)
