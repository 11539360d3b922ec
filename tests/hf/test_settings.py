"""``mode="transformers"`` against ``model.generate`` itself on the configs' own generation settings.

GPT-2, Llama, BART, mBART, Marian and T5, each built from its config class with its default
special ids (moved into a vocabulary of 61 where they are out of it: GPT-2's 50256, Marian's pad)
and its default generation settings: ``num_beams=1`` (greedy decoding), ``max_length=20``, and the
forced end token BART, mBART and Marian set (``forced_eos_token_id``). Then beam search
(``num_beams=4``) on the same settings, and the forced first token of BART-large-CNN's and
mBART-50's generation configs (``forced_bos_token_id``). Seeded random weights, the logits
sharpened (x 8) so that searches disagree, the eos logit raised so that some rows end early.

The oracle is ``generate`` itself: ``sequences`` and ``beam_indices`` identical,
``sequences_scores`` and every row of ``scores`` we have to 1e-5 (``generate`` runs the prompt
on N * num_beams rows, we on N: equal up to float32 rounding).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from beamsearch.backends import backend_of  # noqa: E402
from beamsearch.hf import generate  # noqa: E402
from beamsearch.hf.forced import ForcedTokens  # noqa: E402
from beamsearch.processors import StepContext  # noqa: E402
from tests.hf.test_generation_models import PROMPTS, padded  # noqa: E402
from tests.hf.test_outputs import same_rows  # noqa: E402

VOCAB = 61
_SEQ2SEQ = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=48)
CONFIGS = {  # each config class's own ids and generation settings, but sizes (and ids past VOCAB)
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=48, n_embd=32, n_layer=2, n_head=4, bos_token_id=VOCAB - 1,
        eos_token_id=VOCAB - 1)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=48)),
    "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(**_SEQ2SEQ)),
    "mbart": lambda: transformers.MBartForConditionalGeneration(transformers.MBartConfig(**_SEQ2SEQ)),
    "marian": lambda: transformers.MarianMTModel(transformers.MarianConfig(
        **_SEQ2SEQ, pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1)),
    "t5": lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0)),
}
FORCED_EOS = {"bart": 2, "mbart": 2, "marian": 0}  # what the configs set, checked below
# the eos logit raised: outputs of every length, some rows ended by eos, some by the forced eos at step 20
EOS_BIAS = {"gpt2": 3.0, "llama": 1.5, "bart": 0.5, "mbart": 2.5, "marian": 0.5, "t5": 3.0}
# generation configs of released checkpoints that force the first token: BART-large-CNN (bos 0, with
# its beam settings) and mBART-50 (a target language's id)
FORCED_BOS = {
    "bart-cnn": ("bart", dict(forced_bos_token_id=0, num_beams=4, length_penalty=2.0, no_repeat_ngram_size=3,
                              min_length=5, max_length=16, early_stopping=True)),
    "mbart-50": ("mbart", dict(forced_bos_token_id=7)),
}


def build(name: str, seed: int, **settings):
    """The model with seeded random weights, its generation config the config class's own
    (``settings`` set on it), the output layer's logits x 8 (T5's tied head: as it is) and the eos
    logit raised by ``EOS_BIAS``."""
    torch.manual_seed(seed)
    model = CONFIGS[name]().eval()
    for key, value in settings.items():
        setattr(model.generation_config, key, value)
    eos = model.generation_config.eos_token_id
    bias = torch.zeros(VOCAB)
    bias[eos] = EOS_BIAS[name]
    scale = 1.0 if name == "t5" else 8.0
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: out * scale + bias)
    return model


def both(model, **kw):
    """(ours with mode="transformers", generate's), each with every output, on the padded batch."""
    ids, mask = padded(model, PROMPTS)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True,
                             **kw)
    ours = generate(model, ids, attention_mask=mask, mode="transformers", return_dict_in_generate=True,
                    output_scores=True, **kw)
    return ours, out


def assert_generates(ours, out, beams: int) -> None:
    assert torch.equal(ours.sequences, out.sequences)
    if beams == 1:  # generate's greedy decoding: no sequences_scores, its scores the processed logits
        assert ours.mode == "greedy" and ours.sequences_scores is None and ours.beam_indices is None
        assert getattr(out, "sequences_scores", None) is None
    else:
        assert ours.mode == "transformers"
        torch.testing.assert_close(ours.sequences_scores, out.sequences_scores, atol=1e-5, rtol=0)
        assert torch.equal(ours.beam_indices, out.beam_indices.long())
    same_rows(ours.scores, out.scores, beams, 1e-5)


def test_the_configs_set_what_these_tests_count_on():
    for name, eos in FORCED_EOS.items():
        assert build(name, 0).generation_config.forced_eos_token_id == eos, name
    for name in CONFIGS:
        cfg = build(name, 0).generation_config
        assert cfg.num_beams in (None, 1) and cfg.forced_bos_token_id is None and cfg.max_length in (None, 20), name
    assert build("mbart", 0).generation_config.decoder_start_token_id is None  # generate starts with bos then


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_transformers_mode_is_generate_on_the_configs_own_settings(name, beams):
    """Greedy (the configs' num_beams) and beam search: the forced eos at the last step included
    (the rows that reach step 20 hold 0 at the forced id, -inf elsewhere, as generate's), mBART's
    start from its bos id."""
    model = build(name, 50)
    ours, out = both(model, num_beams=beams)
    assert_generates(ours, out, beams)
    forced = FORCED_EOS.get(name)
    if forced is not None and beams > 1:
        assert len(ours.scores) == 20  # the search reached the forced step
        last = ours.scores[-1][torch.isfinite(ours.scores[-1]).any(1)]
        assert (last[:, forced] == 0).all() and torch.isinf(last).sum().item() == last.numel() - last.shape[0]


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("setting", list(FORCED_BOS))
def test_a_forced_first_token_is_generates(setting, beams):
    name, settings = FORCED_BOS[setting]
    model = build(name, 60, **dict(settings, num_beams=beams))
    ours, out = both(model)
    assert_generates(ours, out, beams)
    bos = settings["forced_bos_token_id"]
    assert all(h.tokens[0] == bos for hyps in ours.hypotheses for h in hyps)


def test_model_generate_with_custom_generate_inherits_the_forced_tokens():
    """BART's own forced eos, beam search through ``model.generate(custom_generate=...)``."""
    from beamsearch import hf

    model = build("bart", 61)
    ids, mask = padded(model, PROMPTS)
    kw = dict(num_beams=4, num_return_sequences=2, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        theirs = model.generate(input_ids=ids, attention_mask=mask, **kw)
        ours = model.generate(input_ids=ids, attention_mask=mask, mode="transformers",
                              custom_generate=hf.custom_generate, **kw)
    assert torch.equal(ours.sequences, theirs.sequences)
    torch.testing.assert_close(ours.sequences_scores, theirs.sequences_scores, atol=1e-5, rtol=0)


@pytest.mark.parametrize("zero", [False, True])
def test_forced_tokens_keep_or_zero_the_forced_entries(zero):
    """Row 0 (input 0, forced at step 2) and row 2 (input 1, forced at step 2) become -inf but ids
    1 and 3, which keep their value, or become 0 (generate's); row 1 (input 1 too) as well; input
    2 is forced at step 3: its row is untouched."""
    logp = np.log(np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.25] * 4, [0.7, 0.1, 0.1, 0.1]]))
    ctx = StepContext(2, np.zeros((4, 0), np.int64), np.array([0, 1, 1, 2]), backend_of(logp))
    got = ForcedTokens(np.array([1, 3]), np.array([2, 2, 3]), zero)(logp.copy(), ctx)
    want = np.full((4, 4), -np.inf)
    want[:3, [1, 3]] = 0.0 if zero else logp[:3, [1, 3]]
    want[3] = logp[3]
    np.testing.assert_array_equal(got, want)
