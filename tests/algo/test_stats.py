"""Gradient statistics (adloco.algo.stats) against brute force and in expectation.

Round statistics, ``stats_reduce: scalars | vector`` (``RoundStats``):
per-sample gradients are drawn from known distributions in a few dimensions,
grouped into micro-batch groups, the groups spread over several nodes; the
scalar-mode estimates are checked against a direct numpy computation for one
draw, against the true tr Σ, ‖∇F‖², E‖ḡ‖² and dᵀΣd in expectation, and their
variance against the Gaussian formulas of docs/algorithms.md. The two
collectives are compared on a split of the nodes over fake ranks.

Cheap group statistics (``GradientStatsAccumulator``, ``estimate``,
``combine``): against numpy formulas, the exact per-sample statistics of
adloco.algo.exact, and their expectation.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

from adloco.algo.exact import exact_estimate, per_sample_grads
from adloco.algo.stats import (
    GradientStatsAccumulator,
    GroupStats,
    NodeScalars,
    RoundStats,
    combine,
    estimate,
    estimate_scalars,
    stats_payload_bytes,
)
from adloco.engine.collective import LocalCollective
from adloco.engine.distributed import TorchCollective
from adloco.model import build_model, causal_lm_loss

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = [(2, 3), (4,)]
DIM = 10


def _split(flat) -> list[torch.Tensor]:
    flat = torch.as_tensor(np.asarray(flat), dtype=torch.float32)
    return [flat[:6].reshape(2, 3), flat[6:]]


def _run(mode, nodes, direction=None, comm=None):
    """RoundStats over ``nodes`` (each a list of (mean gradient, size)) in one process."""
    rs = RoundStats(mode, _split(np.zeros(DIM)), None if direction is None else _split(direction))
    for node in nodes:
        acc = rs.node()
        for g, n in node:
            acc.add_group(_split(g), n)
    return rs, rs.reduce(comm or LocalCollective())


def _numpy_scalar_estimate(nodes, direction=None):
    """The scalar-mode figures straight from the definitions (deviation form, float64)."""
    within = within_proj = node_mean = 0.0
    groups = samples = 0
    unit = None if direction is None else direction / np.linalg.norm(direction)
    for node in nodes:
        g = np.array([x for x, _ in node], dtype=np.float64)
        n = np.array([s for _, s in node], dtype=np.float64)
        mean = (n[:, None] * g).sum(0) / n.sum()
        within += (n * ((g - mean) ** 2).sum(1)).sum()
        node_mean += n.sum() * mean @ mean
        if unit is not None:
            a = g @ unit
            within_proj += (n * (a - a @ n / n.sum()) ** 2).sum()
        groups += len(node)
        samples += int(n.sum())
    m = len(nodes)
    trace = within / (groups - m)
    grad = (node_mean - m * trace) / samples
    out = {"trace_cov": trace, "grad_sqnorm": grad, "batch_grad_sqnorm": trace / samples + grad}
    assert grad > 0  # draws here have ‖∇F‖²̂ > 0, so no clamping
    if unit is not None:
        out["ip_var"] = within_proj / (groups - m)
        out["orth_var"] = trace - out["ip_var"]
    return out, groups, samples


def _random_nodes(rng, sizes_per_node, loc=0.5):
    return [[(rng.normal(loc, 1.0, DIM), n) for n in sizes] for sizes in sizes_per_node]


def test_scalar_mode_equals_the_definitions_for_a_fixed_draw():
    rng = np.random.default_rng(0)
    # Unequal group counts and sizes; one node with a single group (0 degrees of freedom).
    nodes = _random_nodes(rng, [[1, 2, 3], [4, 4], [2], [1, 1, 1, 1, 2]])
    direction = rng.normal(size=DIM) * 3.0  # un-normalised on purpose
    rs, est = _run("scalars", nodes, direction)
    reference, groups, samples = _numpy_scalar_estimate(nodes, direction)
    assert (est.groups, est.samples, rs.groups) == (groups, samples, groups)
    for key, value in reference.items():
        assert getattr(est, key) == pytest.approx(value, rel=1e-5), key
    total = rs.reduced
    assert isinstance(total, NodeScalars)
    assert (total.nodes, total.nodes_with_direction) == (4, 4)
    # The host-side route (NodeScalars.of_node of each node's GroupStats) gives the same sums.
    host = NodeScalars()
    for node in nodes:
        acc = GradientStatsAccumulator(_split(np.zeros(DIM)), _split(direction))
        for g, n in node:
            acc.add_group(_split(g), n)
        host = host + NodeScalars.of_node(acc.finalize())
    for key in ("within_sqnorm", "node_mean_sqnorm", "within_proj_sq"):
        assert getattr(host, key) == pytest.approx(getattr(total, key), rel=1e-6), key
    assert (host.nodes, host.groups, host.samples) == (total.nodes, total.groups, total.samples)


def test_one_node_gives_the_pooled_estimator_and_vector_mode_is_unchanged():
    rng = np.random.default_rng(1)
    nodes = _random_nodes(rng, [[3, 1, 4, 2]])
    direction = rng.normal(size=DIM)
    _, scalar = _run("scalars", nodes, direction)
    acc = GradientStatsAccumulator(_split(np.zeros(DIM)), _split(direction))
    for g, n in nodes[0]:
        acc.add_group(_split(g), n)
    pooled = estimate(acc.finalize())
    for key in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "ip_var", "orth_var"):
        assert getattr(scalar, key) == pytest.approx(getattr(pooled, key), rel=1e-12), key

    # vector mode over several nodes is today's pooled estimator of all their groups.
    nodes = _random_nodes(rng, [[2, 2], [3, 1, 1]])
    rs, vector = _run("vector", nodes, direction)
    whole = GradientStatsAccumulator(_split(np.zeros(DIM)), _split(direction))
    for node in nodes:
        for g, n in node:
            whole.add_group(_split(g), n)
    assert vector == estimate(whole.finalize())
    assert rs.groups == 5
    np.testing.assert_array_equal(
        torch.cat([t.reshape(-1) for t in rs.pooled_sum()]).numpy(),
        torch.cat([t.reshape(-1) for t in whole.pooled_sum()]).numpy(),
    )


def test_edge_cases_floor_and_missing_directions():
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
    # A zero direction is no direction; an empty node contributes nothing.
    rng = np.random.default_rng(2)
    rs = RoundStats("scalars", _split(np.zeros(DIM)), _split(np.zeros(DIM)))
    rs.node()  # a slot that ended up without groups
    for node in _random_nodes(rng, [[1, 2], [2, 2]]):
        acc = rs.node()
        for g, n in node:
            acc.add_group(_split(g), n)
    est = rs.reduce(LocalCollective())
    assert rs.reduced.nodes == 2 and est.ip_var is None
    with pytest.raises(RuntimeError):
        rs.reduce(LocalCollective())
    with pytest.raises(ValueError, match="pseudo-gradient"):
        rs.pooled_sum()
    with pytest.raises(ValueError, match="stats_reduce"):
        RoundStats("pooled", _split(np.zeros(DIM)))
    back = NodeScalars.from_tensor(NodeScalars(3, 7, 20, 1.5, 2.5, 3, 0.5).to_tensor())
    assert back == NodeScalars(3, 7, 20, 1.5, 2.5, 3, 0.5)


def test_payload_bytes():
    assert stats_payload_bytes("scalars", 10) == 56
    assert stats_payload_bytes("scalars", 300_000_000) == 56
    assert stats_payload_bytes("vector", 10) == 10 * 4 + 8 * 8
    assert stats_payload_bytes("vector", 920_192) == 920_192 * 4 + 64
    with pytest.raises(ValueError):
        stats_payload_bytes("both", 10)


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
        _, est = _run("scalars", nodes, unit * 2.0)
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


class _ThreadWorld:
    """A SUM all-reduce between threads, one thread per fake rank (adds in rank order)."""

    def __init__(self, size: int):
        self.size = size
        self.buffers: list[torch.Tensor | None] = [None] * size
        self.barrier = threading.Barrier(size)

    def all_reduce(self, rank: int, flat: torch.Tensor) -> None:
        self.buffers[rank] = flat.clone()
        self.barrier.wait()
        total = self.buffers[0].clone()
        for other in self.buffers[1:]:
            total += other
        self.barrier.wait()
        flat.copy_(total)


class _FakeTorchCollective(TorchCollective):
    def __init__(self, world: _ThreadWorld, slot_owner: list[int], rank: int):
        super().__init__(slot_owner, rank, world.size, torch.device("cpu"), 10.0)
        self.world = world

    def _all_reduce(self, flat: torch.Tensor, what: str) -> None:
        self.world.all_reduce(self.rank, flat)


@pytest.mark.parametrize("mode", ["scalars", "vector"])
def test_torch_collective_over_fake_ranks_equals_one_process(mode):
    rng = np.random.default_rng(5)
    nodes = _random_nodes(rng, [[2, 2, 1], [3, 3], [1, 4, 2, 2], [2, 2]])
    direction = rng.normal(size=DIM)
    _, single = _run(mode, nodes, direction)
    # Slots 0, 1 on rank 0, slots 2, 3 on rank 1; rank 2 runs none of this trainer's slots.
    owner = [0, 0, 1, 1]
    world = _ThreadWorld(3)
    results: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        comm = _FakeTorchCollective(world, owner, rank)
        mine = [node for slot, node in enumerate(nodes) if comm.owns(slot)]
        results[rank] = _run(mode, mine, direction, comm)[1]

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [0, 1, 2]
    # Every rank ends with the same bits.
    assert results[0] == results[1] == results[2]
    # And with the single process's numbers: float64 sums in another order
    # (scalars), float32 partial sums of S (vector).
    rel = 1e-14 if mode == "scalars" else 1e-6
    for key in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "ip_var", "orth_var"):
        assert getattr(results[0], key) == pytest.approx(getattr(single, key), rel=rel), key
    assert (results[0].groups, results[0].samples) == (single.groups, single.samples)


# Cheap group statistics of one trainer.
GROUP_SHAPES = [(3, 4), (5,), (2, 2, 2)]


def _split_groups(flat: np.ndarray) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in GROUP_SHAPES:
        size = math.prod(shape)
        out.append(torch.tensor(flat[start : start + size].reshape(shape), dtype=torch.float32))
        start += size
    return out


def _dim() -> int:
    return sum(math.prod(s) for s in GROUP_SHAPES)


def test_group_stats_match_numpy_formulas():
    rng = np.random.default_rng(0)
    sizes = [1, 3, 4, 7, 2]
    groups = [rng.normal(0.3, 1.0, _dim()).astype(np.float32) for _ in sizes]
    direction = rng.normal(size=_dim()).astype(np.float32) * 5.0  # un-normalised on purpose

    acc = GradientStatsAccumulator(
        _split_groups(np.zeros(_dim())), direction=_split_groups(direction)
    )
    for g, n in zip(groups, sizes, strict=True):
        acc.add_group(_split_groups(g), n)
    stats = acc.finalize()

    g = np.array(groups, dtype=np.float64)
    n = np.array(sizes, dtype=np.float64)
    big_n, k = n.sum(), len(sizes)
    pooled = (n[:, None] * g).sum(axis=0)
    d = direction.astype(np.float64) / np.linalg.norm(direction)
    a = g @ d
    assert stats.groups == k and stats.samples == big_n
    assert stats.sum_n_sqnorm == pytest.approx((n * (g * g).sum(axis=1)).sum(), rel=1e-6)
    assert stats.pooled_sum_sqnorm == pytest.approx(pooled @ pooled, rel=1e-6)
    assert stats.sum_n_proj == pytest.approx((n * a).sum(), rel=1e-5)
    assert stats.sum_n_proj_sq == pytest.approx((n * a * a).sum(), rel=1e-5)
    np.testing.assert_allclose(
        torch.cat([t.reshape(-1) for t in acc.pooled_sum()]).numpy(), pooled, rtol=1e-5
    )

    # The estimate through the weighted-deviation form, a different algebraic route.
    gbar = pooled / big_n
    trace = (n * ((g - gbar) ** 2).sum(axis=1)).sum() / (k - 1)
    abar = (n * a).sum() / big_n
    ip = (n * (a - abar) ** 2).sum() / (k - 1)
    est = estimate(stats)
    assert est is not None
    assert est.trace_cov == pytest.approx(trace, rel=1e-5)
    assert est.batch_grad_sqnorm == pytest.approx(gbar @ gbar, rel=1e-6)
    assert est.grad_sqnorm == pytest.approx(gbar @ gbar - trace / big_n, rel=1e-5)
    assert est.ip_var == pytest.approx(ip, rel=1e-5)
    assert est.orth_var == pytest.approx(trace - ip, rel=1e-5)
    assert (est.groups, est.samples) == (k, big_n)


def test_groups_of_one_equal_the_exact_estimator():
    rng = np.random.default_rng(1)
    per_sample = rng.normal(0.1, 2.0, size=(9, _dim()))
    direction = rng.normal(size=_dim())
    acc = GradientStatsAccumulator(
        _split_groups(np.zeros(_dim())), direction=_split_groups(direction)
    )
    for row in per_sample:
        acc.add_group(_split_groups(row), 1)
    cheap = estimate(acc.finalize())
    columns = [
        torch.stack(list(parts))
        for parts in zip(*[_split_groups(r) for r in per_sample], strict=True)
    ]
    exact = exact_estimate(columns, direction=_split_groups(direction))
    for field in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "ip_var", "orth_var"):
        assert getattr(cheap, field) == pytest.approx(getattr(exact, field), rel=1e-5), field


def test_tensor_round_trip_and_combine_equal_one_accumulator():
    rng = np.random.default_rng(2)
    sizes = [2, 5, 3, 4]
    groups = [rng.normal(size=_dim()) for _ in sizes]
    direction = _split_groups(rng.normal(size=_dim()))
    like = _split_groups(np.zeros(_dim()))

    whole = GradientStatsAccumulator(like, direction)
    parts = [GradientStatsAccumulator(like, direction) for _ in range(2)]
    for j, (g, n) in enumerate(zip(groups, sizes, strict=True)):
        whole.add_group(_split_groups(g), n)
        parts[j % 2].add_group(_split_groups(g), n)
    reference = whole.finalize()

    # float64 carries every field exactly.
    assert GroupStats.from_tensor(reference.to_tensor()) == reference
    summed = [a + b for a, b in zip(parts[0].pooled_sum(), parts[1].pooled_sum(), strict=True)]
    merged = combine([p.finalize() for p in parts], summed)
    assert merged.groups == reference.groups and merged.samples == reference.samples
    for field in ("sum_n_sqnorm", "pooled_sum_sqnorm", "sum_n_proj", "sum_n_proj_sq"):
        assert getattr(merged, field) == pytest.approx(getattr(reference, field), rel=1e-6)

    no_direction = GroupStats(3, 10, 4.0, 9.0)
    back = GroupStats.from_tensor(no_direction.to_tensor())
    assert back == no_direction and back.sum_n_proj is None


def test_estimate_edge_cases():
    assert estimate(GroupStats(1, 8, 1.0, 1.0)) is None
    assert estimate(GroupStats(0, 0, 0.0, 0.0)) is None
    est = estimate(GroupStats(2, 4, 10.0, 16.0))
    assert est is not None and est.ip_var is None and est.orth_var is None
    # (10 - 16/4) / 1 = 6; ||gbar||^2 = 1; grad estimate 1 - 6/4
    assert (est.trace_cov, est.batch_grad_sqnorm, est.grad_sqnorm) == (6.0, 1.0, -0.5)

    like = [torch.zeros(3)]
    acc = GradientStatsAccumulator(like, direction=[torch.zeros(3)])
    acc.add_group([torch.ones(3)], 2)
    acc.add_group([torch.zeros(3)], 2)
    stats = acc.finalize()
    assert stats.sum_n_proj is None  # a zero direction is no direction
    with pytest.raises(ValueError, match="shape"):
        acc.add_group([torch.ones(4)], 1)
    with pytest.raises(ValueError, match="group size"):
        acc.add_group([torch.ones(3)], 0)


def _tiny_population(model_cfg: dict, num_sequences: int = 24, seq_len: int = 8):
    model = build_model(model_cfg, vocab_size=64, seq_len_tokens=seq_len, seed=0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (num_sequences, seq_len), generator=gen)
    return model, ids


def test_group_gradients_from_backward_feed_the_same_stats(tiny_model_cfg):
    # The engine feeds mean gradients of real micro-batches; they must equal
    # the means of the exact per-sample gradients.
    model, ids = _tiny_population(tiny_model_cfg)
    per_sample = per_sample_grads(model, ids)
    params = [p for p in model.parameters()]
    sizes = [3, 5, 7, 9]
    acc_backward = GradientStatsAccumulator(params)
    acc_exact = GradientStatsAccumulator(params)
    start = 0
    for n in sizes:
        chunk = ids[start : start + n]
        model.zero_grad()
        logits = model(input_ids=chunk, use_cache=False).logits
        loss_sum, n_tokens = causal_lm_loss(logits, chunk)
        (loss_sum / n_tokens).backward()
        acc_backward.add_group([p.grad.detach().clone() for p in params], n)
        acc_exact.add_group([g[start : start + n].mean(dim=0) for g in per_sample], n)
        start += n
    a, b = acc_backward.finalize(), acc_exact.finalize()
    assert a.sum_n_sqnorm == pytest.approx(b.sum_n_sqnorm, rel=1e-5)
    assert a.pooled_sum_sqnorm == pytest.approx(b.pooled_sum_sqnorm, rel=1e-5)


def test_cheap_estimator_is_unbiased_on_a_tiny_model(tiny_model_cfg):
    """Random partitions of a fixed population of 24 sequences into 7 unequal groups.

    For a random partition of all N samples, E[Σ n_i‖g_i‖²] = N‖μ‖² + (k-1)·N·σ²/(N-1)
    with σ² the population variance (divisor N), so E[tr Σ̂] is exactly the exact
    estimator's tr Σ (divisor N-1); the same holds along a fixed direction. The
    Monte-Carlo mean of R splittings must be within 4 standard errors, and that
    tolerance must be under 10% of the value: tighter than the 1/k = 14% bias a
    divisor-k slip would cause.
    """
    model, ids = _tiny_population(tiny_model_cfg)
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
