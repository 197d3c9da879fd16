"""One trainer's batch-test statistics for one round (``train.stats_reduce``).

The batch tests need the per-sample gradient variance tr Σ and the squared
gradient norm at the round's start parameters θ_k. Two ways to combine a
trainer's nodes (``train.stats_reduce``):

- ``scalars`` (default): every node turns its own groups into unbiased
  per-node estimates and the nodes sum 7 float64 scalars
  (:class:`~adloco.algo.accumulate.NodeScalars`,
  :func:`~adloco.algo.estimators.estimate_scalars`): no D-sized message;
- ``vector``: the nodes all-reduce S (a float32 D-vector) plus scalars and the
  estimate pools all groups (:class:`~adloco.algo.accumulate.GroupStats`,
  :func:`~adloco.algo.accumulate.combine`, :func:`~adloco.algo.estimators.estimate`).

The engine drives both through :class:`RoundStats` (one per trainer and
round) and charges :func:`stats_payload_bytes` per node. The running sums are
in :mod:`adloco.algo.accumulate`, the estimators in
:mod:`adloco.algo.estimators`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from adloco.algo.accumulate import GradientStatsAccumulator, GroupStats, NodeScalars
from adloco.algo.estimators import VarianceEstimate, estimate, estimate_scalars

__all__ = [
    "FLOAT32_BYTES",
    "FLOAT64_BYTES",
    "STATS_REDUCE",
    "VECTOR_MODE_SCALARS",
    "RoundStats",
    "StatsCollective",
    "stats_payload_bytes",
]

STATS_REDUCE = ("scalars", "vector")
FLOAT32_BYTES, FLOAT64_BYTES = 4, 8
# What TorchCollective.reduce_stats sends beside S in vector mode: the 7 entries
# of GroupStats.to_tensor() and the count of processes that saw groups.
VECTOR_MODE_SCALARS = 8


def stats_payload_bytes(mode: str, num_params: int) -> int:
    """Bytes one node puts into the statistics all-reduce of one round.

    ``scalars``: the 7 float64 numbers of :class:`NodeScalars`; ``vector``: S
    as float32 (4 bytes per parameter) plus 8 float64 scalars.
    """
    if mode == "scalars":
        return NodeScalars.SIZE * FLOAT64_BYTES
    if mode == "vector":
        if num_params < 1:
            raise ValueError(f"num_params must be >= 1, got {num_params}")
        return num_params * FLOAT32_BYTES + VECTOR_MODE_SCALARS * FLOAT64_BYTES
    raise ValueError(f"unknown stats_reduce {mode!r}; expected one of {', '.join(STATS_REDUCE)}")


class StatsCollective(Protocol):
    """What :meth:`RoundStats.reduce` needs of the engine's collective."""

    def reduce_stats(self, acc: GradientStatsAccumulator) -> GroupStats: ...

    def reduce_node_scalars(self, values: torch.Tensor) -> NodeScalars: ...


class RoundStats:
    """One trainer's batch-test statistics for one round, in this process.

    ``mode``: ``train.stats_reduce``. ``like``: the trainer's parameters.
    ``direction``: the reference direction of the augmented inner-product test
    or None — in ``scalars`` mode the trainer's last pseudo-gradient (every
    node holds it after the previous round's all-reduce, so it costs no
    message), in ``vector`` mode the previous round's :meth:`pooled_sum`.

    Per round: :meth:`node` before each node slot this process runs (pass the
    accumulator to the inner loop as its ``stats``), then :meth:`reduce` once
    on every process, including those that ran none of the trainer's slots.
    Memory: one float32 D-vector, reused from node to node in ``scalars`` mode.
    """

    def __init__(
        self,
        mode: str,
        like: Sequence[torch.Tensor],
        direction: Sequence[torch.Tensor] | None = None,
    ) -> None:
        if mode not in STATS_REDUCE:
            raise ValueError(
                f"unknown stats_reduce {mode!r}; expected one of {', '.join(STATS_REDUCE)}"
            )
        self.mode = mode
        self._acc = GradientStatsAccumulator(like, direction)
        self._local: torch.Tensor | None = None
        self.reduced: GroupStats | NodeScalars | None = None

    def node(self) -> GradientStatsAccumulator:
        """The accumulator of the next block (in ``vector`` mode one for all).

        In ``scalars`` mode every block (a node slot's statistics steps,
        :func:`adloco.algo.trust.stats_blocks`) is one term of the scalar
        sums: opening one closes the previous.
        """
        if self.reduced is not None:
            raise RuntimeError("RoundStats.node() after reduce()")
        if self.mode == "scalars":
            self._close_node()
        return self._acc

    def for_steps(
        self, blocks: Sequence[Sequence[int]]
    ) -> Callable[[int], GradientStatsAccumulator | None]:
        """One node slot's accumulator at each of its inner steps (None: the step feeds none).

        ``blocks`` are the slot's statistics blocks (step indices). Call the
        result with the steps in order: a block's first step opens the block.
        """
        first = {b[0] for b in blocks if b}
        member = {h for b in blocks for h in b}
        current: list[GradientStatsAccumulator] = []

        def at(h: int) -> GradientStatsAccumulator | None:
            if h not in member:
                return None
            if h in first or not current:
                current[:] = [self.node()]
            return current[0]

        return at

    def _close_node(self) -> None:
        if self._acc.groups:
            values = self._acc.node_scalars()
            self._local = values if self._local is None else self._local + values
            self._acc.reset()

    def reduce(self, comm: StatsCollective) -> VarianceEstimate | None:
        """The trainer's estimate over every node of every process (None: < 2 groups)."""
        if self.reduced is not None:
            raise RuntimeError("RoundStats.reduce() called twice")
        if self.mode == "vector":
            merged = comm.reduce_stats(self._acc)
            self.reduced = merged
            return estimate(merged)
        self._close_node()
        local = self._local
        if local is None:
            local = torch.zeros(NodeScalars.SIZE, dtype=torch.float64)
        total = comm.reduce_node_scalars(local)
        self.reduced = total
        return estimate_scalars(total)

    @property
    def groups(self) -> int:
        """Groups over all nodes and processes; after :meth:`reduce`."""
        if self.reduced is None:
            raise RuntimeError("RoundStats.groups before reduce()")
        return self.reduced.groups

    def pooled_sum(self) -> list[torch.Tensor]:
        """``vector`` mode, after :meth:`reduce`: the trainer's S over all nodes."""
        if self.mode != "vector":
            raise ValueError(
                "stats_reduce: scalars has no pooled gradient; the reference direction is "
                "the trainer's last pseudo-gradient"
            )
        if self.reduced is None:
            raise RuntimeError("RoundStats.pooled_sum() before reduce()")
        return self._acc.pooled_sum()
