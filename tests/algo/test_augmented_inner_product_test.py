"""The augmented inner-product test (adloco.algo.augmented_inner_product_test): each of ϑ and
ν drives its own part, and the reference code's three bugs do not reappear."""

from __future__ import annotations

import pytest
import torch
from batch_cases import KW, est_of, next_batch

from adloco.algo.accumulate import GradientStatsAccumulator
from adloco.algo.augmented_inner_product_test import augmented_parts
from adloco.algo.batch_tests import requested_global_batch
from adloco.algo.estimators import estimate


def test_vartheta_and_nu_each_drive_their_own_part():
    est = est_of(trace_cov=101.0, bgs=2.0, ip_var=1.0, orth_var=100.0)
    inner, orth = augmented_parts(est, vartheta=0.01, nu=0.3)
    assert inner == pytest.approx(1.0 / (0.01**2 * 2.0))  # 5000
    assert orth == pytest.approx(100.0 / (0.3**2 * 2.0))  # 555.6
    # ϑ changes only the inner-product part, ν only the orthogonal part.
    assert augmented_parts(est, vartheta=0.1, nu=0.3) == (pytest.approx(50.0), orth)
    assert augmented_parts(est, vartheta=0.01, nu=0.6) == (inner, pytest.approx(orth / 4))
    b = requested_global_batch("augmented_inner_product", est, eta=0.8, vartheta=0.01, nu=0.3)
    assert b == pytest.approx(5000.0)
    b = requested_global_batch("augmented_inner_product", est, eta=0.8, vartheta=0.1, nu=0.3)
    assert b == pytest.approx(orth)  # the orthogonal part now dominates
    # The test asks for 5000; the default growth cap allows 400 from 100.
    batch, _ = next_batch("augmented_inner_product", est, 100, **{**KW, "max_growth": 100.0})
    assert batch == 5000
    assert next_batch("augmented_inner_product", est, 100, **KW)[0] == 400


def _gaussian_estimate(group_size: int, groups: int, dim: int, seed: int, mean_scale: float):
    """Estimate from `groups` group means of i.i.d. N(mu, I) samples, mu = mean_scale * e_0."""
    gen = torch.Generator().manual_seed(seed)
    mu = torch.zeros(dim)
    mu[0] = mean_scale
    acc = GradientStatsAccumulator([mu], direction=[mu.clone()])
    for _ in range(groups):
        samples = mu + torch.randn(group_size, dim, generator=gen)
        acc.add_group([samples.mean(dim=0)], group_size)
    return estimate(acc.finalize())


def test_reference_code_bugs_do_not_reappear():
    dim, kw = 200, {"eta": 0.8, "vartheta": 0.5, "nu": 0.5}
    # Bug 3: the orthogonal variance is a trace over D - 1 directions (here 199
    # per sample), not a variance of all entries (about 1).
    est = _gaussian_estimate(group_size=4, groups=400, dim=dim, seed=0, mean_scale=3.0)
    assert est.orth_var == pytest.approx(dim - 1, rel=0.05)
    assert est.ip_var == pytest.approx(1.0, rel=0.25)
    # Bug 2: each part is a batch size, a property of the per-sample noise, so
    # forming the groups from 1 or from 16 samples asks for the same B, while
    # the variance of group means (the reference's ratio) shrinks 16-fold.
    small = _gaussian_estimate(group_size=1, groups=400, dim=dim, seed=1, mean_scale=3.0)
    large = _gaussian_estimate(group_size=16, groups=400, dim=dim, seed=2, mean_scale=3.0)
    b_small = requested_global_batch("augmented_inner_product", small, **kw)
    b_large = requested_global_batch("augmented_inner_product", large, **kw)
    assert b_large == pytest.approx(b_small, rel=0.15)
    # At B the orthogonality condition holds with equality: σ_⊥² / B = ν² ‖ḡ‖².
    inner, orth = augmented_parts(large, vartheta=0.5, nu=0.5)
    assert large.orth_var / orth == pytest.approx(0.5**2 * large.batch_grad_sqnorm)
    assert large.ip_var / inner == pytest.approx(0.5**2 * large.batch_grad_sqnorm)
    # Bug 1: ϑ is used — with the inner part dominating, halving ϑ quadruples B.
    est = est_of(trace_cov=2.0, bgs=1.0, ip_var=1.0, orth_var=1.0)
    b1 = requested_global_batch("augmented_inner_product", est, eta=0.8, vartheta=0.1, nu=0.3)
    b2 = requested_global_batch("augmented_inner_product", est, eta=0.8, vartheta=0.05, nu=0.3)
    assert b2 == pytest.approx(4 * b1)
