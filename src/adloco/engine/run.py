"""`adloco train`.  (stub: issue 3)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--run", required=True, help="run name from `runs`")
    parser.add_argument("--seed", type=int, required=True, help="training seed")
    parser.add_argument("--data", required=True, help="tokenized data folder")
    parser.add_argument("--calibration", required=True, help="folder of calibration JSON files")
    parser.add_argument("--out", required=True, help="run folder, results/runs/<run>/seed<seed>")
    parser.add_argument("--checkpoints", required=True, help="checkpoint folder (kept when a job fails)")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("adloco train: not implemented yet (issue: training engine)")
