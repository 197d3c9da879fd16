"""How the round loop talks to other processes: nothing, in a single process.

The engine runs the node slots it owns and then sums partial results over all
processes. In one process it owns every slot and the sums are the identity
(:class:`LocalCollective`); the ``torch.distributed`` backend supplies the same
interface with real collectives, so both paths share every line of the
algorithm.
"""

from __future__ import annotations

import torch

from adloco.algo.accumulate import GradientStatsAccumulator, GroupStats, NodeScalars


class LocalCollective:
    """The single-process case: one rank that owns every slot."""

    rank = 0
    world_size = 1

    def owns(self, slot: int) -> bool:
        return True

    def all_reduce_sum_(self, tensors: list[torch.Tensor]) -> None:
        """Sum ``tensors`` in place over all processes."""

    def reduce_stats(self, acc: GradientStatsAccumulator) -> GroupStats:
        """The trainer's statistics over the groups of every process.

        A distributed implementation sums ``acc``'s pooled gradient in place, so
        that afterwards ``acc.pooled_sum()`` is the trainer's S everywhere.
        """
        return acc.finalize()

    def reduce_node_scalars(self, values: torch.Tensor) -> NodeScalars:
        """``stats_reduce: scalars``: the sum over every process of its nodes' scalars.

        ``values`` is this process's sum of :meth:`NodeScalars.to_tensor` over
        its nodes (7 float64 numbers); a SUM all-reduce adds them up.
        """
        return NodeScalars.from_tensor(values)

    def barrier(self) -> None:
        """Wait for every process."""

    @property
    def is_writer(self) -> bool:
        """Whether this process writes the run's shared outputs."""
        return self.rank == 0
