"""Gradients of the variance analysis: the full gradient of a fixed sample, the
exact per-sample variance, and batch gradients with their deviations.

Every function calls the model as in training,
``model(input_ids=rows, use_cache=False).logits``, and takes the loss
``loss_fn(logits, rows) -> (loss_sum, n_tokens)``; gradients are token-weighted
means. Sums of squares are taken in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from adloco.algo.accumulate import GradientStatsAccumulator
from adloco.algo.estimators import estimate
from adloco.algo.exact import per_sample_grads


def model_loss(model, rows, loss_fn: Callable) -> tuple[Any, Any]:
    """(summed loss, predicted-token count) of ``rows``, the model called as in training."""
    logits = model(input_ids=rows, use_cache=False).logits
    return loss_fn(logits, rows)


def trainable_params(model) -> list:
    """The parameters the gradients are taken of (those that require one), in order."""
    return [p for _, p in model.named_parameters() if p.requires_grad]


def mean_gradient(model, params: list, rows, loss_fn: Callable) -> tuple[list, float, int]:
    """Token-weighted mean gradient of ``rows``, their mean loss and token count."""
    loss_sum, n_tokens = model_loss(model, rows, loss_fn)
    count = int(n_tokens)
    if count < 1:
        raise ValueError("a batch has no predicted tokens")
    grads = torch.autograd.grad(loss_sum / count, params)
    return [g.detach() for g in grads], float(loss_sum.detach()) / count, count


def sqnorm(tensors: list) -> float:
    """Σ‖t‖² over the tensors, in float64."""
    return float(sum(t.double().pow(2).sum() for t in tensors))


def sqdist(a: list, b: list) -> float:
    """Σ‖x − y‖² over the pairs of tensors, in float64."""
    return float(sum((x.double() - y.double()).pow(2).sum() for x, y in zip(a, b, strict=True)))


@dataclass
class FullGradient:
    """∇F of the fixed sample (float64), its squared norm and the sample's mean loss."""

    grad: list
    sqnorm: float
    loss: float
    tokens_per_row: int


def full_gradient(model, params: list, sample, loss_fn: Callable, chunk_size: int) -> FullGradient:
    """Summed loss over all tokens of the sample / their number, chunk by chunk.

    (The reference code divided by the wrong count.) Every row must predict the
    same number of tokens.
    """
    n = int(sample.shape[0])
    full = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    loss_total, tokens_total, tokens_per_row = 0.0, 0, None
    for start in range(0, n, chunk_size):
        rows = sample[start : start + chunk_size]
        grads, loss, count = mean_gradient(model, params, rows, loss_fn)
        torch._foreach_add_(full, [g.double() for g in grads], alpha=float(count))
        loss_total += loss * count
        tokens_total += count
        tokens_per_row = tokens_per_row or count // len(rows)
        if count != tokens_per_row * len(rows):
            raise ValueError(
                "rows predict different numbers of tokens; the analysis needs packed "
                "sequences of equal length"
            )
    torch._foreach_div_(full, float(tokens_total))
    return FullGradient(full, sqnorm(full), loss_total / tokens_total, tokens_per_row)


def per_sample_trace(
    model, sample, full: list, loss_fn: Callable, chunk_size: int
) -> tuple[float, float]:
    """(exact per-sample tr Σ with divisor n − 1, ‖ḡ − ∇F‖² of the per-row gradients' mean).

    Shifting by the full gradient c = ∇F keeps the sum of squares free of
    cancellation: Σ‖g_i − ḡ‖² = Σ‖g_i − c‖² − n‖ḡ − c‖².
    """
    n = int(sample.shape[0])

    def per_row_mean_loss(logits, rows):
        loss_sum, count = loss_fn(logits, rows)
        return loss_sum / count

    shifted_sq = 0.0
    shifted_sum = [torch.zeros_like(f) for f in full]
    for start in range(0, n, chunk_size):
        rows = sample[start : start + chunk_size]
        per_row = per_sample_grads(model, rows, per_row_mean_loss, chunk_size=chunk_size)
        centred = [g.double() - f.unsqueeze(0) for g, f in zip(per_row, full, strict=True)]
        shifted_sq += sum(float(c.pow(2).sum()) for c in centred)
        torch._foreach_add_(shifted_sum, [c.sum(0) for c in centred])
    mean_shift_sq = sqnorm(shifted_sum) / n**2
    return max((shifted_sq - n * mean_shift_sq) / (n - 1), 0.0), mean_shift_sq


@dataclass
class BatchGradients:
    """One row per batch gradient, the engine's cheap estimate from them, and
    (when asked) the gradients themselves, one float32 row each."""

    per_batch: list[dict[str, Any]]
    cheap: Any
    stored: Any = None


def batch_gradients(
    model,
    params: list,
    sample,
    full: list,
    loss_fn: Callable,
    *,
    batch_size: int,
    num_batches: int,
    seed: int,
    store: bool,
) -> BatchGradients:
    """Batch gradients, their deviations from ``full``, and the engine's cheap
    estimator fed with them as groups (all at the same point, as at a round's
    first step)."""
    n = int(sample.shape[0])
    generator = torch.Generator().manual_seed(seed)
    accumulator = GradientStatsAccumulator(params)
    dim = sum(p.numel() for p in params)
    stored = torch.empty(num_batches, dim, dtype=torch.float32) if store else None
    per_batch = []
    for k in range(num_batches):
        index = torch.randperm(n, generator=generator)[:batch_size]
        g_b, loss, _ = mean_gradient(model, params, sample[index.to(sample.device)], loss_fn)
        # float32, as the engine's gradients: the accumulator works in float32.
        accumulator.add_group([g.float() for g in g_b], batch_size)
        if stored is not None:
            stored[k] = torch.cat([g.detach().reshape(-1).float().cpu() for g in g_b])
        deviation_sq = sqdist(g_b, full)
        per_batch.append(
            {
                "batch": k,
                "deviation": math.sqrt(deviation_sq),
                "deviation_sq": deviation_sq,
                "batch_grad_sqnorm": sqnorm(g_b),
                "loss": loss,
            }
        )
    return BatchGradients(per_batch, estimate(accumulator.finalize()), stored)


def gram(stored) -> Any:
    """X Xᵀ of the stored flat gradients, in float64, a block of columns at a time."""
    out = torch.zeros(stored.shape[0], stored.shape[0], dtype=torch.float64)
    step = 1 << 16
    for start in range(0, stored.shape[1], step):
        block = stored[:, start : start + step].double()
        out += block @ block.T
    return out.numpy()
