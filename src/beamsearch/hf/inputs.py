"""What the adapters and :func:`~beamsearch.hf.generation.generate` take in, checked before the
model runs: each input's token ids (:func:`input_rows`: token-id lists, strings with a tokenizer,
or a padded tensor with its mask), ids inside the vocabulary, positions within the model's
(:func:`position_limit`, :func:`check_positions`), the model in eval mode; the padded batch
(:func:`left_padded`, :func:`right_padded`) and the eos and pad ids to search with
(:func:`search_eos`, :func:`pad_id`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from beamsearch.core import validate as check


def input_rows(inputs: Any, attention_mask: Any, tokenizer: Any, name: str) -> list[list[int]]:
    """Each input's token ids (padding removed); refuses an empty batch and an empty input,
    naming ``name``. ``inputs``: token-id lists, strings (with ``tokenizer``), or a 2-D tensor
    ``[N, P]`` with its ``attention_mask`` ``[N, P]`` (left or right padding)."""
    if isinstance(inputs, torch.Tensor):
        return _unpadded(inputs, attention_mask, name)
    if attention_mask is not None:
        raise ValueError(f"attention_mask is only taken with a 2-D tensor of {name}; got {name} of type "
                         f"{type(inputs).__name__}")
    if isinstance(inputs, str) or len(inputs) == 0:
        raise ValueError(f"{name} must hold at least one input (a list of token-id lists or strings, or a "
                         f"2-D tensor); got {inputs!r:.80}")
    if isinstance(inputs[0], str):
        if tokenizer is None:
            raise ValueError(f"{name} are strings: pass the model's tokenizer")
        rows = [list(tokenizer(text)["input_ids"]) for text in inputs]
    else:
        rows = [check.token_list(f"{name}[{i}]", p, allow_empty=True) for i, p in enumerate(inputs)]
    empty = [i for i, r in enumerate(rows) if not r]
    if empty:
        raise ValueError(f"{name}[{empty[0]}] is empty: every input needs at least one token")
    return rows


def in_vocab(model: Any, rows: list[list[int]], name: str) -> None:
    """Refuse an id outside the model's embedding table ``[0, V)`` before the model runs (torch
    would raise an IndexError from inside the forward), naming ``name[i][j]``, the value and V."""
    vocab = model.get_input_embeddings().num_embeddings
    flat = np.fromiter((t for r in rows for t in r), np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= vocab))
    if bad.size:
        at = int(bad[0])
        ends = np.cumsum([len(r) for r in rows])
        i = int(np.searchsorted(ends, at, side="right"))
        j = at - (int(ends[i - 1]) if i else 0)
        raise ValueError(f"{name}[{i}][{j}] must be in [0, V) with V={vocab} (the model's embeddings); "
                         f"got {int(flat[at])}")


def _unpadded(ids: torch.Tensor, attention_mask: Any, name: str) -> list[list[int]]:
    """The token lists of a padded ``[N, P]`` tensor: where ``attention_mask`` is 1 (all of it
    without a mask). Each mask row must be one block of ones at the left or at the right end."""
    if ids.dim() != 2 or ids.shape[0] == 0 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} as a tensor must be 2-D [N, P] integer token ids with N >= 1; got dtype "
                         f"{ids.dtype} and shape {tuple(ids.shape)}")
    if attention_mask is None:
        mask = torch.ones_like(ids, dtype=torch.bool)
    else:
        mask = torch.as_tensor(attention_mask)
        if tuple(mask.shape) != tuple(ids.shape) or not ((mask == 0) | (mask == 1)).all():
            raise ValueError(f"attention_mask must be 0/1 of the shape of {name} {tuple(ids.shape)}; got shape "
                             f"{tuple(mask.shape)}")
        mask = mask.to(device=ids.device, dtype=torch.bool)
        step = mask.long().diff(dim=1)  # --> [N, P-1]: +1 where a left padding ends, -1 where a right one starts
        padded_once = (step >= 0).all(dim=1) | (step <= 0).all(dim=1)
        if not padded_once.all():
            row = int((~padded_once).nonzero()[0, 0])
            raise ValueError(f"attention_mask[{row}] must be left or right padding (one block of ones); got "
                             f"{mask[row].long().tolist()}")
    if (ids[mask] < 0).any():
        raise ValueError(f"{name} holds a negative token id where attention_mask is 1")
    rows = [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]  # once per input, at entry
    empty = [i for i, r in enumerate(rows) if not r]
    if empty:
        raise ValueError(f"{name}[{empty[0]}] is empty (its attention_mask is all 0): every input needs at "
                         "least one token")
    return rows


def in_eval_mode(model: Any) -> None:
    """A model left in training mode (dropout on) decodes differently on every call: say so."""
    if getattr(model, "training", False):
        warnings.warn("the model is in training mode (dropout is on), so decoding is not deterministic: "
                      "call model.eval() first", stacklevel=3)


def position_limit(model: Any) -> int | None:
    """The most positions the model takes: ``n_positions`` or ``max_position_embeddings`` of its
    (text) config, None when it has neither (T5's relative positions). A sliding window is not a
    limit: a sliding-window model (Mistral) is limited by its ``max_position_embeddings`` alone."""
    cfg = model.config.get_text_config()
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(cfg, name, None)
        if isinstance(value, int):
            return value
    return None


def check_positions(model: Any, longest: int, name: str, new_tokens: int | None, *, decoder_start: bool) -> None:
    """A clear error, before the model runs, when an input or the positions the search will feed
    exceed the model's limit. A causal LM is fed the prompt and then every generated token but
    the last: ``len + max_new_tokens - 1`` positions; an encoder-decoder's encoder takes the
    source and its decoder the start token and ``max_new_tokens - 1`` tokens."""
    limit = position_limit(model)
    if limit is None:
        return
    if longest > limit:
        raise ValueError(f"{name}: an input of {longest} tokens is longer than the model's {limit} positions "
                         "(config n_positions / max_position_embeddings)")
    if new_tokens is None:
        return
    fed = new_tokens if decoder_start else longest + new_tokens - 1
    if fed > limit:
        raise ValueError(f"max_new_tokens={new_tokens} needs {fed} positions "
                         f"({'the decoder start and ' if decoder_start else f'a prompt of {longest} and '}"
                         f"{new_tokens - 1} generated tokens fed back), more than the model's {limit}")


def left_padded(rows: list[list[int]], pad: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ids int64 ``[N, P]`` padded on the left, mask int64 ``[N, P]`` (1 on real tokens)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    return ids, mask


def right_padded(rows: list[list[int]], pad: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ids int64 ``[N, S]`` padded on the right, mask int64 ``[N, S]`` (1 on real tokens)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    return ids, mask


def search_eos(model: Any, eos_token_id: Any) -> tuple[int | list[int], bool]:
    """(the eos id or ids to search with, whether the adapter adds a never-produced eos column).

    ``"model"`` reads the generation config, whose ``eos_token_id`` may be one id or a list of
    them: every id in the list is kept (any of them finishes a hypothesis, as in ``generate``)."""
    if isinstance(eos_token_id, str) and eos_token_id == "model":
        eos_token_id = model.generation_config.eos_token_id
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.tolist()
    if eos_token_id is None or (isinstance(eos_token_id, (list, tuple)) and len(eos_token_id) == 0):
        return int(model.config.get_text_config().vocab_size), True
    check.eos_ids("eos_token_id", eos_token_id)  # the search's own check: ints >= 0, named
    return check.ids_as_given(eos_token_id), False


def pad_id(model: Any, pad_token_id: int | None) -> int:
    if pad_token_id is not None:
        return check.token("pad_token_id", pad_token_id)
    pad = model.generation_config.pad_token_id
    return int(pad) if isinstance(pad, int) else 0
