"""CTC prefix beam search, one frame of every utterance at a time, as arrays.

Each utterance keeps ``B`` slots (``beam_size``). A slot holds one label prefix with two
log-probabilities summed over the alignments of the frames so far that collapse to it: ``pb``
over those ending in blank, ``pnb`` over those ending in its last label (Graves 2012; Hannun et
al. 2014, "First-pass large vocabulary continuous speech recognition using bi-directional
recurrent DNNs"). One frame (:func:`advance`), for all slots of all utterances at once:

- a prefix *stays* by a blank (``pb' = logaddexp(pb, pnb) + lp[blank]``) or by repeating its
  last label (``pnb' = pnb + lp[last]``);
- a prefix is *extended* by a label ``c`` that starts at this frame:
  ``logaddexp(pb, pnb) + lp[c]``, or ``pb + lp[c]`` when ``c`` equals its last label (two equal
  labels need a blank between them);
- an extension that equals a prefix already in the beam is added to that prefix's ``pnb`` by
  log-add (never max), so every distinct prefix is one candidate;
- each utterance keeps its ``B`` best candidates by ``logaddexp(pb, pnb)``
  (:mod:`beamsearch.speech.ranking`, which scores only the extensions that can make it).

Prefixes are told apart by a 62-bit polynomial hash (two independent 31-bit hashes modulo
primes), so merging is a comparison of integers; two different prefixes share a hash with
probability about ``L / 2**31`` squared for prefixes of length ``L`` (never seen in practice;
stated in the docs). Tokens are recovered at the end from parent pointers (:class:`History`).

Which labels may start at a frame is given by a boolean mask (token pruning and frame skipping,
:mod:`beamsearch.speech.tokens`); an extension not allowed there is neither a candidate nor
merged, so the scores stay sums over a well-defined set of alignments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.speech.fusion import LOW, P1, P2, LMState, LMTerm, Terms, WordFusion
from beamsearch.speech.hotwords import HotTerm, Hotwords
from beamsearch.speech.lexicon import Lexicon, LexTerm
from beamsearch.speech.ranking import Extensions, best, child_codes, lower_bound, slack
from beamsearch.speech.tokenlm import TokenFusion, TokenTerm
from beamsearch.speech.tokens import candidates, most_probable, startable

BASE1, BASE2 = 1_103_515_245, 846_264_529  # a prefix's hash (fusion's P1, P2: each hash times its base fits in int64)
NO_PARENT = -(1 << 62)
"""``parent_key`` of the empty prefix and of dead slots: equal to no ``key``."""


def extend_key(key: np.ndarray, token: np.ndarray) -> np.ndarray:
    """The hash of each prefix extended by ``token`` (same shapes, int64): ``key`` holds
    ``h1 * 2**31 + h2``, each ``h <- (h * base + token + 1) mod p``."""
    h1 = ((key >> 31) * BASE1 + token + 1) % P1
    h2 = ((key & LOW) * BASE2 + token + 1) % P2
    return (h1 << 31) | h2


@dataclass(frozen=True)
class Beams:
    """The slots of ``n`` utterances, best first; a dead slot has ``pb = pnb = -inf``."""

    pb: np.ndarray  # float64 [n, B]: log-prob over the prefix's alignments ending in blank
    pnb: np.ndarray  # float64 [n, B]: ... ending in its last label
    last: np.ndarray  # int64 [n, B]: its last label; -1 for the empty prefix and dead slots
    key: np.ndarray  # int64 [n, B]: its hash (>= 0); a dead slot -1 - slot (unique in its row)
    parent_key: np.ndarray  # int64 [n, B]: the hash of the prefix less its last label, or NO_PARENT
    node: np.ndarray  # int64 [n, B]: its node in the History; -1 the empty prefix
    hot: np.ndarray  # int64 [n, B]: its hotword node (the match in progress; 0 without hotwords)
    hot_mask: np.ndarray  # int64 [n, B]: which of its last positions lie in completed hotwords
    hot_done: np.ndarray  # int64 [n, B]: how many of its positions do
    lm_ctx: np.ndarray  # int64 [n, B]: its word LM state (speech.fusion; 0 without an LM)
    word_key: np.ndarray  # int64 [n, B]: the hash of its unfinished word's text
    word_size: np.ndarray  # int64 [n, B]: that word's length in characters (0: none)
    lm: np.ndarray  # float64 [n, B]: the natural-log LM probability of its completed words
    words: np.ndarray  # int64 [n, B]: how many words it has completed
    tok_lm: np.ndarray  # float64 [n, B]: its token LM log-prob (speech.tokenlm; 0 without one)
    next_lp: np.ndarray  # float64 [n, B, V]: the token LM's log-probs of its next label ([n, B, 0]: none)
    lex: np.ndarray  # int64 [n, B]: its lexicon node (speech.lexicon; 0 without a lexicon)

    @staticmethod
    def start(n: int, width: int, hot: np.ndarray | None = None, fusion: WordFusion | None = None,
              token: TokenFusion | None = None) -> Beams:
        """``n`` utterances, each with the empty prefix (log-prob 0) in slot 0; ``hot`` int64
        ``[n]``: each utterance's hotword root (None: no hotwords); ``fusion``: the word LM;
        ``token``: the token LM (called here once, on its ``bos``)."""
        pb = np.full((n, width), NEG_INF)
        pb[:, 0] = 0.0
        dead_key = np.broadcast_to(-1 - np.arange(width), (n, width)).copy()
        dead_key[:, 0] = 0
        minus = np.full((n, width), -1, dtype=np.int64)
        zero = np.zeros((n, width), dtype=np.int64)
        root = zero.copy() if hot is None else np.broadcast_to(hot[:, None], (n, width)).copy()
        lm: LMState = (zero.copy(), zero.copy(), zero.copy(), np.zeros((n, width)), zero.copy()) if fusion is None \
            else fusion.start((n, width))
        tok_lm, next_lp = (np.zeros((n, width)), np.zeros((n, width, 0))) if token is None else token.start(n, width)
        return Beams(pb, np.full((n, width), NEG_INF), minus, dead_key,
                     np.full((n, width), NO_PARENT, dtype=np.int64), minus.copy(), root, zero, zero.copy(), *lm,
                     tok_lm, next_lp, zero.copy())

    def score(self) -> np.ndarray:
        """float64 ``[n, B]``: each prefix's log-probability, ``logaddexp(pb, pnb)``."""
        return np.logaddexp(self.pb, self.pnb)

    def rows(self, idx: np.ndarray) -> Beams:
        """The utterances ``idx`` (int ``[m]``)."""
        return Beams(*(getattr(self, f)[idx] for f in FIELDS))

    def put(self, idx: np.ndarray, part: Beams) -> Beams:
        """These beams with utterances ``idx`` replaced by ``part``'s rows."""
        out = []
        for f in FIELDS:
            a = getattr(self, f).copy()
            a[idx] = getattr(part, f)
            out.append(a)
        return Beams(*out)

    def lm_state(self) -> LMState:
        """``(lm_ctx, word_key, word_size, lm, words)``: the word LM fields."""
        return self.lm_ctx, self.word_key, self.word_size, self.lm, self.words


FIELDS = ("pb", "pnb", "last", "key", "parent_key", "node", "hot", "hot_mask", "hot_done",
          "lm_ctx", "word_key", "word_size", "lm", "words", "tok_lm", "next_lp", "lex")
CARRIED = FIELDS[6:]
"""The fields that depend only on a prefix's labels: a stay keeps them, an extension updates them."""


class History:
    """Every prefix made, as parent pointers: node ``i`` is its parent's prefix plus ``token[i]``
    (parent -1: the empty prefix). Appended to once per frame, read once at the end."""

    def __init__(self) -> None:
        self._parents: list[np.ndarray] = []
        self._tokens: list[np.ndarray] = []
        self.size = 0

    def add(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """New nodes for ``tokens`` after ``parents`` (int ``[k]`` each); returns their ids."""
        ids = np.arange(self.size, self.size + parents.shape[0], dtype=np.int64)
        self._parents.append(parents)
        self._tokens.append(tokens)
        self.size += parents.shape[0]
        return ids

    def sequences(self, nodes: np.ndarray) -> list[list[int]]:
        """The tokens of each node's prefix, first to last (nodes ``[k]``; -1 gives ``[]``)."""
        parents = np.concatenate(self._parents) if self._parents else np.zeros(0, np.int64)
        tokens = np.concatenate(self._tokens) if self._tokens else np.zeros(0, np.int64)
        out: list[list[int]] = [[] for _ in range(nodes.shape[0])]
        cur = nodes.astype(np.int64).copy()
        while (cur >= 0).any():  # one pass per label position, all prefixes at once
            live = np.flatnonzero(cur >= 0)
            for i, tok in zip(live.tolist(), tokens[cur[live]].tolist(), strict=True):
                out[i].append(tok)
            cur[live] = parents[cur[live]]
        return [seq[::-1] for seq in out]


def stays(beams: Beams, lp: np.ndarray, blank: int, allowed: np.ndarray | None, parent: np.ndarray,
          found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slots' own prefixes after this frame: ``(pb', pnb')``, both float64 ``[n, B]``,
    with the extensions from a parent slot already merged into ``pnb'`` (log-add).

    ``lp`` float64 ``[n, V]``: the frame's log-probs; ``allowed`` bool ``[n, V]`` or None (every
    label may start); ``parent``/``found`` from :func:`parent_slots`."""
    lse = np.logaddexp(beams.pb, beams.pnb)
    has_last = beams.last >= 0
    last = np.where(has_last, beams.last, 0)
    row = np.arange(lp.shape[0])[:, None]
    lp_last = np.where(has_last, lp[row, last], NEG_INF)  # --> [n, B]
    pb = lse + lp[:, blank : blank + 1]
    pnb = beams.pnb + lp_last
    base = np.where(beams.last[row, parent] == beams.last, beams.pb[row, parent], lse[row, parent])
    if allowed is not None:
        found = found & allowed[row, last]
    merged = np.where(found, base + lp_last, NEG_INF)  # the parent's extension by this last label
    return pb, np.logaddexp(pnb, merged)


def parent_slots(beams: Beams) -> tuple[np.ndarray, np.ndarray]:
    """For each slot, the slot of the same utterance holding its prefix less its last label:
    ``(slot, found)``, int64 and bool ``[n, B]`` (slot 0 where none is found). One sort of the
    keys (renumbered densely, then offset by utterance), not a comparison of every pair."""
    n, width = beams.key.shape
    both = np.concatenate([beams.key.ravel(), beams.parent_key.ravel()])
    uniq, dense = np.unique(both, return_inverse=True)
    row = np.tile(np.repeat(np.arange(n, dtype=np.int64), width), 2) * uniq.size
    code = row + dense.ravel()  # --> [2 n B]: (utterance, key) as one integer
    own, wanted = code[: n * width], code[n * width :]
    order = np.argsort(own, kind="stable")
    pos = np.minimum(np.searchsorted(own[order], wanted), n * width - 1)
    found = own[order][pos] == wanted
    return (order[pos] % width).reshape(n, width), found.reshape(n, width)


def advance(beams: Beams, lp: np.ndarray, blank: int, allowed: np.ndarray | None, history: History,
            threshold: float | None, hw: Hotwords | None = None, fusion: WordFusion | None = None,
            token: TokenFusion | None = None, lex: Lexicon | None = None) -> tuple[Beams, tuple[np.ndarray, ...]]:
    """One frame for ``n`` utterances: ``lp`` float64 ``[n, V]`` their log-probs at this frame;
    ``allowed`` bool ``[n, V]`` the labels that may start (None: every non-blank label);
    ``threshold`` drops slots more than that below their utterance's best; ``hw``: hotwords, whose
    bonus (while decoding) adds to every candidate's score; ``fusion``: the word LM, whose fused
    term of the completed words (:mod:`beamsearch.speech.fusion`) does too, and ``token``'s, the
    token LM's; ``lex``: the lexicon, whose extensions outside it are no candidates. Returns the
    next beams and ``(src, grown, label)`` ``[n, B]``: each slot's source slot, whether it is that
    slot's prefix extended, and by which label (for the token LM)."""
    parent, found = parent_slots(beams)
    pb, pnb = stays(beams, lp, blank, allowed, parent, found)
    hot = None if hw is None else HotTerm.of(hw, beams.hot, beams.hot_mask, beams.hot_done)
    word = None if fusion is None else LMTerm.of(fusion, *beams.lm_state())
    tterm = None if token is None else TokenTerm.of(token.alpha, beams.tok_lm, beams.next_lp)
    extra = Terms.of(hot, word, tterm, None if lex is None else LexTerm.of(lex, beams.lex))
    stay = np.logaddexp(pb, pnb) + (0.0 if extra is None else extra.now())
    lse = np.logaddexp(beams.pb, beams.pnb)
    masked = startable(lp, blank, allowed)
    children = child_codes(beams.last, parent, found, lp.shape[1])
    classes = label_classes(hot, fusion, token)
    head_tok, head_lp = most_probable(masked, classes)  # each class's most probable label
    bound = lower_bound(stay, Extensions(lse, beams.pb, beams.last, head_tok, head_lp, children, lp.shape[1], extra),
                        None if hot is None else hot.pairs[:3], masked)  # and each slot's own transitions
    up = 0.0 if extra is None else extra.up
    lift = 0.0 if word is None else np.maximum(word.gain, 0.0)
    with np.errstate(invalid="ignore"):  # no extension of any slot by a label below this reaches the bound
        floor = no_nan(slack(bound - (lse + up - lift).max(1)))  # labels that end no word add no LM gain
        end_floor = None if word is None else no_nan(slack(bound - (lse + up - lift + word.gain).max(1)))
    cap = beams.last.shape[1] if token is None and lex is None else lp.shape[1]  # any label may be needed
    also = None
    if hot is not None and token is None:  # a slot's own transitions are not of its class's value
        also, most = hot.labels(masked, floor if end_floor is None else np.minimum(floor, end_floor))
        cap += (most + 1) // 2
    tok, tok_lp = candidates(masked, cap, floor, classes, end_floor, also)
    ext = Extensions(lse, beams.pb, beams.last, tok, tok_lp, children, lp.shape[1], extra)
    idx, val = best(stay, ext, bound)  # --> [n, B] each, best first, ties: lower index
    return select(beams, idx, val, pb, pnb, tok, history, threshold, (hot, word, tterm, lex))


def label_classes(hot: HotTerm | None, fusion: WordFusion | None, token: TokenFusion | None) -> np.ndarray | None:
    """The labels grouped so that within a group a slot's further term is one value: None (one
    group), bool ``[V]`` (the word LM: the labels that end a word), or int64 ``[n, V]`` (hotwords,
    without a token LM: 2 for a label that starts a phrase, plus 1 for one that ends a word; a
    slot's own transitions, :meth:`HotTerm.labels`, apart)."""
    ends = None if fusion is None else fusion.ends
    if hot is None or token is not None:
        return ends
    start = hot.start.astype(np.int64) * 2
    return start if ends is None else start + ends[None, :]


def no_nan(floor: np.ndarray) -> np.ndarray:
    """-inf where a floor is NaN (an utterance whose slots are all dead)."""
    return np.where(np.isnan(floor), NEG_INF, floor)


def select(beams: Beams, idx: np.ndarray, val: np.ndarray, pb: np.ndarray, pnb: np.ndarray,
           tok: np.ndarray, history: History, threshold: float | None,
           terms: tuple = (None, None, None, None)) -> tuple[Beams, tuple[np.ndarray, ...]]:
    """The next beams from the chosen candidates ``idx`` ``[n, B]`` (a stay ``b < B`` or an
    extension ``B + b * M + m``) and their scores ``val`` (with the further ``terms``: hotwords,
    word LM term (:class:`LMTerm`), token LM, lexicon, each None when absent), and ``(src, grown, label)`` as
    :func:`advance`'s."""
    width = beams.last.shape[1]
    m = max(tok.shape[1], 1)
    stay = idx < width
    src = np.where(stay, idx, (idx - width) // m)  # --> [n, B]: the slot each comes from
    row = np.arange(idx.shape[0])[:, None]
    label = tok[row, np.where(stay, 0, (idx - width) % m)] if tok.shape[1] else src
    take = lambda a: a[row, src]  # noqa: E731
    key, node = take(beams.key), take(beams.node)
    grow = np.nonzero(~stay & (val > NEG_INF))
    new_node = node.copy()
    new_node[grow] = history.add(node[grow], label[grow])
    hot, word, tterm, lex = terms
    closed = None if word is None else (word.fusion, word.closed_at(row, src))
    acoustic, carried = carry([take(getattr(beams, f)) for f in CARRIED], stay, label, val, hot, closed, tterm, lex)
    nxt = Beams(np.where(stay, take(pb), NEG_INF), np.where(stay, take(pnb), acoustic),
                np.where(stay, take(beams.last), label), np.where(stay, key, extend_key(key, label)),
                np.where(stay, take(beams.parent_key), key), new_node, *carried)
    dead = val == NEG_INF
    if threshold is not None:
        dead |= val < val[:, :1] - threshold
    return bury(nxt, dead), (src, ~stay & ~dead, label)


def carry(fields: list[np.ndarray], stay: np.ndarray, label: np.ndarray, val: np.ndarray,
          hot: HotTerm | None, word: tuple[WordFusion, tuple[np.ndarray, np.ndarray]] | None,
          token: TokenTerm | None, lex: Lexicon | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """The :data:`CARRIED` fields of the chosen candidates (``fields``: their source slots'):
    a stay keeps them, an extension by ``label`` steps them; and each candidate's acoustic score,
    ``val`` less its further terms. ``word``: the word LM and its source slots' closed words
    (:attr:`LMTerm.closed`). A grown slot's ``next_lp`` is its parent's until the token LM is
    stepped (:meth:`TokenFusion.update`)."""
    acoustic, out = val, list(fields)
    if hot is not None:
        node, mask, done = fields[:3]
        hot_grown = hot.hw.step(node, mask, done, np.where(stay, 0, label))  # a stay's label may be no label id
        acoustic = acoustic - np.where(stay, 0.0, hot.hw.weight * hot.hw.count(*hot_grown))
        out[:3] = [np.where(stay, a, b) for a, b in zip(fields[:3], hot_grown, strict=True)]
    if word is not None:
        fusion, closed = word
        ctx, key, size, lm, words = fields[3:8]
        lm_grown = fusion.step(ctx, key, size, lm, words, np.where(stay, -1, label), closed)
        acoustic = acoustic - np.where(stay, 0.0, fusion.fused(lm_grown[3], lm_grown[4]))
        out[3:8] = [np.where(stay, a, b) for a, b in zip(fields[3:8], lm_grown, strict=True)]
    if token is not None:
        step = np.take_along_axis(fields[9], np.where(stay, 0, label)[:, :, None], 2)[:, :, 0]
        out[8] = np.where(stay, fields[8], fields[8] + step)
        acoustic = acoustic - np.where(stay, 0.0, token.alpha * out[8])
    if lex is not None:  # a candidate is inside the lexicon: it adds nothing to the score
        out[10] = np.where(stay, fields[10], lex.step(fields[10], np.where(stay, -1, label)))
    return np.where(stay, val, acoustic), out


def bury(beams: Beams, dead: np.ndarray) -> Beams:
    """``beams`` with the ``dead`` slots (bool ``[n, B]``) emptied: -inf, unique keys, no parent."""
    if not dead.any():
        return beams
    width = beams.last.shape[1]
    dead_key = np.broadcast_to(-1 - np.arange(width), dead.shape)
    return Beams(np.where(dead, NEG_INF, beams.pb), np.where(dead, NEG_INF, beams.pnb),
                 np.where(dead, -1, beams.last), np.where(dead, dead_key, beams.key),
                 np.where(dead, NO_PARENT, beams.parent_key), np.where(dead, -1, beams.node),
                 *(getattr(beams, f) for f in CARRIED))
