"""``adloco dvc-params``: params.yaml, the file DVC reads, from one preset (adloco.dvc.params)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from adloco.stages.declaration import Stage, arg

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from adloco.config import check_dvc_raw_dir, load_config
    from adloco.core.io import write_text_atomic
    from adloco.dvc.params import check_replaceable, params_text, target

    preset: str = args.preset
    given = Path(args.out)
    text = params_text(preset)  # a bad preset fails before anything is written
    # A raw_dir DVC cannot keep fails here, not at dvc repro with DVC's reasonless error.
    check_dvc_raw_dir(load_config(preset), str(given.resolve().parent))
    # A link stays a link: the file it names is replaced, if this command wrote it.
    out = target(given)
    check_replaceable(out, given)
    write_text_atomic(out, text)
    log.info("wrote %s from %s: dvc.yaml's stages are now that preset's", given, preset)
    return 0


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
    out_files=("out",),
)
