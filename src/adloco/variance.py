"""Gradient-variance analysis.  (stub: issue 4)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--data", required=True, help="tokenized data folder")
    parser.add_argument("--model", default=None, help="a saved model folder (default: the initial model)")
    parser.add_argument("--out", required=True, help="output folder, results/variance")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("adloco variance: not implemented yet (issue: calibration, variance, report)")
