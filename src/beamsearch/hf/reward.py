"""A ``transformers`` reward model as step search's scorer (:func:`beamsearch.step_search`):
:class:`RewardScorer`, for a sequence-classification model (an outcome or process reward model
read at the last token) or a token-classification one (a process reward model read per token),
the score read at the newest step's delimiter: the last token of prompt + partial solution, or of
a ``step_tag`` appended to it (the token some process reward models are trained to score at)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from beamsearch.core import validate as check
from beamsearch.hf.caches import inference
from beamsearch.hf.inputs import in_vocab

__all__ = ["RewardScorer"]

TRANSFORMS = ("sigmoid", "softmax", "logit")


class RewardScorer:
    """``scorer(prompts, partial_solutions) -> float64 [C]`` from a reward model.

    Each candidate's row is ``prompt + partial_solution + step_tag``; the rows, ordered by length,
    are left-padded into batches of ``batch_rows`` with an attention mask and each row's own positions,
    so every row's last token sits at the last column: a sequence-classification model pools
    there (its ``config.pad_token_id`` must be set, as ``transformers`` requires for batches), a
    token-classification model's logits are read there. The score is ``transform`` of the logits
    ``[C, labels]`` at that token: ``"sigmoid"`` of column ``label``, ``"softmax"`` over the
    labels at ``label``, or the ``"logit"`` itself. (A sequence classifier is given the rows'
    embeddings, so that it pools at the last column even where a row ends with the pad id, as a
    finished solution does when eos doubles as pad.)

    Args:
        model: a ``...ForSequenceClassification`` or ``...ForTokenClassification`` model, in eval
            mode (random weights are fine for tests).
        step_tag: token ids appended to every row (may be empty).
        label: the column read; default the last one.
        transform: ``"sigmoid"``, ``"softmax"`` or ``"logit"``; default ``"sigmoid"`` for a
            one-label model, ``"softmax"`` otherwise.
        batch_rows: the most rows per model call (rows of like lengths share a call: little padding).
    """

    def __init__(self, model: Any, *, step_tag: Sequence[int] = (), label: int | None = None,
                 transform: str | None = None, batch_rows: int = 64) -> None:
        labels = int(model.config.num_labels)
        self.model, self.step_tag = model, check.token_list("step_tag", step_tag, allow_empty=True)
        self.label = labels - 1 if label is None else check.integer("label", label)
        if not 0 <= self.label < labels:
            raise ValueError(f"label must be in [0, {labels}) (the model's num_labels); got {label!r}")
        self.transform = transform or ("sigmoid" if labels == 1 else "softmax")
        if self.transform not in TRANSFORMS:
            raise ValueError(f"transform must be one of {', '.join(TRANSFORMS)}; got {transform!r}")
        self.batch_rows = check.at_least("batch_rows", batch_rows, 1)
        self.pooled = type(model).__name__.endswith("ForSequenceClassification")
        pad = getattr(model.config, "pad_token_id", None)
        if self.pooled and pad is None:
            raise ValueError("a sequence-classification reward model needs config.pad_token_id (it pools at the last "
                             "token that is not padding); set model.config.pad_token_id")
        self.pad = int(pad) if pad is not None else 0

    def __call__(self, prompts: Sequence[Sequence[int]], partial_solutions: Sequence[Sequence[int]]) -> np.ndarray:
        """float64 ``[C]``: each candidate's score (see the class)."""
        rows = [list(p) + list(s) + self.step_tag for p, s in zip(prompts, partial_solutions)]
        in_vocab(self.model, rows, "prompts + partial_solutions")
        order = sorted(range(len(rows)), key=lambda j: len(rows[j]))  # rows of like lengths together: less padding
        size = self.batch_rows
        parts = [self._logits([rows[j] for j in order[i : i + size]]) for i in range(0, len(rows), size)]
        if not parts:
            return np.zeros(0)
        logits = torch.empty((len(rows), parts[0].shape[1]), dtype=torch.float64)
        logits[torch.tensor(order)] = torch.cat(parts).double().cpu()
        return self._read(logits)

    @inference
    def _logits(self, rows: list[list[int]]) -> torch.Tensor:
        """float ``[c, labels]``: the logits at each row's last token (rows left-padded)."""
        device = next(self.model.parameters()).device
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long, device=device)
        mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        if not self.pooled:
            return self.model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
        # given embeddings, a sequence classifier pools at the last column: every row's last token,
        # even one that is the pad id (an eos that doubles as pad), which its search over ids would skip
        embeds = self.model.get_input_embeddings()(ids)
        return self.model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions).logits

    def _read(self, logits: torch.Tensor) -> np.ndarray:
        if self.transform == "softmax":
            logits = torch.softmax(logits, dim=-1)
        x = logits[:, self.label]
        if self.transform == "sigmoid":
            x = torch.sigmoid(x)
        return x.cpu().numpy()
