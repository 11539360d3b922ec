"""step_search with a Hugging Face causal LM through the adapter and a reward model as the scorer:
the adapter's carried KV cache against full recomputation of every prefix, the rows the model is
fed (each token once: the prompt at the prefill, then one token per row per call), and
:class:`RewardScorer` against each candidate run alone through the reward model, read by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install '.[hf]'")

from approx import FLOAT32, assert_same_hypotheses  # noqa: E402
from beamsearch import step_search  # noqa: E402
from beamsearch.hf import RewardScorer, causal_lm  # noqa: E402
from models import object_rows  # noqa: E402

VOCAB, EOS, PAD, DELIM = 61, 3, 0, 7
PROMPTS = [[5, 17, 33, 8], [9], [40, 2, 11]]


def lm(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model.double()


def reward_model(kind="sequence", labels=1, seed=1):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD, num_labels=labels)
    cls = transformers.GPT2ForSequenceClassification if kind == "sequence" else transformers.GPT2ForTokenClassification
    return cls(cfg).eval()


class Recompute:
    """The reference step: the whole prefix through the model at every call, no cache (the state is
    each row's prefix)."""

    def __init__(self, model):
        self.model = model

    def init_state(self, prompts):
        return object_rows([tuple(p[:-1]) for p in prompts])

    @torch.no_grad()
    def step(self, state, y_prev):
        prefixes = [p + (int(t),) for p, t in zip(state, y_prev, strict=True)]
        logits = torch.stack([self.model(torch.tensor([list(p)])).logits[0, -1] for p in prefixes])
        return logits, object_rows(prefixes)


def common(**kw):
    args = dict(n=6, m=2, rounds=3, sample_seed=4, eos_token_id=EOS, max_steps=4, stop_sequences=[[DELIM]])
    args.update(kw)
    return args


@pytest.mark.parametrize("expansion", ["sample", "beam"])
def test_the_adapter_carries_each_partial_solution_and_matches_full_recomputation(expansion):
    model = lm()
    scorer = RewardScorer(reward_model())
    fed = []
    hook = model.register_forward_pre_hook(lambda mod, args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    dec = causal_lm(model, PROMPTS)
    got = step_search(dec.step, dec.init_state, dec.prompts, scorer=scorer, expansion=expansion, **common())
    hook.remove()
    ref = Recompute(model)
    want = step_search(ref.step, ref.init_state(PROMPTS), PROMPTS, scorer=scorer, expansion=expansion, **common())
    assert_same_hypotheses(got, want, tol=FLOAT32)  # the adapter hands float32 logits
    assert [[h.segments for h in r] for r in got] == [[h.segments for h in r] for r in want]
    assert got.info == want.info
    # the prefill feeds the prompts once; every later call one token per row (no prefix again)
    assert fed[0] == (3, 4) and all(width == 1 for _, width in fed[1:])
    first_rows = 3 * (6 if expansion == "sample" else 1)  # round 1's first call: the prefill's logits
    assert sum(rows for rows, _ in fed[1:]) == sum(x["generated_tokens"] for x in got.info) - first_rows
    assert len(fed) - 1 == got.model_calls - 1


def by_hand(model, row, label, transform, pooled):
    """The row alone through the model, its logits at the last token by hand: a sequence
    classifier's head applied to the last hidden state, a token classifier's last position."""
    with torch.no_grad():
        if pooled:
            x = model.score(model.transformer(torch.tensor([row])).last_hidden_state[0, -1]).double().tolist()
        else:
            x = model(torch.tensor([row])).logits[0, -1].double().tolist()
    if transform == "softmax":
        top = max(x)
        z = sum(math.exp(v - top) for v in x)
        return math.exp(x[label] - top) / z
    return 1 / (1 + math.exp(-x[label])) if transform == "sigmoid" else x[label]


@pytest.mark.parametrize("kind, labels, kw", [("sequence", 1, {}), ("sequence", 3, dict(label=1)),
                                              ("token", 2, {}), ("token", 1, dict(transform="logit")),
                                              ("token", 2, dict(step_tag=[DELIM, 12], batch_rows=2))])
def test_reward_scorer_reads_each_row_at_its_last_token(kind, labels, kw):
    model = reward_model(kind, labels)
    scorer = RewardScorer(model, **kw)
    prompts = [[5, 17, 33], [9], [40, 2, 11, 4, 4]]
    partials = [[1, 2, DELIM], [6, 6, 6, 6, DELIM, 9, DELIM], [EOS]]
    got = scorer(prompts, partials)
    label = kw.get("label", labels - 1)
    transform = kw.get("transform", "sigmoid" if labels == 1 else "softmax")
    want = [by_hand(model, p + s + kw.get("step_tag", []), label, transform, kind == "sequence")
            for p, s in zip(prompts, partials, strict=True)]
    assert got.dtype == np.float64 and got.tolist() == pytest.approx(want, abs=FLOAT32)


def test_reward_scorer_refusals():
    with pytest.raises(ValueError, match="label must be in"):
        RewardScorer(reward_model("token", 2), label=2)
    with pytest.raises(ValueError, match="transform must be one of"):
        RewardScorer(reward_model(), transform="tanh")
    seq = reward_model()
    seq.config.pad_token_id = None
    with pytest.raises(ValueError, match="pad_token_id"):
        RewardScorer(seq)


@pytest.mark.parametrize("call, error, message", [
    (lambda s: s([[5], [6]], [[1]]), ValueError,
     r"^prompts and partial_solutions must hold one entry per candidate; got 2 and 1$"),
    (lambda s: s([[5], []], [[1], []]), ValueError,
     r"^prompts\[1\] \+ partial_solutions\[1\] is empty \(and no step_tag\): "
     r"the reward model reads at least one token$"),
    (lambda s: s(5, [[1]]), TypeError, r"^prompts must be a sequence of token-id lists; got 5$"),
    (lambda s: s([[5]], "ab"), TypeError, r"^partial_solutions must be a sequence of token-id lists; got 'ab'$"),
    (lambda s: s([[5]], ["ab"]), TypeError, r"^partial_solutions\[0\] must be a sequence of token ids; got 'ab'$"),
    (lambda s: s([[5]], [[1, -2]]), ValueError, r"^partial_solutions\[0\]\[1\] must be in \[0, V\); got -2$"),
    (lambda s: s([[5, 1.5]], [[1]]), TypeError, r"^prompts\[0\]\[1\] must be an integer; got 1\.5 of type float$"),
    (lambda s: RewardScorer(reward_model(), step_tag=[DELIM, VOCAB]), ValueError,
     rf"^step_tag\[1\] must be in \[0, V\) with V={VOCAB} \(the model's embeddings\); got {VOCAB}$"),
    (lambda s: RewardScorer(object()), TypeError,
     r"^model must be a transformers \.\.\.ForSequenceClassification or "
     r"\.\.\.ForTokenClassification model; got object$"),
])
def test_reward_scorer_names_bad_calls(call, error, message):
    """Bad candidates are refused before the model runs, naming the argument (rows that zip would
    have cut short, an empty row torch would fail to reshape, ids that are not ints)."""
    with pytest.raises(error, match=message):
        call(RewardScorer(reward_model()))
    assert RewardScorer(reward_model(), step_tag=[DELIM])([[]], [[]]).shape == (1,)  # the tag alone is a row


def test_reward_scorer_takes_rows_as_tensors_and_arrays():
    """Rows given as torch tensors or numpy arrays score as the same rows given as lists."""
    model = reward_model()
    want = RewardScorer(model, keep_cache=False)([[5, 6], [9]], [[1, 2], [3]])
    for as_row in (torch.tensor, np.array):
        got = RewardScorer(model, keep_cache=False)([as_row([5, 6]), as_row([9])], [as_row([1, 2]), as_row([3])])
        assert got.tolist() == want.tolist()


def test_a_causal_lm_is_refused_as_a_reward_model():
    """A causal LM (logits [rows, V], not one per label) would be read at column ``label`` of its
    vocabulary: refused at the first call, saying what it gave."""
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=1,
                                                              n_head=2, pad_token_id=PAD)).eval()
    with pytest.raises(ValueError, match=rf"^model must give one logit per label \(num_labels=2\) at a row's last "
                                         rf"token; it gave shape \(1, {VOCAB}\) \(a causal LM's logits\?\)"):
        RewardScorer(lm)([[5]], [[6]])



def test_a_row_ending_with_the_pad_id_is_read_at_its_last_token():
    """eos often doubles as the pad id: a finished solution then ends with it, and the sequence
    classifier must still pool there (not at the last token before it, as its search over ids would)."""
    model = reward_model("sequence", 1)
    got = RewardScorer(model)([[5, 6], [9]], [[4, PAD], [7, 8, 9, PAD]])
    want = [by_hand(model, row, 0, "sigmoid", True) for row in ([5, 6, 4, PAD], [9, 7, 8, 9, PAD])]
    assert got.tolist() == pytest.approx(want, abs=FLOAT32)
    with pytest.raises(ValueError, match="prompts"):
        RewardScorer(reward_model())([[5]], [[VOCAB]])


def test_reward_scorer_refuses_a_row_longer_than_its_positions():
    """The reward model has 128 positions: a row of 128 tokens is scored, one of 129 (the step tag
    counted) is a ValueError naming the candidate and both numbers before the model runs (it was an
    IndexError from the position embedding); in a step search, after the first round's segments."""
    scorer = RewardScorer(reward_model(), step_tag=[DELIM])
    assert scorer([[5] * 100, [9]], [[1] * 27, [2]]).shape == (2,)  # 100 + 27 + 1 = 128
    with pytest.raises(ValueError, match=r"^prompts\[1\] \+ partial_solutions\[1\] \+ step_tag is 129 tokens "
                                         r"\(100 \+ 28 \+ 1\), more than the reward model's 128 positions"):
        scorer([[9], [5] * 100], [[2], [1] * 28])
    torch.manual_seed(0)
    wide = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=32,
                                                                 n_layer=2, n_head=2, eos_token_id=EOS)).eval()
    prompt = [5] * 126
    dec = causal_lm(wide, [prompt], max_new_tokens=8)
    with pytest.raises(ValueError, match=r"^prompts\[\d+\] \+ partial_solutions\[\d+\] is 1[23]\d tokens \(126 \+ "):
        step_search(dec.step, dec.init_state, dec.prompts, scorer=RewardScorer(reward_model()),
                    **common(max_steps=8, min_new_tokens=3, stop_sequences=[]))


def test_step_search_on_bart_does_not_force_eos_at_every_segments_end():
    """BART's generation config forces eos at max_new_tokens: step search, whose max_new_tokens is
    per segment, would end every solution in round 1 (and forced_bos would start every segment);
    the config's setting is dropped with a warning, one the call gives is refused by name."""
    import torch

    from beamsearch import hf
    from tests.hf.test_generation_models import EOS, build

    model = build("bart", 3)
    model.generation_config.forced_eos_token_id = EOS[0]
    model.generation_config.forced_bos_token_id = None
    scorer = lambda prompts, solutions: [float(len(s)) for s in solutions]  # noqa: E731  longer is better
    step = dict(mode="step", scorer=scorer, n=2, m=1, rounds=3, max_new_tokens=3, sample_seed=0, num_beams=1)
    with pytest.warns(UserWarning, match="forced_eos_token_id"):
        out = hf.generate(model, torch.tensor([[5, 6, 7, EOS[0]]]), **step)
    segments = [len(s.segments) for s in out.hypotheses[0]]
    assert max(segments) > 1  # with the forced eos every solution ended in its first segment
    with pytest.raises(ValueError, match="mode 'step' does not take forced_eos_token_id"):
        hf.generate(model, torch.tensor([[5, 6, 7, EOS[0]]]), forced_eos_token_id=EOS[0], **step)
