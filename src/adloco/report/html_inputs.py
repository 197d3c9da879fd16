"""The page's sections on the inputs: the variance stage and the calibration of the devices.

Part of :func:`adloco.report.html.render_page`.
"""

from __future__ import annotations

from typing import Any

from adloco.report.inputs import Calibration, Variance
from adloco.report.page import (
    curve_text,
    esc,
    figure,
    number,
    table,
)
from adloco.report.regimes import ClockModel

# (field path in variance.json, quantity in words, unit)
VARIANCE_FIELDS = [
    ("trace_cov", "per-sample gradient variance tr Σ (exact, over the fixed sample)",
     "squared gradient norm"),
    ("grad_sqnorm", "squared norm of the full gradient ‖∇F‖²", "squared gradient norm"),
    ("b_simple", "noise scale B_simple = tr Σ / ‖∇F‖²", "sequences"),
    ("eta", "norm-test η", "–"),
    ("norm_test_batch", "batch the norm test asks for, tr Σ / (η² ‖∇F‖²)", "sequences"),
    ("cheap.trace_cov", "tr Σ as the engine estimates it (cheap estimator)",
     "squared gradient norm"),
    ("cheap.b_simple", "B_simple from the engine's estimates", "sequences"),
    ("cheap.norm_test_batch", "norm-test batch from the engine's estimates", "sequences"),
    ("scalar_vs_pooled.iqr_ratio.trace_cov",
     "spread of tr Σ reduced as scalars relative to pooled vectors (IQR ratio)", "×"),
    ("full_loss", "loss of the initial model on the fixed sample", "nats per token"),
    ("eval_sequences", "sequences in the fixed sample", "sequences"),
    ("batch_size", "sequences per batch gradient", "sequences"),
    ("num_batches", "batch gradients drawn", "count"),
    ("rms_deviation", "RMS distance of a batch gradient from the full gradient (measured)",
     "gradient norm"),
    ("theoretical_rms_deviation", "the same, expected from tr Σ", "gradient norm"),
    ("deviation_excess_kurtosis", "excess kurtosis of those distances", "–"),
]  # fmt: skip


def _lookup(obj: dict, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def variance_section(variance: Variance, deviations: bytes | None, histograms: bytes | None) -> str:
    rows = []
    for path, words, unit in VARIANCE_FIELDS:
        value = _lookup(variance.summary, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append([esc(words), number(value), esc(unit)])
    shown = {p.split(".")[0] for p, _, _ in VARIANCE_FIELDS if "." not in p}
    other = sorted(
        k
        for k, v in variance.summary.items()
        if k not in shown and isinstance(v, (int, float)) and not isinstance(v, bool)
    )
    notes = "".join(f"<p class='note'>{esc(n)}.</p>" for n in variance.notes)
    return (
        "<h2 id='variance'>Gradient variance at the initial model</h2>"
        f"<p class='note'>From {esc(variance.folder)}: batch gradients compared with the full "
        "gradient of a fixed sample. Gradient norms are Euclidean norms over all parameters of "
        "the gradient of the mean per-token loss.</p>"
        + table(["quantity", "value", "unit"], rows, numeric=(1,))
        + (
            f"<p class='note'>Other numeric fields of variance.json: {esc(', '.join(other))}.</p>"
            if other
            else ""
        )
        + notes
        + figure(
            deviations,
            "deviation histogram",
            "Distances of batch gradients from the full gradient, as the variance stage drew "
            "them: the measured spread should match the one expected from tr Σ.",
            "deviations.png not found",
        )
        + figure(
            histograms,
            "per-batch histograms",
            "Histograms of the per-batch table: look for outliers and skew.",
            "per_batch.csv missing or not numeric",
        )
    )


CALIBRATION_FIELDS = [
    ("kind", "kind", ""),
    ("memory_bytes", "device memory", "bytes"),
    ("budget_bytes", "memory per slot", "bytes"),
    ("raw_max_batch", "largest batch that fits", ""),
    ("max_batch", "max batch (after margin)", ""),
    ("margin", "margin", ""),
    ("seq_len_tokens", "sequence length (tokens)", ""),
    ("model_parameters", "model parameters", ""),
    ("step_time.model", "step-time model", ""),
]


def calibration_section(calibrations: list[Calibration], models: list[ClockModel]) -> str:
    rows = []
    for c in calibrations:
        source = "calibration file" if c.path else "configured max_batch"
        row = [esc(c.device), source]
        for key, _, unit in CALIBRATION_FIELDS:
            row.append(number(_lookup(c.fields, key), unit))
        rows.append(row)
    header = ["device", "source"] + [label for _, label, _ in CALIBRATION_FIELDS]
    curve_rows = []
    for m in models:
        for device, curve in (m.curves or {}).items():
            curve_rows.append([esc(m.label), esc(device), esc(curve_text(curve))])
    return (
        "<h2 id='calibration'>Calibration</h2>"
        "<p class='note'>Largest micro-batch per node slot, as training reads it, and the "
        "step-time curves of the clock models (seconds of one forward and backward pass by "
        "micro-batch, of one optimizer update).</p>"
        + table(header, rows, numeric=range(2, len(header)))
        + (table(["clock model", "device", "curve"], curve_rows) if curve_rows else "")
    )
