"""``beamsearch.hf.generate``: a generation config's settings, inputs as a padded tensor or text,
and clear errors before the model runs.

Oracles: ``model.generate`` in greedy mode, where both apply the processors to the logits and take
the argmax (so the rules coincide exactly, setting by setting); a plain teacher-forced rescoring
that applies each processor from its definition, one token at a time (beam search, where the
rules differ from ``generate``'s); hand-computed penalties.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers import GenerationConfig  # noqa: E402

from approx import FLOAT32, assert_same_hypotheses  # noqa: E402
from beamsearch import beam_search_batch  # noqa: E402
from beamsearch.hf import causal_lm, generate, seq2seq_lm  # noqa: E402
from tests.hf.test_generation_models import EOS, PAD, PROMPTS, build, theirs  # noqa: E402

NEW = 10


def greedy_pair(model, **settings):
    """(generate's greedy tokens, ours) under the same generation settings."""
    expected, _ = theirs(model, PROMPTS, num_beams=1, max_new_tokens=NEW, **settings)
    got = generate(model, PROMPTS, num_beams=1, max_new_tokens=NEW, **settings)
    return expected, [hyps[0].tokens for hyps in got.hypotheses]


def common(plain):
    """The generated token (not an eos) that plain greedy decoding produces most often."""
    tokens = [t for row in plain for t in row if t not in EOS]
    return max(set(tokens), key=tokens.count)


# each setting, made to bite on the plain greedy outputs ``p`` (so that the comparison with
# generate is not vacuous)
SETTINGS = {
    "repetition_penalty": lambda p: dict(repetition_penalty=3.0),
    "no_repeat_ngram_size": lambda p: dict(no_repeat_ngram_size=2),
    # [3] is an eos id: dropped, as generate does
    "bad_words_ids": lambda p: dict(bad_words_ids=[[common(p)], [41, 22], [3]]),
    "sequence_bias": lambda p: dict(sequence_bias=[[[30], 6.0], [[common(p), common(p)], -20.0]]),
    "suppress_tokens": lambda p: dict(suppress_tokens=[common(p), 41]),
    "begin_suppress_tokens": lambda p: dict(begin_suppress_tokens=sorted({row[0] for row in p})),
    "min_new_tokens": lambda p: dict(min_new_tokens=NEW - 1),
}


@pytest.mark.parametrize("name", ["gpt2", "bart"])
@pytest.mark.parametrize("setting", SETTINGS)
def test_greedy_with_each_setting_equals_generate(name, setting):
    model = build(name, 12, eos_bias=2.0)  # some outputs end early with an eos, some run to NEW
    _, plain = greedy_pair(model)
    expected, got = greedy_pair(model, **SETTINGS[setting](plain))
    assert got == expected
    assert got != plain  # the setting changed the output: the comparison above is not vacuous


@pytest.mark.parametrize("name, seed", [("gpt2", 12), ("bart", 11)])
def test_forced_eos_equals_generate(name, seed):
    model = build(name, seed, eos_bias=2.0)
    _, plain = greedy_pair(model)
    expected, got = greedy_pair(model, forced_eos_token_id=7)
    assert got == expected
    assert any(len(tokens) == NEW and tokens[-1] == 7 and tokens[-1] != old[-1]
               for tokens, old in zip(got, plain, strict=True))


def test_forced_bos_equals_generate_on_an_encoder_decoder():
    model = build("bart", 12)
    expected, got = greedy_pair(model, forced_bos_token_id=44)
    assert got == expected and all(tokens[0] == 44 for tokens in got)


def plain_rescore(model, prompt, tokens, *, penalty=1.0, bad=(), ngram=0):
    """Teacher forcing with the processors written from their definitions, one token at a time:
    n-gram ban over prompt + tokens so far, repetition penalty (x / p if x > 0 else x * p) on every
    token seen, bad words (last token banned where the history ends with the rest), then
    log_softmax; the sum of the chosen tokens' processed log-probabilities."""
    total = 0.0
    with torch.no_grad():
        logits_all = model(input_ids=torch.tensor([prompt + tokens])).logits[0].double()
    for i, token in enumerate(tokens):
        history = prompt + tokens[:i]
        x = logits_all[len(prompt) - 1 + i].clone()
        if ngram:
            for s in range(len(history) - ngram + 1):
                if history[s:s + ngram - 1] == history[len(history) - ngram + 1:]:
                    x[history[s + ngram - 1]] = -math.inf
        for t in set(history):
            x[t] = x[t] / penalty if x[t] > 0 else x[t] * penalty
        for word in bad:
            if len(word) == 1 or history[len(history) - len(word) + 1:] == list(word[:-1]):
                x[word[-1]] = -math.inf
        total += torch.log_softmax(x, dim=-1)[token].item()
    return total


def test_beam_search_with_processors_scores_each_hypothesis_under_the_processed_distribution():
    """Beam search with repetition penalty, bad words and n-gram blocking: every hypothesis's
    logprob is the plain rescoring's, none holds a banned sequence, score = logprob / len ** 2."""
    model = build("gpt2", 13, eos_bias=2.0)
    bad = [[13], [41, 22]]
    got = generate(model, PROMPTS, num_beams=4, num_return_sequences=3, max_new_tokens=8, repetition_penalty=1.7,
                   bad_words_ids=bad, no_repeat_ngram_size=2, length_penalty=2.0)
    for prompt, hyps in zip(PROMPTS, got.hypotheses, strict=True):
        assert len(hyps) == 3
        for h in hyps:
            full = prompt + h.tokens
            assert 13 not in h.tokens
            assert all(full[j:j + 2] != [41, 22] for j in range(len(prompt) - 1, len(full) - 1))
            bigrams = [tuple(full[j:j + 2]) for j in range(len(full) - 1)]
            assert len(bigrams) == len(set(bigrams))
            assert h.logprob == pytest.approx(plain_rescore(model, prompt, h.tokens, penalty=1.7, bad=bad, ngram=2),
                                              abs=1e-4)
            assert h.score == pytest.approx(h.logprob / len(h.tokens) ** 2.0, abs=1e-9)


def test_early_stopping_values_all_give_the_exact_search():
    """Our early stop is exact: whatever early_stopping says, the result is the search without it."""
    model = build("gpt2", 14, eos_bias=3.0)
    runs = [generate(model, PROMPTS, num_beams=3, num_return_sequences=3, max_new_tokens=8, early_stopping=value)
            for value in (True, False, "never")]
    dec = causal_lm(model, PROMPTS)
    full = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=8,
                             beam_size=3, n_best=3, alpha=1.0, length_penalty="power", early_stop=False)
    for run in runs:
        # an input that stops early leaves the later calls, so the other rows go through the
        # float32 model in smaller batches, whose matrix products round a row differently by the
        # batch's size: logprobs and scores to float32 rounding
        assert_same_hypotheses(run.hypotheses, full, tol=FLOAT32)


def test_min_new_tokens_and_max_length_per_input():
    model = build("gpt2", 15, eos_bias=4.0)
    got = generate(model, PROMPTS, num_beams=3, num_return_sequences=3, max_length=12, min_new_tokens=3)
    assert got.settings["max_steps"] == [12 - len(p) for p in PROMPTS]  # max_length counts each prompt
    for prompt, hyps in zip(PROMPTS, got.hypotheses, strict=True):
        for h in hyps:
            assert len(h.tokens) <= 12 - len(prompt)
            assert not h.finished or len(h.tokens) > 3
    # equal-length prompts: max_length and min_length mean what they mean in generate
    same = [[5, 6, 7], [8, 9, 10]]
    expected, _ = theirs(model, same, num_beams=1, max_length=9, min_length=6)
    got = generate(model, same, num_beams=1, max_length=9, min_length=6)
    assert [hyps[0].tokens for hyps in got.hypotheses] == expected


def test_a_padded_tensor_with_its_mask_left_or_right_is_the_list_of_prompts():
    for name in ("gpt2", "bart"):
        model = build(name, 16, eos_bias=2.0)
        reference = generate(model, PROMPTS, num_beams=3, num_return_sequences=2, max_new_tokens=6).hypotheses
        width = max(map(len, PROMPTS))
        for left in (True, False):
            ids = torch.tensor([([PAD] * (width - len(p)) + p) if left else (p + [PAD] * (width - len(p)))
                                for p in PROMPTS])
            mask = torch.tensor([([0] * (width - len(p)) + [1] * len(p)) if left else
                                 ([1] * len(p) + [0] * (width - len(p))) for p in PROMPTS])
            got = generate(model, ids, attention_mask=mask, num_beams=3, num_return_sequences=2,
                           max_new_tokens=6).hypotheses
            assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in reference]
            assert [h.score for hyps in got for h in hyps] == \
                pytest.approx([h.score for hyps in reference for h in hyps], abs=1e-6)
            prepare = seq2seq_lm if model.config.is_encoder_decoder else causal_lm
            assert prepare(model, ids, attention_mask=mask).forward_calls == 1


def tokenizer():
    """A word-level tokenizer over the test vocabulary: "w5" is id 5, ..., "w60" is id 60."""
    tokenizers = pytest.importorskip("tokenizers")
    words = ["<pad>", "<s>", "<start>", "</s>"] + [f"w{i}" for i in range(4, 61)]
    words[7] = "</s2>"
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.decoder = tokenizers.decoders.WordPiece()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                                bos_token="<s>", additional_special_tokens=["</s2>", "<start>"])


def test_text_in_and_text_out_through_the_tokenizer():
    tok = tokenizer()
    model = build("gpt2", 17, eos_bias=2.0)
    texts = [" ".join(f"w{t}" for t in p if t >= 4 and t != 7) for p in PROMPTS]
    got = generate(model, texts, tokenizer=tok, num_beams=3, num_return_sequences=2, max_new_tokens=6)
    by_ids = generate(model, [tok(t)["input_ids"] for t in texts], num_beams=3, num_return_sequences=2,
                      max_new_tokens=6)
    assert [[h.tokens for h in hyps] for hyps in got.hypotheses] == \
        [[h.tokens for h in hyps] for hyps in by_ids.hypotheses]
    for hyps, strings in zip(got.hypotheses, got.texts, strict=True):
        # hand-decoded: every non-special token is "w<id>", joined by spaces; eos ids are skipped
        assert strings == [" ".join(f"w{t}" for t in h.tokens if t not in EOS) for h in hyps]


def test_stop_strings_are_the_tokenizers_token_sequences():
    tok = tokenizer()
    model = build("gpt2", 18)
    plain = generate(model, PROMPTS, num_beams=1, max_new_tokens=NEW)
    # stop at a word that plain greedy decoding produces for some input after its first token
    word = next(h[0].tokens[2] for h in plain.hypotheses if len(h[0].tokens) > 2 and h[0].tokens[2] not in EOS)
    got = generate(model, PROMPTS, tokenizer=tok, num_beams=1, max_new_tokens=NEW, stop_strings=[f"w{word}"])
    assert got.settings["stop_sequences"] == [[word]]
    for before, after in zip(plain.hypotheses, got.hypotheses, strict=True):
        tokens = before[0].tokens
        if word in tokens:  # cut right after the stop word, and finished
            assert after[0].tokens == tokens[:tokens.index(word) + 1] and after[0].finished
        else:
            assert after[0].tokens == tokens


class Counting:
    """Counts the model's forward calls (the encoder's too)."""

    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(self.hook)
        if model.config.is_encoder_decoder:
            model.get_encoder().register_forward_pre_hook(self.hook)

    def hook(self, *args):
        self.calls += 1


BAD_SETTINGS = [
    (dict(num_beemz=3), TypeError, "not GenerationConfig fields: \\['num_beemz'\\]"),
    (dict(num_beams=4, num_beam_groups=2, force_words_ids=[[5]]), ValueError,
     "different modes: force_words_ids=\\[\\[5\\]\\] ask for mode 'constrained'; num_beam_groups=2 ask for mode "
     "'diverse'"),
    (dict(mode="beam", num_beams=4, num_beam_groups=2), ValueError,
     "mode='beam' does not take num_beam_groups=2 \\(options of mode 'diverse'\\)"),
    (dict(mode="exact", num_beams=4), ValueError, "mode 'exact' does not take num_beams=4: "),
    (dict(mode="stochastic", length_penalty=2.0, k=2), ValueError,
     "mode 'stochastic' does not take length_penalty=2.0"),
    (dict(mode="stochastic"), ValueError, "mode 'stochastic' needs k="),
    (dict(mode="beem"), ValueError, "mode must be one of beam, greedy, .*; got 'beem'"),
    (dict(mode="diverse", num_beams=4, num_beam_groups=3), ValueError, "num_groups must divide beam_size=4"),
    (dict(num_beams=4, force_words_ids=[[5, 3]]), ValueError, "must not hold an eos id"),
    (dict(constraints=[[[5]]] * 4, num_beams=2, generation_config=GenerationConfig(constraints=["x"])), ValueError,
     "constraints are transformers Constraint objects"),
    (dict(penalty_alpha=0.6, top_k=4), ValueError, "not supported.*penalty_alpha"),
    (dict(num_beams=2, num_return_sequences=3), ValueError, "num_return_sequences"),
    (dict(num_beams=0), ValueError, "num_beams"),
    (dict(length_penalty=-1.0), ValueError, "length_penalty.*-1.0"),
    (dict(stop_strings=["w5"]), ValueError, "stop_strings=.* needs the tokenizer"),
    (dict(min_length=8), ValueError, "min_length=8 counts the prompt"),
    (dict(max_length=5, max_new_tokens=None), ValueError,
     "max_length=5 leaves no new token for inputs\\[0\\] \\(5 tokens"),
    (dict(forced_bos_token_id=5), ValueError, "forced_bos_token_id"),
    (dict(bad_words_ids=[[5, "x"]]), TypeError, "must be an integer"),
    (dict(eos_token_id=[3, -1]), ValueError, "eos_token_id\\[1\\]"),
]


@pytest.mark.parametrize("settings, error, message", BAD_SETTINGS)
def test_a_setting_we_cannot_honour_is_a_clear_error_before_the_model_runs(settings, error, message):
    model = build("gpt2")
    counter = Counting(model)
    with pytest.raises(error, match=message):
        generate(model, PROMPTS, **{"max_new_tokens": 4, **settings})
    assert counter.calls == 0


@pytest.mark.parametrize("inputs, mask, message", [
    (torch.tensor([5, 6, 7]), None, "2-D"),
    (torch.tensor([[5.0, 6.0]]), None, "2-D .* integer"),
    (torch.tensor([[5, 6]]), torch.tensor([[1, 1, 1]]), "attention_mask must be 0/1 of the shape"),
    (torch.tensor([[5, 6, 7]]), torch.tensor([[1, 0, 1]]), r"attention_mask\[0\] must be left or right padding"),
    (torch.tensor([[5, 6], [7, 8]]), torch.tensor([[1, 1], [0, 0]]), r"inputs\[1\] is empty"),
    ([[5, 6]], torch.tensor([[1, 1]]), "attention_mask is only taken with a 2-D tensor"),
    ([], None, "at least one input"),
    (["w5 w6"], None, "pass the model's tokenizer"),
])
def test_malformed_inputs_are_clear_errors_before_the_model_runs(inputs, mask, message):
    model = build("gpt2")
    counter = Counting(model)
    with pytest.raises(ValueError, match=message):
        generate(model, inputs, attention_mask=mask, max_new_tokens=4)
    assert counter.calls == 0


def test_a_generation_config_that_is_not_one_is_a_type_error():
    with pytest.raises(TypeError, match="generation_config must be a transformers.GenerationConfig"):
        generate(build("gpt2"), PROMPTS, generation_config={"num_beams": 2})


def test_sampling_is_not_done_and_says_so():
    """do_sample=True in the call is refused (pointing to the stochastic mode); in the model's own
    generation config (as chat models ship it) it is a warning, and the search is greedy's."""
    model = build("gpt2", 19)
    with pytest.raises(ValueError, match="do_sample=True: .*mode='stochastic'"):
        generate(model, PROMPTS, do_sample=True, temperature=0.7, max_new_tokens=5)
    greedy = generate(model, PROMPTS, max_new_tokens=5)
    model.generation_config.do_sample, model.generation_config.temperature = True, 0.7
    with pytest.warns(UserWarning, match="do_sample=True in the model's generation config.*not used"):
        sampled = generate(model, PROMPTS, max_new_tokens=5)
    assert [h[0].tokens for h in sampled.hypotheses] == [h[0].tokens for h in greedy.hypotheses]


def test_the_models_own_generation_config_is_used():
    model = build("bart", 20, eos_bias=2.0)
    model.generation_config.num_beams = 3
    model.generation_config.num_return_sequences = 2
    model.generation_config.max_new_tokens = 5
    model.generation_config.no_repeat_ngram_size = 2
    got = generate(model, PROMPTS)
    assert (got.settings["beam_size"], got.settings["n_best"], got.settings["max_steps"],
            got.settings["no_repeat_ngram_size"], got.settings["eos_token_id"]) == (3, 2, [5] * 4, 2, EOS)
    assert all(len(hyps) == 2 for hyps in got.hypotheses)
    explicit = transformers.GenerationConfig(num_beams=2, max_new_tokens=3)  # fields it leaves unset: the model's
    got = generate(model, PROMPTS, generation_config=explicit)
    assert (got.settings["beam_size"], got.settings["n_best"], got.settings["max_steps"]) == (2, 2, [3] * 4)



# ---- issue 19 item 5, 20 item 5: defaults as generate's, results' pad, a used Prepared, ids checked ----

@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_without_max_new_tokens_the_length_is_generates_20_new_tokens(name):
    """transformers 5 counts the default max_length=20 as new tokens (not prompt + new): greedy with
    no length setting at all gives generate's tokens, 20 of them where no eos comes (the eos ids are
    cleared, so every row runs to its limit: before the fix a causal row got 20 - len(prompt))."""
    model = build(name, 3)
    model.generation_config.eos_token_id = None
    model.generation_config.max_length = None
    expected, _ = theirs(model, PROMPTS, num_beams=1, eos_token_id=None)
    got = generate(model, PROMPTS, num_beams=1, eos_token_id=None)
    assert got.settings["max_steps"] == [20] * len(PROMPTS)
    assert [h[0].tokens for h in got.hypotheses] == expected
    assert all(len(row) == 20 for row in expected)


def test_the_default_length_is_capped_at_the_models_positions():
    """generate caps max_length = 20 + padded width at max_position_embeddings; so do we (a GPT-2
    of n_positions 40 and a prompt of 26 tokens: 14 new tokens, for every input)."""
    model = build("gpt2", 3)
    model.generation_config.max_length = None
    limit = model.config.max_position_embeddings
    prompts = [[5] * (limit - 14), [9, 10]]
    expected, _ = theirs(model, prompts, num_beams=1, eos_token_id=None)
    got = generate(model, prompts, num_beams=1, eos_token_id=None)
    assert got.settings["max_steps"] == [14, 14]
    assert [h[0].tokens for h in got.hypotheses] == expected


@pytest.mark.parametrize("pad, expected_pad", [(PAD, PAD), (None, EOS[0])])
def test_generation_arrays_pad_with_the_configs_pad_else_the_first_eos(pad, expected_pad):
    """hypotheses.arrays() works as generate's outputs are padded: with the model's pad id, or the
    first eos id without one (it raised 'pad_token_id is None' either way)."""
    model = build("gpt2", 4, eos_bias=2.0)
    model.generation_config.pad_token_id = pad
    out = generate(model, PROMPTS, num_beams=3, num_return_sequences=2, max_new_tokens=6)
    arrays = out.hypotheses.arrays()
    for i, hyps in enumerate(out.hypotheses):
        for j, h in enumerate(hyps):
            row = arrays.tokens[i, j].tolist()
            assert row[: len(h.tokens)] == h.tokens and set(row[len(h.tokens):]) <= {expected_pad}
    assert (arrays.tokens == expected_pad).any()  # some output is shorter than the longest
    call = generate(model, PROMPTS, num_beams=2, max_new_tokens=4, pad_token_id=59).hypotheses
    assert call.pad_token_id == 59


@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_a_prepared_state_used_by_a_search_is_refused_with_a_clear_error(name):
    """The model extends the KV cache in place, so a Prepared is for one search: a second search
    from it is a ValueError saying so (it was a raw torch size mismatch), and a fresh Prepared
    gives the first search's results again."""
    model = build(name, 5)
    prepare = seq2seq_lm if name == "bart" else causal_lm
    kw = dict(eos_token_id=EOS, max_steps=5, beam_size=2, n_best=2)
    dec = prepare(model, PROMPTS)
    first = beam_search_batch(dec.step, dec.init_state, dec.prompts, **kw)
    with pytest.raises(ValueError, match="this Prepared was used by a search already"):
        beam_search_batch(dec.step, dec.init_state, dec.prompts, **kw)
    again = prepare(model, PROMPTS)
    assert_same_hypotheses(beam_search_batch(again.step, again.init_state, again.prompts, **kw), first, tol=FLOAT32)


@pytest.mark.parametrize("call, message", [
    (lambda m: causal_lm(m, [[5, 17], [9, 10**4]]), r"prompts\[1\]\[1\] must be in \[0, V\) with V=61 .*got 10000"),
    (lambda m: causal_lm(m, torch.tensor([[5, 17], [9, 61]])), r"prompts\[1\]\[1\] must be in \[0, V\) .*got 61"),
    (lambda m: generate(m, [[61]], max_new_tokens=2), r"inputs\[0\]\[0\] must be in \[0, V\) with V=61 .*got 61"),
])
def test_a_prompt_id_outside_the_vocabulary_is_refused_before_the_model(call, message):
    """An id >= V (or negative) reached torch as an IndexError from inside the forward; now it is a
    ValueError naming the input, the position, the value and V, and the model never runs."""
    model = build("gpt2", 6)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match=message):
        call(model)
    assert calls == []


def test_a_source_id_outside_the_vocabulary_is_refused_before_the_encoder():
    model = build("bart", 6)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    model.get_encoder().register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match=r"sources\[0\]\[2\] must be in \[0, V\) with V=61 .*got 99"):
        seq2seq_lm(model, [[5, 17, 99]])
    assert calls == []


def direct(model, function, **keywords):
    """``function`` (a library search) over ``hf.causal_lm``'s step on PROMPTS: the documented way
    that ``generate(mode=...)`` stands for."""
    dec = causal_lm(model, PROMPTS, max_new_tokens=6)
    return function(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=6,
                    length_penalty="power", alpha=1.0, pad_token_id=PAD, **keywords)


def test_generates_former_group_and_constraint_settings_run_those_modes():
    """num_beam_groups + diversity_penalty run diverse beam search and force_words_ids (each
    input, a word or a list of alternatives) constrained beam search, with generate's length
    normalization (power, length_penalty): the same hypotheses as the library functions over
    the adapter's step; every finished output holds the forced word and one of the alternatives
    (checked on the tokens, independently of the search)."""
    from beamsearch import AnyOf, constrained_beam_search, diverse_beam_search

    model = build("gpt2")
    got = generate(model, PROMPTS, num_beams=4, num_beam_groups=2, diversity_penalty=1.5, num_return_sequences=4,
                   max_new_tokens=6)
    assert got.mode == "diverse" and got.settings["num_groups"] == 2
    assert_same_hypotheses(got.hypotheses, direct(model, diverse_beam_search, beam_size=4, n_best=4, num_groups=2,
                                                  diversity_penalty=1.5), tol=FLOAT32)
    words = [[11, 12], [[30], [31, 32]]]
    got = generate(model, PROMPTS, num_beams=3, force_words_ids=words, num_return_sequences=2, max_new_tokens=6)
    assert got.mode == "constrained"
    expected = direct(model, constrained_beam_search, beam_size=3, n_best=2,
                      constraints=[[[11, 12], AnyOf([30], [31, 32])]] * len(PROMPTS))
    assert_same_hypotheses(got.hypotheses, expected, tol=FLOAT32)

    def holds(tokens, phrase):
        return any(tokens[i:i + len(phrase)] == phrase for i in range(len(tokens)))

    finished = [h for hyps in got.hypotheses for h in hyps if h.finished]
    assert finished
    for h in finished:
        assert holds(h.tokens, [11, 12]) and (holds(h.tokens, [30]) or holds(h.tokens, [31, 32]))


def test_every_registered_mode_runs_from_one_keyword_with_its_own_options():
    """mode= runs any registered mode, its own options as keywords: the same hypotheses as the
    library function; exact search's best scores at least beam search's (it is exact)."""
    from beamsearch import exact_search, stochastic_beam_search

    model = build("gpt2")
    got = generate(model, PROMPTS, mode="stochastic", k=3, seed=7, max_new_tokens=6)
    dec = causal_lm(model, PROMPTS, max_new_tokens=6)
    expected = stochastic_beam_search(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id,
                                      max_steps=6, k=3, seed=7, pad_token_id=PAD)
    assert got.mode == "stochastic"
    assert_same_hypotheses(got.hypotheses, expected, tol=FLOAT32)
    exact = generate(model, PROMPTS, mode="exact", node_budget=5000, num_return_sequences=2, max_new_tokens=6)
    assert_same_hypotheses(exact.hypotheses, direct(model, exact_search, n_best=2, node_budget=5000), tol=FLOAT32)
    beam = generate(model, PROMPTS, num_beams=2, max_new_tokens=6)
    for e, b in zip(exact.hypotheses, beam.hypotheses, strict=True):
        assert e[0].score >= b[0].score - 1e-5


def test_a_mode_registered_later_reaches_generate_without_edits():
    """A mode added to the registry (beam search whose own option sets the temperature) runs
    through generate(mode=) with its option; equal to beam_search_batch at that temperature."""
    import dataclasses

    from beamsearch.core.config import option
    from beamsearch.core.mode import Mode
    from beamsearch.modes import registry

    @dataclasses.dataclass(frozen=True)
    class SharpOptions:
        sharpness: float = option(2.0, "logits multiplied by S", metavar="S")

    def sharp_search(step_fn, init_state, prompts, *, sharpness=2.0, **keywords):
        return beam_search_batch(step_fn, init_state, prompts, temperature=1.0 / sharpness, **keywords)

    registry.register(Mode("sharp", "beam search at temperature 1/S", sharp_search, options=SharpOptions,
                           batch=lambda *a, **k: None, rows=lambda keywords: keywords["beam_size"],
                           sizes=("beam_size", "n_best", "early_stop", "return_token_logprobs", "pad_token_id")))
    try:
        model = build("gpt2")
        got = generate(model, PROMPTS, mode="sharp", sharpness=4.0, num_beams=3, max_new_tokens=6)
        assert got.mode == "sharp"
        assert_same_hypotheses(got.hypotheses, direct(model, beam_search_batch, beam_size=3, temperature=0.25),
                               tol=FLOAT32)
    finally:
        registry.MODES.pop("sharp")


def test_a_setting_of_the_models_config_that_the_mode_does_not_take_is_named_and_not_used():
    model = build("gpt2")
    model.generation_config.num_beams = 4
    with pytest.warns(UserWarning, match="mode 'stochastic' does not take the model's generation settings "
                                         "\\{'num_beams': 4\\}"):
        got = generate(model, PROMPTS, mode="stochastic", k=2, seed=0, max_new_tokens=4)
    assert all(len(hyps) == 2 for hyps in got.hypotheses)
