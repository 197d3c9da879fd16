"""Offline default corpus in C4's record format.  (stub: issue 2)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--out", required=True, help="folder for the C4-format *.json.gz files")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("adloco prepare-corpus: not implemented yet")
