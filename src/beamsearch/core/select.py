"""Selection helpers every strategy shares: the step's scores, the terminal candidates, and the
ranking of each input's ``r*V`` candidates with the tie rule of SPEC sections 4 and 6 (a grouped
top-m over a ``[G, r*V]`` view for small arrays; each row's top m and a host merge for large ones)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from beamsearch.backends import NEG_INF, Backend
from beamsearch.core.beam import Beam, Candidates

GROUPED_MAX_ELEMENTS = 1 << 19
"""Up to this many ``k*V`` entries an input's rows are ranked on the device in one ``[G, r*V]``
top-m (one cheap offset pass while the array sits in cache); above it, each row's top m on the
device and one merge per input on the host (no pass over ``[k, V]`` beyond the top-m). Both give
the same candidates, values and order."""


@dataclass(frozen=True)
class Terminals:
    """The extensions that end a hypothesis at this step, as (row, token) pairs.

    Attributes:
        eos: int64 ``[E]``: eos ids, terminal for every row.
        rows, tokens: int64 ``[p]``: further terminal pairs (stop-sequence completions), sorted by
            row then token, none of them an eos id.
    """

    eos: np.ndarray
    rows: np.ndarray
    tokens: np.ndarray

    def contains(self, parent: np.ndarray, token: np.ndarray, vocab: int) -> np.ndarray:
        """bool ``[j]``: which candidates ``(parent, token)`` are terminal."""
        hit = np.isin(token, self.eos)
        if self.rows.size:
            hit |= np.isin(parent * vocab + token, self.rows * vocab + self.tokens)
        return hit


@dataclass(frozen=True)
class StepScores:
    """What a strategy selects from at step t.

    Attributes:
        backend: the array backend of ``logp``.
        logp: ``[k, V]`` processed log-probabilities of each live row's next token (a buffer the
            search owns: a strategy may write into it through the backend; it is reused for the
            next step, so a strategy keeps nothing of it beyond ``select``).
        beam: the live rows (``beam.logprob`` is each row's logprob so far).
        terminals: the extensions that end a hypothesis.
        step: t, the number of the token being chosen (1 for the first).
        support: None, or ``(rows [p], tokens [p])`` (int64): every entry of ``logp`` outside
            these pairs is -inf (a catalogue's allowed tokens: ``StepContext.support``).
    """

    backend: Backend
    logp: Any
    beam: Beam
    terminals: Terminals
    step: int
    support: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def vocab(self) -> int:
        return int(self.logp.shape[1])


def accumulate(scores: StepScores, parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """float64 ``[j]``: parent logprob + value, added in the logits' precision.

    The same rounding as adding the row's logprob on the device, so a path's logprob does not
    depend on which of the two routes a step took.
    """
    dtype = values.dtype if values.dtype.kind == "f" else np.float64
    return (scores.beam.logprob[parent].astype(dtype) + values).astype(np.float64)


def split_terminals(scores: StepScores) -> tuple[Candidates, Any]:
    """Take every finite terminal extension out of the step's scores.

    Returns:
        The terminal candidates in production order (row position, then token id), and ``logp``
        with those entries set to -inf (so they take no beam slot).
    """
    b, logp, term = scores.backend, scores.logp, scores.terminals
    k, e = scores.beam.size, term.eos.shape[0]
    values = b.columns(logp, term.eos)  # --> [k, E] on the host
    logp = b.fill_columns(logp, term.eos, NEG_INF)
    if e == 1 and term.rows.size == 0:  # the common case: one eos id, no stop sequences
        rows = np.flatnonzero(np.isfinite(values[:, 0]))
        if rows.size == 0:
            return Candidates.empty(), logp
        tokens = np.full(rows.shape[0], term.eos[0], np.int64)
        return Candidates(rows, tokens, accumulate(scores, rows, values[rows, 0])), logp
    rows = np.repeat(np.arange(k), e)  # --> [k*E], row-major: (row, eos id)
    tokens = np.tile(term.eos, k)
    values = values.reshape(-1)
    if term.rows.size:
        rows, tokens = np.concatenate([rows, term.rows]), np.concatenate([tokens, term.tokens])
        values = np.concatenate([values, b.gather(logp, term.rows, term.tokens)])
        logp = b.put(logp, term.rows, term.tokens, NEG_INF)
        order = np.lexsort((tokens, rows))
        rows, tokens, values = rows[order], tokens[order], values[order]
    ok = np.flatnonzero(np.isfinite(values))
    if ok.size == 0:
        return Candidates.empty(), logp
    return Candidates(rows[ok], tokens[ok], accumulate(scores, rows[ok], values[ok])), logp


def best_per_input(scores: StepScores, logp: Any, width: np.ndarray) -> Candidates:
    """Per input, its ``width[i]`` best finite extensions (SPEC tie rule), input-major.

    An input's ``r`` rows are ranked together by ``logprob + log-probability``, ties to the lower
    flat index ``b*V + v`` (row position within the input, then token id). Done in two stages
    that give exactly that ranking: each row's ``m`` best tokens on the device (one top-m over
    ``[k, V]``, ties to the lower token id), then on the host each input's ``r*m`` survivors with
    their row's logprob added (in the logits' precision) and merged by value, then flat index.
    The best m of an input are always among its rows' best m each, so nothing is lost, and the
    ``[k, V]`` array is never rewritten.

    Args:
        logp: ``[k, V]`` the log-probabilities to rank (terminals already handled or not).
        width: int64 ``[N]``: how many each input keeps (0 keeps none).
    """
    b, beam, vocab = scores.backend, scores.beam, scores.vocab
    start, counts = runs(beam.input)  # --> [G] each: the groups of rows of one input
    keep = width[beam.input[start]]  # --> [G]
    m = int(keep.max())
    if m == 0:
        return Candidates.empty()
    if sparse(scores):
        return best_of_support(scores, logp, width)
    if grouped(beam.size, counts.shape[0], vocab, m):
        return _grouped(scores, logp, start, counts, keep)
    idx, val = b.topk_stable(logp, min(m, vocab))  # --> [k, m'] each, on the host
    if counts.shape[0] == beam.size:  # one row per input: its own ranking is the answer
        if idx.shape[1] == 1:
            parent = np.flatnonzero(np.isfinite(val[:, 0]) & (keep > 0))
            return Candidates(parent, idx[parent, 0], accumulate(scores, parent, val[parent, 0]))
        parent, rank = np.nonzero(np.isfinite(val) & (np.arange(idx.shape[1]) < keep[:, None]))
        return Candidates(parent, idx[parent, rank], accumulate(scores, parent, val[parent, rank]))
    return _merge(scores, idx, val, start, counts, keep)


WIDE_FRACTION = 4
"""A beam is wide when each row's top m would keep at least ``V / WIDE_FRACTION`` of its tokens:
then the per-row top-m and host merge hardly shrink the ``r*V`` candidates, and one grouped top-m
over ``[G, r*V]`` is cheaper whatever the array's size (at beam 1024 of V = 1025: one top-k
instead of a sort of every row and a lexsort of ``r*m`` entries per input). 0 turns the rule off."""


def grouped(k: int, groups: int, vocab: int, m: int) -> bool:
    """Whether :func:`best_per_input` ranks ``k`` rows of ``groups`` inputs (some with several
    rows) by one grouped top-m: a small ``[k, V]``, or a wide beam (``m`` the most kept)."""
    return groups < k and (k * vocab <= GROUPED_MAX_ELEMENTS or WIDE_FRACTION * min(m, vocab) >= vocab)


SPARSE_FRACTION = 8
"""The support is ranked alone when it holds at most ``k*V / SPARSE_FRACTION`` pairs."""


def sparse(scores: StepScores) -> bool:
    """Whether the step's support (:attr:`StepScores.support`) is small enough to rank alone:
    a float32 / float64 ``logp`` (ranked on the host in its own precision, as on the device)."""
    support = scores.support
    return support is not None and support[0].shape[0] * SPARSE_FRACTION <= scores.beam.size * scores.vocab and \
        str(scores.logp.dtype).rsplit(".", 1)[-1] in ("float32", "float64")


def best_of_support(scores: StepScores, logp: Any, width: np.ndarray) -> Candidates:
    """The ranking of :func:`best_per_input` over the support's entries only: their values
    gathered from ``logp`` (``[p]``, to the host), each row's logprob added in the logits'
    precision, then per input by value, ties to the lower flat index ``b*V + v`` (row-major order
    within an input is that order). No pass over ``[k, V]``; the same candidates, values and order."""
    beam, vocab = scores.beam, scores.vocab
    assert scores.support is not None, "called only for scores with a support"
    rows, tokens = scores.support
    flat = np.unique(rows * vocab + tokens)  # --> [p'], sorted, each pair once
    rows, tokens = flat // vocab, flat % vocab
    total = accumulate(scores, rows, scores.backend.gather(logp, rows, tokens))  # --> [p'] float64
    ok = np.flatnonzero(np.isfinite(total))
    inputs = beam.input[rows[ok]]
    order = ok[np.lexsort((flat[ok], -total[ok], inputs))]  # input-major, best first, then flat index
    inputs = beam.input[rows[order]]
    order = order[positions(inputs) < width[inputs]]
    return Candidates(rows[order], tokens[order], total[order])


def _grouped(scores: StepScores, logp: Any, start: np.ndarray, counts: np.ndarray, keep: np.ndarray
             ) -> Candidates:
    """The same ranking for a small ``[k, V]``: add each row's logprob on the device, then one
    top-m per input over a ``[G, r*V]`` view whose flat position ``b*V + v`` is the tie order.
    (Cheaper than ``k`` per-row top-m's when the array sits in cache.)"""
    b, beam, vocab = scores.backend, scores.beam, scores.vocab
    g, r = start.shape[0], int(counts.max())
    logp = b.add_rows(logp, beam.logprob)  # --> [k, V]: logprob + log-probability, in its precision
    if (counts == r).all():
        grouped = logp.reshape(g, r * vocab)  # --> [G, r*V]
    else:  # pad each input to r rows of -inf
        group = np.repeat(np.arange(g), counts)
        slot = group * r + (np.arange(beam.size) - start[group])
        grouped = b.pad_rows(logp, slot, g * r).reshape(g, r * vocab)
    idx, val = b.topk_stable(grouped, min(int(keep.max()), r * vocab))  # --> [G, m] each, on the host
    grp, rank = np.nonzero(np.isfinite(val) & (np.arange(idx.shape[1]) < keep[:, None]))
    flat = idx[grp, rank]
    return Candidates(start[grp] + flat // vocab, flat % vocab, val[grp, rank].astype(np.float64))


def _merge(scores: StepScores, idx: np.ndarray, val: np.ndarray, start: np.ndarray, counts: np.ndarray,
           keep: np.ndarray) -> Candidates:
    """Each input's best ``keep[g]`` of its rows' candidates ``(idx, val) [k, m']`` (each row's
    best m', highest first), ranked by logprob + value, then flat index ``b*V + v``."""
    k, per_row = idx.shape
    g, r, vocab = start.shape[0], int(counts.max()), scores.vocab
    total = accumulate(scores, np.repeat(np.arange(k), per_row), val.ravel()).reshape(k, per_row)
    if (counts == r).all():  # every input has r rows: [k, m'] is already [G, r, m']
        tot, tok = total, idx
    else:  # pad each input to r rows of -inf
        group = np.repeat(np.arange(g), counts)
        slot = group * r + (np.arange(k) - start[group])
        tot = np.full((g * r, per_row), NEG_INF)
        tok = np.zeros((g * r, per_row), np.int64)
        tot[slot], tok[slot] = total, idx
    tot = tot.reshape(g, r * per_row)  # --> [G, r*m']: row b's candidates at b*m' ... b*m' + m' - 1
    flat = (np.arange(r)[:, None] * vocab + tok.reshape(g, r, per_row)).reshape(g, r * per_row)
    m = min(int(keep.max()), r * per_row)
    order = np.lexsort((flat, -tot))[:, :m]  # --> [G, m]: by value, then flat index
    best = np.take_along_axis(tot, order, 1)
    grp, rank = np.nonzero(np.isfinite(best) & (np.arange(m) < keep[:, None]))
    pos = order[grp, rank]  # position in the input's [r*m'] row
    row = start[grp] + pos // per_row
    return Candidates(row, idx[row, pos % per_row], best[grp, rank])


def runs(sorted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Runs of equal values in a sorted int array ``[k]`` (k >= 1): ``(start [G], length [G])``."""
    k = sorted_ids.shape[0]
    change = np.empty(k, dtype=bool)
    change[0] = True
    np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=change[1:])
    start = np.flatnonzero(change)
    if start.shape[0] == k:  # one row per input (beam 1, or every input down to one row)
        return start, np.ones(k, np.int64)
    length = np.empty_like(start)
    length[:-1] = start[1:] - start[:-1]
    length[-1] = k - start[-1]
    return start, length


def positions(sorted_ids: np.ndarray) -> np.ndarray:
    """int64 ``[k]``: each entry's position within its run of equal values in a sorted int array
    ``[k]`` (0 for the first of a run)."""
    return np.arange(sorted_ids.shape[0]) - np.searchsorted(sorted_ids, sorted_ids)


def ranked_per_input(key: np.ndarray, inputs: np.ndarray, among: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The entries ``among`` ranked within their input, highest ``key`` first, ties to the lower
    index.

    Args:
        key: float ``[j]``: what entries are ranked by.
        inputs: int64 ``[j]``: each entry's input.
        among: int64 ``[m]``: the entries to rank (indices into ``key`` and ``inputs``).

    Returns:
        int64 ``[m]`` each: the entries in that order, input-major (inputs ascending), and each
        one's rank within its input (0 for its best).
    """
    order = among[np.lexsort((among, -key[among], inputs[among]))]
    return order, positions(inputs[order])
