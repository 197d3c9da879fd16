"""What more than one stage declares: shared arguments, and the paths dvc.yaml names.

Paths are DVC templates built with :mod:`adloco.core.paths` (``${experiment}``,
``${data.dataset}``: values of params.yaml); ``{run}`` and ``{device}`` are the
wildcards of a stage that runs once per run or device (Snakemake's wildcards,
DVC's ``foreach``). The help texts' examples use the placeholders below.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from adloco.core import paths
from adloco.stages.declaration import Argument, arg

# Placeholders for the path examples in the help texts.
EXP, RUN, SEED, DEVICE = "<experiment>", "<run>", "<seed>", "<device>"

# The parameters file DVC reads (params.yaml, made by `adloco dvc-params`).
PARAMS_FILE = "params.yaml"
EXPERIMENT = "${experiment}"
TOKENIZED = str(paths.tokenized_dir("${data.dataset}"))
RAW = "${data.raw_dir}"
BASE = str(paths.base_dir(EXPERIMENT))
CALIBRATION = str(paths.calibration_dir(EXPERIMENT))
VARIANCE = paths.variance_dir(EXPERIMENT)
RUNS = str(paths.runs_dir(EXPERIMENT))
REPORT = paths.report_dir(EXPERIMENT)

# A stage with a persistent output is never in DVC's run cache, so its other
# folder outputs persist too at no cost: DVC then leaves a user's file there for
# the stage to refuse rather than deleting it first (docs/workflow.md, DVC).
KEPT_NOTE = (
    "Not emptied by DVC before the stage runs (a stage with a persistent output",
    "is in no run cache anyway): a file of yours there meets adloco's refusal",
    "instead (adloco dvc-check finds it first).",
)

CONFIG = arg("--config", required=True, help="configuration YAML")


def threads(passed: str) -> Argument:
    """--threads of a stage that trains: the command's own (adloco.cli, adloco.engine.process)."""
    return arg(
        "--threads",
        type=int,
        default=None,
        help=f"CPU threads for torch ({passed})",
        command_only=True,
    )


def progress(live_example: str) -> tuple[Argument, ...]:
    """What a stage that trains shows as it goes (adloco.engine.progress, .live_curves)."""
    return (
        arg(
            "--no-progress",
            action="store_false",
            dest="progress",
            help="no progress bar on a terminal: one log line per round, as in a log file",
        ),
        arg(
            "--live",
            default=None,
            metavar="DIR",
            help=f"folder for live TensorBoard curves, {live_example}; none without it",
        ),
    )


# What the report and the regime replay read first: the config, its runs, their clock.
TRAINED = (
    CONFIG,
    arg("--runs", required=True, help=f"folder of runs, {paths.runs_dir(EXP)}"),
    arg(
        "--calibration",
        required=True,
        help=f"folder of the runs' calibration JSON files, {paths.calibration_dir(EXP)}",
    ),
)


def _checked(parse: str) -> Callable[[str], str]:
    """An argparse type: the spec as given, once ``adloco.report.inputs.devices.<parse>``
    reads it, so a bad one stops at the command line, before any work."""

    def check(spec: str) -> str:
        from adloco.report.inputs import devices

        try:
            getattr(devices, parse)(spec)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return spec

    check.__name__ = parse
    return check


# The devices and networks the report and the regime replay bring beside the runs' own.
BROUGHT = (
    arg(
        "--device",
        action="append",
        dest="devices",
        metavar="CALIBRATION_JSON",
        help="a device to replay the runs on: a file `adloco calibrate` wrote on another "
        "machine (its measured curve; repeatable)",
    ),
    arg(
        "--roofline",
        action="append",
        dest="rooflines",
        type=_checked("parse_roofline"),
        metavar="NAME=SECONDS_PER_SEQUENCE,SATURATION_BATCH[,UPDATE_S]",
        help="a device given as a roofline (repeatable)",
    ),
    arg(
        "--network",
        action="append",
        dest="networks",
        type=_checked("parse_network"),
        metavar="NAME=GBIT_S,LATENCY_S",
        help="a network to replay the runs on, beside the bandwidth sweep (repeatable)",
    ),
)
