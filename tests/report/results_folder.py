"""A results folder laid out as the fixtures lay one out (config.yaml, runs/,
calibration/ and variance/ side by side): the report's request on it, and its
runs analysed as the report analyses them."""

from __future__ import annotations

from pathlib import Path

from adloco.report import ReportRequest
from adloco.report.analysis.targets import build_ladder
from adloco.report.inputs.results import load_runs
from adloco.report.settings import ReportSettings, assign_roles


def report_request(folder: Path, out: Path, **given) -> ReportRequest:
    """``adloco report``'s request on ``folder``, writing ``out``; ``given``: its other fields."""
    laid_out = {name: folder / name for name in ("runs", "calibration", "variance")}
    return ReportRequest(**{"config": folder / "config.yaml", **laid_out, "out": out, **given})


def analysed(config, runs_dir: Path, base=None, references=None):
    """(runs, roles, target ladder, report settings) of ``runs_dir``, as the report derives them."""
    runs = load_runs(runs_dir, config)
    settings = ReportSettings.from_section(config.report)
    roles = assign_roles(config.report, {r.run: r.settings for r in runs})
    return runs, roles, build_ladder(runs, roles, settings, base, references), settings
