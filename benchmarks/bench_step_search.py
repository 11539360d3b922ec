"""Step search: ``beamsearch.step_search`` against a search-and-learn-style loop, side by side.

The loop is what Hugging Face's search-and-learn does (its beam search with a process reward
model), on ``transformers``: one prompt at a time; per round one ``model.generate`` call
(``do_sample=True``) for that prompt's candidates (round 1: the prompt n times; later: each of the
n / m partial solutions kept, m times), stopped per row at the step delimiter or eos, each row's
segment cut at the first of them; then one reward-model call for those candidates; the n / m best
unfinished (by the last step's score) go on, the finished are collected. Ours: every prompt at
once, one model call per token step for every segment of every prompt, one reward-model call per
round, each partial solution's KV cache carried (the loop re-feeds prompt + partial solution at
every round).

Same budget and the same outputs' distribution on both sides: the same random-weight GPT-2
(``--layers`` x each of ``--width``, V = ``--vocab``) with the same logit bias (the delimiter +4,
eos +2, so that segments end at both; applied as a processor on both sides), temperature 1, no
top-k or top-p, the same segment limit, n, m and rounds, and the same random-weight reward model (a
GPT-2 sequence classifier of the same size, one label, sigmoid) through
:class:`beamsearch.hf.RewardScorer`: the loop's with ``keep_cache=False`` (it reads every
candidate's whole text, as search-and-learn's does), ours keeping the rows it read, which the next
round's candidates extend. One run; per width, the two searches alternate over ``--reps``
repetitions and each column is the median.

Columns: seconds and prompts per second (both; the ratio, ours over the loop, below), the seconds
inside the scorer and the rest (generation and selection; its ratio too), model rows per call (the
causal LM's forward calls: rows of the batch, prefill included), the causal LM's forward calls,
and the tokens the causal LM and the reward model computed (prefills, re-fed prefixes and padding
counted).

    python benchmarks/bench_step_search.py                       # 32 prompts, n=16, m=4, 4 rounds;
                                                                 # widths 64, 128, 256
    python benchmarks/bench_step_search.py --prompts 8 --reps 1  # a smaller measurement
    python benchmarks/bench_step_search.py --device cuda         # both models on an accelerator
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers

from beamsearch import step_search
from beamsearch.hf import RewardScorer, causal_lm

EOS, PAD, DELIM = 2, 0, 13


def models(layers: int, width: int, vocab: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The generator and the reward model, random weights from configs (seeded)."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=vocab, n_positions=512, n_embd=width, n_layer=layers, n_head=4, bos_token_id=1,
               eos_token_id=EOS, pad_token_id=PAD)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).eval()
    prm = transformers.GPT2ForSequenceClassification(transformers.GPT2Config(**cfg, num_labels=1)).eval()
    return lm, prm


def bias(vocab: int) -> torch.Tensor:
    b = torch.zeros(vocab)
    b[DELIM], b[EOS] = 4.0, 2.0
    return b


class Bias(transformers.LogitsProcessor):
    """The same bias as a ``generate`` processor."""

    def __init__(self, b: torch.Tensor) -> None:
        self.b = b

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores + self.b.to(scores.device, scores.dtype)


class AtDelimiter(transformers.StoppingCriteria):
    """A row stops once its last token is the delimiter (eos stops it by itself)."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        return input_ids[:, -1] == DELIM


class Timed:
    """The scorer, with the seconds spent in it."""

    def __init__(self, scorer: RewardScorer) -> None:
        self.scorer, self.seconds = scorer, 0.0

    def __call__(self, prompts: list, partials: list):
        start = time.perf_counter()
        try:
            return self.scorer(prompts, partials)
        finally:
            self.seconds += time.perf_counter() - start

    def reset(self) -> float:
        out, self.seconds = self.seconds, 0.0
        return out


class Rows:
    """Counts a model's forward calls, their rows and the tokens fed (columns that are padding
    for a row count too: what the model computes)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = self.rows = self.tokens = 0
        model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module: object, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:  # a sequence classifier given embeddings [c, t, d]
            ids = kwargs["inputs_embeds"][..., 0]
        self.calls += 1
        self.rows += int(ids.shape[0])
        self.tokens += int(ids.numel())

    def reset(self) -> tuple[int, int, int]:
        out = (self.calls, self.rows, self.tokens)
        self.calls = self.rows = self.tokens = 0
        return out


def segment(new: list[int], limit: int) -> list[int]:
    """A row of ``generate``'s new tokens cut after its first delimiter or eos (at most ``limit``)."""
    for i, t in enumerate(new[:limit]):
        if t in (DELIM, EOS):
            return new[: i + 1]
    return new[:limit]


@torch.inference_mode()
def loop_one_prompt(lm, scorer, prompt, n, m, rounds, limit, processors) -> list[list[int]]:
    """search-and-learn's beam search for one prompt: one ``generate`` call per round."""
    live: list[list[int]] = [[]]
    done: list[list[int]] = []
    for r in range(rounds):
        if not live:
            break
        rows = [prompt + p for p in live for _ in range(n if r == 0 else m)]
        parts = [p for p in live for _ in range(n if r == 0 else m)]
        width = max(len(x) for x in rows)
        device = next(lm.parameters()).device
        ids = torch.tensor([[PAD] * (width - len(x)) + x for x in rows], device=device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in rows], device=device)
        out = lm.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=limit, top_k=0,
                          top_p=1.0, temperature=1.0, eos_token_id=EOS, pad_token_id=PAD,
                          logits_processor=processors, stopping_criteria=[AtDelimiter()])
        cands = [p + segment(o, limit) for p, o in zip(parts, out[:, width:].tolist(), strict=True)]
        scores = scorer([prompt] * len(cands), cands)
        going = sorted((i for i, c in enumerate(cands) if c[-1] != EOS), key=lambda i: -scores[i])
        done += [c for c in cands if c[-1] == EOS]
        live = [cands[i] for i in going[: n // m]]
    return done + live


def run_loop(lm, scorer, prompts, args, vocab) -> list[list[list[int]]]:
    processors = transformers.LogitsProcessorList([Bias(bias(vocab))])
    return [loop_one_prompt(lm, scorer, p, args.n, args.m, args.rounds, args.max_steps, processors) for p in prompts]


def run_ours(lm, scorer, prompts, args, vocab, seed):
    b = bias(vocab)
    dec = causal_lm(lm, prompts)
    return step_search(dec.step, dec.init_state, dec.prompts, scorer=scorer, n=args.n, m=args.m, rounds=args.rounds,
                       sample_seed=seed, eos_token_id=EOS, max_steps=args.max_steps, stop_sequences=[[DELIM]],
                       logits_processors=[lambda logits, ctx: logits + b.to(logits.device, logits.dtype)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=16, help="the segment limit")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, nargs="+", default=[64, 128, 256],
                        help="model widths (both models), one table row pair each")
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu", help="torch device of both models (e.g. cuda)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"device {args.device}; "
          f"GPT-2 {args.layers} layers, V={args.vocab}; {args.prompts} prompts, n={args.n}, m={args.m}, "
          f"{args.rounds} rounds, segments <= {args.max_steps} tokens; median of {args.reps}")
    print(f"{'width':>5} {'search':<22} {'seconds':>8} {'prompts/s':>10} {'scorer s':>9} {'rest s':>7} "
          f"{'rows/call':>10} {'LM calls':>9} {'LM tokens':>10} {'RM tokens':>10}")
    for width in args.width:
        measure(args, width)


def measure(args: argparse.Namespace, width: int) -> None:
    """Both searches on models of ``width``, alternating over ``args.reps`` repetitions."""
    lm, prm = (model.to(args.device) for model in models(args.layers, width, args.vocab))
    # the loop's reward model reads each candidate's whole text, as search-and-learn's does; ours
    # keeps the rows it read for the next round's candidates, which extend them
    scorers = {"loop": Timed(RewardScorer(prm, keep_cache=False)), "ours": Timed(RewardScorer(prm))}
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, args.vocab, (int(torch.randint(8, 25, (1,), generator=gen)),), generator=gen).tolist()
               for _ in range(args.prompts)]
    rows, scored = Rows(lm), Rows(prm)
    warm = argparse.Namespace(**{**vars(args), "rounds": 1})
    run_loop(lm, scorers["loop"], prompts[:1], warm, args.vocab)  # first calls (untimed): lazy set-up on both sides
    run_ours(lm, scorers["ours"], prompts[:1], warm, args.vocab, 0)
    rows.reset(), scored.reset(), [s.reset() for s in scorers.values()]
    timed: dict[str, list[float]] = {"loop": [], "ours": []}
    scoring: dict[str, list[float]] = {"loop": [], "ours": []}
    counts: dict[str, tuple[tuple[int, int, int], int]] = {}
    for rep in range(args.reps):
        for name in (("loop", "ours") if rep % 2 == 0 else ("ours", "loop")):
            torch.manual_seed(rep)
            start = time.perf_counter()
            if name == "loop":
                run_loop(lm, scorers[name], prompts, args, args.vocab)
            else:
                run_ours(lm, scorers[name], prompts, args, args.vocab, rep)
            timed[name].append(time.perf_counter() - start)
            scoring[name].append(scorers[name].reset())
            counts[name] = (rows.reset(), scored.reset()[2])
    report(args, width, timed, scoring, counts)


def report(args: argparse.Namespace, width: int, timed: dict[str, list[float]], scoring: dict[str, list[float]],
           counts: dict[str, tuple[tuple[int, int, int], int]]) -> None:
    speed, rest = {}, {}
    for name, label in (("loop", "search-and-learn loop"), ("ours", "step_search")):
        sec = statistics.median(timed[name])
        score_s = statistics.median(scoring[name])
        rest[name] = statistics.median(t - s for t, s in zip(timed[name], scoring[name], strict=True))
        (calls, rows, tokens), rm_tokens = counts[name]
        speed[name] = args.prompts / sec
        print(f"{width:>5} {label:<22} {sec:>8.2f} {speed[name]:>10.2f} {score_s:>9.2f} {rest[name]:>7.2f} "
              f"{rows / calls:>10.1f} {calls:>9} {tokens:>10} {rm_tokens:>10}")
    print(f"{width:>5} ours / loop: {speed['ours'] / speed['loop']:.2f}x prompts per second; "
          f"{rest['loop'] / rest['ours']:.2f}x outside the scorer (generation and selection)")


if __name__ == "__main__":
    main()
