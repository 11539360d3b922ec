"""Comparing two searches' results where their floats may round differently.

What the code makes bit for bit identical, so that tests may compare it with ``==``: the same
search run twice on the same backend and shapes, in one process or in two on one machine with the
same settings (determinism); integers (token ids, counts, flags); values copied, masked or
selected, never computed (a processor's kept logits, a trace's record of a result); hand-computed
values that are exactly representable; and, on one backend, a row's floats whatever batch it sits
in, when the model computes each row's logits from that row alone (the toy models of
tests/models.py, the corpus toy model): every operation the search applies to logits works row by
row (log-softmax and softmax along the row, elementwise sums, the length penalty), and numpy and
torch compute a row's reduction from that row alone (checked row against batch for widths 2 to
32,000, 1 to 64 rows, 1 to 16 threads, on AVX-512, AVX2 and portable kernels).

What is not: numpy against torch (their log-softmax kernels sum in different orders, and those
orders depend on the CPU's vector width: 4.4e-16 apart on an AVX2 CPU); different CPUs or thread
counts; and a model with matrix products (the zoo models, Hugging Face models) run on batches of
other sizes or paddings, whose BLAS rounds a row differently by the batch's shape. Those compare
with :func:`assert_same_hypotheses`: tokens and finished flags exactly, floats to the documented
tolerance.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

FLOAT64 = 1e-9  # README "Numerics": numpy and torch give the same logprobs to 1e-9 in float64
# float32: the backends' log-softmax can differ by one unit in the last place (README "Numerics"),
# about 1e-7 per step of logprobs of a few units; 1e-5 covers the tests' outputs of up to 15 steps
FLOAT32 = 1e-5


def assert_same_hypotheses(got: Sequence[Sequence], want: Sequence[Sequence], *, tol: float = FLOAT64) -> None:
    """Two searches' results agree: per input the same hypotheses in the same order.

    Args:
        got, want: per input, a list of ``Hypothesis`` (``BatchResults`` and the like).
        tol: absolute tolerance on ``logprob``, ``score`` and ``token_logprobs`` (where both have
            them); ``tokens`` and ``finished`` must be equal, and -inf only matches -inf.
    """
    assert [[(h.tokens, h.finished) for h in hyps] for hyps in got] == \
        [[(h.tokens, h.finished) for h in hyps] for hyps in want]
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        for field in ("logprob", "score"):
            assert [getattr(h, field) for h in mine] == pytest.approx([getattr(h, field) for h in theirs], abs=tol), \
                (i, field)
        for j, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            steps = (getattr(a, "token_logprobs", None), getattr(b, "token_logprobs", None))
            assert (steps[0] is None) == (steps[1] is None), (i, j, "token_logprobs")
            if steps[0] is not None:
                assert list(steps[0]) == pytest.approx(list(steps[1]), abs=tol), (i, j, "token_logprobs")
