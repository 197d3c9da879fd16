"""Tests of adloco.variance.analysis against closed forms, brute force and a tiny
language model."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from variance_regression import (
    LinearRegression,
    closed_form_grads,
    regression_sample,
    squared_loss,
)

from adloco.config import load_config
from adloco.variance import analyse_gradient_variance, compare_reductions
from adloco.variance.analysis import (
    GRAM_MAX_BYTES,
    cheap_summary,
    check_sizes,
    comparison_skipped,
    deviation_summary,
    noise_scale_summary,
)

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_figures_match_the_closed_form_of_the_sample():
    rows, w = regression_sample(n=300, d=6, noise=0.5, delta_norm=0.4, seed=1)
    g = closed_form_grads(rows, w)
    n = rows.shape[0]
    mean = g.mean(0)
    trace_cov = float(((g - mean) ** 2).sum() / (n - 1))
    grad_sqnorm = float(mean @ mean)
    result = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=10,
        num_batches=50,
        eta=0.5,
        seed=0,
        loss_fn=squared_loss,
        chunk_size=64,
    ).summary
    assert result["trace_cov"] == pytest.approx(trace_cov, rel=1e-10)
    assert result["grad_sqnorm"] == pytest.approx(grad_sqnorm, rel=1e-10)
    assert result["grad_sqnorm_unbiased"] == pytest.approx(grad_sqnorm - trace_cov / n, rel=1e-9)
    assert result["b_simple"] == pytest.approx(trace_cov / grad_sqnorm, rel=1e-9)
    assert result["norm_test_batch"] == pytest.approx(trace_cov / (0.25 * grad_sqnorm), rel=1e-9)
    assert result["norm_test_batch_ceil"] == math.ceil(trace_cov / (0.25 * grad_sqnorm))
    assert result["expected_sq_deviation"] == pytest.approx(trace_cov * (1 - 10 / n) / 10, rel=1e-9)
    assert result["full_loss"] == pytest.approx(
        float(0.5 * ((rows[:, :-1] @ w - rows[:, -1]) ** 2).mean()), rel=1e-12
    )
    assert result["tokens_per_sequence"] == 1


def test_figures_match_the_population_closed_form():
    # x ~ N(0, I_d), ε ~ N(0, σ²), δ = w − w*: g = x xᵀδ − ε x, so
    # ∇F = δ and tr Σ = E[(xᵀδ)²‖x‖²] + σ² d − ‖δ‖² = (d + 1)‖δ‖² + σ² d.
    n, d, noise, delta_norm = 20000, 4, 0.5, 0.3
    rows, w = regression_sample(n=n, d=d, noise=noise, delta_norm=delta_norm, seed=2)
    result = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=4,
        num_batches=4,
        eta=0.8,
        seed=0,
        loss_fn=squared_loss,
        chunk_size=5000,
    ).summary
    trace_cov = (d + 1) * delta_norm**2 + noise**2 * d
    grad_sqnorm = delta_norm**2
    # Four standard errors of the sample estimates: tr Σ̂ is a mean of the
    # ‖g_i − ḡ‖²; ‖ḡ‖² − tr Σ̂/n moves by 2⟨δ, ḡ − δ⟩, of std ≤ ‖δ‖ √(tr Σ / n).
    g = closed_form_grads(rows, w)
    sq_dev = ((g - g.mean(0)) ** 2).sum(1)
    tol_trace = 4 * float(sq_dev.std()) / math.sqrt(n)
    tol_grad = 4 * 2 * delta_norm * math.sqrt(trace_cov / n)
    assert abs(result["trace_cov"] - trace_cov) < tol_trace
    assert abs(result["grad_sqnorm_unbiased"] - grad_sqnorm) < tol_grad
    rel = tol_trace / trace_cov + tol_grad / grad_sqnorm
    assert result["b_simple"] == pytest.approx(trace_cov / grad_sqnorm, rel=rel)


def test_deviations_and_cheap_estimator_match_their_expectations():
    rows, w = regression_sample(n=200, d=5, noise=1.0, delta_norm=0.5, seed=3)
    b, k = 8, 3000
    analysis = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=b,
        num_batches=k,
        eta=0.8,
        seed=7,
        loss_fn=squared_loss,
        chunk_size=200,
    )
    s = analysis.summary
    dev_sq = torch.tensor([r["deviation_sq"] for r in analysis.per_batch], dtype=torch.float64)
    # Without replacement within a batch: E‖g_B − ∇F‖² = tr Σ (1 − b/n) / b.
    expected = s["trace_cov"] * (1 - b / 200) / b
    assert s["expected_sq_deviation"] == pytest.approx(expected, rel=1e-12)
    tolerance = 4 * float(dev_sq.std()) / math.sqrt(k)
    assert abs(s["mean_sq_deviation"] - expected) < tolerance
    # The cheap estimator: b/(k−1) Σ‖g_B − mean‖², expectation tr Σ (1 − b/n).
    cheap = s["cheap"]
    assert cheap["groups"] == k and cheap["samples"] == k * b
    assert cheap["expected_trace_cov"] == pytest.approx(s["trace_cov"] * (1 - b / 200))
    assert abs(cheap["trace_cov"] - cheap["expected_trace_cov"]) < b * tolerance
    # Its norm-test batch uses the pooled batch gradient, as the engine's test.
    assert cheap["norm_test_batch"] == pytest.approx(
        cheap["trace_cov"] / (0.8**2 * cheap["batch_grad_sqnorm"]), rel=1e-12
    )
    rows_deviation = [r["deviation"] for r in analysis.per_batch]
    assert s["mean_deviation"] == pytest.approx(sum(rows_deviation) / k, rel=1e-12)
    assert s["rms_deviation"] == pytest.approx(math.sqrt(s["mean_sq_deviation"]), rel=1e-12)


def test_expected_deviation_formula_against_every_subset():
    # Brute force over all C(n, b) batches of a small sample: the exact mean of
    # ‖g_B − ∇F‖² equals the reported tr Σ (1 − b/n) / b.
    rows, w = regression_sample(n=9, d=3, noise=0.7, delta_norm=0.5, seed=4)
    g = closed_form_grads(rows, w)
    full = g.mean(0)
    for b in (1, 2, 4, 9):
        subsets = list(itertools.combinations(range(9), b))
        brute = sum(float(((g[list(s)].mean(0) - full) ** 2).sum()) for s in subsets)
        brute /= len(subsets)
        s = analyse_gradient_variance(
            LinearRegression(w),
            rows,
            batch_size=b,
            num_batches=2,
            eta=1.0,
            seed=0,
            loss_fn=squared_loss,
        ).summary
        assert s["expected_sq_deviation"] == pytest.approx(brute, rel=1e-10, abs=1e-15)
    # b = n: every batch is the whole sample, so it has no deviation at all.
    assert s["mean_deviation"] == pytest.approx(0.0, abs=1e-12)


def test_rejects_bad_settings():
    rows, w = regression_sample(n=10, d=2, noise=1.0, delta_norm=0.1, seed=5)
    model = LinearRegression(w)
    with pytest.raises(ValueError, match="batch_size"):
        analyse_gradient_variance(
            model, rows, batch_size=11, num_batches=4, eta=1.0, seed=0, loss_fn=squared_loss
        )
    with pytest.raises(ValueError, match="num_batches"):
        analyse_gradient_variance(
            model, rows, batch_size=2, num_batches=1, eta=1.0, seed=0, loss_fn=squared_loss
        )


def test_language_model_figures_agree_with_the_exact_reference():
    from adloco.algo.exact import exact_estimate, per_sample_grads
    from adloco.model.llama import build_model

    model = build_model(load_config(REPO / "config" / "test.yaml").model, 97, 12, seed=0)
    sample = torch.randint(97, (10, 12), generator=torch.Generator().manual_seed(0))
    s = analyse_gradient_variance(
        model, sample, batch_size=3, num_batches=4, eta=0.8, seed=0, chunk_size=4
    ).summary
    reference = exact_estimate(per_sample_grads(model, sample))
    assert s["trace_cov"] == pytest.approx(reference.trace_cov, rel=1e-5)
    # The token-weighted full gradient equals the mean of per-sequence gradients.
    assert s["grad_sqnorm"] == pytest.approx(reference.batch_grad_sqnorm, rel=1e-5)
    assert s["per_sample_mean_shift_sqnorm"] < 1e-8 * s["grad_sqnorm"]
    assert s["tokens_per_sequence"] == 11
    assert s["parameters"] == sum(p.numel() for p in model.parameters())


def test_analysis_compares_the_reductions_on_its_own_batch_gradients():
    rows, w = regression_sample(n=60, d=4, noise=0.8, delta_norm=0.5, seed=6)
    b, k, seed = 5, 12, 3
    analysis = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=b,
        num_batches=k,
        eta=0.8,
        seed=seed,
        loss_fn=squared_loss,
        chunk_size=60,
        nodes=2,
        groups_per_node=3,
        draws=200,
    )
    # The stage's batches, drawn again: the comparison must use exactly those gradients.
    generator = torch.Generator().manual_seed(seed)
    g = closed_form_grads(rows, w)
    batches = np.stack(
        [g[torch.randperm(60, generator=generator)[:b]].mean(0).numpy() for _ in range(k)]
    )
    summary, draw_rows = compare_reductions(
        batches @ batches.T, group_size=b, nodes=2, groups_per_node=3, draws=200, eta=0.8, seed=4
    )
    assert len(analysis.draws) == 200
    for mine, theirs in zip(analysis.draws, draw_rows, strict=True):
        for key, value in theirs.items():
            assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-12), key
    got = analysis.summary["scalar_vs_pooled"]
    assert got["std_ratio"]["trace_cov"] == pytest.approx(summary["std_ratio"]["trace_cov"], 1e-4)

    # Skipped, with the reason, when a draw needs more groups than there are batches.
    skipped = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=b,
        num_batches=4,
        eta=0.8,
        seed=seed,
        loss_fn=squared_loss,
        nodes=2,
        groups_per_node=3,
    )
    assert "num_batches" in skipped.summary["scalar_vs_pooled"]["skipped"]
    assert skipped.draws == []


def test_summary_starts_with_the_settings_in_order():
    rows, w = regression_sample(n=12, d=2, noise=1.0, delta_norm=0.3, seed=8)
    s = analyse_gradient_variance(
        LinearRegression(w),
        rows,
        batch_size=3,
        num_batches=4,
        eta=0.6,
        seed=9,
        loss_fn=squared_loss,
    ).summary
    assert list(s.items())[:5] == [
        ("eval_sequences", 12),
        ("batch_size", 3),
        ("num_batches", 4),
        ("seed", 9),
        ("eta", 0.6),
    ]
    assert list(s)[-2:] == ["scalar_vs_pooled", "parameters"]
    assert s["parameters"] == 2


@pytest.mark.parametrize("training", [True, False])
def test_analysis_restores_the_models_mode(training):
    rows, w = regression_sample(n=8, d=2, noise=1.0, delta_norm=0.3, seed=9)
    model = LinearRegression(w).train(training)
    seen = []
    original = model.forward

    def forward(input_ids, use_cache=False):
        seen.append(model.training)
        return original(input_ids, use_cache=use_cache)

    model.forward = forward
    analyse_gradient_variance(
        model, rows, batch_size=2, num_batches=3, eta=1.0, seed=0, loss_fn=squared_loss
    )
    # Eval mode while measuring (no dropout), the caller's mode after.
    assert seen and not any(seen)
    assert model.training is training


def test_check_sizes_names_the_setting():
    check_sizes(2, 2, 2)  # the smallest accepted
    with pytest.raises(ValueError, match="variance.eval_sequences must be >= 2, got 1"):
        check_sizes(1, 1, 2)
    with pytest.raises(ValueError, match=r"variance.batch_size must be in \[1, 5\], got 0"):
        check_sizes(5, 0, 2)
    with pytest.raises(ValueError, match="variance.num_batches must be >= 2, got 1"):
        check_sizes(5, 2, 1)


def test_comparison_skipped_gives_each_reason():
    assert comparison_skipped(2, 3, 6, 1000) is None
    assert comparison_skipped(None, 3, 6, 10) == "no cluster given (nodes, groups_per_node)"
    assert comparison_skipped(2, 1, 6, 10) == (
        "needs nodes >= 1 and groups_per_node >= 2, got 2 and 1"
    )
    assert comparison_skipped(0, 2, 6, 10).startswith("needs nodes >= 1")
    assert comparison_skipped(3, 3, 8, 10) == (
        "nodes x groups_per_node = 9 groups per draw, more than the 8 batch gradients "
        "(variance.num_batches)"
    )
    # 10 gradients of 2^28 float32s: 10 GiB.
    assert comparison_skipped(2, 2, 10, 2**28) == (
        f"storing 10 gradients of {2**28} floats takes 10.0 GiB, more than 2 GiB"
    )
    # Exactly the limit is allowed.
    assert comparison_skipped(2, 2, 4, GRAM_MAX_BYTES // 16) is None
    assert comparison_skipped(2, 2, 4, GRAM_MAX_BYTES // 16 + 1) is not None


def test_noise_scale_summary_by_hand():
    s = noise_scale_summary(grad_sqnorm=2.0, trace_cov=8.0, n=4, eta=0.5)
    assert s["grad_sqnorm_unbiased"] == 0.0  # 2 − 8/4
    assert s["b_simple"] == 4.0
    assert s["norm_test_batch"] == 16.0  # 8 / (0.25 · 2)
    assert s["norm_test_batch_ceil"] == 16
    assert s["trace_cov_divisor"] == "n - 1"
    flat = noise_scale_summary(grad_sqnorm=0.0, trace_cov=8.0, n=4, eta=0.5)
    assert flat["b_simple"] is None and flat["norm_test_batch"] is None
    assert flat["norm_test_batch_ceil"] is None and flat["grad_sqnorm_unbiased"] == -2.0


def test_deviation_summary_by_hand():
    per_batch = [{"deviation": d} for d in (1.0, 2.0, 3.0, 6.0)]
    s = deviation_summary(per_batch, trace_cov=12.0, n=8, batch_size=2)
    assert s["finite_population_factor"] == 0.75
    assert s["expected_sq_deviation"] == 4.5  # 12 · 0.75 / 2
    assert s["theoretical_rms_deviation"] == pytest.approx(math.sqrt(4.5))
    assert s["mean_deviation"] == 3.0
    assert s["mean_sq_deviation"] == 12.5  # (1 + 4 + 9 + 36) / 4
    assert s["rms_deviation"] == pytest.approx(math.sqrt(12.5))
    # Centred: −2, −1, 0, 3; m2 = 3.5, m4 = 24.5; 24.5 / 3.5² − 3 = −1.
    assert s["deviation_excess_kurtosis"] == pytest.approx(-1.0)


def test_cheap_summary_without_an_estimate_is_empty():
    assert cheap_summary(None, 1.0, 0.5) == {}
