"""Diverse beam search (Vijayakumar et al. 2016, "Diverse Beam Search"): each input's beam is split
into G groups of ``width`` rows that choose one after the other at every step; group g's
log-probabilities are lowered by ``penalty`` times the number of times each token was chosen by
groups 0..g-1 of the same input at this step (Hamming diversity). Otherwise each group follows
SPEC section 6: every finite terminal extension of its rows finishes outside the beam, and its
``width`` best other extensions (by logprob so far + penalized log-probability, ties to the lower
flat index within the group) are its next live rows.

The penalty only steers the choice: the logprobs carried and reported are the model's processed
ones, as in the paper's objective (Theta(y_[t]) + lambda * Delta at the current step only);
``transformers``' group beam search adds the penalty into the beam scores instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.core.beam import Beam, Candidates
from beamsearch.core.select import StepScores, accumulate, best_per_input, split_terminals
from beamsearch.strategies import Selection
from beamsearch.strategies.batch import BatchBeam, BatchState


@dataclass(frozen=True)
class DiverseBeam:
    """The grouped rule.

    Per-row data: ``Beam.tags["group"]``, int64 ``[k]``, each live row's group; the rows of an
    input are ordered by group, then rank. Before step 1 (no tags) every group extends the
    input's one row.

    Attributes:
        groups: G >= 1.
        width: live rows per group (``beam_size // G``).
        penalty: lambda >= 0, the Hamming diversity strength.
        rule: the batched rule whose finished-score bookkeeping and lossless early stop are used
            for each input's groups together (its ``n_best``, penalty and bound).
    """

    groups: int
    width: int
    penalty: float
    rule: BatchBeam

    @property
    def beam_size(self) -> int:
        """The most children one row keeps (a trace reads this many per row, then the pruned)."""
        return self.width

    def start(self, n_inputs: int) -> BatchState:
        return self.rule.start(n_inputs)

    def select(self, state: BatchState, scores: StepScores) -> tuple[Selection, BatchState]:
        finished, logp = split_terminals(scores)  # production order: row position (group order), token
        beam = scores.beam
        group = None if beam.tags is None else beam.tags["group"]
        if group is None and self.groups > 1:  # step 1: each group is a beam of its own from the one row
            finished = _per_group(finished, beam, self.groups)
        parts: list[Candidates] = []
        # G is small: a loop over the groups, each vectorized over every input and row of the group
        for g in range(self.groups):
            rows = np.arange(beam.size) if group is None else np.flatnonzero(group == g)
            if rows.size:
                parts.append(self._choose(scores, logp, rows, g, parts, state.n_finished.shape[0]))
        live = _input_major(parts, beam)
        if not self.rule.early_stop:
            return Selection(live, finished, True), state
        # lossless per input: it stops once no live row of any group can beat its n_best-th
        # finished score over all groups (the merged result), and all its groups stop together
        state = self.rule.with_finished(state, scores, finished)
        return Selection(live, finished, True, self.rule.stopped(state, scores, live)), state

    def _choose(self, scores: StepScores, logp: object, rows: np.ndarray, g: int,
                earlier: list[Candidates], n_inputs: int) -> Candidates:
        """Group g's ``width`` best extensions of its ``rows`` (positions in this call), penalized by
        the tokens ``earlier`` groups chose for the same input at this step."""
        b, beam = scores.backend, scores.beam
        # one group: the plain batched rule ranks the step's own array; more: a copy of the group's
        # rows [k_g, V], as the ranking writes into it, and so may the penalty
        sub = logp if self.groups == 1 else b.take_rows(logp, b.index(rows, logp))
        sub_beam = Beam(beam.input[rows], beam.logprob[rows], beam.token[rows], None, None)
        penalized = False
        if earlier and self.penalty > 0:
            prow, ptok, times = _chosen_before(sub_beam.input, earlier, beam.input, scores.vocab, n_inputs)
            if prow.size:
                lowered = b.take(sub, prow, ptok) - b.from_host(self.penalty * times, sub)
                sub = b.put(sub, prow, ptok, lowered)
                penalized = True
        width = np.full(n_inputs, self.width)
        cand = best_per_input(StepScores(b, sub, sub_beam, scores.terminals, scores.step), sub, width)
        parent = rows[cand.parent]
        # a penalized group's ranking values are not logprobs: take those from the model's own
        logprob = accumulate(scores, parent, b.gather(logp, parent, cand.token)) if penalized else cand.logprob
        return Candidates(parent, cand.token, logprob, {"group": np.full(cand.size, g, np.int64)})


def _chosen_before(sub_input: np.ndarray, earlier: list[Candidates], row_input: np.ndarray,
                   vocab: int, n_inputs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The penalty's sparse entries for a group's rows.

    Args:
        sub_input: int64 ``[k_g]``, the input of each of the group's rows (sorted).
        earlier: the candidates the earlier groups chose at this step (``parent`` rows of the call).
        row_input: int64 ``[k]``, the input of each row of the call.

    Returns:
        ``(row [p], token [p], times [p])``: for each of the group's rows, every token the earlier
        groups of its input chose, and how many times they chose it.
    """
    parent = np.concatenate([c.parent for c in earlier])
    token = np.concatenate([c.token for c in earlier])
    keys, times = np.unique(row_input[parent] * vocab + token, return_counts=True)  # sorted by input, token
    per_input = np.bincount(keys // vocab, minlength=n_inputs)  # --> [N]: distinct tokens chosen per input
    first = np.concatenate([[0], np.cumsum(per_input)[:-1]])  # --> [N]: where an input's keys start
    count = per_input[sub_input]  # --> [k_g]
    row = np.repeat(np.arange(sub_input.shape[0]), count)  # --> [p]
    within = np.arange(row.shape[0]) - np.repeat(np.cumsum(count) - count, count)
    at = first[sub_input[row]] + within
    return row, keys[at] % vocab, times[at].astype(np.float64)


def _per_group(finished: Candidates, beam: Beam, groups: int) -> Candidates:
    """Step 1's terminal extensions once for each group (the row they extend is every group's),
    input-major, group order within an input: G independent beams each finish them."""
    copies = np.tile(np.arange(finished.size), groups)  # --> [G*j], group-major
    return finished.take(copies[np.argsort(beam.input[finished.parent][copies], kind="stable")])


def _input_major(parts: list[Candidates], beam: Beam) -> Candidates:
    """The groups' choices as one input-major list: per input, group 0's rows in rank order, then
    group 1's, ... (the order the next call gets them in)."""
    if not parts:
        return Candidates.empty()
    parent = np.concatenate([c.parent for c in parts])
    order = np.argsort(beam.input[parent], kind="stable")  # parts are group-major: stable keeps group, rank
    return Candidates(parent[order], np.concatenate([c.token for c in parts])[order],
                      np.concatenate([c.logprob for c in parts])[order],
                      {"group": np.concatenate([c.tags["group"] for c in parts if c.tags is not None])[order]})
