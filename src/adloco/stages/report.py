"""``adloco report``: the HTML report, claims.json and the tables, from all runs (adloco.report)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from adloco.core import paths
from adloco.stages.common import (
    BASE,
    BROUGHT,
    CALIBRATION,
    EXP,
    EXPERIMENT,
    PARAMS_FILE,
    REPORT,
    RUNS,
    TOKENIZED,
    TRAINED,
    VARIANCE,
)
from adloco.stages.declaration import Dvc, Path_, Stage, arg, keys

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from adloco.report import build_report

    request = STAGE.request_from(args)
    build_report(request)
    log.info("wrote %s", Path(request.out) / "index.html")
    return 0


def _files(*names: str) -> tuple[Path_, ...]:
    return tuple(Path_(str(REPORT / name)) for name in names)


STAGE = Stage(
    name="report",
    help="write the HTML report and summary.csv from all runs",
    description="Read every run's metrics, the calibration and the variance results, the data's "
    "reference perplexities and the base model, and write "
    f"{paths.report_dir(EXP)}/index.html, claims.json and the tables beside it.",
    arguments=(
        *TRAINED,
        arg(
            "--variance",
            required=True,
            help=f"folder of the variance stage, {paths.variance_dir(EXP)}",
        ),
        arg(
            "--data",
            default=None,
            help=f"tokenized data folder, {paths.tokenized_dir('<dataset>')} (its manifest's "
            "reference perplexities; without it the unigram rule cannot be applied)",
        ),
        arg(
            "--base",
            default=None,
            help=f"the base model's folder, {paths.base_dir(EXP)} (required when "
            "report.targets.relative_to is base)",
        ),
        arg("--out", required=True, help=f"output folder, {paths.report_dir(EXP)}"),
        arg(
            "--compare-scale",
            default=None,
            metavar="CLAIMS_JSON",
            help="another experiment's report at another model size (its claims.json or folder, "
            "e.g. results/scale-4x/report): the first screen says whether each verdict is the "
            "same",
        ),
        *BROUGHT,
    ),
    run=run,
    request="adloco.report.ReportRequest",
    out_dirs=("out",),
    keys=keys("seeds", "runs", "report"),
    dvc=Dvc(
        args=(
            ("--config", PARAMS_FILE),
            ("--runs", RUNS),
            ("--calibration", CALIBRATION),
            ("--variance", str(VARIANCE)),
            ("--data", TOKENIZED),
            ("--base", BASE),
            ("--out", str(REPORT)),
        ),
        deps=(
            *(Path_(p) for p in (RUNS, CALIBRATION, str(VARIANCE), TOKENIZED, BASE)),
            Path_(
                "config/tuning.json",
                note=("report.tuning's record (a preset without one does not read it)",),
            ),
        ),
        outs=(
            *_files("index.html", "claims.json", "summary.csv", "curves.csv"),
            *_files("ladder.csv", "regimes.csv", "noise_scale.csv", ".adloco-output.json"),
            Path_(
                str(REPORT / "median_curves.csv"),
                note=(
                    "The curves of the top-level plots below. Like metrics.json, kept in",
                    "git (cache: false; .gitignore lets these two through), so that",
                    "`dvc exp show` and `dvc plots diff` read them at any commit.",
                ),
                cache=False,
            ),
        ),
        metrics=(
            Path_(
                str(REPORT / "metrics.json"),
                note=(
                    "Numbers only, under short keys: the main target, each headline",
                    "verdict's ratio and p, each run's median final perplexity and seeds.",
                ),
                cache=False,
            ),
        ),
        plots=tuple(
            Path_(
                str(paths.report_figures_dir(EXPERIMENT) / f"{name}.png"),
                note=(
                    "The report's figures (index.html shows them with their captions),",
                    "each file named, not the folder: DVC would empty the folder of a",
                    "user's files before the stage runs; adloco report refuses them, kept.",
                )
                if index == 0
                else (),
            )
            for index, name in enumerate(paths.REPORT_FIGURE_NAMES)
        ),
    ),
)
