"""``adloco dvc-params``: params.yaml, the file DVC reads, from one preset (adloco.dvc.params)."""

from __future__ import annotations

import argparse

from adloco.stages.declaration import Stage, arg


def run(args: argparse.Namespace) -> int:
    from adloco.dvc.params import write_params

    return write_params(STAGE.request_from(args))


STAGE = Stage(
    name="dvc-params",
    help="choose the preset `dvc repro` and `dvc exp run` use: write params.yaml from it",
    description="Write params.yaml, the file dvc.yaml reads and `dvc exp run -S` edits, as a plain "
    "copy of a preset of config/ with every default filled in, after checking the "
    "preset as every stage does. Commit it with dvc.lock. A params.yaml this command "
    "did not write is refused, never replaced.",
    arguments=(
        arg(
            "--preset",
            default="config/config.yaml",
            help="the configuration DVC runs (default: config/config.yaml)",
        ),
        arg("--out", default="params.yaml", help="the file dvc.yaml reads (default: params.yaml)"),
    ),
    run=run,
    request="adloco.dvc.params.DvcParamsRequest",
    out_files=("out",),
)
