"""The decoding configuration is one value, built and checked once at each entry and passed down:
a run of ``beamsearch decode``, :func:`beamsearch.corpus.decode_records` and
:func:`beamsearch.refill.decode_stream` over three inputs that join together builds its
configuration once and one plan, the cohort's: no plan over an empty input (no dry run: the
configuration is checked without prompts) and none per input (each input is checked alone
against the configuration, its own errors its record's, by :func:`checked_inputs`). ``decode``
built 7 plans (two dry runs of ``decode_records`` and the stream's own empty plan each time, one
per input, one per cohort), then 4; ``decode_records`` / ``decode_stream`` 5, then 4."""

from __future__ import annotations

import re

import numpy as np
import pytest

from beamsearch import corpus
from beamsearch.cli import main
from beamsearch.controls import shared as shared_controls
from beamsearch.core import plan as core_plan
from beamsearch.core.mode import Mode
from beamsearch.corpus import Line, decode_records
from beamsearch.refill import decode_stream

TEXTS = ["2021-03-04", "1999-12-31", "2000-01-01"]


@pytest.fixture
def builds(monkeypatch):
    """Counts, during the test, of Plan objects made (and those over no prompt), of engine controls
    assembled (``controls.shared.Options`` objects), of configurations built (``Mode.configure``)
    and of checks of the prompt-free shared controls (``core.plan.checked_controls``, wherever it
    is called from)."""
    count = {"plans": 0, "options": 0, "empty": 0, "configs": 0, "checks": 0}
    plan_init, options_init, configure = core_plan.Plan.__init__, shared_controls.Options.__init__, Mode.configure
    checked_controls = core_plan.checked_controls

    def counted_init(self, opts, *args, **kwargs):
        count["plans"] += 1
        count["empty"] += not opts.prompts
        plan_init(self, opts, *args, **kwargs)

    def counted_options(self, *args, **kwargs):
        count["options"] += 1
        options_init(self, *args, **kwargs)

    def counted_configure(self, keywords):
        count["configs"] += 1
        return configure(self, keywords)

    def counted_checks(config):
        count["checks"] += 1
        return checked_controls(config)

    monkeypatch.setattr(Mode, "configure", counted_configure)
    monkeypatch.setattr(core_plan.Plan, "__init__", counted_init)
    monkeypatch.setattr(shared_controls.Options, "__init__", counted_options)
    monkeypatch.setattr(core_plan, "checked_controls", counted_checks)
    monkeypatch.setattr(shared_controls, "checked_controls", counted_checks)
    return count


def test_decode_over_three_lines_builds_one_plan(tmp_path, builds):
    src, out = tmp_path / "in.txt", tmp_path / "out.jsonl"
    src.write_text("\n".join(TEXTS) + "\n")
    assert main(["decode", "--model", "_toy", "--input", str(src), "--output", str(out), "--beam-size", "3"]) == 0
    assert len(out.read_text().splitlines()) == 3
    assert builds == {"plans": 1, "options": 1, "empty": 0, "configs": 1, "checks": 1}  # the cohort's


def test_decode_records_over_three_lines_builds_one_plan(builds):
    records = list(decode_records(corpus.toy_model(), [Line(i, t) for i, t in enumerate(TEXTS)], beam_size=3))
    assert [r["index"] for r in sorted(records, key=lambda r: r["index"])] == [0, 1, 2]
    assert builds == {"plans": 1, "options": 1, "empty": 0, "configs": 1, "checks": 1}  # the cohort's


def test_decode_stream_over_three_inputs_builds_one_plan(builds):
    table = np.random.default_rng(0).normal(size=(6, 6))

    def step(state, y):
        return table[np.asarray(y)], state

    stream = decode_stream(step, lambda items: np.zeros((len(items), 1)), [[1], [2], [3]], max_rows=9,
                           beam_size=3, eos_token_id=0, max_steps=4)
    assert sorted(d.index for d in stream) == [0, 1, 2]
    assert builds == {"plans": 1, "options": 1, "empty": 0, "configs": 1, "checks": 1}  # the cohort's


def test_a_configuration_is_checked_without_prompts_and_is_frozen(builds):
    import dataclasses

    from beamsearch.modes.registry import mode

    config = mode("beam").configure({"eos_token_id": 0, "max_steps": 4, "beam_size": 3, "alpha": 0.5})
    assert (config.mode, config.controls.beam_size, config.controls.alpha) == ("beam", 3, 0.5)
    assert config.keywords() == {"alpha": 0.5, "beam_size": 3, "eos_token_id": 0, "max_steps": 4}
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.controls.beam_size = 4  # type: ignore[misc]
    # each bad value named with its value, before any prompt is seen
    for bad, message in (({"beam_size": 0}, "beam_size must be >= 1; got 0"),
                         ({"alpha": -1.0}, "alpha must be >= 0 and finite; got -1.0"),
                         ({"max_steps": 0}, "max_steps must be >= 1; got 0"),
                         ({"top_k": 0}, "top_k must be >= 1; got 0"),
                         ({"length_penalty": "linear"},
                          "length_penalty must be one of ['gnmt', 'power']; got 'linear'")):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            mode("beam").configure({"eos_token_id": 0, "max_steps": 4, "beam_size": 3, **bad})
    with pytest.raises(TypeError, match=r"^pad_token_id must be an integer; got 'x' of type str$"):
        decode_stream(lambda state, y: (None, state), lambda items: None, [], max_rows=4, beam_size=3,
                      eos_token_id=0, max_steps=4, pad_token_id="x")  # at once: nothing read, no plan
    with pytest.raises(TypeError, match=r"^greedy_search does not take beam_size \(greedy decoding has one row"):
        mode("greedy").configure({"eos_token_id": 0, "max_steps": 4, "beam_size": 3})
    with pytest.raises(TypeError, match=r"^diverse_beam_search\(\) missing 1 required keyword-only argument: "
                                        r"'num_groups'$"):
        mode("diverse").configure({"eos_token_id": 0, "max_steps": 4, "beam_size": 4, "diversity_penalty": 1.0})
    assert builds["plans"] == builds["options"] == 0  # no plan, no controls assembled: no dry run


def test_a_plan_and_its_options_are_never_changed_after_they_are_made():
    import dataclasses

    from beamsearch.modes.transformers_beam import TRANSFORMERS, transformers_plan

    config = TRANSFORMERS.configure({"beam_size": 2, "eos_token_id": 0, "max_steps": 3, "min_new_tokens": 1})
    plan = transformers_plan([[1, 2]], config)
    assert plan.opts.controls.processors == () and len(plan.opts.controls.masks) == 1  # its rule, made before
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.opts.controls = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.n_best = 2  # type: ignore[misc]


def test_generation_settings_are_mapped_where_the_controls_declare_them():
    pytest.importorskip("transformers")
    from transformers import GenerationConfig

    from beamsearch.core.config import DecodingConfig, options_of
    from beamsearch.hf.settings import search_settings

    declared = {name: c.hf for name, (_, c) in options_of(DecodingConfig).items() if c.hf}
    values = {"max_new_tokens": 7, "num_beams": 4, "num_return_sequences": 2, "length_penalty": 1.5,
              "no_repeat_ngram_size": 3, "min_new_tokens": 2}
    settings = search_settings(GenerationConfig(**values))
    assert set(declared.values()) == set(values)
    for name, setting in declared.items():  # each read from the setting its option names
        assert settings["max_new_tokens" if name == "max_steps" else name] == values[setting]
    assert settings["length_penalty"] == "power"  # transformers' float is the power kind's alpha


def test_grammar_kinds_are_spelled_once():
    from beamsearch.core.config import GRAMMAR_KINDS, GrammarOptions
    from beamsearch.corpus import grammar as corpus_grammar

    assert corpus_grammar.GRAMMAR_KINDS is GRAMMAR_KINDS and corpus_grammar.GrammarOptions is GrammarOptions
    from beamsearch.processors.grammar_engine import KINDS  # the processor's kinds: each option builds one

    assert sorted(GRAMMAR_KINDS.values()) == sorted(KINDS)
    pytest.importorskip("transformers")
    from beamsearch.hf import grammar as hf_grammar

    assert tuple(corpus_grammar.GRAMMAR_OPTIONS) == hf_grammar.OUTPUT_CONSTRAINTS
    taken = hf_grammar.output_constraints({"regex": "[0-9]+"}, object())
    assert taken == GrammarOptions(regex="[0-9]+")


def test_a_mode_decoded_in_fixed_batches_runs_no_batch_over_no_line(monkeypatch):
    import dataclasses

    from beamsearch.modes import registry

    spec, calls = registry.MODES["exact"], []

    def batch(step_fn, init_state, prompts, max_rows, **keywords):
        calls.append(len(prompts))
        return spec.batch(step_fn, init_state, prompts, max_rows, **keywords)

    monkeypatch.setitem(registry.MODES, "exact", dataclasses.replace(spec, batch=batch))
    lines = [Line(i, t) for i, t in enumerate(TEXTS[:2])]
    records = list(decode_records(corpus.toy_model(), lines, mode="exact", node_budget=200))
    assert sorted(r["index"] for r in records) == [0, 1]
    assert calls == [2]  # one batch of both lines; no batch of none first to check the keywords
    with pytest.raises(ValueError, match="^node_budget must be >= 1; got 0$"):
        next(decode_records(corpus.toy_model(), lines, mode="exact", node_budget=0))
    assert calls == [2]


def test_hf_generate_builds_one_plan(builds):
    # the mode's checks run before the prefill (a bad value is refused before the model runs)
    # without a plan of their own: the search's plan is the only one (2 before: a dry run), made
    # of the configuration checked before the prefill (the search's function configured it again)
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from beamsearch import hf

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=49,
                                  eos_token_id=49, pad_token_id=48)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    out = hf.generate(model, prompts, attention_mask=torch.ones_like(prompts), num_beams=3, max_new_tokens=5)
    assert len(out.hypotheses) == 3
    assert builds == {"plans": 1, "options": 1, "empty": 0, "configs": 1, "checks": 1}
    with pytest.raises(ValueError, match=r"^constraints\[0\]\[0\].phrases\[0\] must not hold an eos id"):
        hf.generate(model, prompts[:1], num_beams=3, max_new_tokens=5, mode="constrained",
                    force_words_ids=[[[5, 49]]])
    assert builds["plans"] == 1  # refused before the prefill, with no plan made


@pytest.mark.parametrize(("function", "own"), [
    ("beam_search_batch", {"beam_size": 3}), ("greedy_search", {}),
    ("diverse_beam_search", {"beam_size": 4, "num_groups": 2, "diversity_penalty": 0.5}),
    ("constrained_beam_search", {"beam_size": 3, "constraints": [[[2]], []]}),
    ("stochastic_beam_search", {"k": 3, "seed": 0}), ("transformers_beam_search", {"beam_size": 3})])
def test_a_public_search_is_configured_once_and_planned_from_its_configuration(builds, function, own):
    # its keywords are checked once (Mode.configure, the prompt-free controls included) and its plan
    # is made of that value: nothing checked twice, one plan
    import beamsearch
    from beamsearch.modes import beam

    table = np.random.default_rng(0).normal(size=(6, 6))

    def step(state, y):
        return table[np.asarray(y)], state

    search = getattr(beamsearch, function, None) or getattr(beam, function)
    results = search(step, np.zeros((2, 1)), [[1], [2]], eos_token_id=0, max_steps=4, **own)
    assert len(results) == 2
    # constrained's Options copied once with its phrases' id checks added, the rule's with its processors
    # moved after log_softmax: a copy, not a check
    copies = function in ("constrained_beam_search", "transformers_beam_search")
    assert builds == {"plans": 1, "options": 1 + copies, "empty": 0, "configs": 1, "checks": 1}
