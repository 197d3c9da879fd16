"""Tokenize C4 records into packed shards.  (stub: issue 2)"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--raw", help="folder of C4-format *.json.gz files (sources offline-wiki, local)")
    parser.add_argument("--out", required=True, help="output folder, data/tokenized/<dataset>")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("adloco tokenize: not implemented yet")
