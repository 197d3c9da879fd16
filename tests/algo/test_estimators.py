"""Estimators of tr Σ and ‖∇F‖² (adloco.algo.estimators) against closed forms and in expectation.

``estimate`` (pooled) and ``estimate_scalars`` (per-node sums): edge cases by
hand; unbiasedness against the true tr Σ, ‖∇F‖², E‖ḡ‖² and dᵀΣd of known
distributions, and against the exact per-sample statistics of a tiny model
over random partitions; the variance of the scalar estimator relative to the
pooled one against the Gaussian formulas of docs/algorithms.md.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stats_nodes import DIM, run_round, tiny_population

from adloco.algo.accumulate import GradientStatsAccumulator, GroupStats, NodeScalars
from adloco.algo.estimators import estimate, estimate_scalars
from adloco.algo.exact import exact_estimate, per_sample_grads

pytestmark = pytest.mark.usefixtures("one_thread")


def test_estimate_edge_cases():
    assert estimate(GroupStats(1, 8, 1.0, 1.0)) is None
    assert estimate(GroupStats(0, 0, 0.0, 0.0)) is None
    est = estimate(GroupStats(2, 4, 10.0, 16.0))
    assert est is not None and est.ip_var is None and est.orth_var is None
    # (10 - 16/4) / 1 = 6; ||gbar||^2 = 1; grad estimate 1 - 6/4
    assert (est.trace_cov, est.batch_grad_sqnorm, est.grad_sqnorm) == (6.0, 1.0, -0.5)


def test_estimate_scalars_edge_cases_floor_and_missing_directions():
    # 2 nodes of 1 group each: no degrees of freedom.
    assert estimate_scalars(NodeScalars(2, 2, 8, 0.0, 5.0)) is None
    assert estimate_scalars(NodeScalars()) is None
    # ‖∇F‖²̂ = (10 − 3·6)/12 < 0 keeps its unbiased value; ‖ḡ‖²̂ = tr Σ̂/N + max(‖∇F‖²̂, 0).
    est = estimate_scalars(NodeScalars(3, 6, 12, 18.0, 10.0, 0, 0.0))
    assert est.trace_cov == 6.0
    assert est.grad_sqnorm == pytest.approx((10.0 - 3 * 6.0) / 12)
    assert est.batch_grad_sqnorm == pytest.approx(6.0 / 12)
    est = estimate_scalars(NodeScalars(3, 6, 12, 18.0, 20.0, 0, 0.0))
    assert est.grad_sqnorm == pytest.approx((20.0 - 3 * 6.0) / 12)
    assert est.batch_grad_sqnorm == pytest.approx(6.0 / 12 + (20.0 - 3 * 6.0) / 12)
    # A direction on only some nodes counts as none.
    est = estimate_scalars(NodeScalars(2, 6, 12, 8.0, 30.0, 1, 1.0))
    assert est.ip_var is None and est.orth_var is None
    est = estimate_scalars(NodeScalars(2, 6, 12, 8.0, 30.0, 2, 1.0))
    assert (est.ip_var, est.orth_var) == (0.25, 1.75)


def _draw_groups(rng, repeats, sizes_per_node, mu, mix, noise):
    """Group means g [R, K, D], their sizes [K] and node index [K] of i.i.d. samples μ + A z."""
    sizes = np.array([n for node in sizes_per_node for n in node])
    node_of = np.array([m for m, node in enumerate(sizes_per_node) for _ in node])
    z = noise(rng, (repeats, int(sizes.sum()), len(mu)))
    samples = mu + z @ mix.T
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    g = np.add.reduceat(samples, starts, axis=1) / sizes[None, :, None]
    return g, sizes, node_of


def _vectorised_estimates(g, sizes, node_of, unit):
    """Scalar-mode and pooled estimates of every draw (deviation form, float64)."""
    m, k, n_total = node_of.max() + 1, len(sizes), sizes.sum()
    node_sum = np.zeros((g.shape[0], m, g.shape[2]))
    np.add.at(node_sum, (slice(None), node_of), sizes[None, :, None] * g)
    node_n = np.bincount(node_of, weights=sizes)
    node_mean = node_sum / node_n[None, :, None]
    dev = g - node_mean[:, node_of]
    trace_s = (sizes * (dev**2).sum(2)).sum(1) / (k - m)
    grad_s = ((node_n * (node_mean**2).sum(2)).sum(1) - m * trace_s) / n_total
    a = g @ unit
    a_mean = (node_mean @ unit)[:, node_of]
    ip_s = (sizes * (a - a_mean) ** 2).sum(1) / (k - m)
    gbar = node_sum.sum(1) / n_total
    trace_p = (sizes * ((g - gbar[:, None]) ** 2).sum(2)).sum(1) / (k - 1)
    batch_p = (gbar**2).sum(1)
    return {
        "trace_cov": trace_s,
        "grad_sqnorm": grad_s,
        "batch_grad_sqnorm": trace_s / n_total + np.maximum(grad_s, 0.0),
        "unbiased_batch_grad_sqnorm": trace_s / n_total + grad_s,
        "ip_var": ip_s,
        "pooled_trace_cov": trace_p,
        "pooled_grad_sqnorm": batch_p - trace_p / n_total,
        "pooled_batch_grad_sqnorm": batch_p,
    }


def _centred_exponential(rng, shape):
    return rng.exponential(1.0, shape) - 1.0  # mean 0, variance 1, skewed


def test_scalar_estimates_are_unbiased():
    """Mean over R draws within 4 standard errors of the truth, the tolerance itself tight.

    Samples μ + A z with skewed z (centred exponential): tr Σ = ‖A‖²_F, dᵀΣd = ‖Aᵀd‖².
    Unequal groups and nodes, one node with a single group. The first draws also go
    through RoundStats to tie the vectorised formulas to the code.
    """
    rng = np.random.default_rng(3)
    sizes_per_node = [[1, 2, 3], [4, 4], [2], [1, 1, 1, 1, 2]]
    mu = rng.normal(0.0, 0.5, DIM)
    mix = rng.normal(0.0, 0.6, (DIM, DIM))
    unit = rng.normal(size=DIM)
    unit /= np.linalg.norm(unit)
    repeats = 20000
    g, sizes, node_of = _draw_groups(rng, repeats, sizes_per_node, mu, mix, _centred_exponential)
    draws = _vectorised_estimates(g, sizes, node_of, unit)
    n_total = sizes.sum()
    trace = float((mix**2).sum())
    truth = {
        "trace_cov": trace,
        "grad_sqnorm": float(mu @ mu),
        "unbiased_batch_grad_sqnorm": float(mu @ mu) + trace / n_total,
        "ip_var": float(((mix.T @ unit) ** 2).sum()),
    }
    for r in range(10):
        nodes = [[(g[r, i], sizes[i]) for i in np.flatnonzero(node_of == m)] for m in range(4)]
        _, est = run_round("scalars", nodes, unit * 2.0)
        for key in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "ip_var"):
            assert getattr(est, key) == pytest.approx(draws[key][r], rel=1e-4, abs=1e-6), key
    for key, target in truth.items():
        values = draws[key]
        stderr = values.std(ddof=1) / math.sqrt(repeats)
        # Power: the tolerance must be small against the quantity (for ‖∇F‖²,
        # against the M tr Σ / N it is corrected by): a divisor slip (k − 1
        # instead of k − M degrees of freedom) moves tr Σ̂ by 30%.
        scale = 4 * trace / n_total if key == "grad_sqnorm" else target
        assert 4 * stderr < 0.05 * abs(scale), key
        assert abs(values.mean() - target) < 4 * stderr, (key, values.mean(), target, stderr)


def test_variance_relative_to_the_pooled_estimator_matches_the_gaussian_formula():
    """Gaussian samples, M nodes of k groups of n: the variances derived in docs/algorithms.md.

    Var tr Σ̂: 2 tr Σ² / (K − M) (scalars) vs 2 tr Σ² / (K − 1) (pooled);
    Var ‖∇F‖²̂: 4 μᵀΣμ / N + 2 tr Σ² / N² · c with c = MK/(K − M) vs K/(K − 1).
    The tolerance is 5 standard errors of a sample variance, estimated from the draws.
    """
    rng = np.random.default_rng(4)
    nodes, groups, size = 4, 2, 3
    sizes_per_node = [[size] * groups for _ in range(nodes)]
    mu = rng.normal(0.0, 0.4, DIM)
    mix = rng.normal(0.0, 0.5, (DIM, DIM))
    sigma = mix @ mix.T
    repeats = 40000
    gauss = lambda r, shape: r.standard_normal(shape)  # noqa: E731
    g, sizes, node_of = _draw_groups(rng, repeats, sizes_per_node, mu, mix, gauss)
    draws = _vectorised_estimates(g, sizes, node_of, np.eye(DIM)[0])
    k_all, n_total = nodes * groups, nodes * groups * size
    tr_sq, signal = float(np.trace(sigma @ sigma)), float(4 * mu @ sigma @ mu / n_total)
    expected = {
        "trace_cov": 2 * tr_sq / (k_all - nodes),
        "pooled_trace_cov": 2 * tr_sq / (k_all - 1),
        "grad_sqnorm": signal + 2 * tr_sq / n_total**2 * nodes * k_all / (k_all - nodes),
        "pooled_grad_sqnorm": signal + 2 * tr_sq / n_total**2 * k_all / (k_all - 1),
        "unbiased_batch_grad_sqnorm": signal
        + 2 * tr_sq / n_total**2 * (nodes + (nodes - 1) ** 2 / (k_all - nodes)),
        "pooled_batch_grad_sqnorm": signal + 2 * tr_sq / n_total**2,
    }
    for key, variance in expected.items():
        centred = draws[key] - draws[key].mean()
        measured = float((centred**2).mean())
        kurtosis = float((centred**4).mean()) / measured**2
        rel_se = math.sqrt((kurtosis - 1) / repeats)
        assert 5 * rel_se < 0.1, key
        assert measured == pytest.approx(variance, rel=5 * rel_se), (key, measured, variance)
    # The headline ratio: (K − 1)/(K − M) = 7/4 for tr Σ̂ here.
    ratio = draws["trace_cov"].var() / draws["pooled_trace_cov"].var()
    assert ratio == pytest.approx((k_all - 1) / (k_all - nodes), rel=0.08)


def test_cheap_estimator_is_unbiased_on_a_tiny_model(tiny_model_cfg):
    """Random partitions of a fixed population of 24 sequences into 7 unequal groups.

    For a random partition of all N samples, E[Σ n_i‖g_i‖²] = N‖μ‖² + (k-1)·N·σ²/(N-1)
    with σ² the population variance (divisor N), so E[tr Σ̂] is exactly the exact
    estimator's tr Σ (divisor N-1); the same holds along a fixed direction. The
    Monte-Carlo mean of R splittings must be within 4 standard errors, and that
    tolerance must be under 10% of the value: tighter than the 1/k = 14% bias a
    divisor-k slip would cause.
    """
    model, ids = tiny_population(tiny_model_cfg)
    per_sample = per_sample_grads(model, ids)
    population = torch.cat([g.reshape(g.shape[0], -1) for g in per_sample], dim=1).double()
    num = population.shape[0]
    gen = torch.Generator().manual_seed(1)
    noise = torch.randn(population.shape[1], generator=gen).double()
    direction = population.mean(dim=0) + 0.5 * noise
    exact = exact_estimate([population], direction=[direction])

    sizes = [2, 2, 3, 3, 4, 4, 6]
    assert sum(sizes) == num
    # Every group statistic is a quadratic form in the Gram matrix of the
    # population, so thousands of splittings cost no D-sized work; the first
    # few go through the accumulator too, to tie the two together.
    gram = (population @ population.T).numpy()
    unit = (direction / torch.linalg.vector_norm(direction)).double()
    proj = (population @ unit).numpy()
    repeats, via_accumulator = 3000, 10
    draws = {"trace_cov": [], "grad_sqnorm": [], "ip_var": []}
    rng = np.random.default_rng(1)
    for r in range(repeats):
        perm = rng.permutation(num)
        bounds = np.cumsum([0] + sizes)
        members = [perm[bounds[i] : bounds[i + 1]] for i in range(len(sizes))]
        sum_n_sqnorm = sum(gram[np.ix_(m, m)].sum() / len(m) for m in members)
        group_proj = [proj[m].mean() for m in members]
        stats = GroupStats(
            groups=len(sizes),
            samples=num,
            sum_n_sqnorm=float(sum_n_sqnorm),
            pooled_sum_sqnorm=float(gram.sum()),
            sum_n_proj=float(sum(n * a for n, a in zip(sizes, group_proj, strict=True))),
            sum_n_proj_sq=float(sum(n * a * a for n, a in zip(sizes, group_proj, strict=True))),
        )
        if r < via_accumulator:
            acc = GradientStatsAccumulator([population[0].float()], direction=[direction.float()])
            for m in members:
                acc.add_group([population[torch.from_numpy(m)].mean(dim=0).float()], len(m))
            cheap = acc.finalize()
            for field in ("sum_n_sqnorm", "pooled_sum_sqnorm", "sum_n_proj", "sum_n_proj_sq"):
                assert getattr(cheap, field) == pytest.approx(getattr(stats, field), rel=1e-4)
        est = estimate(stats)
        for key in draws:
            draws[key].append(getattr(est, key))
    for key, values in draws.items():
        values = np.array(values)
        stderr = values.std(ddof=1) / math.sqrt(repeats)
        target = getattr(exact, key)
        # Power check: the tolerance must be tight against the size of the
        # quantity (for ‖∇F‖², against the tr Σ / N term it corrects by).
        scale = exact.trace_cov / num if key == "grad_sqnorm" else target
        assert 4 * stderr < 0.10 * abs(scale), key
        assert abs(values.mean() - target) < 4 * stderr, (key, values.mean(), target, stderr)
