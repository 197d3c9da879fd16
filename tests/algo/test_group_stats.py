"""Cheap group statistics (adloco.algo.stats) against brute force and in expectation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from adloco.algo.exact import exact_estimate, per_sample_grads
from adloco.algo.stats import (
    GradientStatsAccumulator,
    GroupStats,
    combine,
    estimate,
)
from adloco.model import build_model, causal_lm_loss

SHAPES = [(3, 4), (5,), (2, 2, 2)]


def _split(flat: np.ndarray) -> list[torch.Tensor]:
    out, start = [], 0
    for shape in SHAPES:
        size = math.prod(shape)
        out.append(torch.tensor(flat[start : start + size].reshape(shape), dtype=torch.float32))
        start += size
    return out


def _dim() -> int:
    return sum(math.prod(s) for s in SHAPES)


def test_group_stats_match_numpy_formulas():
    rng = np.random.default_rng(0)
    sizes = [1, 3, 4, 7, 2]
    groups = [rng.normal(0.3, 1.0, _dim()).astype(np.float32) for _ in sizes]
    direction = rng.normal(size=_dim()).astype(np.float32) * 5.0  # un-normalised on purpose

    acc = GradientStatsAccumulator(_split(np.zeros(_dim())), direction=_split(direction))
    for g, n in zip(groups, sizes, strict=True):
        acc.add_group(_split(g), n)
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
    acc = GradientStatsAccumulator(_split(np.zeros(_dim())), direction=_split(direction))
    for row in per_sample:
        acc.add_group(_split(row), 1)
    cheap = estimate(acc.finalize())
    columns = [
        torch.stack(list(parts)) for parts in zip(*[_split(r) for r in per_sample], strict=True)
    ]
    exact = exact_estimate(columns, direction=_split(direction))
    for field in ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "ip_var", "orth_var"):
        assert getattr(cheap, field) == pytest.approx(getattr(exact, field), rel=1e-5), field


def test_tensor_round_trip_and_combine_equal_one_accumulator():
    rng = np.random.default_rng(2)
    sizes = [2, 5, 3, 4]
    groups = [rng.normal(size=_dim()) for _ in sizes]
    direction = _split(rng.normal(size=_dim()))
    like = _split(np.zeros(_dim()))

    whole = GradientStatsAccumulator(like, direction)
    parts = [GradientStatsAccumulator(like, direction) for _ in range(2)]
    for j, (g, n) in enumerate(zip(groups, sizes, strict=True)):
        whole.add_group(_split(g), n)
        parts[j % 2].add_group(_split(g), n)
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
