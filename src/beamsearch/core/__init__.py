"""The engine core: the one search loop and what it is made of.

``engine`` (the loop of three named steps around one frozen beam record), ``beam`` (that record
and the trail of tokens), ``select`` (the per-input top-k shared by every selection rule),
``state`` (reordering and joining model states), ``hypothesis`` and ``results`` (the result
types and their one builder), ``penalties`` (length penalties), ``validate`` (argument checks
naming the parameter), ``trace`` (step records and the search picture's data) and ``score``
(teacher-forced scoring). Nothing here is a search mode: modes are in :mod:`beamsearch.modes`.
"""
