"""Gradient-variance analysis: how far batch gradients fall from the full gradient.

``adloco variance`` runs after tokenization, beside calibration, and feeds the
report. On one model (the seeded initial model, or a saved one) it takes a
fixed sample of ``variance.eval_sequences`` training sequences, computes their
full gradient ∇F (token-weighted mean), the exact per-sample variance tr Σ from
per-sequence gradients (:func:`adloco.algo.exact.per_sample_grads`), then
``variance.num_batches`` batch gradients g_B of ``variance.batch_size``
sequences drawn from the sample, their deviations ‖g_B − ∇F‖, and the cheap
estimate the training engine would form from those batch gradients
(:mod:`adloco.algo.stats`). From these: the noise scale B_simple = tr Σ / ‖∇F‖²
and the batch the norm test asks for. Finally it measures how much noisier the
engine's default ``stats_reduce: scalars`` estimate is than the pooled
``vector`` one: over many draws of ``nodes × groups_per_node`` of the batch
gradients spread over the cluster's node slots, both estimators on the same
groups (:func:`compare_reductions`, from the batch gradients' Gram matrix).
The core, :func:`analyse_gradient_variance`, takes any model, loss and sample,
so it is tested on a linear model whose figures have closed forms. Formulas: ``docs/variance.md``.
"""

from __future__ import annotations

import argparse
import io
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from transformers import AutoModelForCausalLM

from adloco.algo.batch_tests import requested_global_batch
from adloco.algo.exact import per_sample_grads
from adloco.algo.stats import (
    GradientStatsAccumulator,
    GroupStats,
    NodeScalars,
    estimate,
    estimate_scalars,
)
from adloco.config import load_config_dict, model_config
from adloco.data.reader import TokenData
from adloco.io import atomic_dir, naming_output, write_json_atomic
from adloco.model import build_model, causal_lm_loss
from adloco.pretrain import base_model_config

log = logging.getLogger(__name__)

SAMPLING = (
    "each batch: batch_size distinct sequences drawn uniformly without replacement from the "
    "eval_sequences sample; batches drawn independently of each other"
)
NORM_USED = (
    "grad_sqnorm: squared norm of the full gradient of the fixed sample (exact, not an estimate)"
)


# The scalar-vs-pooled comparison: random draws of groups from the batch
# gradients, and the most memory the stored batch gradients may take.
SPREAD_DRAWS = 4000
# What this stage writes into its folder (adloco.io.check_replaceable).
VARIANCE_FILES = ("variance.json", "per_batch.csv", "draws.csv", "deviations.png")
GRAM_MAX_BYTES = 2 * 1024**3
DRAWS_SAMPLING = (
    "each draw: nodes x groups_per_node distinct batch gradients of the num_batches, drawn "
    "uniformly without replacement, groups_per_node consecutive ones to each node; draws "
    "independent of each other (numpy default_rng(seed + 1))"
)
SPREAD_QUANTITIES = ("trace_cov", "grad_sqnorm", "batch_grad_sqnorm", "norm_test_batch")


@dataclass
class VarianceAnalysis:
    """Figures of one analysis; ``per_batch`` has one dict per batch gradient,
    ``draws`` one per draw of the scalar-vs-pooled comparison (empty when skipped)."""

    summary: dict[str, Any]
    per_batch: list[dict[str, Any]] = field(default_factory=list)
    draws: list[dict[str, Any]] = field(default_factory=list)


def model_loss(model, rows, loss_fn: Callable) -> tuple[Any, Any]:
    """(summed loss, predicted-token count) of ``rows``, the model called as in training."""
    logits = model(input_ids=rows, use_cache=False).logits
    return loss_fn(logits, rows)


def _grads(model, params: list, rows, loss_fn: Callable) -> tuple[list, float, int]:
    """Token-weighted mean gradient of ``rows``, their mean loss and token count."""
    loss_sum, n_tokens = model_loss(model, rows, loss_fn)
    count = int(n_tokens)
    if count < 1:
        raise ValueError("a batch has no predicted tokens")
    grads = torch.autograd.grad(loss_sum / count, params)
    return [g.detach() for g in grads], float(loss_sum.detach()) / count, count


def _sqnorm(tensors: list) -> float:
    return float(sum(t.double().pow(2).sum() for t in tensors))


def _sqdist(a: list, b: list) -> float:
    return float(sum((x.double() - y.double()).pow(2).sum() for x, y in zip(a, b, strict=True)))


def draw_partitions(
    num_groups: int, nodes: int, groups_per_node: int, draws: int, seed: int
) -> Any:
    """Indices [draws, nodes, groups_per_node]: per draw, distinct groups dealt to nodes."""
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((draws, num_groups)), axis=1)
    return order[:, : nodes * groups_per_node].reshape(draws, nodes, groups_per_node)


def compare_reductions(
    gram,
    *,
    group_size: int,
    nodes: int,
    groups_per_node: int,
    draws: int,
    eta: float,
    seed: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scalar-mode and pooled estimates on the same random draws of groups.

    ``gram`` [K, K]: inner products ⟨g_i, g_j⟩ of K group mean gradients, each
    of ``group_size`` samples. Each draw deals ``nodes × groups_per_node`` of
    the K to the nodes (:func:`draw_partitions`); the pooled estimate
    (:func:`adloco.algo.stats.estimate`, ``stats_reduce: vector``) sees all of
    them, the scalar one (:func:`adloco.algo.stats.estimate_scalars`) each
    node's own. Returns the summary (mean, std and relative std of tr Σ̂,
    ‖∇F‖²̂, ‖ḡ‖²̂ and the norm-test batch for each, and std ratios) and one row
    per draw.
    """
    gram = np.asarray(gram, dtype=np.float64)
    k_all, n = nodes * groups_per_node, group_size
    index = draw_partitions(gram.shape[0], nodes, groups_per_node, draws, seed)
    diag = np.diag(gram)[index]  # [R, M, k]: ‖g_i‖²
    blocks = gram[index[:, :, :, None], index[:, :, None, :]]  # [R, M, k, k]
    node_sum_n_sqnorm = n * diag.sum(2)  # Σ n‖g_i‖² per node
    node_pooled = n * n * blocks.sum((2, 3))  # ‖S_m‖² per node
    flat = index.reshape(draws, k_all)
    pooled = n * n * gram[flat[:, :, None], flat[:, None, :]].sum((1, 2))  # ‖S‖²
    rows, floored = [], 0
    for r in range(draws):
        sum_n_sqnorm = float(node_sum_n_sqnorm[r].sum())
        vector = estimate(GroupStats(k_all, k_all * n, sum_n_sqnorm, float(pooled[r])))
        total = NodeScalars()
        for m in range(nodes):
            node = GroupStats(
                groups_per_node,
                groups_per_node * n,
                float(node_sum_n_sqnorm[r, m]),
                float(node_pooled[r, m]),
            )
            total = total + NodeScalars.of_node(node)
        scalar = estimate_scalars(total)
        floored += scalar.grad_sqnorm < 0  # ‖ḡ‖²̂ held at tr Σ̂ / N
        row: dict[str, Any] = {"draw": r}
        for name, est in (("pooled", vector), ("scalars", scalar)):
            batch = requested_global_batch("norm", est, eta=eta, vartheta=1.0, nu=1.0)
            row[f"trace_cov_{name}"] = est.trace_cov
            row[f"grad_sqnorm_{name}"] = est.grad_sqnorm
            row[f"batch_grad_sqnorm_{name}"] = est.batch_grad_sqnorm
            row[f"norm_test_batch_{name}"] = math.nan if batch is None else batch
        rows.append(row)
    spread: dict[str, Any] = {}
    for name in ("pooled", "scalars"):
        figures = {}
        for quantity in SPREAD_QUANTITIES:
            values = np.array([row[f"{quantity}_{name}"] for row in rows])
            values = values[np.isfinite(values)]
            mean, std = float(values.mean()), float(values.std(ddof=1))
            q1, median, q3 = (float(v) for v in np.percentile(values, [25, 50, 75]))
            figures[quantity] = {
                "mean": mean,
                "std": std,
                "rel_std": std / abs(mean) if mean != 0 else None,
                "median": median,
                "iqr": q3 - q1,
                "rel_iqr": (q3 - q1) / abs(median) if median != 0 else None,
            }
        spread[name] = figures
    summary = {
        "nodes": nodes,
        "groups_per_node": groups_per_node,
        "group_size": n,
        "groups": k_all,
        "samples": k_all * n,
        "draws": draws,
        "sampling": DRAWS_SAMPLING,
        "pooled": spread["pooled"],
        "scalars": spread["scalars"],
        # std(scalars) / std(pooled): how much noisier the default estimate is.
        "std_ratio": {
            q: spread["scalars"][q]["std"] / spread["pooled"][q]["std"]
            if spread["pooled"][q]["std"] > 0
            else None
            for q in SPREAD_QUANTITIES
        },
        # iqr(scalars) / iqr(pooled): the same, robust to the ratio's long tail.
        "iqr_ratio": {
            q: spread["scalars"][q]["iqr"] / spread["pooled"][q]["iqr"]
            if spread["pooled"][q]["iqr"] > 0
            else None
            for q in SPREAD_QUANTITIES
        },
        # sqrt((K − 1)/(K − M)): the std ratio of tr Σ̂ for Gaussian gradients.
        "gaussian_std_ratio_trace_cov": math.sqrt((k_all - 1) / (k_all - nodes)),
        # The std ratio of tr Σ̂ for fresh i.i.d. groups distributed as the pool
        # (U-statistic variances with the pool's ζ1, ζ2; docs/algorithms.md).
        "iid_std_ratio_trace_cov": trace_std_ratio_iid(gram, nodes, groups_per_node),
        # Draws whose scalar ‖∇F‖²̂ < 0, where ‖ḡ‖²̂ is held at tr Σ̂ / N.
        "scalar_grad_sqnorm_negative": int(floored),
    }
    return summary, rows


def trace_std_ratio_iid(gram, nodes: int, groups_per_node: int) -> float | None:
    """std(scalar tr Σ̂) / std(pooled tr Σ̂) for i.i.d. groups distributed as the pool.

    Both estimators are n times U-statistics of the kernel h(x, y) = ‖x − y‖²/2
    over the groups (pooled: one of K = M·k groups; scalars: the mean of M of k
    groups each), so Var = 2 (2 (K − 2) ζ1 + ζ2) / (K (K − 1)) and
    Var = 2 (2 (k − 2) ζ1 + ζ2) / (M k (k − 1)), with ζ1 = Var E[h(x, y) | x]
    and ζ2 = Var h(x, y), here the plug-in values over the pool's pairs.
    """
    gram = np.asarray(gram, dtype=np.float64)
    diag = np.diag(gram)
    half_sq = (diag[:, None] + diag[None, :] - 2 * gram) / 2
    pool = gram.shape[0]
    zeta2 = float(half_sq[np.triu_indices(pool, 1)].var())
    zeta1 = float((half_sq.sum(1) / (pool - 1)).var())
    k_all, k = nodes * groups_per_node, groups_per_node
    pooled = (2 * (k_all - 2) * zeta1 + zeta2) / (k_all * (k_all - 1))
    scalar = (2 * (k - 2) * zeta1 + zeta2) / (nodes * k * (k - 1))
    return math.sqrt(scalar / pooled) if pooled > 0 else None


def _gram(stored) -> Any:
    """X Xᵀ of the stored flat gradients, in float64, a block of columns at a time."""
    out = torch.zeros(stored.shape[0], stored.shape[0], dtype=torch.float64)
    step = 1 << 16
    for start in range(0, stored.shape[1], step):
        block = stored[:, start : start + step].double()
        out += block @ block.T
    return out.numpy()


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
    :func:`adloco.model.causal_lm_loss`; the model is called as
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
    n = int(sample.shape[0])
    _check_sizes(n, batch_size, num_batches)
    was_training = model.training
    # Eval mode: no dropout, so the spread comes from the data alone.
    model.eval()
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    dim = sum(p.numel() for p in params)

    full = full_gradient(model, params, sample, loss_fn, chunk_size)
    trace_cov, mean_shift_sq = per_sample_trace(model, sample, full.grad, loss_fn, chunk_size)
    skipped = comparison_skipped(nodes, groups_per_node, num_batches, dim)
    batches = batch_gradients(
        model,
        params,
        sample,
        full.grad,
        loss_fn,
        batch_size=batch_size,
        num_batches=num_batches,
        seed=seed,
        store=skipped is None,
    )
    model.train(was_training)

    draw_rows: list[dict[str, Any]] = []
    if batches.stored is None:
        reductions: dict[str, Any] = {"skipped": skipped}
    else:
        reductions, draw_rows = compare_reductions(
            _gram(batches.stored),
            group_size=batch_size,
            nodes=nodes,
            groups_per_node=groups_per_node,
            draws=draws,
            eta=eta,
            seed=seed + 1,
        )
        batches.stored = None

    summary = {
        "eval_sequences": n,
        "batch_size": batch_size,
        "num_batches": num_batches,
        "seed": seed,
        "eta": eta,
        "tokens_per_sequence": full.tokens_per_row,
        "sampling": SAMPLING,
        "full_loss": full.loss,
        **_noise_scale_summary(full.sqnorm, trace_cov, n, eta),
        **_deviation_summary(batches.per_batch, trace_cov, n, batch_size),
        "per_sample_mean_shift_sqnorm": mean_shift_sq,
        "cheap": _cheap_summary(batches.cheap, trace_cov * (1.0 - batch_size / n), eta),
        "scalar_vs_pooled": reductions,
        "parameters": dim,
    }
    return VarianceAnalysis(summary, batches.per_batch, draw_rows)


def _check_sizes(n: int, batch_size: int, num_batches: int) -> None:
    if n < 2:
        raise ValueError(f"variance.eval_sequences must be >= 2, got {n}")
    if not 1 <= batch_size <= n:
        raise ValueError(f"variance.batch_size must be in [1, {n}], got {batch_size}")
    if num_batches < 2:
        raise ValueError(f"variance.num_batches must be >= 2, got {num_batches}")


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
        grads, loss, count = _grads(model, params, rows, loss_fn)
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
    return FullGradient(full, _sqnorm(full), loss_total / tokens_total, tokens_per_row)


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
    mean_shift_sq = _sqnorm(shifted_sum) / n**2
    return max((shifted_sq - n * mean_shift_sq) / (n - 1), 0.0), mean_shift_sq


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
        g_b, loss, _ = _grads(model, params, sample[index.to(sample.device)], loss_fn)
        # float32, as the engine's gradients: the accumulator works in float32.
        accumulator.add_group([g.float() for g in g_b], batch_size)
        if stored is not None:
            stored[k] = torch.cat([g.detach().reshape(-1).float().cpu() for g in g_b])
        deviation_sq = _sqdist(g_b, full)
        per_batch.append(
            {
                "batch": k,
                "deviation": math.sqrt(deviation_sq),
                "deviation_sq": deviation_sq,
                "batch_grad_sqnorm": _sqnorm(g_b),
                "loss": loss,
            }
        )
    return BatchGradients(per_batch, estimate(accumulator.finalize()), stored)


def _noise_scale_summary(grad_sqnorm: float, trace_cov: float, n: int, eta: float) -> dict:
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


def _deviation_summary(
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


def _cheap_summary(cheap, expected_trace_cov: float, eta: float) -> dict[str, Any]:
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


def plot_deviations(per_batch: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    """Histogram of ‖g_B − ∇F‖ with the mean and the theoretical RMS marked, as PNG."""
    matplotlib.use("Agg")
    deviations = [row["deviation"] for row in per_batch]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    sns.histplot(deviations, ax=ax, bins=min(30, max(5, len(deviations) // 3)), color="#4c72b0")
    ax.axvline(summary["mean_deviation"], color="black", linestyle="-", label="mean")
    ax.axvline(summary["rms_deviation"], color="grey", linestyle=":", label="RMS (measured)")
    ax.axvline(
        summary["theoretical_rms_deviation"],
        color="#c44e52",
        linestyle="--",
        label="√(tr Σ (1 − b/n) / b), expected RMS",
    )
    ax.set_xlabel("‖g_B − ∇F‖")
    ax.set_ylabel("batches")
    ax.set_title(
        f"{summary['num_batches']} batches of {summary['batch_size']} from "
        f"{summary['eval_sequences']} sequences",
        fontsize=10,
    )
    ax.legend()
    fig.tight_layout()
    # Drawn in memory, then written: a failed write (a full disk) is then an
    # OSError naming the file, where Pillow writing to the file itself fails
    # with an AttributeError of its own.
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=120)
    finally:
        plt.close(fig)
    with naming_output(path):
        path.write_bytes(buffer.getvalue())


def write_outputs(analysis: VarianceAnalysis, out_dir: str | Path) -> None:
    """variance.json, per_batch.csv, draws.csv and deviations.png: the folder, atomically.

    All of them or none: a failed write (a full disk) leaves the previous
    folder as it was, never new tables beside an old variance.json. draws.csv
    (one row per draw of the scalar-vs-pooled comparison) is written only when
    the comparison ran.
    """
    tables = {"per_batch.csv": analysis.per_batch, "draws.csv": analysis.draws}
    with atomic_dir(out_dir, VARIANCE_FILES, "--out") as tmp:
        for name, rows in tables.items():
            if rows:
                with naming_output(tmp / name):
                    pd.DataFrame(rows).to_csv(tmp / name, index=False)
        plot_deviations(analysis.per_batch, analysis.summary, tmp / "deviations.png")
        write_json_atomic(tmp / "variance.json", analysis.summary)


def load_model(model_dir: str | None, config: dict, vocab_size: int, seq_len_tokens: int):
    """The saved model in ``model_dir``, or the seeded initial model of the config."""
    if model_dir is None:
        return build_model(
            model_config(config["model"]), vocab_size, seq_len_tokens, config["seed"]
        )
    if not (Path(model_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: not a saved model folder (no config.json)")
    # float32: gradient statistics are sums of many small squares.
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if model.config.vocab_size < vocab_size:
        raise ValueError(
            f"{model_dir}: vocabulary {model.config.vocab_size}, the data needs {vocab_size}"
        )
    return model


def run(args: argparse.Namespace) -> int:
    config = load_config_dict(args.config)
    settings = config["variance"]
    if args.chunk_size < 1:
        raise ValueError(f"--chunk-size must be >= 1, got {args.chunk_size}")
    data = TokenData.open(args.data)
    train = data.split("train")
    n = settings["eval_sequences"]
    if n > len(train):
        raise ValueError(
            f"variance.eval_sequences is {n}, the train split of {args.data} has {len(train)}"
        )
    rng = np.random.default_rng(config["seed"])
    indices = np.sort(rng.choice(len(train), size=n, replace=False))
    device = torch.device(args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.model is None and config["model"]["source"] == "base":
        args.model = base_model_config(config, getattr(args, "base", None))["name"]
    model = load_model(args.model, config, data.vocab_size, data.seq_len_tokens).to(device)
    # The comparison of stats_reduce modes: one trainer on every slot of the
    # cluster, one statistics block per slot (stats_steps x stats_microbatches groups).
    slots = config["cluster"]["nodes_per_device"] * sum(
        d.get("count", 1) for d in config["cluster"]["devices"]
    )
    analysis = analyse_gradient_variance(
        model,
        train.get(indices).to(device),
        batch_size=settings["batch_size"],
        num_batches=settings["num_batches"],
        eta=settings["eta"],
        seed=config["seed"],
        chunk_size=args.chunk_size,
        nodes=slots,
        groups_per_node=config["train"]["stats_steps"] * config["train"]["stats_microbatches"],
    )
    analysis.summary.update(
        model=args.model or f"initial model ({config['model']['source']}, seed {config['seed']})",
        data=str(args.data),
        seq_len_tokens=data.seq_len_tokens,
        vocab_size=data.vocab_size,
        torch_device=str(device),
        torch_version=torch.__version__,
    )
    write_outputs(analysis, args.out)
    s = analysis.summary
    log.info(
        "tr Σ %.4g, ‖∇F‖² %.4g, B_simple %.4g, norm-test batch %.4g",
        s["trace_cov"],
        s["grad_sqnorm"],
        s["b_simple"] or float("nan"),
        s["norm_test_batch"] or float("nan"),
    )
    ratio = s["scalar_vs_pooled"].get("std_ratio")
    if ratio:
        log.info(
            "stats_reduce scalars vs vector, std ratio: tr Σ̂ %.3g, norm-test batch %.3g",
            ratio["trace_cov"] or float("nan"),
            ratio["norm_test_batch"] or float("nan"),
        )
    else:
        log.info("stats_reduce comparison skipped: %s", s["scalar_vs_pooled"]["skipped"])
    return 0
