"""The report's tables: summary.csv, curves.csv, ladder.csv, regimes.csv, noise_scale.csv and,
in a tuning experiment, tuning.json, each written from the findings."""

from __future__ import annotations

from pathlib import Path

from adloco.core.io import write_json_atomic
from adloco.report.analysis.findings import Findings
from adloco.report.analysis.ladder import LADDER_COLUMNS, ladder_rows
from adloco.report.analysis.noise import NOISE_COLUMNS
from adloco.report.analysis.regime_replay import regime_rows
from adloco.report.analysis.regime_sweep import REGIME_COLUMNS
from adloco.report.analysis.summary import CURVE_COLUMNS, SUMMARY_COLUMNS, curve_rows
from adloco.report.analysis.tuning import tuning_record
from adloco.report.inputs import Inputs
from adloco.report.tables.csv import write_csv


def write_tables(out: Path, inputs: Inputs, found: Findings) -> list[dict]:
    """summary.csv, curves.csv, ladder.csv, regimes.csv, noise_scale.csv and tuning.json.

    Returns curves.csv's rows (the medians for DVC are taken from them).
    """
    settings = inputs.settings
    write_csv(out / "summary.csv", SUMMARY_COLUMNS, found.summary)
    curves = curve_rows(inputs.runs)
    write_csv(out / "curves.csv", CURVE_COLUMNS, curves)
    rows = ladder_rows(found.ladder_table, found.ladder, settings.reach_rule)
    write_csv(out / "ladder.csv", LADDER_COLUMNS, rows)
    write_csv(out / "regimes.csv", REGIME_COLUMNS, regime_rows(found.regimes))
    write_csv(out / "noise_scale.csv", NOISE_COLUMNS, found.noise)
    if settings.section.tuning_groups:
        base = inputs.base.val_perplexity if inputs.base else None
        record = tuning_record(inputs.config, inputs.runs, settings.section.tuning_groups, base)
        write_json_atomic(out / "tuning.json", record)
    return curves
