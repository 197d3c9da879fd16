"""Cheap gradient statistics at a common point, for the adaptive batch tests.

At the start of a round every node of a trainer computes its first inner-step
gradient at the same parameters θ_k, one mean gradient per micro-batch (a
"group"). The batch tests need the per-sample gradient variance tr Σ and the
squared gradient norm at θ_k; both follow from a handful of scalars per group
and one running sum S = Σ n_i g_i, so nothing of size groups × D is stored, no
gradient is copied to the CPU and no per-sample gradient is formed.

Two ways to combine a trainer's nodes (``train.stats_reduce``):

- ``scalars`` (default): every node turns its own groups into unbiased
  per-node estimates and the nodes sum 7 float64 scalars
  (:class:`NodeScalars`, :func:`estimate_scalars`): no D-sized message;
- ``vector``: the nodes all-reduce S (a float32 D-vector) plus scalars and the
  estimate pools all groups (:class:`GroupStats`, :func:`combine`,
  :func:`estimate`).

The engine drives both through :class:`RoundStats` (one per trainer and
round) and charges :func:`stats_payload_bytes` per node. The formulas, their
unbiasedness and the variance of the scalar estimator relative to the pooled
one are derived in ``docs/algorithms.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import ClassVar, Protocol

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


# ---------------------------------------------------------------------------
# stats_reduce: scalars | vector — what the engine calls once per trainer and round.

STATS_REDUCE = ("scalars", "vector")
FLOAT32_BYTES, FLOAT64_BYTES = 4, 8
# What TorchCollective.reduce_stats sends beside S in vector mode: the 7 entries
# of GroupStats.to_tensor() and the count of processes that saw groups.
VECTOR_MODE_SCALARS = 8


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


def stats_payload_bytes(mode: str, num_params: int) -> int:
    """Bytes one node puts into the statistics all-reduce of one round.

    ``scalars``: the 7 float64 numbers of :class:`NodeScalars`; ``vector``: S
    as float32 (4 bytes per parameter) plus 8 float64 scalars.
    """
    if mode == "scalars":
        return NodeScalars.SIZE * FLOAT64_BYTES
    if mode == "vector":
        if num_params < 1:
            raise ValueError(f"num_params must be >= 1, got {num_params}")
        return num_params * FLOAT32_BYTES + VECTOR_MODE_SCALARS * FLOAT64_BYTES
    raise ValueError(f"unknown stats_reduce {mode!r}; expected one of {', '.join(STATS_REDUCE)}")


class StatsCollective(Protocol):
    """What :meth:`RoundStats.reduce` needs of the engine's collective."""

    def reduce_stats(self, acc: GradientStatsAccumulator) -> GroupStats: ...

    def reduce_node_scalars(self, values: torch.Tensor) -> NodeScalars: ...


class RoundStats:
    """One trainer's batch-test statistics for one round, in this process.

    ``mode``: ``train.stats_reduce``. ``like``: the trainer's parameters.
    ``direction``: the reference direction of the augmented inner-product test
    or None — in ``scalars`` mode the trainer's last pseudo-gradient (every
    node holds it after the previous round's all-reduce, so it costs no
    message), in ``vector`` mode the previous round's :meth:`pooled_sum`.

    Per round: :meth:`node` before each node slot this process runs (pass the
    accumulator to the inner loop as its ``stats``), then :meth:`reduce` once
    on every process, including those that ran none of the trainer's slots.
    Memory: one float32 D-vector, reused from node to node in ``scalars`` mode.
    """

    def __init__(
        self,
        mode: str,
        like: Sequence[torch.Tensor],
        direction: Sequence[torch.Tensor] | None = None,
    ) -> None:
        if mode not in STATS_REDUCE:
            raise ValueError(
                f"unknown stats_reduce {mode!r}; expected one of {', '.join(STATS_REDUCE)}"
            )
        self.mode = mode
        self._acc = GradientStatsAccumulator(like, direction)
        self._local: torch.Tensor | None = None
        self.reduced: GroupStats | NodeScalars | None = None

    def node(self) -> GradientStatsAccumulator:
        """The accumulator of the next block (in ``vector`` mode one for all).

        In ``scalars`` mode every block (a node slot's statistics steps,
        :func:`adloco.algo.trust.stats_blocks`) is one term of the scalar
        sums: opening one closes the previous.
        """
        if self.reduced is not None:
            raise RuntimeError("RoundStats.node() after reduce()")
        if self.mode == "scalars":
            self._close_node()
        return self._acc

    def for_steps(
        self, blocks: Sequence[Sequence[int]]
    ) -> Callable[[int], GradientStatsAccumulator | None]:
        """One node slot's accumulator at each of its inner steps (None: the step feeds none).

        ``blocks`` are the slot's statistics blocks (step indices). Call the
        result with the steps in order: a block's first step opens the block.
        """
        first = {b[0] for b in blocks if b}
        member = {h for b in blocks for h in b}
        current: list[GradientStatsAccumulator] = []

        def at(h: int) -> GradientStatsAccumulator | None:
            if h not in member:
                return None
            if h in first or not current:
                current[:] = [self.node()]
            return current[0]

        return at

    def _close_node(self) -> None:
        if self._acc.groups:
            values = self._acc.node_scalars()
            self._local = values if self._local is None else self._local + values
            self._acc.reset()

    def reduce(self, comm: StatsCollective) -> VarianceEstimate | None:
        """The trainer's estimate over every node of every process (None: < 2 groups)."""
        if self.reduced is not None:
            raise RuntimeError("RoundStats.reduce() called twice")
        if self.mode == "vector":
            merged = comm.reduce_stats(self._acc)
            self.reduced = merged
            return estimate(merged)
        self._close_node()
        local = self._local
        if local is None:
            local = torch.zeros(NodeScalars.SIZE, dtype=torch.float64)
        total = comm.reduce_node_scalars(local)
        self.reduced = total
        return estimate_scalars(total)

    @property
    def groups(self) -> int:
        """Groups over all nodes and processes; after :meth:`reduce`."""
        if self.reduced is None:
            raise RuntimeError("RoundStats.groups before reduce()")
        return self.reduced.groups

    def pooled_sum(self) -> list[torch.Tensor]:
        """``vector`` mode, after :meth:`reduce`: the trainer's S over all nodes."""
        if self.mode != "vector":
            raise ValueError(
                "stats_reduce: scalars has no pooled gradient; the reference direction is "
                "the trainer's last pseudo-gradient"
            )
        if self.reduced is None:
            raise RuntimeError("RoundStats.pooled_sum() before reduce()")
        return self._acc.pooled_sum()
