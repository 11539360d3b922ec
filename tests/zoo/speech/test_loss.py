"""The transducer loss against brute force: every alignment of the labels enumerated on tiny
lattices (T <= 4, U <= 3), RNN-T and TDT, batched with padding; and its gradient finite."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from beamsearch.zoo.speech.loss import transducer_loss  # noqa: E402


def brute_force(token_logp, dur_logp, labels, frames, blank, durations):
    """log P(labels): the log-sum over every path of (t, u) moves, each end as the decoders' rule
    (a move reaching or passing ``frames`` ends the path; it counts if all labels are out)."""
    total = []

    def walk(t, u, logp):
        moves = [(blank, d, k) for k, d in enumerate(durations) if d >= 1] if durations else [(blank, 1, None)]
        if u < len(labels):
            moves += [(labels[u], d, k) for k, d in enumerate(durations)] if durations else [(labels[u], 0, None)]
        for tok, d, k in moves:
            step = token_logp[t, u, tok] + (dur_logp[t, u, k] if k is not None else 0.0)
            nu = u + (tok != blank)
            if t + d >= frames:
                if nu == len(labels):
                    total.append(logp + step)
            else:
                walk(t + d, nu, logp + step)

    walk(0, 0, 0.0)
    return float(np.logaddexp.reduce(total)) if total else -math.inf


def log_softmax(x):
    return x - np.logaddexp.reduce(x, axis=-1, keepdims=True)


@pytest.mark.parametrize("durations", [None, (0, 1, 2), (0, 1, 2, 3, 4), (1, 2)])
@pytest.mark.parametrize("seed", range(4))
def test_loss_equals_brute_force_over_alignments(durations, seed):
    rng = np.random.default_rng(seed)
    b, t_max, u_max, v = 3, 4, 3, 4
    frames = np.array([4, 2, 3])
    lengths = np.array([3, 1, 0]) if seed % 2 else np.array([2, 3, 1])
    targets = rng.integers(1, v, size=(b, u_max))
    tok = log_softmax(rng.normal(size=(b, t_max, u_max + 1, v)) * 2)
    dur = log_softmax(rng.normal(size=(b, t_max, u_max + 1, len(durations)))) if durations else None
    got = transducer_loss(torch.tensor(tok), torch.tensor(targets), torch.tensor(frames), torch.tensor(lengths),
                          blank=0, durations=durations, duration_logp=None if dur is None else torch.tensor(dur))
    for i in range(b):
        want = brute_force(tok[i], None if dur is None else dur[i], list(targets[i, :lengths[i]]), frames[i], 0,
                           durations)
        if want == -math.inf:  # no path (more labels than frames allow): a huge finite loss, not inf
            assert got[i].item() >= 1e29
        else:
            assert got[i].item() == pytest.approx(-want, rel=1e-9, abs=1e-9)


def test_rnnt_on_one_frame_by_hand():
    # T=1, labels [1]: the one path is label 1 then the blank, both at frame 0:
    # log P = log 0.5 + log 0.25 (token_logp[0, 0, 1] and token_logp[0, 1, 0])
    tok = torch.log(torch.tensor([[[[0.3, 0.5, 0.2], [0.25, 0.25, 0.5]]]], dtype=torch.float64))
    got = transducer_loss(tok, torch.tensor([[1]]), torch.tensor([1]), torch.tensor([1]), blank=0)
    assert got.item() == pytest.approx(-(math.log(0.5) + math.log(0.25)))


def test_gradient_is_finite_in_float32_on_a_longer_lattice():
    gen = torch.Generator().manual_seed(0)
    b, t, u, v, d = 2, 30, 12, 6, 5
    logits = torch.randn(b, t, u + 1, v + d, generator=gen, requires_grad=True)
    targets = torch.randint(1, v, (b, u), generator=gen)
    loss = transducer_loss(torch.log_softmax(logits[..., :v], -1), targets, torch.tensor([30, 17]),
                           torch.tensor([12, 5]), blank=0, durations=(0, 1, 2, 3, 4),
                           duration_logp=torch.log_softmax(logits[..., v:], -1))
    loss.sum().backward()
    assert torch.isfinite(loss).all() and torch.isfinite(logits.grad).all()
    assert logits.grad.abs().sum() > 0


def test_durations_without_their_log_probabilities_are_refused():
    tok = torch.zeros(1, 2, 2, 3)
    with pytest.raises(ValueError, match="duration_logp"):
        transducer_loss(tok, torch.tensor([[1]]), torch.tensor([2]), torch.tensor([1]), blank=0, durations=(0, 1))


@pytest.mark.parametrize("durations", [None, [0, 1, 2], [1, 3]])
def test_loss_is_the_decoders_forward_probability(durations):
    """The same paths as the decoders' conventions (tests/oracles/transducer.py's forward algorithm,
    with more labels a frame allowed than there are labels): the training loss and the searches
    score a label sequence alike."""
    from tests.oracles.transducer import TinyTransducer, forward

    model = TinyTransducer.make(3, n=1, frames=4, vocab=4, durations=durations)
    labels = [2, 1, 3]
    lattice = [[model.emission(0, t, labels[:i]) for i in range(4)] for t in range(4)]
    tok = torch.tensor(np.array([[[e[0] for e in row] for row in lattice]]))
    dur = None if durations is None else torch.tensor(np.array([[[e[1] for e in row] for row in lattice]]))
    got = transducer_loss(tok, torch.tensor([labels]), torch.tensor([4]), torch.tensor([3]), blank=0,
                          durations=durations, duration_logp=dur)
    assert got.item() == pytest.approx(-forward(model, 0, 4, labels, m=5), rel=1e-9)
