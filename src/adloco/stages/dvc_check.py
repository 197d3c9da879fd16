"""``adloco dvc-check``: what DVC would delete, refused before DVC runs (adloco.dvc.check)."""

from __future__ import annotations

import argparse
import logging

from adloco.stages.declaration import Stage, arg

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from adloco.config import load_config
    from adloco.core.io import ForeignFolderError
    from adloco.dvc.check import ADVICE, foreign_files, unsaved_edits

    config_file: str = args.config
    problems = foreign_files(load_config(config_file))
    if args.apply:
        unsaved = unsaved_edits()
        if unsaved:
            problems.append(
                f"{len(unsaved)} file(s) git tracks hold uncommitted edits no experiment holds "
                f"({', '.join(unsaved)}), which dvc exp apply replaces with the experiment's: "
                "commit them first, or use dvc exp branch"
            )
    if problems:
        raise ForeignFolderError(
            f"{len(problems)} problem(s) before DVC runs: {'; '.join(problems)}; {ADVICE}"
        )
    log.info("no output folder of %s's stages holds files adloco did not write", config_file)
    return 0


STAGE = Stage(
    name="dvc-check",
    help="refuse, before DVC runs, files of yours that DVC would delete from output folders",
    description="Check every output folder of params.yaml's stages as the stage itself does "
    "before it replaces one (each file listed in adloco's manifest there) and refuse, naming "
    "the files, where one holds anything else: dvc repro, dvc exp run, dvc exp apply "
    "and dvc checkout delete such files before any stage runs. Run it first.",
    arguments=(
        arg(
            "--config",
            default="params.yaml",
            help="the file dvc.yaml reads (default: params.yaml)",
        ),
        arg(
            "--apply",
            action="store_true",
            help="also refuse uncommitted edits of files git tracks that no experiment holds "
            "(before `dvc exp apply`, which replaces them)",
        ),
    ),
    run=run,
)
