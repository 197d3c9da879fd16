"""One trainer's round statistics (adloco.algo.stats.RoundStats), scalars and vector.

Per-sample gradients are drawn from known distributions in a few dimensions,
grouped into micro-batch groups, the groups spread over several nodes; the
scalar-mode estimates are checked against a direct numpy computation for one
draw, one node against the pooled estimator, the payload in bytes, and the two
collectives on a split of the nodes over fake ranks. The estimators' behaviour
in expectation is in test_estimators.py, the running sums in test_accumulate.py.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from stats_nodes import DIM, random_nodes, run_round, split

from adloco.algo.accumulate import GradientStatsAccumulator, NodeScalars
from adloco.algo.estimators import estimate
from adloco.algo.stats import RoundStats, stats_payload_bytes
from adloco.engine.collective import LocalCollective
from adloco.engine.distributed import TorchCollective

pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_scalar_mode_equals_the_definitions_for_a_fixed_draw():
    rng = np.random.default_rng(0)
    # Unequal group counts and sizes; one node with a single group (0 degrees of freedom).
    nodes = random_nodes(rng, [[1, 2, 3], [4, 4], [2], [1, 1, 1, 1, 2]])
    direction = rng.normal(size=DIM) * 3.0  # un-normalised on purpose
    rs, est = run_round("scalars", nodes, direction)
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
        acc = GradientStatsAccumulator(split(np.zeros(DIM)), split(direction))
        for g, n in node:
            acc.add_group(split(g), n)
        host = host + NodeScalars.of_node(acc.finalize())
    for key in ("within_sqnorm", "node_mean_sqnorm", "within_proj_sq"):
        assert getattr(host, key) == pytest.approx(getattr(total, key), rel=1e-6), key
    assert (host.nodes, host.groups, host.samples) == (total.nodes, total.groups, total.samples)


def test_one_node_gives_the_pooled_estimator_and_vector_mode_is_unchanged():
    rng = np.random.default_rng(1)
    nodes = random_nodes(rng, [[3, 1, 4, 2]])
    direction = rng.normal(size=DIM)
    _, scalar = run_round("scalars", nodes, direction)
    acc = GradientStatsAccumulator(split(np.zeros(DIM)), split(direction))
    for g, n in nodes[0]:
        acc.add_group(split(g), n)
    pooled = estimate(acc.finalize())
    for key in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "ip_var", "orth_var"):
        assert getattr(scalar, key) == pytest.approx(getattr(pooled, key), rel=1e-12), key

    # vector mode over several nodes is today's pooled estimator of all their groups.
    nodes = random_nodes(rng, [[2, 2], [3, 1, 1]])
    rs, vector = run_round("vector", nodes, direction)
    whole = GradientStatsAccumulator(split(np.zeros(DIM)), split(direction))
    for node in nodes:
        for g, n in node:
            whole.add_group(split(g), n)
    assert vector == estimate(whole.finalize())
    assert rs.groups == 5
    np.testing.assert_array_equal(
        torch.cat([t.reshape(-1) for t in rs.pooled_sum()]).numpy(),
        torch.cat([t.reshape(-1) for t in whole.pooled_sum()]).numpy(),
    )


def test_round_stats_zero_direction_empty_node_and_misuse():
    # A zero direction is no direction; an empty node contributes nothing.
    rng = np.random.default_rng(2)
    rs = RoundStats("scalars", split(np.zeros(DIM)), split(np.zeros(DIM)))
    rs.node()  # a slot that ended up without groups
    for node in random_nodes(rng, [[1, 2], [2, 2]]):
        acc = rs.node()
        for g, n in node:
            acc.add_group(split(g), n)
    est = rs.reduce(LocalCollective())
    assert rs.reduced.nodes == 2 and est.ip_var is None
    with pytest.raises(RuntimeError):
        rs.reduce(LocalCollective())
    with pytest.raises(ValueError, match="pseudo-gradient"):
        rs.pooled_sum()
    with pytest.raises(ValueError, match="stats_reduce"):
        RoundStats("pooled", split(np.zeros(DIM)))


def test_payload_bytes():
    assert stats_payload_bytes("scalars", 10) == 56
    assert stats_payload_bytes("scalars", 300_000_000) == 56
    assert stats_payload_bytes("vector", 10) == 10 * 4 + 8 * 8
    assert stats_payload_bytes("vector", 920_192) == 920_192 * 4 + 64
    with pytest.raises(ValueError):
        stats_payload_bytes("both", 10)


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
    nodes = random_nodes(rng, [[2, 2, 1], [3, 3], [1, 4, 2, 2], [2, 2]])
    direction = rng.normal(size=DIM)
    _, single = run_round(mode, nodes, direction)
    # Slots 0, 1 on rank 0, slots 2, 3 on rank 1; rank 2 runs none of this trainer's slots.
    owner = [0, 0, 1, 1]
    world = _ThreadWorld(3)
    results: dict[int, object] = {}

    def rank_main(rank: int) -> None:
        comm = _FakeTorchCollective(world, owner, rank)
        mine = [node for slot, node in enumerate(nodes) if comm.owns(slot)]
        results[rank] = run_round(mode, mine, direction, comm)[1]

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
