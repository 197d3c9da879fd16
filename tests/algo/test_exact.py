"""Exact per-sample gradients (adloco.algo.exact) against single-sample backward passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adloco.algo.exact import exact_estimate, per_sample_grads, per_sample_grads_loop
from adloco.model.llama import batch_loss, build_model, causal_lm_loss


@pytest.fixture(scope="module")
def model_and_ids(tiny_model_cfg):
    model = build_model(tiny_model_cfg, vocab_size=64, seq_len_tokens=8, seed=3)
    ids = torch.randint(0, 64, (6, 8), generator=torch.Generator().manual_seed(3))
    return model, ids


def test_vmap_matches_single_sample_backward(model_and_ids):
    model, ids = model_and_ids
    params = list(model.parameters())  # tied LM head appears once
    vmapped = per_sample_grads(model, ids)
    assert len(vmapped) == len(params)
    for j in range(ids.size(0)):
        model.zero_grad()
        one = ids[j : j + 1]
        loss_sum, n_tokens = causal_lm_loss(model(input_ids=one, use_cache=False).logits, one)
        (loss_sum / n_tokens).backward()
        for g, p in zip(vmapped, params, strict=True):
            torch.testing.assert_close(g[j], p.grad, rtol=1e-4, atol=1e-6)
    model.zero_grad()

    looped = per_sample_grads_loop(model, ids)
    for a, b in zip(vmapped, looped, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_mean_of_per_sample_grads_is_the_batch_gradient(model_and_ids):
    # Packed sequences all predict seq_len - 1 tokens, so the batch's mean
    # token loss is the mean of the sequences' mean losses.
    model, ids = model_and_ids
    per_sample = per_sample_grads(model, ids, chunk_size=2)
    model.zero_grad()
    loss_sum, n_tokens = batch_loss(model, ids)
    (loss_sum / n_tokens).backward()
    for g, p in zip(per_sample, model.parameters(), strict=True):
        torch.testing.assert_close(g.mean(dim=0), p.grad, rtol=1e-4, atol=1e-6)
    model.zero_grad()


def test_exact_estimate_matches_numpy():
    rng = np.random.default_rng(4)
    x = rng.normal(0.5, 1.5, size=(7, 10))
    d = rng.normal(size=10)
    per_sample = [torch.tensor(x[:, :4].reshape(7, 2, 2)), torch.tensor(x[:, 4:])]
    direction = [torch.tensor(d[:4].reshape(2, 2)), torch.tensor(d[4:])]
    est = exact_estimate(per_sample, direction)
    mean = x.mean(axis=0)
    trace = np.var(x, axis=0, ddof=1).sum()
    unit = d / np.linalg.norm(d)
    ip = np.var(x @ unit, ddof=1)
    assert est.trace_cov == pytest.approx(trace, rel=1e-12)
    assert est.batch_grad_sqnorm == pytest.approx(mean @ mean, rel=1e-12)
    assert est.grad_sqnorm == pytest.approx(mean @ mean - trace / 7, rel=1e-12)
    assert est.ip_var == pytest.approx(ip, rel=1e-12)
    assert est.orth_var == pytest.approx(trace - ip, rel=1e-12)
    with pytest.raises(ValueError, match="at least 2"):
        exact_estimate([torch.zeros(1, 3)])
