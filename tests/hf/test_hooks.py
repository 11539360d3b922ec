"""``beamsearch.hf.generate``'s ``model.generate`` hooks: ``logits_processor``,
``prefix_allowed_tokens_fn``, ``stopping_criteria`` and ``streamer``.

The oracle is ``model.generate`` itself, with the same hooks, on random-weight GPT-2, Llama and
BART, where its rules and ours coincide: greedy decoding (the same tokens) and
``mode="transformers"``, ``generate``'s own beam search rule (the same sequences in the same
order, scores to 1e-5). The streamer's beam-search tokens are checked against the best hypothesis.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from transformers import (  # noqa: E402
    LogitsProcessor,
    LogitsProcessorList,
    MaxLengthCriteria,
    MaxTimeCriteria,
    MinLengthLogitsProcessor,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
    TextIteratorStreamer,
)

from beamsearch.hf import generate  # noqa: E402
from tests.hf.test_generation import tokenizer  # noqa: E402
from tests.hf.test_generation_models import EOS, PROMPTS, VOCAB, build, padded, theirs  # noqa: E402

NEW = 8
MODES = {"greedy": dict(num_beams=1), "transformers": dict(num_beams=3, num_return_sequences=2)}


class BanFromRow(LogitsProcessor):
    """Bans, per row, the token in the row's first column (a pad where the prompt is padded) and
    the token after its last one: reads the whole row as generate holds it."""

    def __call__(self, input_ids, scores):
        rows = torch.arange(scores.shape[0])
        scores = scores.clone()
        scores[rows, input_ids[:, 0]] = -float("inf")
        scores[rows, (input_ids[:, -1] + 1) % VOCAB] = -float("inf")
        return scores


def ours_and_theirs(name, mode, seed=5, prompts=PROMPTS, **hooks):
    """(our hypotheses' tokens and scores, generate's tokens and sequences_scores) on the padded batch."""
    model = build(name, seed, eos_bias=2.0)
    kw = dict(MODES[mode], max_new_tokens=NEW)
    expected, out = theirs(model, prompts, **kw, **hooks)
    ids, mask = padded(model, prompts)
    got = generate(model, ids, attention_mask=mask, mode=None if mode == "greedy" else mode, **kw, **hooks)
    hyps = [h for hs in got.hypotheses for h in hs]
    scores = None if mode == "greedy" else out.sequences_scores.tolist()
    return ([h.tokens for h in hyps], [h.score for h in hyps]), (expected, scores), got


def assert_same(name, mode, **hooks):
    (tokens, scores), (expected, their_scores), got = ours_and_theirs(name, mode, **hooks)
    assert tokens == expected
    if their_scores is not None:
        assert scores == pytest.approx(their_scores, abs=1e-5)
    return got


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["gpt2", "llama", "bart"])
def test_logits_processors_give_generates_outputs(name, mode):
    """A LogitsProcessorList of transformers' own processors and one reading whole rows (the
    padding, the length counted with the prompt): generate's sequences and scores. Without the
    processors the outputs differ (the comparison is not vacuous)."""
    model_width = 7 if name != "bart" else 1  # min_length counts the padded prompt (the decoder start)
    procs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(2.5), BanFromRow(),
                                 MinLengthLogitsProcessor(model_width + 4, EOS)])
    got = assert_same(name, mode, logits_processor=procs)
    (plain, _), _, _ = ours_and_theirs(name, mode)
    assert plain != [h.tokens for hs in got.hypotheses for h in hs]
    assert all(len(h.tokens) >= 4 for hs in got.hypotheses for h in hs)


@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_with_our_beam_rule_a_transformers_processor_acts_as_the_librarys_own(name):
    """mode="beam" (no generate oracle: our rule): transformers' repetition penalty as a
    logits_processor gives what the setting repetition_penalty (the library's RepetitionPenalty,
    tested against its definition) gives, on one unpadded prompt; both act before log_softmax."""
    model = build(name, 11, eos_bias=1.0)
    kw = dict(num_beams=3, num_return_sequences=2, max_new_tokens=NEW)
    for prompt in PROMPTS:
        hooked = generate(model, [prompt], logits_processor=[RepetitionPenaltyLogitsProcessor(2.5)], **kw)
        setting = generate(model, [prompt], repetition_penalty=2.5, **kw)
        assert [h.tokens for h in hooked.hypotheses[0]] == [h.tokens for h in setting.hypotheses[0]]
        assert [h.score for h in hooked.hypotheses[0]] == pytest.approx([h.score for h in setting.hypotheses[0]],
                                                                        abs=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_prefix_allowed_tokens_fn_gives_generates_outputs_and_sees_its_rows(name, mode):
    """generate's PrefixConstrainedLogitsProcessor and ours: the same outputs; every call we make
    is one generate makes (batch id, the row as generate holds it)."""
    calls = {"ours": set(), "theirs": set()}
    side = ["theirs"]

    def allowed(batch_id, input_ids):
        calls[side[0]].add((batch_id, tuple(input_ids.tolist())))
        last = int(input_ids[-1])
        return [(last * 7 + batch_id + k) % VOCAB for k in range(6)] + EOS

    model = build(name, 6, eos_bias=1.0)
    kw = dict(MODES[mode], max_new_tokens=NEW)
    expected, out = theirs(model, PROMPTS, prefix_allowed_tokens_fn=allowed, **kw)
    side[0] = "ours"
    ids, mask = padded(model, PROMPTS)
    got = generate(model, ids, attention_mask=mask, mode=None if mode == "greedy" else mode,
                   prefix_allowed_tokens_fn=allowed, **kw)
    assert [h.tokens for hs in got.hypotheses for h in hs] == expected
    if mode == "transformers":
        assert [h.score for hs in got.hypotheses for h in hs] == pytest.approx(out.sequences_scores.tolist(),
                                                                               abs=1e-5)
    assert calls["ours"] and calls["ours"] <= calls["theirs"]


class StopOnToken(StoppingCriteria):
    """Flags the rows whose last token is ``token``."""

    def __init__(self, token):
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


class StopInput(StoppingCriteria):
    """Flags, once the rows are ``length`` tokens long, those whose prompt starts with ``head``
    (one input of the batch)."""

    def __init__(self, head, length):
        self.head, self.length = head, length

    def __call__(self, input_ids, scores, **kwargs):
        hit = (input_ids[:, : len(self.head)] == torch.tensor(self.head)).all(dim=1)
        return hit & (input_ids.shape[1] >= self.length)


def cut_after(rows, stops):
    """Each of generate's rows up to and including its first token in ``stops`` (generate pads
    the rows that stopped)."""
    out = []
    for row in rows:
        at = next((j for j, t in enumerate(row) if t in stops), len(row) - 1)
        out.append(row[: at + 1])
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama", "bart"])
def test_greedy_stopping_criteria_give_generates_outputs(name):
    """A criterion that stops after a given token, and MaxLengthCriteria (the prompt counted as
    generate holds it): generate's greedy outputs; a stopped hypothesis is unfinished."""
    model = build(name, 7, eos_bias=1.0)
    ids, mask = padded(model, PROMPTS)
    plain = generate(model, ids, attention_mask=mask, num_beams=1, max_new_tokens=NEW).hypotheses
    token = next(h[0].tokens[2] for h in plain if len(h[0].tokens) > 3 and h[0].tokens[2] not in EOS)
    width = 1 if model.config.is_encoder_decoder else ids.shape[1]  # the decoder start, or the padded prompt
    for criteria, stops in [([StopOnToken(token)], [token, *EOS]), ([MaxLengthCriteria(width + 3)], EOS)]:
        criteria = StoppingCriteriaList(criteria)
        expected, _ = theirs(model, PROMPTS, num_beams=1, max_new_tokens=NEW, stopping_criteria=criteria)
        got = generate(model, ids, attention_mask=mask, num_beams=1, max_new_tokens=NEW, stopping_criteria=criteria)
        tokens = [h[0].tokens for h in got.hypotheses]
        assert tokens == cut_after(expected, stops)
        assert tokens != [h[0].tokens for h in plain]
        assert [h[0].finished for h in got.hypotheses] == [t[-1] in EOS for t in tokens]


@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_the_transformers_rule_with_length_and_time_criteria_gives_generates_outputs(name):
    """Criteria that flag every row of an input at once (MaxLengthCriteria, MaxTimeCriteria(0)):
    with mode="transformers", generate's sequences and scores."""
    model = build(name, 8, eos_bias=3.0)
    width = 1 if model.config.is_encoder_decoder else padded(model, PROMPTS)[0].shape[1]
    for criteria in (MaxLengthCriteria(width + 3), MaxTimeCriteria(0.0)):
        got = assert_same(name, "transformers", stopping_criteria=StoppingCriteriaList([criteria]))
        assert max(len(h.tokens) for hs in got.hypotheses for h in hs) < NEW


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_criterion_stops_only_the_inputs_it_flags(name):
    """A criterion flagging input 2's rows after 2 new tokens: input 2 gets generate's output with
    max_new_tokens=2 (its rows end there), the other inputs generate's full output (transformers
    rule); its hypotheses that did not finish are marked unfinished. (Causal LMs: the criterion
    knows the input by its prompt.)"""
    model = build(name, 9, eos_bias=1.0)
    ids, mask = padded(model, PROMPTS)
    kw = dict(MODES["transformers"], max_new_tokens=NEW)
    criterion = StopInput(ids[2, :3].tolist(), ids.shape[1] + 2)
    got = generate(model, ids, attention_mask=mask, mode="transformers",
                   stopping_criteria=StoppingCriteriaList([criterion]), **kw)
    full, full_out = theirs(model, PROMPTS, **kw)
    short, short_out = theirs(model, [PROMPTS[2]], **dict(kw, max_new_tokens=2))
    n = kw["num_return_sequences"]
    for i, hyps in enumerate(got.hypotheses):
        exp = short if i == 2 else full[i * n: (i + 1) * n]
        exp_scores = short_out.sequences_scores.tolist() if i == 2 else full_out.sequences_scores[i * n:(i + 1) * n]
        assert [h.tokens for h in hyps] == exp
        assert [h.score for h in hyps] == pytest.approx(list(map(float, exp_scores)), abs=1e-4)
    assert all(h.finished == (h.tokens[-1] in EOS) for h in got.hypotheses[2])


class Recording:
    """A streamer that records every call (``put`` with the values, ``end``), and how many model
    forwards had run at each put."""

    def __init__(self, counter=None):
        self.calls, self.counter, self.at = [], counter, []

    def put(self, value):
        self.calls.append(("put", value.tolist()))
        self.at.append(self.counter.calls if self.counter is not None else 0)

    def end(self):
        self.calls.append(("end",))


@pytest.mark.parametrize("name", ["gpt2", "bart"])
def test_greedy_streams_generates_calls(name):
    model = build(name, 10, eos_bias=2.0)
    for prompt in (PROMPTS[0], PROMPTS[3]):
        ids = torch.tensor([prompt])
        mine, yours = Recording(), Recording()
        with torch.no_grad():
            model.generate(input_ids=ids, do_sample=False, num_beams=1, max_new_tokens=NEW, streamer=yours)
        got = generate(model, ids, num_beams=1, max_new_tokens=NEW, streamer=mine)
        assert mine.calls == yours.calls
        assert [c[1] for c in mine.calls[1:-1]] == [[t] for t in got.hypotheses[0][0].tokens]


class Forwards:
    def __init__(self, model):
        self.calls = 0
        model.register_forward_pre_hook(self.hook)

    def hook(self, *args):
        self.calls += 1


@pytest.mark.parametrize("mode", ["beam", "transformers"])
@pytest.mark.parametrize("name", ["gpt2", "llama", "bart"])
def test_beam_search_streams_the_best_hypothesis_as_it_becomes_certain(name, mode):
    """The streamer gets the prompt, then exactly the best hypothesis's tokens, one per call, in
    order, then end(); some of them before the last model call (streamed during the search)."""
    streamed_early = 0
    for seed, prompt in enumerate(PROMPTS):
        model = build(name, 20 + seed)
        forwards = Forwards(model)
        rec = Recording(forwards)
        got = generate(model, [prompt], mode=mode, num_beams=3, max_new_tokens=NEW, streamer=rec)
        best = got.hypotheses[0][0].tokens
        start = [prompt] if not model.config.is_encoder_decoder else [[model.generation_config.decoder_start_token_id]]
        assert rec.calls[0] == ("put", start) and rec.calls[-1] == ("end",)
        assert [c[1] for c in rec.calls[1:-1]] == [[t] for t in best]
        streamed_early += sum(1 for n in rec.at[1:] if n < forwards.calls)
    assert streamed_early > 0


def test_a_text_iterator_streamer_read_from_another_thread_gives_the_best_text():
    tok = tokenizer()
    model = build("gpt2", 30, eos_bias=1.0)
    text = " ".join(f"w{t}" for t in PROMPTS[0])
    streamer = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True, timeout=60)
    result = {}
    worker = threading.Thread(target=lambda: result.update(
        out=generate(model, [text], tokenizer=tok, num_beams=3, max_new_tokens=NEW, streamer=streamer)))
    worker.start()
    pieces = list(streamer)
    worker.join()
    assert "".join(pieces).strip() == result["out"].texts[0][0]
    assert len(pieces) > 1


class WrongShape(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        return torch.tensor(True)


BAD_HOOKS = [
    (dict(logits_processor=RepetitionPenaltyLogitsProcessor(2.0)), TypeError, "logits_processor must be a list"),
    (dict(logits_processor=[3]), TypeError, r"logits_processor\[0\] must be callable"),
    (dict(logits_processor=[PrefixConstrainedLogitsProcessor(lambda b, s: [1], 1)]), ValueError,
     "PrefixConstrainedLogitsProcessor.*prefix_allowed_tokens_fn"),
    (dict(logits_processor=[RepetitionPenaltyLogitsProcessor(2.0)], repetition_penalty=1.5), ValueError,
     "repetition_penalty=1.5 are both given"),
    (dict(prefix_allowed_tokens_fn=[1, 2]), TypeError, "prefix_allowed_tokens_fn must be callable"),
    (dict(stopping_criteria=[None]), TypeError, r"stopping_criteria\[0\] must be callable"),
    (dict(streamer=object()), TypeError, "streamer must have put"),
    (dict(streamer=Recording(), inputs=PROMPTS[:2]), ValueError, "streams one input.*got 2 inputs"),
    (dict(streamer=Recording(), mode="diverse", num_beam_groups=2, diversity_penalty=1.0), ValueError,
     "follows the best hypothesis of modes"),
    (dict(stopping_criteria=[WrongShape()], mode="exact"), ValueError, "mode 'exact' has no step callback"),
]


@pytest.mark.parametrize("hooks,error,message", BAD_HOOKS)
def test_a_bad_hook_is_a_clear_error_before_the_model_runs(hooks, error, message):
    model = build("gpt2", 32)
    forwards = Forwards(model)
    hooks = dict(hooks)
    inputs = hooks.pop("inputs", PROMPTS[:1])
    with pytest.raises(error, match=message):
        generate(model, inputs, num_beams=hooks.pop("num_beams", 4), max_new_tokens=4, **hooks)
    assert forwards.calls == 0


def test_a_criterion_answer_of_the_wrong_shape_is_named():
    model = build("gpt2", 33)
    with pytest.raises(ValueError, match=r"stopping_criteria\[0\] must return a bool tensor of one value per row"):
        generate(model, PROMPTS, num_beams=1, max_new_tokens=4, stopping_criteria=[WrongShape()])
