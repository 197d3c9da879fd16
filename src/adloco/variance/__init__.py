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

- :mod:`~adloco.variance.gradients`: ∇F, the exact tr Σ, batch gradients, their Gram matrix;
- :mod:`~adloco.variance.reductions`: the scalar-vs-pooled comparison;
- :mod:`~adloco.variance.analysis`: :func:`analyse_gradient_variance` and its summary;
- :mod:`~adloco.variance.outputs`: the histogram and the output folder;
- :mod:`~adloco.variance.experiment`: the stage's work on the experiment's model and data
  (:func:`analyse`; the command is declared in :mod:`adloco.stages.variance`).
"""

from __future__ import annotations

from adloco.variance.analysis import GRAM_MAX_BYTES, VarianceAnalysis, analyse_gradient_variance
from adloco.variance.experiment import analyse, load_model
from adloco.variance.outputs import VARIANCE_FILES, plot_deviations, write_outputs
from adloco.variance.reductions import (
    SPREAD_DRAWS,
    compare_reductions,
    draw_partitions,
    trace_std_ratio_iid,
)

__all__ = [
    "GRAM_MAX_BYTES",
    "SPREAD_DRAWS",
    "VARIANCE_FILES",
    "VarianceAnalysis",
    "analyse",
    "analyse_gradient_variance",
    "compare_reductions",
    "draw_partitions",
    "load_model",
    "plot_deviations",
    "trace_std_ratio_iid",
    "write_outputs",
]
