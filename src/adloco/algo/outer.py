"""The outer step of DiLoCo: pseudo-gradient and outer SGD.

At the end of a round the engine has summed each node's pseudo-gradient
θ_k − θ_m, weighted by the node's share of the tokens, and calls
:func:`apply_pseudo_gradient`, which treats that sum as a gradient for
``torch.optim.SGD``: plain SGD (the paper's lr 0.5), Nesterov momentum
(DiLoCo's lr 0.7, momentum 0.9), or LocalSGD's plain averaging (lr 1, no
momentum). :func:`outer_step` is the same step from an already averaged set of
parameters (Δ = θ_k − average, the average from
:func:`adloco.algo.merge.average_tensors`). The outer momentum buffers are read and written through
:func:`momentum_buffers` / :func:`set_momentum_buffers` so that merging can
average them and checkpoints can hold them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def make_outer_optimizer(
    params: Sequence[torch.Tensor], lr: float, momentum: float, nesterov: bool
) -> torch.optim.SGD:
    """SGD on the trainer's global parameters; no weight decay, no dampening."""
    if not lr > 0:
        raise ValueError(f"outer_lr must be > 0, got {lr}")
    if not 0 <= momentum < 1:
        raise ValueError(f"outer_momentum must be in [0, 1), got {momentum}")
    if nesterov and momentum == 0:
        raise ValueError("nesterov outer momentum needs outer_momentum > 0")
    return torch.optim.SGD(list(params), lr=lr, momentum=momentum, nesterov=nesterov)


def _check_shapes(
    params: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor], what: str
) -> None:
    if len(tensors) != len(params):
        raise ValueError(f"{len(params)} params but {len(tensors)} {what}s")
    for p, t in zip(params, tensors, strict=True):
        if t.shape != p.shape:
            raise ValueError(f"{what} of shape {tuple(t.shape)} for a {tuple(p.shape)} param")


def _check_params(optimizer: torch.optim.SGD, params: Sequence[torch.Tensor]) -> None:
    owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if any(id(p) not in owned for p in params):
        raise ValueError("outer_step: params are not the ones the outer optimizer holds")


@torch.no_grad()
def outer_step(
    optimizer: torch.optim.SGD, params: Sequence[torch.Tensor], averaged: Sequence[torch.Tensor]
) -> None:
    """θ ← SGD step with gradient Δ = θ − averaged; params change in place, grads cleared."""
    _check_shapes(params, averaged, "averaged tensor")
    apply_pseudo_gradient(
        optimizer,
        params,
        [
            p.detach() - a.to(device=p.device, dtype=p.dtype)
            for p, a in zip(params, averaged, strict=True)
        ],
    )


@torch.no_grad()
def apply_pseudo_gradient(
    optimizer: torch.optim.SGD, params: Sequence[torch.Tensor], delta: Sequence[torch.Tensor]
) -> None:
    """One outer SGD step with the pseudo-gradient ``delta`` (θ − mean of node parameters)."""
    _check_params(optimizer, params)
    for p, d in zip(params, delta, strict=True):
        p.grad = d
    optimizer.step()
    for p in params:
        p.grad = None


def momentum_buffers(
    optimizer: torch.optim.SGD, params: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """The outer momentum of each param; zeros where SGD has none yet (before its first step)."""
    _check_params(optimizer, params)
    out = []
    for p in params:
        buf = optimizer.state.get(p, {}).get("momentum_buffer")
        out.append(torch.zeros_like(p) if buf is None else buf.detach().clone())
    return out


def set_momentum_buffers(
    optimizer: torch.optim.SGD, params: Sequence[torch.Tensor], buffers: Sequence[torch.Tensor]
) -> None:
    """Install momentum buffers (e.g. the batch-weighted average after a merge)."""
    _check_params(optimizer, params)
    _check_shapes(params, buffers, "momentum buffer")
    for p, buf in zip(params, buffers, strict=True):
        optimizer.state[p]["momentum_buffer"] = (
            buf.detach().to(device=p.device, dtype=p.dtype).clone()
        )
