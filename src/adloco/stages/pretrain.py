"""``adloco pretrain``: the experiment's base model (adloco.model.pretrain)."""

from __future__ import annotations

import argparse

from adloco.core import paths
from adloco.stages.common import (
    BASE,
    CONFIG,
    EXP,
    EXPERIMENT,
    KEPT_NOTE,
    PARAMS_FILE,
    TOKENIZED,
    progress,
    threads,
)
from adloco.stages.declaration import Dvc, Path_, Stage, arg, keys


def run(args: argparse.Namespace) -> int:
    from adloco.model.pretrain import pretrain_base

    pretrain_base(STAGE.request_from(args))
    return 0


STAGE = Stage(
    name="pretrain",
    help="train the experiment's base model that every run starts from",
    description="A plain AdamW loop on the base split of the tokenized data (documents the runs "
    "never see), with the pretrain section's token budget and schedule, resumable from "
    f"its checkpoints; writes {paths.base_dir(EXP)}/model (save_pretrained), "
    "metrics.jsonl and base.json (perplexity, sha256 of every model file).",
    arguments=(
        CONFIG,
        arg("--data", required=True, help="tokenized data folder (with a base split)"),
        arg("--out", required=True, help=f"output folder, {paths.base_dir(EXP)}"),
        arg(
            "--checkpoints",
            required=True,
            help=f"checkpoint folder, kept when a job fails: {paths.base_checkpoint_dir(EXP)}",
        ),
        *progress(str(paths.base_live_dir(EXP))),
        threads("Snakemake passes the job's"),
    ),
    run=run,
    request="adloco.model.pretrain.PretrainRequest",
    trains=True,
    keys=keys("seed", "model", "pretrain", "train.eval_sequences", "train.eval_batch"),
    dvc=Dvc(
        args=(
            ("--config", PARAMS_FILE),
            ("--data", TOKENIZED),
            ("--out", BASE),
            ("--checkpoints", str(paths.base_checkpoint_dir(EXPERIMENT))),
            ("--live", str(paths.base_live_dir(EXPERIMENT))),
        ),
        deps=(Path_(TOKENIZED),),
        outs=(
            Path_(BASE, note=KEPT_NOTE, persist=True),
            Path_(
                str(paths.base_checkpoint_dir(EXPERIMENT)),
                note=("Kept when the stage re-runs, so that pretraining resumes.",),
                persist=True,
            ),
        ),
    ),
)
