"""The scalar-vs-pooled comparison: how much noisier ``stats_reduce: scalars`` is.

Over many random draws of ``nodes × groups_per_node`` group gradients dealt to
the nodes, both estimators of :mod:`adloco.algo.stats` on the same groups: the
pooled one (``stats_reduce: vector``) sees every group, the scalar one each
node's own. Everything comes from the groups' Gram matrix, so the gradients
need not be kept. Formulas: ``docs/variance.md`` and ``docs/algorithms.md``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from adloco.algo.accumulate import GroupStats, NodeScalars
from adloco.algo.batch_tests import requested_global_batch
from adloco.algo.estimators import estimate, estimate_scalars

# Random draws of groups from the batch gradients.
SPREAD_DRAWS = 4000
DRAWS_SAMPLING = (
    "each draw: nodes x groups_per_node distinct batch gradients of the num_batches, drawn "
    "uniformly without replacement, groups_per_node consecutive ones to each node; draws "
    "independent of each other (numpy default_rng(seed + 1))"
)
SPREAD_QUANTITIES = ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "norm_test_batch")
ESTIMATORS = ("pooled", "scalars")


def draw_partitions(
    num_groups: int, nodes: int, groups_per_node: int, draws: int, seed: int
) -> Any:
    """Indices [draws, nodes, groups_per_node]: per draw, distinct groups dealt to nodes."""
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((draws, num_groups)), axis=1)
    return order[:, : nodes * groups_per_node].reshape(draws, nodes, groups_per_node)


def draw_estimates(
    gram, *, group_size: int, nodes: int, groups_per_node: int, draws: int, seed: int
) -> list[tuple[Any, Any]]:
    """(pooled estimate, scalar estimate) of every draw of :func:`draw_partitions`.

    Group i holds ``group_size`` = n samples of mean g_i; a node's statistics
    are Σ n‖g_i‖² and ‖S_m‖² = n² ‖Σ g_i‖² over its groups, read off ``gram``.
    """
    gram = np.asarray(gram, dtype=np.float64)
    k_all, n = nodes * groups_per_node, group_size
    index = draw_partitions(gram.shape[0], nodes, groups_per_node, draws, seed)
    diag = np.diag(gram)[index]  # [R, M, k]: ‖g_i‖²
    blocks = gram[index[:, :, :, None], index[:, :, None, :]]  # [R, M, k, k]
    node_sum_n_sqnorm = n * diag.sum(2)  # Σ n‖g_i‖² per node
    node_pooled = n * n * blocks.sum((2, 3))  # ‖S_m‖² per node
    flat = index.reshape(draws, k_all)
    pooled = n * n * gram[flat[:, :, None], flat[:, None, :]].sum((1, 2))  # ‖S‖²
    out = []
    for r in range(draws):
        sum_n_sqnorm = float(node_sum_n_sqnorm[r].sum())
        vector = estimate(GroupStats(k_all, k_all * n, sum_n_sqnorm, float(pooled[r])))
        scalar = scalar_estimate(node_sum_n_sqnorm[r], node_pooled[r], groups_per_node, n)
        out.append((vector, scalar))
    return out


def scalar_estimate(node_sum_n_sqnorm, node_pooled, groups_per_node: int, group_size: int):
    """The ``stats_reduce: scalars`` estimate from each node's Σ n‖g_i‖² and ‖S_m‖²."""
    total = NodeScalars()
    for sum_n_sqnorm, pooled in zip(node_sum_n_sqnorm, node_pooled, strict=True):
        node = GroupStats(
            groups_per_node, groups_per_node * group_size, float(sum_n_sqnorm), float(pooled)
        )
        total = total + NodeScalars.of_node(node)
    return estimate_scalars(total)


def draw_row(draw: int, pooled, scalars, eta: float) -> dict[str, Any]:
    """One row of draws.csv: each estimator's figures and norm-test batch (NaN: none)."""
    row: dict[str, Any] = {"draw": draw}
    for name, est in zip(ESTIMATORS, (pooled, scalars), strict=True):
        batch = requested_global_batch("norm", est, eta=eta, vartheta=1.0, nu=1.0)
        row[f"trace_cov_{name}"] = est.trace_cov
        row[f"grad_sqnorm_{name}"] = est.grad_sqnorm
        row[f"batch_grad_sqnorm_{name}"] = est.batch_grad_sqnorm
        row[f"norm_test_batch_{name}"] = math.nan if batch is None else batch
    return row


def spread_figures(values) -> dict[str, float | None]:
    """Mean, std (ddof 1), median, IQR and the relative ones of the finite ``values``."""
    values = np.asarray(values)
    values = values[np.isfinite(values)]
    mean, std = float(values.mean()), float(values.std(ddof=1))
    q1, median, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
    return {
        "mean": mean,
        "std": std,
        "rel_std": std / abs(mean) if mean != 0 else None,
        "median": median,
        "iqr": q3 - q1,
        "rel_iqr": (q3 - q1) / abs(median) if median != 0 else None,
    }


def spread(rows: list[dict[str, Any]], name: str) -> dict[str, dict[str, float | None]]:
    """:func:`spread_figures` of each quantity of estimator ``name`` over the draws."""
    return {
        quantity: spread_figures(np.array([row[f"{quantity}_{name}"] for row in rows]))
        for quantity in SPREAD_QUANTITIES
    }


def spread_ratios(
    spreads: dict[str, dict[str, dict[str, Any]]], figure: str
) -> dict[str, float | None]:
    """``figure`` (std or iqr) of the scalar estimate over the pooled one, per quantity."""
    return {
        q: spreads["scalars"][q][figure] / spreads["pooled"][q][figure]
        if spreads["pooled"][q][figure] > 0
        else None
        for q in SPREAD_QUANTITIES
    }


def compare_reductions(
    gram,
    *,
    group_size: int,
    nodes: int,
    groups_per_node: int,
    draws: int,
    eta: float,
    seed: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scalar-mode and pooled estimates on the same random draws of groups.

    ``gram`` [K, K]: inner products ⟨g_i, g_j⟩ of K group mean gradients, each
    of ``group_size`` samples. Each draw deals ``nodes × groups_per_node`` of
    the K to the nodes (:func:`draw_partitions`); the pooled estimate
    (:func:`adloco.algo.estimators.estimate`, ``stats_reduce: vector``) sees all of
    them, the scalar one (:func:`adloco.algo.estimators.estimate_scalars`) each
    node's own. Returns the summary (mean, std and relative std of tr Σ̂,
    ‖∇F‖²̂, ‖ḡ‖²̂ and the norm-test batch for each, and std ratios) and one row
    per draw.
    """
    estimates = draw_estimates(
        gram,
        group_size=group_size,
        nodes=nodes,
        groups_per_node=groups_per_node,
        draws=draws,
        seed=seed,
    )
    rows = [draw_row(r, vector, scalar, eta) for r, (vector, scalar) in enumerate(estimates)]
    floored = sum(scalar.grad_sqnorm < 0 for _, scalar in estimates)  # ‖ḡ‖²̂ held at tr Σ̂ / N
    spreads = {name: spread(rows, name) for name in ESTIMATORS}
    k_all = nodes * groups_per_node
    summary = {
        "nodes": nodes,
        "groups_per_node": groups_per_node,
        "group_size": group_size,
        "groups": k_all,
        "samples": k_all * group_size,
        "draws": draws,
        "sampling": DRAWS_SAMPLING,
        "pooled": spreads["pooled"],
        "scalars": spreads["scalars"],
        # std(scalars) / std(pooled): how much noisier the default estimate is.
        "std_ratio": spread_ratios(spreads, "std"),
        # iqr(scalars) / iqr(pooled): the same, robust to the ratio's long tail.
        "iqr_ratio": spread_ratios(spreads, "iqr"),
        # sqrt((K − 1)/(K − M)): the std ratio of tr Σ̂ for Gaussian gradients.
        "gaussian_std_ratio_trace_cov": math.sqrt((k_all - 1) / (k_all - nodes)),
        # The std ratio of tr Σ̂ for fresh i.i.d. groups distributed as the pool
        # (U-statistic variances with the pool's ζ1, ζ2; docs/algorithms.md).
        "iid_std_ratio_trace_cov": trace_std_ratio_iid(gram, nodes, groups_per_node),
        # Draws whose scalar ‖∇F‖²̂ < 0, where ‖ḡ‖²̂ is held at tr Σ̂ / N.
        "scalar_grad_sqnorm_negative": int(floored),
    }
    return summary, rows


def trace_std_ratio_iid(gram, nodes: int, groups_per_node: int) -> float | None:
    """std(scalar tr Σ̂) / std(pooled tr Σ̂) for i.i.d. groups distributed as the pool.

    Both estimators are n times U-statistics of the kernel h(x, y) = ‖x − y‖²/2
    over the groups (pooled: one of K = M·k groups; scalars: the mean of M of k
    groups each), so Var = 2 (2 (K − 2) ζ1 + ζ2) / (K (K − 1)) and
    Var = 2 (2 (k − 2) ζ1 + ζ2) / (M k (k − 1)), with ζ1 = Var E[h(x, y) | x]
    and ζ2 = Var h(x, y), here the plug-in values over the pool's pairs.
    """
    gram = np.asarray(gram, dtype=np.float64)
    diag = np.diag(gram)
    half_sq = (diag[:, None] + diag[None, :] - 2 * gram) / 2
    pool = gram.shape[0]
    zeta2 = float(half_sq[np.triu_indices(pool, 1)].var())
    zeta1 = float((half_sq.sum(1) / (pool - 1)).var())
    k_all, k = nodes * groups_per_node, groups_per_node
    pooled = (2 * (k_all - 2) * zeta1 + zeta2) / (k_all * (k_all - 1))
    scalar = (2 * (k - 2) * zeta1 + zeta2) / (nodes * k * (k - 1))
    return math.sqrt(scalar / pooled) if pooled > 0 else None
