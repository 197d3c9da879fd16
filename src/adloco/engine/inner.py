"""The inner loop of one node slot: H optimizer steps from the trainer's θ.

All slots run on one worker model, one after another, so a seed gives the same
bits on every run. A slot's inner optimizer state lives in the slot
(``NodeState.inner_state``) and is swapped into the worker's optimizer without
copying: AdamW updates those very tensors in place, and the state persists
across rounds while the slot stays with its trainer (DiLoCo's inner loop; the
reference code re-created it every round).

A slot's round is a list of optimizer steps, each a list of micro-batch sizes
(forward+backward passes whose gradients accumulate), planned by the engine
(:func:`adloco.algo.switch.step_micro_batches`). The steps of the round's
statistics blocks (:mod:`adloco.algo.trust`; by default the first step, where
every slot sits at the trainer's common point θ) also feed the batch test:
their micro-batches are the test's groups, each group's mean gradient goes to
the block's accumulator (a few passes over D floats), and their
token-weighted sum is the step's gradient, exactly as without statistics.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from adloco.config import RunSettings
from adloco.model.llama import batch_loss


class NonFiniteLoss(RuntimeError):
    """A node produced a NaN or infinite loss or gradient norm."""


@dataclass
class NodeState:
    slot: int
    inner_state: list[dict] | None = None  # per parameter, the inner optimizer's state


@dataclass
class NodeResult:
    tokens: int  # tokens processed (sequences x seq_len)
    loss_sum: float  # summed next-token loss over the round
    loss_tokens: int  # predicted tokens behind loss_sum


def make_optimizer(params: Sequence[torch.Tensor], settings: RunSettings) -> torch.optim.Optimizer:
    """The run's inner optimizer (AdamW, or SGD) over ``params``, with its settings."""
    if settings.inner_optimizer == "adamw":
        return torch.optim.AdamW(
            list(params),
            lr=settings.inner_lr,
            betas=settings.betas,
            weight_decay=settings.weight_decay,
            foreach=True,
        )
    return torch.optim.SGD(list(params), lr=settings.inner_lr, weight_decay=settings.weight_decay)


class Worker:
    """The model every slot's inner steps run on, with its inner optimizer."""

    def __init__(self, model: torch.nn.Module, settings: RunSettings, device: torch.device):
        self.model = model.to(device)
        self.model.train()
        self.device = device
        self.params = list(self.model.parameters())
        self.clip = settings.grad_clip_norm
        self.optimizer = make_optimizer(self.params, settings)
        dtype = settings.autocast_dtype
        self.autocast_dtype = getattr(torch, dtype) if dtype and device.type == "cuda" else None

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    @torch.no_grad()
    def load(self, theta: list[torch.Tensor]) -> None:
        torch._foreach_copy_(self.params, theta)

    def _swap_in(self, node: NodeState) -> None:
        state = defaultdict(dict)
        if node.inner_state is not None:
            for p, s in zip(self.params, node.inner_state, strict=True):
                if s:
                    state[p] = s
        self.optimizer.state = state

    def _swap_out(self, node: NodeState) -> None:
        node.inner_state = [self.optimizer.state.get(p, {}) for p in self.params]
        self.optimizer.state = defaultdict(dict)

    def _backward(self, seqs: torch.Tensor, scale_tokens: int) -> torch.Tensor:
        return micro_batch_pass(self.model, seqs, scale_tokens, self.autocast_dtype)

    def _step_gradient(
        self, seqs: torch.Tensor, micro_batches: tuple[int, ...], stats=None
    ) -> torch.Tensor:
        """The step's mean gradient into .grad, one pass per micro-batch; the summed loss.

        With ``stats`` every pass is a group of the batch test (:func:`step_gradient`).
        """
        return step_gradient(
            self.params,
            micro_batches,
            seqs.size(1) - 1,
            lambda start, size, scale: self._backward(seqs[start : start + size], scale),
            None if stats is None else stats.add_group,
        )

    def run_node(
        self,
        theta: list[torch.Tensor],
        node: NodeState,
        indices: torch.Tensor,
        fetch,
        steps: list[tuple[int, ...]],
        lrs: list[float],
        stats=None,
    ) -> NodeResult:
        """Optimizer steps from ``theta``; the worker's parameters hold the result.

        ``steps[h]`` are the micro-batch sizes of step h (``switch.step_micro_batches``),
        ``indices`` the sequence indices of all steps in order, ``fetch`` turns
        indices into a LongTensor of sequences, ``lrs[h]`` is step h's learning
        rate. ``stats(h)`` is the batch-test accumulator that step h's
        micro-batches feed as groups, or None (``RoundStats.for_steps``).
        """
        if len(lrs) < len(steps) or indices.numel() != sum(sum(m) for m in steps):
            raise ValueError("run_node: steps, learning rates and indices disagree")
        self.load(theta)
        self._swap_in(node)
        loss_total = torch.zeros((), dtype=torch.float64, device=self.device)
        norm_total = torch.zeros((), dtype=torch.float64, device=self.device)
        loss_tokens = 0
        tokens = 0
        start = 0
        try:
            for h, micro_batches in enumerate(steps):
                for group in self.optimizer.param_groups:
                    group["lr"] = lrs[h]
                n = sum(micro_batches)
                seqs = fetch(indices[start : start + n]).to(self.device, non_blocking=True)
                start += n
                loss = self._step_gradient(seqs, micro_batches, None if stats is None else stats(h))
                norm = clip_and_step(self.params, self.optimizer, self.clip)
                if norm is not None:
                    norm_total += norm.double()
                loss_total += loss.double()
                loss_tokens += seqs.size(0) * (seqs.size(1) - 1)
                tokens += seqs.numel()
        finally:
            self._swap_out(node)
        if not (torch.isfinite(loss_total) and torch.isfinite(norm_total)):
            raise NonFiniteLoss(f"slot {node.slot}: non-finite loss or gradient norm")
        return NodeResult(tokens=tokens, loss_sum=float(loss_total), loss_tokens=loss_tokens)


def step_gradient(
    params: list[torch.Tensor],
    micro_batches: tuple[int, ...],
    tokens_per_sequence: int,
    backward: Callable[[int, int, int], torch.Tensor],
    on_group: Callable[[list[torch.Tensor], int], None] | None = None,
) -> torch.Tensor:
    """One optimizer step's mean gradient into ``.grad`` of ``params``; the summed loss.

    ``backward(start, size, scale_tokens)`` runs the pass of sequences
    ``start : start + size`` of the step: forward, backward of its summed loss
    over ``scale_tokens``, and returns that loss (detached). Passes accumulate
    into ``.grad``. With ``on_group`` every pass is a group of the batch test:
    its own mean gradient goes to ``on_group(grads, size)``, and the
    token-weighted sum of the groups' gradients is the step's gradient,
    exactly as without statistics. The worker runs it on its model; a stack of
    slots (:mod:`adloco.engine.stacked`) on parameters with a slot dimension.
    """
    step_tokens = sum(micro_batches) * tokens_per_sequence
    loss = None
    step_grad: list[torch.Tensor] | None = None
    for p in params:
        p.grad = None
    start = 0
    for size in micro_batches:
        group_tokens = size * tokens_per_sequence
        scale = step_tokens if on_group is None else group_tokens
        pass_loss = backward(start, size, scale)
        start += size
        loss = pass_loss if loss is None else loss + pass_loss
        if on_group is None:
            continue
        grads = [p.grad for p in params]
        on_group(grads, size)
        weight = group_tokens / step_tokens
        if step_grad is None:
            step_grad = torch._foreach_mul(grads, weight)
        else:
            torch._foreach_add_(step_grad, grads, alpha=weight)
        for p in params:
            p.grad = None
    if step_grad is not None:
        for p, g in zip(params, step_grad, strict=True):
            p.grad = g
    return loss


def micro_batch_pass(
    model: torch.nn.Module,
    seqs: torch.Tensor,
    scale_tokens: int,
    autocast_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One micro-batch's pass: forward, backward of its summed loss over ``scale_tokens``.

    Under ``torch.autocast`` to ``autocast_dtype`` when it is set. Gradients
    accumulate into ``.grad``; returns the summed loss, detached. The pass of
    :class:`Worker` and of ``adloco calibrate`` (its trials, its step timing).
    """
    autocast = (
        contextlib.nullcontext()
        if autocast_dtype is None
        else torch.autocast(seqs.device.type, dtype=autocast_dtype)
    )
    with autocast:
        loss_sum, _ = batch_loss(model, seqs)
    (loss_sum / scale_tokens).backward()
    return loss_sum.detach()


def clip_and_step(
    params: list[torch.Tensor], optimizer: torch.optim.Optimizer, clip: float | None
) -> torch.Tensor | None:
    """One inner step's update: ``clip_grad_norm_`` (foreach) to ``clip`` when set, then a step.

    Returns the gradient norm before clipping, or None without clipping. The
    update of :class:`Worker` and of ``adloco calibrate`` (its trials, its step timing).
    """
    norm = None
    if clip is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
    optimizer.step()
    return norm
