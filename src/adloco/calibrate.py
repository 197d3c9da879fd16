"""Max-batch calibration.  (stub: issue 4)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--data", required=True, help="tokenized data folder (vocabulary, sequence length)")
    parser.add_argument("--device", required=True, help="device name from cluster.devices")
    parser.add_argument("--out", required=True, help="output JSON, results/calibration/<device>.json")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("adloco calibrate: not implemented yet (issue: calibration, variance, report)")
