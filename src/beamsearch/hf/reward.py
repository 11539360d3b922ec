"""A ``transformers`` reward model as step search's scorer (:func:`beamsearch.step_search`):
:class:`RewardScorer`, for a sequence-classification model (an outcome or process reward model
read at the last token) or a token-classification one (a process reward model read per token),
the score read at the newest step's delimiter: the last token of prompt + partial solution, or of
a ``step_tag`` appended to it (the token some process reward models are trained to score at).
A causal reward model keeps the keys and values of the rows it scored, so that a candidate that
extends one of them (the next round's, of a partial solution kept) feeds only its new segment
(:class:`KeptRows`)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from beamsearch.core import validate as check
from beamsearch.hf.caches import cache_keyword, inference, plain_layer
from beamsearch.hf.inputs import in_vocab, position_limit

__all__ = ["KeptRows", "RewardScorer"]

TRANSFORMS = ("sigmoid", "softmax", "logit")
KEEP_BYTES = 2**31  # RewardScorer's default keep_bytes


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

    With ``keep_cache``, the keys and values of every row a call scores (without its step tag)
    are kept until the next call (:class:`KeptRows`), and a row whose prompt and a prefix of whose
    partial solution were scored by the previous call feeds only the tokens after that prefix, read
    against the kept ones; a row with no such prefix first has its prompt read once for all the rows
    that share it. Step search's round r + 1 extends the partial solutions its round r scored, so
    the reward model reads each token about once instead of once per round. The scores equal a
    whole row's to float rounding (exactly so only up to it: the model sums in another order).

    Args:
        model: a ``...ForSequenceClassification`` or ``...ForTokenClassification`` model, in eval
            mode (random weights are fine for tests).
        step_tag: token ids appended to every row (may be empty).
        label: the column read; default the last one.
        transform: ``"sigmoid"``, ``"softmax"`` or ``"logit"``; default ``"sigmoid"`` for a
            one-label model, ``"softmax"`` otherwise.
        batch_rows: the most rows per model call (rows of like lengths share a call: little padding).
        keep_cache: keep the rows' keys and values for the next call; default: when the model
            attends causally with full-attention layers only (a bidirectional encoder's keys depend
            on the tokens after them; a sliding window keeps its own cache). True on another model
            is a ValueError.
        keep_bytes: the most bytes of keys and values kept between calls (default 2 GiB: the rows
            of a call cost ``rows x tokens x layers x 2 x kv width x dtype size``); rows past it are
            not kept, and the next call reads their extensions whole.
    """

    def __init__(self, model: Any, *, step_tag: Sequence[int] = (), label: int | None = None,
                 transform: str | None = None, batch_rows: int = 64, keep_cache: bool | None = None,
                 keep_bytes: int = KEEP_BYTES) -> None:
        if not (hasattr(model, "config") and hasattr(model, "get_input_embeddings")):
            raise TypeError(f"model must be a transformers ...ForSequenceClassification or ...ForTokenClassification "
                            f"model; got {type(model).__name__}")
        labels = int(model.config.num_labels)
        self.model, self.step_tag = model, check.token_list("step_tag", step_tag, allow_empty=True)
        vocab = model.get_input_embeddings().num_embeddings
        past = [j for j, t in enumerate(self.step_tag) if t >= vocab]
        if past:
            raise ValueError(f"step_tag[{past[0]}] must be in [0, V) with V={vocab} (the model's embeddings); got "
                             f"{self.step_tag[past[0]]}")
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
        cacheable = causal_full_attention(model)
        keep = None if keep_cache is None else check.flag("keep_cache", keep_cache)
        if keep and not cacheable:
            raise ValueError(f"keep_cache=True needs a reward model that attends causally with full-attention layers "
                             f"only; this {model.config.model_type} model does not")
        self.keep_cache = cacheable if keep is None else keep
        self.keep_bytes = check.at_least("keep_bytes", keep_bytes, 0)
        self.keeping = self.keep_cache and self.keep_bytes > 0  # rows' keys and values are kept
        self.kept = KeptRows()

    def __call__(self, prompts: Sequence[Sequence[int]], partial_solutions: Sequence[Sequence[int]]) -> np.ndarray:
        """float64 ``[C]``: each candidate's score (see the class).

        Args:
            prompts: ``C`` lists of token ids.
            partial_solutions: ``C`` lists of token ids; ``prompts[i] + partial_solutions[i]`` (and
                the step tag) is candidate i's row, at least one token.

        Raises:
            ValueError / TypeError: before the reward model runs, naming the candidate: rows that
                are not token-id lists, ids outside the vocabulary, an empty row, or a row longer
                than the model's positions (``n_positions`` / ``max_position_embeddings``).
        """
        heads, given = _rows("prompts", prompts), _rows("partial_solutions", partial_solutions)
        if len(heads) != len(given):
            raise ValueError(f"prompts and partial_solutions must hold one entry per candidate; got {len(heads)} and "
                             f"{len(given)}")
        tails = [s + self.step_tag for s in given]
        empty = [i for i, (h, t) in enumerate(zip(heads, tails, strict=True)) if not h and not t]
        if empty:
            raise ValueError(f"prompts[{empty[0]}] + partial_solutions[{empty[0]}] is empty (and no step_tag): the "
                             "reward model reads at least one token")
        in_vocab(self.model, [h + t for h, t in zip(heads, tails, strict=True)], "prompts + partial_solutions")
        self._fits(heads, tails)
        if not heads:
            return np.zeros(0)
        if not self.keeping:
            return self._read(self._scored([Row(-1, 0, h + t) for h, t in zip(heads, tails, strict=True)], KeptRows()))
        tag, fresh = len(self.step_tag), KeptRows(self.keep_bytes)
        rows = [self.kept.row(h, t, tag) for h, t in zip(heads, tails, strict=True)]
        unread = list(dict.fromkeys(tuple(h) for h, t, r in zip(heads, tails, rows, strict=True)
                                    if r.at < 0 and h and t))
        if unread:  # each prompt that no kept row extends, read once for every row that starts with it
            self._scored([Row(-1, 0, list(p)) for p in unread], self.kept, fresh, [(p, ()) for p in unread])
            kept = self.kept.joined(fresh)
            rows = [kept.row(h, t, tag) if r.at < 0 else r for h, t, r in zip(heads, tails, rows, strict=True)]
        else:
            kept = self.kept
        names = [(tuple(h), tuple(t[: len(t) - tag])) for h, t in zip(heads, tails, strict=True)]
        logits = self._scored(rows, kept, fresh, names, tag)
        self.kept = fresh
        return self._read(logits)

    def _fits(self, heads: list[list[int]], tails: list[list[int]]) -> None:
        """A clear error, before the reward model runs, for a row longer than its positions."""
        limit = position_limit(self.model)
        if limit is None:
            return
        long = [i for i, (h, t) in enumerate(zip(heads, tails, strict=True)) if len(h) + len(t) > limit]
        if long:
            i, tag = long[0], len(self.step_tag)
            parts = f"{len(heads[i])} + {len(tails[i]) - tag}" + (f" + {tag}" if tag else "")
            raise ValueError(f"prompts[{i}] + partial_solutions[{i}]{' + step_tag' if tag else ''} is "
                             f"{len(heads[i]) + len(tails[i])} tokens ({parts}), more than the reward model's {limit} "
                             "positions (config n_positions / max_position_embeddings)")

    def _scored(self, rows: list[Row], kept: KeptRows, into: KeptRows | None = None,
                names: list[tuple[tuple[int, ...], tuple[int, ...]]] | None = None, tag: int = 0) -> torch.Tensor:
        """float64 ``[C, labels]``: each row's logits at its last token, in batches of rows of like
        lengths (their kept columns read from ``kept``); with ``into``, each row's keys and values
        but the last ``tag`` tokens' kept there under ``names[i]``."""
        order = sorted(range(len(rows)), key=lambda j: (len(rows[j].new), rows[j].past))  # little padding
        parts = []
        for i in range(0, len(rows), self.batch_rows):
            batch = [rows[j] for j in order[i : i + self.batch_rows]]
            logits, cache = self._logits(batch, kept)
            if logits.dim() != 2 or logits.shape[1] != self.model.config.num_labels:
                raise ValueError(f"model must give one logit per label (num_labels={self.model.config.num_labels}) at "
                                 f"a row's last token; it gave shape {tuple(logits.shape)} (a causal LM's logits?): "
                                 "use a ...ForSequenceClassification or ...ForTokenClassification model")
            parts.append(logits)
            if into is not None and names is not None:
                into.add(cache, batch, [names[j] for j in order[i : i + self.batch_rows]], tag)
        logits = torch.empty((len(rows), parts[0].shape[1]), dtype=torch.float64)
        logits[torch.tensor(order)] = torch.cat(parts).double().cpu()
        return logits

    @inference
    def _logits(self, rows: list[Row], kept: KeptRows) -> tuple[torch.Tensor, Any]:
        """float ``[c, labels]``: the logits at each row's last token, and the model's cache
        (``[c, heads, lead + width, dh]`` a layer; None without ``keep_cache``). Each row's kept
        columns (``past``, left-padded to the longest, ``lead``) then its new tokens (left-padded to
        ``width``), so that every row's last token is the last column."""
        device = next(self.model.parameters()).device
        new, past = (np.array(x, np.int64) for x in ([len(r.new) for r in rows], [r.past for r in rows]))
        width, lead = int(new.max()), int(past.max())
        fed = np.arange(width) >= width - new[:, None]  # --> [c, width]: the row's new tokens, at its end
        host_ids = np.full(fed.shape, self.pad, np.int64)
        host_ids[fed] = np.concatenate([r.new for r in rows])
        host_mask = np.concatenate([np.arange(lead) >= lead - past[:, None], fed], axis=1).astype(np.int64)
        ids, mask = torch.from_numpy(host_ids).to(device), torch.from_numpy(host_mask).to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, lead:]
        inputs: dict[str, Any] = dict(attention_mask=mask, position_ids=positions, use_cache=self.keeping)
        cache = None
        if self.keeping:  # the model extends this cache in place (a classifier's output may not return it)
            cache = DynamicCache(config=self.model.config)
            inputs[cache_keyword(self.model)] = kept.past(rows, lead, cache) if lead else cache
        if self.pooled:
            # given embeddings, a sequence classifier pools at the last column: every row's last token,
            # even one that is the pad id (an eos that doubles as pad), which its search over ids would skip
            out = self.model(inputs_embeds=self.model.get_input_embeddings()(ids), **inputs)
            logits = out.logits
        else:
            out = self.model(input_ids=ids, **inputs)
            logits = out.logits[:, -1]
        return logits, cache

    def _read(self, logits: torch.Tensor) -> np.ndarray:
        if self.transform == "softmax":
            logits = torch.softmax(logits, dim=-1)
        x = logits[:, self.label]
        if self.transform == "sigmoid":
            x = torch.sigmoid(x)
        return x.cpu().numpy()


def _rows(name: str, value: Any) -> list[list[int]]:
    """``value``, a sequence of token-id sequences, as lists (a bad one named ``name[i]``)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of token-id lists; got {value!r:.80}")
    return [check.token_list(f"{name}[{i}]", row.tolist() if isinstance(row, torch.Tensor) else row, allow_empty=True)
            for i, row in enumerate(value)]


def causal_full_attention(model: Any) -> bool:
    """Whether ``model`` takes a KV cache and attends causally (every attention module that says
    so says ``is_causal``) with full-attention cache layers only: then a row's keys and values do
    not depend on the tokens after it, and can be kept for a row that extends it."""
    takes = {"cache", "past_key_values"} & set(inspect.signature(model.forward).parameters)
    flags = [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)]
    layers = DynamicCache(config=model.config).layers
    return bool(takes) and bool(flags) and all(flags) and all(type(layer) is DynamicLayer for layer in layers)


@dataclass(frozen=True)
class Row:
    """One row of a reward-model call: ``new`` token ids, read after ``past`` kept columns that
    start at ``at`` in the kept rows (``at`` -1 and ``past`` 0: none)."""

    at: int
    past: int
    new: list[int]


class KeptRows:
    """The keys and values of the rows one call read, by tokens, for the rows of the next call
    that extend them.

    Per model layer, keys and values ``[1 + T, heads, dh]`` (the kept rows' tokens one after the
    other; place 0 zeros, the padding of a shorter row's columns), in parts per batch until read;
    ``index[prompt][partial] = (at, tokens)``: the row ``prompt + partial`` is ``tokens`` places from
    ``at``."""

    def __init__(self, budget: int = 0) -> None:
        self.budget = budget  # the most bytes of keys and values to keep
        self.bytes = 0
        self.parts: list[list[tuple[torch.Tensor, torch.Tensor]]] = []  # per batch, per layer (keys, values)
        self.index: dict[tuple[int, ...], dict[tuple[int, ...], tuple[int, int]]] = {}
        self.size = 1  # places taken, the zeros at 0 included
        self.store: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.lengths: dict[tuple[int, ...], list[int]] = {}

    def row(self, prompt: list[int], tail: list[int], tag: int) -> Row:
        """The row ``prompt + tail`` (``tail``: a partial solution and ``tag`` step-tag tokens) read
        after its longest kept prefix ``prompt + tail[:j]``, ``j <= len(tail) - tag``, that leaves at
        least one token to read (none kept: the whole row)."""
        key = tuple(prompt)
        entries = self.index.get(key)
        if entries:
            if key not in self.lengths:
                self.lengths[key] = sorted({len(k) for k in entries}, reverse=True)
            for j in self.lengths[key]:
                if j <= len(tail) - tag and j < len(tail):
                    hit = entries.get(tuple(tail[:j]))
                    if hit is not None:
                        return Row(hit[0], hit[1], tail[j:])
        return Row(-1, 0, prompt + tail)

    def add(self, cache: Any, rows: list[Row], names: list[tuple[tuple[int, ...], tuple[int, ...]]], tag: int) -> None:
        """Keep the columns of a call's ``rows`` (its ``cache``, ``[c, heads, lead + width, dh]`` a
        layer, laid out as :meth:`RewardScorer._logits` feeds them) but each row's last ``tag``, as
        ``names[i]`` (prompt, partial solution)."""
        layers = cache.layers
        columns = layers[0].keys.shape[2]
        lead = columns - max(len(r.new) for r in rows)
        past = np.array([r.past for r in rows], np.int64)
        new = np.array([len(r.new) for r in rows], np.int64)
        counts = past + new - tag  # --> [c]: each row's columns kept (its step tag's are not)
        per_column = sum(2 * layer.keys[0, :, 0].numel() * layer.keys.element_size() for layer in layers)
        fits = self.bytes + np.cumsum(counts) * per_column <= self.budget  # rows past the budget are not kept
        kept = np.flatnonzero(fits)  # --> [c']: the rows kept, a first run of them
        if not kept.size:
            return
        past, new, counts = past[kept], new[kept], counts[kept]
        self.bytes += int(counts.sum()) * per_column
        for i, n in zip(kept.tolist(), counts.tolist(), strict=True):
            prompt, partial = names[i]
            self.index.setdefault(prompt, {})[partial] = (self.size, n)
            self.size += n
        which = np.repeat(kept, counts)
        at = np.arange(which.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)  # place within its row
        p, n = np.repeat(past, counts), np.repeat(new, counts)
        where = np.where(at < p, lead - p + at, columns - n + at - p)  # its kept columns, then its new ones
        device = layers[0].keys.device
        i_t, c_t = torch.from_numpy(which).to(device), torch.from_numpy(where).to(device)
        self.parts.append([(layer.keys[i_t, :, c_t], layer.values[i_t, :, c_t]) for layer in layers])
        self.store, self.lengths = None, {}

    def joined(self, other: KeptRows) -> KeptRows:
        """These kept rows and ``other``'s, in one (``other``'s places after these)."""
        out = KeptRows()
        out.parts, out.size = self.parts + other.parts, self.size + other.size - 1
        out.index = {p: dict(e) for p, e in self.index.items()}
        for prompt, entries in other.index.items():
            mine = out.index.setdefault(prompt, {})
            for partial, (at, n) in entries.items():
                mine[partial] = (at + self.size - 1, n)
        return out

    def past(self, rows: list[Row], lead: int, cache: DynamicCache) -> DynamicCache:
        """``cache`` holding the rows' kept columns, each row's left-padded with zeros to ``lead``:
        keys and values ``[c, heads, lead, dh]`` a layer."""
        if self.store is None:
            self.store = []
            for layer in zip(*self.parts, strict=True):  # per model layer, every batch's (keys, values)
                zero = torch.zeros_like(layer[0][0][:1])
                self.store.append((torch.cat([zero] + [k for k, _ in layer]),
                                   torch.cat([zero] + [v for _, v in layer])))
        at, past = (np.array(x, np.int64)[:, None] for x in ([r.at for r in rows], [r.past for r in rows]))
        col = np.arange(lead)
        place = np.where(col >= lead - past, at + col - (lead - past), 0)  # --> [c, lead]: 0, the zeros, before
        idx = torch.from_numpy(place.reshape(-1)).to(self.store[0][0].device)
        cache.layers = []
        for keys, values in self.store:
            k, v = (x.index_select(0, idx).view(len(rows), lead, *x.shape[1:]).transpose(1, 2) for x in (keys, values))
            cache.layers.append(plain_layer(k, v))
        return cache
