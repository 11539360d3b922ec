"""``transformers``' own beam search rule (``GenerationMixin._beam_search``, transformers 5.24),
as a selection rule on the one engine, for :func:`beamsearch.transformers_beam_search`.

Per step and input, with B the beam size:

- the candidates are the input's extensions ranked by logprob so far + log-probability (float32
  sums, ties to the lower flat index ``b*V + v``), of which ``generate`` looks at the first
  ``K = max(2, 1 + E) * B`` (E eos ids);
- the B best that do not end a hypothesis are the next live rows (among the first K there are
  always B of them: each row has at most E terminal extensions);
- a terminal extension (eos, or a stop sequence) *finishes only if it ranks among the first B of
  all candidates*; the others are dropped (this is where the rule loses hypotheses that ours
  keeps); its score is ``logprob / t ** alpha`` with t the tokens generated, eos counted,
  computed in float32 as ``generate`` computes it;
- at the input's last step (``max_steps``) the first B candidates all end: the terminal ones
  finished, the others unfinished (``generate``'s max-length criterion);
- each input keeps its B best finished scores; after the step its finished set is closed (the
  input's rows are dropped: ``generate`` keeps running them but adds nothing more) when
  ``early_stopping`` is True and it has B finished, or, otherwise, when it has B finished and its
  best live row cannot beat the worst of them by ``generate``'s heuristic: the row's logprob over
  ``t ** alpha`` (``early_stopping=False``), or over ``max_steps ** alpha`` (``"never"`` with
  ``alpha > 0``).

The results (:func:`beamsearch.core.results.build`) are every hypothesis this rule ended, ranked
by score, cut to ``n_best``: the first ``n_best`` of ``generate``'s B finished. Not reproduced:
``generate`` fills its K candidates with entries at -inf or at -1e9 (copies of the first row at
step 1, rows that just ended) where an input has fewer than K finite candidates; here only finite
candidates count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from beamsearch.backends import NEG_INF
from beamsearch.core.beam import Candidates
from beamsearch.core.select import StepScores, best_per_input, positions, split_terminals
from beamsearch.strategies import Selection


@dataclass(frozen=True)
class TransformersState:
    """``top``: float32 ``[N, B]``, each input's best finished scores, highest first (-inf: an
    empty slot); ``n_finished``: int64 ``[N]``, the hypotheses it finished so far."""

    top: np.ndarray
    n_finished: np.ndarray


@dataclass(frozen=True)
class TransformersBeam:
    """The rule of ``generate``'s beam search.

    Attributes:
        beam_size: B, live rows per input (and the finished hypotheses each keeps).
        alpha: ``generate``'s ``length_penalty``: score = logprob / len ** alpha.
        max_steps: int64 ``[N]``, each input's last step.
        early_stopping: True, False or ``"never"``, as ``generate`` takes it.
    """

    beam_size: int
    alpha: float
    max_steps: np.ndarray
    early_stopping: bool | str

    def start(self, n_inputs: int) -> TransformersState:
        return TransformersState(np.full((n_inputs, self.beam_size), NEG_INF, np.float32),
                                 np.zeros(n_inputs, np.int64))

    def select(self, state: TransformersState, scores: StepScores) -> tuple[Selection, TransformersState]:
        b, n, t = self.beam_size, state.n_finished.shape[0], scores.step
        terminal, logp = split_terminals(scores)
        live = best_per_input(scores, logp, np.full(n, b))
        row_input, row_pos = scores.beam.input, positions(scores.beam.input)
        # every candidate that can matter: the B best live and the finite terminal ones, ranked together
        parent = np.concatenate([live.parent, terminal.parent])
        token = np.concatenate([live.token, terminal.token])
        value = np.concatenate([live.logprob, terminal.logprob])
        is_terminal = np.arange(parent.shape[0]) >= live.size
        inputs = row_input[parent]
        order = np.lexsort((row_pos[parent] * scores.vocab + token, -value, inputs))
        rank = np.empty_like(order)
        rank[order] = positions(inputs[order])
        last = self.max_steps[inputs] <= t
        ends = (rank < b) & (is_terminal | last)  # --> [j]: what generate's finished set takes in
        chosen = order[ends[order]]  # input-major, best first
        ended = Candidates(parent[chosen], token[chosen], value[chosen])
        state = self._with_finished(state, inputs[chosen], value[chosen], t)
        keep = ~last[: live.size] & ~self._closed(state, live, row_input, t)[row_input[live.parent]]
        selection = Selection(live.take(np.flatnonzero(keep)), ended, is_terminal[chosen])
        return selection, state

    def _with_finished(self, state: TransformersState, inputs: np.ndarray, logprob: np.ndarray,
                       t: int) -> TransformersState:
        """The state with this step's ended hypotheses merged into each input's B best scores."""
        if inputs.shape[0] == 0:
            return state
        score = logprob.astype(np.float32) / np.float32(t ** self.alpha)  # generate's float32 division
        slot = positions(inputs)
        new = np.full((state.top.shape[0], int(slot.max()) + 1), NEG_INF, np.float32)
        new[inputs, slot] = score
        top = -np.sort(-np.concatenate([state.top, new], axis=1), axis=1)[:, : self.beam_size]
        return TransformersState(top, state.n_finished + np.bincount(inputs, minlength=top.shape[0]))

    def _closed(self, state: TransformersState, live: Candidates, row_input: np.ndarray, t: int) -> np.ndarray:
        """bool ``[N]``: inputs whose finished set can no longer change (see the module's docstring)."""
        full = state.n_finished >= self.beam_size
        if self.early_stopping is True or not full.any():
            return full
        length = self.max_steps if self.early_stopping == "never" and self.alpha > 0 else np.full_like(
            self.max_steps, t)
        best = np.full(full.shape[0], NEG_INF, np.float32)
        if live.size:
            inputs = row_input[live.parent]
            first = np.flatnonzero(np.r_[True, inputs[1:] != inputs[:-1]])  # each input's best live row
            best[inputs[first]] = live.logprob[first].astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            reach = best / (length.astype(np.float64) ** self.alpha).astype(np.float32)
        return full & ~(reach > state.top[:, -1])
