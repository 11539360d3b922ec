"""A mode's spec (:class:`beamsearch.core.mode.Mode`): it refuses a spec without exactly one
runner or with unknown size keywords, and takes only what it declares (shared controls, its sizes,
its own options), never a refused one."""

from __future__ import annotations

import pytest

from beamsearch.core.mode import Mode


def test_a_mode_needs_one_runner_known_sizes_and_takes_only_what_it_declares():
    run = lambda *a, **k: None  # noqa: E731
    with pytest.raises(ValueError, match=r"mode 'x' needs a plan or a batch runner \(one of them\)"):
        Mode("x", "a mode", run, rows=lambda kw: 1)
    with pytest.raises(ValueError, match=r"mode 'x' needs a plan or a batch runner"):
        Mode("x", "a mode", run, rows=lambda kw: 1, plan=run, batch=run)
    with pytest.raises(ValueError, match=r"mode 'x': sizes must be among .*; got \['beams'\]"):
        Mode("x", "a mode", run, rows=lambda kw: 1, plan=run, sizes=("beam_size", "beams"))
    mode = Mode("x", "a mode", run, rows=lambda kw: 1, plan=run, sizes=("beam_size",),
                refused={"top_k": "no"})
    assert mode.takes("beam_size") and mode.takes("max_steps")
    assert not mode.takes("n_best") and not mode.takes("no_such_option") and not mode.takes("top_k")
    assert mode.option_defaults() == {}
