"""The report's inputs, read and checked: the runs, calibration and variance results, the data's
reference perplexities, the base model and devices brought from elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adloco.config import Config
from adloco.report.inputs.references import Base, References
from adloco.report.inputs.results import Calibration, RunSeed, Variance
from adloco.report.settings import ReportSettings


@dataclass
class Inputs:
    """What the report reads: the configuration and every results folder."""

    config_path: str
    config: Config
    settings: ReportSettings
    calibration_dir: Path
    runs: list[RunSeed]
    calibrations: list[Calibration]
    variance: Variance
    references: References
    base: Base | None
    tuning: dict[str, Any] | None
