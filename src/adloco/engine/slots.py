"""How this process runs a trainer's node slots: one after another, or stacked.

The engine hands every slot of a trainer that this process runs to
:meth:`SlotRunner.run` as a :class:`~adloco.engine.stacked.SlotJob` and takes
back one outcome per slot, in slot order. ``train.slot_execution`` picks how:

- ``sequential``: each slot on the worker model (``Worker.run_node``);
- ``vectorized``: the slots whose rounds are the same passes of the same
  sizes (same micro-batches at every step, same statistics blocks) run as
  one stack (:class:`~adloco.engine.stacked.Stack`); a slot that matches no
  other (another local batch or accumulation, a round cut to the budget, a
  trainer's only slot here) runs on the worker as in ``sequential``.

Either way a slot sees the same sequences, learning rates, clipping,
optimizer state and statistics; what the clock charges comes from the plan,
not from how this process ran it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

from adloco.config import RunSettings
from adloco.engine.inner import NonFiniteLoss, Worker
from adloco.engine.stacked import SlotJob, SlotOutcome, Stack

SLOT_EXECUTION = ("sequential", "vectorized")


def stacks(jobs: Sequence[SlotJob]) -> list[list[int]]:
    """The jobs that can run together, as lists of positions, in order of first position."""
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        key = (tuple(tuple(m) for m in job.steps), tuple(map(tuple, job.stats_blocks)))
        groups.setdefault(key, []).append(i)
    return list(groups.values())


class SlotRunner:
    """Runs a trainer's slots ``sequential``-ly on the worker or ``vectorized`` in stacks."""

    def __init__(self, mode: str, worker: Worker, settings: RunSettings):
        if mode not in SLOT_EXECUTION:
            raise ValueError(f"slot_execution must be one of {SLOT_EXECUTION}, got {mode!r}")
        self.mode = mode
        self.worker = worker
        self.stack = Stack(worker, settings) if mode == "vectorized" else None

    def run(
        self,
        theta: Sequence[torch.Tensor],
        jobs: Sequence[SlotJob],
        fetch: Callable[[torch.Tensor], torch.Tensor],
        lrs: Sequence[float],
    ) -> Iterator[SlotOutcome]:
        """Every job's round from ``theta``; outcomes in job order.

        Read an outcome's parameters before taking the next one: a slot run
        on the worker leaves them in the worker's model.
        """
        if self.stack is None:
            for job in jobs:
                yield self._alone(theta, job, fetch, lrs)
            return
        first = {group[0]: group for group in stacks(jobs)}
        done: dict[int, SlotOutcome] = {}
        for i, job in enumerate(jobs):
            if i not in done:
                group = first[i]
                if len(group) == 1:
                    yield self._alone(theta, job, fetch, lrs)
                    continue
                outcomes = self.stack.run(theta, [jobs[g] for g in group], fetch, lrs)
                done.update(zip(group, outcomes, strict=True))
            yield done.pop(i)

    def _alone(self, theta, job: SlotJob, fetch, lrs) -> SlotOutcome:
        try:
            result = self.worker.run_node(
                theta, job.node, job.indices, fetch, job.steps, lrs, job.stats
            )
        except NonFiniteLoss:
            return SlotOutcome(job, None, None)
        return SlotOutcome(job, result, self.worker.params)
