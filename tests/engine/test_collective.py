"""adloco.engine.collective.LocalCollective: the single-process collective against hand results."""

from __future__ import annotations

import pytest
import torch

from adloco.algo.accumulate import GradientStatsAccumulator, GroupStats, NodeScalars
from adloco.engine.collective import LocalCollective


def test_one_rank_owns_every_slot_and_writes():
    comm = LocalCollective()
    assert (comm.rank, comm.world_size) == (0, 1)
    assert all(comm.owns(slot) for slot in range(50))
    assert comm.is_writer
    assert comm.barrier() is None


def test_all_reduce_sum_over_one_process_is_the_identity_in_place():
    a = torch.tensor([1.5, -2.0, 3.25])
    b = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    tensors = [a, b]
    comm = LocalCollective()
    assert comm.all_reduce_sum_(tensors) is None
    assert tensors[0] is a and tensors[1] is b
    assert torch.equal(a, torch.tensor([1.5, -2.0, 3.25]))
    assert torch.equal(b, torch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype=torch.float64))


def test_reduce_stats_is_this_process_groups_by_hand():
    # Groups g1 = (1, 2) of 1 sample and g2 = (3, 4) of 3 samples, direction (2, 0):
    #   Σ n‖g‖² = 1·5 + 3·25 = 80; S = (1 + 9, 2 + 12) = (10, 14), ‖S‖² = 296;
    #   projections on the unit direction 1 and 3: Σ n a = 1 + 9 = 10, Σ n a² = 1 + 27 = 28.
    acc = GradientStatsAccumulator([torch.zeros(2)], direction=[torch.tensor([2.0, 0.0])])
    acc.add_group([torch.tensor([1.0, 2.0])], 1)
    acc.add_group([torch.tensor([3.0, 4.0])], 3)
    got = LocalCollective().reduce_stats(acc)
    assert (got.groups, got.samples) == (2, 4)
    # Norms are taken in float32 and squared in float64 (algo.accumulate): ~1e-8 off.
    expected = GroupStats(2, 4, 80.0, 296.0, 10.0, 28.0)
    for field in ("sum_n_sqnorm", "pooled_sum_sqnorm", "sum_n_proj", "sum_n_proj_sq"):
        assert getattr(got, field) == pytest.approx(getattr(expected, field), rel=1e-7), field
    # The pooled sum stays this process's S.
    assert torch.equal(acc.pooled_sum()[0], torch.tensor([10.0, 14.0]))


def test_reduce_node_scalars_reads_back_the_process_sum():
    # Two nodes summed in this process: the result is that sum, field by field.
    one = NodeScalars(1, 3, 6, 2.5, 4.0, 1, 0.75)
    two = NodeScalars(1, 2, 5, 1.0, 3.5, 0, 0.0)
    values = one.to_tensor() + two.to_tensor()
    got = LocalCollective().reduce_node_scalars(values)
    assert got == NodeScalars(2, 5, 11, 3.5, 7.5, 1, 0.75)
    assert got == one + two
