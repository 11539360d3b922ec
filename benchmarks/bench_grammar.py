"""Grammar-constrained beam search: what the grammar costs (issue 23).

One run, torch, a byte-level BPE trained here with ``tokenizers`` (about 32,000 tokens by default;
nothing downloaded), N inputs, beam 4 and 16, a null model (fixed random logits picked by the
last token: only the search and the masks are timed). Every search runs exactly ``steps`` steps
(``min_new_tokens`` holds eos back). Columns, ms per step:

- ``plain``: the search without a grammar;
- ``schema``: the same search with a JSON Schema (:class:`beamsearch.processors.Grammar`: one
  matcher per row, forked and advanced, never replayed): ``strings`` (the null model writes one
  string that never closes) and ``short strings`` (at least 300 strings of at most 6 characters: a
  new lexeme every few tokens; llguidance's fork copies the parser's rows, one per lexeme so far);
- ``replay``: the same search with a reference that rebuilds each row's matcher from the
  grammar's start along the row's generated tokens at every step (vLLM's approach), then fills
  the same masks;
- ``engine``: the time inside the grammar engine's calls in the schema's search (every row's mask
  filled, every row's matcher advanced; forks not counted): what any way of driving the engine
  pays, so ``(schema - engine) / plain`` is the cost of the rest of the search with its masks;
- ``late step``: one step late in the search (the median interval between two steps over the
  last 16, from a step callback: the search's setup and results left out).

Ratios: schema / plain, whole searches (the issue asks at most 1.3); what one schema step costs late
in a search of 512 steps over late in one of 32 (the median step of the last 16: flat is within
15%); and replay / schema, late in the search of 512 steps.

    python benchmarks/bench_grammar.py                       # the issue's settings
    python benchmarks/bench_grammar.py --vocab 4000 --steps 32 64 --repeat 1   # a quick check
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import torch

from beamsearch import beam_search_batch
from beamsearch.backends.bits import exceptions
from beamsearch.processors import Grammar
from beamsearch.processors.grammar_engine import Compiled

SCHEMAS = {
    # the null model's outputs: one string that never closes (one lexeme, however long) ...
    "strings": {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},
                "required": ["items"], "additionalProperties": False},
    # ... and hundreds of short strings (a lexeme every few tokens: a fork copies the parse so far)
    "short strings": {"type": "object", "properties": {"items": {"type": "array", "minItems": 300,
                                                                 "items": {"type": "string", "maxLength": 6}}},
                      "required": ["items"], "additionalProperties": False},
}


def corpus(n: int, seed: int = 0):
    """Synthetic JSON and prose lines to train the BPE on."""
    r = random.Random(seed)
    words = ["alpha", "beta", "gamma", "name", "value", "items", "count", "true", "null", "user", "price", "the",
             "quick", "brown", "fox", "description", "id", "tags"]
    for _ in range(n):
        obj = {r.choice(words): r.choice([r.randint(0, 10**6), f"{r.choice(words)} {r.choice(words)}",
                                          [r.choice(words) for _ in range(3)], {"k": r.choice(words)}])
               for _ in range(r.randint(1, 4))}
        yield json.dumps(obj)
        yield " ".join(r.choice(words) for _ in range(12)) + f" {r.randint(0, 99999)}."


def train_bpe(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(max(2000, vocab_size)), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


class Replay:
    """The reference: each row's matcher rebuilt from the start along its generated tokens, at
    every step, then the masks of all rows filled in one call (as :class:`Grammar` fills them)."""

    needs_history = False

    def __init__(self, grammar: Grammar) -> None:
        self.compiled = grammar._compiled

    def __call__(self, logits, ctx):
        generated = ctx.history[:, ctx.history.shape[1] - (ctx.step - 1):]
        matchers = []
        for row in generated.tolist():
            m = self.compiled.root.deep_copy()
            m.consume_tokens(row)
            matchers.append(m)
        bits = self.compiled.fill(matchers)  # --> uint8 [k, B], packed
        bits = np.pad(bits, ((0, 0), (0, max(0, -(-logits.shape[1] // 8) - bits.shape[1]))))
        return ctx.backend.keep_bits(logits, bits, exceptions(bits, logits.shape[1]))


def null_model(vocab: int, seed: int = 0):
    table = torch.randn(64, vocab, generator=torch.Generator().manual_seed(seed)) * 3.0

    def step(state, y_prev):
        return table[y_prev % 64], state

    return step


def search(step, n, beam, steps, eos, processors, callback=None):
    """One search of exactly ``steps`` steps (eos held back until the last one)."""
    beam_search_batch(step, torch.zeros((n, 1)), [[5]] * n, eos_token_id=eos, max_steps=steps, beam_size=beam,
                      min_new_tokens=steps - 1, alpha=0.0, logits_processors=processors, callback=callback)


def timed(step, n, beam, steps, eos, processors, repeat):
    """ms per step of the whole search (its setup and results included), best of ``repeat``."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        search(step, n, beam, steps, eos, processors)
        best = min(best, time.perf_counter() - t)
    return 1e3 * best / steps


class EngineClock:
    """Time spent inside the grammar engine's calls (every row's mask filled, every row's matcher
    advanced): the engine's own work, which any way of driving it pays."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> EngineClock:
        self.saved = Compiled.fill, Compiled.consume
        fill, consume = self.saved

        def timed_fill(compiled, matchers):
            t = time.perf_counter()
            try:
                return fill(compiled, matchers)
            finally:
                self.seconds += time.perf_counter() - t

        def timed_consume(compiled, matchers, tokens):
            t = time.perf_counter()
            try:
                return consume(compiled, matchers, tokens)
            finally:
                self.seconds += time.perf_counter() - t

        Compiled.fill, Compiled.consume = timed_fill, timed_consume
        return self

    def __exit__(self, *exc) -> None:
        Compiled.fill, Compiled.consume = self.saved


def engine_ms(step, n, beam, steps, eos, processors) -> float:
    """ms per step inside the grammar engine, in one search."""
    with EngineClock() as clock:
        search(step, n, beam, steps, eos, processors)
    return 1e3 * clock.seconds / steps


def late_step(step, n, beam, steps, eos, processors, repeat, last=16):
    """ms of one step late in the search: the median interval between the callback's calls over
    the search's last ``last`` steps (what a step costs at that output length, without the
    search's setup), best of ``repeat``."""
    best = float("inf")
    for _ in range(repeat):
        stamps = []
        search(step, n, beam, steps, eos, processors,
               callback=lambda record, stamps=stamps: stamps.append(time.perf_counter()))
        best = min(best, float(np.median(np.diff(stamps[-last - 1:]))))
    return 1e3 * best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--beams", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--steps", type=int, nargs=2, default=[32, 512])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = train_bpe(args.vocab)
    step, eos = null_model(len(tok)), tok.eos_token_id
    short, long = args.steps
    print(f"tokenizer: byte-level BPE, {len(tok)} tokens; N={args.n}; torch {torch.__version__}, 1 thread")
    print("schema         beam  steps  plain ms/step  schema ms/step  engine ms/step  schema/plain"
          "  (schema - engine)/plain  schema late step ms  replay late step ms  replay/schema")
    for name, schema in SCHEMAS.items():
        grammar = Grammar.json_schema(schema, tok)
        for beam in args.beams:
            late = {}
            for steps in (short, long):
                plain = timed(step, args.n, beam, steps, eos, [], args.repeat)
                constrained = timed(step, args.n, beam, steps, eos, [grammar], args.repeat)
                late[steps] = late_step(step, args.n, beam, steps, eos, [grammar], args.repeat)
                engine = engine_ms(step, args.n, beam, steps, eos, [grammar])
                row = (f"{name:13s}  {beam:4d}  {steps:5d}  {plain:13.2f}  {constrained:14.2f}  {engine:14.2f}  "
                       f"{constrained / plain:12.2f}  {(constrained - engine) / plain:23.2f}  {late[steps]:19.3f}")
                if steps == long:
                    replay = late_step(step, args.n, beam, steps, eos, [Replay(grammar)], 1)
                    row += f"  {replay:19.3f}  {replay / late[steps]:13.1f}"
                print(row, flush=True)
            print(f"{name}, beam {beam}: a schema step late in the search, {long} over {short} steps: "
                  f"{late[long] / late[short]:.2f}", flush=True)

if __name__ == "__main__":
    main()
