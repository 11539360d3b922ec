"""Independent oracles for the grammar tests: languages enumerated by brute force with an
independent parser (``re.fullmatch``, ``json.loads`` + ``jsonschema``, a ``lark`` parser), the
allowed tokens after a prefix read off the enumerated language, and the best constrained output
by exhaustive search over token sequences."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence

import numpy as np

EOS = 0


def regex_parser(pattern: str) -> Callable[[str], bool]:
    return lambda text: re.fullmatch(pattern, text) is not None


def schema_parser(schema: dict) -> Callable[[str], bool]:
    import jsonschema

    def accepts(text: str) -> bool:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        if text != json.dumps(value, separators=(",", ":")):  # compact JSON: what the grammar emits
            return False
        return jsonschema.Draft202012Validator(schema).is_valid(value)

    return accepts


def lark_parser(grammar: str) -> Callable[[str], bool]:
    import lark

    parser = lark.Lark(grammar, parser="earley", lexer="dynamic")

    def accepts(text: str) -> bool:
        try:
            parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True

    return accepts


def language(accepts: Callable[[str], bool], alphabet: str, max_len: int) -> set[str]:
    """Every string over ``alphabet`` of at most ``max_len`` characters that ``accepts`` takes."""
    return {"".join(w) for n in range(max_len + 1) for w in itertools.product(alphabet, repeat=n)
            if accepts("".join(w))}


def allowed(prefix: str, strings: set[str], vocab: Sequence[str], eos: Sequence[int] = (EOS,)) -> np.ndarray:
    """bool ``[V]``: the tokens t with ``prefix + vocab[t]`` a prefix of a string of the
    (finite) language, eos where ``prefix`` is in it; special ids (``eos``) are no text."""
    keep = np.zeros(len(vocab), dtype=bool)
    for t, text in enumerate(vocab):
        if t in eos:
            keep[t] = prefix in strings
        elif text:
            keep[t] = any(s.startswith(prefix + text) for s in strings)
    return keep


def constrained_logp(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """float64 ``[V]``: log_softmax of ``logits`` over the allowed tokens (-inf elsewhere)."""
    x = np.where(keep, logits.astype(np.float64), -np.inf)
    m = x[keep].max()
    return x - (m + np.log(np.exp(x[keep] - m).sum()))


def all_outputs(table: np.ndarray, first: int, strings: set[str], vocab: Sequence[str], max_steps: int,
                eos: int = EOS) -> dict[tuple[int, ...], float]:
    """Every token sequence (eos last) of at most ``max_steps`` tokens whose text is in the
    language, with its constrained log-probability under the bigram model ``table [V, V]``
    (logits of the next token by the last one; ``first`` is the prompt's last token)."""
    out: dict[tuple[int, ...], float] = {}

    def walk(tokens: tuple[int, ...], text: str, last: int, logp: float) -> None:
        if len(tokens) == max_steps:
            return
        keep = allowed(text, strings, vocab, eos=(eos,))
        if not keep.any():
            return
        lp = constrained_logp(table[last], keep)
        for t in np.flatnonzero(keep).tolist():
            if t == eos:
                out[tokens + (t,)] = logp + lp[t]
            else:
                walk(tokens + (t,), text + vocab[t], t, logp + lp[t])

    walk((), "", first, 0.0)
    return out


def text(tokens: Sequence[int], vocab: Sequence[str]) -> str:
    """The text of ``tokens`` (eos dropped)."""
    return "".join(vocab[t] for t in tokens if t != EOS)
