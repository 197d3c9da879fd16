"""Synchronous data parallel (``method: ddp``): one optimizer step on every slot's gradient.

The anchor of the comparison: the quality every DiLoCo-family method trades
for fewer communications. A ddp trainer owns every node slot. At each step
all slots compute the gradient of their sequences at the trainer's θ, the
gradients are all-reduced (the token-weighted mean over every slot's
sequences: the gradient of the global batch), clipped as one vector, and one
optimizer (AdamW, or SGD) steps θ. Its state is the trainer's, replicated on
every process like θ; the engine keeps it where DiLoCo keeps the outer
optimizer. One round is ``inner_steps`` such steps, so evaluations fall as
often as DiLoCo's, and every step is one communication.

On one process the slots of a device run their i-th micro-batches as one
pass of the summed size, as the clock's ``concurrent`` policy charges them
and as their memory shares allow; this changes only the order of floating-
point sums, not the gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# A ddp trainer steps θ with the run's inner optimizer and settings.
from adloco.engine.inner import make_optimizer as make_optimizer


@dataclass
class SlotSteps:
    """One slot's share of a ddp round: its device, micro-batches per step, sequences."""

    slot: int
    device_index: int
    steps: list[tuple[int, ...]]
    sequences: torch.Tensor | None  # [sum of all steps' micro-batches, L]; None: not owned


@dataclass
class RoundResult:
    loss_sum: float
    loss_tokens: int
    failure: str | None = None


def step_passes(slots: Sequence[SlotSteps], h: int) -> list[torch.Tensor]:
    """The forward+backward passes of step ``h`` on this process, as sequence tensors.

    Per device, the j-th micro-batches of its owned slots are one pass.
    """
    starts = {}
    for s in slots:
        starts[s.slot] = sum(sum(m) for m in s.steps[:h])
    passes = []
    devices = dict.fromkeys(s.device_index for s in slots)
    for device in devices:
        mine = [s for s in slots if s.device_index == device and s.sequences is not None]
        mine = [s for s in mine if h < len(s.steps)]
        if not mine:
            continue
        offsets = {s.slot: starts[s.slot] for s in mine}
        for j in range(max(len(s.steps[h]) for s in mine)):
            parts = []
            for s in mine:
                if j < len(s.steps[h]):
                    size = s.steps[h][j]
                    parts.append(s.sequences[offsets[s.slot] : offsets[s.slot] + size])
                    offsets[s.slot] += size
            passes.append(torch.cat(parts))
    return passes


@torch.no_grad()
def _step(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    lr: float,
    clip: float | None,
) -> None:
    """Clip the global gradient to ``clip`` and take one optimizer step on θ."""
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    for p in params:
        p.grad = None


def train_round(
    worker,
    comm,
    params: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    slots: Sequence[SlotSteps],
    lrs: Sequence[float],
    clip: float | None,
    comm_dtype: torch.dtype,
    seq_len_tokens: int,
) -> RoundResult:
    """The round's steps of a ddp trainer; θ (``params``) changes in place.

    ``worker`` computes gradients (its model is loaded with θ before each
    step), ``comm`` all-reduces them. Returns the summed loss over every
    slot's predicted tokens, or the failure that stopped the round (a
    non-finite loss or gradient norm, found before the step is taken; the
    engine rolls back).
    """
    steps = max(len(s.steps) for s in slots)
    if len(lrs) < steps:
        raise ValueError(f"ddp round of {steps} steps but {len(lrs)} learning rates")
    loss_total = 0.0
    loss_tokens = 0
    for h in range(steps):
        # The global step's predicted tokens: every slot's, owned here or not.
        predicted = sum(sum(s.steps[h]) for s in slots if h < len(s.steps)) * (seq_len_tokens - 1)
        worker.load(params)
        for p in worker.params:
            p.grad = None
        loss = torch.zeros((), dtype=torch.float64, device=worker.device)
        for seqs in step_passes(slots, h):
            loss += worker._backward(seqs.to(worker.device, non_blocking=True), predicted).double()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach() for p in worker.params]
        if comm_dtype != torch.float32:
            grads = [g.to(comm_dtype).float() for g in grads]
        scalars = loss.reshape(1)
        comm.all_reduce_sum_([*grads, scalars])
        norm = torch.nn.utils.get_total_norm(grads, foreach=True)
        if not (torch.isfinite(scalars).all() and torch.isfinite(norm)):
            return RoundResult(loss_total, loss_tokens, "inner loss or gradient norm")
        _step(params, grads, optimizer, lrs[h], clip)
        loss_total += float(scalars[0])
        loss_tokens += predicted
    return RoundResult(loss_total, loss_tokens)


def slot_steps(
    plans, indices: dict[int, torch.Tensor], fetch: Callable, owns: Callable[[int], bool]
) -> list[SlotSteps]:
    """Each slot's :class:`SlotSteps` from the engine's plans and its drawn sequence indices."""
    return [
        SlotSteps(
            p.slot.index,
            p.slot.device_index,
            list(p.steps),
            fetch(indices[p.slot.index]) if owns(p.slot.index) and p.steps else None,
        )
        for p in plans
    ]
