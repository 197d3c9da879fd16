"""The ``adloco`` command: one subcommand per pipeline stage.

Snakemake rules and DVC stages call these subcommands with explicit paths, so
the workflow files only wire. The parser is built from the stages'
declarations (:mod:`adloco.stages`: help, arguments, outputs); a stage's
``run(args)`` imports its library when its subcommand runs, so ``adloco
--help`` and ``adloco <stage> --help`` import neither torch nor transformers.
Here: the logging, the numerics every stage computes with, the check that
the outputs can be written, and one line for an error instead of a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

from adloco import __version__
from adloco.config import ConfigError
from adloco.core import errors, io, numerics
from adloco.stages import STAGES
from adloco.stages.declaration import Stage


def build_parser(stages: tuple[Stage, ...] = STAGES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adloco",
        description="AdLoCo pipeline: each subcommand is one stage of the workflow.",
    )
    parser.add_argument("--version", action="version", version=f"adloco {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for stage in stages:
        stage_parser = sub.add_parser(stage.name, help=stage.help, description=stage.description)
        stage_parser.set_defaults(_stage=stage)
        stage.add_arguments(stage_parser)
    return parser


def check_outputs_writable(stage: Stage, args: argparse.Namespace) -> None:
    """Every output folder of ``stage`` can be written (:func:`adloco.core.io.check_writable`)."""
    for name in stage.out_dirs:
        io.check_writable(getattr(args, name), f"--{name}")
    for name in stage.out_files:
        io.check_writable(
            Path(getattr(args, name)).parent, f"--{name} {getattr(args, name)}: its folder"
        )


def main(argv: list[str] | None = None, stages: tuple[Stage, ...] = STAGES) -> int:
    args = build_parser(stages).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        # First, before any stage imports torch: the CPU float paths and threads
        # every stage computes with (adloco.core.numerics, docs/numerics.md).
        threads = numerics.threads_for(getattr(args, "threads", None))
        numerics.pin(threads)
        check_outputs_writable(args._stage, args)
        if args._stage.trains:
            training_process = importlib.import_module("adloco.engine.process")
            training_process.prepare(threads)
        return int(args._stage.run(args) or 0)
    except (OSError, ValueError) as exc:
        # A bad setting, corrupt input, a missing upstream output, a full disk:
        # one line (adloco.core.errors), not a traceback; -v shows it.
        message = errors.describe(exc)
        if message is None or args.verbose:
            raise
        print(f"adloco {args.stage}: error: {message}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except RecursionError:
        # A hand-made input nested thousands deep (JSON, YAML): the parser gives up.
        if args.verbose:
            raise
        print(
            f"adloco {args.stage}: error: an input file nests too deeply to read (a corrupt "
            "or hand-made JSON or YAML file); run with -v for the traceback",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: outputs are written whole or not at all, and checkpoints are kept.
        if args.verbose:
            raise
        print(
            f"adloco {args.stage}: interrupted; nothing partial was written, and the same "
            "command starts again (training resumes from its last checkpoint)",
            file=sys.stderr,
        )
        return 130
