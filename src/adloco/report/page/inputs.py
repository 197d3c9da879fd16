"""The page's sections on the inputs: the variance stage and the calibration of the devices.

Part of :func:`adloco.report.page.render.render_page`; the headings and fixed prose
are ``templates/variance.html`` and ``templates/calibration.html``.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from adloco.report.analysis.regime_sweep import ClockModel
from adloco.report.inputs.results import Calibration, Variance
from adloco.report.page.parts import (
    curve_text,
    esc,
    figure,
    number,
    table,
)
from adloco.report.page.template import render

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
    return render(
        "variance",
        folder=esc(variance.folder),
        table=table(["quantity", "value", "unit"], rows, numeric=(1,)),
        other=(
            Markup("<p class='note'>Other numeric fields of variance.json: {}.</p>").format(
                ", ".join(other)
            )
            if other
            else ""
        ),
        notes=Markup("").join(Markup("<p class='note'>{}.</p>").format(n) for n in variance.notes),
        deviations=figure(deviations, "deviations", "deviations.png not found"),
        histograms=figure(histograms, "per_batch", "per_batch.csv missing or not numeric"),
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
    return render(
        "calibration",
        table=table(header, rows, numeric=range(2, len(header))),
        curves=table(["clock model", "device", "curve"], curve_rows) if curve_rows else "",
    )
