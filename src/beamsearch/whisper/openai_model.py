"""An openai/whisper model (``whisper.model.Whisper``, the ``openai-whisper`` package) as a step
function: its decoder with a key/value cache carried in the search state, so the engine reorders
it like any other state (whisper's own ``PyTorchInference`` keeps it in hooks and rearranges it
itself, which is why its batched beam search breaks).

The state is a :class:`OpenAIWhisperState`; its ``cache`` is a dict from each self-attention
key/value projection of the decoder to its ``[k, t, d]`` output so far (one position more a step),
and ``cross`` the cross-attention's keys and values of the audio (:class:`CrossCache`, computed at
the first call): every row of a window holds the same, so its rows are gathered only when the
windows of the rows change (rows of a window that finished leave), not at every step as a beam
reorders rows within their windows. torch is imported by the caller's model only: this module
imports no torch at import time.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from beamsearch.core.state import select_state

__all__ = ["CrossCache", "OpenAIWhisperState", "OpenAIWhisperStep", "no_speech_probs"]


class CrossCache:
    """The cross-attention's keys and values, ``{module: [k, A, d]}``, and ``windows`` (int64
    ``[k]``): the window each row belongs to. Rows of one window hold the same keys and values, so
    :func:`~beamsearch.core.state.select_state` gathers them only when the rows' windows change."""

    def __init__(self, tensors: dict[Any, Any], windows: Any) -> None:
        self.tensors, self.windows = tensors, windows


@select_state.register(CrossCache)
def _select_cross(cache: CrossCache, idx: Any) -> CrossCache:
    import torch

    index = torch.as_tensor(idx, device=cache.windows.device)
    windows = cache.windows[index]
    if windows.shape == cache.windows.shape and torch.equal(windows, cache.windows):
        return cache  # the same window in every row: the same keys and values
    return CrossCache({m: t[index] for m, t in cache.tensors.items()}, windows)


class OpenAIWhisperState(NamedTuple):
    """The rows' decoder state.

    Attributes:
        features: ``[k, A, D]`` audio features at the first call; afterwards ``[k, 1, D]`` (only
            their dtype is read: the cross-attention keys are cached).
        cache: ``{module: [k, t, d]}`` the self-attention's key/value projections so far (empty
            before the first call).
        pending: int64 ``[k, P-1]``: the prompt before its last token, fed with it at the first
            call (``[k, 0]`` afterwards).
        cross: the cross-attention's keys and values (empty before the first call) and each
            row's window.
    """

    features: Any
    cache: dict[Any, Any]
    pending: Any
    cross: CrossCache


class OpenAIWhisperStep:
    """``step(state, y_prev [k]) -> (logits [k, V] float32, state)`` over a ``whisper.model.Whisper``.

    Build the first state with :meth:`start`. Each call runs the decoder on the new token only
    (the prompt at the first call), its projections' outputs appended to the state's cache by
    forward hooks that live for the call alone.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self._cache: dict[Any, Any] | None = None
        self._n_text_ctx = int(model.dims.n_text_ctx)

    def start(self, mel_or_features: Any, prompts: Any) -> OpenAIWhisperState:
        """The state of N windows: ``mel_or_features`` ``[N, n_mels, frames]`` (encoded here) or
        ``[N, A, D]`` audio features, and ``prompts`` ``[N, P]`` int64, one prompt per window
        (all of one length: the decoder's positions are absolute)."""
        import torch

        x = mel_or_features
        dims = self.model.dims
        with torch.no_grad():
            if tuple(x.shape[-2:]) != (dims.n_audio_ctx, dims.n_audio_state):
                x = self.model.encoder(x)
        prompts = torch.as_tensor(prompts, dtype=torch.long, device=x.device)
        windows = torch.arange(x.shape[0], device=x.device)
        return OpenAIWhisperState(x, {}, prompts[:, :-1], CrossCache({}, windows))

    def _save(self, module: Any, _inputs: Any, output: Any) -> Any:
        cache = self._cache
        assert cache is not None, "the hooks live for one call"
        if module not in cache or output.shape[1] > self._n_text_ctx:
            cache[module] = output  # the prompt, or the cross-attention's audio
        else:
            import torch

            cache[module] = torch.cat([cache[module], output], dim=1).detach()
        return cache[module]

    def __call__(self, state: OpenAIWhisperState, y_prev: Any) -> tuple[Any, OpenAIWhisperState]:
        import torch
        from whisper.model import MultiHeadAttention

        tokens = torch.cat([state.pending, y_prev.reshape(-1, 1).to(state.pending.device)], dim=1)
        self._cache = {**state.cache, **state.cross.tensors}  # a self-attention entry first: its length is the offset
        hooks = [m.register_forward_hook(self._save) for layer in self.model.decoder.modules()
                 if isinstance(layer, MultiHeadAttention) for m in (layer.key, layer.value)]
        cross = {m for block in self.model.decoder.blocks for m in (block.cross_attn.key, block.cross_attn.value)}
        try:
            with torch.no_grad():
                logits = self.model.decoder(tokens, state.features, kv_cache=self._cache)[:, -1]
        finally:
            for h in hooks:
                h.remove()
        cache, self._cache = self._cache, None
        own = {m: t for m, t in cache.items() if m not in cross}
        audio = state.cross if state.cross.tensors else CrossCache({m: cache[m] for m in cross}, state.cross.windows)
        return logits.float(), OpenAIWhisperState(state.features[:, :1], own, tokens[:, :0], audio)


def no_speech_probs(model: Any, features: Any, prompts: Any, sot_index: int, no_speech: int) -> list[float]:
    """Each window's no-speech probability: the softmax at the ``<|startoftranscript|>`` position
    of the prompt's logits, at ``<|nospeech|>`` (whisper reads it at its first step).

    Args:
        features: ``[N, A, D]`` audio features; prompts: ``[N, P]`` int64.
    """
    import torch

    with torch.no_grad():
        tokens = torch.as_tensor(prompts, dtype=torch.long, device=features.device)
        logits = model.decoder(tokens, features)[:, sot_index].float()
        return logits.softmax(dim=-1)[:, no_speech].tolist()
