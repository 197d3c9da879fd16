"""What the round works on: node slots, trainers, a trainer's round, and their sizes.

The types :class:`adloco.engine.loop.RoundLoop` passes between the steps of a
round (allocate, plan, train, test, merge, record) and that
:mod:`adloco.engine.state` saves and restores: a node slot of a
device, a trainer (its θ, outer optimizer, requested global batch and
sampler), what one slot runs in a round and one trainer's result of it. Also
the slots of a cluster, a slot's initial local batch, what a trainer's nodes
put into a round's all-reduces, and the merge of a group of trainers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from adloco.algo import batch_tests, merge, outer, stats, switch, trust
from adloco.config import ClusterConfig, RunSettings
from adloco.engine.sampler import SubsetSampler
from adloco.formats import clock

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}


def sync_payload_bytes(settings: RunSettings, num_params: int) -> tuple[int, ...]:
    """What each node of a trainer puts into the all-reduces of one round.

    The pseudo-gradient at ``pseudo_grad_dtype``, and with a batch test the
    statistics (``stats_reduce``: a few float64 scalars, or a float32 D-vector).
    """
    payloads = [num_params * BYTES_PER_ELEMENT[settings.pseudo_grad_dtype]]
    if batch_tests.get(settings.batch_test).adaptive:
        payloads.append(stats.stats_payload_bytes(settings.stats_reduce, num_params))
    return tuple(payloads)


class TrainingDiverged(RuntimeError):
    """A trainer's round stayed non-finite after every retry."""


@dataclass
class Slot:
    index: int
    device: str  # device name from cluster.devices
    device_index: int  # which physical device of the cluster carries the slot
    max_batch: int


@dataclass
class Trainer:
    id: int
    params: list[torch.Tensor]
    outer_opt: torch.optim.SGD
    global_batch: int  # requested global batch B: sequences per inner step over all its slots
    sampler: SubsetSampler
    tokens: int = 0
    direction: list[torch.Tensor] | None = None  # previous round's pooled statistics gradient
    smoothed: trust.Smoothed | None = None  # the batch test's running estimate
    events: list[dict] = field(default_factory=list)


@dataclass
class SlotPlan:
    """What one slot runs this round."""

    slot: Slot
    plan: switch.StepPlan  # a full inner step of the slot's local batch
    steps: list[tuple[int, ...]]  # micro-batches of each inner step this round
    stats_blocks: list[tuple[int, ...]] = field(default_factory=list)  # steps feeding the test

    @property
    def sequences(self) -> int:
        return sum(sum(m) for m in self.steps)

    def work(self) -> clock.SlotWork:
        return clock.SlotWork(
            self.slot.index, self.slot.device, self.slot.device_index, clock.run_length(self.steps)
        )


@dataclass
class TrainerRound:
    """One trainer's result of a round; :meth:`RoundLoop.record` turns it into a metrics row."""

    trainer: Trainer
    slots: list[SlotPlan]
    lr_scale: float
    lrs: list[float]
    tokens: int = 0
    train_loss: float = math.nan
    val: dict | None = None
    round_stats: stats.RoundStats | None = None  # the statistics of the batch test, reduced
    estimate: stats.VarianceEstimate | None = None
    pseudo_gradient: list[torch.Tensor] | None = None  # kept as a scalars-mode direction
    test: dict | None = None
    sync: clock.TrainerSync | None = None

    def row_fields(self) -> dict:
        """The trainer's fields of its metrics row (:class:`~adloco.formats.metrics.MetricsRow`)."""
        trainer, plans = self.trainer, [p.plan for p in self.slots]
        modes = {p.mode for p in plans}
        steps = max(len(p.steps) for p in self.slots)  # fewer in a round cut to the budget
        val = self.val or {}
        return {
            "trainer": trainer.id,
            "nodes": len(self.slots),
            "requested_batch": sum(p.requested for p in plans),
            "local_batch": max(p.requested for p in plans),
            "effective_batch": sum(p.effective for p in plans),
            "micro_batch": max(p.micro_batch for p in plans),
            "accum_steps": max(p.accum_steps for p in plans),
            "switch_mode": next(m for m in ("accumulate", "capped", "plain") if m in modes),
            "inner_steps": steps,
            "tokens": self.tokens,
            "train_loss": self.train_loss,
            "val_loss": val.get("loss"),
            "val_perplexity": val.get("perplexity"),
            "val_loss_stderr": val.get("loss_stderr"),
            "lr_scale": self.lr_scale,
            "inner_lr": self.lrs[steps - 1],
            "inner_lr_sum": sum(self.lrs[:steps]),
            "stats": self.test,
            "epochs": trainer.sampler.epoch,
            "events": trainer.events,
            "slot_work": [p.work().as_dict() for p in self.slots],
            "sync": self.sync.as_dict(),
        }


def initial_local_batch(settings: RunSettings, max_batches) -> int:
    """A slot's local batch at the start: ``initial_batch``, or the smallest max batch."""
    if settings.initial_batch == "max_batch":
        return min(max_batches)
    return int(settings.initial_batch)


def absorb(kept: Trainer, group: list[Trainer], weights: list[float], momentum: bool) -> None:
    """The merged state of ``group`` into ``kept``: weighted θ (and momentum), data, statistics."""
    with torch.no_grad():
        merged = merge.average_tensors([t.params for t in group], weights)
        torch._foreach_copy_(kept.params, merged)
        if momentum:
            # A trainer that has no momentum yet contributes zeros.
            momenta = [outer.momentum_buffers(t.outer_opt, t.params) for t in group]
            outer.set_momentum_buffers(
                kept.outer_opt, kept.params, merge.average_tensors(momenta, weights)
            )
    subset = torch.unique(torch.cat([t.sampler.subset for t in group]))
    kept.sampler.replace_subset(subset)
    kept.tokens = sum(t.tokens for t in group)
    kept.direction = None  # directions of different trainers do not average meaningfully
    kept.smoothed = trust.pool([t.smoothed for t in group], weights)


def merge_group(
    trainers: list[Trainer], settings: RunSettings, slots: Mapping[int, int]
) -> tuple[Trainer, list[int]]:
    """The trainers with the smallest global batches merged into one (``train.merge_*``).

    ``slots``: trainer id -> the node slots it ran on this round (the
    ``per_node`` rule keeps the kept trainer's batch per slot over the group's
    slots). The kept trainer takes the group's merged state (:func:`absorb`), the
    merged global batch and a merge event; returns it and the ids merged.
    """
    batches = {t.id: t.global_batch for t in trainers}
    ids = merge.select_for_merge(batches, settings.merge_count)
    keep_id = merge.kept_trainer(batches, ids)
    group = [t for t in trainers if t.id in ids]
    weights = merge.merge_weights([t.global_batch for t in group])
    kept = next(t for t in trainers if t.id == keep_id)
    absorb(kept, group, weights, settings.outer_momentum > 0)
    # The kept trainer first: the per_node rule keeps its batch per slot.
    order = [kept] + [t for t in group if t is not kept]
    new_batch = merge.merged_batch(
        [t.global_batch for t in order], settings.merge_batch, [slots[t.id] for t in order]
    )
    kept.events.append(
        {
            "type": "merge",
            "merged": ids,
            "kept": keep_id,
            "weights": weights,
            "batches": [t.global_batch for t in group],
            "slots": [slots[t.id] for t in group],
            "batch": new_batch,
            "rule": settings.merge_batch,
        }
    )
    kept.global_batch = new_batch
    return kept, ids


@dataclass(frozen=True)
class MergeTransfer:
    """What a merge sends: ``messages`` transfers of ``payload_bytes`` to trainer ``kept``."""

    kept: int
    payload_bytes: int
    messages: int


def build_slots(cluster: ClusterConfig, max_batches: Mapping[str, int]) -> list[Slot]:
    """The cluster's node slots: ``nodes_per_device`` per device, in the order of its devices."""
    slots = []
    for device_index, device in enumerate(cluster.per_device()):
        for _ in range(cluster.nodes_per_device):
            slots.append(Slot(len(slots), device.name, device_index, max_batches[device.name]))
    return slots


def copy_inner_state(inner_state: list[dict] | None, device) -> list[dict] | None:
    """A copy of a slot's inner optimizer state on ``device`` (AdamW's step counters stay put)."""
    if inner_state is None:
        return None
    return [
        {k: v.clone() if k == "step" else v.to(device, copy=True) for k, v in s.items()}
        for s in inner_state
    ]


def copy_outer_state(state: dict, device) -> dict:
    """A copy of an outer optimizer's state_dict with its tensors on ``device``."""
    return {
        "state": {
            k: {n: v.to(device, copy=True) if torch.is_tensor(v) else v for n, v in s.items()}
            for k, s in state["state"].items()
        },
        "param_groups": [dict(g) for g in state["param_groups"]],
    }
