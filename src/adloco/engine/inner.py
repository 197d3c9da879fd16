"""The inner loop of one node slot: H optimizer steps from the trainer's θ.

All slots run on one worker model, one after another, so a seed gives the same
bits on every run. A slot's inner optimizer state lives in the slot
(``NodeState.inner_state``) and is swapped into the worker's optimizer without
copying: AdamW updates those very tensors in place, and the state persists
across rounds while the slot stays with its trainer (DiLoCo's inner loop; the
reference code re-created it every round).

On the first step of a round every slot sits at the trainer's common point θ,
so that step's gradient also feeds the batch test: the step's sequences are
processed in a few groups, each group's mean gradient goes to the statistics
accumulator (a few passes over D floats), and their token-weighted sum is the
step's gradient, exactly as without statistics.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from adloco.algo.switch import StepPlan, split_evenly
from adloco.model import batch_loss


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
    extra: dict = field(default_factory=dict)


class Worker:
    """The model every slot's inner steps run on, with its inner optimizer."""

    def __init__(self, model: torch.nn.Module, train_cfg: dict, device: torch.device):
        self.model = model.to(device)
        self.model.train()
        self.device = device
        self.params = list(self.model.parameters())
        self.clip = train_cfg["grad_clip_norm"]
        if train_cfg["inner_optimizer"] == "adamw":
            self.optimizer = torch.optim.AdamW(
                self.params,
                lr=train_cfg["inner_lr"],
                betas=tuple(train_cfg["betas"]),
                weight_decay=train_cfg["weight_decay"],
                foreach=True,
            )
        else:
            self.optimizer = torch.optim.SGD(
                self.params, lr=train_cfg["inner_lr"], weight_decay=train_cfg["weight_decay"]
            )
        dtype = train_cfg.get("autocast_dtype")
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
        with self._autocast():
            loss_sum, _ = batch_loss(self.model, seqs)
        (loss_sum / scale_tokens).backward()
        return loss_sum.detach()

    def _stats_step(
        self, seqs: torch.Tensor, groups: tuple[int, ...], stats, step_tokens: int
    ) -> torch.Tensor:
        """First step of a round: per-group gradients to ``stats``, their weighted sum to .grad."""
        step_grad: list[torch.Tensor] | None = None
        loss = torch.zeros((), device=self.device)
        start = 0
        for size in groups:
            chunk = seqs[start : start + size]
            start += size
            for p in self.params:
                p.grad = None
            group_tokens = chunk.size(0) * (chunk.size(1) - 1)
            loss += self._backward(chunk, group_tokens)
            grads = [p.grad for p in self.params]
            stats.add_group(grads, size)
            weight = group_tokens / step_tokens
            if step_grad is None:
                step_grad = torch._foreach_mul(grads, weight)
            else:
                torch._foreach_add_(step_grad, grads, alpha=weight)
        for p, g in zip(self.params, step_grad, strict=True):
            p.grad = g
        return loss

    def run_node(
        self,
        theta: list[torch.Tensor],
        node: NodeState,
        step_indices: torch.Tensor,
        fetch,
        plan: StepPlan,
        lrs: list[float],
        stats=None,
        stats_groups: int = 1,
    ) -> NodeResult:
        """H inner steps from ``theta``; the worker's parameters hold the result.

        ``step_indices`` is [H, effective batch] of sequence indices, ``fetch``
        turns indices into a LongTensor of sequences.
        """
        self.load(theta)
        self._swap_in(node)
        loss_total = torch.zeros((), dtype=torch.float64, device=self.device)
        norm_total = torch.zeros((), dtype=torch.float64, device=self.device)
        loss_tokens = 0
        tokens = 0
        try:
            for h, lr in enumerate(lrs):
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                seqs = fetch(step_indices[h]).to(self.device, non_blocking=True)
                step_tokens = seqs.size(0) * (seqs.size(1) - 1)
                if h == 0 and stats is not None:
                    n = seqs.size(0)
                    groups = split_evenly(n, min(n, max(stats_groups, plan.accum_steps)))
                    loss = self._stats_step(seqs, groups, stats, step_tokens)
                else:
                    for p in self.params:
                        p.grad = None
                    loss = torch.zeros((), device=self.device)
                    start = 0
                    for size in plan.micro_batches:
                        loss += self._backward(seqs[start : start + size], step_tokens)
                        start += size
                if self.clip is not None:
                    norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip, foreach=True)
                    norm_total += norm.double()
                self.optimizer.step()
                loss_total += loss.double()
                loss_tokens += step_tokens
                tokens += seqs.numel()
        finally:
            self._swap_out(node)
        if not (torch.isfinite(loss_total) and torch.isfinite(norm_total)):
            raise NonFiniteLoss(f"slot {node.slot}: non-finite loss or gradient norm")
        return NodeResult(tokens=tokens, loss_sum=float(loss_total), loss_tokens=loss_tokens)
