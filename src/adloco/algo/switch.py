"""Switch policies: a requested local batch → the micro-batches of one inner step.

The engine calls :func:`plan_step` for every node before a round, with the
node's requested batch and its device's ``max_batch`` from calibration. Under
the paper's switch mode a batch that fits runs as is; one up to λ · max_batch
is capped at max_batch (no accumulation, more frequent updates); a larger one
is accumulated over ceil(b / max_batch) near-equal micro-batches whose sizes
add up exactly to b, so the effective batch is the requested one. Every
micro-batch is at most max_batch: the authors' code built its loader with the
requested batch and so either ran out of memory or multiplied the batch.
``always_accumulate`` is λ = 1 and ``never_accumulate`` is λ = ∞ (the two
ablations without switch mode).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

POLICIES = ("switch", "always_accumulate", "never_accumulate")


@dataclass(frozen=True)
class StepPlan:
    """How one inner optimizer step of one node is run."""

    requested: int
    micro_batches: tuple[int, ...]
    effective: int
    accum_steps: int
    mode: str  # "plain" | "capped" | "accumulate"

    @property
    def micro_batch(self) -> int:
        """The largest micro-batch (what must fit in memory)."""
        return max(self.micro_batches)


def policy_lambda(policy: str, lam: float = 2.0) -> float:
    """The accumulation threshold factor λ a policy implies."""
    if policy == "switch":
        if not lam >= 1:
            raise ValueError(f"switch_lambda must be >= 1, got {lam}")
        return float(lam)
    if policy == "always_accumulate":
        return 1.0
    if policy == "never_accumulate":
        return math.inf
    raise ValueError(f"unknown switch policy {policy!r}; expected one of {', '.join(POLICIES)}")


def split_evenly(total: int, parts: int) -> tuple[int, ...]:
    """``parts`` sizes that differ by at most one and add up to ``total``, larger first."""
    if parts < 1 or total < parts:
        raise ValueError(f"cannot split {total} into {parts} non-empty parts")
    q, r = divmod(total, parts)
    return (q + 1,) * r + (q,) * (parts - r)


def plan_step(requested: int, max_batch: int, policy: str, lam: float = 2.0) -> StepPlan:
    """Micro-batches, effective batch and mode for a requested local batch."""
    if requested < 1:
        raise ValueError(f"requested batch must be >= 1, got {requested}")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    threshold = policy_lambda(policy, lam)
    if requested <= max_batch:
        return StepPlan(requested, (requested,), requested, 1, "plain")
    if requested <= threshold * max_batch:
        return StepPlan(requested, (max_batch,), max_batch, 1, "capped")
    accum_steps = math.ceil(requested / max_batch)
    micro = split_evenly(requested, accum_steps)
    return StepPlan(requested, micro, requested, accum_steps, "accumulate")


def step_micro_batches(
    plan: StepPlan,
    step_sequences: Sequence[int],
    stats_groups: int | None = None,
    stats_steps: Collection[int] = (0,),
) -> list[tuple[int, ...]]:
    """The forward+backward passes of each optimizer step of one slot in a round.

    A step of the plan's full batch runs the plan's micro-batches; a shorter
    last step (:mod:`adloco.algo.budget`) is split into passes of at most the
    plan's largest micro-batch. With ``stats_groups``, each step of
    ``stats_steps`` is run as max(stats_groups, its passes) groups (at most
    one per sequence), each a separate pass whose gradient feeds the batch test.
    """
    steps = []
    for n in step_sequences:
        if n == plan.effective:
            steps.append(plan.micro_batches)
        else:
            steps.append(split_evenly(n, math.ceil(n / plan.micro_batch)))
    if stats_groups is not None:
        for h in stats_steps:
            if h < len(steps):
                n = sum(steps[h])
                steps[h] = split_evenly(n, min(n, max(stats_groups, len(steps[h]))))
    return steps
