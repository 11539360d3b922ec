"""The search modes: one module each, over the one engine of :mod:`beamsearch.core`.

``beam`` (``beam_search``, ``greedy_decode``, ``beam_search_each``, ``beam_search_batch``),
``constrained``, ``diverse``, ``stochastic`` and ``exact``.
"""
