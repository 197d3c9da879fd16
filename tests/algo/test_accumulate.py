"""Running sums of group gradients (adloco.algo.accumulate) against brute force.

``GradientStatsAccumulator``, ``GroupStats``, ``NodeScalars`` and ``combine``:
against numpy formulas, the exact per-sample statistics of adloco.algo.exact,
the gradients of backward passes on a tiny model, and their tensor round trips.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from stats_nodes import tiny_population

from adloco.algo.accumulate import GradientStatsAccumulator, GroupStats, NodeScalars, combine
from adloco.algo.estimators import estimate
from adloco.algo.exact import exact_estimate, per_sample_grads
from adloco.model.llama import causal_lm_loss

pytestmark = pytest.mark.usefixtures("one_thread")

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


def test_accumulator_zero_direction_and_bad_input():
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


def test_node_scalars_tensor_round_trip():
    back = NodeScalars.from_tensor(NodeScalars(3, 7, 20, 1.5, 2.5, 3, 0.5).to_tensor())
    assert back == NodeScalars(3, 7, 20, 1.5, 2.5, 3, 0.5)


def test_group_gradients_from_backward_feed_the_same_stats(tiny_model_cfg):
    # The engine feeds mean gradients of real micro-batches; they must equal
    # the means of the exact per-sample gradients.
    model, ids = tiny_population(tiny_model_cfg)
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
