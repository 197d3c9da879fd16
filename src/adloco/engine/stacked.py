"""Several node slots as one stacked model: one batched pass for all of them.

Under ``train.slot_execution: vectorized`` (:mod:`adloco.engine.slots`) the
slots of a trainer whose rounds are the same passes of the same sizes run as
one stack. Every parameter becomes one tensor with a leading slot dimension
(k × its shape); a pass of b sequences per slot is one call of the worker's
own model under ``torch.func.vmap`` (``functional_call`` with the stack's
parameters), so k slots cost one forward and one backward of k·b sequences
instead of k small ones; and the inner optimizer steps the whole stack with
torch's own foreach AdamW (or SGD) kernels, over a handful of large tensors
instead of k × (parameters) small ones.

What the sequential loop (:meth:`adloco.engine.inner.Worker.run_node`) gives
a slot, the stack gives each of its slots: its own sequences, its own
gradient clipping (the norm of its own gradient), its own AdamW state and
step count (slots that joined the trainer at different times sit in
different runs of the stack, each run with its step count), its own
statistics groups and its own non-finite check. The elementwise maths is the
sequential loop's, kernel for kernel; only reductions (inside the batched
matrix products, a pass's summed loss) may add in another order
(docs/engine.md, "Vectorized slots").
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from adloco.config import RunSettings
from adloco.engine.inner import NodeResult, NodeState, Worker, make_optimizer, step_gradient
from adloco.model.llama import batch_loss

# PyTorch has no vmap rule for the fused CPU attention kernel, so vmap runs it
# once per slot (as the sequential loop does) and says so on every pass.
_NO_BATCH_RULE = "There is a performance drop because we have not yet implemented the batching rule"
# That per-slot fallback runs below autocast, so autocast no longer casts the
# attention's inputs to one dtype: query and key leave the rotary embedding in
# float32, the value projection in bfloat16, and the kernel refuses them (seen
# on CUDA and on CPU autocast). The stack's passes use this attention, which
# makes autocast's cast itself and is SDPA otherwise.
_ONE_DTYPE_SDPA = "adloco_sdpa_autocast_cast"


def _sdpa_autocast_cast(module, query, key, value, *args, **kwargs):
    kind = query.device.type
    if torch.is_autocast_enabled(kind):
        dtype = torch.get_autocast_dtype(kind)
        query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    return sdpa_attention_forward(module, query, key, value, *args, **kwargs)


AttentionInterface.register(_ONE_DTYPE_SDPA, _sdpa_autocast_cast)
# cuDNN's attention, which torch picks first on an H100, returns non-finite
# losses for every slot under vmap (bf16, batch 1 and 8, contiguous inputs or
# not; scripts/gpu-check.sh, docs/gpu-check.md); flash, memory-efficient and
# math attention give the sequential loop's losses to bf16 rounding.
_STACK_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@contextlib.contextmanager
def _attention(model: torch.nn.Module, name: str):
    """``model`` runs its attention as ``name`` inside the block."""
    before = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = before


@dataclass
class SlotJob:
    """One slot's round as the engine hands it over: what ``Worker.run_node`` takes."""

    node: NodeState
    indices: torch.Tensor  # sequence indices of all its steps, in order
    steps: list[tuple[int, ...]]  # micro-batch sizes of each step
    stats: Callable[[int], object] | None = None  # stats(h): step h's accumulator or None
    stats_blocks: list[tuple[int, ...]] = field(default_factory=list)  # steps feeding the test


@dataclass
class SlotOutcome:
    """A slot's result; ``params`` hold its parameters until the next outcome is taken."""

    job: SlotJob
    result: NodeResult | None  # None: a non-finite loss or gradient norm
    params: list[torch.Tensor] | None


class Stack:
    """Runs k slots of one trainer whose rounds are the same passes, stacked."""

    def __init__(self, worker: Worker, settings: RunSettings):
        self.worker = worker
        self.settings = settings
        self.loss_of = _LossOf(worker.model)
        self.names = [f"model.{n}" for n, _ in worker.model.named_parameters()]

    def run(
        self,
        theta: Sequence[torch.Tensor],
        jobs: Sequence[SlotJob],
        fetch: Callable[[torch.Tensor], torch.Tensor],
        lrs: Sequence[float],
    ) -> list[SlotOutcome]:
        """Every job's round from ``theta``, as ``Worker.run_node`` would run it; in job order."""
        steps = jobs[0].steps
        if any(j.steps != steps or j.stats_blocks != jobs[0].stats_blocks for j in jobs):
            raise ValueError("Stack.run: the slots of a stack must run the same passes")
        if not steps or len(lrs) < len(steps):
            raise ValueError("Stack.run: no steps, or fewer learning rates than steps")
        order = sorted(range(len(jobs)), key=lambda i: (_state_key(jobs[i].node.inner_state), i))
        jobs = [jobs[i] for i in order]
        stack = _Stacked(self.worker, self.settings, theta, [j.node.inner_state for j in jobs])
        groups = _Groups(jobs)
        k, device = len(jobs), self.worker.device
        loss_total = torch.zeros(k, dtype=torch.float64, device=device)
        norm_total = torch.zeros(k, dtype=torch.float64, device=device)
        start = 0
        try:
            for h, micro_batches in enumerate(steps):
                n = sum(micro_batches)
                seqs = torch.stack([fetch(j.indices[start : start + n]) for j in jobs])
                seqs = seqs.to(device, non_blocking=True)
                start += n
                loss = step_gradient(
                    stack.params,
                    micro_batches,
                    seqs.size(2) - 1,
                    lambda a, m, scale, seqs=seqs: self._backward(
                        stack.params, seqs[:, a : a + m], scale
                    ),
                    groups.collector(h),
                )
                groups.step_done(h)
                if self.worker.clip is not None:
                    grads = [p.grad for p in stack.params]
                    norm_total += _clip_per_slot(grads, self.worker.clip).double()
                stack.step(lrs[h])
                loss_total += loss.double()
        finally:
            for job, state in zip(jobs, stack.states(), strict=True):
                job.node.inner_state = state
        sequences = sum(sum(m) for m in steps)
        seq_len = seqs.size(2)
        finite = torch.isfinite(loss_total) & torch.isfinite(norm_total)
        outcomes: list[SlotOutcome | None] = [None] * k
        for j, job in enumerate(jobs):
            result = None
            if finite[j]:
                result = NodeResult(
                    seq_len * sequences, float(loss_total[j]), (seq_len - 1) * sequences
                )
            outcomes[order[j]] = SlotOutcome(job, result, [p[j].detach() for p in stack.params])
        return outcomes

    def _backward(self, params: list[torch.Tensor], seqs: torch.Tensor, scale: int) -> torch.Tensor:
        """One pass of every slot (``seqs[j]`` for slot j); the slots' summed losses."""
        with sdpa_kernel(_STACK_BACKENDS):
            losses = self._losses(params, seqs)
            # Slot j's loss depends on slot j's parameters alone: the gradient of
            # the sum is every slot's own gradient.
            (losses / scale).sum().backward()
        return losses.detach()

    def _losses(self, params: list[torch.Tensor], seqs: torch.Tensor) -> torch.Tensor:
        def one(p: list[torch.Tensor], s: torch.Tensor) -> torch.Tensor:
            return functional_call(self.loss_of, dict(zip(self.names, p, strict=True)), (s,))

        with (
            warnings.catch_warnings(),
            self.worker._autocast(),
            _attention(self.worker.model, _ONE_DTYPE_SDPA),
        ):
            warnings.filterwarnings("ignore", message=_NO_BATCH_RULE)
            return vmap(one)(params, seqs)


class _LossOf(torch.nn.Module):
    """``batch_loss`` of the worker's model as a module, so ``functional_call`` can swap θ."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        return batch_loss(self.model, seqs)[0]


def _state_key(state: list[dict] | None) -> tuple:
    """Slots whose optimizer states have equal keys step together (AdamW: equal step counts)."""
    if state is None:
        return ()
    return tuple((s["step"].item() if "step" in s else None, tuple(sorted(s))) for s in state)


def _runs(keys: list[tuple]) -> list[tuple[int, int]]:
    """The [a, b) ranges of equal consecutive keys."""
    runs: list[tuple[int, int]] = []
    for i, key in enumerate(keys):
        if runs and keys[runs[-1][0]] == key:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


class _Stacked:
    """k slots' parameters with a leading slot dimension, and one optimizer for all of them.

    ``states`` are the slots' inner optimizer states, slots of equal step
    counts next to each other: each run of them is a slice of every stacked
    parameter with its own state and step counter in the optimizer, so one
    foreach step updates every slot by the maths the worker applies to it.
    """

    def __init__(self, worker: Worker, settings: RunSettings, theta, states: list):
        k = len(states)
        self.params = [
            torch.empty((k, *w.shape), dtype=w.dtype, device=w.device)
            .copy_(t.detach().expand(k, *w.shape))
            .requires_grad_()
            for w, t in zip(worker.params, theta, strict=True)
        ]
        self.runs = _runs([_state_key(s) for s in states])
        # Leaves sharing the stack's memory: what the optimizer steps in place.
        self.views = [[p[a:b].detach() for p in self.params] for a, b in self.runs]
        self.optimizer = make_optimizer([v for run in self.views for v in run], settings)
        for (a, b), run in zip(self.runs, self.views, strict=True):
            if states[a] is None:
                continue  # fresh slots: the optimizer starts them as it starts the worker's
            for i, view in enumerate(run):
                if states[a][i]:
                    self.optimizer.state[view] = {
                        key: value.clone()
                        if key == "step"
                        else torch.stack([s[i][key] for s in states[a:b]])
                        for key, value in states[a][i].items()
                    }

    def step(self, lr: float) -> None:
        """One optimizer step of every slot on the stacked gradients in ``.grad``."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        for (a, b), run in zip(self.runs, self.views, strict=True):
            for view, p in zip(run, self.params, strict=True):
                view.grad = p.grad[a:b]
        self.optimizer.step()

    def states(self) -> list[list[dict]]:
        """Each slot's optimizer state, per parameter, as the worker leaves it."""
        out = []
        for (a, b), run in zip(self.runs, self.views, strict=True):
            per_param = [self.optimizer.state.get(view, {}) for view in run]
            for j in range(b - a):
                out.append(
                    [
                        {key: v.clone() if key == "step" else v[j].clone() for key, v in s.items()}
                        for s in per_param
                    ]
                )
        return out


def _clip_per_slot(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` on every slot's own gradient; the slots' norms before clipping."""
    k = grads[0].size(0)
    norms = torch.stack(
        [torch.nn.utils.get_total_norm([g[j] for g in grads], foreach=True) for j in range(k)]
    )
    # torch's formula, so a slot is clipped exactly as the worker clips it.
    coef = torch.clamp(max_norm / (norms + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(k, *[1] * (g.dim() - 1)))
    return norms


class _Groups:
    """The statistics groups of a stack's blocks, fed slot by slot when a block ends.

    The sequential loop feeds a slot's whole block before the next slot's (in
    ``scalars`` mode opening a block closes the previous one), so the stack
    keeps a block's group gradients until its last step: s·g stacked
    gradients (k·D floats each) for a block of s steps of g groups.
    """

    def __init__(self, jobs: list[SlotJob]):
        self.jobs = jobs
        blocks = jobs[0].stats_blocks if jobs[0].stats is not None else []
        self.block_of = {h: b for b in blocks for h in b}
        self.groups: dict[int, list[tuple[list[torch.Tensor], int]]] = {}

    def collector(self, h: int) -> Callable[[list[torch.Tensor], int], None] | None:
        """What step h's groups go to (``step_gradient``'s ``on_group``); None: no block."""
        if h not in self.block_of:
            return None
        return lambda grads, size: self.groups.setdefault(h, []).append((grads, size))

    def step_done(self, h: int) -> None:
        """After step h: when it ends a block, every slot's groups of the block to its stats."""
        block = self.block_of.get(h)
        if block is None or h != block[-1]:
            return
        for j, job in enumerate(self.jobs):
            for step in block:
                acc = job.stats(step)
                for grads, size in self.groups.get(step, []):
                    acc.add_group([g[j] for g in grads], size)
        for step in block:
            self.groups.pop(step, None)
