"""``adloco regimes``: the runs replayed on other devices and networks (report/regime_report.py)."""

from __future__ import annotations

import argparse

from adloco.core import paths
from adloco.stages.common import BROUGHT, EXP, TRAINED
from adloco.stages.declaration import Stage, arg


def run(args: argparse.Namespace) -> int:
    from adloco.report.regime_report import replay

    lines = replay(STAGE.request_from(args))
    # Claim 1 on each brought device and network, to the terminal.
    print("\n".join(lines))
    return 0


STAGE = Stage(
    name="regimes",
    help="replay the runs' time to target on other devices and networks, without retraining",
    description="Recompute every run's simulated time to the targets under brought devices (a "
    "calibration file from another machine, or a roofline given as numbers) and networks, "
    "the bandwidth sweep and the saturation map, and write only regimes.csv, regimes.json "
    "and their figures; print claim 1 at the main target against DiLoCo and the best "
    "baseline, in the report's words. A device file of another model, or whose curve "
    "does not cover the pass sizes the runs logged, is refused.",
    arguments=(
        *TRAINED,
        arg(
            "--base",
            default=None,
            help=f"the base model's folder, {paths.base_dir(EXP)} (default: beside --runs, when "
            "report.targets.relative_to is base)",
        ),
        arg(
            "--data",
            default=None,
            help=f"tokenized data folder, {paths.tokenized_dir('<dataset>')}",
        ),
        arg("--out", required=True, help="output folder for the regime table"),
        *BROUGHT,
    ),
    run=run,
    request="adloco.report.regime_report.ReplayRequest",
)
