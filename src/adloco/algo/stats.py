"""Cheap gradient statistics at a common point, for the adaptive batch tests.

At the start of a round every node of a trainer computes its first inner-step
gradient at the same parameters θ_k, one mean gradient per micro-batch (a
"group"). The batch tests need the per-sample gradient variance tr Σ and the
squared gradient norm at θ_k; both follow from a handful of scalars per group
and one running sum S = Σ n_i g_i, so nothing of size groups × D is stored, no
gradient is copied to the CPU and no per-sample gradient is formed. The
engine feeds groups to a :class:`GradientStatsAccumulator`, turns the result
into a :class:`VarianceEstimate` with :func:`estimate`, and keeps S as the next
round's reference direction for the augmented inner-product test. The formulas
and their unbiasedness are derived in ``docs/algorithms.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

# Layout of GroupStats.to_tensor(); every entry but POOLED is a plain sum over
# parts, so a SUM all-reduce combines them.
_GROUPS, _SAMPLES, _SUM_N_SQNORM, _POOLED, _HAS_DIRECTION, _SUM_N_PROJ, _SUM_N_PROJ_SQ = range(7)


@dataclass
class GroupStats:
    """Scalars of k group gradients g_i of sizes n_i at one common point.

    ``sum_n_proj``/``sum_n_proj_sq`` are None when no reference direction was given.
    """

    groups: int
    samples: int
    sum_n_sqnorm: float
    pooled_sum_sqnorm: float
    sum_n_proj: float | None = None
    sum_n_proj_sq: float | None = None

    def to_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        """float64 vector of 7 entries for a SUM all-reduce across ranks.

        All entries are additive across ranks except ``pooled_sum_sqnorm`` (‖S‖²
        of the combined S is not the sum of the parts' ‖S‖²): after the
        all-reduce, recompute it from the all-reduced S (see :func:`combine`).
        """
        has_direction = self.sum_n_proj is not None
        values = [
            float(self.groups),
            float(self.samples),
            self.sum_n_sqnorm,
            self.pooled_sum_sqnorm,
            1.0 if has_direction else 0.0,
            self.sum_n_proj if has_direction else 0.0,
            self.sum_n_proj_sq if has_direction else 0.0,
        ]
        return torch.tensor(values, dtype=torch.float64, device=device)

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> GroupStats:
        """Inverse of :meth:`to_tensor` (also after a SUM all-reduce of it)."""
        v = values.detach().to("cpu", torch.float64).tolist()
        if len(v) != 7:
            raise ValueError(f"GroupStats tensor must have 7 entries, got {len(v)}")
        has_direction = v[_HAS_DIRECTION] > 0
        return cls(
            groups=int(round(v[_GROUPS])),
            samples=int(round(v[_SAMPLES])),
            sum_n_sqnorm=v[_SUM_N_SQNORM],
            pooled_sum_sqnorm=v[_POOLED],
            sum_n_proj=v[_SUM_N_PROJ] if has_direction else None,
            sum_n_proj_sq=v[_SUM_N_PROJ_SQ] if has_direction else None,
        )


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

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "trace_cov": self.trace_cov,
            "grad_sqnorm": self.grad_sqnorm,
            "batch_grad_sqnorm": self.batch_grad_sqnorm,
            "ip_var": self.ip_var,
            "orth_var": self.orth_var,
            "groups": self.groups,
            "samples": self.samples,
        }


def _sqnorm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Σ‖t‖² over a list as a float64 0-dim tensor on the tensors' device (no sync).

    Norms are reduced in float32: a float64 reduction is several times slower
    on CPUs and most GPUs, and a relative rounding error ε of the norms gives
    tr Σ̂ a relative error of about ε / ((k − 1) tr Σ / (N ‖ḡ‖²)), which only
    matters when the current batch N is ~10⁴ times the one the norm test asks
    for. Squares and sums are then taken in float64.
    """
    norms = torch._foreach_norm(list(tensors), 2, dtype=torch.float32)
    return (torch.stack(norms).double() ** 2).sum()


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> torch.Tensor:
    """⟨a, b⟩ over two lists as a float64 0-dim tensor (no temporaries of size D)."""
    parts = [
        torch.vdot(x.reshape(-1).float(), y.reshape(-1).float()) for x, y in zip(a, b, strict=True)
    ]
    return torch.stack(parts).double().sum()


class GradientStatsAccumulator:
    """Running sum S = Σ n_i g_i and per-group scalars at one common point.

    ``like``: the parameter tensors (S gets their shapes and device, in float32).
    ``direction``: an un-normalised reference vector (the previous round's S);
    it is read, not copied, so it must not change until :meth:`finalize`. A zero
    or non-finite direction counts as none.

    Each :meth:`add_group` costs one norm, one axpy and (with a direction) one
    dot product over D floats, and never synchronises with the device; the
    scalars are read back once, in :meth:`finalize`.
    """

    def __init__(
        self, like: Sequence[torch.Tensor], direction: Sequence[torch.Tensor] | None = None
    ) -> None:
        if len(like) == 0:
            raise ValueError("GradientStatsAccumulator needs at least one parameter tensor")
        self._shapes = [tuple(t.shape) for t in like]
        self._sum = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in like]
        self._direction: list[torch.Tensor] | None = None
        self._direction_norm: torch.Tensor | None = None
        if direction is not None:
            self._check(direction, "direction")
            self._direction = list(direction)
            self._direction_norm = _sqnorm(self._direction).sqrt()
        self._group_sizes: list[int] = []
        self._weighted_sqnorms: list[torch.Tensor] = []
        self._projections: list[torch.Tensor] = []

    def _check(self, tensors: Sequence[torch.Tensor], what: str) -> None:
        if len(tensors) != len(self._shapes):
            raise ValueError(f"{what}: {len(tensors)} tensors, expected {len(self._shapes)}")
        for i, (t, shape) in enumerate(zip(tensors, self._shapes, strict=True)):
            if tuple(t.shape) != shape:
                raise ValueError(f"{what}[{i}] has shape {tuple(t.shape)}, expected {shape}")

    @property
    def groups(self) -> int:
        return len(self._group_sizes)

    @property
    def samples(self) -> int:
        return sum(self._group_sizes)

    def add_group(self, grads: Sequence[torch.Tensor], n: int) -> None:
        """Add the MEAN gradient of a group of ``n`` samples (one tensor per parameter)."""
        if n < 1:
            raise ValueError(f"group size must be >= 1, got {n}")
        self._check(grads, "grads")
        grads = list(grads)
        self._weighted_sqnorms.append(n * _sqnorm(grads))
        torch._foreach_add_(self._sum, grads, alpha=float(n))
        if self._direction is not None:
            self._projections.append(_dot(grads, self._direction))
        self._group_sizes.append(int(n))

    def pooled_sum(self) -> list[torch.Tensor]:
        """S = Σ n_i g_i (float32); the engine keeps it as next round's direction."""
        return self._sum

    def finalize(self) -> GroupStats:
        if not self._group_sizes:
            return GroupStats(0, 0, 0.0, 0.0, None, None)
        sizes = torch.tensor(self._group_sizes, dtype=torch.float64)
        scalars = [torch.stack(self._weighted_sqnorms), _sqnorm(self._sum).reshape(1)]
        if self._direction is not None:
            scalars.append(torch.stack(self._projections) / self._direction_norm)
        # One device-to-host transfer for everything.
        host = torch.cat([s.reshape(-1) for s in scalars]).cpu()
        k = len(self._group_sizes)
        sum_n_sqnorm = float(host[:k].sum())
        pooled = float(host[k])
        sum_n_proj = sum_n_proj_sq = None
        if self._direction is not None:
            proj = host[k + 1 :]
            if torch.isfinite(proj).all():
                sum_n_proj = float((sizes * proj).sum())
                sum_n_proj_sq = float((sizes * proj * proj).sum())
        return GroupStats(k, int(sizes.sum()), sum_n_sqnorm, pooled, sum_n_proj, sum_n_proj_sq)


def combine(parts: Sequence[GroupStats], pooled_sum: Sequence[torch.Tensor]) -> GroupStats:
    """Stats of the union of several accumulators' groups (e.g. one per node).

    ``pooled_sum`` is the sum of the parts' S vectors (what an all-reduce of S
    gives); ‖S‖² is recomputed from it because it is not additive. All parts
    must have used the same direction, or all none.
    """
    if not parts:
        raise ValueError("combine needs at least one GroupStats")
    with_direction = {p.sum_n_proj is not None for p in parts}
    if len(with_direction) != 1:
        raise ValueError("combine: some parts have a reference direction and some do not")
    total = sum((p.to_tensor() for p in parts), torch.zeros(7, dtype=torch.float64))
    merged = GroupStats.from_tensor(total)
    return replace(merged, pooled_sum_sqnorm=float(_sqnorm(pooled_sum)))


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
    ip_var = orth_var = None
    if stats.sum_n_proj is not None and stats.sum_n_proj_sq is not None:
        ip_var = (stats.sum_n_proj_sq - stats.sum_n_proj**2 / n_total) / (k - 1)
        ip_var = min(max(ip_var, 0.0), trace_cov)
        orth_var = trace_cov - ip_var
    return VarianceEstimate(
        trace_cov=trace_cov,
        grad_sqnorm=grad_sqnorm,
        batch_grad_sqnorm=batch_grad_sqnorm,
        ip_var=ip_var,
        orth_var=orth_var,
        groups=k,
        samples=n_total,
    )
