"""Report.  (stub: issue 4)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--runs", required=True, help="folder of runs, results/runs")
    parser.add_argument("--calibration", required=True, help="folder of calibration JSON files")
    parser.add_argument("--variance", required=True, help="folder of the variance stage")
    parser.add_argument("--out", required=True, help="output folder, results/report")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("adloco report: not implemented yet (issue: calibration, variance, report)")
