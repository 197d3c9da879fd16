"""The batch test's input rule: blocks, the running estimate, abstention."""

from __future__ import annotations

import math

import pytest
import torch

from adloco.algo import switch, trust
from adloco.algo.batch_tests import next_batch
from adloco.algo.estimators import VarianceEstimate
from adloco.algo.norm_test import NormSettings
from adloco.algo.stats import RoundStats


def est(trace_cov, grad_sqnorm, dof, ip_var=None, orth_var=None) -> VarianceEstimate:
    return VarianceEstimate(
        trace_cov=trace_cov,
        grad_sqnorm=grad_sqnorm,
        batch_grad_sqnorm=grad_sqnorm + trace_cov / 10,
        ip_var=ip_var,
        orth_var=orth_var,
        groups=dof + 1,
        samples=10,
        dof=dof,
    )


def test_blocks_of_a_round():
    assert trust.stats_blocks(10, 1, "first") == [(0,)]
    assert trust.stats_blocks(10, 2, "all") == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert trust.stats_blocks(7, 3, "all") == [(0, 1, 2), (3, 4, 5)]  # complete blocks only
    assert trust.stats_blocks(1, 2, "all") == []  # a round cut to one step has none
    assert trust.stats_blocks(5, 2, "first") == [(0, 1)]


def test_statistics_steps_are_split_into_groups():
    plan = switch.plan_step(4, 8, "switch")
    steps = switch.step_micro_batches(plan, [4, 4, 4], stats_groups=2, stats_steps=[0, 2])
    assert steps == [(2, 2), (4,), (2, 2)]
    one = switch.plan_step(1, 8, "switch")
    assert switch.step_micro_batches(one, [1, 1], 4, [0, 1]) == [(1,), (1,)]


def test_running_estimate_is_a_decayed_dof_weighted_mean():
    a, b = est(10.0, 1.0, 4), est(20.0, -1.0, 12)
    first = trust.smooth(None, a, 0.5)
    assert (first.trace_cov, first.grad_sqnorm, first.weight, first.rounds) == (10.0, 1.0, 4.0, 1)
    second = trust.smooth(first, b, 0.5)
    # Old weight 4 x 0.5 = 2 against 12: (2 x 10 + 12 x 20) / 14.
    assert second.trace_cov == pytest.approx((2 * 10 + 12 * 20) / 14)
    assert second.grad_sqnorm == pytest.approx((2 * 1 - 12 * 1) / 14)
    assert second.weight == 14 and second.rounds == 2
    # No estimate this round: the weight decays, the values stay.
    third = trust.smooth(second, None, 0.5)
    assert third.trace_cov == second.trace_cov and third.weight == 7
    # Decay 0: this round's estimate alone.
    assert trust.smooth(second, a, 0.0) == trust.smooth(None, a, 0.0)
    assert trust.smooth(second, None, 0.0) is None
    assert trust.Smoothed.from_dict(second.as_dict()) == second


@pytest.mark.parametrize("grad_sqnorm", [-0.3, 0.0])
def test_a_negative_or_zero_gradient_estimate_never_raises_the_batch(grad_sqnorm):
    smoothed = trust.smooth(None, est(50.0, grad_sqnorm, 30), 0.0)
    usable, why = trust.usable(smoothed, 0, current_batch=8)
    assert usable is None and why == "gradient norm estimate <= 0"
    new, asked = next_batch("norm", usable, 8, NormSettings(eta=0.8), max_growth=4.0)
    assert (new, asked) == (8, None)


def test_too_few_degrees_of_freedom_abstain():
    smoothed = trust.smooth(None, est(50.0, 1.0, 6), 0.0)
    usable, why = trust.usable(smoothed, 8, current_batch=8)
    assert usable is None and why == "6 degrees of freedom < stats_min_dof 8"
    assert trust.usable(None, 0, 8) == (None, "no estimate")


def test_the_norm_test_reads_the_batch_gradient_at_the_current_batch():
    smoothed = trust.smooth(None, est(48.0, 2.0, 30), 0.0)
    usable, why = trust.usable(smoothed, 16, current_batch=8)
    assert why == "" and usable.batch_grad_sqnorm == 2.0 + 48.0 / 8
    # B = 48 / (0.64 x 8) = 9.375 -> 10.
    new, asked = next_batch("norm", usable, 8, NormSettings(eta=0.8), max_growth=4.0)
    assert asked == pytest.approx(48 / (0.64 * 8)) and new == 10
    assert smoothed.noise_scale == 24.0
    # Never more than B / eta^2 per round, whatever the noise.
    noisy = trust.usable(trust.smooth(None, est(1e6, 1e-9, 30), 0.0), 0, 8)[0]
    assert next_batch("norm", noisy, 8, NormSettings(eta=0.8), max_growth=4.0)[0] == 13


def test_a_merged_trainer_pools_its_parents_running_estimates():
    a = trust.smooth(None, est(10.0, 1.0, 4), 0.0)
    b = trust.smooth(None, est(20.0, 3.0, 12), 0.0)
    merged = trust.pool([a, b], [0.25, 0.75])
    # Weights 0.25 x 4 = 1 and 0.75 x 12 = 9.
    assert merged.trace_cov == pytest.approx((1 * 10 + 9 * 20) / 10)
    assert merged.grad_sqnorm == pytest.approx((1 * 1 + 9 * 3) / 10)
    assert merged.weight == 16
    assert trust.pool([None, b], [0.5, 0.5]) == b
    assert trust.pool([None, None], [0.5, 0.5]) is None


def test_blocks_of_steps_are_terms_of_the_scalar_estimate():
    # Two node slots, four steps each, one group of one sample per step, blocks
    # of two steps: 4 blocks, 8 groups, 4 degrees of freedom. Brute force: each
    # block's within sum of squares, each block's N_b |mean_b|^2.
    gen = torch.Generator().manual_seed(0)
    like = [torch.zeros(3, 2), torch.zeros(5)]
    grads = [
        [[torch.randn(t.shape, generator=gen) + 1.0 for t in like] for _ in range(4)]
        for _ in range(2)
    ]
    rs = RoundStats("scalars", like)
    blocks = trust.stats_blocks(4, 2, "all")
    for node in grads:
        at = rs.for_steps(blocks)
        for h, g in enumerate(node):
            acc = at(h)
            acc.add_group(g, 1)

    class Local:
        def reduce_node_scalars(self, values):
            from adloco.algo.accumulate import NodeScalars

            return NodeScalars.from_tensor(values)

    got = rs.reduce(Local())

    def flat(g):
        return torch.cat([t.reshape(-1) for t in g]).double()

    within = mean_part = 0.0
    for node in grads:
        for b in blocks:
            vs = [flat(node[h]) for h in b]
            m = sum(vs) / len(vs)
            within += sum(float(((v - m) ** 2).sum()) for v in vs)
            mean_part += len(vs) * float((m**2).sum())
    trace = within / 4
    assert got.dof == 4 and got.groups == 8 and got.samples == 8
    assert got.trace_cov == pytest.approx(trace, rel=1e-5)
    # M = 4 blocks: E[N_b |mean_b|^2] = N_b |grad F|^2 + tr, so (sum - M tr) / N.
    assert got.grad_sqnorm == pytest.approx((mean_part - 4 * trace) / 8, rel=1e-5)
    assert math.isfinite(got.batch_grad_sqnorm)
