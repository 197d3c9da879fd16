"""Tests of adloco.variance.reductions: every draw against numpy on the group
gradients themselves, the means against exact expectations, the spread by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adloco.algo.accumulate import GroupStats
from adloco.algo.estimators import estimate
from adloco.variance import compare_reductions, draw_partitions, trace_std_ratio_iid
from adloco.variance.reductions import (
    draw_estimates,
    draw_row,
    scalar_estimate,
    spread_figures,
    spread_ratios,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _reference_draw(x: np.ndarray, index: np.ndarray, n: int, eta: float) -> dict:
    """Both estimators of one draw from the group gradients x[index] (deviation form)."""
    g = x[index]  # [M, k, D]
    nodes, k = index.shape
    node_mean = g.mean(1)
    total_mean = node_mean.mean(0)
    k_all, n_all = nodes * k, nodes * k * n
    trace_p = n * ((g - total_mean) ** 2).sum() / (k_all - 1)
    trace_s = n * ((g - node_mean[:, None]) ** 2).sum() / (k_all - nodes)
    grad_s = (k * n * (node_mean**2).sum() - nodes * trace_s) / n_all
    batch_s = trace_s / n_all + max(grad_s, 0.0)
    batch_p = float(total_mean @ total_mean)
    return {
        "trace_cov_pooled": trace_p,
        "grad_sqnorm_pooled": batch_p - trace_p / n_all,
        "batch_grad_sqnorm_pooled": batch_p,
        "norm_test_batch_pooled": trace_p / (eta**2 * batch_p),
        "trace_cov_scalars": trace_s,
        "grad_sqnorm_scalars": grad_s,
        "batch_grad_sqnorm_scalars": batch_s,
        "norm_test_batch_scalars": trace_s / (eta**2 * batch_s),
    }


def test_compare_reductions_against_brute_force_and_in_expectation():
    """Every draw against numpy on the group gradients themselves; the means over
    draws against the exact expectation over subsets of the pool, which is the
    same for both estimators: tr Σ̂ → n·s² and ‖∇F‖²̂ → ‖x̄‖² − s²/K, with s² the
    pool's variance of group gradients (divisor K − 1)."""
    rng = np.random.default_rng(0)
    pool, dim, n, nodes, k, eta = 24, 5, 3, 3, 2, 0.7
    x = rng.normal(0.4, 1.0, (pool, dim)) * rng.uniform(0.5, 2.0, dim)
    x[:4] += 3.0  # a skewed pool
    draws = 4000
    summary, rows = compare_reductions(
        x @ x.T, group_size=n, nodes=nodes, groups_per_node=k, draws=draws, eta=eta, seed=5
    )
    index = draw_partitions(pool, nodes, k, draws, 5)
    assert index.shape == (draws, nodes, k)
    assert all(len(set(i.reshape(-1))) == nodes * k for i in index[:50])
    for r in range(20):
        reference = _reference_draw(x, index[r], n, eta)
        for key, value in reference.items():
            assert rows[r][key] == pytest.approx(value, rel=1e-9), (r, key)
    s2 = float(((x - x.mean(0)) ** 2).sum() / (pool - 1))
    expected = {"trace_cov": n * s2, "grad_sqnorm": float(x.mean(0) @ x.mean(0)) - s2 / pool}
    for name in ("pooled", "scalars"):
        for quantity, target in expected.items():
            values = np.array([row[f"{quantity}_{name}"] for row in rows])
            stderr = values.std(ddof=1) / math.sqrt(draws)
            assert abs(values.mean() - target) < 4 * stderr, (name, quantity)
            assert summary[name][quantity]["mean"] == pytest.approx(values.mean())
            assert summary[name][quantity]["rel_std"] == pytest.approx(
                values.std(ddof=1) / abs(values.mean())
            )
    ratio = summary["std_ratio"]["trace_cov"]
    assert ratio == pytest.approx(
        summary["scalars"]["trace_cov"]["std"] / summary["pooled"]["trace_cov"]["std"]
    )
    assert ratio > 1.0  # fewer degrees of freedom: 6 - 3 = 3 against 6 - 1 = 5
    assert summary["gaussian_std_ratio_trace_cov"] == pytest.approx(math.sqrt(5 / 3))
    # The i.i.d. prediction from the pool's ζ1 = Var E[h | x], ζ2 = Var h, h = ‖x − y‖²/2.
    pairs = [(i, j) for i in range(pool) for j in range(i + 1, pool)]
    h = np.array([((x[i] - x[j]) ** 2).sum() / 2 for i, j in pairs])
    h1 = np.array(
        [
            np.mean([((x[i] - x[j]) ** 2).sum() / 2 for j in range(pool) if j != i])
            for i in range(pool)
        ]
    )
    zeta1, zeta2 = h1.var(), h.var()
    var_pooled = (2 * 4 * zeta1 + zeta2) / (6 * 5)
    var_scalar = (2 * 0 * zeta1 + zeta2) / (3 * 2 * 1)
    assert summary["iid_std_ratio_trace_cov"] == pytest.approx(
        math.sqrt(var_scalar / var_pooled), rel=1e-9
    )
    # Gaussian groups: ζ2 = 4 ζ1, and the prediction is the Gaussian ratio.
    gauss = np.random.default_rng(1).normal(size=(400, 30))
    assert trace_std_ratio_iid(gauss @ gauss.T, 4, 4) == pytest.approx(math.sqrt(15 / 12), rel=0.03)
    assert (summary["groups"], summary["samples"], summary["draws"]) == (6, 18, draws)


def test_draw_estimates_match_the_deviation_form():
    rng = np.random.default_rng(2)
    pool, dim, n, nodes, k, eta = 10, 4, 2, 2, 3, 0.5
    x = rng.normal(size=(pool, dim))
    estimates = draw_estimates(
        x @ x.T, group_size=n, nodes=nodes, groups_per_node=k, draws=5, seed=11
    )
    index = draw_partitions(pool, nodes, k, 5, 11)
    assert len(estimates) == 5
    for (pooled, scalars), draw in zip(estimates, index, strict=True):
        reference = _reference_draw(x, draw, n, eta)
        assert pooled.trace_cov == pytest.approx(reference["trace_cov_pooled"], rel=1e-12)
        assert pooled.grad_sqnorm == pytest.approx(reference["grad_sqnorm_pooled"], rel=1e-12)
        assert scalars.trace_cov == pytest.approx(reference["trace_cov_scalars"], rel=1e-12)
        assert scalars.grad_sqnorm == pytest.approx(reference["grad_sqnorm_scalars"], rel=1e-12)
        assert (pooled.groups, pooled.samples) == (6, 12)


def test_scalar_estimate_of_one_node_is_the_pooled_one():
    # One node: its own groups are all the groups, so both estimators agree.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 3))  # 4 group means of n = 5 samples
    n = 5
    sum_n_sqnorm = float(n * (x**2).sum())
    pooled_sum = float(n * n * (x.sum(0) ** 2).sum())
    scalars = scalar_estimate([sum_n_sqnorm], [pooled_sum], 4, n)
    pooled = estimate(GroupStats(4, 20, sum_n_sqnorm, pooled_sum))
    trace = n * float(((x - x.mean(0)) ** 2).sum()) / 3
    assert scalars.trace_cov == pytest.approx(trace, rel=1e-12)
    assert pooled.trace_cov == pytest.approx(trace, rel=1e-12)
    assert scalars.grad_sqnorm == pytest.approx(pooled.grad_sqnorm, rel=1e-12)
    assert scalars.grad_sqnorm == pytest.approx(float(x.mean(0) @ x.mean(0)) - trace / 20)


def test_draw_row_names_each_estimators_figures():
    pooled = estimate(GroupStats(4, 8, 40.0, 64.0))
    scalars = estimate(GroupStats(4, 8, 40.0, 0.0))  # ‖ḡ‖² = 0: no norm-test batch
    row = draw_row(7, pooled, scalars, eta=0.5)
    assert row["draw"] == 7
    # tr Σ̂ = (40 − 64/8) / 3, ‖ḡ‖² = 64 / 8², B = tr Σ̂ / (η² ‖ḡ‖²).
    assert row["trace_cov_pooled"] == pytest.approx(32 / 3)
    assert row["batch_grad_sqnorm_pooled"] == pytest.approx(1.0)
    assert row["grad_sqnorm_pooled"] == pytest.approx(1.0 - 32 / 3 / 8)
    assert row["norm_test_batch_pooled"] == pytest.approx(32 / 3 / 0.25)
    assert row["trace_cov_scalars"] == pytest.approx(40 / 3)
    assert math.isnan(row["norm_test_batch_scalars"])
    assert len(row) == 9


def test_spread_figures_by_hand():
    s = spread_figures([1.0, 2.0, 3.0, 4.0, math.nan, math.inf])  # non-finite left out
    assert s["mean"] == 2.5
    assert s["std"] == pytest.approx(math.sqrt(5 / 3))
    assert s["rel_std"] == pytest.approx(math.sqrt(5 / 3) / 2.5)
    assert s["median"] == 2.5
    assert s["iqr"] == pytest.approx(1.5)  # 3.25 − 1.75
    assert s["rel_iqr"] == pytest.approx(0.6)
    centred = spread_figures([-1.0, 0.0, 1.0])
    assert centred["rel_std"] is None and centred["rel_iqr"] is None
    assert centred["std"] == 1.0 and centred["iqr"] == 1.0


def test_spread_ratios_divide_scalars_by_pooled():
    quantities = ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "norm_test_batch")
    spreads = {
        "pooled": {
            q: {"std": s, "iqr": 1.0} for q, s in zip(quantities, (2.0, 4.0, 0.0, 1.0), strict=True)
        },
        "scalars": {q: {"std": 3.0, "iqr": 5.0} for q in quantities},
    }
    assert spread_ratios(spreads, "std") == {
        "trace_cov": 1.5,
        "grad_sqnorm": 0.75,
        "batch_grad_sqnorm": None,
        "norm_test_batch": 3.0,
    }
    assert spread_ratios(spreads, "iqr") == dict.fromkeys(quantities, 5.0)
