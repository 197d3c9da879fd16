"""The report's two small files made for DVC's commands: ``metrics.json`` and ``median_curves.csv``.

``dvc metrics show`` and ``dvc exp show`` print each number of a metrics file
as a column, so ``metrics.json`` holds numbers only, under short keys, two
levels deep: the main target, each headline comparison's effect (the median
paired ratio, AdLoCo over the other run, and the exact test's one-sided p that
AdLoCo needs less), and per run the median final validation perplexity over
its seeds and the number of seeds. A value that does not exist is left out
(DVC shows ``-``): a comparison that cannot be tested, an infinite ratio (AdLoCo
does not reach the target in most seeds). ``median_curves.csv`` is one line
per run for ``dvc plots``: at each evaluated round, the medians over the run's
seeds of the tokens, the simulated time and the validation perplexity.
claims.json and curves.csv hold everything behind these numbers
(:mod:`adloco.report`, docs/report.md).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from adloco.core.io import write_json_atomic
from adloco.formats.metrics import is_number
from adloco.report.analysis.claims import NOT_TESTABLE, Claim, Comparison
from adloco.report.analysis.seed_stats import median
from adloco.report.tables.csv import write_csv

METRICS_FILE = "metrics.json"
MEDIAN_CURVES_FILE = "median_curves.csv"
MEDIAN_CURVE_COLUMNS = ("run", "round", "seeds", "tokens_total", "sim_time_s", "val_perplexity")
# The metrics key of each to-target claim's headline comparison (claims.py's numbers).
CLAIM_KEYS = {1: "time", 2: "comms"}


def number(value: Any) -> float | None:
    """``value`` when it is a finite number, else None (left out of metrics.json)."""
    if not is_number(value) or not math.isfinite(value):
        return None
    return value


def effect_numbers(comparison: Comparison) -> dict[str, float]:
    """The ratio and p of a comparison that could be tested; {} otherwise."""
    effect = comparison.effect
    if effect is None or comparison.verdict == NOT_TESTABLE:
        return {}
    values = {"ratio": number(effect.estimate), "p": number(effect.test.p_less)}
    return {key: value for key, value in values.items() if value is not None}


def verdict_numbers(claims: list[Claim]) -> dict[str, Any]:
    """Each headline comparison's numbers: ``time`` and ``comms`` against DiLoCo,
    ``time_best`` and ``comms_best`` against the best baseline at the same target,
    ``ablation.<run>`` for each ablation."""
    out: dict[str, Any] = {}
    for claim in claims:
        heads = claim.headline
        if claim.number in CLAIM_KEYS and heads:
            key, head = CLAIM_KEYS[claim.number], heads[0]
            out[key] = effect_numbers(head)
            best = [
                c
                for c in claim.comparisons
                if c.against == "best baseline"
                and (c.quantity, c.target) == (head.quantity, head.target)
            ]
            if best:
                out[f"{key}_best"] = effect_numbers(best[0])
        elif heads:
            out["ablation"] = {c.against: effect_numbers(c) for c in heads}
    # A column DVC would show empty is left out as a whole.
    out["ablation"] = {k: v for k, v in out.get("ablation", {}).items() if v}
    return {key: value for key, value in out.items() if value}


def run_numbers(summary: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """``ppl``: each run's median final validation perplexity over its seeds; ``seeds``."""
    finals: dict[str, list[float]] = {}
    for row in summary:
        value = number(row.get("final_val_perplexity"))
        finals.setdefault(row["run"], [])
        if value is not None:
            finals[row["run"]].append(value)
    ppl = {run: number(median(values)) for run, values in finals.items()}
    return {
        "ppl": {run: value for run, value in ppl.items() if value is not None},
        "seeds": {run: len(values) for run, values in finals.items()},
    }


def metrics_document(
    summary: list[dict[str, Any]], claims: list[Claim], target: float | None
) -> dict[str, Any]:
    """metrics.json: the main target, the headline verdicts' numbers, the per-run numbers."""
    doc: dict[str, Any] = {}
    if number(target) is not None:
        doc["target"] = target
    return {**doc, **verdict_numbers(claims), **run_numbers(summary)}


def median_curve_rows(curves: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run and evaluated round, the medians over seeds of curves.csv's rows."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in curves:
        groups.setdefault((row["run"], row["round"]), []).append(row)
    out = []
    for (run, round_), rows in groups.items():
        line: dict[str, Any] = {"run": run, "round": round_, "seeds": len(rows)}
        for key in MEDIAN_CURVE_COLUMNS[3:]:
            values = [v for v in (number(r.get(key)) for r in rows) if v is not None]
            line[key] = median(values) if values else None
        out.append(line)
    return out


def write_dvc_files(
    out: Path,
    summary: list[dict[str, Any]],
    claims: list[Claim],
    target: float | None,
    curves: list[dict[str, Any]],
) -> None:
    """metrics.json and median_curves.csv into the report folder ``out``."""
    write_json_atomic(out / METRICS_FILE, metrics_document(summary, claims, target))
    write_csv(out / MEDIAN_CURVES_FILE, MEDIAN_CURVE_COLUMNS, median_curve_rows(curves))
