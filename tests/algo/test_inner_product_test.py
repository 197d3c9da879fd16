"""The plain inner-product test (adloco.algo.inner_product_test) against hand values and
the augmented test's inner-product part."""

from __future__ import annotations

import pytest
import torch
from batch_cases import next_batch

from adloco.algo.accumulate import GradientStatsAccumulator
from adloco.algo.augmented_inner_product_test import augmented_parts
from adloco.algo.estimators import VarianceEstimate, estimate
from adloco.algo.inner_product_test import InnerProductSettings, InnerProductTest

TEST = InnerProductTest()


def est_of(ip_var=1.0, orth_var=100.0, bgs=2.0) -> VarianceEstimate:
    return VarianceEstimate(
        trace_cov=ip_var + orth_var if ip_var is not None else 101.0,
        grad_sqnorm=bgs - 101.0 / 64,
        batch_grad_sqnorm=bgs,
        ip_var=ip_var,
        orth_var=orth_var,
        groups=8,
        samples=64,
        dof=7,
    )


def ask(est, current, vartheta=0.1, nu=0.3, max_growth=100.0, name="inner_product"):
    return next_batch(name, est, current, max_growth=max_growth, vartheta=vartheta, nu=nu)


def test_hand_values():
    # B = σ_d² / (ϑ² ‖ḡ‖²) = 1 / (0.1² · 2) = 50.
    assert TEST.requested_global_batch(est_of(), InnerProductSettings(0.1)) == pytest.approx(50.0)
    # ϑ = 0.05: four times as much, 200; σ_d² = 3: three times as much, 150.
    assert TEST.requested_global_batch(est_of(), InnerProductSettings(0.05)) == pytest.approx(200)
    assert TEST.requested_global_batch(
        est_of(ip_var=3.0), InnerProductSettings(0.1)
    ) == pytest.approx(150.0)
    # From 16 the test raises to ceil(50) = 50; with max_growth 2 to the cap 32.
    assert ask(est_of(), 16) == (50, pytest.approx(50.0))
    assert ask(est_of(), 16, max_growth=2.0)[0] == 32
    assert ask(est_of(), 64) == (64, pytest.approx(50.0))


def test_equals_the_augmented_inner_part_and_ignores_the_orthogonal_one():
    for ip_var, orth_var, bgs, vartheta in [(1.0, 100.0, 2.0, 0.1), (7.5, 0.2, 0.3, 0.02)]:
        est = est_of(ip_var, orth_var, bgs)
        inner, _ = augmented_parts(est, vartheta=vartheta, nu=0.3)
        asked = TEST.requested_global_batch(est, InnerProductSettings(vartheta))
        assert asked == pytest.approx(inner)
        # ν and σ_⊥² play no part.
        assert ask(est_of(ip_var, 1e6, bgs), 1, vartheta=vartheta, nu=1e-3)[1] == pytest.approx(
            inner
        )


def test_asks_for_a_smaller_batch_than_the_augmented_test_when_orthogonal_part_dominates():
    # Inner part 1 / (0.1² · 2) = 50, orthogonal part 100 / (0.3² · 2) = 555.6:
    # the augmented test asks for ceil(555.6) = 556, the inner-product test for 50.
    est = est_of()
    assert ask(est, 16) == (50, pytest.approx(50.0))
    assert ask(est, 16, name="augmented_inner_product") == (556, pytest.approx(5000 / 9))
    # With the inner part dominating (ϑ = 0.01: 5000) both ask for the same batch.
    assert ask(est, 16, vartheta=0.01) == ask(
        est, 16, vartheta=0.01, name="augmented_inner_product"
    )


def test_needs_the_reference_direction():
    assert TEST.needs_reference and TEST.adaptive
    # No reference direction yet (a trainer's first round): the batch is kept.
    assert ask(est_of(ip_var=None, orth_var=None), 16) == (16, None)
    assert ask(est_of(bgs=1e-13), 16) == (16, None)
    with pytest.raises(ValueError, match="vartheta must be > 0"):
        InnerProductSettings(0.0)


def test_on_gaussian_samples_the_batch_holds_the_condition_with_equality():
    # Samples N(μ, I) with μ = 3 e_0 and d = μ: σ_d² ≈ 1, and at B the
    # inner-product condition σ_d² / B = ϑ² ‖ḡ‖² holds with equality.
    gen = torch.Generator().manual_seed(0)
    mu = torch.zeros(50)
    mu[0] = 3.0
    acc = GradientStatsAccumulator([mu], direction=[mu.clone()])
    for _ in range(400):
        acc.add_group([(mu + torch.randn(4, 50, generator=gen)).mean(dim=0)], 4)
    est = estimate(acc.finalize())
    assert est.ip_var == pytest.approx(1.0, rel=0.25)
    b = TEST.requested_global_batch(est, InnerProductSettings(0.5))
    assert est.ip_var / b == pytest.approx(0.5**2 * est.batch_grad_sqnorm)
    assert b == pytest.approx(1.0 / (0.25 * 9.0), rel=0.3)
