"""The table of docs/from_generate.md, "From generate() in one line", against the code: the table is
``beamsearch.hf.keywords.KEYWORDS`` row for row, it lists every parameter of ``model.generate``
and every field of ``GenerationConfig`` of the installed transformers, every keyword it calls
refused is refused by ``hf.generate`` (an error naming it, before the model runs), and every other
one is taken (the call runs, with no warning).
"""

from __future__ import annotations

import inspect
import pathlib
import re
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers import GenerationConfig, GenerationMixin  # noqa: E402

from beamsearch.hf import generate  # noqa: E402
from beamsearch.hf.calls import MODEL_INPUTS  # noqa: E402
from beamsearch.hf.keywords import HONOURED, KEYWORDS, MAPPED, REFUSED  # noqa: E402
from tests.hf.test_generation import tokenizer  # noqa: E402
from tests.hf.test_generation_models import build  # noqa: E402

TABLE_PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "from_generate.md"
PROMPT = [[5, 17, 33]]


def table() -> dict[str, str]:
    """The page's table: keyword -> status (a row may name several keywords)."""
    text = TABLE_PAGE.read_text()
    body = text[text.index("<!-- generate-keywords -->"):text.index("<!-- /generate-keywords -->")]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[1] not in (HONOURED, MAPPED, REFUSED):
            continue
        for name in re.findall(r"`([A-Za-z_]+)`", cells[0]):
            assert name not in rows, f"{name} is in two rows"
            rows[name] = cells[1]
    return rows


def test_the_readme_table_is_the_codes_list():
    assert table() == {name: status for name, (status, _) in KEYWORDS.items()}


def test_every_keyword_of_generate_and_of_generation_config_is_listed():
    fields = {k for k in GenerationConfig().to_dict() if not k.startswith("_") and k != "transformers_version"}
    params = set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "kwargs"}
    model_inputs = {"input_ids", "attention_mask", "tokenizer", *MODEL_INPUTS}
    assert set(KEYWORDS) == fields | params | model_inputs


# a value away from generate's default for each refused keyword
REFUSED_VALUES = {
    "assistant_model": lambda: build("gpt2", 1),
    "negative_prompt_ids": lambda: torch.tensor([[5]]),
    "negative_prompt_attention_mask": lambda: torch.tensor([[1]]),
    "custom_generate": lambda: "someone/some-repo",
    "constraints": lambda: ["a Constraint object (transformers 4)"],
    "do_sample": lambda: True,
    "output_attentions": lambda: True,
    "output_hidden_states": lambda: True,
    "continuous_batching_config": lambda: {"max_batch_tokens": 64},
    "prompt_lookup_num_tokens": lambda: 3,
    "assistant_early_exit": lambda: 2,
    "use_mtp": lambda: True,
    "speculation_type": lambda: "dflash",
    "penalty_alpha": lambda: 0.6,
    "dola_layers": lambda: "low",
    "guidance_scale": lambda: 1.5,
    "watermarking_config": lambda: {"bias": 2.0},
    "encoder_no_repeat_ngram_size": lambda: 2,
    "encoder_repetition_penalty": lambda: 1.2,
    "exponential_decay_length_penalty": lambda: (5, 1.1),
    "remove_invalid_values": lambda: True,
    "token_healing": lambda: True,
    "max_time": lambda: 5.0,
    **{name: (lambda: torch.tensor([[0, 0, 0]])) for name in MODEL_INPUTS},
}


class Counting:
    """Counts the model's forward calls."""

    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(lambda *args: setattr(self, "calls", self.calls + 1))


@pytest.mark.parametrize("name", sorted(n for n, (s, _) in KEYWORDS.items() if s == REFUSED))
def test_each_refused_keyword_is_refused_naming_it(name):
    model = build("gpt2")
    counter = Counting(model)
    with pytest.raises((ValueError, TypeError), match=rf"\b{name}\b"):
        generate(model, PROMPT, max_new_tokens=3, **{name: REFUSED_VALUES[name]()})
    assert counter.calls == 0


# each taken keyword: (model name, positional inputs, keywords) of a call that sets it away from its default;
# None for the inputs: PROMPT
TAKEN_CALLS = {
    "inputs": lambda: ("gpt2", (torch.tensor([[0, 5, 17]]),), dict(attention_mask=torch.tensor([[0, 1, 1]]))),
    "generation_config": lambda: ("gpt2", None, dict(generation_config=GenerationConfig(num_beams=2))),
    "max_new_tokens": lambda: ("gpt2", None, dict(max_new_tokens=2)),
    "input_ids": lambda: ("gpt2", (None,), dict(input_ids=torch.tensor([[5, 17, 33]]))),
    "attention_mask": lambda: ("gpt2", (None,), dict(input_ids=torch.tensor([[0, 5, 17]]),
                                                     attention_mask=torch.tensor([[0, 1, 1]]))),
    "logits_processor": lambda: ("gpt2", None, dict(logits_processor=transformers.LogitsProcessorList(
        [transformers.MinLengthLogitsProcessor(5, [3, 7])]))),
    "prefix_allowed_tokens_fn": lambda: ("gpt2", None, dict(prefix_allowed_tokens_fn=lambda b, ids: [10, 11])),
    "stopping_criteria": lambda: ("gpt2", None, dict(stopping_criteria=transformers.StoppingCriteriaList(
        [transformers.MaxLengthCriteria(4)]))),
    "streamer": lambda: ("gpt2", None, dict(num_beams=2, streamer=Recorder())),
    "return_dict_in_generate": lambda: ("gpt2", None, dict(num_beams=2, return_dict_in_generate=True)),
    "output_scores": lambda: ("gpt2", None, dict(num_beams=2, output_scores=True)),
    "output_logits": lambda: ("gpt2", None, dict(num_beams=2, output_logits=True)),
    "synced_gpus": lambda: ("gpt2", None, dict(synced_gpus=False)),
    "tokenizer": lambda: ("gpt2", (["w5 w17 w33"],), dict(tokenizer=tokenizer())),
    "max_length": lambda: ("gpt2", None, dict(max_length=6, max_new_tokens=None)),
    "min_new_tokens": lambda: ("gpt2", None, dict(min_new_tokens=2)),
    "min_length": lambda: ("gpt2", None, dict(min_length=5)),
    "num_beams": lambda: ("gpt2", None, dict(num_beams=2)),
    "num_return_sequences": lambda: ("gpt2", None, dict(num_beams=2, num_return_sequences=2)),
    "length_penalty": lambda: ("gpt2", None, dict(num_beams=2, length_penalty=2.0)),
    "early_stopping": lambda: ("gpt2", None, dict(num_beams=2, early_stopping=True)),
    "num_beam_groups": lambda: ("gpt2", None, dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0)),
    "diversity_penalty": lambda: ("gpt2", None, dict(num_beams=4, num_beam_groups=2, diversity_penalty=0.5)),
    "force_words_ids": lambda: ("gpt2", None, dict(num_beams=2, force_words_ids=[[40]])),
    "eos_token_id": lambda: ("gpt2", None, dict(eos_token_id=[3, 9])),
    "pad_token_id": lambda: ("gpt2", None, dict(pad_token_id=4)),
    "bos_token_id": lambda: ("gpt2", None, dict(bos_token_id=4)),
    "decoder_start_token_id": lambda: ("bart", None, dict(decoder_start_token_id=4)),
    "no_repeat_ngram_size": lambda: ("gpt2", None, dict(no_repeat_ngram_size=2)),
    "bad_words_ids": lambda: ("gpt2", None, dict(bad_words_ids=[[40]])),
    "sequence_bias": lambda: ("gpt2", None, dict(sequence_bias={(40,): -1.0})),
    "repetition_penalty": lambda: ("gpt2", None, dict(repetition_penalty=1.3)),
    "suppress_tokens": lambda: ("gpt2", None, dict(suppress_tokens=[40])),
    "begin_suppress_tokens": lambda: ("gpt2", None, dict(begin_suppress_tokens=[40])),
    "forced_bos_token_id": lambda: ("bart", None, dict(forced_bos_token_id=5)),
    "forced_eos_token_id": lambda: ("gpt2", None, dict(forced_eos_token_id=3)),
    "stop_strings": lambda: ("gpt2", None, dict(stop_strings=["w5"], tokenizer=tokenizer())),
    "renormalize_logits": lambda: ("gpt2", None, dict(num_beams=2, renormalize_logits=True)),
    "temperature": lambda: ("gpt2", None, dict(temperature=0.5)),
    "top_k": lambda: ("gpt2", None, dict(top_k=5)),
    "top_p": lambda: ("gpt2", None, dict(top_p=0.9)),
    "typical_p": lambda: ("gpt2", None, dict(typical_p=0.9)),
    "min_p": lambda: ("gpt2", None, dict(min_p=0.1)),
    "top_h": lambda: ("gpt2", None, dict(top_h=0.5)),
    "epsilon_cutoff": lambda: ("gpt2", None, dict(epsilon_cutoff=1e-4)),
    "eta_cutoff": lambda: ("gpt2", None, dict(eta_cutoff=1e-4)),
    "use_cache": lambda: ("gpt2", None, dict(use_cache=False)),
    "cache_implementation": lambda: ("gpt2", None, dict(cache_implementation="static")),
    "cache_config": lambda: ("gpt2", None, dict(cache_config={"max_cache_len": 64})),
    "max_cache_len": lambda: ("gpt2", None, dict(max_cache_len=64)),
    "compile_config": lambda: ("gpt2", None, dict(compile_config=transformers.CompileConfig())),
    "disable_compile": lambda: ("gpt2", None, dict(disable_compile=True)),
    "prefill_chunk_size": lambda: ("gpt2", None, dict(prefill_chunk_size=16)),
    "low_memory": lambda: ("gpt2", None, dict(low_memory=True)),
    "num_assistant_tokens": lambda: ("gpt2", None, dict(num_assistant_tokens=5)),
    "num_assistant_tokens_schedule": lambda: ("gpt2", None, dict(num_assistant_tokens_schedule="heuristic")),
    "assistant_confidence_threshold": lambda: ("gpt2", None, dict(assistant_confidence_threshold=0.2)),
    "assistant_lookbehind": lambda: ("gpt2", None, dict(assistant_lookbehind=5)),
    "target_lookbehind": lambda: ("gpt2", None, dict(target_lookbehind=5)),
    "is_assistant": lambda: ("gpt2", None, dict(is_assistant=True)),
    "max_matching_ngram_size": lambda: ("gpt2", None, dict(max_matching_ngram_size=3)),
    "assistant_ensemble_weight": lambda: ("gpt2", None, dict(assistant_ensemble_weight=0.5)),
}


class Recorder:
    """A streamer: put(tensor), end()."""

    def __init__(self):
        self.got = []

    def put(self, value):
        self.got.append(value.tolist())

    def end(self):
        self.got.append("end")


@pytest.mark.parametrize("name", sorted(n for n, (s, _) in KEYWORDS.items() if s != REFUSED))
def test_each_other_keyword_is_taken(name):
    model_name, inputs, keywords = TAKEN_CALLS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = generate(build(model_name), *(inputs or (PROMPT,)), **{"max_new_tokens": 3, **keywords})
    assert len(out.hypotheses) == 1 and out.sequences.shape[0] == len(out.hypotheses[0])
