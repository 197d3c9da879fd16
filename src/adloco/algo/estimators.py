"""Estimates of tr Σ and ‖∇F‖² from the scalars of group gradients.

:func:`estimate` pools all groups (``train.stats_reduce: vector``, from a
:class:`~adloco.algo.accumulate.GroupStats`); :func:`estimate_scalars` combines
per-node estimates (``scalars``, from summed
:class:`~adloco.algo.accumulate.NodeScalars`). Both return a
:class:`VarianceEstimate`, what the batch tests read. The formulas, their
unbiasedness and the variance of the scalar estimator relative to the pooled
one are derived in ``docs/algorithms.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from adloco.algo.accumulate import GroupStats, NodeScalars


@dataclass
class VarianceEstimate:
    """What the batch tests read; all variances are per sample."""

    trace_cov: float
    grad_sqnorm: float
    batch_grad_sqnorm: float
    ip_var: float | None
    orth_var: float | None
    groups: int
    samples: int
    dof: int  # degrees of freedom of tr Σ̂: groups minus blocks (pooled: groups − 1)

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "trace_cov": self.trace_cov,
            "grad_sqnorm": self.grad_sqnorm,
            "batch_grad_sqnorm": self.batch_grad_sqnorm,
            "ip_var": self.ip_var,
            "orth_var": self.orth_var,
            "groups": self.groups,
            "samples": self.samples,
            "dof": self.dof,
        }


def estimate(stats: GroupStats) -> VarianceEstimate | None:
    """Unbiased tr Σ and ‖∇F‖² from group scalars; None with fewer than 2 groups.

    tr Σ̂ = (Σ n_i‖g_i‖² − N‖ḡ‖²)/(k − 1) and ‖∇F‖²̂ = ‖ḡ‖² − tr Σ̂/N are unbiased
    for any group sizes when samples are i.i.d. With a direction d, the same
    formulas on a_i = ⟨g_i, d⟩ give the per-sample variance along d, and the
    orthogonal variance is tr Σ̂ minus it. Exact algebra makes both variances
    non-negative; they are clamped at 0 against rounding.
    """
    k, n_total = stats.groups, stats.samples
    if k < 2 or n_total < 2:
        return None
    values = [stats.sum_n_sqnorm, stats.pooled_sum_sqnorm]
    if not all(math.isfinite(v) for v in values):
        return None
    batch_grad_sqnorm = stats.pooled_sum_sqnorm / n_total**2
    trace_cov = max((stats.sum_n_sqnorm - stats.pooled_sum_sqnorm / n_total) / (k - 1), 0.0)
    grad_sqnorm = batch_grad_sqnorm - trace_cov / n_total
    ip_var = None
    if stats.sum_n_proj is not None and stats.sum_n_proj_sq is not None:
        ip_var = (stats.sum_n_proj_sq - stats.sum_n_proj**2 / n_total) / (k - 1)
    return _variance_estimate(trace_cov, grad_sqnorm, batch_grad_sqnorm, ip_var, k, n_total, k - 1)


def _variance_estimate(
    trace_cov: float,
    grad_sqnorm: float,
    batch_grad_sqnorm: float,
    ip_var: float | None,
    groups: int,
    samples: int,
    dof: int,
) -> VarianceEstimate:
    """The estimate, with the variance along the direction (if any) clamped to [0, tr Σ̂]
    against rounding and the orthogonal variance the rest of tr Σ̂."""
    orth_var = None
    if ip_var is not None:
        ip_var = min(max(ip_var, 0.0), trace_cov)
        orth_var = trace_cov - ip_var
    return VarianceEstimate(
        trace_cov=trace_cov,
        grad_sqnorm=grad_sqnorm,
        batch_grad_sqnorm=batch_grad_sqnorm,
        ip_var=ip_var,
        orth_var=orth_var,
        groups=groups,
        samples=samples,
        dof=dof,
    )


def estimate_scalars(total: NodeScalars) -> VarianceEstimate | None:
    """tr Σ, ‖∇F‖² and the batch's ‖ḡ‖² from per-node scalars summed over M nodes.

    With K groups in all, N samples and ν = K − M degrees of freedom:

        tr Σ̂      = Σ_m (k_m − 1) tr Σ̂_m / ν       (each node's unbiased estimate,
                                                   weighted by its degrees of freedom)
        ‖∇F‖²̂    = (Σ_m N_m ‖ḡ_m‖² − M tr Σ̂) / N   (each node's, weighted by N_m,
                                                   with the pooled tr Σ̂ in its correction)
        ‖ḡ‖²̂     = tr Σ̂ / N + max(‖∇F‖²̂, 0)

    tr Σ̂ and ‖∇F‖²̂ are unbiased for i.i.d. samples; with M = 1 they are
    exactly :func:`estimate`'s. ‖ḡ‖²̂ stands for the squared norm of the whole
    batch's gradient, E‖ḡ‖² = ‖∇F‖² + tr Σ / N: without the max it is unbiased
    for it, but with M ≥ 2 nodes it can come near 0 or below when noise
    dominates and then sends the norm test's B = tr Σ̂ / (η² ‖ḡ‖²̂) to
    infinity; its estimand is ≥ tr Σ / N, and the max keeps it there, so B ≤
    N / η². With M = 1 it equals the pooled ‖ḡ‖² whenever ‖∇F‖²̂ ≥ 0. With a
    direction on every node, σ_d² = Σ_m (k_m − 1) σ̂²_{d,m} / ν in [0, tr Σ̂]
    and σ_⊥² = tr Σ̂ − σ_d². None when ν < 1 (every node needs ≥ 2 groups, or
    some node more) or a sum is not finite.
    """
    m, k, n_total = total.nodes, total.groups, total.samples
    dof = k - m
    if m < 1 or dof < 1 or n_total < 2:
        return None
    if not (math.isfinite(total.within_sqnorm) and math.isfinite(total.node_mean_sqnorm)):
        return None
    trace_cov = max(total.within_sqnorm / dof, 0.0)
    unbiased_batch = (total.node_mean_sqnorm - (m - 1) * trace_cov) / n_total
    grad_sqnorm = unbiased_batch - trace_cov / n_total
    # The same number as trace_cov / n_total + max(grad_sqnorm, 0), computed so
    # that one node gives the pooled ‖S‖²/N² to the last bit.
    batch_grad_sqnorm = unbiased_batch if grad_sqnorm >= 0.0 else trace_cov / n_total
    ip_var = None
    if total.nodes_with_direction == m and math.isfinite(total.within_proj_sq):
        ip_var = total.within_proj_sq / dof
    return _variance_estimate(trace_cov, grad_sqnorm, batch_grad_sqnorm, ip_var, k, n_total, dof)
