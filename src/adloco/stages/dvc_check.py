"""``adloco dvc-check``: what DVC would delete, refused before DVC runs (adloco.dvc.check)."""

from __future__ import annotations

import argparse

from adloco.stages.declaration import Stage, arg


def run(args: argparse.Namespace) -> int:
    from adloco.dvc.check import check_before_dvc

    return check_before_dvc(STAGE.request_from(args))


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
    request="adloco.dvc.check.DvcCheckRequest",
)
