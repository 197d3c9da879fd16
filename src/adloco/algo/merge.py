"""Trainer merging and node-slot allocation (multi-instance training).

Every ``merge_frequency`` rounds the engine asks :func:`select_for_merge` for the
trainers with the smallest requested global batches, keeps one of them
(:func:`kept_trainer`), replaces its parameters and outer momentum by the
batch-weighted average of the group's (:func:`merge_weights`,
:func:`average_tensors`) and gives it :func:`merged_batch`. Between rounds
:func:`allocate_slots` hands the pool of node slots to the surviving trainers in
proportion to their global batches, at least one each, moving as few slots as it
can, and :func:`local_batches` splits each trainer's global batch over its slots.
Everything here is deterministic: ties go to the lower trainer id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from adloco.algo.switch import split_evenly


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


MERGE_BATCH_RULES = ("per_node", "max", "sum")


def merged_batch(
    batches: Sequence[int], rule: str = "per_node", slots: Sequence[int] | None = None
) -> int:
    """Requested global batch of the merged trainer; ``batches[0]`` is the kept trainer's.

    ``per_node`` (the default, the reference code's rule): the kept trainer keeps
    its batch per node slot, B_kept / M_kept, over all the group's slots, so its
    global batch grows with its nodes: B_kept · ΣM / M_kept, halves rounded up. The reference
    stores a per-node batch and computes a trainer's demand as nodes × batch
    (``get_batch_demand``); the absorbed trainers' batches are dropped.
    ``slots`` (M of each trainer, in the order of ``batches``) is required.
    ``max`` (ours): the largest of the merged trainers' global batches, spread
    over the merged trainer's slots, so its local batch shrinks and the
    square-root rule lowers its lr.
    ``sum``: the merged trainers' global batches added up, so every slot keeps
    about the local batch it had (the cluster's work per step is unchanged).
    """
    if not batches:
        raise ValueError("merged_batch needs at least one batch size")
    if rule == "per_node":
        if slots is None or len(slots) != len(batches) or any(m < 1 for m in slots):
            raise ValueError(
                f"merge batch rule per_node needs one slot count >= 1 per trainer, got {slots}"
            )
        kept, total = int(batches[0]), sum(int(m) for m in slots)
        return max(1, (2 * kept * total + slots[0]) // (2 * slots[0]))
    if rule == "max":
        return max(int(b) for b in batches)
    if rule == "sum":
        return sum(int(b) for b in batches)
    raise ValueError(f"merge batch rule must be one of {MERGE_BATCH_RULES}, got {rule!r}")


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


def slot_counts(batches: Mapping[int, int], num_slots: int) -> dict[int, int]:
    """Slots per trainer, in proportion to its global batch (D'Hondt), 1 ≤ slots ≤ batch.

    Every trainer starts with one slot; each further slot goes to the trainer
    with the largest batch per slot B_k / M_k that still has more sequences
    than slots (ties: lower id). This is the proportional allocation that
    minimises the largest local batch max_k B_k / M_k. Slots are left idle only
    when every trainer already has one slot per sequence of its batch: no slot
    idles while another trainer has work for it.
    """
    if not batches:
        raise ValueError("allocate_slots needs at least one trainer")
    if len(batches) > num_slots:
        raise ValueError(f"{len(batches)} trainers but only {num_slots} node slots")
    if any(int(b) != b or b < 1 for b in batches.values()):
        raise ValueError(f"global batches must be whole numbers >= 1, got {dict(batches)}")
    counts = dict.fromkeys(sorted(batches), 1)
    for _ in range(num_slots - len(counts)):
        open_ = [t for t in counts if counts[t] < batches[t]]
        if not open_:
            break
        # B_t / M_t compared as B_t · M_u against B_u · M_t: exact in integers.
        best = open_[0]
        for t in open_[1:]:
            if batches[t] * counts[best] > batches[best] * counts[t]:
                best = t
        counts[best] += 1
    return counts


def allocate_slots(
    batches: Mapping[int, int], num_slots: int, previous: Mapping[int, int] | None = None
) -> dict[int, int]:
    """Slot index → trainer id, for the slots that get work (idle slots are left out).

    Counts come from :func:`slot_counts`. A slot stays with its previous trainer
    while that trainer is alive and still below its new count (lowest slot
    indices first), which moves the fewest slots possible; the remaining slots,
    in index order, go to trainers short of their count, lowest id first.
    """
    counts = slot_counts(batches, num_slots)
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
    needy = [t for t in sorted(counts) for _ in range(counts[t] - filled[t])]
    for slot, trainer in zip(free, needy, strict=False):
        allocation[slot] = trainer
    return dict(sorted(allocation.items()))


def local_batches(global_batch: int, slots: Sequence[int]) -> dict[int, int]:
    """A trainer's global batch split over its slots: sizes differ by at most one.

    The larger shares go to the lower slot indices; they add up to exactly
    ``global_batch``, so the trainer's global batch is what the test asked for.
    """
    return dict(zip(sorted(slots), split_evenly(global_batch, len(slots)), strict=True))
