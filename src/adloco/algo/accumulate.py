"""Running sums of group gradients at one common point.

At the start of a round every node of a trainer computes its first inner-step
gradient at the same parameters θ_k, one mean gradient per micro-batch (a
"group"). :class:`GradientStatsAccumulator` keeps the running sum S = Σ n_i g_i
and a handful of scalars per group, so nothing of size groups × D is stored,
no gradient is copied to the CPU and no per-sample gradient is formed. It hands
them on as the records the two ``train.stats_reduce`` modes all-reduce:
:class:`GroupStats` (``vector``: combined by :func:`combine` with the
all-reduced S) and :class:`NodeScalars` (``scalars``: 7 float64 sums per node).
:mod:`adloco.algo.estimators` turns either into an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import ClassVar

import torch

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
class NodeScalars:
    """Sums over nodes of the per-node scalars of ``stats_reduce: scalars``.

    Every field is a plain sum over nodes, so the SUM all-reduce of
    :meth:`to_tensor` (7 float64 numbers, whatever the model size) combines
    nodes and processes. For node m with k_m groups of sizes n_i, N_m samples,
    mean gradients g_i and node mean ḡ_m:

    - ``within_sqnorm`` = Σ_m Σ_i n_i ‖g_i − ḡ_m‖² = Σ_m (k_m − 1) tr Σ̂_m,
    - ``node_mean_sqnorm`` = Σ_m N_m ‖ḡ_m‖²,
    - ``within_proj_sq`` = the same as ``within_sqnorm`` for the projections
      a_i = ⟨g_i, d⟩ on a unit direction d, counted only when every node had
      the direction (``nodes_with_direction == nodes``).

    ``nodes`` counts nodes that saw at least one group.
    """

    SIZE: ClassVar[int] = 7

    nodes: int = 0
    groups: int = 0
    samples: int = 0
    within_sqnorm: float = 0.0
    node_mean_sqnorm: float = 0.0
    nodes_with_direction: int = 0
    within_proj_sq: float = 0.0

    def to_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        values = [
            float(self.nodes),
            float(self.groups),
            float(self.samples),
            self.within_sqnorm,
            self.node_mean_sqnorm,
            float(self.nodes_with_direction),
            self.within_proj_sq,
        ]
        return torch.tensor(values, dtype=torch.float64, device=device)

    @classmethod
    def from_tensor(cls, values: torch.Tensor) -> NodeScalars:
        """Inverse of :meth:`to_tensor`, also after a SUM all-reduce of it."""
        v = values.detach().to("cpu", torch.float64).tolist()
        if len(v) != cls.SIZE:
            raise ValueError(f"NodeScalars tensor must have {cls.SIZE} entries, got {len(v)}")
        return cls(
            nodes=int(round(v[0])),
            groups=int(round(v[1])),
            samples=int(round(v[2])),
            within_sqnorm=v[3],
            node_mean_sqnorm=v[4],
            nodes_with_direction=int(round(v[5])),
            within_proj_sq=v[6],
        )

    @classmethod
    def of_node(cls, stats: GroupStats) -> NodeScalars:
        """One node's scalars from the :class:`GroupStats` of its own groups."""
        if stats.groups == 0:
            return cls()
        node_mean = stats.pooled_sum_sqnorm / stats.samples
        has_direction = stats.sum_n_proj is not None and stats.sum_n_proj_sq is not None
        within_proj = 0.0
        if has_direction:
            within_proj = stats.sum_n_proj_sq - stats.sum_n_proj**2 / stats.samples
        return cls(
            nodes=1,
            groups=stats.groups,
            samples=stats.samples,
            within_sqnorm=stats.sum_n_sqnorm - node_mean,
            node_mean_sqnorm=node_mean,
            nodes_with_direction=int(has_direction),
            within_proj_sq=within_proj,
        )

    def __add__(self, other: NodeScalars) -> NodeScalars:
        return NodeScalars(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(NodeScalars))
        )


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

    def reset(self) -> None:
        """Forget every group (S back to zero, in place); the direction stays."""
        torch._foreach_zero_(self._sum)
        self._group_sizes.clear()
        self._weighted_sqnorms.clear()
        self._projections.clear()

    def node_scalars(self) -> torch.Tensor:
        """These groups as one node of ``stats_reduce: scalars``, without a device sync.

        A float64 vector in the layout of :meth:`NodeScalars.to_tensor`, on the
        accumulator's device: 1 node, k groups, N samples, the within-node sum
        of squares W = Σ n_i‖g_i‖² − ‖S‖²/N = Σ n_i‖g_i − ḡ‖², the node's
        N‖ḡ‖² = ‖S‖²/N and, with a direction d, 1 and Σ n_i (a_i − ā)² for
        a_i = ⟨g_i, d⟩/‖d‖ (0 and 0 when the projections are not finite, e.g.
        a zero direction). All zeros when no group was added.
        """
        device = self._sum[0].device
        if not self._group_sizes:
            return torch.zeros(NodeScalars.SIZE, dtype=torch.float64, device=device)
        k, n_total = len(self._group_sizes), sum(self._group_sizes)
        sum_n_sqnorm = torch.stack(self._weighted_sqnorms).sum()
        node_mean = _sqnorm(self._sum) / n_total
        within = sum_n_sqnorm - node_mean
        has_direction = within_proj = torch.zeros((), dtype=torch.float64, device=device)
        if self._direction is not None:
            sizes = torch.tensor(self._group_sizes, dtype=torch.float64, device=device)
            proj = torch.stack(self._projections) / self._direction_norm
            sum_proj = (sizes * proj).sum()
            value = (sizes * proj * proj).sum() - sum_proj * sum_proj / n_total
            finite = torch.isfinite(value)
            has_direction = finite.double()
            within_proj = torch.where(finite, value, torch.zeros_like(value))
        counts = torch.tensor([1.0, float(k), float(n_total)], dtype=torch.float64, device=device)
        return torch.cat([counts, torch.stack([within, node_mean, has_direction, within_proj])])

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
