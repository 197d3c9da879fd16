"""Equal token budgets: the last round of every run is cut to what is left.

Every run of a comparison ends at ``max_tokens``. A round normally runs H inner
steps on every slot; when that would overshoot, the engine asks
:func:`round_step_sequences` for a shorter round: as many whole steps as fit
and one last step whose sequences are shared over the slots in proportion to
their step batches. The rule is the same for every method, and a run ends at
the budget rounded up to whole sequences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def proportional_split(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` by largest remainder, each ≤ its weight.

    Ties go to the earlier entry. ``total`` must not exceed the sum of weights.
    """
    weight_sum = sum(weights)
    if any(w < 0 for w in weights) or not 0 <= total <= weight_sum:
        raise ValueError(f"cannot split {total} over weights {list(weights)}")
    if total == 0:
        return [0] * len(weights)
    quotas = [total * w / weight_sum for w in weights]
    shares = [math.floor(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - shares[i]), i))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def round_step_sequences(
    step_batches: Mapping[int, int], inner_steps: int, remaining_sequences: int
) -> dict[int, list[int]]:
    """Sequences of each optimizer step of each slot in this round.

    ``step_batches``: slot → sequences of one full step. A full round is
    ``inner_steps`` full steps on every slot. If that exceeds
    ``remaining_sequences`` (> 0), the round has H' = ceil(R / S) steps, where S
    is the cluster's sequences per step, and the last one takes the
    R − (H' − 1) S left, split over the slots in proportion to their batches;
    a slot whose share is 0 runs H' − 1 steps.
    """
    if inner_steps < 1 or remaining_sequences < 1:
        raise ValueError("a round needs at least one inner step and one sequence left")
    per_step = sum(step_batches.values())
    if per_step * inner_steps <= remaining_sequences:
        return {slot: [b] * inner_steps for slot, b in step_batches.items()}
    steps = math.ceil(remaining_sequences / per_step)
    left = remaining_sequences - (steps - 1) * per_step
    slots = sorted(step_batches)
    last = proportional_split(left, [step_batches[s] for s in slots])
    out = {}
    for slot, tail in zip(slots, last, strict=True):
        out[slot] = [step_batches[slot]] * (steps - 1) + ([tail] if tail else [])
    return out
