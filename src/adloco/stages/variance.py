"""``adloco variance``: batch-gradient deviations and the noise scale (adloco.variance)."""

from __future__ import annotations

import argparse

from adloco.core import paths
from adloco.stages.common import BASE, CONFIG, EXP, PARAMS_FILE, TOKENIZED, VARIANCE, threads
from adloco.stages.declaration import Dvc, Key, Path_, Stage, arg, keys


def run(args: argparse.Namespace) -> int:
    from adloco.variance.experiment import analyse

    analyse(STAGE.request_from(args))
    return 0


def _files(*names: str) -> tuple[Path_, ...]:
    return tuple(Path_(str(VARIANCE / name)) for name in names)


STAGE = Stage(
    name="variance",
    help="analyse batch-gradient deviations and the gradient noise scale",
    description="Full gradient over a fixed sample, batch gradients, their deviations, exact "
    "per-sample tr(Sigma) and the cheap estimator the engine uses, the noise scale "
    "B_simple and the batch the norm test asks for.",
    arguments=(
        CONFIG,
        arg("--data", required=True, help="tokenized data folder"),
        arg(
            "--model",
            default=None,
            help="a saved model folder (default: the base model with --base, else the initial "
            "model)",
        ),
        arg(
            "--base",
            default=None,
            help=f"the base model folder, {paths.base_dir(EXP)} (model.source: base)",
        ),
        arg("--out", required=True, help=f"output folder, {paths.variance_dir(EXP)}"),
        arg(
            "--torch-device",
            default=None,
            help="torch device for the gradients (default: cuda if available, else cpu)",
        ),
        arg(
            "--chunk-size",
            type=int,
            default=8,
            help="sequences per forward/backward pass and per vmap chunk (memory only)",
        ),
        threads("Snakemake passes the job's"),
    ),
    run=run,
    request="adloco.variance.experiment.VarianceRequest",
    out_dirs=("out",),
    trains=True,
    keys=(
        *keys("seed", "model", "variance"),
        Key("cluster", note=("The scalar-vs-pooled comparison splits groups over the slots.",)),
        *keys("train.stats_microbatches", "train.stats_steps"),
    ),
    dvc=Dvc(
        args=(
            ("--config", PARAMS_FILE),
            ("--data", TOKENIZED),
            ("--base", BASE),
            ("--out", str(VARIANCE)),
        ),
        deps=(Path_(TOKENIZED), Path_(BASE)),
        outs=(
            *_files("variance.json", "per_batch.csv", "draws.csv"),
            Path_(
                str(VARIANCE / ".adloco-output.json"),
                note=(
                    "adloco's list of the files it wrote into the folder (adloco.core.io): the",
                    "report reads the folder, so a pulled one must hold it too.",
                ),
            ),
        ),
        plots=_files("deviations.png"),
    ),
)
