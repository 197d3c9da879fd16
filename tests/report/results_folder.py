"""The report's request on a results folder laid out as the fixtures lay one out:
config.yaml, runs/, calibration/ and variance/ side by side."""

from __future__ import annotations

from pathlib import Path

from adloco.report import ReportRequest


def report_request(folder: Path, out: Path, **given) -> ReportRequest:
    """``adloco report``'s request on ``folder``, writing ``out``; ``given``: its other fields."""
    laid_out = {name: folder / name for name in ("runs", "calibration", "variance")}
    return ReportRequest(**{"config": folder / "config.yaml", **laid_out, "out": out, **given})
