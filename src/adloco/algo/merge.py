"""Trainer merging and node-slot allocation (multi-instance training).

Every ``merge_frequency`` rounds the engine asks :func:`select_for_merge` for the
trainers with the smallest requested batches, keeps one of them
(:func:`kept_trainer`), replaces its parameters and outer momentum by the
batch-weighted average of the group's (:func:`merge_weights`,
:func:`average_tensors`) and gives it :func:`merged_batch`. Between rounds
:func:`allocate_slots` hands the pool of node slots to the surviving trainers in
proportion to their demand, at least one each, moving as few slots as it can.
Everything here is deterministic: ties go to the lower trainer id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch


def select_for_merge(batches: Mapping[int, int], count: int) -> list[int]:
    """Ids of the ``count`` trainers with the smallest requested batch, smallest first.

    Ties go to the lower id. Fewer than two trainers: nothing to merge, [].
    ``count`` larger than the number of trainers merges them all.
    """
    if count < 2:
        raise ValueError(f"merge count must be >= 2, got {count}")
    if len(batches) < 2:
        return []
    order = sorted(batches, key=lambda tid: (batches[tid], tid))
    return order[: min(count, len(order))]


def kept_trainer(batches: Mapping[int, int], ids: Sequence[int]) -> int:
    """The trainer of ``ids`` with the largest requested batch (ties: lower id)."""
    if not ids:
        raise ValueError("kept_trainer needs at least one trainer id")
    missing = [tid for tid in ids if tid not in batches]
    if missing:
        raise ValueError(f"unknown trainer ids {missing}")
    return min(ids, key=lambda tid: (-batches[tid], tid))


def merge_weights(batches: Sequence[int]) -> list[float]:
    """b_i / Σ b: the paper's weights, proportional to requested batch sizes."""
    if not batches:
        raise ValueError("merge_weights needs at least one batch size")
    if any(b <= 0 for b in batches):
        raise ValueError(f"batch sizes must be positive, got {list(batches)}")
    total = float(sum(batches))
    return [b / total for b in batches]


def merged_batch(batches: Sequence[int]) -> int:
    """Requested batch of the merged trainer: max(b_i).

    Merging averages models; it does not make the merged model's gradients
    noisier, and the kept trainer is the one with the largest batch, whose
    batch the test has already judged necessary. Taking the largest keeps the
    rule "a requested batch never decreases"; the next batch test may grow it.
    """
    if not batches:
        raise ValueError("merged_batch needs at least one batch size")
    return max(int(b) for b in batches)


def average_tensors(
    tensor_lists: Sequence[Sequence[torch.Tensor]], weights: Sequence[float]
) -> list[torch.Tensor]:
    """Σ_j w_j t_j / Σ_j w_j at each position, in the first list's dtypes.

    Accumulated in at least float32. Used for merged parameters and outer
    momentum.
    """
    if not tensor_lists:
        raise ValueError("average_tensors needs at least one tensor list")
    if len(weights) != len(tensor_lists):
        raise ValueError(f"{len(weights)} weights for {len(tensor_lists)} tensor lists")
    if any(not math.isfinite(w) or w < 0 for w in weights) or not sum(weights) > 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {list(weights)}")
    first = tensor_lists[0]
    for j, tensors in enumerate(tensor_lists):
        if len(tensors) != len(first):
            raise ValueError(f"tensor list {j} has {len(tensors)} tensors, list 0 has {len(first)}")
        for i, (t, ref) in enumerate(zip(tensors, first, strict=True)):
            if t.shape != ref.shape:
                raise ValueError(
                    f"tensor {i} of list {j}: shape {tuple(t.shape)}, expected {tuple(ref.shape)}"
                )
    total = float(sum(weights))
    acc_dtypes = [torch.promote_types(t.dtype, torch.float32) for t in first]
    out = [
        torch.zeros(t.shape, dtype=dt, device=t.device)
        for t, dt in zip(first, acc_dtypes, strict=True)
    ]
    for tensors, w in zip(tensor_lists, weights, strict=True):
        if w == 0:
            continue
        cast = [t.to(dt) for t, dt in zip(tensors, acc_dtypes, strict=True)]
        torch._foreach_add_(out, cast, alpha=w / total)
    return [o.to(t.dtype) for o, t in zip(out, first, strict=True)]


def slot_counts(demands: Mapping[int, float], num_slots: int) -> dict[int, int]:
    """Slots per trainer: proportional to demand by largest remainder, at least 1 each.

    Quotas q_t = num_slots · d_t / Σ d. Each trainer starts at max(1, floor(q_t)).
    Missing slots go to the largest remainders q_t − c_t; if the floor of 1 made
    the total too large, slots are taken back from the trainers furthest above
    their quota (never below 1). Ties favour the lower trainer id.
    """
    if not demands:
        raise ValueError("allocate_slots needs at least one trainer")
    if len(demands) > num_slots:
        raise ValueError(f"{len(demands)} trainers but only {num_slots} node slots")
    if any(not math.isfinite(d) or d < 0 for d in demands.values()):
        raise ValueError(f"demands must be finite and >= 0, got {dict(demands)}")
    ids = sorted(demands)
    total = float(sum(demands.values()))
    if total > 0:
        quota = {t: num_slots * demands[t] / total for t in ids}
    else:
        quota = {t: num_slots / len(ids) for t in ids}
    counts = {t: max(1, math.floor(quota[t])) for t in ids}
    assigned = sum(counts.values())
    while assigned < num_slots:
        t = min(ids, key=lambda t: (-(quota[t] - counts[t]), t))
        counts[t] += 1
        assigned += 1
    while assigned > num_slots:
        t = min((t for t in ids if counts[t] > 1), key=lambda t: (quota[t] - counts[t], -t))
        counts[t] -= 1
        assigned -= 1
    return counts


def allocate_slots(
    demands: Mapping[int, float], num_slots: int, previous: Mapping[int, int] | None = None
) -> dict[int, int]:
    """Slot index (0 .. num_slots − 1) → trainer id.

    Counts come from :func:`slot_counts`. A slot stays with its previous trainer
    while that trainer is alive and still below its new count (lowest slot
    indices first), which moves the fewest slots possible; the remaining slots,
    in index order, go to trainers short of their count, lowest id first.
    """
    counts = slot_counts(demands, num_slots)
    previous = dict(previous or {})
    bad = [s for s in previous if not 0 <= s < num_slots]
    if bad:
        raise ValueError(f"previous allocation names slots {bad} outside 0..{num_slots - 1}")
    allocation: dict[int, int] = {}
    filled = dict.fromkeys(counts, 0)
    free: list[int] = []
    for slot in range(num_slots):
        owner = previous.get(slot)
        if owner in counts and filled[owner] < counts[owner]:
            allocation[slot] = owner
            filled[owner] += 1
        else:
            free.append(slot)
    needy = iter([t for t in sorted(counts) for _ in range(counts[t] - filled[t])])
    for slot in free:
        allocation[slot] = next(needy)
    return dict(sorted(allocation.items()))
