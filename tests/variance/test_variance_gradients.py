"""Tests of adloco.variance.gradients on linear regression, whose per-sample gradients
are written by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from variance_regression import (
    LinearRegression,
    closed_form_grads,
    regression_sample,
    squared_loss,
)

from adloco.variance.gradients import (
    batch_gradients,
    full_gradient,
    gram,
    mean_gradient,
    per_sample_trace,
    sqdist,
    sqnorm,
    trainable_params,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sqnorm_and_sqdist_by_hand():
    a = [torch.tensor([3.0, 4.0]), torch.tensor([[1.0, 2.0]])]
    b = [torch.tensor([0.0, 4.0]), torch.tensor([[1.0, 0.0]])]
    assert sqnorm(a) == 30.0  # 9 + 16 + 1 + 4
    assert sqdist(a, b) == 13.0  # 9 + 0 + 0 + 4
    with pytest.raises(ValueError):
        sqdist(a, b[:1])


def test_trainable_params_leave_out_frozen_ones():
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    assert trainable_params(model) == [model.weight]


def test_mean_gradient_is_the_mean_of_the_rows_gradients():
    rows, w = regression_sample(n=7, d=3, noise=0.5, delta_norm=0.4, seed=1)
    model = LinearRegression(w)
    grads, loss, count = mean_gradient(model, trainable_params(model), rows, squared_loss)
    assert count == 7
    assert torch.allclose(grads[0], closed_form_grads(rows, w).mean(0), rtol=1e-12)
    residual = rows[:, :-1] @ w - rows[:, -1]
    assert loss == pytest.approx(float(0.5 * (residual**2).mean()), rel=1e-12)

    def no_tokens(prediction, rows):
        return prediction.sum() * 0, torch.tensor(0)

    with pytest.raises(ValueError, match="no predicted tokens"):
        mean_gradient(model, trainable_params(model), rows, no_tokens)


def test_full_gradient_over_uneven_chunks():
    rows, w = regression_sample(n=20, d=4, noise=0.5, delta_norm=0.4, seed=2)
    model = LinearRegression(w)
    # Chunks of 7, 7 and 6 rows: token-weighted, so the plain mean of all 20.
    full = full_gradient(model, trainable_params(model), rows, squared_loss, chunk_size=7)
    mean = closed_form_grads(rows, w).mean(0)
    assert full.grad[0].dtype == torch.float64
    assert torch.allclose(full.grad[0], mean, rtol=1e-12)
    assert full.sqnorm == pytest.approx(float(mean @ mean), rel=1e-12)
    residual = rows[:, :-1] @ w - rows[:, -1]
    assert full.loss == pytest.approx(float(0.5 * (residual**2).mean()), rel=1e-12)
    assert full.tokens_per_row == 1


def test_full_gradient_refuses_rows_of_unequal_tokens():
    rows, w = regression_sample(n=8, d=2, noise=0.5, delta_norm=0.4, seed=3)
    model = LinearRegression(w)

    def one_token_too_many(prediction, rows):
        loss_sum, count = squared_loss(prediction, rows)
        return loss_sum, count + 1

    with pytest.raises(ValueError, match="different numbers of tokens"):
        full_gradient(model, trainable_params(model), rows, one_token_too_many, chunk_size=4)


def test_per_sample_trace_is_the_sample_variance_whatever_the_shift():
    rows, w = regression_sample(n=15, d=3, noise=0.8, delta_norm=0.5, seed=4)
    model = LinearRegression(w)
    g = closed_form_grads(rows, w)
    brute = float(((g - g.mean(0)) ** 2).sum() / 14)
    mean = [g.mean(0)]
    trace, shift = per_sample_trace(model, rows, mean, squared_loss, chunk_size=4)
    assert trace == pytest.approx(brute, rel=1e-10)
    assert shift == pytest.approx(0.0, abs=1e-24)
    # Centred on another point c: the same tr Σ, and ‖ḡ − c‖² reported.
    offset = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    trace, shift = per_sample_trace(model, rows, [mean[0] + offset], squared_loss, chunk_size=4)
    assert trace == pytest.approx(brute, rel=1e-10)
    assert shift == pytest.approx(float(offset @ offset), rel=1e-10)


def test_batch_gradients_against_the_same_batches_by_hand():
    rows, w = regression_sample(n=30, d=3, noise=0.8, delta_norm=0.5, seed=5)
    model = LinearRegression(w)
    params = trainable_params(model)
    g = closed_form_grads(rows, w)
    full = [g.mean(0)]
    got = batch_gradients(
        model, params, rows, full, squared_loss, batch_size=4, num_batches=6, seed=9, store=True
    )
    generator = torch.Generator().manual_seed(9)
    batches = [g[torch.randperm(30, generator=generator)[:4]].mean(0) for _ in range(6)]
    assert [row["batch"] for row in got.per_batch] == list(range(6))
    for row, g_b in zip(got.per_batch, batches, strict=True):
        assert row["deviation_sq"] == pytest.approx(float(((g_b - full[0]) ** 2).sum()), rel=1e-10)
        assert row["deviation"] == pytest.approx(math.sqrt(row["deviation_sq"]), rel=1e-12)
        assert row["batch_grad_sqnorm"] == pytest.approx(float(g_b @ g_b), rel=1e-10)
    assert got.stored.dtype == torch.float32 and got.stored.shape == (6, 3)
    assert torch.equal(got.stored, torch.stack(batches).float())
    # The cheap estimate: b/(K − 1) Σ‖g_B − mean‖² over the K batch gradients.
    stacked = torch.stack(batches)
    cheap = 4 * float(((stacked - stacked.mean(0)) ** 2).sum()) / 5
    assert (got.cheap.groups, got.cheap.samples) == (6, 24)
    assert got.cheap.trace_cov == pytest.approx(cheap, rel=1e-5)
    unstored = batch_gradients(
        model, params, rows, full, squared_loss, batch_size=4, num_batches=6, seed=9, store=False
    )
    assert unstored.stored is None
    assert unstored.per_batch == got.per_batch


def test_gram_over_several_column_blocks():
    # 70 000 columns: two blocks of 65 536.
    stored = torch.randn(5, 70_000, generator=torch.Generator().manual_seed(0))
    x = stored.double().numpy()
    result = gram(stored)
    assert result.dtype == np.float64 and result.shape == (5, 5)
    np.testing.assert_allclose(result, x @ x.T, rtol=1e-12)
