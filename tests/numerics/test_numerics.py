"""How the tests compare floats (tests/approx.py): the shared comparison itself, and the
numpy-against-torch tests run once more on the portable CPU kernels, narrower than this machine's."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from approx import FLOAT32, assert_same_hypotheses
from beamsearch import Hypothesis, TokenLogprobHypothesis

ROOT = pathlib.Path(__file__).resolve().parents[2]

# numpy's and torch's float64 logprob of the same output with torch's AVX2 kernels (the failure of
# issue 19, reproduced here with ATEN_CPU_CAPABILITY=avx2: 4.4e-16 apart, one unit in the last place)
NUMPY_LOGPROB, TORCH_LOGPROB = -2.538447716870484, -2.5384477168704835


def results(logprob=-1.5, score=-1.25, tokens=(1, 2), finished=True, steps=None):
    """Two inputs: the first with two hypotheses (the one varied, then a fixed one), the second none."""
    first = Hypothesis(list(tokens), logprob, score, finished) if steps is None else \
        TokenLogprobHypothesis(list(tokens), logprob, score, finished, list(steps))
    return [[first, Hypothesis([3], -2.0, -2.0, False)], []]


def differs(got, want, **tol):
    with pytest.raises(AssertionError):
        assert_same_hypotheses(got, want, **tol)
    return True


def test_rounding_passes_and_nothing_else_does():
    assert_same_hypotheses(results(), results())
    assert NUMPY_LOGPROB != TORCH_LOGPROB  # what `==` on the two backends' results failed on
    assert_same_hypotheses(results(NUMPY_LOGPROB), results(TORCH_LOGPROB))
    assert_same_hypotheses(results(-1.5 + 9e-10), results())  # within 1e-9
    assert differs(results(-1.5 + 2e-9), results())
    assert differs(results(score=-1.25 - 2e-9), results())
    assert_same_hypotheses(results(-1.5 + 5e-6), results(), tol=FLOAT32)
    assert differs(results(-1.5 + 2e-5), results(), tol=FLOAT32)
    assert_same_hypotheses(results(-np.inf, -np.inf), results(-np.inf, -np.inf))
    assert differs(results(-np.inf, -np.inf), results(-1e300, -1e300))
    # tokens, flags, order and counts exactly
    assert differs(results(tokens=(1, 3)), results())
    assert differs(results(finished=False), results())
    swapped = results()
    swapped[0].reverse()
    assert differs(swapped, results())
    assert differs(results()[:1], results())
    assert differs([results()[0][:1], []], results())
    # each token's logprob too, where both carry them
    assert_same_hypotheses(results(steps=[-0.5, -1.0]), results(steps=[-0.5, -1.0 - 5e-10]))
    assert differs(results(steps=[-0.5, -1.0]), results(steps=[-0.5, -1.0 - 2e-9]))
    assert differs(results(steps=[-0.5, -1.0]), results())


def narrower_kernels() -> dict[str, str]:
    """Environment settings for the portable kernels: torch's without vector instructions
    (``ATEN_CPU_CAPABILITY=default``) and numpy's baseline (every dispatch target it found on this
    CPU disabled), so that the two backends round as they would on another machine."""
    try:
        found = np.show_config(mode="dicts")["SIMD Extensions"]["found"]
    except TypeError:  # numpy < 1.26 cannot say: its own kernels stay, torch's are narrowed all the same
        found = []
    return {"ATEN_CPU_CAPABILITY": "default", "NPY_DISABLE_CPU_FEATURES": " ".join(found)}


# every test that compares numpy against torch results (they must agree to the documented tolerance
# whatever the CPU's vector width), and the torch runs against the plain reference
BACKEND_TESTS = [
    "tests/modes/test_stochastic.py::test_same_seed_same_samples_on_numpy_and_torch",
    "tests/strategies/test_batch.py::test_numpy_and_torch_agree",
    "tests/properties/test_properties.py::test_numpy_and_torch_agree_including_ties",
    "tests/controls/test_controls.py::test_backends_and_dtypes",
    "tests/hf/test_generation_models.py::test_numpy_logits_give_the_same_search_as_torch_logits",
]


@pytest.mark.skipif(os.environ.get("MUTANT_UNDER_TEST") is not None, reason="the same tests run in the suite itself")
def test_numpy_and_torch_agree_on_narrower_cpu_kernels():
    """About 15 s: the tests above in a fresh interpreter on the portable kernels (hypothesis'
    fixed examples), so that an AVX-512 machine, where the backends happen to agree bit for bit on
    them, also fails a comparison that holds only there (as the exact one of issue 19 did)."""
    pytest.importorskip("torch")
    env = dict(os.environ, CI="1", **narrower_kernels())
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *BACKEND_TESTS], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1] and " failed" not in run.stdout.splitlines()[-1]
