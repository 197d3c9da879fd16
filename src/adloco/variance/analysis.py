"""The core of the variance analysis: :func:`analyse_gradient_variance`.

On any model, loss and sample (so it is tested on a linear model whose figures
have closed forms): the full gradient ∇F, the exact per-sample tr Σ, batch
gradients and their deviations, the engine's cheap estimate from them, the
noise scale and the norm-test batch, and the scalar-vs-pooled comparison
(:mod:`adloco.variance.reductions`) on the batch gradients. Formulas:
``docs/variance.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from adloco.algo.batch_tests import requested_global_batch
from adloco.model.llama import causal_lm_loss
from adloco.variance.gradients import (
    BatchGradients,
    FullGradient,
    batch_gradients,
    full_gradient,
    gram,
    per_sample_trace,
    trainable_params,
)
from adloco.variance.reductions import SPREAD_DRAWS, compare_reductions

SAMPLING = (
    "each batch: batch_size distinct sequences drawn uniformly without replacement from the "
    "eval_sequences sample; batches drawn independently of each other"
)
NORM_USED = (
    "grad_sqnorm: squared norm of the full gradient of the fixed sample (exact, not an estimate)"
)
# The most memory the batch gradients stored for the comparison may take.
GRAM_MAX_BYTES = 2 * 1024**3


@dataclass
class VarianceAnalysis:
    """Figures of one analysis; ``per_batch`` has one dict per batch gradient,
    ``draws`` one per draw of the scalar-vs-pooled comparison (empty when skipped)."""

    summary: dict[str, Any]
    per_batch: list[dict[str, Any]] = field(default_factory=list)
    draws: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Settings:
    """The settings of one analysis, as variance.json starts (in this order)."""

    eval_sequences: int
    batch_size: int
    num_batches: int
    seed: int
    eta: float


@dataclass
class Measured:
    """The gradients' figures: ∇F, tr Σ, the per-row mean's shift, the batch gradients."""

    full: FullGradient
    trace_cov: float
    mean_shift_sq: float
    batches: BatchGradients


def analyse_gradient_variance(
    model,
    sample,
    *,
    batch_size: int,
    num_batches: int,
    eta: float,
    seed: int,
    loss_fn: Callable | None = None,
    chunk_size: int = 8,
    nodes: int | None = None,
    groups_per_node: int | None = None,
    draws: int = SPREAD_DRAWS,
) -> VarianceAnalysis:
    """The variance figures of ``model`` on ``sample`` (first dimension: sequences).

    ``loss_fn(logits, rows) -> (loss_sum, n_tokens)`` defaults to
    :func:`adloco.model.llama.causal_lm_loss`; the model is called as
    ``model(input_ids=rows, use_cache=False).logits``. Every row must predict
    the same number of tokens (packed sequences), so that the token-weighted
    full gradient is the mean of the per-row gradients and the per-sample
    variance is the variance of those.

    With ``nodes`` and ``groups_per_node`` the batch gradients are also the
    groups of :func:`compare_reductions` (``draws`` draws); the comparison is
    skipped, with the reason in the summary, when they are fewer than
    ``nodes × groups_per_node``, when ``groups_per_node`` < 2, or when storing
    them would take more than ``GRAM_MAX_BYTES``.
    """
    loss_fn = loss_fn or causal_lm_loss
    settings = Settings(int(sample.shape[0]), batch_size, num_batches, seed, eta)
    check_sizes(settings.eval_sequences, batch_size, num_batches)
    params = trainable_params(model)
    dim = sum(p.numel() for p in params)
    skipped = comparison_skipped(nodes, groups_per_node, num_batches, dim)
    measured = measure(
        model, params, sample, loss_fn, settings, chunk_size=chunk_size, store=skipped is None
    )
    reductions, draw_rows = reduction_figures(
        measured.batches,
        skipped,
        settings,
        nodes=nodes,
        groups_per_node=groups_per_node,
        draws=draws,
    )
    summary = analysis_summary(measured, settings, reductions, dim)
    return VarianceAnalysis(summary, measured.batches.per_batch, draw_rows)


def measure(
    model,
    params: list,
    sample,
    loss_fn: Callable,
    settings: Settings,
    *,
    chunk_size: int,
    store: bool,
) -> Measured:
    """∇F, tr Σ and the batch gradients of ``sample``, the model in eval mode meanwhile.

    Eval mode: no dropout, so the spread comes from the data alone; the model's
    mode is restored after. ``store``: keep the batch gradients (for the comparison).
    """
    was_training = model.training
    model.eval()
    full = full_gradient(model, params, sample, loss_fn, chunk_size)
    trace_cov, mean_shift_sq = per_sample_trace(model, sample, full.grad, loss_fn, chunk_size)
    batches = batch_gradients(
        model,
        params,
        sample,
        full.grad,
        loss_fn,
        batch_size=settings.batch_size,
        num_batches=settings.num_batches,
        seed=settings.seed,
        store=store,
    )
    model.train(was_training)
    return Measured(full, trace_cov, mean_shift_sq, batches)


def reduction_figures(
    batches: BatchGradients,
    skipped: str | None,
    settings: Settings,
    *,
    nodes: int | None,
    groups_per_node: int | None,
    draws: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """:func:`compare_reductions` on the stored batch gradients (seed: the
    analysis's + 1), which it then drops; or ``{"skipped": reason}`` and no draws."""
    if batches.stored is None:
        return {"skipped": skipped}, []
    reductions, draw_rows = compare_reductions(
        gram(batches.stored),
        group_size=settings.batch_size,
        nodes=nodes,
        groups_per_node=groups_per_node,
        draws=draws,
        eta=settings.eta,
        seed=settings.seed + 1,
    )
    batches.stored = None
    return reductions, draw_rows


def analysis_summary(
    measured: Measured, settings: Settings, reductions: dict[str, Any], dim: int
) -> dict[str, Any]:
    """variance.json's figures (without the model, data and device fields the CLI adds)."""
    trace_cov, n, b, eta = (
        measured.trace_cov,
        settings.eval_sequences,
        settings.batch_size,
        settings.eta,
    )
    return {
        **dataclasses.asdict(settings),
        "tokens_per_sequence": measured.full.tokens_per_row,
        "sampling": SAMPLING,
        "full_loss": measured.full.loss,
        **noise_scale_summary(measured.full.sqnorm, trace_cov, n, eta),
        **deviation_summary(measured.batches.per_batch, trace_cov, n, b),
        "per_sample_mean_shift_sqnorm": measured.mean_shift_sq,
        "cheap": cheap_summary(measured.batches.cheap, trace_cov * (1.0 - b / n), eta),
        "scalar_vs_pooled": reductions,
        "parameters": dim,
    }


def check_sizes(n: int, batch_size: int, num_batches: int) -> None:
    """Refuse a sample of fewer than 2, a batch outside [1, n], fewer than 2 batches."""
    if n < 2:
        raise ValueError(f"variance.eval_sequences must be >= 2, got {n}")
    if not 1 <= batch_size <= n:
        raise ValueError(f"variance.batch_size must be in [1, {n}], got {batch_size}")
    if num_batches < 2:
        raise ValueError(f"variance.num_batches must be >= 2, got {num_batches}")


def comparison_skipped(
    nodes: int | None, groups_per_node: int | None, num_batches: int, dim: int
) -> str | None:
    """Why the scalar-vs-pooled comparison cannot run, or None when it can."""
    if nodes is None or groups_per_node is None:
        return "no cluster given (nodes, groups_per_node)"
    if nodes < 1 or groups_per_node < 2:
        return f"needs nodes >= 1 and groups_per_node >= 2, got {nodes} and {groups_per_node}"
    if nodes * groups_per_node > num_batches:
        return (
            f"nodes x groups_per_node = {nodes * groups_per_node} groups per draw, more than "
            f"the {num_batches} batch gradients (variance.num_batches)"
        )
    if num_batches * dim * 4 > GRAM_MAX_BYTES:
        return (
            f"storing {num_batches} gradients of {dim} floats takes "
            f"{num_batches * dim * 4 / 2**30:.1f} GiB, more than {GRAM_MAX_BYTES / 2**30:g} GiB"
        )
    return None


def noise_scale_summary(grad_sqnorm: float, trace_cov: float, n: int, eta: float) -> dict:
    """tr Σ, ‖∇F‖² (and its unbiased version), B_simple and the norm-test batch."""
    safe_ratio = grad_sqnorm > 0
    return {
        "grad_sqnorm": grad_sqnorm,
        "trace_cov": trace_cov,
        "trace_cov_divisor": "n - 1",
        "grad_sqnorm_unbiased": grad_sqnorm - trace_cov / n,
        "b_simple": trace_cov / grad_sqnorm if safe_ratio else None,
        "norm_test_batch": trace_cov / (eta**2 * grad_sqnorm) if safe_ratio else None,
        "norm_test_batch_ceil": (
            math.ceil(trace_cov / (eta**2 * grad_sqnorm)) if safe_ratio else None
        ),
        "norm_used": NORM_USED,
    }


def deviation_summary(
    per_batch: list[dict[str, Any]], trace_cov: float, n: int, batch_size: int
) -> dict:
    """The deviations ‖g_B − ∇F‖ against their expectation tr Σ (1 − b/n) / b."""
    fpc = 1.0 - batch_size / n
    expected_sq_dev = trace_cov * fpc / batch_size
    deviations = torch.tensor([r["deviation"] for r in per_batch], dtype=torch.float64)
    dev_sq = deviations.pow(2)
    centred_dev = deviations - deviations.mean()
    kurtosis = float(centred_dev.pow(4).mean() / centred_dev.pow(2).mean().pow(2) - 3.0)
    return {
        "finite_population_factor": fpc,
        "expected_sq_deviation": expected_sq_dev,
        "theoretical_rms_deviation": math.sqrt(expected_sq_dev),
        "mean_sq_deviation": float(dev_sq.mean()),
        "mean_deviation": float(deviations.mean()),
        "rms_deviation": float(dev_sq.mean().sqrt()),
        "deviation_excess_kurtosis": kurtosis,
    }


def cheap_summary(cheap, expected_trace_cov: float, eta: float) -> dict[str, Any]:
    """The engine's estimate from the batch gradients (empty when it has none)."""
    if cheap is None:
        return {}
    return {
        "trace_cov": cheap.trace_cov,
        "grad_sqnorm": cheap.grad_sqnorm,
        "batch_grad_sqnorm": cheap.batch_grad_sqnorm,
        "groups": cheap.groups,
        "samples": cheap.samples,
        "expected_trace_cov": expected_trace_cov,
        "b_simple": cheap.trace_cov / cheap.grad_sqnorm if cheap.grad_sqnorm > 0 else None,
        "norm_test_batch": requested_global_batch("norm", cheap, eta=eta, vartheta=1.0, nu=1.0),
        "norm_used": "batch_grad_sqnorm: ‖ḡ‖² of the pooled batch gradients, as the engine",
    }
