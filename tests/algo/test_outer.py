"""Pseudo-gradient and outer optimizer step (adloco.algo.outer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adloco.algo.merge import average_tensors
from adloco.algo.outer import (
    make_outer_optimizer,
    momentum_buffers,
    outer_step,
    set_momentum_buffers,
)


def test_plain_sgd_outer_step_two_rounds():
    theta = np.array([1.0, 2.0, -1.0])
    averages = [np.array([0.5, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])]
    p = torch.tensor(theta, dtype=torch.float64)
    opt = make_outer_optimizer([p], lr=0.5, momentum=0.0, nesterov=False)
    for avg in averages:
        outer_step(opt, [p], [torch.tensor(avg)])
        theta = theta - 0.5 * (theta - avg)
        np.testing.assert_allclose(p.numpy(), theta, rtol=0, atol=1e-15)
        assert p.grad is None


def test_nesterov_outer_step_two_rounds():
    lr, mu = 0.7, 0.9
    theta = np.array([1.0, -3.0])
    averages = [np.array([0.8, -2.0]), np.array([0.5, -1.0])]
    p = torch.tensor(theta, dtype=torch.float64)
    opt = make_outer_optimizer([p], lr=lr, momentum=mu, nesterov=True)
    velocity = np.zeros(2)
    history = []
    for avg in averages:
        outer_step(opt, [p], [torch.tensor(avg)])
        delta = theta - avg
        velocity = mu * velocity + delta
        theta = theta - lr * (delta + mu * velocity)
        np.testing.assert_allclose(p.numpy(), theta, rtol=0, atol=1e-15)
        history.append(p.numpy().copy())
    # Round 1 by hand: Δ = (0.2, -1), v = Δ, θ = (1, -3) - 0.7 * 1.9 * Δ.
    np.testing.assert_allclose(history[0], [0.734, -1.67], atol=1e-12)
    np.testing.assert_allclose(momentum_buffers(opt, [p])[0].numpy(), velocity, atol=1e-15)


def test_momentum_buffers_round_trip():
    p = torch.zeros(3)
    opt = make_outer_optimizer([p], lr=0.7, momentum=0.9, nesterov=True)
    assert torch.equal(momentum_buffers(opt, [p])[0], torch.zeros(3))
    set_momentum_buffers(opt, [p], [torch.tensor([1.0, 2.0, 3.0])])
    outer_step(opt, [p], [torch.zeros(3)])  # Δ = 0: only momentum moves θ
    # v = 0.9 * (1, 2, 3); θ = -0.7 * 0.9 * v
    torch.testing.assert_close(p, -0.7 * 0.9 * 0.9 * torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="nesterov"):
        make_outer_optimizer([p], lr=0.7, momentum=0.0, nesterov=True)
    with pytest.raises(ValueError, match="not the ones"):
        outer_step(opt, [torch.zeros(3)], [torch.zeros(3)])


def _data(seed: int, rows: int):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 4, generator=gen), torch.randn(rows, 3, generator=gen)


def _grad(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()


def test_localsgd_h1_equals_large_batch_sgd():
    """LocalSGD (outer lr 1, no momentum) with H = 1 inner SGD step is plain SGD.

    With one node it is SGD on that node's batch; with several nodes of unequal
    batches and token weights it is SGD on the union batch's mean loss.
    """
    inner_lr = 0.1
    for node_batches in ([8], [3, 5, 8]):
        torch.manual_seed(0)
        reference = torch.nn.Linear(4, 3)
        trainer = torch.nn.Linear(4, 3)
        trainer.load_state_dict(reference.state_dict())
        sgd = torch.optim.SGD(reference.parameters(), lr=inner_lr)
        params = list(trainer.parameters())
        outer = make_outer_optimizer(params, lr=1.0, momentum=0.0, nesterov=False)
        for round_index in range(5):
            batches = [_data(100 * round_index + j, n) for j, n in enumerate(node_batches)]
            # Reference: one SGD step on all samples at once.
            _grad(reference, torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
            sgd.step()
            # LocalSGD round: every node takes one SGD step from θ, then outer step.
            node_params = []
            for x, y in batches:
                node = torch.nn.Linear(4, 3)
                node.load_state_dict(trainer.state_dict())
                _grad(node, x, y)
                torch.optim.SGD(node.parameters(), lr=inner_lr).step()
                node_params.append([t.detach() for t in node.parameters()])
            outer_step(outer, params, average_tensors(node_params, node_batches))
            for a, b in zip(trainer.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
