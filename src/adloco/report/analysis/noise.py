"""The noise scale B_simple along a run, from the batch-test statistics the AdLoCo runs log.

Part of ``adloco report``. The variance stage measures B_simple = tr Σ / ‖∇F‖²
once, at the initial model; it grows as the loss falls, so the batch the
norm test should ask for changes along a run. Every AdLoCo metrics row
whose trainer tested carries ``stats``: ``noise_scale`` when the engine
computed it (null when ‖∇F‖² ≤ 0), else ``trace_cov`` and ``grad_sqnorm``
from which it is computed here; ``smoothed`` (the estimate the test acted
on, when the engine smooths), ``dof`` (degrees of freedom of the estimate),
``requested_global`` (the batch the test asked for) and ``decision``. A
round whose estimate of ‖∇F‖² is not positive has no noise scale: it is
kept as *undetermined*, counted and drawn apart, never dropped.
"""

from __future__ import annotations

import math
from typing import Any

from adloco.formats.metrics import is_number
from adloco.report.analysis.seed_stats import median
from adloco.report.analysis.summary import round_values, run_level_perplexity
from adloco.report.inputs.results import RunSeed

NOISE_COLUMNS = [
    "run",
    "seed",
    "round",
    "trainer",
    "tokens_total",
    "val_perplexity",
    "trace_cov",
    "grad_sqnorm",
    "dof",
    "noise_scale",
    "smoothed_noise_scale",
    "determined",
    "requested_global",
    "requested_batch",
    "decision",
]


def noise_scale(stats: dict[str, Any]) -> float | None:
    """B_simple of one estimate: ``noise_scale`` when logged, else tr Σ / ‖∇F‖² when ‖∇F‖² > 0."""
    if "noise_scale" in stats:
        value = stats["noise_scale"]
        return float(value) if is_number(value) and math.isfinite(value) else None
    trace, grad = stats.get("trace_cov"), stats.get("grad_sqnorm")
    if is_number(trace) and is_number(grad) and grad > 0:
        return float(trace) / float(grad)
    return None


def noise_rows(runs: list[RunSeed], names: list[str]) -> list[dict[str, Any]]:
    """One row per trainer and round that logged statistics, for the runs ``names``."""
    out = []
    for r in runs:
        if r.run not in names:
            continue
        tokens = round_values(r.rows, "tokens_total")
        ppl = run_level_perplexity(r.rows)
        for row in sorted(r.rows, key=lambda x: (x["round"], x["trainer"])):
            stats = row.get("stats")
            if not isinstance(stats, dict):
                continue
            smoothed = stats.get("smoothed")
            value = noise_scale(stats)
            out.append(
                {
                    "run": r.run,
                    "seed": r.seed,
                    "round": row["round"],
                    "trainer": row["trainer"],
                    "tokens_total": tokens.get(row["round"]),
                    "val_perplexity": ppl.get(row["round"]),
                    "trace_cov": stats.get("trace_cov"),
                    "grad_sqnorm": stats.get("grad_sqnorm"),
                    "dof": stats.get("dof"),
                    "noise_scale": value,
                    "smoothed_noise_scale": noise_scale(smoothed)
                    if isinstance(smoothed, dict)
                    else None,
                    "determined": value is not None,
                    "requested_global": stats.get("requested_global"),
                    "requested_batch": row.get("requested_batch"),
                    "decision": stats.get("decision"),
                }
            )
    return out


def noise_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: estimates, undetermined ones, and B_simple early and late (medians)."""
    out = []
    for name in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == name]
        last = max(r["round"] for r in mine)
        early = [r["noise_scale"] for r in mine if r["determined"] and r["round"] <= last / 3]
        late = [r["noise_scale"] for r in mine if r["determined"] and r["round"] > 2 * last / 3]
        asked_early = [
            r["requested_global"] for r in mine
            if is_number(r["requested_global"]) and r["round"] <= last / 3
        ]  # fmt: skip
        asked_late = [
            r["requested_global"] for r in mine
            if is_number(r["requested_global"]) and r["round"] > 2 * last / 3
        ]  # fmt: skip
        out.append(
            {
                "run": name,
                "estimates": len(mine),
                "undetermined": sum(not r["determined"] for r in mine),
                "b_simple_early": _median(early),
                "b_simple_late": _median(late),
                "asked_early": _median(asked_early),
                "asked_late": _median(asked_late),
                "dof": _median([r["dof"] for r in mine if is_number(r["dof"])]),
            }
        )
    return out


def _median(values: list[float]) -> float | None:
    return median(values) if values else None
