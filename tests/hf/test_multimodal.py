"""Vision-language and speech models through ``beamsearch.hf.generate`` and the adapters, on
tiny random-weight configs built in code (tests/hf_multimodal_zoo.py; nothing downloaded).

Oracles: ``model.generate`` (greedy, and ``mode="transformers"``'s beam search: sequences and
``sequences_scores``); a teacher-forced rescoring of each hypothesis (one input, no cache, the
model's plain forward on the prompt and the hypothesis's tokens); each input decoded alone
(batch independence, with images or audio of different sizes); forward hooks counting the
vision tower's and the encoder's calls.

BLIP (``BlipForConditionalGeneration``: its text decoder cross-attends the image embeddings at
every step) and GIT (``GitForCausalLM``: its forward prepends the image embeddings with its own
mask) are among them (beamsearch.hf.image_decoders). Not built: ``BlipForQuestionAnswering``,
refused by name (its answer decoder cross-attends the question's encoding at every step).
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from approx import FLOAT32, assert_same_hypotheses  # noqa: E402
from beamsearch.hf import causal_lm, generate, seq2seq_lm  # noqa: E402
from hf_multimodal_zoo import CASES, EOS, IMAGE, VEND, VIDEO, VSTART, build  # noqa: E402

NAMES = list(CASES)
NEW = 5
PLACEHOLDERS = [IMAGE, VIDEO, VSTART, VEND]


@functools.cache
def zoo(name: str):
    """The model, its two inputs alone and their batch (the inputs drawn once per model)."""
    model, case = build(name)
    torch.manual_seed(1)
    items = [case.item(0), case.item(1)]
    return model, case, items, case.batch(items)


def new_tokens(model, case, out: torch.Tensor, batch: dict, *, whole: bool = False) -> list[list[int]]:
    """``generate``'s sequences without the prompt (decoder start token) and the padding after eos
    (``whole``: a ``return_dict_in_generate`` output, whose Whisper sequences keep the start token)."""
    width = batch["input_ids"].shape[1] - case.drops_last if case.causal else 1
    if isinstance(model, transformers.WhisperForConditionalGeneration) and not whole:
        width = 0  # Whisper's generate returns the new tokens alone
    rows = []
    for row in out[:, width:].tolist():
        rows.append(row[: row.index(EOS) + 1] if EOS in row else row)
    return rows


@pytest.mark.parametrize("name", NAMES)
def test_greedy_is_generates(name):
    model, case, _, batch = zoo(name)
    want = model.generate(**batch, max_new_tokens=NEW, do_sample=False, num_beams=1)
    got = generate(model, **batch, max_new_tokens=NEW, num_beams=1)
    assert [h[0].tokens for h in got.hypotheses] == new_tokens(model, case, want, batch)


@pytest.mark.parametrize("name", NAMES)
def test_transformers_mode_gives_generates_beams_and_scores(name):
    model, case, _, batch = zoo(name)
    n = 1 if name == "whisper" else 2  # Whisper's generate keeps the best beam per input (its own rule)
    want = model.generate(**batch, max_new_tokens=NEW, do_sample=False, num_beams=3, num_return_sequences=n,
                          output_scores=True, return_dict_in_generate=True)
    got = generate(model, **batch, max_new_tokens=NEW, num_beams=3, num_return_sequences=n, mode="transformers",
                   output_scores=True, return_dict_in_generate=True)
    assert [h.tokens for hyps in got.hypotheses for h in hyps] == new_tokens(model, case, want.sequences, batch,
                                                                                     whole=True)
    scores = torch.tensor([h.score for hyps in got.hypotheses for h in hyps], dtype=torch.float64)
    torch.testing.assert_close(scores, want.sequences_scores.double(), atol=FLOAT32, rtol=0)


def rescored(model, case, item: dict, tokens: list[int], renormalized: bool = True) -> float:
    """The model's log-probability of ``tokens`` after input ``item``: one forward without a
    cache on the prompt (decoder start token) and the tokens, log-softmax at each position over
    the vocabulary but the placeholders (suppressed; ``renormalized=False``: over the whole
    vocabulary, as generate's rule suppresses them after its log-softmax)."""
    t = torch.tensor([tokens])
    with torch.no_grad():
        if case.causal:
            prompt = item["input_ids"]
            if case.drops_last:  # BLIP's generate: its bos first, the processor's [SEP] dropped
                prompt = torch.cat([torch.tensor([[model.config.text_config.bos_token_id]]), prompt[:, 1:-1]], 1)
            ids = torch.cat([prompt, t], dim=1)
            extra = {k: torch.cat([v, v.new_full(t.shape, int(k == "token_type_ids" and case.suffix_type))], dim=1)
                     for k, v in item.items() if k in ("token_type_ids", "mm_token_type_ids")}
            rest = {k: v for k, v in item.items() if k not in ("input_ids", "attention_mask", *extra)}
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **extra, **rest).logits[0]
            logits = logits[-t.shape[1] - 1: -1]  # GIT's logits begin with its image's positions
        else:
            start = model.generation_config.decoder_start_token_id
            decoder = torch.tensor([[start] + tokens[:-1]])
            logits = model(**item, decoder_input_ids=decoder).logits[0]
    logits = logits.double()
    if renormalized:
        logits[:, PLACEHOLDERS] = float("-inf")  # the search's suppress_tokens, applied before log_softmax
    return float(torch.log_softmax(logits, -1).gather(1, t.T).sum())


@pytest.mark.parametrize("name", NAMES)
def test_every_hypothesis_logprob_is_its_teacher_forced_rescoring(name):
    model, case, items, batch = zoo(name)
    got = generate(model, **batch, max_new_tokens=NEW, num_beams=3, num_return_sequences=3,
                   suppress_tokens=PLACEHOLDERS)  # a placeholder in the text would ask the rescoring for an image
    if not case.causal:  # each input as it sits in the batch (padded features and their mask)
        items = [{k: v[i: i + 1] for k, v in batch.items()} for i in range(2)]
    for item, hyps in zip(items, got.hypotheses, strict=True):
        assert len(hyps) == 3
        for h in hyps:
            assert h.logprob == pytest.approx(rescored(model, case, item, list(h.tokens)), abs=1e-4)


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n]().varied and n != "speech2text"] +
                         ["llava", "whisper", "blip", "git"])
def test_each_input_decodes_as_alone_in_a_batch_of_other_sizes(name):
    """Images (Qwen2-VL 16x16 and 16x32, Idefics3 a padded half image, Pix2Struct 16 and 8
    patches) of different sizes in one batch. Not Speech2Text: its convolutional subsampling
    reads the padding frames of a shorter audio (its encoder output differs from the input's
    alone, in ``generate`` too; test_transformers_mode_gives_generates_beams_and_scores decodes
    audio of two lengths in one batch)."""
    model, _, items, batch = zoo(name)
    together = generate(model, **batch, max_new_tokens=NEW, num_beams=3, num_return_sequences=2)
    alone = [generate(model, **item, max_new_tokens=NEW, num_beams=3, num_return_sequences=2).hypotheses[0]
             for item in items]
    assert_same_hypotheses(together.hypotheses, alone, tol=FLOAT32)


def _counted(module) -> list[int]:
    """The batch sizes ``module`` is called with, from now on."""
    sizes: list[int] = []
    module.register_forward_hook(lambda m, args, kwargs, out: sizes.append(
        next(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)).shape[0]), with_kwargs=True)
    return sizes


@pytest.mark.parametrize("beams", [1, 4, 8])
def test_the_vision_tower_runs_once_per_input_whatever_the_beam(beams):
    model, case = build("llava")
    torch.manual_seed(1)
    batch = case.batch([case.item(0), case.item(1)])
    sizes = _counted(model.model.vision_tower)
    generate(model, **batch, max_new_tokens=NEW, num_beams=beams)
    assert sizes == [2]  # one call, one row per input


@pytest.mark.parametrize("name, encoder", [("whisper", "model.encoder"), ("vision_encoder_decoder", "encoder"),
                                           ("florence2", "model.vision_tower"), ("blip", "vision_model"),
                                           ("git", "git.image_encoder")])
@pytest.mark.parametrize("beams", [1, 4])
def test_an_encoder_runs_once_per_input_whatever_the_beam(name, encoder, beams):
    model, case = build(name)
    torch.manual_seed(1)
    batch = case.batch([case.item(0), case.item(1)])
    sizes = _counted(functools.reduce(getattr, encoder.split("."), model))
    generate(model, **batch, max_new_tokens=NEW, num_beams=beams)
    assert sizes == [2]


def test_the_adapters_take_the_model_inputs():
    """causal_lm / seq2seq_lm with the processor's tensors: the same search as generate's."""
    from beamsearch import beam_search_batch

    model, case, _, batch = zoo("qwen2_vl")
    text = {k: batch[k] for k in ("input_ids", "attention_mask")}
    media = {k: v for k, v in batch.items() if k not in text}
    dec = causal_lm(model, text["input_ids"], attention_mask=text["attention_mask"], max_new_tokens=NEW, **media)
    got = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=NEW,
                            beam_size=3, n_best=2, length_penalty="power", alpha=1.0, early_stop=True)
    want = generate(model, **batch, max_new_tokens=NEW, num_beams=3, num_return_sequences=2)
    assert_same_hypotheses(got, want.hypotheses, tol=FLOAT32)
    model, _, _, batch = zoo("speech2text")
    dec = seq2seq_lm(model, None, max_new_tokens=NEW, **batch)
    got = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=dec.eos_token_id, max_steps=NEW,
                            beam_size=3, n_best=2, length_penalty="power", alpha=1.0, early_stop=True)
    assert_same_hypotheses(got, generate(model, **batch, max_new_tokens=NEW, num_beams=3,
                                         num_return_sequences=2).hypotheses, tol=FLOAT32)


def test_a_decoder_prompt_is_fed_before_the_first_token():
    """decoder_input_ids of three tokens (Whisper's task prompt, here random ids): generate's
    greedy tokens and sequences, which start with the prompt."""
    model, case, _, batch = zoo("whisper")
    prompt = torch.tensor([[2, 20, 21]] * 2)
    want = model.generate(**batch, decoder_input_ids=prompt, max_new_tokens=NEW, do_sample=False, num_beams=1)
    got = generate(model, **batch, decoder_input_ids=prompt, max_new_tokens=NEW, num_beams=1)
    assert [h[0].tokens for h in got.hypotheses] == [r[: r.index(EOS) + 1] if EOS in r else r
                                                       for r in want.tolist()]  # Whisper's: new tokens alone
    beam = generate(model, **batch, decoder_input_ids=prompt, max_new_tokens=NEW, num_beams=3,
                    return_dict_in_generate=True)
    assert beam.sequences[:, :3].tolist() == prompt.tolist()
    item = case.item(0)
    for h in beam.hypotheses[0]:
        start = model.generation_config.decoder_start_token_id
        assert start == 2
        decoder = torch.tensor([[2, 20, 21, *h.tokens[:-1]]])
        with torch.no_grad():
            logits = model(**zoo("whisper")[2][0], decoder_input_ids=decoder).logits[0, 2:]
        want_lp = float(torch.log_softmax(logits.double(), -1).gather(1, torch.tensor([h.tokens]).T).sum())
        assert h.logprob == pytest.approx(want_lp, abs=1e-4)
    assert item is not None


def test_inputs_a_model_does_not_take_are_refused_by_name():
    model, _, _, batch = zoo("llava")
    with pytest.raises(TypeError, match="input_features"):
        generate(model, **batch, input_features=torch.zeros(2, 8, 32), max_new_tokens=2)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1,
                                                                n_head=2)).eval()
    with pytest.raises(TypeError, match="pixel_values"):
        generate(gpt2, [[1, 2]], pixel_values=torch.zeros(1, 3, 16, 16), max_new_tokens=2)
    with pytest.raises(TypeError, match="text model.*pixel_values"):
        causal_lm(gpt2, [[1, 2]], pixel_values=torch.zeros(1, 3, 16, 16))


def test_model_inputs_with_another_row_count_are_refused_before_the_model_runs():
    model, _, _, batch = zoo("llava")
    with pytest.raises(ValueError, match=r"pixel_values has 1 rows for 2 inputs"):
        generate(model, **{**batch, "pixel_values": batch["pixel_values"][:1]}, max_new_tokens=2)
    whisper, _, _, batch = zoo("whisper")
    with pytest.raises(ValueError, match="decoder_input_ids must be 2 prompts"):
        generate(whisper, **batch, decoder_input_ids=[[2], [2, 5]], max_new_tokens=2)


def test_blip_captions_an_image_without_a_prompt_as_generate_does():
    """No input_ids: BLIP's generate starts each caption with its bos token alone; a prompt too
    short for its rule (it drops the last token) is refused by name."""
    model, case, _, batch = zoo("blip")
    pixels = batch["pixel_values"]
    want = model.generate(pixel_values=pixels, max_new_tokens=NEW, do_sample=False, num_beams=1)
    got = generate(model, pixel_values=pixels, max_new_tokens=NEW, num_beams=1)
    assert [h[0].tokens for h in got.hypotheses] == new_tokens(model, case, want, {"input_ids": torch.ones(2, 2)})
    with pytest.raises(ValueError, match="input_ids of BlipForConditionalGeneration"):
        generate(model, input_ids=torch.tensor([[2], [2]]), pixel_values=pixels, max_new_tokens=2)


def test_blip_stops_on_its_sep_token_as_generate_does():
    """BLIP's generate stops on its text config's sep_token_id whatever its generation config's
    eos (here 40): the sep made the second token of input 0's greedy caption, which then ends
    there; an eos given to the call is kept (the caption goes on past that token)."""
    model, case = build("blip")
    torch.manual_seed(1)
    batch = case.batch([case.item(0), case.item(1)])
    width = batch["input_ids"].shape[1] - 1
    sep = model.generate(**batch, max_new_tokens=8, do_sample=False, num_beams=1)[0, width + 1].item()
    model.generation_config.eos_token_id = 40
    model.config.text_config.sep_token_id = sep
    want = model.generate(**batch, max_new_tokens=8, do_sample=False, num_beams=1)
    got = generate(model, **batch, max_new_tokens=8, num_beams=1)
    rows = [r[: r.index(sep) + 1] if sep in r else r for r in want[:, width:].tolist()]
    assert [h[0].tokens for h in got.hypotheses] == rows and len(rows[0]) == 2
    own = generate(model, **batch, max_new_tokens=8, num_beams=1, eos_token_id=EOS)
    assert own.hypotheses[0][0].tokens[:2] == rows[0] and len(own.hypotheses[0][0].tokens) > 2


def test_blip_question_answering_is_refused_by_name():
    """Its steps need what no adapter holds (module docstring): a clear error, not a wrong search."""
    blip = transformers.BlipForQuestionAnswering(transformers.BlipConfig(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=16, patch_size=8),
        text_config=dict(vocab_size=64, hidden_size=32, encoder_hidden_size=16, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=4))).eval()
    with pytest.raises(TypeError, match="BlipForQuestionAnswering"):
        generate(blip, input_ids=torch.tensor([[1, 7]]), pixel_values=torch.zeros(1, 3, 16, 16), max_new_tokens=2)


def test_a_processor_output_is_taken_whole():
    """generate(model, processor(...)) with the BatchFeature as the first argument."""
    model, _, _, batch = zoo("idefics3")
    feature = transformers.BatchFeature(dict(batch))
    got = generate(model, feature, max_new_tokens=NEW, num_beams=2)
    assert_same_hypotheses(got.hypotheses, generate(model, **batch, max_new_tokens=NEW, num_beams=2).hypotheses,
                           tol=FLOAT32)


SMOKE = {"beam": {"num_beams": 3}, "greedy": {}, "constrained": {"num_beams": 3, "force_words_ids": [[9]]},
         "diverse": {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5},
         "stochastic": {"k": 3, "seed": 1}, "exact": {"node_budget": 300}, "transformers": {"num_beams": 3},
         "step": {"scorer": lambda prompts, partial: [float(len(s)) for s in partial], "n": 2,
                  "sample_seed": 0}}


@pytest.mark.parametrize("name", ["qwen2_vl", "whisper", "blip", "git"])
@pytest.mark.parametrize("mode", list(SMOKE))
def test_every_mode_s_outputs_on_a_vlm_and_a_speech_model_are_their_rescoring(name, mode):
    """Each mode's outputs (rows reordered by its own rule: groups, samples, an exact search's
    frontier, step search's candidates) keep their input's image or audio: every hypothesis's
    logprob is its teacher-forced rescoring after its own input (mode transformers: generate's
    rule, whose suppression comes after its log-softmax)."""
    from beamsearch.modes.registry import MODES

    assert set(SMOKE) >= set(MODES), "a mode registered since: add it here"
    model, case, items, batch = zoo(name)
    if mode == "step" and not case.causal:
        pytest.skip("step search needs a causal model (its states are taken by row)")
    got = generate(model, **batch, max_new_tokens=4, mode=mode, suppress_tokens=PLACEHOLDERS, **SMOKE[mode])
    assert len(got.hypotheses) == 2 and all(got.hypotheses)
    if not case.causal:  # each input as it sits in the batch
        items = [{k: v[i: i + 1] for k, v in batch.items()} for i in range(2)]
    for item, hyps in zip(items, got.hypotheses, strict=True):
        for h in hyps:
            want = rescored(model, case, item, list(h.tokens), renormalized=mode != "transformers")
            assert h.logprob == pytest.approx(want, abs=1e-4)
    if mode == "constrained":
        assert all(9 in h.tokens for hyps in got.hypotheses for h in hyps if h.finished)


@pytest.mark.parametrize("name", ["llava", "florence2"])
def test_a_catalogue_holds_the_outputs_to_its_entries(name):
    """Structured extraction from an image: every finished output is one of the entries, then eos."""
    model, _, _, batch = zoo(name)
    entries = [[10, 11], [12, 13, 14], [15]]
    got = generate(model, **batch, max_new_tokens=6, num_beams=3, num_return_sequences=3, catalogue=entries)
    for hyps in got.hypotheses:
        assert hyps and all(h.finished and list(h.tokens[:-1]) in entries and h.tokens[-1] == EOS for h in hyps)
    assert IMAGE not in [t for hyps in got.hypotheses for h in hyps for t in h.tokens]


def test_a_grammar_holds_the_outputs_of_an_image_prompt():
    """Structured extraction from an image: every output of a regex-constrained beam search on a
    LLaVA (its vocabulary a byte-level BPE's) matches the regex, and its logprob is its rescoring."""
    import re

    pytest.importorskip("llguidance")
    from hf_multimodal_zoo import llava
    from tests.processors.test_grammar_tokenizers import bpe

    tok = bpe()
    image = len(tok) + 3
    torch.manual_seed(3)
    model = llava(len(tok) + 4, image, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).eval()
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    pattern = r'\{"a":[12](,"b":"xb?")?\}'
    ids = torch.tensor([[image] * 4 + tok('{"a"')["input_ids"]] * 2)
    pixels = torch.randn(2, 3, 16, 16)
    got = generate(model, input_ids=ids, pixel_values=pixels, tokenizer=tok, regex=pattern, num_beams=3,
                   num_return_sequences=2, max_new_tokens=16)
    for hyps, texts in zip(got.hypotheses, got.texts, strict=True):
        assert hyps and all(h.finished for h in hyps)
        assert all(re.fullmatch(pattern, t) for t in texts), texts


def _text_and_media(batch: dict) -> tuple[dict, dict]:
    text = {"prompts": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    return text, {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}


@pytest.mark.parametrize("name", ["qwen2_vl", "idefics3", "blip", "git"])
def test_refill_rows_keep_their_inputs_images(name):
    """decode_stream joins cohorts prepared apart (images of other sizes, Qwen2-VL's rope deltas
    per row) into searches in flight: each input's hypotheses are those of the input alone."""
    from beamsearch import beam_search_batch
    from beamsearch.refill import decode_stream

    model, case = build(name)
    torch.manual_seed(2)
    inputs = [case.item(i % 2) for i in range(5)]
    search = dict(beam_size=2, n_best=2, max_steps=NEW, length_penalty="power", alpha=1.0)
    latest = {}

    def make_state(batch):
        text, media = _text_and_media(case.batch([inputs[int(i["source"])] for i in batch]))
        latest["dec"] = causal_lm(model, text["prompts"], attention_mask=text["attention_mask"], max_new_tokens=NEW,
                                  **media)
        return latest["dec"].init_state

    items = [{"prompt": x["input_ids"][0].tolist(), "source": str(i), "max_steps": 3 + i % 3}
             for i, x in enumerate(inputs)]
    stream = decode_stream(lambda s, y: latest["dec"].step(s, y), make_state, items, max_rows=4, eos_token_id=EOS,
                           **search)
    got = {d.index: d.hypotheses for d in stream}
    assert stream.stats.mixed_calls > 0  # inputs joined a search in flight
    for i, x in enumerate(inputs):
        text, media = _text_and_media(x)
        dec = causal_lm(model, text["prompts"], max_new_tokens=NEW, **media)
        want = beam_search_batch(dec.step, dec.init_state, dec.prompts, eos_token_id=EOS,
                                 **{**search, "max_steps": 3 + i % 3})
        assert_same_hypotheses([got[i]], want, tol=FLOAT32)
