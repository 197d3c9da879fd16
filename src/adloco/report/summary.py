"""Per-run numbers of the report: run-level perplexity, target, time to target.

Built on the rows read by :mod:`adloco.report.inputs`. The run-level perplexity
at a round is the lowest validation perplexity among that round's trainer rows
(the model a user would deploy then). The target perplexity is
``report.target_perplexity`` or, when null, the mean over seeds of DiLoCo's
final perplexity; a run reaches it at the first round whose run-level
perplexity is at or below it. ``summary.csv`` has one row per run and seed.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from adloco.io import write_text_atomic
from adloco.records import SUMMARY_KEYS, finite_or_none
from adloco.report.inputs import RunSeed

SUMMARY_COLUMNS = (
    "run",
    "seed",
    "method",
    *SUMMARY_KEYS,
    "target_perplexity",
    "round_to_target",
    "tokens_to_target",
    "communications_to_target",
    "sim_time_s_to_target",
)

# Settings that can tell an ablation from the full AdLoCo run.
ABLATION_KEYS = ("batch_test", "merge", "switch")


@dataclass
class Roles:
    """Which configured run plays which part in the comparisons."""

    diloco: str | None
    adloco: str | None
    ablations: list[str]
    ablation_labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Target:
    value: float | None
    source: str  # "config", "diloco" or "none"
    note: str


def round_values(rows: list[dict[str, Any]], key: str) -> dict[int, float]:
    """Per round, the largest value of a cumulative field among the round's rows."""
    out: dict[int, float] = {}
    for r in rows:
        value = r.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[r["round"]] = max(out.get(r["round"], value), value)
    return out


def run_level_perplexity(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Round -> lowest validation perplexity among the round's rows (evaluated rounds only)."""
    out: dict[int, float] = {}
    for r in rows:
        ppl = finite_or_none(r.get("val_perplexity"))
        if ppl is not None:
            out[r["round"]] = min(out.get(r["round"], ppl), ppl)
    return dict(sorted(out.items()))


def time_to_target(rows: list[dict[str, Any]], target: float | None) -> dict[str, Any] | None:
    """Round, tokens, communications and simulated time when the run first reaches target."""
    if target is None:
        return None
    for round_, ppl in run_level_perplexity(rows).items():
        if ppl <= target:
            return {
                "round": round_,
                "tokens": round_values(rows, "tokens_total")[round_],
                "communications": round_values(rows, "communications")[round_],
                "sim_time_s": round_values(rows, "sim_time_s")[round_],
            }
    return None


def assign_roles(config: dict, runs: list[RunSeed]) -> Roles:
    """DiLoCo baseline, full AdLoCo run and its ablations, from the configured runs.

    The baseline is the run named ``diloco`` or else the first run of method
    diloco. Full AdLoCo is the run named ``adloco``, else the first adloco run
    with a batch test, merging and the switch policy all on; every other
    adloco run is an ablation, labelled by the settings it changes.
    """
    settings = {r.run: r.settings for r in runs}
    names = list(dict.fromkeys(r.run for r in runs))
    by_method: dict[str, list[str]] = {}
    for name in names:
        by_method.setdefault(settings[name]["method"], []).append(name)

    def pick(method: str, full: Any = None) -> str | None:
        candidates = by_method.get(method, [])
        if method in candidates:
            return method
        if full is not None:
            for name in candidates:
                if full(settings[name]):
                    return name
        return candidates[0] if candidates else None

    diloco = pick("diloco")
    adloco = pick(
        "adloco",
        lambda s: s["batch_test"] != "none" and s["merge"] != "none" and s["switch"] == "switch",
    )
    ablations = [n for n in by_method.get("adloco", []) if n != adloco]
    labels = {}
    for name in ablations:
        diffs = [
            f"{k}={settings[name].get(k)}"
            for k in sorted(settings[name])
            if k != "name" and settings[name].get(k) != settings[adloco].get(k)
        ]
        labels[name] = ", ".join(diffs) if diffs else "same settings as the full run"
    return Roles(diloco, adloco, ablations, labels)


def resolve_target(config: dict, runs: list[RunSeed], roles: Roles) -> Target:
    configured = config.get("report", {}).get("target_perplexity")
    if configured is not None:
        return Target(float(configured), "config", "report.target_perplexity")
    if roles.diloco is None:
        return Target(
            None,
            "none",
            "no target: report.target_perplexity is null and no diloco run is configured",
        )
    finals = [
        finite_or_none(r.summary.get("final_val_perplexity")) for r in runs if r.run == roles.diloco
    ]
    if any(f is None for f in finals):
        return Target(None, "none", f"no target: run {roles.diloco} has no final perplexity")
    seeds = len(finals)
    return Target(
        fmean(finals),
        "diloco",
        f"final validation perplexity of {roles.diloco}"
        + (f", mean over {seeds} seeds" if seeds > 1 else ""),
    )


def summary_rows(runs: list[RunSeed], target: Target) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        reached = time_to_target(r.rows, target.value)
        row = {"run": r.run, "seed": r.seed, "method": r.method}
        row.update({k: r.summary.get(k) for k in SUMMARY_COLUMNS if k in r.summary})
        row["target_perplexity"] = target.value
        row["round_to_target"] = reached["round"] if reached else None
        row["tokens_to_target"] = reached["tokens"] if reached else None
        row["communications_to_target"] = reached["communications"] if reached else None
        row["sim_time_s_to_target"] = reached["sim_time_s"] if reached else None
        out.append({k: row.get(k) for k in SUMMARY_COLUMNS})
    return out


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


CURVE_COLUMNS = [
    "run",
    "seed",
    "method",
    "round",
    "tokens_total",
    "communications",
    "sim_time_s",
    "val_perplexity",
]


def curve_rows(runs: list[RunSeed]) -> list[dict[str, Any]]:
    """Run-level validation perplexity at every evaluated round, with the x axes of the figures."""
    out = []
    for rs in runs:
        tokens = round_values(rs.rows, "tokens_total")
        comms = round_values(rs.rows, "communications")
        clock = round_values(rs.rows, "sim_time_s")
        for round_, ppl in run_level_perplexity(rs.rows).items():
            out.append(
                {
                    "run": rs.run,
                    "seed": rs.seed,
                    "method": rs.method,
                    "round": round_,
                    "tokens_total": tokens.get(round_),
                    "communications": comms.get(round_),
                    "sim_time_s": clock.get(round_),
                    "val_perplexity": ppl,
                }
            )
    return out


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(k)) for k in columns])
    write_text_atomic(path, buffer.getvalue())


def write_summary_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    write_csv(path, SUMMARY_COLUMNS, rows)
